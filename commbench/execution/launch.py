"""Start the ranks (one torchrun per launch) and watch them for crashes and hangs."""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from commbench.execution import stopping
from commbench.execution.forked_torchrun import FORK_PLATFORM
from commbench.machine import StartedTorchrun as Launched
from commbench.machine import TorchrunStarter

_POLL_S = 0.5
TERM_GRACE_S = 5.0
"""How long a stopped group has after SIGTERM before SIGKILL."""
_STOP_POLL_S = 0.1


def torchrun_command(*, nproc: int, program: list[str]) -> list[str]:
    """torchrun in standalone mode (a private rendezvous on a free port, so concurrent sweeps never collide) running
    `program`: ["--module", name, args…] or [script, args…]."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--max-restarts=0", *program]


def rank_program(module: str, args: list[str], *, fork: bool) -> list[str]:
    """The program part of a torchrun command that runs `module` as every rank.

    fork (ranks on CPU): torchrun's `--start-method fork --run-path`, the module's file run as __main__ in a fork of
    torchrun's agent, which has torch imported already: each rank saves an interpreter start and a torch import
    (~2.5 s of CPU). Otherwise (ranks on a GPU) `--module`: fresh interpreters, since a fork must not inherit a
    process's CUDA state."""
    if fork and FORK_PLATFORM:
        found = importlib.util.find_spec(module)
        assert found is not None and found.origin is not None, f"{module} is commbench's own module, with a file"
        return ["--start-method=fork", "--run-path", found.origin, *args]
    return ["--module", module, *args]


def forked_ranks_env(fork: bool) -> dict[str, str]:
    """What a launch whose ranks torchrun forks (rank_program) adds to its environment: the ranks' store hosted by
    rank 0, as before torch 2.4, not by a thread of the agent. That thread looks up the name of every rank that
    connects (getnameinfo) while the agent is still forking the next ranks; a rank forked while it held glibc's
    resolver lock waits on that lock forever at its own first lookup (its connect to the store), ignoring SIGTERM.
    Seen in 2 suite runs with 3 workers on 2 cores; the agent's own store then serves only the rendezvous, which
    ends before the first fork."""
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if fork and FORK_PLATFORM else {}


def relaunch_script_under_torchrun(nproc: int) -> None:
    """For benchmark scripts: unless this process already is a rank (of torchrun, or as a task of a several-task
    srun step: srun_ranks), run the script as `nproc` ranks and exit."""
    from commbench import srun_ranks
    from commbench.machine import Machine

    adopted = srun_ranks.adopt()
    if isinstance(adopted, srun_ranks.SrunRefusal):
        print(f"error: {adopted.message}", file=sys.stderr)
        sys.exit(2)
    if not Machine.here().in_job:
        sys.exit(subprocess.call(torchrun_command(nproc=nproc, program=[sys.argv[0], *sys.argv[1:]])))


@dataclass(frozen=True)
class LaunchOutcome:
    returncode: int | None
    stalled_s: float | None = None  # set when the watchdog ended a job that made no progress
    stopped_by: int | None = None  # the stop signal (stopping.py) that ended the launch, or kept it from starting

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.stalled_s is None and self.stopped_by is None


def run_watched(command: list[str], *, log_path: Path, timeout_s: float, progress: Callable[[], int],
                env: dict[str, str] | None = None, torch_host: TorchrunStarter | None = None,
                preload: tuple[str, ...] = ()) -> LaunchOutcome:
    """Run the job with its output in log_path; end it when `progress()` stops growing for timeout_s seconds, or
    when a stop signal came (stopping.requested(); KeyboardInterrupt outside a stopping.deferred() window)."""
    if stopping.requested() is not None:  # the signal came while the run was being prepared: start nothing
        return LaunchOutcome(None, stopped_by=stopping.requested())
    with open(log_path, "ab") as log:
        process = start_in_own_session(command, log=log, env=env, torch_host=torch_host, preload=preload)
    with stopping.watching(process.pid):
        last_count, last_change = -1, time.monotonic()
        try:
            while process.poll() is None:
                _wait_at_most(process, _POLL_S)
                if stopping.requested() is not None:
                    stop_group(process)
                    return LaunchOutcome(process.returncode, stopped_by=stopping.requested())
                count = progress()
                now = time.monotonic()
                if count != last_count:
                    last_count, last_change = count, now
                elif now - last_change >= timeout_s:
                    stop_group(process)
                    return LaunchOutcome(process.returncode, stalled_s=now - last_change)
        except KeyboardInterrupt:
            stop_group(process)
            return LaunchOutcome(process.returncode, stopped_by=signal.SIGINT)
        except BaseException:  # the progress callback gave up on the run: its ranks must not outlive it
            stop_group(process)
            raise
        return LaunchOutcome(process.returncode)


def _wait_at_most(process: Launched, seconds: float) -> None:
    """Sleep until the process exits or `seconds` pass, so the run's end is seen at once rather than up to a whole
    watchdog period later. A forked torchrun (ours or the torch host's) wakes this process only then; a subprocess
    (outside Linux) polls every few ms."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def start_in_own_session(command: list[str], *, log: BinaryIO, env: dict[str, str] | None,
                         torch_host: TorchrunStarter | None = None, preload: tuple[str, ...] = ()) -> Launched:
    """Start the command in a new session (so that stop_group reaches torchrun and every rank) with its output in
    log. torchrun itself is forked by the command's torch host (torch_host.py) when it has one (the Machine carries
    it): the same torchrun code and arguments without a second interpreter importing torch again (~3 s of CPU per
    launch). Without one (torch loaded in this process already, by a program calling the CLI) torchrun is a fresh
    interpreter: a fork of a process that has run torch work can hang (forked_torchrun.py). preload: modules the host
    loads before it forks torchrun (BenchKind.rank_imports), for ranks forked from it."""
    torchrun_prefix = torchrun_command(nproc=1, program=[])[:3]
    if command[:3] == torchrun_prefix and FORK_PLATFORM and torch_host is not None:
        return torch_host.launch(command[3:], log_path=log.name, env=env, preload=preload)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env)


def stop_group(process: Launched) -> None:
    """Stop torchrun and its ranks, or any command started in a session of its own (its process group is process.pid),
    and return once none is left. First
    SIGTERM, with SIGCONT because a rank stopped by SIGSTOP acts on SIGTERM only once it runs again; then SIGKILL to
    whatever is left after the grace period. torchrun is not the only one to wait for: it can exit while a rank it
    could not stop lives on."""
    group = process.pid
    _signal_group(group, signal.SIGTERM)
    _signal_group(group, signal.SIGCONT)
    deadline = time.monotonic() + TERM_GRACE_S
    while group_alive(group, process) and time.monotonic() < deadline:
        time.sleep(_STOP_POLL_S)
    _signal_group(group, signal.SIGKILL)
    deadline = time.monotonic() + TERM_GRACE_S
    while group_alive(group, process) and time.monotonic() < deadline:
        time.sleep(_STOP_POLL_S)


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def group_alive(group: int, process: Launched | None = None) -> bool:
    """True while any process of the group is running: torchrun and its ranks, or any command started in a session
    of its own (`process`, the group's leader, is reaped here when it exited)."""
    if process is not None:
        process.poll()
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return not _only_zombies(group)


def _only_zombies(group: int) -> bool:
    """Whether every process left in the group has exited and waits to be reaped by its new parent (a container's
    init may never reap); Linux only, elsewhere assume they still run."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":  # fields after "(comm)": state, ppid, pgrp
            return False
    return True


_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.DOTALL)


def failed_rank_summary(log_text: str) -> str | None:
    """The first failed rank and its exit code from torchrun's report: 'rank 1 exited with code -9 (SIGKILL)'."""
    # torchrun lists the first observed failure under "Root Cause"; the ranks it then stopped come under "Failures:".
    for heading in ("Root Cause", "Failures:"):
        if heading in log_text:
            log_text = log_text[log_text.rfind(heading):]
            break
    match = _FAILED_RANK.search(log_text)
    if not match:
        return None
    rank, code = int(match.group(1)), int(match.group(2))
    signal_name = f" ({signal.Signals(-code).name})" if code < 0 and -code in signal.Signals._value2member_map_ else ""
    return f"rank {rank} exited with code {code}{signal_name}"
