"""A commbench command started in the background, the processes it started, and whether any of them lives on."""

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import commbench_env

FINISH_WITHIN_S = 60


class Started:
    """A commbench command started in the background, and the processes it started."""

    def __init__(self, tmp_path: Path, args: list[str], *, rows_file: str = "results.csv"):
        self.run_dir = tmp_path / "results" / "run"
        self.process = subprocess.Popen([sys.executable, "-m", "commbench", *args, "--out", str(tmp_path / "results"),
                                         "--run-id", "run"], cwd=tmp_path, env=commbench_env(),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.rows_file = rows_file

    def wait_for_rows(self, count: int, timeout_s: float = 120) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.communicate()
            rows = self.rows()
            if rows >= count:
                return rows
            time.sleep(0.2)
        raise AssertionError(f"no {count} rows in {timeout_s} s")

    def rows(self) -> int:
        files = list(self.run_dir.rglob(self.rows_file))
        return sum(max(len(path.read_text().splitlines()) - 1, 0) for path in files)

    def descendants(self) -> list[int]:
        """The agent (torchrun) and the ranks: every process below the command."""
        found, frontier = [], [self.process.pid]
        while frontier:
            parent = frontier.pop(0)
            children = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split()
            found += [int(child) for child in children]
            frontier += [int(child) for child in children]
        return found

    def finish(self) -> tuple[int, str, float]:
        start = time.monotonic()
        _, stderr = self.process.communicate(timeout=FINISH_WITHIN_S)
        return self.process.returncode, stderr, time.monotonic() - start


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that never reaps it has exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def assert_all_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in pids if alive(pid)]
    assert not survivors, subprocess.run(["ps", "-o", "pid,stat,cmd", "-p", ",".join(map(str, survivors))],
                                         capture_output=True, text=True).stdout


