"""Signals that end a run: Ctrl-C (SIGINT), SIGTERM (scancel, a Slurm time limit, kill) and SIGHUP (a closed
terminal or ssh session).

The launching process owns the run folder and the ranks, which run in a session of their own (so that the watchdog
can stop them all at once, and so that a terminal's Ctrl-C does not reach them half-way). Python's default reaction
to these signals (KeyboardInterrupt raised anywhere, or death without cleanup for SIGTERM and SIGHUP) would leave the
ranks running unattended and meta.json saying "running". Instead, while a run is under way (`deferred()`), a signal
only notes the request; the launch loop (launch.run_watched) polls it, stops torchrun and every rank, and meta.json
is written whole, failed, with the signal's name. A second signal while stopping kills the ranks at once (SIGKILL)
rather than interrupting the bookkeeping. When the run is recorded, the request leaves as `Stopped`, which the CLI
turns into one line and exit code 128 + the signal number (130 for Ctrl-C), the shell's convention.

Where the process is the `commbench` program (`as_the_program()`), a stop signal after the first is ignored once the
window is left, to the process's very end: the command is ending already, and a second Ctrl-C landing while it
prints its line, closes its torch host or while Python finalizes would otherwise end it by SIGINT instead of exit 130.
"""

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType

SignalHandler = Callable[[int, FrameType | None], None]
"""What signal.signal takes as a Python handler."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_BASE = 128
"""A process ended by signal N exits 128 + N in the shells' convention: 130 for SIGINT, 143 for SIGTERM."""


class Stopped(BaseException):
    """A stop signal ended the command. A BaseException, like KeyboardInterrupt: no `except Exception` on the way
    out swallows it."""

    def __init__(self, signum: int, where: str | None = None) -> None:
        super().__init__(signum, where)
        self.signum = signum
        self.where = where

    @property
    def exit_code(self) -> int:
        return EXIT_BASE + self.signum

    @property
    def message(self) -> str:
        text = f"stopped by {describe(self.signum)}"
        return f"{text}; {self.where}" if self.where else text


def describe(signum: int) -> str:
    """'SIGTERM', or 'SIGINT (Ctrl-C)': the name meta.json and the terminal give a stop."""
    name = signal.Signals(signum).name
    return f"{name} (Ctrl-C)" if signum == signal.SIGINT else name


class _State:
    requested: int | None = None
    """The first stop signal of the run under way; None while nobody asked to stop."""
    group: int | None = None
    """The process group of the launch under way (torchrun and its ranks), for the second signal's SIGKILL."""
    deferring: bool = False
    the_program: bool = False
    """This process is the `commbench` program (as_the_program())."""
    stop_seen: bool = False
    """A stop signal came during this process's command."""


_state = _State()


def requested() -> int | None:
    """The stop signal received during the run under way, if any."""
    return _state.requested


@contextlib.contextmanager
def deferred() -> Iterator["StopNote"]:
    """Within: a stop signal is noted (see the module), not raised; on leaving, a noted one is raised as Stopped
    (unless another exception is on its way out already). Yields a StopNote whose `where` the caller may set: it ends
    up in Stopped's message (e.g. the run folder that says failed)."""
    note = StopNote()
    if _state.deferring or threading.current_thread() is not threading.main_thread():
        yield note  # the outer window decides; signal handlers can only be set from the main thread
        return
    _state.requested, _state.deferring = None, True
    try:
        with _handled(STOP_SIGNALS, _note):
            yield note
    finally:
        signum, _state.requested, _state.deferring, _state.group = _state.requested, None, False, None
    if signum is not None:
        raise Stopped(signum, note.where)


class StopNote:
    """What a Stopped message adds: set by the code that knows (the run folder that now says failed)."""

    where: str | None = None


@contextlib.contextmanager
def watching(pgid: int) -> Iterator[None]:
    """Names the process group of the launch under way, so a second stop signal can kill it at once."""
    _state.group = pgid
    try:
        yield
    finally:
        _state.group = None


def _note(signum: int, frame: FrameType | None) -> None:
    _state.stop_seen = True
    if _state.requested is None:
        _state.requested = signum
        return
    if _state.group is not None:  # asked twice: no more grace for the ranks
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(_state.group, signal.SIGKILL)


@contextlib.contextmanager
def terminations_raised() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP end the command like Ctrl-C does (one line, exit 128 + N) instead of killing it
    silently; Python already raises KeyboardInterrupt for SIGINT. The previous handlers come back on leaving: the
    CLI may be called as a library (tests call it in process), and a process forked later (a multiprocessing pool)
    must not inherit a handler that raises where SIGTERM should end it. In the program the process's own handlers
    (as_the_program()) do this already."""
    if _state.the_program or threading.current_thread() is not threading.main_thread():
        yield
        return
    with _handled((signal.SIGTERM, signal.SIGHUP), _raise_stopped):
        yield


@contextlib.contextmanager
def _handled(signums: Iterable[int], handler: SignalHandler) -> Iterator[None]:
    """These signals go to handler within, and back to their previous handlers on leaving."""
    previous = {signum: signal.getsignal(signum) for signum in signums}
    try:
        for signum in signums:
            signal.signal(signum, handler)
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def as_the_program() -> None:
    """This process is the `commbench` program, which ends with its command: the first stop signal outside a
    deferred() window ends the command as terminations_raised() says (KeyboardInterrupt for SIGINT), and any later
    one is ignored, the command being on its way out with its line and exit code. Not for a process that calls the
    CLI as a library: its handlers stay its own."""
    _state.the_program = True
    for signum in STOP_SIGNALS:
        signal.signal(signum, _first_stop_raised)


def program_ending() -> None:
    """The program's command has ended. Ended by a stop, it ignores any further stop signal from here to the
    process's exit, at the OS level: Python's finalization gives every signal with a Python handler back to its
    default action (death by that signal), but leaves an ignored one ignored."""
    if _state.the_program and _state.stop_seen:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def _first_stop_raised(signum: int, frame: FrameType | None) -> None:
    if _state.stop_seen:
        return
    _state.stop_seen = True
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)


def reset_in_child() -> None:
    """In a process forked from the launcher (torchrun's agent): the default reactions again, so it stops when
    signalled, as a freshly started torchrun would, until torchrun installs its own handlers."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
