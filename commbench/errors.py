"""The exit codes of every command, and the one error type for problems the user can fix (one line, exit 2)."""

import enum


class ExitCode(enum.IntEnum):
    """What a commbench command's exit status means; every command uses these and no other numbers."""

    OK = 0
    WRONG_RESULTS = 1
    """A check found wrong results (n_wrong > 0): the numbers are not valid."""
    REGRESSION = 1
    """`commbench compare`: a row got worse beyond its threshold, significantly."""
    SELFTEST_FAILED = 1
    """`commbench selftest`: a path that applies on this machine failed."""
    BAD_INPUT = 2
    """Refused before anything ran: one line on stderr names the problem and the fix."""
    RUN_FAILED = 3
    """A rank crashed or hung, or a Slurm job failed; meta.json says why."""
    INTERRUPTED = 130
    """Ctrl-C; any stop signal N exits 128 + N (143 for SIGTERM, 129 for SIGHUP), as shells report it."""


class CommbenchError(Exception):
    """A user-facing problem: the message names what is wrong and how to fix it."""

    exit_code = ExitCode.BAD_INPUT


class RunOutputError(CommbenchError):
    """The run folder could not be written or read any more after the ranks started (disk full, read-only,
    removed): the run failed, exit 3; rows already on disk are kept."""

    exit_code = ExitCode.RUN_FAILED


class HostFailedError(CommbenchError):
    """The launcher's torch host (torch_host.py) could not import torch or start torchrun: nothing ran, exit 3."""

    exit_code = ExitCode.RUN_FAILED


class CommbenchWarning(UserWarning):
    """Input that runs but measures something other than it seems to (ranks sharing cores, an option that does not
    apply): raised with warnings.warn by the code that sees it; the CLI prints `commbench: warning: ...` on stderr
    once the command's input is accepted (a refused command still says one line)."""
