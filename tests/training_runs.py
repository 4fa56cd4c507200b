"""Training launches driven by the CLI called in this process (tests/in_process.py): real torchrun and real gloo
ranks, without a second interpreter that starts and imports commbench for every launch."""

from dataclasses import dataclass
from pathlib import Path

from commbench.runs import load_run
from tests.conftest import machine_share
from tests.in_process import commbench_here


@dataclass(frozen=True)
class Launched:
    """How a command ended (exit code and what it printed) and its run folder."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    def rows(self, bench: str | None = None) -> list[dict]:
        """The rows of a completed run (a suite's: of its bench `bench`)."""
        assert self.returncode == 0, self.stderr[-3000:]
        return load_run(self.run_dir / bench if bench else self.run_dir).results.to_dict("records")

    def printed_for(self, bench: str) -> str:
        """What a suite run printed under its bench's heading (`## name (kind): status`)."""
        sections = self.stdout.split("\n## ")
        return next(section for section in sections if section.startswith(f"{bench} ("))


def launch(out: Path, command: str, *args: str, run_id: str, fault: str | None = None) -> Launched:
    """`commbench COMMAND ARGS --out OUT --run-id RUN_ID` (a bench command on gloo and CPU, as on every machine; for
    `run`, the suite says where) in this process (tests/in_process.py), outside any job; fault: COMMBENCH_FAULT for
    the ranks (commbench/faults.py)."""
    where = [] if command == "run" else ["--backend", "gloo", "--device", "cpu"]
    completed = commbench_here(command, *where, "--out", str(out), "--run-id", run_id, *args,
                               env={"COMMBENCH_FAULT": fault} if fault else None)
    return Launched(completed.returncode, completed.stdout, completed.stderr, out / run_id)


def launch_shared(out: Path, command: str, *args: str, run_id: str) -> Launched:
    """launch() for a module's fixture: pytest sets such a fixture up before a test's own autouse fixtures, so it
    takes its shared hold on the machine itself (conftest.machine_share)."""
    with machine_share(exclusive=False):
        return launch(out, command, *args, run_id=run_id)
