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


def prose(path):
    """The Markdown of ``path`` without its fenced code blocks (whose '# comment' lines are not headings)."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)


def anchors(path):
    return {anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", prose(path), re.M)}


DOCS = sorted(REPO / p for p in subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True,
                                               text=True, check=True).stdout.split())


def test_anchors_follow_githubs_rule():
    assert anchor("The orders against their L2R control") == "the-orders-against-their-l2r-control"
    assert anchor("IMDecoder on the synthetic learning test: the gap is at the segment boundary") == \
        "imdecoder-on-the-synthetic-learning-test-the-gap-is-at-the-segment-boundary"
    assert anchor("4. Measurement protocol (`scripts/benchmark.py`)") == "4-measurement-protocol-scriptsbenchmarkpy"


def test_a_code_blocks_comment_is_not_a_heading(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Title\n\n```bash\n# (a) the demo\nbash scripts/demo.sh\n```\n\n## Usage\n")
    assert anchors(doc) == {"title", "usage"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    broken = []
    for target, fragment in LINK.findall(prose(doc)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists() or not path.is_relative_to(REPO):
            broken.append(f"{target}: no such file in the repository")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}#{fragment}: no such heading")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)
