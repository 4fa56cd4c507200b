"""`commbench replay`'s rows: one per call group (the calls of one kind, size and dtype in the step: how many,
traced vs replayed time and busbw) and one for the whole sequence; samples are every replayed call's time.
timing_method says how each row was timed (CUDA events for a call on a GPU, the host clock on CPU and for the
sequence)."""

from statistics import median

from commbench.expect.rows import COLUMNS as EXPECTED_COLUMNS
from commbench.expect.rows import RunExpectation
from commbench.measure.bandwidth import algbw_gbps, busbw_gbps
from commbench.measure.stats import summarize
from commbench.names import busbw_factor
from commbench.store import SCHEMA_VERSION

KEY_COLUMNS = ("bench", "kind", "size_bytes", "dtype")
RESULT_COLUMNS = ("schema_version", "run_id", *KEY_COLUMNS, "backend", "device", "world_size", "traced_world_size",
                  "scaled", "step", "calls", "iters", "time_us_traced_p50", "time_us_p50", "time_us_p95",
                  "time_us_min", "time_us_ci_lo", "time_us_ci_hi", "algbw_gbps", "busbw_gbps", "busbw_gbps_traced",
                  "replayed_vs_traced", "gaps_us", "n_wrong", "timing_method", "note", *EXPECTED_COLUMNS)
REQUIRED_COLUMNS = tuple(column for column in RESULT_COLUMNS if column not in ("timing_method", *EXPECTED_COLUMNS))
"""A results file must have these; timing_method and the expected busbw read as empty where a run has none."""
SAMPLE_COLUMNS = ("schema_version", "run_id", *KEY_COLUMNS, "iteration", "time_us")
SEQUENCE = "sequence"
"""The kind of the row for the whole step: every replayed call in order."""


def build(spec, slowest: list[list[float]], sequence_s: list[float], wrong: dict, run_id: str, *, world: int,
          backend: str, device: str, gaps_s: float, methods: list[str], sequence_method: str
          ) -> tuple[list[dict], list[dict]]:
    """methods: how each planned call was timed (on rank 0), sequence_method how the sequence was."""
    groups: dict[tuple, list[int]] = {}  # by what the rank side shares buffers by, so n_wrong is the group's
    for position, call in enumerate(spec.calls):
        groups.setdefault((call["kind"], call["elements"], call["dtype"]), []).append(position)
    scaled = spec.scaled_from is not None
    note = f"scaled: traced at {spec.trace_world} ranks, every group replayed on all {world}" if scaled else ""
    base = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "bench": "replay", "backend": backend,
            "device": device, "world_size": world, "traced_world_size": spec.trace_world, "scaled": scaled,
            "step": spec.step, "iters": spec.iters}
    rows, samples = [], []
    for (kind, elements, dtype), positions in groups.items():
        times = [time for position in positions for time in slowest[position]]
        summary = summarize(times)
        traced_us = median(spec.calls[position]["traced_us"] for position in positions)
        size, n_wrong = spec.calls[positions[0]]["bytes"], wrong[(kind, elements, dtype)]
        rows.append({**base, "kind": kind, "size_bytes": size, "dtype": dtype, "calls": len(positions),
                     **_times(summary), "time_us_traced_p50": traced_us,
                     "algbw_gbps": algbw_gbps(size, summary.p50), "busbw_gbps": _busbw(kind, size, summary.p50, world),
                     "busbw_gbps_traced": _busbw(kind, size, traced_us * 1e-6, world),
                     "replayed_vs_traced": summary.p50 * 1e6 / traced_us if traced_us > 0 else None,
                     "gaps_us": None, "n_wrong": n_wrong, "timing_method": methods[positions[0]], "note": note,
                     **RunExpectation(spec.expectation).columns(kind)})
        samples += [{"schema_version": SCHEMA_VERSION, "run_id": run_id, "bench": "replay", "kind": kind,
                     "size_bytes": size, "dtype": dtype, "iteration": index, "time_us": time * 1e6}
                    for index, time in enumerate(times)]
    summary = summarize(sequence_s)
    total = sum(call["bytes"] for call in spec.calls)
    sequence_note = ("with the traced gaps between calls" if spec.with_gaps else "back to back") + \
        (f"; {note}" if note else "") + (f"; not replayed: {'; '.join(spec.skipped)}" if spec.skipped else "")
    rows.append({**base, "kind": SEQUENCE, "size_bytes": total, "dtype": "-", "calls": len(spec.calls),
                 **_times(summary), "time_us_traced_p50": spec.traced_span_us, "algbw_gbps": None,
                 "busbw_gbps": None, "busbw_gbps_traced": None,
                 "replayed_vs_traced": summary.p50 * 1e6 / spec.traced_span_us if spec.traced_span_us > 0 else None,
                 "gaps_us": gaps_s * 1e6, "n_wrong": sum(wrong.values()), "timing_method": sequence_method,
                 "note": sequence_note, "expected_busbw_gbps": None,
                 "expected_basis": "none: the sequence has no busbw (each call group's row has its own)"})
    samples += [{"schema_version": SCHEMA_VERSION, "run_id": run_id, "bench": "replay", "kind": SEQUENCE,
                 "size_bytes": total, "dtype": "-", "iteration": index, "time_us": time * 1e6}
                for index, time in enumerate(sequence_s)]
    return rows, samples


def _times(summary) -> dict:
    return {"time_us_p50": summary.p50 * 1e6, "time_us_p95": summary.p95 * 1e6, "time_us_min": summary.min * 1e6,
            "time_us_ci_lo": summary.ci_lo * 1e6, "time_us_ci_hi": summary.ci_hi * 1e6}


def _busbw(kind: str, size: int, seconds: float, world: int):
    """busbw with the collective's factor (names.BUSBW_FACTORS); None where it has none."""
    factor = busbw_factor(kind, world)
    return busbw_gbps(size, seconds, factor) if factor is not None and seconds > 0 else None
