"""Run one selftest step: `python -m commbench ARGS` as a real subprocess (it launches its own torchrun), with a
wall-clock limit, its output in the selftest's run folder (logs/<step>.log)."""

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from commbench.execution.stopping import Stopped

LOGS_DIR = "logs"
_INTERRUPT_GRACE_S = 20.0
"""After SIGINT a sub-run stops its torchrun (SIGTERM, then SIGKILL after 5 s) and records why; then it is killed."""


@dataclass(frozen=True)
class StepRun:
    """How one sub-run ended."""

    name: str
    args: tuple[str, ...]
    returncode: int | None
    wall_s: float
    log: Path
    timed_out: bool = False
    stdout: Path | None = None
    """Where its stdout went when kept apart from the log (e.g. `trace analyze --json`)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def how_it_ended(self, limit_s: float) -> str:
        if self.timed_out:
            return f"timed out after {limit_s:g} s (see {self.log})"
        return f"exit {self.returncode} (see {self.log})"

    def last_error(self) -> str:
        """The sub-run's own one-line reason (`commbench: ...` on stderr), if it gave one."""
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        said = [line for line in lines if line.startswith("commbench: ")]
        return said[-1][len("commbench: "):] if said else ""

    def to_json(self, run_dir: Path) -> dict:
        return {"name": self.name, "command": shlex.join(["commbench", *self.args]), "exit_code": self.returncode,
                "timed_out": self.timed_out, "wall_s": round(self.wall_s, 2), "log": str(self.log.relative_to(run_dir))}


class StepRunner:
    """Runs sub-runs one after another (they share the machine's cores or GPUs) into run_dir."""

    def __init__(self, run_dir: Path, *, timeout_s: float, announce: Callable[[str], None]):
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self._announce = announce
        self.runs: list[StepRun] = []
        (run_dir / LOGS_DIR).mkdir(exist_ok=True)

    def run(self, name: str, args: list[str] | tuple[str, ...], *, stdout: Path | None = None) -> StepRun:
        args = tuple(str(arg) for arg in args)
        log = self.run_dir / LOGS_DIR / f"{name}.log"
        self._announce(f"{name}: commbench {shlex.join(args)}")
        start = time.monotonic()
        with open(log, "w", encoding="utf-8") as log_file:
            log_file.write(f"$ commbench {shlex.join(args)}\n")
            log_file.flush()
            out_file = open(stdout, "w", encoding="utf-8") if stdout else log_file
            try:
                # a session of its own: a sub-run that outlives its limit is stopped with everything it started
                process = subprocess.Popen([sys.executable, "-m", "commbench", *args], stdout=out_file,
                                           stderr=log_file, stdin=subprocess.DEVNULL, start_new_session=True)
                timed_out = False
                try:
                    process.wait(timeout=self.timeout_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _stop(process)
                except (KeyboardInterrupt, Stopped):  # a stop reaches this process only: pass it on, then stop
                    _stop(process)
                    raise
            finally:
                if stdout:
                    out_file.close()
            wall_s = time.monotonic() - start
            ended = "timed out" if timed_out else f"exit {process.returncode}"
            log_file.write(f"\n[selftest] {ended} after {wall_s:.1f} s\n")
        step = StepRun(name, args, process.returncode, wall_s, log, timed_out, stdout)
        self.runs.append(step)
        self._announce(f"{name}: {ended} in {wall_s:.1f} s")
        return step


def _stop(process: subprocess.Popen) -> None:
    """SIGINT first (a bench command then stops its torchrun and records the run as interrupted), SIGKILL to the
    sub-run's session when it does not exit in time."""
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=_INTERRUPT_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
