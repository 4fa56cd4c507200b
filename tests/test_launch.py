import json
import os
import signal
import subprocess
import sys

import pytest

from commbench.execution.launch import failed_rank_summary, rank_program, start_in_own_session, torchrun_command
from commbench.execution.torch_host import TorchHost
from commbench.machine import Machine
from tests.conftest import commbench_env

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


@pytest.mark.no_process
def test_the_root_cause_rank_is_named_not_the_ranks_torchrun_stopped():
    assert failed_rank_summary(TORCHRUN_REPORT) == "rank 1 exited with code -9 (SIGKILL)"


@pytest.mark.no_process
def test_plain_exit_codes():
    assert failed_rank_summary("Root Cause\n  rank      : 3 (local_rank: 1)\n  exitcode  : 1 (pid: 9)") == \
        "rank 3 exited with code 1"
    assert failed_rank_summary("nothing useful") is None


@pytest.mark.no_process
def test_one_standalone_torchrun_per_sweep():
    command = torchrun_command(nproc=4, program=["--module", "commbench.rank", "--run-dir", "x y"])
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=4" in command
    assert command[-3:] == ["commbench.rank", "--run-dir", "x y"]  # arguments stay separate: no shell


@pytest.mark.no_process
def test_cpu_ranks_are_forked_by_torchrun_and_gpu_ranks_are_fresh_interpreters():
    forked = rank_program("commbench.rank", ["--run-dir", "x y"], fork=True)
    assert forked[:2] == ["--start-method=fork", "--run-path"]
    assert forked[2].endswith("commbench/rank.py") and forked[3:] == ["--run-dir", "x y"]
    assert rank_program("commbench.rank", ["--run-dir", "x"], fork=False) == ["--module", "commbench.rank",
                                                                               "--run-dir", "x"]


def test_where_torch_ran_here_torchrun_is_a_fresh_interpreter_in_its_own_session_with_its_output_in_the_log(
        tmp_path):
    """A program that ran torch work before calling the CLI (OpenMP's threads started, as in a test worker) must not
    be forked: the fork's ranks hung at their first parallel region (GNU OpenMP is not fork-safe; seen as a 1-rank
    sweep that never finished a point). Without a torch host, torchrun is a fresh interpreter, in its own session:
    a bad argument makes it print usage into the log and exit 2, as the command would."""
    import torch

    matrix = torch.ones(512, 512)
    assert float((matrix @ matrix).sum()) == 512.0 ** 3  # large enough for OpenMP's threads to run here
    log_path = tmp_path / "launch.log"
    with open(log_path, "ab") as log:
        process = start_in_own_session(torchrun_command(nproc=1, program=["--no-such-flag", "x.py"]), log=log,
                                       env=None)
        assert isinstance(process, subprocess.Popen)
        assert os.getsid(process.pid) == process.pid
        assert process.wait(timeout=60) == 2
    assert "usage" in log_path.read_text()


def test_a_sweep_run_from_a_program_that_ran_torch_work_finishes(tmp_path):
    """The hang itself: the CLI in this process after OpenMP's threads ran here, a 1-rank sweep of one point."""
    import torch

    from tests.in_process import commbench_here

    matrix = torch.ones(512, 512)
    assert float((matrix @ matrix).sum()) == 512.0 ** 3
    run = commbench_here("sweep", "--backend", "gloo", "--device", "cpu", "-c", "all_reduce", "--sizes", "1K",
                         "--iters", "6", "--nproc", "1", "--timeout", "60", "--out", str(tmp_path), "--run-id", "x")
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_torch_host_reports_the_machine_and_runs_one_torchrun_per_launch(tmp_path):
    host = TorchHost()
    try:
        assert host.facts() == Machine.facts_here()
        log_path = tmp_path / "launch.log"
        bad = host.launch(torchrun_command(nproc=1, program=["--no-such-flag", "x.py"])[3:], log_path=str(log_path),
                          env=None)
        assert bad.wait(timeout=60) == 2 and "usage" in log_path.read_text()  # torchrun's own refusal, in the log
        sleeping = host.launch(["--standalone", "--nproc-per-node=1", "--no-python", "sleep", "30"],
                               log_path=str(log_path), env=None)
        with pytest.raises(subprocess.TimeoutExpired):
            sleeping.wait(timeout=0.2)
        assert sleeping.poll() is None
        assert os.getpgid(sleeping.pid) == sleeping.pid  # its own session: the watchdog stops it as a group
        os.killpg(sleeping.pid, signal.SIGKILL)
        assert sleeping.wait(timeout=30) == -signal.SIGKILL
    finally:
        host.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(host.pid, os.WNOHANG)  # ended and reaped


def test_a_launch_goes_through_the_torch_host_the_machine_carries(tmp_path):
    """The host is passed down with the Machine (no module state read by the launcher): given one, torchrun is
    forked there, a HostedTorchrun, with the command's exit code."""
    host = TorchHost()
    try:
        machine = Machine.here_from(host.facts(), torch_host=host)
        assert machine.torch_host is host and machine == Machine.here_from(host.facts())  # not part of the facts
        with open(tmp_path / "launch.log", "ab") as log:
            process = start_in_own_session(torchrun_command(nproc=1, program=["--no-such-flag", "x.py"]), log=log,
                                           env=None, torch_host=machine.torch_host)
        assert type(process).__name__ == "HostedTorchrun" and process.wait(timeout=60) == 2
    finally:
        host.close()


def test_a_sweep_launches_without_importing_torch_in_the_launching_process(tmp_path):
    """torch is imported by the command's torch host (and inherited by torchrun and the CPU ranks it forks), never
    by the process that parses, plans and prints; its meta.json still records the ranks' torch version."""
    script = ("import sys, atexit\n"
              "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, file=sys.stderr))\n"
              "from commbench.cli import main\n"
              "main()\n")
    completed = subprocess.run(
        [sys.executable, "-c", script, "sweep", "-c", "all_reduce", "--impl", "builtin", "--sizes", "1K",
         "--warmup", "1", "--iters", "6", "--out", str(tmp_path), "--run-id", "r", "-q"],
        capture_output=True, text=True, timeout=180, env=commbench_env())
    assert completed.returncode == 0, completed.stderr
    assert "torch imported: False" in completed.stderr
    import torch

    assert json.loads((tmp_path / "r" / "meta.json").read_text())["torch_version"] == torch.__version__


def test_a_torch_that_cannot_be_imported_fails_the_command_in_one_line(tmp_path):
    broken = tmp_path / "shadow" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    env = commbench_env(PYTHONPATH=os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")]))
    completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce", "--sizes", "1K",
                                "--out", str(tmp_path / "results")], capture_output=True, text=True, timeout=120,
                               env=env)
    assert completed.returncode == 3, completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in completed.stderr
    assert "the process that imports torch for this command failed" in lines[0]
    assert "cannot open shared object file" in lines[0]
    assert not (tmp_path / "results").exists()  # nothing was prepared
