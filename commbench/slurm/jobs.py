"""Talk to Slurm through its own commands (sbatch, scontrol), always as argument lists, never through a shell."""

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from commbench.errors import CommbenchError

ENDED_OK = "COMPLETED"
ENDED_BADLY = ("FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")
GONE = "UNKNOWN"
"""What a job id is when scontrol no longer knows it (finished more than MinJobAge ago, 300 s by default)."""
_FIELD = re.compile(r"(?:^|\s)(JobState|ExitCode|Reason|NodeList|RunTime)=(\S*)")


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str
    exit_code: str | None = None
    reason: str | None = None
    nodes: str | None = None
    run_time: str | None = None

    @property
    def ended(self) -> bool:
        return self.state == ENDED_OK or self.state in ENDED_BADLY or self.state == GONE


def _slurm_command(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise CommbenchError(f"`{name}` is not on PATH: run this on a Slurm login node (or use --dry-run to see the "
                             "script)")
    return path


def submit(script: Path, *, cwd: Path) -> str:
    """sbatch the script from cwd (the job's working directory and where its log goes); returns the job id."""
    completed = subprocess.run([_slurm_command("sbatch"), "--parsable", str(script)], cwd=cwd, capture_output=True,
                               text=True, timeout=120)
    if completed.returncode != 0:
        message = (completed.stderr or completed.stdout).strip().splitlines()
        raise CommbenchError(f"sbatch refused the job: {message[-1] if message else 'no message'} "
                             f"(script: {script})")
    job_id = completed.stdout.strip().split(";")[0]  # --parsable prints "ID" or "ID;CLUSTER"
    if not job_id.isdigit():
        raise CommbenchError(f"sbatch printed {completed.stdout.strip()!r} instead of a job id (script: {script})")
    return job_id


def job_state(job_id: str) -> JobState:
    """The job's state from `scontrol show job` (no accounting database needed)."""
    completed = subprocess.run([_slurm_command("scontrol"), "show", "job", "-o", job_id], capture_output=True,
                               text=True, timeout=60)
    if completed.returncode != 0 or "JobState=" not in completed.stdout:
        if "Invalid job id" in completed.stderr:
            return JobState(job_id, GONE)
        raise CommbenchError(f"scontrol show job {job_id} failed: {completed.stderr.strip() or 'no output'}")
    fields = dict(_FIELD.findall(completed.stdout))
    return JobState(job_id, fields["JobState"], exit_code=fields.get("ExitCode"), reason=fields.get("Reason"),
                    nodes=fields.get("NodeList"), run_time=fields.get("RunTime"))


def wait(job_id: str, *, timeout_s: float, poll_s: float, on_change: Callable[[JobState], None]) -> JobState | None:
    """Poll until the job ends (its last state) or timeout_s passes (None). sbatch --wait would poll every 32 s."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        state = job_state(job_id)
        if state.state != last:
            on_change(state)
            last = state.state
        if state.ended:
            return state
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
