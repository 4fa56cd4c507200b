"""`commbench suites [show NAME]`: the suites shipped with commbench, one line each, or one suite's TOML.

Light on purpose: it reads each file's top-level `description` and resolves no bench (that would import torch, and a
GPU suite such as nccl-tests would be refused on a laptop that only wants to read it)."""

import sys
from typing import Any

import click
from click.shell_completion import CompletionItem

from commbench.cli.json_output import emit_json, json_option
from commbench.errors import CommbenchError
from commbench.shipped import shipped_suite, suite_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def suites(ctx: click.Context, as_json: bool) -> None:
    """List the shipped suites (`commbench run NAME` runs one); `commbench suites show NAME` prints its TOML."""
    if ctx.invoked_subcommand is not None:
        return
    listed: list[dict[str, Any]] = [{"name": name, "description": _description(name), "path": shipped_suite(name)}
                                    for name in suite_names()]
    if as_json:
        emit_json({"suites": listed})
        return
    width = max((len(suite["name"]) for suite in listed), default=0)
    for suite in listed:
        click.echo(f"{suite['name']:<{width}}  {suite['description']}")


def complete_suite_name(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a shipped suite's name."""
    return [CompletionItem(name) for name in suite_names() if name.startswith(incomplete)]


def complete_suite(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of `commbench run SUITE`: a shipped suite's name, or a file."""
    return [*complete_suite_name(ctx, param, incomplete), CompletionItem(incomplete, type="file")]


@suites.command(name="show")
@click.argument("name", shell_complete=complete_suite_name)
@json_option
def show(name: str, as_json: bool) -> None:
    """Print the TOML of the shipped suite NAME (copy it to start a suite of your own)."""
    path = shipped_suite(name)
    if path is None:
        raise CommbenchError(f"no shipped suite {name!r}; the shipped suites are {', '.join(suite_names())}")
    text = path.read_text(encoding="utf-8")
    if as_json:
        emit_json({"name": name, "description": _description(name), "path": path, "text": text})
    else:
        click.echo(text, nl=not text.endswith("\n"))


def _description(name: str) -> str:
    """The suite's `description = "..."` line (every shipped suite has one; `commbench run` records it)."""
    path = shipped_suite(name)
    assert path is not None  # callers pass a shipped suite's name
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return str(data.get("description", ""))
