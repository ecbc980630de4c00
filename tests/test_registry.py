"""One source of truth for names and options: the task's --drafter/--acceptance choices, help and
option fields come from the registries that each drafter/rule module fills with a decorator."""
import dataclasses

import pytest
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_plugins  # noqa: F401  (registration)
from conftest import PLUGIN_DIR
from fairseq_plugins.decoding.acceptance import ACCEPTANCES, AcceptanceRule
from fairseq_plugins.decoding.drafters import DRAFTERS
from fairseq_plugins.registry import Registry
from fairseq_plugins.tasks.fast_translation import (FastTranslationConfig, FastTranslationOptionError,
                                                    validate_options)

# the drafters' and rules' options as the task had them before they moved beside their classes:
# flag -> (default, a value to parse); existing command lines must keep working
MOVED = {"--copy-ngram": (2, "3"), "--jacobi-length": ("max", "greedy_oracle"), "--drafter-path": (None, "d.pt"),
         "--acceptance-topk": (None, "4"), "--min-block-size": (2, "3"), "--gad-beta": (5, "7"), "--gad-tau": (3.0, "1.5")}


def task_cfg(argv):
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, ["data", "--user-dir", PLUGIN_DIR, "--task", "fast_translation"] + argv)
    return convert_namespace_to_omegaconf(args).task


def test_the_task_offers_what_the_modules_registered():
    fields = {f.name: f for f in dataclasses.fields(FastTranslationConfig)}
    assert all(name in fields["drafter"].metadata["help"] for name in DRAFTERS.names)
    assert all(name in fields["acceptance"].metadata["help"] for name in ACCEPTANCES.names)
    for registry in (DRAFTERS, ACCEPTANCES):  # every registered option is the task's, with its default and help
        for owner, f in registry.option_fields():
            assert fields[f.name].default == f.default and fields[f.name].metadata["help"] == f.metadata["help"]
            assert fields[f.name].metadata["owner"] == owner
    assert {f.name for f in dataclasses.fields(FastTranslationConfig)} >= {flag[2:].replace("-", "_") for flag in MOVED}
    defaults = task_cfg([])
    given = task_cfg([arg for flag, (_, value) in MOVED.items() for arg in (flag, value)])
    for flag, (default, value) in MOVED.items():
        key = flag[2:].replace("-", "_")
        assert defaults[key] == default and str(given[key]) == value, flag
    cfg = FastTranslationConfig()
    cfg.drafter = "nope"
    with pytest.raises(FastTranslationOptionError, match="--drafter 'nope' is unknown; choose one of none, "):
        validate_options(cfg)
    cfg.drafter, cfg.block_size = "jacobi_hgj", 0
    with pytest.raises(FastTranslationOptionError, match="--block-size must be >= 1"):
        validate_options(cfg)


def test_a_name_registers_once_and_is_the_class_name():
    reg = Registry("--thing")

    @reg.register("a", help="first")
    class A(AcceptanceRule):
        pass

    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a", help="again")(A)
    assert reg["a"] is A and reg.help() == "a: first" and A.name == "a"
    assert all(DRAFTERS[n].name == n for n in DRAFTERS.names if not n.startswith("jacobi_"))  # Jacobi: per variant


def test_options_merge_into_a_config_and_clashing_names_are_refused():
    @dataclasses.dataclass
    class Config:
        block_size: int = 5

    @dataclasses.dataclass
    class LookupOptions:
        lookup_last: bool = dataclasses.field(default=True, metadata={"help": "the last match"})

    @dataclasses.dataclass
    class Clash:
        block_size: int = 3

    reg = Registry("--drafter")
    reg.register("lookup", "lookup2", help="x", options=LookupOptions)(type("Lookup", (), {}))
    merged = reg.with_options(Config)
    assert merged.__name__ == "Config" and issubclass(merged, Config)
    assert merged().lookup_last is True and merged().block_size == 5
    assert dataclasses.fields(merged)[-1].metadata["owner"] == "--drafter lookup, lookup2"
    reg.register("clash", help="y", options=Clash)(type("C", (), {}))
    with pytest.raises(ValueError, match=r"--block-size, an option of --drafter clash, is already an option of the "
                                         r"task's config \(Config\): rename one"):
        reg.with_options(Config)
    other = Registry("--acceptance")
    other.register("again", help="z", options=LookupOptions)(type("Again", (), {}))
    with pytest.raises(ValueError, match="--lookup-last, an option of --acceptance again, is already an option of "
                                         "--drafter lookup, lookup2"):
        other.with_options(Registry("--drafter").with_options(merged))
    with pytest.raises(TypeError, match="options= takes a dataclass"):
        reg.register("bad", help="w", options=dict)
