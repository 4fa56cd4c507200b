"""The launcher's torch, in a process of its own: the process that runs a bench command never imports torch.

Every launch needs torch imported once (torchrun's agent runs in it, and CPU ranks are forked from that agent), and that
import (~2 s of one core) used to happen in the launching process, in series with everything else it does: parsing
options, planning the sweep, importing pandas for the tables. Now a bench command forks this host first thing; the host
imports torch and torchrun's entry point and reports the machine's facts (Machine.facts_here: GPUs, NCCL, the GPUs'
compute capability and the smallest one's memory, all read without a CUDA context, since the host forks torchrun
afterwards), while the launcher goes on with the rest on another core. Each launch then asks the host to fork its
torchrun: the same code and arguments as `python -m torch.distributed.run` (forked_torchrun.py), with torch already
loaded.

Not used inside a torchrun or srun job (the rank runs in place and imports torch anyway), nor where torch is loaded
already when the command starts (the CLI called from a program that imported it, as tests do): a fork of that
program could hang (forked_torchrun.py), so there torchrun is a fresh interpreter.

A program that runs several bench commands in process and imports torch only later (the test suite's workers) can
keep one host for all of them: keep() before torch is loaded, release() at the end. Each launch carries what the
command's own process would have passed on (its environment, working folder and allowed cores), so a kept host
forks every torchrun as the command would have started it.

Protocol, one JSON object per line: the host first sends {"facts": …} (or {"error": …}); to {"launch": {"args",
"log", "env", "cwd", "cpus"}} it answers {"pid": …} once torchrun runs and {"exit": code} when it has ended. Closing
the command pipe ends the host.
"""

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import traceback

from commbench.errors import HostFailedError
from commbench.execution import stopping
from commbench.execution.forked_torchrun import FORK_PLATFORM, run_as_child
from commbench.machine import Machine, MachineFacts, inside_job

_current: "TorchHost | None" = None
_kept = False
"""True while a host started by keep() serves every command of this process (close() then leaves it)."""


def keep() -> None:
    """Start a host that serves every later command of this process until release(): for a program that runs bench
    commands in process and loads torch after this call (a fork of a process that has run torch work can hang), and
    would otherwise start a fresh torchrun interpreter for each launch."""
    global _kept
    start()
    _kept = _current is not None


def release() -> None:
    """End the host keep() started."""
    global _kept
    _kept = False
    close()


def start() -> None:
    """Fork the host now, where it helps: not in a job (the rank imports torch itself), not where torch is loaded
    already, not where launches cannot fork (macOS, Windows)."""
    global _current
    if _current is None and "torch" not in sys.modules and not inside_job() and FORK_PLATFORM:
        _current = TorchHost()


def machine() -> Machine:
    """This machine, as Machine.here() reads it: from the host's facts when this command has a host (started here
    if it helps), else with torch in this process."""
    start()
    if _current is None:
        return Machine.here()
    return Machine.here_from(_current.facts(), torch_host=_current)


def close() -> None:
    """End the host of this command (at the command's end: its launches have ended by then), unless keep() keeps
    it for the next command."""
    global _current
    if _kept:
        return
    host, _current = _current, None
    if host is not None:
        host.close()


class TorchHost:
    """The launcher's side of the host: forks it, reads its facts, asks it for launches, ends it."""

    def __init__(self) -> None:
        commands_read, commands_write = os.pipe()
        replies_read, replies_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(commands_write)
            os.close(replies_read)
            _serve(commands_read, replies_write)  # never returns
        os.close(commands_read)
        os.close(replies_write)
        self.pid = pid
        self._commands = os.fdopen(commands_write, "w", buffering=1, encoding="utf-8")
        self._replies_fd = replies_read
        self._pending = b""
        self._facts: MachineFacts | None = None
        self._last: HostedTorchrun | None = None

    def facts(self) -> MachineFacts:
        if self._facts is None:
            reply = self._read(None)
            if reply is None or "error" in reply:
                why = (reply or {}).get("error", "").strip().splitlines() or ["it exited without a word"]
                raise HostFailedError(f"the process that imports torch for this command failed: {why[-1]}; "
                                      "check that `python -c 'import torch'` works in this environment")
            self._facts = reply["facts"]
        return self._facts

    def launch(self, torchrun_args: list[str], *, log_path: str, env: dict[str, str] | None,
               preload: tuple[str, ...] = ()) -> "HostedTorchrun":
        """torchrun forked by the host as this process would start it now: with env (else this process's current
        environment), in its working folder, on its allowed cores; the modules in preload loaded in the host first
        (once for all its launches), so ranks forked on CPU inherit them instead of each importing them."""
        self.facts()
        if self._last is not None and self._last.returncode is None:
            self._last.wait()  # its exit is the next reply: read it here, not as this launch's pid
        request = {"args": torchrun_args, "log": log_path, "env": dict(os.environ) if env is None else env,
                   "cwd": os.getcwd(), "cpus": sorted(os.sched_getaffinity(0)), "preload": list(preload)}
        self._commands.write(json.dumps({"launch": request}) + "\n")
        reply = self._read(None)
        if reply is None or "pid" not in reply:
            raise HostFailedError("the process that imports torch for this command ended before torchrun started")
        self._last = HostedTorchrun(self, reply["pid"], torchrun_args)
        return self._last

    def _read(self, timeout: float | None) -> dict | None:
        """The next reply, None when the host is gone; raises TimeoutError when none came within timeout. Reads
        the pipe unbuffered, so that select() never misses a reply already read into a buffer."""
        while b"\n" not in self._pending:
            if timeout is not None and not select.select([self._replies_fd], [], [], timeout)[0]:
                raise TimeoutError
            chunk = os.read(self._replies_fd, 65536)
            if not chunk:
                return None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        for close in (self._commands.close, lambda: os.close(self._replies_fd)):
            try:
                close()
            except OSError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)  # its launches have ended; it may still be importing torch
        except ProcessLookupError:
            return
        while True:
            try:
                os.waitpid(self.pid, 0)
                return
            except ChildProcessError:
                return
            except KeyboardInterrupt:  # a second Ctrl-C while the command is already stopping: finish reaping
                continue


class HostedTorchrun:
    """torchrun forked by the host: the subset of subprocess.Popen that launch.py uses (pid, poll, wait)."""

    def __init__(self, host: TorchHost, pid: int, args: list[str]):
        self._host = host
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._take_exit(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, reported by the host when torchrun ends (this process sleeps until then)."""
        if self.returncode is None and not self._take_exit(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)  # only a timeout can stop the wait early
        assert self.returncode is not None  # _take_exit returned True: it recorded the exit code
        return self.returncode

    def _take_exit(self, timeout: float | None) -> bool:
        try:
            reply = self._host._read(timeout)
        except TimeoutError:
            return False
        self.returncode = reply["exit"] if reply and "exit" in reply else -signal.SIGKILL  # the host died
        return True


def _serve(commands_fd: int, replies_fd: int) -> None:
    """The host's life: import torch, report the facts, fork a torchrun per launch and report how it ended."""
    code = 0
    try:
        stopping.reset_in_child()
        os.setsid()  # a terminal's Ctrl-C is the launcher's to handle, not this helper's
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # hold none of the launcher's pipes: a caller reading its output must see it end
            os.dup2(null, fd)
        replies = os.fdopen(replies_fd, "w", buffering=1, encoding="utf-8")
        commands = os.fdopen(commands_fd, "r", encoding="utf-8")
        try:
            import torch.distributed.run  # noqa: F401 - loaded once, here, for every torchrun forked below

            from commbench.machine import Machine

            replies.write(json.dumps({"facts": Machine.facts_here()}) + "\n")
        except BaseException:  # the launcher reports it
            replies.write(json.dumps({"error": traceback.format_exc(limit=3)}) + "\n")
            raise
        for line in commands:
            request = json.loads(line)["launch"]
            _preload(request.get("preload", ()))
            pid = _fork_torchrun(request)
            replies.write(json.dumps({"pid": pid}) + "\n")
            _, status = os.waitpid(pid, 0)
            replies.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
    except BaseException:  # nothing to print to: the launcher sees the pipe end
        code = 1
    finally:
        os._exit(code)


def _preload(modules: list[str]) -> None:
    """Load the modules a launch's ranks will import (they start no thread: a fork copies only the forking one); one
    that fails to load is left to the ranks, which report it in the launch log."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # the rank's own import says why, in the launch log where the user reads it
            pass


def _fork_torchrun(request: dict) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(request["cwd"])
            os.sched_setaffinity(0, request["cpus"])
            log_fd = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            os._exit(1)  # the launcher finds the log empty and the exit code 1
        run_as_child(request["args"], log_fd=log_fd, env=request["env"])  # never returns
    return pid
