"""One source of truth for names: the task's --drafter/--acceptance choices and help come from the
registries that each drafter/rule module fills with a decorator."""
import dataclasses

import pytest

import fairseq_plugins  # noqa: F401  (registration)
from fairseq_plugins.decoding.acceptance import ACCEPTANCES, AcceptanceRule
from fairseq_plugins.decoding.drafters import DRAFTERS
from fairseq_plugins.registry import Registry
from fairseq_plugins.tasks.fast_translation import (FastTranslationConfig, FastTranslationOptionError,
                                                    validate_options)


def test_the_task_offers_what_the_modules_registered():
    help_of = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(FastTranslationConfig)}
    assert set(DRAFTERS.names) == {"none", "jacobi_pj", "jacobi_pgj", "jacobi_hgj", "input_copy", "blockwise", "nar"}
    assert set(ACCEPTANCES.names) == {"exact", "topk", "min_block", "gad_pp", "all"}
    assert all(name in help_of["drafter"] for name in DRAFTERS.names)
    assert all(name in help_of["acceptance"] for name in ACCEPTANCES.names)
    cfg = FastTranslationConfig()
    cfg.drafter = "nope"
    with pytest.raises(FastTranslationOptionError, match="--drafter 'nope' is unknown; choose one of none, "):
        validate_options(cfg)
    cfg.drafter, cfg.block_size = "jacobi_hgj", 0
    with pytest.raises(FastTranslationOptionError, match="--block-size must be >= 1"):
        validate_options(cfg)


def test_a_name_registers_once():
    reg = Registry("--thing")

    @reg.register("a", help="first")
    class A(AcceptanceRule):
        pass

    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a", help="again")(A)
    assert reg["a"] is A and reg.help() == "a: first"
