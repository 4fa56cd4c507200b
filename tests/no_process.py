"""The `no_process` marker's guard (a pytest plugin, loaded by tests/conftest.py): while a test marked `no_process`
runs (its setup, fixtures of any scope set up for it included, its call, and the teardown of its function-scoped
fixtures), an event that starts a process raises ProcessStarted, naming the test and the event.

The events are CPython's audit events that start a process (https://docs.python.org/3/library/audit_events.html)
and two this module raises itself where CPython raises none: multiprocessing's Process.start (a forkserver child is
forked by the server, not here) and _posixsubprocess.fork_exec (multiprocessing's spawn and forkserver start their
interpreter with it, unaudited; subprocess.Popen audits before calling it). One audit hook per pytest process; each
pytest session (a pytester run inside a test has its own) keeps its own slot, and the innermost decides."""

from __future__ import annotations

import _posixsubprocess
import functools
import multiprocessing.process
import sys
from dataclasses import dataclass, field

import pytest

EVENTS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                    "os.exec", "os.startfile", "_posixsubprocess.fork_exec", "multiprocessing.Process.start"})
"""os.spawn* (POSIX), os.popen, pty.spawn and pty.fork raise os.fork, subprocess.Popen or os.forkpty."""


class ProcessStarted(BaseException):
    """A BaseException, so that code which catches Exception around a process start (a fallback when a tool is
    missing) does not turn the violation into a passing test; one it swallows anyway still fails the test."""


@dataclass
class _Slot:
    test: str | None = None
    """The node id of the no_process test running now, else None."""
    phase: str = ""
    caught: list[str] = field(default_factory=list)


_slots: list[_Slot] = []


def _audit(event: str, args: tuple) -> None:
    if event not in EVENTS or not _slots or _slots[-1].test is None:
        return
    slot = _slots[-1]
    shown = next((arg for arg in args if arg), "")  # the command where the event gives one
    detail = f"{event}: {str(shown)[:200]}" if shown else event
    message = (f"{slot.test} is marked no_process but started a process during {slot.phase} ({detail}): remove its "
               "no_process marker, or stop it starting the process")
    slot.caught.append(message)
    raise ProcessStarted(message)


def _audited(event: str, function):
    @functools.wraps(function)
    def audited(*args, **kwargs):
        sys.audit(event, args[1] if event == "_posixsubprocess.fork_exec" else repr(args[0]))
        return function(*args, **kwargs)

    audited._no_process_audited = True
    return audited


if not getattr(_posixsubprocess.fork_exec, "_no_process_audited", False):  # once per process
    _posixsubprocess.fork_exec = _audited("_posixsubprocess.fork_exec", _posixsubprocess.fork_exec)
    multiprocessing.process.BaseProcess.start = _audited("multiprocessing.Process.start",
                                                         multiprocessing.process.BaseProcess.start)
    sys.addaudithook(_audit)


def pytest_sessionstart(session: pytest.Session) -> None:
    _slots.append(_Slot())


def pytest_sessionfinish(session: pytest.Session) -> None:
    _slots.pop()


def _guarded(item: pytest.Item, phase: str):
    """Run one phase of a test (a hook wrapper's body): guarded where the test is marked no_process. A violation
    that the test's code caught and swallowed still fails the phase."""
    if item.get_closest_marker("no_process") is None:
        return (yield)
    slot = _slots[-1]
    slot.test, slot.phase, slot.caught = item.nodeid, phase, []
    try:
        result = yield
    except ProcessStarted:
        raise
    except BaseException as error:
        if slot.caught:
            raise ProcessStarted(slot.caught[0]) from error
        raise
    finally:
        slot.test = None
    if slot.caught:
        raise ProcessStarted(slot.caught[0])
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    return (yield from _guarded(item, "teardown"))


@pytest.fixture(autouse=True)
def _no_process_own_teardown_only():
    """Set up first of the test's function-scoped fixtures, so torn down last of them: past it, the teardown goes on
    to broader fixtures that other tests set up (a module's or the session's processes stopped), unguarded."""
    yield
    if _slots:
        _slots[-1].test = None
