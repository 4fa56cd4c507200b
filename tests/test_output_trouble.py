"""An output folder that is read-only, full, or removed: one line naming the folder and the cause; exit 2 when
nothing could be created (and nothing is left behind), exit 3 once the run had started (meta.json failed where it
can still be written); never a traceback or a stray temporary file. Real file systems: a small tmpfs mounted for the
test (root only; skipped with the reason elsewhere)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import commbench_env
from tests.processes import Started, assert_all_gone
from tests.refusals import invoke

SWEEP = ["sweep", "--backend", "gloo", "--device", "cpu", "-c", "all_reduce", "--quiet"]
PAGE = 4096
BASELINE = Path(__file__).resolve().parent.parent / "results" / "baselines" / "cpu-ci"


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MiB tmpfs of this test's own."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(folder: Path, *, leave_pages: int) -> None:
    """Take every free block of folder's file system but leave_pages pages."""
    stats = os.statvfs(folder)
    size = stats.f_bavail * stats.f_frsize - leave_pages * PAGE
    with open(folder / "filler", "wb") as filler:
        filler.write(b"\0" * size)


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def left_in(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.name != "filler")


def test_a_read_only_output_folder_is_refused_before_anything_is_made(small_fs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    launch = BASELINE / "launch1"
    for args in ([*SWEEP, "--out", str(small_fs)],  # the run folder cannot be made
                 [*SWEEP, "--out", str(small_fs / "results")],  # nor --out itself
                 ["report", str(launch), "--out", str(small_fs / "report")],
                 ["compare", str(launch), str(launch), "--markdown", str(small_fs / "gate.md")]):
        result = invoke(args)
        assert result.exit_code == 2, result.output
        line = one_error_line(result.stderr)
        assert "Read-only file system" in line and str(small_fs) in line
    assert left_in(small_fs) == []


def test_a_full_disk_before_the_start_is_refused_and_leaves_nothing(small_fs):
    fill(small_fs, leave_pages=0)
    result = invoke([*SWEEP, "--out", str(small_fs / "results"), "--run-id", "full"])
    assert result.exit_code == 2, result.output
    line = one_error_line(result.stderr)
    assert "No space left on device" in line and str(small_fs / "results" / "full") in line
    assert left_in(small_fs) == ["results"]  # --out itself was made; the half-made run folder was taken away


@pytest.mark.distributed
def test_a_disk_that_fills_during_the_run_fails_it_with_exit_3(small_fs):
    fill(small_fs, leave_pages=2)  # room for spec.json and meta.json, none for the ranks' rows
    completed = subprocess.run([sys.executable, "-m", "commbench", *SWEEP, "--sizes", "1K",
                                "--out", str(small_fs), "--run-id", "run"], env=commbench_env(),
                               capture_output=True, text=True, timeout=180)
    assert completed.returncode == 3, completed.stderr
    line = one_error_line(completed.stderr)
    assert str(small_fs / "run") in line and "full" in line
    meta = json.loads((small_fs / "run" / "meta.json").read_text())  # rewritten in place: whole, and failed
    assert meta["status"] == "failed" and "is full" in meta["reason"]
    assert not list((small_fs / "run").glob(".*.tmp"))


@pytest.mark.distributed
def test_a_run_folder_removed_during_the_run_fails_it_and_stops_the_ranks(tmp_path):
    started = Started(tmp_path, [*SWEEP, "--sizes", "1K:4M:x2", "--iters", "20"])
    started.wait_for_rows(1)
    processes = started.descendants()
    shutil.rmtree(started.run_dir)
    code, stderr, _ = started.finish()
    assert code == 3, stderr
    assert f"{started.run_dir} was removed while it ran" in one_error_line(stderr)
    assert_all_gone(processes)
