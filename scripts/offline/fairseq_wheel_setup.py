"""Build a wheel of fairseq-fixed's sdist without torch at build time (scripts/offline_bundle.sh).

fairseq's own setup.py imports torch to compile its torch C++ extensions, so it cannot build for
an interpreter that has no torch here (the air-gapped GPU machine's Python 3.12).  Measured on
fairseq-generate and fairseq-train with this plugin (docs/GPU.md): they load the Cython module
``fairseq.data.data_utils_fast`` and the C library ``fairseq.libbleu`` (fairseq-generate's default
``--scoring bleu``), never ``libbase`` (BASE layers), ``libnat`` (Levenshtein NAT) or the CUDA
kernels.  This file replaces setup.py in an unpacked copy of the sdist and builds the package with
the three extensions that need only a compiler, Cython and numpy; fairseq's sources are unchanged.

    cd fairseq_fixed-0.12.3.1 && cp .../fairseq_wheel_setup.py setup.py && python -m pip wheel --no-deps --no-build-isolation .
"""
import os
from pathlib import Path

from setuptools import Extension, find_packages, setup


class NumpyExtension(Extension):
    """numpy's headers are looked up when the build runs (numpy is a build requirement only)."""

    @property
    def include_dirs(self):
        import numpy

        return self._include_dirs + [numpy.get_include()]

    @include_dirs.setter
    def include_dirs(self, dirs):
        self._include_dirs = dirs


ARGS = ["-std=c++11", "-O3"]
EXTENSIONS = [
    Extension("fairseq.libbleu", sources=["fairseq/clib/libbleu/libbleu.cpp", "fairseq/clib/libbleu/module.cpp"],
              extra_compile_args=ARGS),
    NumpyExtension("fairseq.data.data_utils_fast", sources=["fairseq/data/data_utils_fast.pyx"], language="c++",
                   extra_compile_args=ARGS),
    NumpyExtension("fairseq.data.token_block_utils_fast", sources=["fairseq/data/token_block_utils_fast.pyx"],
                   language="c++", extra_compile_args=ARGS),
]
CLI = ["eval_lm", "generate", "hydra_train", "interactive", "preprocess", "score", "train", "validate"]


def package_files(folder):
    """fairseq's hydra configs (yaml) must travel inside the package."""
    return [str(p.relative_to("fairseq")) for p in Path("fairseq", folder).rglob("*") if p.is_file()]


setup(
    name="fairseq-fixed",
    version=Path("fairseq/version.txt").read_text().strip(),
    description="fairseq-fixed built without its torch C++ extensions (libbase, libnat) for an offline bundle",
    packages=find_packages(exclude=["examples", "examples.*", "scripts", "scripts.*", "tests", "tests.*"]),
    package_data={"fairseq": package_files("config")},
    ext_modules=EXTENSIONS,
    entry_points={"console_scripts": [f"fairseq-{c.replace('_', '-')} = fairseq_cli.{c}:cli_main" for c in CLI]},
    python_requires=">=3.8",
    zip_safe=False,
)
