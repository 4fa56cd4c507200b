"""The `no_process` guard (tests/no_process.py): a small pytest session, run in this process (pytester), whose tests
marked no_process start processes every way the guard knows, each failing with its message before anything starts;
and whose unmarked tests, and the broader fixtures they set up, may start one. The unmarked ones only raise the audit
event (sys.audit) rather than start a real process, so this test itself starts none."""

import re

import pytest

from tests.no_process import EVENTS

pytestmark = pytest.mark.no_process

ADVICE = "remove its no_process marker, or stop it starting the process"


def _told(test: str, phase: str, event: str) -> str:
    """The guard's message for test_inner.py's test, as a pattern for pytester's output."""
    told = f"test_inner.py::{test} is marked no_process but started a process during {phase} ({event}"
    return "E .*" + re.escape(told)

STARTS = """
import concurrent.futures
import multiprocessing
import multiprocessing.util
import os
import pty
import subprocess
import sys

import pytest

from tests.no_process import EVENTS

pytestmark = pytest.mark.no_process


def test_subprocess_run():
    subprocess.run(["true"])


def test_os_popen():
    os.popen("true").close()


def test_os_system():
    os.system("true")


def test_os_fork():
    if os.fork() == 0:  # only were the guard to fail
        os._exit(0)


def test_pty_fork():
    if pty.fork()[0] == 0:
        os._exit(0)


def test_os_spawn():
    os.spawnlp(os.P_WAIT, "true", "true")


def test_os_posix_spawn():
    os.posix_spawnp("true", ["true"], os.environ)


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_multiprocessing(method):
    multiprocessing.get_context(method).Process(target=print).start()


def test_multiprocessing_interpreter_start():
    multiprocessing.util.spawnv_passfds(sys.executable, [sys.executable, "-c", "pass"], ())


def test_process_pool():
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        pool.submit(print).result()


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_event(event):  # os.exec, os.spawn (Windows) and os.startfile, which are not called here
    sys.audit(event, "true")


def test_swallowed():
    try:
        subprocess.run(["true"])
    except BaseException:
        pass


@pytest.fixture
def stops_with_a_process():
    yield
    sys.audit("os.system", b"true")


def test_teardown(stops_with_a_process):
    pass


@pytest.fixture(scope="module")
def module_process():
    sys.audit("subprocess.Popen", "sleep", ["sleep", "60"], None, None)


def test_module_fixture(module_process):
    pass
"""

ALLOWED = """
import sys

import pytest

from tests.no_process import EVENTS


@pytest.fixture(scope="module")
def server():
    sys.audit("subprocess.Popen", "server", ["server"], None, None)
    yield
    sys.audit("subprocess.Popen", "stop", ["stop"], None, None)


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_unmarked_may(event):
    sys.audit(event, "true")


def test_unmarked_sets_up(server):
    pass


@pytest.mark.no_process
def test_marked_after_the_fixture(server):
    pass


@pytest.mark.no_process
def test_marked_last():
    pass
"""


@pytest.fixture
def guarded(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    no_process: starts no process\n")

    def run(source: str):
        pytester.makepyfile(test_inner=source)
        return pytester.runpytest_inprocess("-p", "tests.no_process", "-p", "no:cacheprovider", "-p", "no:benchmark")

    return run


def test_every_way_of_starting_a_process_fails_the_test(guarded):
    result = guarded(STARTS)
    result.assert_outcomes(failed=13 + len(EVENTS), passed=1, errors=2)  # test_teardown's call passes
    expected = {"test_subprocess_run": "subprocess.Popen", "test_os_popen": "subprocess.Popen",
                "test_os_system": "os.system", "test_os_fork": "os.fork", "test_pty_fork": "os.forkpty",
                "test_os_spawn": "os.fork", "test_os_posix_spawn": "os.posix_spawn",
                "test_multiprocessing[spawn]": "multiprocessing.Process.start",
                "test_multiprocessing[forkserver]": "multiprocessing.Process.start",
                "test_multiprocessing[fork]": "multiprocessing.Process.start",
                "test_multiprocessing_interpreter_start": "_posixsubprocess.fork_exec",
                "test_process_pool": "multiprocessing.Process.start", "test_swallowed": "subprocess.Popen",
                **{f"test_event[{event}]": event for event in EVENTS}}
    for test, event in expected.items():
        result.stdout.re_match_lines([_told(test, "call", event)])
    result.stdout.re_match_lines([_told("test_teardown", "teardown", "os.system"),
                                  _told("test_module_fixture", "setup", "subprocess.Popen")])
    assert ADVICE in result.stdout.str()


def test_unmarked_tests_and_broader_fixtures_may_start_processes(guarded):
    result = guarded(ALLOWED)
    result.assert_outcomes(passed=len(EVENTS) + 3)

