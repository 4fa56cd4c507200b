"""The one real suite run that the report and compare tests share, and how they open pages in headless Chromium."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import commbench_env

ARTIFACTS = Path(os.environ.get("COMMBENCH_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts"))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-first-run",
                  "--disable-extensions", "--enable-logging=stderr", "--v=0"]
needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed "
                                    "(.ci/run installs the Debian package chromium)")

SIZES = "1K,32K,1M"
# A collective sweep (builtin and ring at three sizes: the ratio plot and the fit need two or more), a DDP sweep with
# two bucket sizes and a strategy sweep, both with a profiled step (traces to link): every plot has its data, in one
# suite and one launch.
SUITE = f"""
backend = "gloo"
device = "cpu"

[[bench]]
name = "collective"
kind = "sweep"
collective = "all_reduce"
sizes = "{SIZES}"
iters = 6

[[bench]]
name = "ddp"
kind = "ddp"
bucket-cap-mb = [1, 25]
params = "1M"
steps = 6
profile-steps = 1
isolation = "reset"

[[bench]]
name = "zero"
kind = "zero"
strategy = ["ddp", "zero3"]
params = "1M"
steps = 6
profile-steps = 1
isolation = "reset"
"""


def run_report_suite(out: Path) -> Path:
    """Run SUITE into out/suite: out/suite/collective, /ddp and /zero are its benches' run folders."""
    (out / "suite.toml").write_text(SUITE)
    completed = subprocess.run([sys.executable, "-m", "commbench", "run", str(out / "suite.toml"), "--out", str(out),
                                "--run-id", "suite", "-q"], env=commbench_env(), capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return out / "suite"
