"""Quantities as people write them: message sizes and memory in bytes, parameter counts; one set of suffix rules.

| suffix                    | means                    | where                                        |
|---------------------------|--------------------------|----------------------------------------------|
| none, `B`                 | bytes                    | `--sizes` (memory needs a unit)              |
| `K`, `M`, `G`, `T`        | 2^10, 2^20, 2^30, 2^40 B | `--sizes`, `--fit`, `--memory-budget`        |
| `KiB`, `MiB`, `GiB`, `TiB`| 2^10, 2^20, 2^30, 2^40 B | `--sizes`, `--fit`, `--memory-budget`        |
| `KB`, `MB`, `GB`, `TB`    | 1e3, 1e6, 1e9, 1e12 B    | `--fit`, `--memory-budget` (refused in sizes)|
| `K`, `M`, `B`, `T`        | 1e3, 1e6, 1e9, 1e12      | `--params` (a count: `B` is billion)         |

Bare K/M/G follow nccl-tests (`-e 8G` is 8 GiB); with a B they are SI, as disks and GPU data sheets print them.
`commbench perf` reads its -b/-e/-i as nccl-tests does (parse_nccl_tests_size): the letter alone counts (8KB is
8 KiB there), there is no T and no B, and a fraction of a byte is cut off (0.1K is 102).
Message sizes refuse the SI forms: commbench once read `64KB` as 65536 B there, and a size that silently changed
would also change every row's identity against older runs; `64K`, `64KiB` or `64000` say it without doubt.
Letters are case-insensitive; only the `i` decides between 1024 and 1000. Sizes are whole bytes (`1.5K` is 1536,
`0.1K` is refused); memory may be fractional (`1.5GB`) but must name its unit, because GB and GiB differ by 7 %.
This module imports nothing heavy: `commbench model memory` must start in a blink.
"""

import math
import re
from decimal import Decimal
from fractions import Fraction

from commbench.errors import CommbenchError

# 64, 1.5, .5 and 1. (nccl-tests' strtod reads "1." too); the exponent capped: 1e99999999 would be a huge integer
_NUMBER = r"((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]{1,4})?)"
_BYTES = re.compile(rf"^\s*{_NUMBER}\s*(?:([KMGT])(i?B)?|(B))?\s*$", re.IGNORECASE)
_COUNT = re.compile(rf"^\s*{_NUMBER}\s*([KMBT]?)\s*$", re.IGNORECASE)

# Every byte suffix and its scale: "" and "B" are bytes, X and XiB are 1024-based, XB is 1000-based.
_BYTE_SCALE = {"": 1, "B": 1}
for _power, _letter in enumerate("KMGT", start=1):
    _BYTE_SCALE[_letter] = _BYTE_SCALE[f"{_letter}iB"] = 1024**_power
    _BYTE_SCALE[f"{_letter}B"] = 1000**_power
UNITS = {name: _BYTE_SCALE[name] for name in ("GB", "GiB", "TB", "TiB", "MB", "MiB")}  # `model memory --units`
_SI_UNITS = {f"{letter}B" for letter in "KMGT"}
_COUNT_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}

_MAX_POINTS = 10_000
"""The most message sizes one --sizes may name: counted before any list is built (1:64M:+1 would be 64 Mi sizes)."""
_MAX_SIZE = 2**50
"""1 PiB: no device holds a larger message; above it a geometric range's floats overflow before they end."""
_SPEC_HELP = ("use MIN:MAX:xF (geometric, e.g. 1M:16M:x2), MIN:MAX:+STEP (linear, e.g. 1M:16M:+1M), MIN:MAX "
              "(doubling) or a comma list (e.g. 1K,64K,1M)")
_RANGE_WORDS = re.compile(r"^\s*(\S+?)\s*(?:\.{2,3}|…|-|–|—|~|\bto\b)\s*(\S+)\s*$", re.IGNORECASE)
"""A range written as other tools and prose write it: 1M..16M, 1M...16M, 1M-16M, 1M–16M, 1M~16M, 1M to 16M."""
_SIZE_HELP = "write a whole number of bytes with an optional unit, e.g. 64K: K, M, G (or KiB, MiB, GiB) are 1024-based"
_MEMORY_HELP = "write a memory size with its unit, e.g. 80GB (1e9 B), 80GiB or 80G (2^30 B)"


def _parse_bytes(text: str) -> tuple[int, int, str] | None:
    """The exact byte count of `text` as numerator / denominator, and the unit as written ("" for none); None when
    it is not a byte quantity. Exact, so that 1.1MB is a whole 1100000 B rather than 1100000.0000000002."""
    match = _BYTES.match(str(text))
    if not match:
        return None
    number, letter, suffix, bare_b = match.groups()
    if letter:
        unit = letter.upper() + ("iB" if suffix and suffix.lower() == "ib" else "B" if suffix else "")
    else:
        unit = "B" if bare_b else ""
    mantissa, _, exponent = number.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = int(whole + fraction or "0")
    power = int(exponent or 0) - len(fraction)
    numerator = digits * _BYTE_SCALE[unit] * 10 ** max(power, 0)
    return numerator, 10 ** max(-power, 0), unit


def parse_size(text: str) -> int:
    """One message size in whole bytes: `4096`, `64K` = `64KiB` = 65536 (`64KB` is refused: write 64000)."""
    parsed = _parse_bytes(text)
    if parsed is None:
        raise CommbenchError(f"bad size {text!r}: {_SIZE_HELP}")
    numerator, denominator, unit = parsed
    if unit in _SI_UNITS:
        number = text.strip()[:-2].strip()
        raise CommbenchError(f"bad size {text!r}: message sizes do not take SI units; write {number}{unit[0]} or "
                             f"{number}{unit[0]}iB ({unit[0]} = 1024-based, as nccl-tests), or the byte count")
    if numerator % denominator:
        raise CommbenchError(f"bad size {text!r}: not a whole number of bytes; {_SIZE_HELP}")
    return numerator // denominator


_NCCL_TESTS_UNITS = ("", "K", "M", "G")
"""The units nccl-tests' parsesize (src/common.cu) knows: bytes, or K, M, G, all 1024-based."""


def parse_nccl_tests_size(text: str) -> int | None:
    """A size as nccl-tests' -b, -e and -i read it (parsesize: strtod, then the letter after the number): K, M or G
    1024-based however the B after it is written (8K = 8KB = 8KiB = 8192), a fraction of a byte cut off (1.5K =
    1536, 0.1K = 102); None where nccl-tests reads no size (T, a bare B, a negative number, other words)."""
    parsed = _parse_bytes(text)
    if parsed is None:
        return None
    numerator, denominator, unit = parsed
    letter = unit[:1] if unit != "B" else "B"
    if letter not in _NCCL_TESTS_UNITS:
        return None
    # the quantity again with the letter 1024-based (the SI units' scale undone): exact, then cut to whole bytes
    return int(Fraction(numerator * _BYTE_SCALE[letter], denominator * _BYTE_SCALE[unit]))


def parse_size_spec(spec: str) -> tuple[int, ...]:
    """All sizes in bytes that a spec names, ascending and without repeats."""
    spec = spec.strip()
    if not spec:
        raise CommbenchError(f"empty --sizes: {_SPEC_HELP}")
    _refuse_other_range_forms(spec)
    if ":" in spec:
        sizes = _range_sizes(spec)
    else:
        parts = [part for part in spec.split(",") if part.strip()]
        _check_count(spec, len(parts))
        sizes = [_listed_size(spec, part) for part in parts]
        _check_largest(spec, max(sizes, default=0))
    if not sizes:
        raise CommbenchError(f"--sizes {spec!r} names no size: {_SPEC_HELP}")
    if min(sizes) <= 0:
        raise CommbenchError(f"--sizes {spec!r} contains 0 bytes: every size must be at least one element")
    return tuple(sorted(set(sizes)))


def _range_sizes(spec: str) -> list[int]:
    parts = spec.split(":")
    if len(parts) == 2:  # min:max doubles, as nccl-tests users write -b MIN -e MAX -f 2
        parts.append("x2")
    if len(parts) != 3:
        raise CommbenchError(f"bad --sizes {spec!r}: {_SPEC_HELP}")
    low, high, step = _size_of(spec, parts[0]), _size_of(spec, parts[1]), parts[2].strip()
    if low < 1:  # 0 times any factor stays 0: the range would never reach max
        raise CommbenchError(f"bad --sizes {spec!r}: min must be at least 1 B; every size must be at least one "
                             "element")
    if low > high:
        raise CommbenchError(f"bad --sizes {_brief(spec)!r}: min {low} B is above max {high} B; swap them")
    _check_largest(spec, high)
    if step.lower().startswith("x"):
        try:
            factor = float(step[1:])
        except ValueError:
            factor = math.nan
        if not (math.isfinite(factor) and factor > 1):  # nan > 1 is False too: "xnan" is refused here
            raise CommbenchError(f"bad --sizes {spec!r}: the factor after 'x' must be a finite number above 1, "
                                 "e.g. x2")
        # counted before the list is built: x1.0000001 would otherwise make millions of sizes first
        _check_count(spec, math.floor((math.log(high) - math.log(low)) / math.log(factor) + 1e-9) + 1)
        sizes, size = [], float(low)
        while round(size) <= high:
            sizes.append(round(size))
            size *= factor
        return sizes
    if step.startswith("+"):
        increment = _size_of(spec, step[1:])
        if increment <= 0:
            raise CommbenchError(f"bad --sizes {spec!r}: the step after '+' must be above 0, e.g. +256K")
        _check_count(spec, (high - low) // increment + 1)  # before range(): 1:64M:+1 would be 64 Mi integers
        return list(range(low, high + 1, increment))
    guess = _factor_guess(step)
    meant = f"; for a factor write {parts[0].strip()}:{parts[1].strip()}:x{guess}" if guess else ""
    raise CommbenchError(f"bad --sizes {spec!r}: the third part must start with 'x' (factor) or '+' (step){meant}; "
                         f"{_SPEC_HELP}")


def _factor_guess(step: str) -> str | None:
    """The factor a third part without its 'x' means (nccl-tests' `-f 2` is 2, `*2` is x2); None where it names
    none."""
    text = step.strip().lstrip("*×").strip()
    try:
        factor = float(text)
    except ValueError:
        return None
    return text if math.isfinite(factor) and factor > 1 else None


def _listed_size(spec: str, part: str) -> int:
    """One size of a comma list; a part that is no quantity at all is named with the forms --sizes takes."""
    if _parse_bytes(part) is None:
        raise CommbenchError(f"--sizes {_brief(spec)!r}: bad size {part.strip()!r}: {_SPEC_HELP}; each size is "
                             f"bytes with an optional K, M, G (1024-based)")
    return _size_of(spec, part)


def _refuse_other_range_forms(spec: str) -> None:
    """A range written as other tools and prose write it (1M..16M, 1M-16M, 1M to 16M, 1M..16M:x4) is refused with
    the spec --sizes reads for it: MIN:MAX:xF, the factor 2 (nccl-tests' -f 2) unless a step follows."""
    head, _, step = spec.partition(":")
    ranged = _RANGE_WORDS.match(head)
    if ranged is None or _parse_bytes(head) is not None or ":" in step:
        return
    low, high = (end.strip() for end in ranged.groups())
    low_bytes, high_bytes = _parse_bytes(low), _parse_bytes(high)
    if low_bytes is None or high_bytes is None:
        return
    if Fraction(*low_bytes[:2]) > Fraction(*high_bytes[:2]):  # written high to low: the spec goes up
        low, high = high, low
    step = step.strip() or "x2"
    raise CommbenchError(f"--sizes {_brief(spec)!r}: {head.strip()!r} is not how --sizes writes a range; write "
                         f"--sizes {low}:{high}:{step} (MIN:MAX:xF, a factor F; or MIN:MAX:+STEP, or a comma list "
                         f"such as {low},{high})")


def _size_of(spec: str, part: str) -> int:
    """One size of a --sizes spec; a refusal names the option, since `bad size '2P'` alone does not say where."""
    try:
        return parse_size(part)
    except CommbenchError as error:
        raise CommbenchError(f"--sizes {_brief(spec)!r}: {error}") from None


def _check_largest(spec: str, largest: int) -> None:
    if largest > _MAX_SIZE:
        raise CommbenchError(f"--sizes {_brief(spec)!r} names a message above 1 PiB ({_MAX_SIZE} B), more than any "
                             "device holds; give sizes up to 1024T")


def _brief(spec: str) -> str:
    """A long --sizes (a list of thousands) as a message can show it."""
    return spec if len(spec) <= 60 else f"{spec[:40]}...{spec[-12:]}"


def _check_count(spec: str, count: int) -> None:
    if count > _MAX_POINTS:
        named = f"{count} sizes" if count < 10**12 else "over 10^12 sizes"  # an exact 5000-digit count says nothing
        raise CommbenchError(f"--sizes {_brief(spec)!r} names {named}, more than the {_MAX_POINTS} one sweep may "
                             "measure; use a larger factor or step, or a narrower range")


_BINARY_UNITS = (("TiB", "T", 1024**4), ("GiB", "G", 1024**3), ("MiB", "M", 1024**2), ("KiB", "K", 1024))
_SIZE_UNITS = _BINARY_UNITS[1:]
"""Units a suggested size is written in: up to G, which --sizes and nccl-tests' -e both read (2048G, not 2T)."""


def round_down_to_unit(size: int) -> int:
    """size rounded down to a whole number of its largest unit up to G (5.3 GiB → 5 GiB), as size_text writes it."""
    scale = next((scale for _, _, scale in _SIZE_UNITS if size >= scale), 1)
    return size // scale * scale


def size_text(size: int) -> str:
    """A size as --sizes (and commbench perf's -e) takes it: the largest unit that divides it (7G, 1536K, 100)."""
    for _, letter, scale in _SIZE_UNITS:
        if size >= scale and size % scale == 0:
            return f"{size // scale}{letter}"
    return str(size)


def readable(size: float) -> str:
    """A byte count for people, three significant digits in binary units: 1.5 TiB, 23.4 GiB, 512 B."""
    for unit, _, scale in _BINARY_UNITS:
        if size >= scale:
            value = size / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{math.floor(value)} {unit}"
    return f"{int(size)} B"


def format_bytes(size: int) -> str:
    """A byte count the way the CLI accepts it back: 1 KiB, 16 MiB, 1000 B."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def parse_memory(text: str, *, option: str) -> float:
    """Memory in bytes, unit required: 80GB → 80e9; 80GiB = 80G → 80·2^30; 1.5GB → 1.5e9."""
    parsed = _parse_bytes(text)
    if parsed is None or parsed[2] == "":
        raise CommbenchError(f"bad {option} {text!r}: {_MEMORY_HELP}")
    numerator, denominator, _ = parsed
    try:
        value = numerator / denominator
    except OverflowError:  # more bytes than a float holds
        value = math.inf
    if not math.isfinite(value) or value <= 0:
        raise CommbenchError(f"{option} {text!r} must be a finite number above 0")
    return value


def parse_count(text: str, *, option: str) -> float:
    """A count, not bytes: 7B → 7e9 (K, M, B, T are decimal: thousand, million, billion, trillion)."""
    match = _COUNT.match(str(text))
    if not match:
        raise CommbenchError(f"bad {option} {text!r}: write a count like 7B, 125M, 1.5e9 or 671B")
    value = float(match.group(1)) * _COUNT_SCALE[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise CommbenchError(f"{option} {text!r} must be a finite number above 0")
    return value


def format_count(count: float) -> str:
    """A count the way --params takes it back: 70B, 1.5B, 125M, 350K, 999 (decimal K, M, B, T: thousand ... trillion).

    Exact: the largest suffix at or below the count, with as many digits as the count has (1234567 is 1.234567M,
    never a rounded 1.23M that names another model). A float keeps 15 significant digits, all a float holds for
    sure: parse_count("2.05M") is 2049999.9999999998 (2.05 × 1e6 in binary) and prints back as 2.05M."""
    if not math.isfinite(count):
        return str(count)
    exact = Decimal(count) if isinstance(count, int) else Decimal(f"{count:.15g}")
    for letter, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if abs(exact) >= scale:
            return f"{_plain_decimal(exact / scale)}{letter}"
    return _plain_decimal(exact)


def _plain_decimal(value: Decimal) -> str:
    """1.50 → 1.5, 7E+1 → 70: no trailing zeros, no exponent."""
    return format(value.normalize(), "f")
