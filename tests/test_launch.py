import os
import signal
import subprocess

import pytest

from commbench.forked_torchrun import ForkedTorchrun
from commbench.launch import failed_rank_summary, rank_program, start_in_own_session, torchrun_command

TORCHRUN_REPORT = """
commbench.rank FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_08:52:27
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 3378)  (SIGTERM)
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_08:52:27
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 3379)  (SIGKILL)
"""


def test_the_root_cause_rank_is_named_not_the_ranks_torchrun_stopped():
    assert failed_rank_summary(TORCHRUN_REPORT) == "rank 1 exited with code -9 (SIGKILL)"


def test_plain_exit_codes():
    assert failed_rank_summary("Root Cause\n  rank      : 3 (local_rank: 1)\n  exitcode  : 1 (pid: 9)") == \
        "rank 3 exited with code 1"
    assert failed_rank_summary("nothing useful") is None


def test_one_standalone_torchrun_per_sweep():
    command = torchrun_command(nproc=4, program=["--module", "commbench.rank", "--run-dir", "x y"])
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=4" in command
    assert command[-3:] == ["commbench.rank", "--run-dir", "x y"]  # arguments stay separate: no shell


def test_cpu_ranks_are_forked_by_torchrun_and_gpu_ranks_are_fresh_interpreters():
    forked = rank_program("commbench.rank", ["--run-dir", "x y"], fork=True)
    assert forked[:2] == ["--start-method=fork", "--run-path"]
    assert forked[2].endswith("commbench/rank.py") and forked[3:] == ["--run-dir", "x y"]
    assert rank_program("commbench.rank", ["--run-dir", "x"], fork=False) == ["--module", "commbench.rank",
                                                                               "--run-dir", "x"]


def test_torchrun_runs_in_a_fork_in_its_own_session_with_its_output_in_the_log(tmp_path):
    """The fork runs torchrun's main: a bad argument makes it print usage into the log and exit 2, as the
    command would; nothing reaches this process's streams."""
    import torch  # noqa: F401 - the fork is taken only where torch is imported already

    log_path = tmp_path / "launch.log"
    with open(log_path, "ab") as log:
        process = start_in_own_session(torchrun_command(nproc=1, program=["--no-such-flag", "x.py"]), log=log,
                                       env=None)
        assert isinstance(process, ForkedTorchrun)
        assert process.wait(timeout=60) == 2
    assert "usage" in log_path.read_text()


def test_a_forked_torchrun_can_be_waited_for_with_a_timeout(tmp_path):
    import torch  # noqa: F401

    with open(tmp_path / "log", "ab") as log:
        process = ForkedTorchrun(["--standalone", "--nproc-per-node=1", "--no-python", "sleep", "30"], log=log,
                                 env=None)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.2)
        assert process.poll() is None
        os.killpg(process.pid, signal.SIGKILL)  # its own session: torchrun and the rank go together
        assert process.wait(timeout=30) == -signal.SIGKILL
