"""fairseq-fast-decoding: fast decoding methods for NMT as a fairseq plugin (--user-dir fairseq_plugins)."""
from setuptools import find_packages, setup

setup(
    name="fairseq-fast-decoding",
    version="0.1.0",
    description="Double-token bidirectional, IBDecoder/IMDecoder, blockwise, Jacobi and aggressive "
    "decoding for fairseq, trained and run through fairseq's own CLI",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fairseq_plugins", "fairseq_plugins.*"]),
    python_requires=">=3.10",
    # Pinned on purpose: PyPI fairseq 0.12.2 cannot import on Python 3.11 (dataclass mutable
    # defaults), fairseq-fixed is the maintained 3.11 build with the same import name; an
    # unpinned torch pulls a multi-GB CUDA build on CPU machines.
    install_requires=[
        "fairseq-fixed==0.12.3.1",
        "torch==2.13.0",
        "numpy",
        "sentencepiece",
        "subword-nmt",
        "sacrebleu>=2.0",
        "matplotlib",
        "tqdm",  # progress meters of the corpus preparation and distillation
        "tabulate",  # the Markdown tables of the benchmark and the profiler
    ],
    extras_require={
        "bench": ["ctranslate2"],
        "ja": ["sacrebleu[ja]"],
        # paper data pipelines (scripts/pipelines/): Moses tokenisation, Japanese word segmentation
        # (MeCab through fugashi with the bundled UniDic-lite), sacreBLEU's ja-mecab tokenizer
        "pipelines": ["sacremoses", "fugashi", "unidic-lite", "sacrebleu[ja]"],
        "test": ["pytest", "hypothesis"],
    },
)
