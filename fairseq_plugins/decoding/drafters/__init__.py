"""Drafters: propose up to k tokens per row for the verifier (docs/METHODS.md §2).

The interface, the draft and the registry are in ``drafters.base``; every drafter module
registers its ``--drafter`` names and options there (``@DRAFTERS.register``), and importing this
package imports them all, so ``DRAFTERS`` is complete (the task merges their options into its own:
one import here is all a new drafter adds outside its module).
"""
from fairseq_plugins.decoding.drafters.base import (DEFAULT_BLOCK_SIZE, DRAFTERS, BlockDrafter, Draft, DraftContext,
                                                    Drafter, DrafterCapabilities, DrafterNotAvailableError, NoDraft,
                                                    StepResult, block_size_of, check_block_size)
from fairseq_plugins.decoding.drafters import auto, blockwise, input_copy, jacobi, nar, shallow  # noqa: F401  (registration)


def build_drafter(cfg, task, models=()) -> Drafter:
    """The drafter of ``--drafter``; ``models`` are the verifier's (a drafter may read their weights)."""
    return DRAFTERS[cfg.drafter].from_config(cfg, task, models)


__all__ = ["DEFAULT_BLOCK_SIZE", "DRAFTERS", "BlockDrafter", "Draft", "DraftContext", "Drafter", "DrafterCapabilities",
           "DrafterNotAvailableError", "NoDraft", "StepResult", "block_size_of", "build_drafter", "check_block_size"]
