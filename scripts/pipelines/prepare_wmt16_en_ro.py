#!/usr/bin/env python
"""WMT16 English-Romanian for the paper tables (docs/METHODS.md §5).

Training data: Europarl v8 and SETimes2 (the ~610K-pair WMT16 set of the NAR literature, GAD and
IBDecoder), downloaded when online or found under ``--raw-dir``.  Validation newsdev2016, test
newstest2016 through sacreBLEU (``wmt16/dev``, ``wmt16``) or the WMT SGM files under ``--raw-dir``.

Romanian normalisation (``--romanian``; Sennrich et al.'s WMT16 scripts): ``normalise`` maps the
cedilla letters (ş ţ) to the comma-below ones (ș ț) and Romanian quotes to '"'; ``strip-diacritics``
also removes every diacritic (ă â î ș ț -> a a i s t), the setting of the NAR literature.  It is
applied to the Romanian side of train, valid *and* test, so the raw test file used as BLEU
reference is normalised the same way as the model's training targets.

Usage::

    python -m scripts.pipelines.prepare_wmt16_en_ro --out data/wmt16_en_ro
"""
from scripts.pipelines import wmt

PIPELINE = {
    "tag": "wmt16",
    "langs": ("en", "ro"),
    "corpora": [
        {"name": "europarl-v8", "url": "https://data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz",
         "files": {"en": "europarl-v8.ro-en.en", "ro": "europarl-v8.ro-en.ro"}},
        {"name": "SETIMES2", "url": "https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip",
         "files": {"en": "SETIMES.en-ro.en", "ro": "SETIMES.en-ro.ro"}},
    ],
    "recipes": {
        # 32K joint merges: IBDecoder App. A uses 32K for every pair but WMT18 En-Ru (GAD names no
        # size for en-ro; its WMT14 setting is also 32K)
        "standard": {"merges": 32000, "valid": ["wmt16/dev"], "test": ["wmt16"],
                     "help": "32K merges, newsdev2016 / newstest2016"},
    },
    "default_recipe": "standard",
}


def main(argv=None):
    ap = wmt.build_parser(PIPELINE, __doc__)
    ap.add_argument("--romanian", choices=["none", "normalise", "strip-diacritics"], default="normalise",
                    help="Romanian character normalisation (default: normalise)")
    return wmt.prepare(PIPELINE, ap.parse_args(argv))


if __name__ == "__main__":
    main()
