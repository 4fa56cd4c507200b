"""A command's life in the process: the stop signals it answers (execution/stopping.py), the torch host it may have
started (closed when it ends), and what a stop says in its one line and exit code."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from commbench.errors import ExitCode
from commbench.execution import stopping, torch_host
from commbench.machine import inside_job


@contextlib.contextmanager
def the_program() -> Iterator[None]:
    """The `commbench` program: the process ends with the command, so it takes the stop signals for the whole of its
    life (stopping.as_the_program()); a rank run in place leaves them to its launcher."""
    if not inside_job():
        stopping.as_the_program()
    try:
        yield
    finally:
        stopping.program_ending()


@contextlib.contextmanager
def command_running() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP end the command as Ctrl-C does (stop_of() says how), except in a rank run in place,
    which its launcher stops; on leaving, the command's torch host, if it started one, is closed (its launches have
    ended)."""
    with contextlib.nullcontext() if inside_job() else stopping.terminations_raised():
        try:
            yield
        finally:
            torch_host.close()


@dataclass(frozen=True)
class Stop:
    """How a stop signal ended the command: its line and the shell's exit code (128 + the signal)."""

    message: str
    exit_code: int


def stop_of(error: BaseException) -> Stop | None:
    """The stop that error is (a stop signal's Stopped, Ctrl-C's KeyboardInterrupt), or None for anything else."""
    if isinstance(error, stopping.Stopped):
        return Stop(error.message, error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        return interrupted()
    return None


def interrupted() -> Stop:
    """Ctrl-C (KeyboardInterrupt, or a prompt's abort)."""
    return Stop(f"stopped by {stopping.describe(signal.SIGINT)}", ExitCode.INTERRUPTED)
