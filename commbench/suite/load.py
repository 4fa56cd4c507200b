"""Read a suite file (TOML) into resolved bench jobs, refusing anything wrong before a rank starts.

A bench table's keys are the long options of its command without the dashes (`bucket-cap-mb = [1, 25]` is
`commbench ddp --bucket-cap-mb 1,25`), so a suite means exactly what the same command line means: the values go
through the command's own option parsing and validation.
"""

import contextlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from commbench.cli.options import RUN_OPTION_NAMES
from commbench.cli.run_job import BenchJob
from commbench.errors import CommbenchError
from commbench.shipped import shipped_suite, suite_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TARGET_KEYS = ("backend", "device", "nproc")
"""Set once at the top of a suite: its benches share one launch, so they run on the same ranks."""
TOP_KEYS = ("description", *TARGET_KEYS, "bench")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class SuiteBench:
    name: str
    """Also the bench's folder inside the suite's run folder."""
    kind: str
    """The command that runs it: sweep, ddp, fsdp or zero."""
    bench: BenchJob


@dataclass(frozen=True)
class Suite:
    path: Path
    text: str
    description: str
    benches: list[SuiteBench]


def bench_commands() -> dict[str, click.Command]:
    from commbench.cli.sweep import sweep
    from commbench.cli.train import ddp, fsdp, zero

    return {"sweep": sweep, "ddp": ddp, "fsdp": fsdp, "zero": zero}


def find_suite(name_or_path: str | Path) -> Path:
    """A path to a .toml file, or the name of a suite shipped in the package (default, cpu-ci, ...; see shipped.py)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_suite(str(name_or_path))
    if shipped is not None:
        return shipped
    names = ", ".join(suite_names()) or "none found"
    raise CommbenchError(f"suite {str(name_or_path)!r} not found: pass a .toml file or a shipped suite name "
                         f"({names})")


def load_suite(name_or_path: str | Path, *, overrides: dict | None = None, machine=contextlib.nullcontext) -> Suite:
    """Parse and validate every bench (overrides: backend/device/nproc given on the command line). machine: a
    context in which options resolve as on the machines that will run the suite (backends.assumed_job)."""
    path = find_suite(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommbenchError(f"{path}: cannot be read as a UTF-8 text file ({error}); pass a TOML suite") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CommbenchError(f"{path}: not valid TOML ({error}); fix the syntax there") from None
    _check_keys(path, "the top level", data, TOP_KEYS)
    target = {key: data[key] for key in TARGET_KEYS if key in data}
    target.update({key: value for key, value in (overrides or {}).items() if value is not None})
    tables = data.get("bench")
    if not isinstance(tables, list) or not tables or not all(isinstance(table, dict) for table in tables):
        raise CommbenchError(f"{path}: no [[bench]] tables; add at least one, e.g. [[bench]] kind = \"sweep\"")
    benches, names = [], set()
    for number, table in enumerate(tables, start=1):
        with machine():
            bench = _load_bench(path, number, table, target)
        if bench.name in names:
            raise CommbenchError(f"{path}: two benches are named {bench.name!r}; give each a unique name = \"...\"")
        names.add(bench.name)
        benches.append(bench)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise CommbenchError(f"{path}: key 'description' must be a string")
    return Suite(path=path, text=text, description=description, benches=benches)


def _load_bench(path: Path, number: int, table: dict, target: dict) -> SuiteBench:
    commands = bench_commands()
    kind = table.get("kind")
    where = f"[[bench]] #{number}"
    if not isinstance(kind, str) or kind not in commands:
        raise CommbenchError(f"{path}: {where}: key 'kind' is {kind!r}; choose from {', '.join(commands)}")
    name = table.get("name", kind)
    if not isinstance(name, str) or not _NAME.match(name):
        raise CommbenchError(f"{path}: {where}: key 'name' {name!r} is not a folder name; use letters, digits, "
                             "'.', '_' and '-'")
    where = f"bench {name!r} ({kind})"
    command = commands[kind]
    options = {key: value for key, value in table.items() if key not in ("kind", "name")}
    for key in options:
        if key in TARGET_KEYS:
            raise CommbenchError(f"{path}: {where}: key {key!r} belongs at the top of the suite (its benches share "
                                 "one launch, so they run on the same ranks); move it there")
    params = _options_by_key(command)
    allowed = sorted(params) + ["kind", "name"]
    _check_keys(path, where, options, allowed)
    argv = [arg for key, value in {**options, **target}.items()
            for arg in _argv(path, where, key, value, params[_normal(key)])]
    try:
        ctx = command.make_context(kind, argv)
    except click.UsageError as error:
        param = getattr(error, "param", None)
        key = param.opts[-1].lstrip("-") if param is not None else None
        raise CommbenchError(f"{path}: {where}" + (f": key {key!r}" if key else "") +
                             f": {error.format_message()}") from None
    build = command.callback.build
    try:
        bench = build(**{name: value for name, value in ctx.params.items() if name not in RUN_OPTION_NAMES})
    except CommbenchError as error:
        raise CommbenchError(f"{path}: {where}: {error} (a suite key is the option without --)") from None
    return SuiteBench(name=name, kind=kind, bench=bench)


def _normal(key: str) -> str:
    return key.replace("_", "-")


def _options_by_key(command: click.Command) -> dict[str, click.Option]:
    """The command's options by long name without dashes, except the run-wide ones (set on `commbench run`)."""
    keys = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in RUN_OPTION_NAMES or param.name == "help":
            continue
        longs = [opt for opt in param.opts if opt.startswith("--")]
        if longs:
            keys[longs[0][2:]] = param
    return keys


def _check_keys(path: Path, where: str, table: dict, allowed) -> None:
    for key in table:
        if _normal(key) not in allowed and key not in allowed:
            raise CommbenchError(f"{path}: {where}: unknown key {key!r}; allowed keys: {', '.join(allowed)}")


def _argv(path: Path, where: str, key: str, value, param: click.Option) -> list[str]:
    """The command-line form of one key: flags for booleans of flag options, repeats for lists."""
    flag = f"--{_normal(key)}"
    if param.is_flag:
        if not isinstance(value, bool):
            raise CommbenchError(f"{path}: {where}: key {key!r} is a switch; write {key} = true or false")
        if param.secondary_opts:  # --check/--no-check
            return [flag if value else param.secondary_opts[0]]
        return [flag] if value else []
    values = value if isinstance(value, list) else [value]
    if len(values) > 1 and not param.multiple:
        raise CommbenchError(f"{path}: {where}: key {key!r} takes one value, got a list of {len(values)}")
    argv = []
    for item in values:
        if isinstance(item, (dict, list)) or not isinstance(item, (str, int, float, bool)):
            raise CommbenchError(f"{path}: {where}: key {key!r} takes strings or numbers, got {item!r}")
        argv += [flag, str(item).lower() if isinstance(item, bool) else str(item)]
    return argv
