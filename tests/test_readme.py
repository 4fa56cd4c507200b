"""The README's opening: a quick start of at most 10 lines whose first two commands install-and-run and test, and a
table of contents that lists every section with the anchor GitHub gives it."""

import re
import unicodedata
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"
CONTENTS_HEADING = "## Contents"


def github_anchor(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation other than - and _ dropped, each space a hyphen."""
    text = heading.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def sections(text: str) -> list[str]:
    """The `##` headings outside code blocks, in order."""
    headings, in_code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("## "):
            headings.append(line[3:])
    return headings


def test_quick_start_opens_the_readme_with_install_and_test_commands():
    text = README.read_text(encoding="utf-8")
    assert sections(text)[0] == "Quick start"
    block = text.split("## Quick start\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in block.strip().splitlines() if not line.startswith("```")]
    assert len(lines) <= 10, "the quick start grew past 10 lines"
    commands = [line for line in block.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line]
    assert "pip install" in commands[0] and commands[0].endswith("commbench sweep")
    assert commands[1].startswith("python3 -m pytest -q")
    assert "python3 -m pytest -q" in (Path(__file__).parent.parent / ".ci" / "run").read_text()


def test_contents_lists_every_section_with_its_anchor():
    text = README.read_text(encoding="utf-8")
    assert CONTENTS_HEADING in text
    contents = text.split(CONTENTS_HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[[^\]]+\]\(#([^)]+)\)", contents)
    expected = [github_anchor(heading) for heading in sections(text) if heading not in ("Quick start", "Contents")]
    assert links == expected, "README contents out of date: regenerate it from the ## headings"


def test_anchor_rule_matches_github_examples():
    assert github_anchor("`commbench sweep`") == "commbench-sweep"
    assert (github_anchor("Training sweeps: `commbench ddp | fsdp | zero`")
            == "training-sweeps-commbench-ddp--fsdp--zero")
    assert github_anchor("Analytic models: memory, traffic, α–β fits") == "analytic-models-memory-traffic-αβ-fits"
