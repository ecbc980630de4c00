"""How many beam steps ONE verification call could replay, if each live hypothesis carried a draft
(issue 51, item 2: measured before drafting under beam search is built).

**The beam.**  The lean beam search (fairseq's beam search, token for token), instrumented:
:class:`RecordedBeamSearch` decodes one sentence at a time (batch 1: the count is per sentence) and
records every step's survivors (the row each kept hypothesis continues and its token) and every live
hypothesis's argmax (:class:`BeamTrace`).  The recording changes nothing in the search.

**The count** (:func:`replay_calls`).  A sentence's beam search takes steps ``0 .. S-1``; step ``s``
scores the next token of every live hypothesis (``s`` tokens after the start symbol) and the
sentence leaves at step ``S-1`` (``beam`` finalised hypotheses, or ``max_len``).  A call at step
``c`` gives every live hypothesis ``h`` a draft ``d_h`` of at most ``k`` tokens and computes ``h``'s
next-token scores after each of ``h``, ``h + d_h[:1]``, ..., ``h + d_h`` (``|d_h| + 1`` positions).
Each live hypothesis starts a chain at depth 0.  From ``s = c``: step ``s`` is replayed on the
call's scores (it is *covered* by the call); then each survivor of step ``s``, continuing a
hypothesis at chain ``h``, depth ``j``, *extends its parent along its draft* when ``j < |d_h|`` and
its token is ``d_h[j]``: it is then at chain ``h``, depth ``j + 1``, whose scores the call computed.
When every survivor does, step ``s + 1`` is covered by the same call; when one does not, step ``s``
(where the parent's scores were computed) is the call's last and the next call is at step ``s + 1``.
The sentence's last step ends its last call.  Finalised hypotheses (EOS) leave the beam as in
fairseq and need no further scores.  Then::

    steps per call = (sum of S over the sentences) / (sum of their calls)

At most ``k + 1`` steps per call; drafts that are always wrong (or empty) give exactly 1.  At
``beam`` 1 this is greedy decoding's tokens per call with the same drafts (the engine's count).
At ``beam`` > 1 a call goes on only while every live hypothesis keeps exactly one child (a draft
names one next token): the first step, whose ``beam`` rows are all the start symbol and whose
survivors all continue the first, always ends its call.

**The drafts** (each hypothesis's, at a call; ``K_MAX`` = 64 tokens stands for uncapped, and ``k``
caps them):

* ``greedy``: the hypothesis's own greedy continuation under the same model and rules (the beam's
  log-probs: ``--temperature``, fairseq's constraints, ``--no-repeat-ngram-size``), decoded from its
  prefix with the lean beam's own step (:class:`GreedyDrafts`), to EOS or ``K_MAX`` tokens: the
  issue's upper bound (the best a drafter can do that predicts the model's own choice);
* ``input_copy``: IAD's real drafts, the input-copy drafter itself (``drafters/input_copy.py``) with
  one row per live hypothesis, reordered as the beam reorders (``select_rows``) and told each step's
  token (``observe``); its proposal for a row is that hypothesis's draft (its anchor moves token by
  token exactly as it does call by call: on while the token is the next source token, else
  re-anchored on the output's last n-gram) (:func:`input_copy_drafts`);
* ``beam_path``: each hypothesis's own future in the beam (its first surviving child, that one's
  first surviving child, ...): no draft does better, so the replay ends only where a hypothesis keeps
  two children (:func:`beam_path_drafts`); with ``greedy`` it says how much of the gap is the
  beam's choice and how much the drafts'.
"""
import json
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Dict, List, Sequence, Tuple

import torch

from scripts.lab.corpora.files import AtomicWriter
from fairseq_plugins.decoding.beam_rows import INITIAL_CACHE_COLUMNS
from fairseq_plugins.decoding.drafters.base import DraftContext, StepResult
from fairseq_plugins.decoding.drafters.input_copy import InputCopyDrafter
from fairseq_plugins.decoding.lean_beam import BeamState, LeanBeamSearch
from scripts.lab.evaluation import EvaluationError

K_MAX = 64  # the "uncapped" draft: 64 tokens (longer than any shipped test sentence's output)
DRAFT_KINDS = ("greedy", "input_copy", "beam_path")

Drafts = Callable[[int], Sequence[Sequence[int]]]  # step -> every live hypothesis's draft (row order)


# ---- the beam, recorded ----

@dataclass
class BeamTrace:
    """One sentence's beam search: ``steps`` (S), per step ``0 .. S-2`` the survivors' parent rows and
    tokens, per step ``0 .. S-1`` every live row's argmax (the beam's own log-probs), the output."""

    bos: int
    beam: int
    steps: int = 0
    parents: List[List[int]] = field(default_factory=list)
    tokens: List[List[int]] = field(default_factory=list)
    argmax: List[List[int]] = field(default_factory=list)
    hypotheses: list = field(default_factory=list)

    def prefixes(self) -> List[List[Tuple[int, ...]]]:
        """Per step, every live row's prefix (start symbol first)."""
        rows = [(self.bos,)] * self.beam
        out = [rows]
        for parents, tokens in zip(self.parents, self.tokens):
            rows = [rows[p] + (t,) for p, t in zip(parents, tokens)]
            out.append(rows)
        return out


class RecordedBeamSearch(LeanBeamSearch):
    """The lean beam search, recording a :class:`BeamTrace` of each sentence (batch 1 only)."""

    @classmethod
    def of(cls, lean: LeanBeamSearch) -> "RecordedBeamSearch":
        """A recording copy of ``lean`` (same model, parts and options; ``lean`` itself is unchanged)."""
        recorded = cls.__new__(cls)
        recorded.__dict__.update(lean.__dict__)
        recorded.reset_stats()  # its own counts
        recorded.trace = None
        return recorded

    def record(self, sample) -> BeamTrace:
        """Decode ``sample`` (one sentence) and return its trace."""
        if sample["net_input"]["src_tokens"].size(0) != 1:
            raise EvaluationError("the beam replay counts calls per sentence: pass batches of one sentence")
        self.trace = trace = BeamTrace(bos=self.eos, beam=self.beam_size)
        try:
            trace.hypotheses = self.generate([self.model], sample)[0]
        finally:
            self.trace = None
        return trace

    def _log_probs(self, cache, state: BeamState, slots, step: int, max_len: int):
        lprobs = super()._log_probs(cache, state, slots, step, max_len)
        if self.trace is not None:
            self.trace.steps = step + 1
            self.trace.argmax.append(lprobs.argmax(dim=-1).tolist())
        return lprobs

    def _survivors(self, state: BeamState, cand_rows, cand_indices, cand_scores, eos_mask, step: int):
        rows, tokens, scores = super()._survivors(state, cand_rows, cand_indices, cand_scores, eos_mask, step)
        if self.trace is not None:
            self.trace.parents.append(rows.tolist())
            self.trace.tokens.append(tokens.tolist())
        return rows, tokens, scores


# ---- the count ----

def replay_calls(trace: BeamTrace, drafts: Drafts, k: int) -> int:
    """The verification calls of ``trace``'s sentence when each call's drafts are ``drafts(step)``
    capped at ``k`` tokens and the beam's steps are replayed on them (the module's definition).
    A draft is read only as far as the replay needs it (``draft[j]``; IndexError past its end)."""
    calls, s = 0, 0
    while s < trace.steps:
        calls += 1
        chains = drafts(s)
        at = [(h, 0) for h in range(len(chains))]  # each live row: (chain, depth)
        while True:
            s += 1  # step s - 1 is covered by this call
            if s == trace.steps:
                break
            moved = []
            for parent, token in zip(trace.parents[s - 1], trace.tokens[s - 1]):
                h, j = at[parent]
                if j >= k or _token(chains[h], j) != token:
                    break
                moved.append((h, j + 1))
            else:
                at = moved
                continue
            break
    return calls


def _token(draft: Sequence[int], j: int):
    try:
        return draft[j]
    except IndexError:
        return None


def beam_path_drafts(trace: BeamTrace, cap: int = K_MAX) -> Drafts:
    """Each live hypothesis's future in the beam: its first surviving child's token, then that
    child's first surviving child's... (``cap`` tokens at most)."""
    def drafts(step):
        out = []
        for row in range(trace.beam):
            path, s, r = [], step, row
            while s < trace.steps - 1 and len(path) < cap and r in trace.parents[s]:
                child = trace.parents[s].index(r)
                path.append(trace.tokens[s][child])
                s, r = s + 1, child
            out.append(path)
        return out
    return drafts


class GreedyDrafts:
    """Each live hypothesis's own greedy continuation (to EOS, or ``cap`` tokens), decoded from its
    prefix with ``lean``'s step and log-probs (an uninstrumented lean beam search of the same model and
    options), token by token as the replay reads it (:class:`Continuation`).  Greedy choices are
    remembered by prefix, across calls and caps; the beam's own argmax seeds them, so only
    continuations that leave the beam are decoded."""

    LOOKAHEAD = 8  # tokens decoded per miss (a decode first runs the prefix: one call)

    def __init__(self, lean: LeanBeamSearch, trace: BeamTrace, sample, cap: int = K_MAX):
        self.lean, self.trace, self.cap = lean, trace, cap
        self.prefixes = trace.prefixes()
        self.next: Dict[Tuple[int, ...], int] = {}
        for rows, argmax in zip(self.prefixes, trace.argmax):
            self.next.update(zip(rows, argmax))
        src_tokens = sample["net_input"]["src_tokens"]
        self.max_len = lean.options.max_len(src_tokens.size(1), lean.model.max_decoder_positions())
        self.sample = sample
        self.encoder_out = None
        self.decoded = 0  # lean steps run for continuations off the beam

    def __call__(self, step: int) -> List["Continuation"]:
        return [Continuation(self, p) for p in self.prefixes[step]]

    def after(self, prefix: Tuple[int, ...]) -> int:
        """The greedy token after ``prefix``."""
        if prefix not in self.next:
            self._decode(prefix)
        return self.next[prefix]

    @torch.inference_mode()
    def _decode(self, prefix: Tuple[int, ...]):
        """Greedy from ``prefix`` until a known prefix, EOS, ``LOOKAHEAD`` tokens or ``max_len``: one row
        through the lean beam's step, its log-probs (constraints, temperature, n-gram block) as the beam's."""
        lean = self.lean
        if self.encoder_out is None:
            self.encoder_out = lean.parts.encoder(self.sample["net_input"])
        width, device = self.max_len + 2, self.sample["net_input"]["src_tokens"].device
        tokens = torch.full((1, width), lean.pad, dtype=torch.long, device=device)
        tokens[0, : len(prefix)] = torch.tensor(prefix, device=device)
        slots = torch.arange(width, device=device)
        cache = lean.parts.step.begin(self.encoder_out, min(width, INITIAL_CACHE_COLUMNS), group=1)
        step = len(prefix) - 1
        if step > 0:  # the prefix but its last token, in one call; _log_probs feeds the last
            lean.parts.step(cache, tokens[:, :step], slots[:step])
            cache.advance(step)
        row = torch.zeros(1, dtype=torch.long, device=device)
        state = BeamState(tokens, torch.zeros(1, width, device=device), row, row.view(1, 1), 1,
                          torch.arange(2, device=device))
        p = prefix
        for _ in range(self.LOOKAHEAD):
            token = int(lean._log_probs(cache, state, slots, step, self.max_len)[0].argmax())
            self.decoded += 1
            self.next[p] = token
            if token == lean.eos or step >= self.max_len:
                return
            step += 1
            tokens[0, step] = token
            p = p + (token,)
            if p in self.next:
                return


class Continuation:
    """One hypothesis's greedy continuation as a lazy sequence: ``[j]`` decodes what it needs."""

    def __init__(self, drafts: GreedyDrafts, prefix: Tuple[int, ...]):
        self.drafts, self.tokens, self.prefix = drafts, [], prefix

    def __getitem__(self, j: int) -> int:
        while len(self.tokens) <= j:
            if len(self.tokens) >= self.drafts.cap or (self.tokens and self.tokens[-1] == self.drafts.lean.eos):
                raise IndexError(j)
            token = self.drafts.after(self.prefix)
            self.tokens.append(token)
            self.prefix = self.prefix + (token,)
        return self.tokens[j]


@torch.inference_mode()
def input_copy_drafts(drafter: InputCopyDrafter, trace: BeamTrace, sample, tgt_dict) -> Drafts:
    """IAD's proposal for every live hypothesis at every step: ``drafter`` (``block`` = the cap) with
    one row per hypothesis, driven along ``trace`` (``select_rows`` as the beam reorders, ``observe``
    each step's token as a one-token step)."""
    B, eos, pad = trace.beam, tgt_dict.eos(), tgt_dict.pad()
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    width, device = trace.steps + 2, src.device
    drafter.begin(DraftContext(src_tokens=src.repeat(B, 1), src_lengths=lengths.repeat(B), max_len=trace.steps,
                               width=width, target_length=None, bos=trace.bos, eos=eos, pad=pad))
    out = torch.full((B, width), pad, dtype=torch.long, device=device)
    out[:, 0] = trace.bos
    one_token = torch.full((B, 1), pad, dtype=torch.long, device=device)  # observe: a drafted step (width 1)
    ones = torch.ones(B, dtype=torch.long, device=device)
    proposals = []
    for s in range(trace.steps):
        n_gen = torch.full((B,), s, dtype=torch.long, device=device)
        draft = drafter.propose(out, n_gen)
        proposals.append([row[:n] for row, n in zip(draft.tokens.tolist(), draft.lengths.tolist())])
        if s + 1 == trace.steps:
            break
        rows = torch.tensor(trace.parents[s], device=device)
        drafter.select_rows(rows)
        out = out.index_select(0, rows)
        out[:, s + 1] = torch.tensor(trace.tokens[s], device=device)
        drafter.observe(StepResult(draft=one_token, top=out[:, s + 1 : s + 2], top_lprob=torch.zeros(B, 1, device=device),
                                   accepted=ones - 1, count=ones, n_before=n_gen,
                                   out=out, n_after=n_gen + 1))
    return lambda step: proposals[step]


# ---- over a test set ----

@dataclass
class Tally:
    """Steps and calls of one (beam, drafts, k) over the sentences."""

    sentences: int = 0
    steps: int = 0
    calls: int = 0

    def add(self, steps: int, calls: int):
        self.sentences, self.steps, self.calls = self.sentences + 1, self.steps + steps, self.calls + calls

    @property
    def steps_per_call(self) -> float:
        return self.steps / self.calls if self.calls else math.nan


def measure(lean: LeanBeamSearch, samples, task, kinds=DRAFT_KINDS, ks=(4, 10, K_MAX), copy_ngram: int = 2
            ) -> Dict[Tuple[str, int], Tally]:
    """Decode every one-sentence ``samples`` with ``lean`` (recorded) and count, per (drafts, k), the
    beam steps and the calls that would replay them.  ``task``: the run's (the drafter's dictionaries)."""
    unknown = sorted(set(kinds) - set(DRAFT_KINDS))
    if unknown:
        raise EvaluationError(f"unknown draft kinds {unknown}: choose from {', '.join(DRAFT_KINDS)}")
    recorded = RecordedBeamSearch.of(lean)
    drafter = None
    if "input_copy" in kinds:
        drafter = InputCopyDrafter.from_config(SimpleNamespace(block_size=K_MAX, copy_ngram=copy_ngram), task)
    tallies = {(kind, k): Tally() for kind in kinds for k in ks}
    for sample in samples:
        trace = recorded.record(sample)
        sources = {"greedy": lambda: GreedyDrafts(lean, trace, sample),
                   "input_copy": lambda: input_copy_drafts(drafter, trace, sample, task.target_dictionary),
                   "beam_path": lambda: beam_path_drafts(trace)}
        for kind in kinds:
            drafts = memoised(sources[kind]())
            for k in ks:
                tallies[kind, k].add(trace.steps, replay_calls(trace, drafts, k))
    return tallies


def memoised(drafts: Drafts) -> Drafts:
    """``drafts`` computed once per step (the caps' replays call at the same steps often)."""
    seen = {}

    def at(step):
        if step not in seen:
            seen[step] = drafts(step)
        return seen[step]
    return at


# ---- the table ----

COLUMNS = ("model", "beam", "drafts", "k", "steps per call", "mean beam steps per sentence", "sentences")


def rows_of(model: str, beam: int, tallies: Dict[Tuple[str, int], Tally]) -> List[dict]:
    return [{"model": model, "beam": beam, "drafts": kind, "k": k,
             "steps per call": round(t.steps_per_call, 3),
             "mean beam steps per sentence": round(t.steps / t.sentences, 2) if t.sentences else math.nan,
             "sentences": t.sentences, "calls": t.calls, "steps": t.steps}
            for (kind, k), t in tallies.items()]


def markdown(rows: List[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    cell = lambda r, c: f"{K_MAX} (uncapped)" if c == "k" and r[c] == K_MAX else str(r[c])  # noqa: E731
    lines += ["| " + " | ".join(cell(r, c) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def write_jsonl(path, rows: List[dict]):
    """One JSON object per row, written atomically (a temporary file, then a rename)."""
    with AtomicWriter(path) as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
