"""``--drafter auto`` as a generator: one engine per candidate drafter, and a chooser that hands each
batch to one of them (``drafters.auto``: which candidates, how the choice is made).

The engines share the verifier (its lean encoder and decoder step, built once); each keeps its own
width policy, which carries what it learns into its next batches, and all count into one
``stats`` (the same keys as one engine's, plus ``drafter_choice``).  Each batch is timed as a whole
(the decode ends in a host read, so on a GPU the time is the device's too; on a CPU the process's
CPU time, ``iteration_cost.device_clock``)."""
from typing import Callable, Dict, Optional

from fairseq_plugins.decoding.draft_stats import CountingGenerator, fresh_stats
from fairseq_plugins.decoding.drafters.auto import AutoDrafter, DrafterChoice
from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.iteration_cost import device_clock


class AutoGenerator(CountingGenerator):
    def __init__(self, drafter: AutoDrafter, engine: Callable):
        """``engine(drafter, verifier)``: an engine for one candidate (``verifier`` None: its own)."""
        self.drafter = drafter
        first = engine(drafter.candidates["none"])  # 'none' is always a candidate (the fallback)
        self.engines = {name: first if name == "none" else engine(d, first.verifier)
                        for name, d in drafter.candidates.items()}
        self.verifier = first.verifier
        self.acceptance = first.acceptance
        self.choice = DrafterChoice(list(drafter.candidates))
        self.reset_stats()

    @property
    def policies(self):
        """Each candidate's width policy."""
        return {name: e.policy for name, e in self.engines.items()}

    def _set_all(self, name: str, value: Optional[bool]):
        for e in self.engines.values():
            setattr(e, name, value)

    # the engine's switches (``DraftVerifyGenerator``), for every candidate at once
    lazy_verify = property(lambda self: self.engines["none"].lazy_verify,
                           lambda self, v: self._set_all("lazy_verify", v))
    host_reads = property(lambda self: self.engines["none"].host_reads, lambda self, v: self._set_all("host_reads", v))

    def reset_stats(self):
        self.stats: Dict = fresh_stats(self.drafter.name, self.acceptance.name)
        for e in self.engines.values():
            e.stats = self.stats  # every candidate counts into the one dict

    @inference_generate
    def generate(self, models, sample, prefix_tokens=None, constraints=None, **kwargs):
        src_tokens = sample["net_input"]["src_tokens"]
        name = self.choice.next(src_tokens.size(1))  # this batch's candidate, timed as a whole
        clock = device_clock(src_tokens.device)
        start = clock()
        finalized = self.engines[name].generate_batch(sample, prefix_tokens, constraints, **kwargs)
        self.choice.record(name, clock() - start, sum(len(h[0]["tokens"]) for h in finalized))
        choosing = "choosing" if self.choice.last is None else f"{self.choice.last}, trying again on longer sources"
        self.stats["drafter"] = f"auto ({self.choice.chosen or choosing})"
        self.stats["drafter_choice"] = self.choice.summary()
        return finalized
