"""The [MASK] symbol of the NAR drafter (GAD, Xia et al. §3.2.1, Fig. 3) and the alignment of the
drafter's dictionaries with the verifier's.

The drafter's dictionaries are the verifier's with one symbol appended after all existing ones, so
every token id means the same in both models and a draft can be handed to the verifier as is.
The symbol is added in memory when a task is set up (``fairseq-train --task nar_drafter`` on any
corpus binarized for the verifier); no extra preprocessing step.
"""
import copy
from typing import List, Sequence

from fairseq_plugins.errors import PluginError

MASK_SYMBOL = "<mask>"


class DictionaryMismatchError(PluginError, ValueError):
    """The drafter's and the verifier's dictionaries are not aligned token for token."""


def with_mask(dictionary, in_place: bool = False):
    """``dictionary`` with :data:`MASK_SYMBOL` appended (a copy unless ``in_place``); returns it."""
    if MASK_SYMBOL in dictionary.indices:
        raise DictionaryMismatchError(
            f"the dictionary already holds {MASK_SYMBOL!r} (id {dictionary.indices[MASK_SYMBOL]}), so the drafter's "
            f"mask would be an ordinary token the verifier can emit; rebuild the corpus without a {MASK_SYMBOL!r} "
            "symbol in its dictionary")
    d = dictionary if in_place else copy.deepcopy(dictionary)
    n = len(d)
    idx = d.add_symbol(MASK_SYMBOL, n=0)
    assert idx == n  # appended after every existing symbol: all existing ids unchanged
    return d


def first_difference(a: Sequence[str], b: Sequence[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at id {i}: {x!r} vs {y!r}"
    return f"sizes differ: {len(a)} vs {len(b)} symbols"


def check_aligned(drafter_symbols: List[str], verifier_symbols: List[str], side: str, drafter_name: str,
                  verifier_name: str) -> None:
    """``drafter_symbols`` must be ``verifier_symbols`` + [MASK]; else a clear error naming both."""
    if list(drafter_symbols) == list(verifier_symbols) + [MASK_SYMBOL]:
        return
    theirs = list(drafter_symbols)
    if theirs and theirs[-1] == MASK_SYMBOL:
        theirs = theirs[:-1]
    raise DictionaryMismatchError(
        f"the drafter's {side} dictionary ({drafter_name}, {len(theirs)} symbols + {MASK_SYMBOL}) is not the "
        f"verifier's {side} dictionary ({verifier_name}, {len(verifier_symbols)} symbols): "
        f"{first_difference(theirs, list(verifier_symbols))}. Train the drafter with --task nar_drafter on a corpus "
        "binarized with the verifier's dictionaries (e.g. the verifier's own bin/ folder or its distilled copy)")
