from commbench.launch import failed_rank_summary, torchrun_command

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
