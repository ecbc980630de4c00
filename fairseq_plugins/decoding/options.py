"""The generation options of one run, read once from fairseq's arguments (docs/ARCHITECTURE.md).

:meth:`GenerationOptions.from_args` checks them against the chosen generator's table
(``generation_options``: honoured, refused with a message, or a fallback whose reason the object
keeps), validates their values once, and holds them typed, with fairseq's defaults.  Every generator
is built from one (``GenerationOptions(beam=4, ...)`` in code and tests); the logits processors
(``logits_processors``), the search strategy (``search``) and the hypotheses (``hypotheses``) are
made from it.  :meth:`GenerationOptions.max_len` is fairseq's maximum length, here and nowhere else.
"""
from dataclasses import dataclass
from typing import Optional

from fairseq_plugins.decoding.generation_options import GenerationOptionError, check, option


@dataclass(frozen=True)
class GenerationOptions:
    """What the plugin's generators honour, with fairseq's defaults (``GenerationConfig``)."""

    beam: int = 5
    max_len_a: float = 0.0
    max_len_b: int = 200
    min_len: int = 1
    unk_penalty: float = 0.0          # --unkpen
    len_penalty: float = 1.0          # --lenpen
    normalize_scores: bool = True     # not --unnormalized
    temperature: float = 1.0
    no_repeat_ngram_size: int = 0
    fallback: Optional[str] = None    # "--option (what the generator lacks)": fairseq's generator decodes instead

    def __post_init__(self):
        if not self.temperature > 0:
            raise GenerationOptionError(f"--temperature must be greater than 0 (got {self.temperature}); "
                                        "give a positive value (1 leaves the logits as they are)")

    @classmethod
    def from_args(cls, args, generator: str, error=GenerationOptionError) -> "GenerationOptions":
        """fairseq-generate's config (or a Namespace holding some of its fields) for ``generator``
        (``generation_options.GENERATORS``): a refused option raises ``error`` with its message."""
        fallback = check(generator, args, error)
        try:
            return cls(beam=int(option(args, "beam")), max_len_a=float(option(args, "max_len_a")),
                       max_len_b=int(option(args, "max_len_b")), min_len=int(option(args, "min_len")),
                       unk_penalty=float(option(args, "unkpen")), len_penalty=float(option(args, "lenpen")),
                       normalize_scores=not option(args, "unnormalized"),
                       temperature=float(option(args, "temperature")),
                       no_repeat_ngram_size=int(option(args, "no_repeat_ngram_size")), fallback=fallback)
        except GenerationOptionError as err:
            raise error(str(err)) from None

    def max_len(self, src_len: int, max_positions: int) -> int:
        """fairseq's maximum target length (``SequenceGenerator._generate``): ``min(int(max_len_a *
        src_len + max_len_b), max_positions - 1)``; ``src_len`` the batch's (padded) source length,
        ``max_positions`` the model's decoder positions.  Refuses a ``--min-len`` above it."""
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), max_positions - 1)
        if self.min_len > max_len:
            raise GenerationOptionError(f"--min-len {self.min_len} exceeds the maximum length {max_len}; "
                                        "lower --min-len or raise --max-len-a/--max-len-b")
        return max_len
