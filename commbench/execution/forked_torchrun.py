"""torchrun's own entry point run in a fork of the command's torch host (torch_host.py).

`python -m torch.distributed.run` would start a second interpreter that imports torch again before it starts the
ranks (~3 s of CPU and wall time on a 2-core machine, paid by every sweep and every test launch). The host has torch
imported and has run nothing of it; the fork runs exactly what that command runs (torch.distributed.run.main with the
same arguments), in its own session, with its output in the launch log. Only a process that has run no torch work
may be forked so: one whose OpenMP threads ran (any sizeable CPU tensor operation, in a program that calls the CLI
after using torch) leaves a fork whose ranks hang at their first parallel region (GNU OpenMP is not fork-safe), so
there launch.py starts torchrun as a fresh interpreter.
"""

import os
import sys

from commbench.execution import stopping

FORK_PLATFORM = sys.platform == "linux"
"""Where launches fork (torchrun's agent, CPU ranks): Linux only; macOS forbids fork after its frameworks started."""


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
