"""What the tables and perf's text say of the host's issue time: which rows are host-bound (results.csv's host_bound,
commbench/measure/spin_plan.py's rule), and one sentence for all of them."""

from collections.abc import Mapping

import pandas as pd

from commbench.measure.spin_plan import HOST_BOUND_SHARE
from commbench.names import GLOO
from commbench.units import format_bytes

HOST_BOUND, NOT_HOST_BOUND = "yes", "no"
NOT_APPLICABLE = "not applicable"
"""results.csv's host_bound where nothing is issued ahead of the device (a host-blocking backend, or -z's waits); not
"n/a", which pandas reads as a missing value."""


def host_bound_word(bound: bool | None) -> str:
    """results.csv's host_bound for spin_plan.is_host_bound's answer."""
    return NOT_APPLICABLE if bound is None else HOST_BOUND if bound else NOT_HOST_BOUND


def is_flagged(row: pd.Series | Mapping[str, object]) -> bool:
    return str(row.get("host_bound") or "") == HOST_BOUND


def host_issue_sentence(results: pd.DataFrame, *, quiet_when_not_applicable: bool = False) -> str | None:
    """One sentence on the host's issue over the rows, or None where no row recorded it (imports, older runs), or
    where nothing was issued ahead and the caller keeps quiet about it (the short tables: the rows' timing_method
    says "host clock", and gloo's tables must fit a screen)."""
    if "host_bound" not in results.columns:
        return None
    words = results["host_bound"].astype(object).where(results["host_bound"].notna(), "").astype(str)
    recorded = results[words != ""]
    if recorded.empty:
        return None
    issued_ahead = recorded[words[recorded.index] != NOT_APPLICABLE]
    if issued_ahead.empty:
        return None if quiet_when_not_applicable else "host issue: not applicable, " + _why_not_ahead(recorded)
    issue_us = pd.to_numeric(issued_ahead["issue_us_per_call"], errors="coerce")
    flagged = issued_ahead[words[issued_ahead.index] == HOST_BOUND]
    if flagged.empty:
        return (f"host issue: the device stayed ahead of the host at all {len(issued_ahead)} points (issue up to "
                f"{issue_us.max():.1f} µs per call, under {HOST_BOUND_SHARE:g} × the time per call; every spin "
                "outlasted it)")
    sizes = sorted({int(size) for size in flagged["size_bytes"]})
    shown = ", ".join(format_bytes(size) for size in sizes[:6]) + (" …" if len(sizes) > 6 else "")
    uncovered = flagged["spin_covered"].astype(str).isin(["False", "false", "0", "0.0"]).sum()
    spins = f"; at {uncovered} a spin ended before the last call was issued" if uncovered else ""
    return (f"host-bound: {len(flagged)} of {len(issued_ahead)} points ({shown}): the host's issue time per call "
            f"(up to {pd.to_numeric(flagged['issue_us_per_call'], errors='coerce').max():.1f} µs) reached "
            f"{HOST_BOUND_SHARE:g} × the time per call{spins}. Their times are the device's, behind a spin; a loop "
            "without one (a training step, nccl-tests' host clock) would wait for the host there "
            "(issue_us_per_call in results.csv)")


def _why_not_ahead(rows: pd.DataFrame) -> str:
    backends = set(rows["backend"].astype(str)) if "backend" in rows.columns else set()
    if backends == {GLOO}:
        return "gloo's calls block the host until done, so the host clock holds the whole call (nothing is issued " \
               "ahead of the device)"
    return "nothing was issued ahead of the device (gloo blocks the host; with -z's waits each call's issue is in " \
           "its time, as nccl-tests -z's)"

