"""The repository's Markdown stands on its own: every relative link names a file that exists, and every
#fragment a heading of its target (GitHub's anchors), so a renamed section or a moved file shows here."""
import re
import subprocess

import pytest

from conftest import REPO

LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    return {anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.M)}


DOCS = sorted(REPO / p for p in subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True,
                                               text=True, check=True).stdout.split())


def test_anchors_follow_githubs_rule():
    assert anchor("The orders against their L2R control") == "the-orders-against-their-l2r-control"
    assert anchor("IMDecoder on the synthetic learning test: the gap is at the segment boundary") == \
        "imdecoder-on-the-synthetic-learning-test-the-gap-is-at-the-segment-boundary"
    assert anchor("4. Measurement protocol (`scripts/benchmark.py`)") == "4-measurement-protocol-scriptsbenchmarkpy"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    broken = []
    for target, fragment in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists() or not path.is_relative_to(REPO):
            broken.append(f"{target}: no such file in the repository")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}#{fragment}: no such heading")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)
