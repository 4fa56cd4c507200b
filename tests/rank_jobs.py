"""Run a job script of tests/jobs/ under torchrun on this machine, each rank writing its own JSON files."""

import subprocess
import sys
from pathlib import Path

from tests.conftest import commbench_env

JOBS = Path(__file__).parent / "jobs"
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def assert_ended_or_torn_down(completed: subprocess.CompletedProcess, *, stored_complete: bool) -> None:
    """A job under a torchrun of its own (commbench in place): exit 0, or a rank that aborted in gloo's teardown
    (GLOO_TEARDOWN_ABORT, seen in CI after profiled runs) once the run was stored complete. That torchrun is the
    user's, so the abort is its exit code; commbench's own launches record it as `teardown` (docs/sweep.md)."""
    torn_down = stored_complete and GLOO_TEARDOWN_ABORT in completed.stderr
    assert completed.returncode == 0 or torn_down, completed.stderr[-3000:]


def run_rank_job(job: str, nproc: int, folder: Path, *args: str, outputs: list[str], timeout: float) -> None:
    """torchrun JOBS/job with nproc ranks, passing folder and args. It passes when it exits 0, or when every file of
    `outputs` (names inside folder) was written and a rank aborted only in gloo's teardown after the job was done
    ("terminate called without an active exception", seen in CI): commbench records that as a teardown note and
    keeps the run, and so do these jobs once every rank wrote its results."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(JOBS / job), str(folder), *args]
    completed = subprocess.run(command, env=commbench_env(), capture_output=True, text=True, timeout=timeout)
    assert_ended_or_torn_down(completed, stored_complete=all((folder / name).exists() for name in outputs))
