"""Signals end a run cleanly: torchrun and every rank are gone (checked against the process table), meta.json says
failed with the signal's name, the rows stored before are kept, and the command exits 128 + the signal number with
one line. Real processes: the `commbench` CLI, its torchrun agent and gloo ranks."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.processes import Started, assert_all_gone

pytestmark = pytest.mark.distributed

# many small points, each quick: rows keep coming while the test signals
LONG_SWEEP = ["sweep", "--backend", "gloo", "--device", "cpu", "-c", "all_reduce", "--sizes", "1K:64M:x2",
              "--iters", "40", "--quiet"]
ROWS_BEFORE_SIGNAL = 2
STOP_WITHIN_S = 30  # generous for a loaded 2-core machine; the grace periods add up to ~10 s at most


def assert_stopped_run(run_dir: Path, signal_name: str, rows_before: int) -> None:
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "failed"
    assert f"stopped by {signal_name}" in meta["reason"]
    results = pd.read_csv(run_dir / "results.csv")  # whole rows only: a stop never tears one
    assert len(results) >= rows_before
    assert (results["n_wrong"] == 0).all()
    assert not list(run_dir.glob(".*.tmp"))


@pytest.mark.parametrize("signals, exit_code", [
    ([signal.SIGTERM], 143),
    ([signal.SIGHUP], 129),
    ([signal.SIGINT], 130),
    ([signal.SIGINT, signal.SIGINT], 130),  # the second Ctrl-C while stopping: kills at once, still recorded
], ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGINT-twice"])
def test_a_signal_stops_torchrun_and_every_rank_and_marks_the_run_failed(tmp_path, signals, exit_code):
    started = Started(tmp_path, LONG_SWEEP)
    rows_before = started.wait_for_rows(ROWS_BEFORE_SIGNAL)
    processes = started.descendants()
    assert len(processes) >= 3  # torchrun's agent and two ranks
    for signum in signals:
        started.process.send_signal(signum)
        time.sleep(0.3)
    code, stderr, took_s = started.finish()
    assert code == exit_code, stderr
    name = signal.Signals(signals[0]).name
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"stopped by {name}" in lines[0] and "Traceback" not in stderr, stderr
    assert took_s < STOP_WITHIN_S
    assert_all_gone(processes)
    assert_stopped_run(started.run_dir, name, rows_before)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_held_down_until_the_command_ends_still_gives_one_line_and_its_exit_code(tmp_path, signum):
    """Ctrl-C held down (or kill in a loop): signals keep coming while the command stops its ranks, writes meta.json,
    prints its line and exits. Each later one only repeats the request, so none may end the process by the signal
    itself or add a traceback."""
    started = Started(tmp_path, LONG_SWEEP)
    rows_before = started.wait_for_rows(ROWS_BEFORE_SIGNAL)
    processes = started.descendants()
    while started.process.poll() is None:
        started.process.send_signal(signum)
        time.sleep(0.02)
    code, stderr, _ = started.finish()
    assert code == 128 + signum, stderr
    name = signal.Signals(signum).name
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"stopped by {name}" in lines[0] and "Traceback" not in stderr, stderr
    assert_all_gone(processes)
    assert_stopped_run(started.run_dir, name, rows_before)


def test_sigterm_stops_a_suite_and_its_later_benches_say_not_run(tmp_path):
    suite = tmp_path / "two.toml"
    suite.write_text('backend = "gloo"\ndevice = "cpu"\n\n'
                     '[[bench]]\nname = "first"\nkind = "sweep"\ncollective = ["all_reduce"]\nsizes = "1K:64M:x2"\n'
                     'iters = 40\n\n'
                     '[[bench]]\nname = "second"\nkind = "sweep"\ncollective = ["all_gather"]\nsizes = "1K"\n')
    started = Started(tmp_path, ["run", str(suite), "--quiet"])
    rows_before = started.wait_for_rows(ROWS_BEFORE_SIGNAL)
    processes = started.descendants()
    started.process.send_signal(signal.SIGTERM)
    code, stderr, _ = started.finish()
    assert code == 143, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert_all_gone(processes)
    assert_stopped_run(started.run_dir / "first", "SIGTERM", rows_before)
    suite_meta = json.loads((started.run_dir / "meta.json").read_text())
    assert suite_meta["status"] == "failed" and "SIGTERM" in suite_meta["reason"]
    second = json.loads((started.run_dir / "second" / "meta.json").read_text())
    assert second["status"] == "failed" and second["reason"].startswith("not run")


def test_a_rank_stopped_with_sigstop_is_killed_when_the_watchdog_ends_the_run(tmp_path):
    started = Started(tmp_path, [*LONG_SWEEP, "--timeout", "3"])
    started.wait_for_rows(ROWS_BEFORE_SIGNAL)
    processes = started.descendants()
    # a rank: a process without children (above the ranks are the agent and, on Linux, the command's torch host
    # that forked it, so "the command's child's child" is not always a rank)
    a_rank = next(pid for pid in reversed(processes)
                  if not subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split())
    os.kill(a_rank, signal.SIGSTOP)  # frozen: it neither finishes its point nor acts on SIGTERM
    code, stderr, _ = started.finish()
    assert code == 3, stderr
    assert_all_gone(processes)
    meta = json.loads((started.run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and "all ranks were stopped" in meta["reason"]
