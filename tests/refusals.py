"""The one contract every refusal keeps, shared by the generated bad-input tests: exit code 2, one line on stderr
that starts with `commbench: error:`, no traceback, and nothing left behind (no run folder, no launch)."""

import os

from click.testing import CliRunner

from commbench.cli import main

JOB_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "COMMBENCH_FAULT")


def invoke(args: list[str], *, cwd=None):
    """The CLI in this process (fast: no interpreter start), outside any job, with stderr kept apart."""
    saved = {name: os.environ.pop(name) for name in JOB_VARIABLES if name in os.environ}
    old_cwd = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        return CliRunner().invoke(main, args)
    finally:
        os.chdir(old_cwd)
        os.environ.update(saved)


def assert_refused(result, *, fragment: str | None = None, left_empty=()) -> str:
    """The result is a clean refusal; returns its one line. left_empty: folders that must hold nothing afterwards."""
    described = f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        described += "\n" + "".join(traceback.format_exception(result.exception))
    assert result.exit_code == 2, described
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, described
    assert lines[0].startswith("commbench: error:"), described
    assert "Traceback" not in result.output + result.stderr, described
    if fragment is not None:
        assert fragment in lines[0], described
    for folder in left_empty:
        leftovers = sorted(str(path) for path in folder.rglob("*")) if folder.exists() else []
        assert not leftovers, f"left behind: {leftovers}\n{described}"
    return lines[0]

