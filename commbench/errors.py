"""The one error type for problems the user can fix; the CLI prints it as one line and exits 2."""


class CommbenchError(Exception):
    """A user-facing problem: the message names what is wrong and how to fix it."""

    exit_code = 2
