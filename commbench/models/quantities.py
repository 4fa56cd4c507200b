"""Counts and memory sizes as people write them: 7B parameters, 1.5e9, 125M; 80GB (1e9) or 80GiB (2^30)."""

import math
import re

from commbench.errors import CommbenchError

_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([KMBT]?)\s*$", re.IGNORECASE)
_COUNT_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_MEMORY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(GB|GiB|TB|TiB|MB|MiB)\s*$", re.IGNORECASE)
UNITS = {"GB": 10**9, "GiB": 2**30, "TB": 10**12, "TiB": 2**40, "MB": 10**6, "MiB": 2**20}


def parse_count(text: str, *, option: str) -> float:
    """7B → 7e9 (K, M, B, T are decimal: thousand, million, billion, trillion)."""
    match = _COUNT.match(str(text))
    if not match:
        raise CommbenchError(f"bad {option} {text!r}: write a count like 7B, 125M, 1.5e9 or 671B")
    value = float(match.group(1)) * _COUNT_SCALE[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise CommbenchError(f"{option} {text!r} must be a finite number above 0")
    return value


def parse_memory(text: str, *, option: str) -> float:
    """80GB → 80e9 bytes; 80GiB → 80·2^30 bytes. The unit is required: GB and GiB differ by 7 %."""
    match = _MEMORY.match(str(text))
    if not match:
        raise CommbenchError(f"bad {option} {text!r}: write a memory size with its unit, e.g. 80GB (1e9 B) or "
                             "80GiB (2^30 B)")
    unit = next(name for name in UNITS if name.lower() == match.group(2).lower())
    value = float(match.group(1)) * UNITS[unit]
    if not math.isfinite(value) or value <= 0:
        raise CommbenchError(f"{option} {text!r} must be a finite number above 0")
    return value
