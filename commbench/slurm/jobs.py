"""Talk to Slurm through its own commands (sbatch, scontrol), always as argument lists, never through a shell."""

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


def require_client() -> None:
    """Refuse early (before a run folder is made) where Slurm's client commands are missing."""
    for name in ("sbatch", "scontrol"):
        _slurm_command(name)


def _call(argv: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A Slurm client command as an argument list; a hung or missing one is a one-line error, not a traceback."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise CommbenchError(f"`{' '.join(argv)}` did not answer in 120 s: is slurmctld up? (scontrol ping)") from None
    except OSError as error:
        raise CommbenchError(f"`{argv[0]}` could not run: {error.strerror}") from None


def submit(script: Path, *, cwd: Path) -> str:
    """sbatch the script from cwd (the job's working directory and where its log goes), held; returns the job id.
    The job starts only at release(): the submitter records the id in meta.json first, so it never races rank 0's
    writes to the same file."""
    completed = _call([_slurm_command("sbatch"), "--parsable", "--hold", str(script)], cwd=cwd)
    if completed.returncode != 0:
        message = (completed.stderr or completed.stdout).strip().splitlines()
        raise CommbenchError(f"sbatch refused the job: {message[-1] if message else 'no message'} "
                             f"(script: {script})")
    job_id = completed.stdout.strip().split(";")[0]  # --parsable prints "ID" or "ID;CLUSTER"
    if not job_id.isdigit():
        raise CommbenchError(f"sbatch printed {completed.stdout.strip()!r} instead of a job id (script: {script})")
    return job_id


def release(job_id: str) -> None:
    completed = _call([_slurm_command("scontrol"), "release", job_id])
    if completed.returncode != 0:
        _call([_slurm_command("scancel"), job_id])
        raise CommbenchError(f"scontrol release {job_id} failed ({completed.stderr.strip() or 'no message'}); the "
                             "held job was cancelled")


def job_state(job_id: str) -> JobState:
    """The job's state from `scontrol show job` (no accounting database needed)."""
    completed = _call([_slurm_command("scontrol"), "show", "job", "-o", job_id])
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
        try:
            state = job_state(job_id)
        except CommbenchError:  # a busy slurmctld: the job goes on, so keep asking until the deadline
            if time.monotonic() >= deadline:
                raise
            time.sleep(poll_s)
            continue
        if state.state != last:
            on_change(state)
            last = state.state
        if state.ended:
            return state
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
