"""The real runs that the report and compare tests share (a suite, an FSDP sweep), and how they open pages in headless
Chromium."""

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from tests.in_process import commbench_here

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
impl = ["builtin", "ring"]
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
    completed = commbench_here("run", str(out / "suite.toml"), "--out", str(out), "--run-id", "suite", "-q")
    assert completed.returncode == 0, completed.stderr[-2000:]
    return out / "suite"


def shared_report_suite(tmp_path_factory) -> Path:
    """SUITE run once per test session and shared by the files that read it (read only)."""
    return _shared(tmp_path_factory, "report-suite", run_report_suite) / "suite"


# An FSDP sweep whose configuration labels are the longest the report shows ("zero3/fsdp2 reshard=true fwd_prefetch=0
# bwd_prefetch=default": three settings vary, six configurations), on a model small enough that it takes seconds.
FSDP_SWEEP = ["fsdp", "--model", "mlp", "--hidden", "64", "--layers", "2", "--steps", "6", "--profile-steps", "0",
              "--isolation", "reset", "--backend", "gloo", "--device", "cpu"]


def run_fsdp_sweep(out: Path) -> Path:
    completed = commbench_here(*FSDP_SWEEP, "--out", str(out), "--run-id", "fsdp", "-q")
    assert completed.returncode == 0, completed.stderr[-2000:]
    return out / "fsdp"


def shared_fsdp_sweep(tmp_path_factory) -> Path:
    """FSDP_SWEEP run once per test session and shared by the files that read it (read only)."""
    return _shared(tmp_path_factory, "report-fsdp", run_fsdp_sweep) / "fsdp"


def _shared(tmp_path_factory, name: str, make) -> Path:
    """make(folder) run once per test session: under pytest-xdist each file runs on its own worker, and the first to
    ask runs it while the others wait on the lock (the basetemp's parent is this session's folder under xdist, which
    every worker shares; without xdist, basetemp itself)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / "done").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a run that failed part-way: run it again
            folder.mkdir()
            make(folder)
            (folder / "done").touch()
    return folder
