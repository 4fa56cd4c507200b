"""One step of a benchmark script as a process group of its own: a timeout stops the whole group (make's compilers,
torchrun and every rank), not only the direct child as subprocess.run(timeout=) does, and the timeout comes back as
a result, not as a traceback. A step that exits leaves nothing behind either: whatever is left in its group is
stopped too, so the next step has the GPU to itself."""

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TERM_GRACE_S = 5.0
"""How long the group has to exit after SIGTERM before SIGKILL."""


@dataclass(frozen=True)
class StepResult:
    command: list[str]
    returncode: int | None
    """None where the step ran past its timeout (then the group was stopped)."""
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def why(self, timeout_s: float) -> str:
        """One line on a step that did not exit 0."""
        if self.timed_out:
            return f"over its {timeout_s:g} s timeout: its process group was stopped"
        return f"exit {self.returncode}"


def run_step(command: list[str], *, timeout_s: float, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> StepResult:
    """Run `command` in a new session (its own process group), capturing its output; on timeout stop the group."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        stop_group(process.pid)
        stdout, stderr = process.communicate()
        returncode = None
    stop_group(process.pid)  # what the step left running in its group (a rank torchrun could not stop)
    return StepResult(command, returncode, stdout or "", stderr or "", time.monotonic() - started)


def stop_group(group: int) -> None:
    """SIGTERM (with SIGCONT, for a stopped process) to every process of the group, then SIGKILL after the grace."""
    if not _signal(group, signal.SIGTERM):
        return
    _signal(group, signal.SIGCONT)
    deadline = time.monotonic() + TERM_GRACE_S
    while group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal(group, signal.SIGKILL)


def group_alive(group: int) -> bool:
    """Whether any process of the group still runs (zombies waiting to be reaped do not)."""
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _signal(group: int, signum: int) -> bool:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True
