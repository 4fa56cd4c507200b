"""Read a suite file (TOML) into resolved benches, refusing anything wrong before a rank starts.

A bench table's keys are the long options of its command without the dashes (`bucket-cap-mb = [1, 25]` is
`commbench ddp --bucket-cap-mb 1,25`): both go through the bench kind's options dataclass (benches/options.py) and
its resolve(), so a suite means exactly what the same command line means.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.bench_kind import Bench
from commbench.benches import COMMANDS
from commbench.benches.options import TARGET_KEYS, options_of, parse_options
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.shipped import shipped_suite, suite_names

if TYPE_CHECKING:
    from commbench.machine import Machine

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TOP_KEYS = ("description", *TARGET_KEYS, "bench")
"""backend, device and nproc are set once at the top of a suite: its benches share one launch, so the same ranks."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class SuiteBench:
    name: str
    """Also the bench's folder inside the suite's run folder."""
    command: str
    """The command that runs it (the table's `kind`): sweep, ddp, fsdp or zero."""
    bench: Bench


@dataclass(frozen=True)
class Suite:
    path: Path
    text: str
    description: str
    benches: list[SuiteBench]


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


def load_suite(name_or_path: str | Path, machine: Machine, *, overrides: dict[str, object] | None = None) -> Suite:
    """Parse and validate every bench for `machine` (this one, or Machine.for_job() for a Slurm job's nodes);
    overrides: backend/device/nproc given on the command line."""
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
        bench = _load_bench(path, number, table, target, machine)
        if bench.name in names:
            raise CommbenchError(f"{path}: two benches are named {bench.name!r}; give each a unique name = \"...\"")
        names.add(bench.name)
        benches.append(bench)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise CommbenchError(f"{path}: key 'description' must be a string")
    return Suite(path=path, text=text, description=description, benches=benches)


def _load_bench(path: Path, number: int, table: dict[str, object], target: dict[str, object], machine: Machine
                ) -> SuiteBench:
    command = table.get("kind")
    where = f"[[bench]] #{number}"
    if not isinstance(command, str) or command not in COMMANDS:
        raise CommbenchError(f"{path}: {where}: key 'kind' is {command!r}; choose from {', '.join(COMMANDS)}")
    name = table.get("name", command)
    if not isinstance(name, str) or not _NAME.match(name):
        raise CommbenchError(f"{path}: {where}: key 'name' {name!r} is not a folder name; use letters, digits, "
                             "'.', '_' and '-'")
    where = f"bench {name!r} ({command})"
    kind = COMMANDS[command]
    fields_by_key = {described.key: f.name for f, described in options_of(kind.options)}
    values = {}
    for key, value in table.items():
        if key in ("kind", "name"):
            continue
        if key in TARGET_KEYS:
            raise CommbenchError(f"{path}: {where}: key {key!r} belongs at the top of the suite (its benches share "
                                 "one launch, so they run on the same ranks); move it there")
        if key.replace("_", "-") not in fields_by_key:
            allowed = ", ".join(sorted(key for key in fields_by_key if key not in TARGET_KEYS))
            raise CommbenchError(f"{path}: {where}: unknown key {key!r}; allowed keys: {allowed}, kind, name")
        values[fields_by_key[key.replace("_", "-")]] = (key, value)
    values.update({fields_by_key[key]: (key, value) for key, value in target.items()})
    try:
        options = parse_options(kind.options, {field: value for field, (_, value) in values.items()})
    except CommbenchError as error:
        named = next((key for key, _ in values.values()
                      if re.search(rf"--{re.escape(key.replace('_', '-'))}(?![\w-])", str(error))), None)
        raise CommbenchError(f"{path}: {where}" + (f": key {named!r}" if named else "") + f": {error}") from None
    try:
        with warnings.catch_warnings(record=True) as raised:
            warnings.simplefilter("always", CommbenchWarning)
            bench = kind.resolve(options, machine)
    except CommbenchError as error:
        raise CommbenchError(f"{path}: {where}: {error} (a suite key is the option without --)") from None
    for caught in raised:  # a warning names the bench, as an error does
        is_ours = issubclass(caught.category, CommbenchWarning)
        warnings.warn(f"{path}: {where}: {caught.message}" if is_ours else caught.message, caught.category,
                      stacklevel=2)
    return SuiteBench(name=name, command=command, bench=bench)


def _check_keys(path: Path, where: str, table: dict[str, object], allowed: Collection[str]) -> None:
    for key in table:
        if key not in allowed:
            raise CommbenchError(f"{path}: {where}: unknown key {key!r}; allowed keys: {', '.join(allowed)}")
