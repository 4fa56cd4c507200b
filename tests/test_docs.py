"""The docs site builds (mkdocs build --strict: every page in the nav, every link and anchor resolves, the command
reference generated from the Click commands), the README stays a front door that links into it, history stays in git
log, and every measured figure on docs/measurements.md says when, where, at which commit and how it was measured.

mkdocs comes with the dev extra (`pip install -e '.[dev]'`): without it this test fails rather than skips."""

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MEASUREMENTS = DOCS / "measurements.md"
README_MAX_LINES = 250
HISTORY = re.compile(r"before issue|after issue|used to |closing note", re.IGNORECASE)
ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
COMMIT = re.compile(r"`[0-9a-f]{7,40}`|commit unknown")
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once with --strict from the repository root."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocs_click  # noqa: F401
    except ImportError as error:
        pytest.fail(f"{error}: install the docs tools with `python3 -m pip install -e '.[dev]'`")
    out = tmp_path_factory.mktemp("site")
    completed = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                               cwd=ROOT, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return out


def test_the_site_builds_strict_with_the_generated_command_reference(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    for command in ("commbench-sweep", "commbench-perf", "commbench-compare"):
        assert f'id="{command}"' in reference, f"the generated reference lacks {command}"


@pytest.mark.no_process
def test_readme_is_at_most_250_lines():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference and how-to text into docs/"


def prose_files() -> list[Path]:
    return [README, *sorted(path for path in DOCS.rglob("*.md") if path != MEASUREMENTS)]


@pytest.mark.no_process
@pytest.mark.parametrize("path", prose_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_history_in_the_prose(path):
    """What changed when is git log's job; the docs say what is."""
    found = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if HISTORY.search(line)]
    assert found == []


@pytest.mark.no_process
def test_readme_carries_no_dates():
    """Dated figures belong on docs/measurements.md."""
    assert ISO_DATE.findall(README.read_text(encoding="utf-8")) == []


def measurement_entries() -> list[tuple[str, str]]:
    """(heading, body) of every section of docs/measurements.md below the page title that holds text of its own."""
    entries, heading, body, in_code = [], None, [], False
    for line in MEASUREMENTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and re.match(r"#{1,4} ", line):
            if heading is not None and "".join(body).strip():
                entries.append((heading, "\n".join(body)))
            heading, body = (line if not line.startswith("# ") else None), []
        elif heading is not None:
            body.append(line)
    if heading is not None and "".join(body).strip():
        entries.append((heading, "\n".join(body)))
    return entries


@pytest.mark.no_process
def test_measurements_page_has_entries():
    assert len(measurement_entries()) >= 10


@pytest.mark.no_process
@pytest.mark.parametrize("heading, body", measurement_entries(), ids=lambda value: value[:40])
def test_every_measurement_says_when_where_and_how(heading, body):
    assert ISO_DATE.search(body), f"{heading}: no date"
    assert COMMIT.search(body), f"{heading}: no commit (or 'commit unknown')"
    assert re.search(r"\*\*Command:\*\* .*`", body), f"{heading}: no **Command:** with the command in backticks"


def relative_links(text: str) -> list[str]:
    links = []
    for target in LINK.findall(text):
        parts = urlsplit(target)
        if not parts.scheme and not target.startswith(("#", "mailto:")):
            links.append(target)
    return links


@pytest.mark.no_process
def test_every_relative_readme_link_resolves():
    links = relative_links(README.read_text(encoding="utf-8"))
    assert links, "the README links into docs/"
    missing = [link for link in links if not (ROOT / urlsplit(link).path).exists()]
    assert missing == []


def test_readme_links_into_docs_land_on_a_built_page_and_anchor(site):
    for link in relative_links(README.read_text(encoding="utf-8")):
        parts = urlsplit(link)
        path = Path(parts.path)
        if path.parts[0] != "docs" or path.suffix != ".md":
            continue
        page = path.relative_to("docs").with_suffix("")
        html = site / ("index.html" if page.name == "index" else page / "index.html")
        assert html.exists(), f"{link}: no page {html.relative_to(site)} in the built site"
        if parts.fragment:
            assert f'id="{parts.fragment}"' in html.read_text(encoding="utf-8"), f"{link}: no such anchor"
