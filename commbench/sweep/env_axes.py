"""Environment axes (`--env-axis NAME=V1,V2`, `--nccl-algo`, `--nccl-proto`): the environment variables a sweep
varies, each combination its own launch, since NCCL reads its environment when it creates a communicator.

A combination is named by its label, the `env` column of every row it measured: `NAME=VALUE` pairs sorted by name and
joined by spaces (`NCCL_ALGO=tree NCCL_PROTO=simple`), empty for the environment the sweep was started in. The label is
part of a row's identity: compare joins rows of the same label, and fits and tune keep them apart."""

import itertools
import re

from commbench.errors import CommbenchError

NCCL_ALGO, NCCL_PROTO = "NCCL_ALGO", "NCCL_PROTO"
NCCL_PREFIX = "NCCL_"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_LABEL = ""
Axes = tuple[tuple[str, tuple[str, ...]], ...]
"""The environment axes: each variable's name and the values it takes, in the order given."""
"""The label of rows measured in the environment the sweep was started in (no axis)."""


def parse_axes(items: tuple[str, ...], *, flag: str = "--env-axis") -> tuple[tuple[str, tuple[str, ...]], ...]:
    """((NAME, values), ...) in the order given, from `NAME=V1,V2` items. The options reader splits commas first, so a
    value without `=` continues the axis before it (`NAME=V1`, `V2`)."""
    axes: dict[str, list[str]] = {}
    last = None
    for item in items:
        name, equals, value = item.partition("=")
        if equals:
            name = name.strip()
            if not ENV_NAME.match(name):
                raise CommbenchError(f"{flag} {item!r}: {name!r} is not an environment variable name; give "
                                     "NAME=V1,V2 (letters, digits and _)")
            if name in axes:
                raise CommbenchError(f"{flag}: {name} is given twice; give its values once, comma-separated "
                                     f"({name}=V1,V2)")
            axes[name], last = [], name
        elif last is None:
            raise CommbenchError(f"{flag} {item!r} names no variable; give NAME=V1,V2, e.g. {flag} "
                                 "NCCL_ALGO=ring,tree")
        value = value.strip() if equals else item.strip()
        if not value or any(character.isspace() for character in value):
            raise CommbenchError(f"{flag} {item!r}: an empty value or one with spaces; give NAME=V1,V2 with every "
                                 "value written, without spaces")
        assert last is not None
        if value in axes[last]:
            raise CommbenchError(f"{flag}: {last}={value} is given twice; give each value once")
        axes[last].append(value)
    return tuple((name, tuple(values)) for name, values in axes.items())


def with_shortcuts(axes: tuple[tuple[str, tuple[str, ...]], ...], *, nccl_algo: tuple[str, ...],
                   nccl_proto: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The axes with --nccl-algo and --nccl-proto added as NCCL_ALGO and NCCL_PROTO (each refused beside an
    --env-axis of the same variable)."""
    added = list(axes)
    for name, values, flag in ((NCCL_ALGO, nccl_algo, "--nccl-algo"), (NCCL_PROTO, nccl_proto, "--nccl-proto")):
        if not values:
            continue
        if any(existing == name for existing, _ in axes):
            raise CommbenchError(f"{flag} and --env-axis {name}=... both set {name}; give one of them")
        if len(set(values)) != len(values):
            raise CommbenchError(f"{flag}: a value is given twice; give each value once")
        added.append((name, tuple(values)))
    return tuple(added)


def combinations(axes: Axes) -> list[dict[str, str]]:
    """Every combination of the axes' values (their cross product, the first axis slowest); [{}] without axes."""
    if not axes:
        return [{}]
    names = [name for name, _ in axes]
    return [dict(zip(names, values)) for values in itertools.product(*(values for _, values in axes))]


def label_of(environment: dict[str, str]) -> str:
    """The `env` label of a combination: NAME=VALUE pairs sorted by name, joined by spaces."""
    return " ".join(f"{name}={environment[name]}" for name in sorted(environment))


def parse_label(label: object) -> dict[str, str]:
    """The combination an `env` label names ({} for the default environment, or a cell left empty)."""
    if not isinstance(label, str) or not label.strip():
        return {}
    return dict(pair.split("=", 1) for pair in label.split())


def nccl_names(axes: Axes) -> list[str]:
    """The axes' variables that only NCCL reads (NCCL_*): they change nothing on a gloo run."""
    return [name for name, _ in axes if name.startswith(NCCL_PREFIX)]
