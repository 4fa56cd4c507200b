"""`commbench replay`'s rows: one per call group (the calls of one kind, size and dtype in the step: how many,
traced vs replayed time and busbw) and one for the whole sequence; samples are every replayed call's time.
timing_method says how each row was timed (CUDA events for a call on a GPU, the host clock on CPU and for the
sequence)."""

from statistics import median
from typing import Any, Protocol

from commbench.bench_kind import ExpectedBusbw
from commbench.expect.rows import RunExpectation
from commbench.measure.bandwidth import algbw_gbps, busbw_gbps
from commbench.measure.stats import Summary, summarize
from commbench.names import busbw_factor
from commbench.schema import common
from commbench.schema import replay as col
from commbench.store import SCHEMA_VERSION

SEQUENCE = "sequence"
"""The kind of the row for the whole step: every replayed call in order."""
CallKey = tuple[str, int, str]
"""(kind, elements, dtype): the calls that share buffers on the ranks, and one row."""


class ReplayedSpec(Protocol):
    """What the rank side and the rows read of the replay's spec (benches/replay.py's ReplaySpec, a layer above)."""

    @property
    def calls(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def skipped(self) -> tuple[str, ...]: ...
    @property
    def trace_world(self) -> int: ...
    @property
    def step(self) -> int | None: ...
    @property
    def traced_span_us(self) -> float: ...
    @property
    def iters(self) -> int: ...
    @property
    def warmup(self) -> int: ...
    @property
    def with_gaps(self) -> bool: ...
    @property
    def scaled_from(self) -> int | None: ...
    @property
    def expectation(self) -> dict[str, ExpectedBusbw]: ...


def build(spec: ReplayedSpec, slowest: list[list[float]], sequence_s: list[float], wrong: dict[CallKey, int],
          run_id: str, *, world: int, backend: str, device: str, gaps_s: float, methods: list[str],
          sequence_method: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """methods: how each planned call was timed (on rank 0), sequence_method how the sequence was."""
    groups: dict[CallKey, list[int]] = {}  # by what the rank side shares buffers by, so n_wrong is the group's
    for position, call in enumerate(spec.calls):
        groups.setdefault((call["kind"], call["elements"], call["dtype"]), []).append(position)
    scaled = spec.scaled_from is not None
    note = f"scaled: traced at {spec.trace_world} ranks, every group replayed on all {world}" if scaled else ""
    base: dict[str, object] = {common.SCHEMA_VERSION: SCHEMA_VERSION, common.RUN_ID: run_id, common.BENCH: "replay",
            common.BACKEND: backend, common.DEVICE: device, common.WORLD_SIZE: world,
            col.TRACED_WORLD_SIZE: spec.trace_world, col.SCALED: scaled, col.STEP: spec.step, common.ITERS: spec.iters}
    rows: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for (kind, elements, dtype), positions in groups.items():
        times = [time for position in positions for time in slowest[position]]
        summary = summarize(times)
        traced_us = median(spec.calls[position]["traced_us"] for position in positions)
        size, n_wrong = spec.calls[positions[0]]["bytes"], wrong[(kind, elements, dtype)]
        rows.append({**base, col.KIND: kind, common.SIZE_BYTES: size, common.DTYPE: dtype, col.CALLS: len(positions),
                     **_times(summary), col.TIME_US_TRACED_P50: traced_us,
                     common.ALGBW_GBPS: algbw_gbps(size, summary.p50),
                     common.BUSBW_GBPS: _busbw(kind, size, summary.p50, world),
                     col.BUSBW_GBPS_TRACED: _busbw(kind, size, traced_us * 1e-6, world),
                     col.REPLAYED_VS_TRACED: summary.p50 * 1e6 / traced_us if traced_us > 0 else None,
                     col.GAPS_US: None, common.N_WRONG: n_wrong, common.TIMING_METHOD: methods[positions[0]],
                     common.NOTE: note, **RunExpectation(spec.expectation).columns(kind)})
        samples += [_sample(run_id, kind, size, dtype, index, time) for index, time in enumerate(times)]
    summary = summarize(sequence_s)
    total = sum(call["bytes"] for call in spec.calls)
    sequence_note = ("with the traced gaps between calls" if spec.with_gaps else "back to back") + \
        (f"; {note}" if note else "") + (f"; not replayed: {'; '.join(spec.skipped)}" if spec.skipped else "")
    rows.append({**base, col.KIND: SEQUENCE, common.SIZE_BYTES: total, common.DTYPE: "-", col.CALLS: len(spec.calls),
                 **_times(summary), col.TIME_US_TRACED_P50: spec.traced_span_us, common.ALGBW_GBPS: None,
                 common.BUSBW_GBPS: None, col.BUSBW_GBPS_TRACED: None,
                 col.REPLAYED_VS_TRACED: summary.p50 * 1e6 / spec.traced_span_us if spec.traced_span_us > 0 else None,
                 col.GAPS_US: gaps_s * 1e6, common.N_WRONG: sum(wrong.values()), common.TIMING_METHOD: sequence_method,
                 common.NOTE: sequence_note, common.EXPECTED_BUSBW_GBPS: None,
                 common.EXPECTED_BASIS: "none: the sequence has no busbw (each call group's row has its own)"})
    samples += [_sample(run_id, SEQUENCE, total, "-", index, time) for index, time in enumerate(sequence_s)]
    return rows, samples


def _sample(run_id: str, kind: str, size: int, dtype: str, iteration: int, seconds: float) -> dict[str, Any]:
    """One replayed call's time, as samples.csv holds it (keyed as its row)."""
    return {common.SCHEMA_VERSION: SCHEMA_VERSION, common.RUN_ID: run_id, common.BENCH: "replay", col.KIND: kind,
            common.SIZE_BYTES: size, common.DTYPE: dtype, common.ITERATION: iteration, common.TIME_US: seconds * 1e6}


def _times(summary: Summary) -> dict[str, float]:
    return {common.TIME_US_P50: summary.p50 * 1e6, common.TIME_US_P95: summary.p95 * 1e6,
            common.TIME_US_MIN: summary.min * 1e6, common.TIME_US_CI_LO: summary.ci_lo * 1e6,
            common.TIME_US_CI_HI: summary.ci_hi * 1e6}


def _busbw(kind: str, size: int, seconds: float, world: int) -> float | None:
    """busbw with the collective's factor (names.BUSBW_FACTORS); None where it has none."""
    factor = busbw_factor(kind, world)
    return busbw_gbps(size, seconds, factor) if factor is not None and seconds > 0 else None
