"""Shared helpers: run the real `commbench` CLI (in this process or a subprocess) with real torchrun and gloo ranks."""

import contextlib
import fcntl
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

os.environ.setdefault("COMMBENCH_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"commbench-tests-cache-{os.getuid()}"))
"""The tests' sweeps keep the host's measured rates (commbench expect) here, not in the user's ~/.cache; commbench_env
passes it on to the processes they start."""

MACHINE_LOCK = Path(tempfile.gettempdir()) / f"commbench-tests-{os.getuid()}.lock"
"""Shared by the pytest workers (-n 2): every test holds it shared, an exclusive one alone."""
EXCLUSIVE_WANTED = MACHINE_LOCK.with_suffix(".wanted")
"""Present while an exclusive test waits or runs: shared takers hold back, so the other worker's back-to-back
shared tests cannot keep it waiting (flock itself would let them)."""


pytest_plugins = ["pytester", "tests.no_process"]
"""pytester runs a small pytest session in this process (tests/test_no_process.py); tests.no_process is the
`no_process` marker's guard."""


def pytest_configure(config: pytest.Config) -> None:
    """Where this process runs tests that launch ranks, one torch host for all of its commands (torch_host.keep),
    forked now, before the test modules load torch and the tests run torch work: the CLI called in this process then
    forks each torchrun from it, as a bench command run from a shell does, instead of starting a fresh interpreter
    that imports torch again for every launch. Not in pytest-xdist's controller, which runs no test, nor for the
    inner loop (`-m no_process`), which launches nothing."""
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if not controller and config.getoption("markexpr") != "no_process":
        from commbench.execution import torch_host

        torch_host.keep()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files whose tests start processes first, the files of the inner loop (every test `no_process`) after
    them: pytest-xdist hands out whole files in this order, so the long ones start early and the many short ones fill
    both workers at the end, where a long file handed out last would run alone on one worker while the other idles.
    Within each part the order is as collected."""
    inner_loop = {item.path for item in items} - {item.path for item in items
                                                   if item.get_closest_marker("no_process") is None}
    items.sort(key=lambda item: item.path in inner_loop)  # stable: files stay whole and in order


def pytest_unconfigure(config: pytest.Config) -> None:
    from commbench.execution import torch_host

    torch_host.release()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """The host's copy and loopback rates (commbench expect) measured once, before any test runs: every sweep of the
    session, and every plan a no_process test makes, reads them from the tests' cache, so none measures beside another
    test's timings and none starts the measurement's process inside a test. Where the cache holds them (every session
    on this host after the first), this starts nothing."""
    if not session.config.option.collectonly and getattr(session, "items", None):  # an xdist controller runs none
        from commbench.expect.probe import host_rates

        host_rates()


@contextlib.contextmanager
def machine_share(*, exclusive: bool):
    """An exclusive holder (a sweep compared with rates measured beside it) has the machine's cores to itself: with
    the other worker's ranks on the same 2 cores, a healthy pair reads several times slower than another healthy pair.
    Every other test shares the machine with the rest; a slow node or link it must name is slow far beyond that
    (tests/shaped_fabric.py). A module fixture that times launches holds it itself: pytest sets such fixtures up
    before a test's own autouse fixtures, and releases it before the test's."""
    if exclusive:
        EXCLUSIVE_WANTED.touch()
    else:
        while _fresh(EXCLUSIVE_WANTED):
            time.sleep(0.2)
    with open(MACHINE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            if exclusive:
                EXCLUSIVE_WANTED.unlink(missing_ok=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _machine_share(request):
    """Each test holds the machine shared, an `exclusive` one alone (machine_share)."""
    with machine_share(exclusive=request.node.get_closest_marker("exclusive") is not None):
        yield


@pytest.fixture(autouse=True)
def _torch_loaded_for_no_process(request):
    """torch imported before each no_process test: a bench command run through the CLI in this process forks a
    process that imports torch (commbench/execution/torch_host.py) only where torch is not loaded yet, so without this
    whether an earlier test of the worker had loaded it would decide whether the test starts a process."""
    if request.node.get_closest_marker("no_process") is not None:
        import torch  # noqa: F401


def _fresh(flag: Path, within_s: float = 600) -> bool:
    """The flag exists and is recent: one left by a killed test run must not hold every later run back."""
    try:
        return time.time() - flag.stat().st_mtime < within_s
    except FileNotFoundError:
        return False


class SweepRun:
    def __init__(self, completed: subprocess.CompletedProcess, run_dir: Path):
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.run_dir = run_dir

    @property
    def meta(self) -> dict:
        return json.loads((self.run_dir / "meta.json").read_text())

    @property
    def results(self) -> pd.DataFrame:
        return _read_keyed(self.run_dir / "results.csv")

    @property
    def samples(self) -> pd.DataFrame:
        return _read_keyed(self.run_dir / "samples.csv")


def _read_keyed(path: Path) -> pd.DataFrame:
    """A CSV the run wrote, read as pandas does, but with the default environment's empty `env` key as "" (as
    commbench's readers give it), not NaN, which never equals itself."""
    frame = pd.read_csv(path)
    if "env" in frame.columns:
        frame["env"] = frame["env"].astype(object).where(frame["env"].notna(), "")
    return frame


def commbench_env(**extra: str) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "COMMBENCH_FAULT",
                          "COMMBENCH_SLOWDOWN_PCT", "COMMBENCH_SLOW_NODE", "COMMBENCH_SLOW_LINK",
                          "COMMBENCH_STALL_NODE", "COMMBENCH_NODE_NAME", "SLURMD_NODENAME")}
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def bare_sweep(tmp_path_factory) -> subprocess.CompletedProcess:
    """`commbench sweep` with no option but where to write: the default suite, as a person reads it (stdout and
    stderr kept); the run folder is returned as .run_dir. One run for the whole test session: the pytest workers share
    it through the base temporary folder they have in common (the first to come runs it under a lock, the others
    read what it printed), so it costs one launch however the test files are spread."""
    shared = tmp_path_factory.getbasetemp().parent / "bare-sweep"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        printed = shared / "printed.json"
        if not printed.exists():
            completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", "--out", "results", "--run-id",
                                        "bare"], cwd=shared, env=commbench_env(), capture_output=True, text=True,
                                       timeout=300)
            printed.write_text(json.dumps({"returncode": completed.returncode, "stdout": completed.stdout,
                                           "stderr": completed.stderr}))
        fcntl.flock(lock, fcntl.LOCK_UN)
    outcome = json.loads(printed.read_text())
    completed = subprocess.CompletedProcess(["commbench", "sweep"], outcome["returncode"], outcome["stdout"],
                                            outcome["stderr"])
    completed.run_dir = shared / "results" / "bare"
    return completed


@pytest.fixture
def run_commbench(tmp_path):
    """Run `commbench COMMAND ARGS` (a command that launches ranks) in tmp_path, in this process (tests/in_process.py:
    what it prints and its exit code, as a subprocess would give them; its launches forked by this worker's torch
    host), and return its outcome and run folder. env: the command's environment (commbench_env's, with the
    variables given); the command's own --timeout bounds its launches."""
    from tests.in_process import commbench_here

    counter = iter(range(1000))

    def run(subcommand: str, *args: str, env: dict | None = None, run_id: str | None = None) -> SweepRun:
        run_id = run_id or f"run{next(counter)}"
        # gloo on CPU on every machine, so a GPU host runs the same tests
        completed = commbench_here(subcommand, "--backend", "gloo", "--device", "cpu", "--out",
                                   str(tmp_path / "results"), "--run-id", run_id, *args, cwd=tmp_path, env=env)
        return SweepRun(completed, tmp_path / "results" / run_id)

    return run


@pytest.fixture
def run_sweep(run_commbench):
    """Run `commbench sweep ARGS` (run_commbench)."""
    return functools.partial(run_commbench, "sweep")


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def commbench_cli(capsys):
    """The real CLI called in this process (no torch import per call): exit code, stdout, stderr."""
    from commbench.cli import main

    def run(*args: str) -> Outcome:
        capsys.readouterr()
        try:
            main.main(args=list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
        out, err = capsys.readouterr()
        return Outcome(code, out, err)

    return run

