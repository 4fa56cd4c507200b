"""Bench options as typed dataclasses. Each field declares its flag, help, value type and choices once; the command
line (cli/bench.py generates the Click options from them) and TOML suites (suite/load.py) both hand raw values to
parse_options(), so a suite key means exactly what the flag means and every value is checked in one place.

Semantic checks that relate options to each other or to the machine (a rank count that divides, a collective the
backend can run) are the bench kind's resolve(); this module only checks each value on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from commbench.errors import CommbenchError
from commbench.names import AUTO, BACKEND_CHOICES, DEVICE_CHOICES, BackendChoice, DeviceChoice

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

OptionsT = TypeVar("OptionsT", bound="DataclassInstance")
"""An options dataclass."""
Number = TypeVar("Number", int, float)

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    """Command-line flags, e.g. ("-c", "--collective"); the long one without dashes is the suite key."""
    help: str
    type: type[str | int | float | bool] = str
    """Type of one value: str, int, float or bool."""
    many: bool = False
    """Repeatable and comma-separated on the command line, a list in a suite; the field holds a tuple."""
    choices: tuple[str, ...] | None = None
    switch: bool = False
    """A flag without a value (--profile); negatable adds --no-NAME (--check/--no-check)."""
    negatable: bool = False
    show_default: bool = False
    lowest: int | float | None = None
    """The smallest value that means something (int and float options): --layers 0 is no model, not a default."""
    above_zero: bool = False
    """Floats only: the value must be above 0 (a duration, a rate, a size); 0 would never fire or never end."""
    unit: str = ""
    """What the number counts, for messages: seconds, MiB, percent."""
    positional: bool = False
    """On the command line the values are arguments (commbench replay TRACE...), not a flag; the suite key stays
    the flag's name."""
    arguments: bool = False
    """The values may also be given as the command's arguments (`commbench sweep all_reduce all_gather` is
    `commbench sweep -c all_reduce,all_gather`), as `commbench perf COLLECTIVE` takes them; the flag stays. Both
    given, they must name the same values (arguments_and_flag)."""
    aliases: tuple[tuple[str, str], ...] = ()
    """(another name, the choice it means): nccl-tests' type names for --dtype (float → float32)."""
    parse: Callable[[str], object] | None = None
    """str options: turns one value's text into the field's value, or raises CommbenchError naming the flag (a word
    or a number, as --bucket-cap-mb default|25), so a bad value is refused while the options are read."""

    @property
    def flag(self) -> str:
        return next(flag for flag in self.flags if flag.startswith("--"))

    @property
    def key(self) -> str:
        """The suite key: the long flag without its dashes."""
        return self.flag[2:]


def option(*flags: str, help: str, default: object = None, **settings: Any) -> Any:
    """A dataclass field that is also a command-line option and a suite key. Typed Any, as dataclasses.field is, so
    `name: int = option(...)` checks; settings are Option's fields, by name."""
    described = Option(flags, help, **settings)
    if described.many and default is None:
        default = ()
    return field(default=default, metadata={"option": described})


def options_of(cls: type[DataclassInstance]) -> list[tuple[Field[Any], Option]]:
    """The fields of an options dataclass that are options, in declaration order."""
    return [(f, f.metadata["option"]) for f in fields(cls) if "option" in f.metadata]


def default_of(f: Field[Any]) -> object:
    return None if f.default is MISSING else f.default


def parse_options(cls: type[OptionsT], values: Mapping[str, object]) -> OptionsT:
    """The options dataclass from raw values by field name (strings, numbers, booleans or lists of them, as the
    command line or TOML gives them). An absent value (None, or no repeat of a repeatable flag) keeps the field's
    default; a value given empty (`-c ''`, `collective = []`, `--params ''`) is refused, never read as the default."""
    parsed: dict[str, object] = {}
    for f, described in options_of(cls):
        value = values.get(f.name)
        if value is None or (described.many and isinstance(value, tuple) and not value):
            continue  # the command line's "not given": Click hands an unused repeatable option over as ()
        parsed[f.name] = _convert(described, value)
    return cls(**parsed)


def arguments_name(f: Field[Any]) -> str:
    """The command-line parameter that holds an `arguments` option's values given as arguments."""
    return f"{f.name}_arguments"


def arguments_and_flag(cls: type[DataclassInstance], values: Mapping[str, object]) -> dict[str, object]:
    """The raw command-line values with each `arguments` option's arguments moved into its field: the arguments
    alone, the flag alone, or both naming the same values (in any order or spelling of the list); both naming
    different values is refused in one line, since the run could only take one of them."""
    merged = dict(values)
    for f, described in options_of(cls):
        if not described.arguments:
            continue
        given = _items(merged.pop(arguments_name(f), None))
        flagged = _items(merged.get(f.name))
        if not given:
            continue
        if flagged:
            as_arguments, as_flag = (_listed(value) for value in (given, flagged))
            if set(as_arguments) != set(as_flag):
                raise CommbenchError(f"{' '.join(as_arguments)} given as arguments and {described.flag} "
                                     f"{','.join(as_flag)} name different {described.key}s; give them one way: "
                                     f"the arguments or {described.flag}")
        merged[f.name] = given
    return merged


def _items(value: object) -> tuple[object, ...]:
    """A repeatable option's raw values (Click hands them over as a tuple; None or nothing: none)."""
    return tuple(value) if isinstance(value, (list, tuple)) else ()


def _listed(values: Iterable[object]) -> list[str]:
    """Raw repeatable values as the list they name ("a,b" and "c" → a, b, c)."""
    return [part.strip() for value in values for part in str(value).split(",") if part.strip()]


def _convert(described: Option, value: object) -> object:
    if described.switch:
        if not isinstance(value, bool):
            raise CommbenchError(f"{described.flag} is a switch: give true or false, not {value!r}")
        return value
    if described.many:
        items = value if isinstance(value, (list, tuple)) else [value]
        # "a,b" means two values on the command line; a suite string may use the same comma form
        items = [part.strip() if isinstance(part, str) else part
                 for item in items for part in (item.split(",") if isinstance(item, str) else [item])
                 if not (isinstance(part, str) and not part.strip())]
        if not items:
            raise CommbenchError(f"{described.flag} {_shown(value)} names no value; give at least one"
                                 f"{_example(described)} or leave the option out for its default")
        return tuple(_one(described, item) for item in items)
    if isinstance(value, (list, tuple)):
        raise CommbenchError(f"{described.flag} takes one value, got a list of {len(value)}")
    return _one(described, value)


def _one(described: Option, value: object) -> object:
    """One value of an option, read by its kind: the option's own parser, a boolean, a number or a choice."""
    text = _value_text(described, value)
    if described.parse is not None:
        return described.parse(text)
    if described.type is bool:
        return _boolean(described, text)
    if described.type is int:
        return _whole_number(described, text)
    if described.type is float:
        return _finite_number(described, text)
    return _choice(described, text)


def _value_text(described: Option, value: object) -> str:
    """A value as text (a boolean as true or false), refusing what is no single string or number, and nothing."""
    if isinstance(value, (dict, list, tuple)) or not isinstance(value, (str, int, float, bool)):
        raise CommbenchError(f"{described.flag} takes strings or numbers, got {value!r}")
    text = (str(value).lower() if isinstance(value, bool) else str(value)).strip()
    if not text:
        raise CommbenchError(f"{described.flag} is given empty; give a value{_example(described)} or leave the option "
                             "out for its default")
    return text


def _boolean(described: Option, text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise CommbenchError(f"{described.flag} {text!r} is not true or false")


def _whole_number(described: Option, text: str) -> int:
    try:
        return _in_range(described, text, int(text))
    except ValueError:
        raise CommbenchError(f"{described.flag} {text!r} is not a whole number") from None


def _finite_number(described: Option, text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise CommbenchError(f"{described.flag} {text!r} is not a number") from None
    if not math.isfinite(number):  # TOML and float() both read nan and inf: no timeout, rate or size means them
        raise CommbenchError(f"{described.flag} {text!r} is not a finite number; it must be {_allowed(described)}")
    return _in_range(described, text, number)


def _choice(described: Option, text: str) -> str:
    """A string option's value under its own name (an alias replaced), refused when it is not one of its choices."""
    text = dict(described.aliases).get(text, text)
    if described.choices is not None and text not in described.choices:
        raise CommbenchError(f"unknown {described.flag} {text!r}; choose from {', '.join(described.choices)}")
    return text


def _in_range(described: Option, text: str, number: Number) -> Number:
    too_low = described.lowest is not None and number < described.lowest
    if too_low or (described.above_zero and number <= 0):
        raise CommbenchError(f"{described.flag} {text} must be {_allowed(described)}")
    return number


def _allowed(described: Option) -> str:
    """What the option takes, for its messages: "above 0 seconds", "1 or more", "a finite number"."""
    unit = f" {described.unit}" if described.unit else ""
    if described.above_zero:
        return f"above 0{unit}"
    if described.lowest is not None:
        return f"{described.lowest:g} or more{unit}"
    return "a finite number" if described.type is float else "a whole number"


def _example(described: Option) -> str:
    """ " (e.g. --dtype float32)" where an example is known: the first choice, or a number of the option's type."""
    if described.choices:
        example = described.choices[0]
    elif described.type in (int, float, bool):
        example = {int: "1", float: "1.5", bool: "true"}[described.type]
    else:
        return ""
    return f" (e.g. {described.flag} {example})"


def _shown(value: object) -> str:
    """The empty value as it was given: '' (or ',') on the command line, [] in a suite."""
    if isinstance(value, list):
        return "[]" if not value else repr(value)
    if isinstance(value, tuple):
        return repr(",".join(str(item) for item in value))
    return repr(value)


@dataclass(frozen=True, kw_only=True)
class TargetOptions:
    """Where a bench runs; a suite sets these once at its top (its benches share one launch)."""

    backend: BackendChoice = option("--backend", choices=BACKEND_CHOICES, default=AUTO, show_default=True,
                          help="Process-group backend; auto = nccl on cuda, else gloo.")
    device: DeviceChoice = option("--device", choices=DEVICE_CHOICES, default=AUTO, show_default=True,
                         help="Tensor device; auto = cuda when a GPU is visible.")
    nproc: int | None = option("--nproc", type=int,  # resolve_target() checks it against the machine
                               help="Ranks on this machine [default: every visible GPU, else 2].")
    oversubscribe: bool = option("--oversubscribe", switch=True, default=False,
                                 help="Allow more CPU ranks than this machine's cores (they time-share the cores, so "
                                      "times are slower; at most 8 ranks per core).")
    bind_cores: bool = option("--bind-cores", switch=True, default=False,
                              help="Pin each launched CPU rank's calling thread to a core of its own (its process "
                                   "group's threads stay free): steadier small-message times on a shared machine.")


TARGET_KEYS = tuple(described.key for _, described in options_of(TargetOptions))
