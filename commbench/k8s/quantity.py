"""Kubernetes resource quantities (`8`, `2.5`, `500m`, `64Gi`, `1e3`), read as the API server reads them and written
as it writes them back, so that what `commbench k8s` asks per GPU can be multiplied into what one pod asks.

The grammar is Kubernetes' own (k8s.io/apimachinery resource.Quantity): a decimal number, then nothing, a decimal
suffix (m k M G T P E), a binary one (Ki Mi Gi Ti Pi Ei) or an exponent (e3, E-2). Exact arithmetic (Decimal): a
quantity is a count of millicores or of bytes, never a float.
"""

import math
import re
from decimal import Decimal

from commbench.errors import CommbenchError

_QUANTITY = re.compile(r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
                       r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[mkMGTPE]|[eE][+-]?\d+)?")
_DECIMAL = {"m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
            "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
MILLI = 1000
INT64_MAX = 2**63 - 1
"""The most a quantity's integer form holds (the API server keeps millicores and bytes as int64)."""


def parse(option: str, text: str, *, example: str) -> Decimal:
    """The quantity's value in its base unit (cores, bytes); refused in one line naming the option when it is not a
    Kubernetes quantity or is below zero."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise CommbenchError(f"{option} {text!r} is not a Kubernetes quantity (a number with an optional suffix: "
                             f"m, k, M, G, Ki, Mi, Gi, ...); e.g. {option} {example}")
    suffix = match.group("suffix") or ""
    try:
        number = Decimal(match.group("number"))
        if suffix in _BINARY:
            value = number * _BINARY[suffix]
        elif suffix in _DECIMAL:
            value = number * _DECIMAL[suffix]
        else:
            value = number * Decimal(10) ** int(suffix[1:])
    except (ArithmeticError, ValueError):  # decimal's Overflow and InvalidOperation are ArithmeticErrors
        raise CommbenchError(f"{option} {text!r} is out of any range Kubernetes takes; e.g. {option} {example}") \
            from None
    if value < 0:
        raise CommbenchError(f"{option} {text!r} is negative; a pod asks for 0 or more, e.g. {option} {example}")
    return value


def cpu_millis(option: str, text: str, *, example: str) -> int:
    """CPUs as whole millicores, rounded up as the API server rounds a finer CPU quantity."""
    return _within_int64(option, text, math.ceil(parse(option, text, example=example) * MILLI), example)


def memory_bytes(option: str, text: str, *, example: str) -> int:
    """Memory as whole bytes (rounded up). A lower-case `m` is milli-bytes to Kubernetes, never mebibytes: refused,
    since `512m` written for 512 MiB would ask for half a byte."""
    if text.strip().endswith("m"):
        raise CommbenchError(f"{option} {text!r} is in milli-bytes ('m' is 1/1000 to Kubernetes): write Mi for "
                             f"mebibytes or M for megabytes, e.g. {option} {example}")
    return _within_int64(option, text, math.ceil(parse(option, text, example=example)), example)


def cpu_text(millis: int) -> str:
    """CPUs as the API server writes them: whole cores as `64`, else millicores as `17500m`."""
    return str(millis // MILLI) if millis % MILLI == 0 else f"{millis}m"


def cores_text(millis: int) -> str:
    """CPUs for a person to read: `8`, `2.125`."""
    return f"{Decimal(millis) / MILLI:f}".rstrip("0").rstrip(".") if millis % MILLI else str(millis // MILLI)


def memory_text(count: int) -> str:
    """Bytes in the shortest exact form Kubernetes reads: `512Gi` (binary units first), `400G`, else plain bytes."""
    written = [f"{count // size}{suffix}" for suffix, size in _BINARY.items() if count and count % size == 0]
    written += [f"{count // int(size)}{suffix}" for suffix, size in _DECIMAL.items()
                if size >= 1000 and count and count % int(size) == 0]
    return min([*written, str(count)], key=len)


def _within_int64(option: str, text: str, value: int, example: str) -> int:
    if value > INT64_MAX:
        raise CommbenchError(f"{option} {text!r} is beyond the int64 Kubernetes keeps a quantity in; e.g. {option} "
                             f"{example}")
    return value
