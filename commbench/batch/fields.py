"""Free-text values a batch job carries (a suite's path, --out, a command): checked alike by the Slurm script and the
Kubernetes manifest writers, before either writes anything."""

import unicodedata

from commbench.errors import CommbenchError


def check_text_field(option: str, value: str) -> None:
    """A free-text value (a path, a command): not empty, and no control characters, which no file name or command
    needs and which would hide in a terminal, a log line or meta.json."""
    if not value.strip():
        raise CommbenchError(f"{option} {value!r} is empty; give a value or leave the option out")
    refuse_control_characters(option, value)


def refuse_control_characters(option: str, value: str) -> None:
    """Named before any other complaint: a newline or an escape sequence is what a user cannot see in the value."""
    bad = next((char for char in value if unicodedata.category(char) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        raise CommbenchError(f"{option} {value!r} holds the control character {bad!r}; remove it")
