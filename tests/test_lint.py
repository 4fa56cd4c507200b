"""The code passes ruff with the rules pyproject.toml selects (pycodestyle, pyflakes, isort, bugbear, pyupgrade) and
mypy over commbench/ with 0 errors, as pre-commit runs them (.pre-commit-config.yaml): CI fails on a finding instead of
leaving it for the next reader."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert ruff, "ruff is missing: pip install -e '.[dev]' installs it"
    completed = subprocess.run([ruff, "check", "--no-cache", "commbench", "tests", "benchmarks"], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-1000:]


def test_mypy_finds_nothing():
    completed = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                               text=True, timeout=600)
    assert "No module named mypy" not in completed.stderr, "mypy is missing: pip install -e '.[dev]' installs it"
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-1000:]
    assert "Success: no issues found" in completed.stdout
