"""torchrun's own entry point run in a fork of the calling process, watched like a subprocess.

`python -m torch.distributed.run` would start a second interpreter that imports torch again before it starts the
ranks (~3 s of CPU and wall time on a 2-core machine, paid by every sweep and every test launch). The fork already
has torch imported; it runs exactly what that command runs (torch.distributed.run.main with the same
arguments), in its own session, with its output in the launch log. The ranks are still fresh interpreters started
by torchrun, so nothing of this process (a CUDA context, threads) reaches them.
"""

import os
import select
import subprocess
import sys
import time
import warnings
from typing import BinaryIO

from commbench.execution import stopping

_WAIT_POLL_S = 0.05
FORK_PLATFORM = sys.platform == "linux"
"""Where launches fork (torchrun's agent, CPU ranks): Linux only; macOS forbids fork after its frameworks started."""


class ForkedTorchrun:
    """The subset of subprocess.Popen that launch.py uses: pid, poll(), wait(timeout), returncode."""

    def __init__(self, torchrun_args: list[str], *, log: BinaryIO, env: dict[str, str] | None) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        with warnings.catch_warnings():  # Python 3.12+ warns about fork in a process with threads; see run_as_child
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            run_as_child(torchrun_args, log_fd=log.fileno(), env=env)  # never returns
        self.pid = pid
        self.args = torchrun_args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, once it exits; TimeoutExpired after timeout seconds. On Linux a pidfd wakes this process
        only when torchrun exits (nothing polls while ranks are timed); elsewhere it polls every _WAIT_POLL_S."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            _sleep_until_exit(self.pid, left)
        return code


def _sleep_until_exit(pid: int, seconds: float | None) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd_open (not Linux ≥ 5.3), or the process is gone already
        time.sleep(_WAIT_POLL_S if seconds is None else min(seconds, _WAIT_POLL_S))
        return
    try:
        select.select([pidfd], [], [], seconds)
    finally:
        os.close(pidfd)


def run_as_child(torchrun_args: list[str], *, log_fd: int, env: dict[str, str] | None) -> None:
    """In a freshly forked process: become torchrun, in a session of its own, its output in log_fd; never returns."""
    code = 1
    try:
        stopping.reset_in_child()  # the launcher's handlers only note a stop; torchrun must act on one
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        # fresh stream objects: a thread of the parent (the progress bar) may have held the old ones' locks at fork
        sys.stdout = open(1, "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        sys.argv = ["torchrun", *torchrun_args]
        from torch.distributed.run import main

        main(torchrun_args)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # whatever torchrun raised ends up in the launch log, as it did before
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
