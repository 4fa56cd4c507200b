"""`--json` for every command that has it: one JSON document on stdout, nothing else there (progress, notes and
errors go to stderr), strict JSON (NaN and infinities become null, which Python's json would write as the invalid
tokens NaN/Infinity), numpy and pandas scalars as plain numbers."""

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

CommandT = TypeVar("CommandT", bound=Callable[..., Any])
"""A command's function, as Click's decorators take and give it."""

JSON_HELP = "Print one JSON document on stdout (progress and notes on stderr)."


def json_option(function: CommandT) -> CommandT:
    """--json, passed to the command as as_json."""
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(function)


def plain(value: object) -> object:
    """value with every number JSON can hold as such, NaN/inf as None, paths as strings, frames as row lists."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame, without importing pandas
        return plain(value.to_dict(orient="records"))
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy / pandas scalars
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas' missing markers
        return None
    return str(value)


def emit_json(document: object) -> None:
    """Print document as the command's only stdout."""
    click.echo(json.dumps(plain(document), indent=2, allow_nan=False))

