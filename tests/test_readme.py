"""The README is the front door: a quick start of at most 10 lines whose first two commands install-and-run and test,
the GPU status on its first screen, a line for every command the CLI has, and links that resolve (the reference and
how-to text lives in docs/, checked by tests/test_docs.py)."""

import re
import unicodedata
from pathlib import Path

import click
import pytest

pytestmark = pytest.mark.no_process

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


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


def section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_quick_start_opens_the_readme_with_install_and_test_commands():
    text = README.read_text(encoding="utf-8")
    assert sections(text)[0] == "Quick start"
    block = section(text, "Quick start")
    lines = [line for line in block.strip().splitlines() if not line.startswith("```")]
    assert len(lines) <= 10, "the quick start grew past 10 lines"
    commands = [line for line in block.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line]
    assert "pip install" in commands[0] and commands[0].endswith("commbench sweep")
    assert commands[1].startswith("python3 -m pytest -q")
    assert "python3 -m pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_the_first_screen_says_what_has_run_on_a_gpu_and_what_has_not():
    first_screen = " ".join(README.read_text(encoding="utf-8").splitlines()[:25])
    words = re.sub(r"\s+", " ", first_screen.replace("*", ""))
    assert "tested on CPU with gloo" in words
    assert "On one H200" in words
    assert "NCCL across GPUs, NVLink and multi-node runs have not run" in words


def test_every_command_has_a_line_in_the_commands_table():
    from commbench.cli import main

    table = section(README.read_text(encoding="utf-8"), "Commands")
    listed = set(re.findall(r"^\| `commbench ([a-z0-9-]+)", table, flags=re.MULTILINE))
    with click.Context(main) as ctx:
        commands = set(main.list_commands(ctx))
    assert commands - listed == set(), "commands the README's Commands table does not list"
    assert listed - commands == set(), "the README lists commands the CLI does not have"


def test_in_page_anchors_name_a_heading():
    text = README.read_text(encoding="utf-8")
    anchors = {github_anchor(heading) for heading in sections(text)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert [link for link in links if link not in anchors] == []


def test_anchor_rule_matches_github_examples():
    assert github_anchor("`commbench sweep`") == "commbench-sweep"
    assert (github_anchor("Training sweeps: `commbench ddp | fsdp | zero`")
            == "training-sweeps-commbench-ddp--fsdp--zero")
    assert github_anchor("Analytic models: memory, traffic, α–β fits") == "analytic-models-memory-traffic-αβ-fits"
