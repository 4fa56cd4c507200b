import dataclasses
import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.benches.ddp import DdpKind
from commbench.benches.fsdp import FsdpKind
from commbench.execution.launch import (
    failed_rank_summary,
    forked_ranks_env,
    rank_program,
    start_in_own_session,
    torchrun_command,
)
from commbench.execution.session import _rank_imports
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


RANK_REPORTS_ITS_STORE = """import os, sys, torch.distributed as dist
dist.init_process_group("gloo")
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}"), "w") as report:
    report.write(" ".join((os.environ["TORCHELASTIC_USE_AGENT_STORE"], os.environ["MASTER_PORT"], str(os.getppid()))))
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ranks are forked on Linux only")
def test_forked_ranks_meet_at_a_store_of_rank_0_not_of_the_agent_that_forks_them(tmp_path):
    """The agent's store thread looks up each connecting rank's name while the agent forks the next rank; a rank
    forked while that lookup held glibc's resolver lock hung forever at its own first lookup (seen as a 5-rank sweep
    whose rank 3 never reached the store, in futex_wait under getaddrinfo). With the launch's variable, torch keeps
    the ranks' store out of the agent (rank 0 hosts it), so no thread of the agent looks up a name while it forks.
    Checked through torchrun itself, so a torch that drops the opt-out fails here."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_REPORTS_ITS_STORE)
    assert forked_ranks_env(True) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} and forked_ranks_env(False) == {}
    command = torchrun_command(nproc=3, program=[*rank_program("commbench.rank", [], fork=True)[:2], str(script),
                                                 str(tmp_path)])
    done = subprocess.run(command, env={**commbench_env(), **forked_ranks_env(True)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [(tmp_path / f"rank{rank}").read_text().split() for rank in range(3)]
    assert {report[0] for report in reports} == {"False"}  # TORCHELASTIC_USE_AGENT_STORE: the ranks' own store
    assert len({report[1] for report in reports}) == 1 and len({report[2] for report in reports}) == 1  # one agent


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


TORCH_WORK = "import torch\nmatrix = torch.ones(512, 512)\nassert float((matrix @ matrix).sum()) == 512.0 ** 3\n"
"""Torch work large enough for OpenMP's threads to run in the process that does it."""


def _program(tmp_path, body: str) -> subprocess.CompletedProcess:
    """A Python program of the user's (a fresh process: this test worker keeps a torch host, tests/conftest.py)."""
    return subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=commbench_env(), capture_output=True,
                          text=True, timeout=240)


def test_a_sweep_run_from_a_program_that_ran_torch_work_finishes(tmp_path):
    """The hang itself: the CLI called in a program after OpenMP's threads ran there, a 1-rank sweep of one point,
    torchrun a fresh interpreter."""
    done = _program(tmp_path, TORCH_WORK + "from commbench.cli import main\nmain(['sweep', '--backend', 'gloo', "
                    "'--device', 'cpu', '-c', 'all_reduce', '--sizes', '1K', '--iters', '6', '--nproc', '1', "
                    "'--timeout', '60', '--out', 'out', '--run-id', 'x'])\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "x" / "meta.json").read_text())["status"] == "complete"


def test_a_kept_torch_host_serves_every_command_of_a_program_that_runs_torch_work_after_keeping_it(tmp_path):
    """torch_host.keep() before torch is loaded: the program's later commands fork their torchrun from that one
    host (not a fresh interpreter each), after torch work in the program, each with that command's environment and
    working folder (a fault given to the second command only reaches its ranks); release() ends the host."""
    body = ("import os, sys\nfrom commbench.execution import torch_host\ntorch_host.keep()\n" + TORCH_WORK +
            "from commbench.cli import main\nhosts, codes = [], []\n"
            "for run, fault in (('clean', None), ('faulted', 'wrong:0:0')):\n"
            "    os.makedirs(run)\n    os.chdir(run)\n"
            "    if fault: os.environ['COMMBENCH_FAULT'] = fault\n"
            "    try:\n"
            "        main(['sweep', '--backend', 'gloo', '--device', 'cpu', '-c', 'all_reduce', '--sizes', '1K', "
            "'--iters', '6', '--nproc', '2', '--timeout', '60', '--out', 'out', '--run-id', 'x', '-q'])\n"
            "    except SystemExit as exit_:\n        codes.append(int(exit_.code))\n"
            "    hosts.append(torch_host._current.pid)\n    os.chdir('..')\n"
            "host = torch_host._current\ntorch_host.release()\n"
            "print(codes, len(set(hosts)), torch_host._current is None)\n"
            "try:\n    os.waitpid(host.pid, os.WNOHANG)\nexcept ChildProcessError:\n    print('reaped')\n")
    done = _program(tmp_path, body)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-3:-1] == ["[0, 1] 1 True", "reaped"], done.stdout + done.stderr[-3000:]
    for run, wrong in (("clean", 0), ("faulted", 1)):
        results = store.read_results(tmp_path / run / "out" / "x", COLLECTIVE)  # in each command's own folder
        assert (results["n_wrong"] > 0).sum() == wrong, run


def test_the_torch_host_starts_torchrun_where_and_as_the_command_would(tmp_path, monkeypatch):
    """Each launch carries the launching process's working folder, allowed cores and environment at that moment
    (what a fresh torchrun would inherit), not the host's from its fork; a launch whose exit was never read does not
    confuse the next one's start."""
    host = TorchHost()
    probe = ("import os, sys; print(os.getcwd(), sorted(os.sched_getaffinity(0)), os.environ.get('PROBE'), "
             "file=open(sys.argv[1], 'w'))")
    core = min(os.sched_getaffinity(0))
    saved_cpus = os.sched_getaffinity(0)
    try:
        first = host.launch(["--standalone", "--nproc-per-node=1", "--no-python", "sleep", "0.1"],
                            log_path=str(tmp_path / "first.log"), env=None)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("PROBE", "now")
        os.sched_setaffinity(0, {core})
        second = host.launch(["--standalone", "--nproc-per-node=1", "--no-python", sys.executable, "-c", probe,
                              str(tmp_path / "seen.txt")], log_path=str(tmp_path / "second.log"), env=None)
        assert first.returncode == 0  # read before the second launch asked for its pid
        assert second.wait(timeout=60) == 0, (tmp_path / "second.log").read_text()
    finally:
        os.sched_setaffinity(0, saved_cpus)
        host.close()
    assert (tmp_path / "seen.txt").read_text().split() == [str(tmp_path), f"[{core}]", "now"]


def test_the_torch_host_loads_a_launchs_rank_imports_once_and_its_forked_ranks_start_with_them(tmp_path):
    """BenchKind.rank_imports: a training step's ranks import torch._dynamo (0.85 s of a core each); the host loads
    it before forking torchrun, so forked ranks start with it. A fresh program: this worker has loaded it already."""
    (tmp_path / "rank.py").write_text("import sys\nopen(sys.argv[1], 'w').write(str('torch._dynamo' in sys.modules))\n")
    body = ("import sys\nfrom commbench.execution.torch_host import TorchHost\nhost = TorchHost()\n"
            "for name, preload in (('before', ()), ('after', ('torch._dynamo',))):\n"
            "    launched = host.launch(['--standalone', '--nproc-per-node=2', '--start-method=fork', '--run-path',\n"
            "                            'rank.py', name], log_path=name + '.log', env=None, preload=preload)\n"
            "    assert launched.wait(timeout=120) == 0, open(name + '.log').read()\n"
            "host.close()\n")
    done = _program(tmp_path, body)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "before").read_text() == "False" and (tmp_path / "after").read_text() == "True"
    assert "torch._dynamo" in DdpKind.rank_imports and "torch._dynamo" in FsdpKind.rank_imports
    # only where ranks are forked from the host: fresh interpreters (GPU ranks) import it themselves
    ddp, fsdp = SimpleNamespace(kind=DdpKind), SimpleNamespace(kind=FsdpKind)
    assert _rank_imports([ddp, fsdp], fork_ranks=True) == ("torch._dynamo",)
    assert _rank_imports([ddp], fork_ranks=False) == ()


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
        # not part of the facts: a Machine without the host is equal (the same Machine, not a second reading of
        # MemAvailable, which moves between two readings)
        assert machine.torch_host is host and machine == dataclasses.replace(machine, torch_host=None)
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
