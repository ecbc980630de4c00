#!/usr/bin/env python
"""A reversed and/or dev-as-test view of a prepared corpus folder (scripts.lab.corpora.views):

    python -m scripts.pipelines.corpus_prep view MAIN VIEW [--reverse] [--test-from valid]
"""
import argparse
from pathlib import Path

from scripts.lab.corpora.files import PrepError, set_tag
from scripts.lab.corpora.views import make_view


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    v = sub.add_parser("view", help=make_view.__doc__.split(":")[0])
    v.add_argument("main")
    v.add_argument("view")
    v.add_argument("--reverse", action="store_true")
    v.add_argument("--test-from", choices=["test", "valid"], default="test")
    args = ap.parse_args(argv)
    set_tag("view")
    if not (Path(args.main) / "DONE").exists():
        raise PrepError(f"{args.main} is not a finished corpus folder (no DONE): prepare it first")
    make_view(args.main, args.view, reverse=args.reverse, test_from=args.test_from)


if __name__ == "__main__":
    main()
