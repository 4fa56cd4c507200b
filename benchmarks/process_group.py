"""One step of a benchmark script as a process group of its own: a timeout stops the whole group (make's compilers,
torchrun and every rank), not only the direct child as subprocess.run(timeout=) does, and the timeout comes back as
a result, not as a traceback. A step that exits leaves nothing behind either: whatever is left in its group is
stopped too, so the next step has the GPU to itself. The stopping is commbench's own (execution/launch.stop_group),
the one its launches use."""

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # commbench, for a script run from a checkout

from commbench.execution.launch import TERM_GRACE_S, group_alive, stop_group

__all__ = ["TERM_GRACE_S", "StepResult", "group_alive", "run_step"]


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
        stop_group(process)
        stdout, stderr = process.communicate()
        returncode = None
    if group_alive(process.pid):  # what the step left running in its group (a rank torchrun could not stop)
        stop_group(process)
    return StepResult(command, returncode, stdout or "", stderr or "", time.monotonic() - started)
