#!/usr/bin/env python
"""WMT14 English-German for the paper tables (docs/METHODS.md §5).

Training data: Europarl v7, Common Crawl and News Commentary v9 (the 4.5M-pair WMT14 set of
Vaswani et al. and of every paper here), downloaded from statmt.org when online, or found under
``--raw-dir`` (the files or their archives, by name).  Test sets come from sacreBLEU
(``sacrebleu -t wmt14/full -l en-de --echo src``), or from the WMT SGM files under ``--raw-dir``.

Recipes (``--recipe``):
  standard  32K joint BPE merges, valid newstest2013, test newstest2014 (3,003 sentences):
            IBDecoder (Zhang et al. App. A), GAD (Xia et al. 4.2.1), blockwise (Stern et al.)
  imamura   37K joint BPE merges, valid newstest2009, test newstest2010-2016 concatenated
            (19,666 sentences; Imamura & Sumita 4.1)

Usage::

    python -m scripts.pipelines.prepare_wmt14_en_de --out data/wmt14_en_de
    python -m scripts.pipelines.prepare_wmt14_en_de --recipe imamura --out data/wmt14_en_de_imamura \\
        --raw-dir data/raw/wmt14 --offline
"""
from scripts.pipelines import wmt

STATMT = "https://www.statmt.org"

PIPELINE = {
    "tag": "wmt14",
    "langs": ("en", "de"),
    "corpora": [
        {"name": "europarl-v7", "url": f"{STATMT}/wmt13/training-parallel-europarl-v7.tgz",
         "files": {"en": "europarl-v7.de-en.en", "de": "europarl-v7.de-en.de"}},
        {"name": "commoncrawl", "url": f"{STATMT}/wmt13/training-parallel-commoncrawl.tgz",
         "files": {"en": "commoncrawl.de-en.en", "de": "commoncrawl.de-en.de"}},
        {"name": "news-commentary-v9", "url": f"{STATMT}/wmt14/training-parallel-nc-v9.tgz",
         "files": {"en": "news-commentary-v9.de-en.en", "de": "news-commentary-v9.de-en.de"}},
    ],
    "recipes": {
        "standard": {"merges": 32000, "valid": ["wmt13"], "test": ["wmt14/full"],
                     "help": "32K merges, newstest2013 / newstest2014"},
        "imamura": {"merges": 37000, "valid": ["wmt09"],
                    "test": ["wmt10", "wmt11", "wmt12", "wmt13", "wmt14/full", "wmt15", "wmt16"],
                    "help": "37K merges, newstest2009 / newstest2010-2016"},
    },
    "default_recipe": "standard",
}


def main(argv=None):
    ap = wmt.build_parser(PIPELINE, __doc__)
    return wmt.prepare(PIPELINE, ap.parse_args(argv))


if __name__ == "__main__":
    main()
