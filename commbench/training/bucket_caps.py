"""The DDP sweep's default bucket caps and how the tables name a row's buckets. Free of torch, so the end table and the
report can name the caps from results.csv alone (training/ddp_buckets.py forms the buckets themselves, with torch).

A cap is chosen as a fraction of the model's gradient bytes, so a row labelled with its MiB alone hides what the
sweep meant by it: the tables say both ("1/16 grads = 1.3 MiB").
"""

import math
from fractions import Fraction

from commbench.names import DDP_DEFAULT_CAP_MB, DDP_DEFAULT_FIRST_MB, DTYPE_BYTES

MIB = 1024 * 1024
DEFAULT_CAP_FRACTIONS = (Fraction(1, 16), Fraction(1, 4), Fraction(1))
"""The default sweep's caps, as fractions of the model's gradient bytes: many small buckets, a few, and one (no
overlap of the all-reduce with backward), beside DDP's own default row."""
GRADIENT_BYTES_PER_PARAM = DTYPE_BYTES["float32"]
"""fp32 gradients: what the default caps are fractions of (ddp_buckets.gradient_bytes_in_ready_order's default)."""


def default_caps_mb(gradient_bytes: int) -> tuple[float, ...]:
    """The default sweep's caps in MiB: DEFAULT_CAP_FRACTIONS of the gradient bytes, rounded up to two significant
    digits (so the whole-model cap still holds every gradient)."""
    return tuple(dict.fromkeys(round_up(gradient_bytes * float(fraction) / MIB) for fraction in DEFAULT_CAP_FRACTIONS))


def round_up(mib: float) -> float:
    step = 10 ** (math.floor(math.log10(mib)) - 1)
    return round(math.ceil(mib / step - 1e-9) * step, 6)


def is_ddp_default(cap_mb: float, first_mb: float | None) -> bool:
    return cap_mb == DDP_DEFAULT_CAP_MB and first_mb == DDP_DEFAULT_FIRST_MB


def bucket_label(cap_mb: float, first_mb: float | None, params: float | None) -> str:
    """How a table names a DDP row's bucket settings: "default (1 MiB first, then 25 MiB)" for DDP's own; a
    default-sweep cap as its fraction of the gradients, "cap 1/16 grads = 1.3 MiB" ("cap all grads = 21 MiB" for the
    one that holds them all); any other cap in MiB; a first bucket of its own after it ("cap 4 MiB, first 0.5 MiB")."""
    if is_ddp_default(cap_mb, first_mb):
        return f"default ({DDP_DEFAULT_FIRST_MB:g} MiB first, then {DDP_DEFAULT_CAP_MB:g} MiB)"
    text = f"{cap_mb:g} MiB"
    if first_mb is None and params:
        gradient_bytes = int(params) * GRADIENT_BYTES_PER_PARAM
        for fraction in DEFAULT_CAP_FRACTIONS:
            if math.isclose(cap_mb, round_up(gradient_bytes * float(fraction) / MIB)):
                text = f"{'all' if fraction == 1 else fraction} grads = {text}"
                break
    return f"cap {text}" if first_mb is None else f"cap {text}, first {first_mb:g} MiB"
