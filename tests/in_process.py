"""The real `commbench` CLI run in this process, as the program would run it: its argv, working folder, environment
(commbench_env's) and what it prints, read at file descriptors 1 and 2 as a subprocess's pipes read it (the
launches it starts print there too). What it saves is the interpreter's start and the command's imports, several
seconds of a core per command on a busy 2-core machine; the launches are the same: torchrun forked by the torch host
this worker keeps (tests/conftest.py; a fresh interpreter where none is kept, commbench/execution/launch.py). For
tests of what a command does and prints; a test of the process itself (its signals, its torch host, its exit)
starts one."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import commbench_env


def commbench_here(*args: str, cwd: Path | None = None, env: dict | None = None,
                   cpus: set[int] | None = None) -> subprocess.CompletedProcess:
    """`commbench ARGS` in this process. env: variables added to commbench_env() for the call (the launches inherit
    them); cpus: the cores this thread, and so every process it starts, may run on during the call (a subprocess's
    preexec_fn pin)."""
    from commbench.cli import main

    sys.stdout.flush()
    sys.stderr.flush()
    saved_environ, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    saved_streams, saved_fds = (sys.stdout, sys.stderr), (os.dup(1), os.dup(2))
    saved_cpus = os.sched_getaffinity(0)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            wanted = commbench_env(**(env or {}))  # read before the clear: it starts from this environment
            os.environ.clear()
            os.environ.update(wanted)
            sys.argv = ["commbench", *args]  # the commands record it (meta.json, --json)
            if cwd is not None:
                os.chdir(cwd)
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            # stdout block-buffered and stderr by line, as Python sets them up on pipes
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)
            try:
                main.main(args=list(args), prog_name="commbench")
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        finally:
            for stream in (sys.stdout, sys.stderr):
                if stream not in saved_streams:
                    stream.close()  # flushed; the descriptor stays open (closefd=False)
            sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            os.sched_setaffinity(0, saved_cpus)
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_environ)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    return subprocess.CompletedProcess(["commbench", *args], code, stdout, stderr)
