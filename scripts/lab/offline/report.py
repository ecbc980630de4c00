"""The GPU evidence's report: OUT/summary.md (a section a step) and OUT/results.jsonl (a record a row),
written as each step ends, and a fenced block of text in it."""
import json
from pathlib import Path


class Report:
    """OUT/summary.md and OUT/results.jsonl, rewritten / appended after every step, so that a run cut
    off at any point leaves what it finished.  Another part's section and records are kept."""

    def __init__(self, out, part):
        self.out, self.part = Path(out), part
        self.out.mkdir(parents=True, exist_ok=True)
        self.marker = f"<!-- part: {part} -->"
        old = (self.out / "summary.md").read_text() if (self.out / "summary.md").exists() else ""
        self.other = "".join("<!-- part: " + s for s in old.split("<!-- part: ")[1:] if not s.startswith(f"{part} -->"))
        self.sections = []
        results = self.out / "results.jsonl"
        if results.exists():  # a part run again replaces its own records, keeps the other part's
            kept = [line for line in results.read_text().splitlines() if json.loads(line).get("part") != part]
            results.write_text("".join(line + "\n" for line in kept))

    def add(self, title, text, records=()):
        self.sections.append(f"### {title}\n\n{text.rstrip()}\n")
        with open(self.out / "results.jsonl", "a") as f:
            for r in records:
                f.write(json.dumps(dict(r, part=self.part), default=str) + "\n")
        mine = f"{self.marker}\n## {self.part}\n\n" + "\n".join(self.sections) + "\n"
        (self.out / "summary.md").write_text(f"# GPU evidence (issue 32)\n\n{self.other}{mine}")


def code(text):
    return f"```\n{text.rstrip()}\n```"
