"""A perf run read back as nccl-tests reports it: one line per size and cycle, each with an out-of-place and an
in-place body (None where torch has no such placement), from the stored rows, samples and iteration times. The text
and the JSON writers both print these lines, so the two outputs and the run folder cannot disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench import names, store
from commbench.collectives import get_collective
from commbench.measure.bandwidth import algbw_gbps, busbw_gbps
from commbench.names import DTYPE_BYTES
from commbench.schema import collective as sweep_columns
from commbench.schema import common
from commbench.sweep.host_issue import host_issue_sentence

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class IterationStats:
    """nccl-tests' per-iteration summary of one body (src/util.cu computeIterStats, times in µs per call)."""

    times_us: list[float]
    """Each iteration's time, the slowest rank's (nccl-tests: the max over process rows)."""
    per_rank_us: list[list[float]]
    """Each rank's own iteration times (nccl-tests' per_process_max_times_us: one process per rank here)."""
    min: float
    max: float
    avg: float
    p50: float
    p95: float
    p99: float
    stdev: float

    @property
    def cv_pct(self) -> float:
        return self.stdev / self.avg * 100 if self.avg > 0 else 0.0


@dataclass(frozen=True)
class Body:
    time_us: float
    algbw_gbps: float
    """NaN where nothing moves (in place at one rank): nccl-tests would print the call's overhead as bandwidth."""
    busbw_gbps: float
    n_wrong: int | None
    """None: not checked (-c 0), printed N/A."""
    iterations: IterationStats | None = None
    time_stands_in: str | None = None
    """None: time_us is this cycle's own sample; else what was printed in its place (MEDIAN_STANDS_IN) because
    samples.csv has no sample for the cycle. The text and the JSON say so wherever it is printed."""


MEDIAN_STANDS_IN = "the row's median time (time_us_p50): samples.csv has no sample for this cycle"


@dataclass(frozen=True)
class Line:
    size_bytes: int
    count: int
    type_name: str
    redop: str
    root: int
    cycle: int
    out_of_place: Body | None
    in_place: Body | None

    @property
    def bodies(self) -> list[Body]:
        return [body for body in (self.out_of_place, self.in_place) if body is not None]

    def placed_bodies(self) -> list[tuple[str, Body]]:
        """(placement, body) of each body printed: "out-of-place", "in-place"."""
        return [(placement, body) for placement, body in (("out-of-place", self.out_of_place),
                                                          ("in-place", self.in_place)) if body is not None]


@dataclass(frozen=True)
class PerfRun:
    run_dir: Path
    meta: dict
    collective: str
    lines: list[Line]
    expected: tuple[float, str] | None = None
    """The expected busbw of the collective here and what it rests on (commbench expect), None where it has none."""
    host_issue: str | None = None
    """The rows' sentence on the host's issue time (host-bound sizes), None where the rows recorded none."""

    @property
    def settings(self) -> dict:
        return self.meta.get("nccl_tests") or {}

    @property
    def average_busbw_gbps(self) -> float:
        """nccl-tests' `# Avg bus bandwidth`: the mean busbw of every body printed, out-of-place and in-place."""
        values = [body.busbw_gbps for line in self.lines for body in line.bodies]
        return sum(values) / len(values) if values else math.nan

    @property
    def out_of_bounds(self) -> int:
        """Bodies whose check found wrong elements (nccl-tests counts them per GPU; a rank is one GPU here, but the
        stored count is summed over ranks, so this counts results, not ranks)."""
        return sum(1 for line in self.lines for body in line.bodies if body.n_wrong)

    @property
    def unchecked(self) -> int:
        """Bodies no check verified (-c 0): Out of bounds values counts none of them, which is not 0 wrong."""
        return sum(1 for line in self.lines for body in line.bodies if body.n_wrong is None)

    @property
    def bodies_printed(self) -> int:
        """Out-of-place and in-place bodies over every line: what the `# commbench:` counts are out of."""
        return sum(len(line.bodies) for line in self.lines)

    def stood_in(self) -> list[str]:
        """The bodies whose time is not their cycle's own sample, each as "1024 B out-of-place cycle 2"."""
        return [f"{line.size_bytes} B {placement} cycle {line.cycle + 1}" for line in self.lines
                for placement, body in line.placed_bodies() if body.time_stands_in is not None]


def read_perf_run(run_dir: Path, env: str | None = None) -> PerfRun:
    """The run as nccl-tests' lines; env: only the rows of that environment combination (--env-axis), as the run of
    nccl-tests under it would print them. Rows of a refused combination have nothing to print."""
    from commbench.benches.collective import KIND

    meta = store.read_meta(run_dir)
    results = store.read_results(run_dir, KIND) if (run_dir / store.RESULTS_FILE).exists() else None
    if results is not None:
        measured = ~results["note"].astype(str).str.startswith(names.NOT_AVAILABLE)
        results = results[measured & ((results["env"] == env) if env is not None else True)]
    if results is None or results.empty:
        return PerfRun(run_dir, meta, "", [])
    samples = store.read_samples(run_dir, KIND) if (run_dir / store.SAMPLES_FILE).exists() else None
    iterations = store.read_rows(run_dir / store.ITERATIONS_FILE, KIND.iteration_columns, store.NUMERIC_COLUMNS) \
        if (run_dir / store.ITERATIONS_FILE).exists() else None
    collective = str(results["collective"].iloc[0])
    cycles = max(int(results["iters"].max()), 1)
    lines = []
    # nccl-tests' order: type, op (and root), then each cycle over every size
    for (dtype, op, _), group in results.groupby(["dtype", "op", "root"], sort=False):
        for cycle in range(cycles):
            for _, rows in group.groupby(common.SIZE_BYTES, sort=False):
                bodies = {bool(row["inplace"]): _body(row, cycle, samples, iterations)
                          for _, row in rows.iterrows()}
                first = rows.iloc[0]
                lines.append(Line(int(first[common.SIZE_BYTES]), int(first[sweep_columns.COUNT]),
                                  names.nccl_tests_type_name(str(dtype)),
                                  _redop(collective, str(op), meta), int(first["root"]), cycle,
                                  bodies.get(False), bodies.get(True)))
    return PerfRun(run_dir, meta, collective, lines, _expected(results.iloc[0]), host_issue_sentence(results))


def _expected(row: pd.Series) -> tuple[float, str] | None:
    value = row.get(common.EXPECTED_BUSBW_GBPS)
    if value is None or math.isnan(float(value)):
        return None
    return float(value), str(row.get(common.EXPECTED_BASIS) or "")


def _redop(collective: str, op: str, meta: dict) -> str:
    """nccl-tests' redop column: the op; none for the collectives that take none, except sendrecv, whose program
    prints the -o op it was given (sum by default)."""
    if collective == "sendrecv":
        given = (meta.get("nccl_tests") or {}).get("op", "sum")
        return "sum" if given == "all" else given
    return op


def _body(row: pd.Series, cycle: int, samples: pd.DataFrame | None, iterations: pd.DataFrame | None) -> Body:
    collective = get_collective(str(row["collective"]))
    world, inplace = int(row[common.WORLD_SIZE]), bool(row["inplace"])
    time_us, stands_in = _cycle_time(row, cycle, samples)
    layout = collective.layout(int(row[common.SIZE_BYTES]), DTYPE_BYTES[str(row["dtype"])], world)
    moved, seconds = collective.algbw_bytes(layout, world), time_us / 1e6
    noop = collective.is_noop(world=world, inplace=inplace)
    algbw = math.nan if noop else algbw_gbps(moved, seconds)
    busbw = 0.0 if noop else busbw_gbps(moved, seconds, collective.busbw_factor(world))
    n_wrong = None if math.isnan(float(row[common.N_WRONG])) else int(row[common.N_WRONG])
    return Body(time_us, algbw, busbw, n_wrong, _iteration_stats(_matching(iterations, row), cycle), stands_in)


def _cycle_time(row: pd.Series, cycle: int, samples: pd.DataFrame | None) -> tuple[float, str | None]:
    """The cycle's own time (its sample in samples.csv, in iteration order) and None; where the file has no sample
    for it (cut short, edited, or absent), the row's median and what stands in, which the outputs then say."""
    key = _matching(samples, row)
    cycle_times = sorted(zip(key["iteration"], key["time_us"])) if key is not None and len(key) else []
    if cycle < len(cycle_times):
        return float(cycle_times[cycle][1]), None
    return float(row[common.TIME_US_P50]), MEDIAN_STANDS_IN


def _matching(frame: pd.DataFrame | None, row: pd.Series) -> pd.DataFrame | None:
    """The rows of samples.csv or iteration_times.csv that belong to result row `row` (the kind's sample keys)."""
    from commbench.benches.collective import KIND

    return None if frame is None else frame[KIND.samples_of(frame, row)]


def _iteration_stats(rows: pd.DataFrame | None, cycle: int) -> IterationStats | None:
    if rows is None or rows.empty:
        return None
    rows = rows[rows["batch"] == cycle]
    if rows.empty:
        return None
    per_rank = [list(group.sort_values("iteration")["time_us"].astype(float))
                for _, group in rows.groupby("rank", sort=True)]
    times = [max(values) for values in zip(*per_rank)]
    ordered, n = sorted(times), len(times)
    mean = sum(times) / n
    return IterationStats(times, per_rank, ordered[0], ordered[-1], mean, ordered[n // 2],
                          ordered[_percentile_index(n, 95)], ordered[_percentile_index(n, 99)],
                          math.sqrt(sum((value - mean) ** 2 for value in times) / n))


def _percentile_index(n: int, percentile: int) -> int:
    """nccl-tests' nearest-rank percentile (src/util.cu percentileIndex)."""
    return min(n - 1, (n * percentile + 99) // 100 - 1)
