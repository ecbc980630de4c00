"""What each of the plugin's generators does with every fairseq generation option
(``fairseq.dataclass.configs.GenerationConfig``): it is *honoured* (as fairseq's own generator
honours it), *refused* with a message that says what to change, or the run *falls back* to fairseq's
generator with one log line naming it.  None is ignored.  One table per generator, here and nowhere
else; ``tests/test_generation_options.py`` walks fairseq's fields, so an option a new fairseq adds
fails it until it is classified.

The generators: ``engine`` (``--drafter``: the draft-and-verify engine, greedy), ``lean_beam`` (a
left-to-right model without ``--drafter``) and ``multi_token_beam`` (a checkpoint trained in another
order).  A fallback of the lean beam search is fairseq's ``SequenceGenerator`` with the same options;
the engine falls back only for what is not a search (``--score-reference``) or what fairseq's greedy
gives with the tokens ``--acceptance exact`` gives (``--print-alignment``).

Options fairseq reads only in other tasks' generators (iterative refinement, speech-to-speech) are
refused when set: with ``--task fast_translation`` they would change nothing.
"""
import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, Optional

from fairseq.dataclass.configs import GenerationConfig

from fairseq_plugins.errors import PluginError

HONOURED, REFUSED, FALLBACK = "honoured", "refused", "fallback"
GENERATORS = ("engine", "lean_beam", "multi_token_beam")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GenerationConfig) if not f.name.startswith("_")}


class GenerationOptionError(PluginError, ValueError):
    """A generation option the chosen generator cannot honour; the message says what to change."""


def option(args, name):
    """``args.name`` (fairseq-generate's config, or the Namespace of ``--eval-bleu-args``, which holds
    only what was given), None read as fairseq's default."""
    value = getattr(args, name, None)
    return _DEFAULTS.get(name) if value is None else value


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _set(name):
    """The option differs from fairseq's default."""
    return lambda args: option(args, name) != _DEFAULTS[name]


def _without(name, needs):
    """The option is set, but the option it belongs to is not."""
    return lambda args: _set(name)(args) and not _set(needs)(args)


@dataclass(frozen=True)
class Rule:
    kind: str  # HONOURED, REFUSED or FALLBACK
    why: str   # honoured: how; refused: the message; fallback: what the generator lacks (the log line)
    given: Optional[Callable] = None  # refused/fallback: when it applies (None: set to other than fairseq's default)

    def applies(self, name, args) -> bool:
        return self.kind != HONOURED and (self.given or _set(name))(args)


def honoured(why):
    return Rule(HONOURED, why)


def refused(why, given=None):
    return Rule(REFUSED, why, given)


def fallback(why, given=None):
    return Rule(FALLBACK, why, given)


# ---- what every generator shares ----

_AROUND = {  # options fairseq-generate applies around any generator
    "nbest": honoured("fairseq-generate prints the first --nbest hypotheses (a greedy search has one, as fairseq's "
                      "beam 1)"),
    "replace_unk": honoured("fairseq-generate's post-processing, with the hypothesis's alignment as fairseq's generator "
                            "gives it"),
    "sacrebleu": honoured("fairseq-generate's scorer"),
    "no_seed_provided": honoured("fairseq-generate's seeding"),
    "no_early_stop": honoured("deprecated in fairseq: no effect on its generator either"),
    "no_beamable_mm": honoured("BeamableMM is in fairseq's convolutional models only; on the transformers the lean "
                               "step runs it changes nothing in fairseq either"),
}


def _other_task(what):
    return refused(f"{{flag}} applies to {what}, not to --task fast_translation's generators; drop it")


_OTHER_TASKS = {
    **{n: _other_task("speech-to-speech's first-pass decoder")
       for n in ("beam_mt", "max_len_a_mt", "max_len_b_mt", "lenpen_mt")},
    **{n: _other_task("iterative refinement (--task translation_lev)")
       for n in ("iter_decode_eos_penalty", "iter_decode_max_iter", "iter_decode_force_max_iter",
                 "iter_decode_with_beam", "iter_decode_with_external_reranker", "retain_iter_history",
                 "decoding_format")},
    "print_step": _other_task("iterative refinement's steps (--task translation_lev; fairseq-generate would fail "
                              "on the hypotheses' missing 'steps')"),
    "eos_token": _other_task("speech generation tasks"),
}

_LENGTH_AND_SCORE = {
    "max_len_a": honoured("fairseq's max length, min(a * source length + b, the model's positions - 1)"),
    "max_len_b": honoured("fairseq's max length, min(a * source length + b, the model's positions - 1)"),
    "min_len": honoured("no EOS before --min-len, as fairseq"),
    "unkpen": honoured("subtracted from UNK's log-prob, as fairseq"),
    "lenpen": honoured("score / length ** lenpen, as fairseq"),
}


_BELONGS_TO = {"sampling_topk": "sampling", "sampling_topp": "sampling", "diverse_beam_strength": "diverse_beam_groups",
               "lm_weight": "lm_path", "retain_dropout_modules": "retain_dropout"}


def _dependents(refusal: Optional[Rule] = None):
    """Options that only qualify another (fairseq asserts or ignores them alone): alone they are
    refused; with the option they qualify, that option's rule applies.  ``refusal``: the generator
    refuses those options, and so these, whenever set."""
    if refusal is not None:
        return dict.fromkeys(_BELONGS_TO, refusal)
    return {name: refused(f"{{flag}} applies with {flag(owner)} only; add {flag(owner)} or drop {{flag}}",
                          _without(name, owner)) for name, owner in _BELONGS_TO.items()}


_DIVERSE_GROUPS = lambda a: option(a, "diverse_beam_groups") > 0  # noqa: E731  (fairseq's own tests)
_DIVERSITY_RATE = lambda a: option(a, "diversity_rate") > -1  # noqa: E731


def _drafter_refuses(what="", given=None):
    return refused("--drafter does not support {flag}" + what + "; drop one of them", given)


def _reordered_refuses(what="", given=None):
    return refused("the multi-token beam search (a checkpoint trained with --target-order) does not support {flag}"
                   + what + "; drop it", given)


TABLES: Dict[str, Dict[str, Rule]] = {
    "engine": {
        **_AROUND, **_OTHER_TASKS, **_LENGTH_AND_SCORE, **_dependents(_drafter_refuses()),
        "beam": refused("--drafter decodes greedily and needs --beam 1 (got {value}); drop --drafter for beam search",
                        lambda a: option(a, "beam") != 1),
        "unnormalized": honoured("the score not divided by the length, as fairseq"),
        "temperature": honoured("logits divided by --temperature, as fairseq"),
        "match_source_len": _drafter_refuses(),
        "prefix_size": _drafter_refuses(),
        "no_repeat_ngram_size": _drafter_refuses(),
        "sampling": _drafter_refuses(),
        "constraints": _drafter_refuses(),
        "diverse_beam_groups": _drafter_refuses(" (diverse beam search)", _DIVERSE_GROUPS),
        "diversity_rate": _drafter_refuses(" (diverse siblings search)", _DIVERSITY_RATE),
        "lm_path": _drafter_refuses(" (language-model fusion)"),
        "retain_dropout": refused("--drafter verifies drafts against the model's deterministic output and does not "
                                  "support {flag}; drop --drafter for fairseq's generator with dropout, or drop {flag}"),
        "score_reference": fallback("scoring the references, not a search: fairseq's SequenceScorer scores them"),
        "print_alignment": fallback("alignments: fairseq's greedy generator (--beam 1) with alignments gives them, "
                                    "and the tokens --acceptance exact gives"),
    },
    "lean_beam": {
        **_AROUND, **_OTHER_TASKS, **_LENGTH_AND_SCORE, **_dependents(),
        "beam": honoured("capped at the vocabulary size - 1, as fairseq"),
        "unnormalized": honoured("the score not divided by the length, as fairseq"),
        "temperature": honoured("logits divided by --temperature, as fairseq"),
        "no_repeat_ngram_size": honoured("the n-grams of each hypothesis blocked, as fairseq's CUDA kernel"),
        "sampling": fallback("sampling"),
        "diverse_beam_groups": fallback("diverse beam search", _DIVERSE_GROUPS),
        "diversity_rate": fallback("diverse siblings search", _DIVERSITY_RATE),
        "match_source_len": fallback("length-constrained search"),
        "constraints": fallback("lexically constrained search"),
        "prefix_size": fallback("prefix tokens", lambda a: option(a, "prefix_size") > 0),
        "print_alignment": fallback("alignments"),
        "score_reference": fallback("scoring references (not a search)"),
        "lm_path": fallback("language-model fusion"),
        "retain_dropout": fallback("dropout at inference"),
    },
    "multi_token_beam": {
        **_AROUND, **_OTHER_TASKS, **_LENGTH_AND_SCORE, **_dependents(_reordered_refuses()),
        "beam": honoured("capped at the vocabulary size - 1, as fairseq"),
        "unnormalized": honoured("the score not divided by the length, as fairseq"),
        "temperature": honoured("logits divided by --temperature, as fairseq"),
        "no_repeat_ngram_size": _reordered_refuses(" (its groups are not written left to right)"),
        "sampling": _reordered_refuses(),
        "diverse_beam_groups": _reordered_refuses(" (diverse beam search)", _DIVERSE_GROUPS),
        "diversity_rate": _reordered_refuses(" (diverse siblings search)", _DIVERSITY_RATE),
        "match_source_len": _reordered_refuses(),
        "constraints": _reordered_refuses(" (a constraint is not a prefix of a reordered target)"),
        "prefix_size": _reordered_refuses(" (a prefix is not a prefix of a reordered target)"),
        "print_alignment": _reordered_refuses(" (no alignments)"),
        "score_reference": _reordered_refuses(" (fairseq's scorer feeds the natural-order reference)"),
        "lm_path": _reordered_refuses(" (language-model fusion)"),
        "retain_dropout": _reordered_refuses(" (the lean step has no dropout)"),
    },
}


def check(generator: str, args, error=GenerationOptionError) -> Optional[str]:
    """Raise ``error`` (a :class:`GenerationOptionError`) for the first option ``args`` sets that
    ``generator`` refuses; else the first fallback's reason (``"--option (what the generator
    lacks)"``), or None."""
    table = TABLES[generator]
    reason = None
    for name, rule in table.items():
        if not rule.applies(name, args):
            continue
        if rule.kind == REFUSED:
            raise error(rule.why.format(flag=flag(name), value=f"{flag(name)} {option(args, name)}"))
        if reason is None:
            reason = f"{flag(name)} ({rule.why})"
    return reason
