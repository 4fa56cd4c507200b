"""Message-size specs (`1K:64M:x2`, `1K:1M:+256K`, `1K,4K,1M`) and byte formatting; K/M/G are 1024-based."""

import re

from commbench.errors import CommbenchError

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)
_MAX_POINTS = 10_000

_SPEC_HELP = "use min:max:xF (geometric), min:max:+STEP (linear) or a comma list, e.g. 1K:64M:x2"


def parse_size(text: str) -> int:
    """One size in bytes: `4096`, `4K`, `4KiB`, `16M`, `1G` (all 1024-based)."""
    match = _SIZE.match(text)
    if not match:
        raise CommbenchError(f"bad size {text!r}: write a whole number of bytes with an optional K, M or G "
                             "(1024-based), e.g. 64K")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_size_spec(spec: str) -> tuple[int, ...]:
    """All sizes in bytes that a spec names, ascending and without repeats."""
    spec = spec.strip()
    if not spec:
        raise CommbenchError(f"empty --sizes: {_SPEC_HELP}")
    if ":" in spec:
        sizes = _range_sizes(spec)
    else:
        sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    if not sizes:
        raise CommbenchError(f"--sizes {spec!r} names no size: {_SPEC_HELP}")
    if min(sizes) <= 0:
        raise CommbenchError(f"--sizes {spec!r} contains 0 bytes: every size must be at least one element")
    return tuple(sorted(set(sizes)))


def _range_sizes(spec: str) -> list[int]:
    parts = spec.split(":")
    if len(parts) != 3:
        raise CommbenchError(f"bad --sizes {spec!r}: {_SPEC_HELP}")
    low, high, step = parse_size(parts[0]), parse_size(parts[1]), parts[2].strip()
    if low > high:
        raise CommbenchError(f"bad --sizes {spec!r}: min {low} B is above max {high} B; swap them")
    if step.lower().startswith("x"):
        try:
            factor = float(step[1:])
        except ValueError:
            factor = 0.0
        if factor <= 1:
            raise CommbenchError(f"bad --sizes {spec!r}: the factor after 'x' must be a number above 1, e.g. x2")
        sizes, size = [], float(low)
        while round(size) <= high:
            sizes.append(round(size))
            size *= factor
            _check_count(spec, sizes)
        return sizes
    if step.startswith("+"):
        increment = parse_size(step[1:])
        if increment <= 0:
            raise CommbenchError(f"bad --sizes {spec!r}: the step after '+' must be above 0, e.g. +256K")
        sizes = list(range(low, high + 1, increment))
        _check_count(spec, sizes)
        return sizes
    raise CommbenchError(f"bad --sizes {spec!r}: the third part must start with 'x' (factor) or '+' (step); "
                         f"{_SPEC_HELP}")


def _check_count(spec: str, sizes: list[int]) -> None:
    if len(sizes) > _MAX_POINTS:
        raise CommbenchError(f"--sizes {spec!r} names more than {_MAX_POINTS} sizes; use a larger factor or step")


def format_bytes(size: int) -> str:
    """A byte count the way the CLI accepts it back: 1 KiB, 16 MiB, 1000 B."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"
