"""What a bench kind declares (the collectives registry's pattern one level up), and what it resolves to.

A kind is one module in commbench/benches/ with one BenchKind instance named KIND, listed in benches/__init__.py
(this module stands outside that package so that the rank side can import it without loading the registry). It
declares its options dataclass, how options resolve into a Bench (validated before anything launches), the per-rank
measure function the rank driver calls for each point, its result and sample columns, the keys that identify a row
across runs, its compare metrics, its terminal table and key numbers, and its plots. Its module imports nothing heavy
at the top: `commbench --help` lists the kinds without loading torch, pandas or matplotlib.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What a bench's ranks run, resolved before launch: a frozen dataclass written to the run folder as JSON
    (to_json) and read back on every rank (from_json). These are the fields the launcher and the rank driver read of
    every kind's spec; each kind's spec adds its own. Tuples travel as JSON lists; a spec holding dataclasses rebuilds
    them in _fields_from_json."""

    backend: str
    device: str
    nproc: int
    timeout_s: float
    """Seconds a point may take before the launch counts as hung."""
    gpu_sample_interval_s: float = 0.05
    """NVML sampling interval while a point is timed (GPU runs)."""
    expectation: dict = field(default_factory=dict)
    """Kinds that measure busbw: key (a collective, or the kind's own) → (the busbw this machine's topology allows,
    what it rests on or why there is none), commbench/expect/rows.py; written into each row."""
    expectation_document: dict = field(default_factory=dict)
    """The facts, scope and terms of that expectation, for meta.json."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls(**cls._fields_from_json(json.loads(text)))

    @classmethod
    def _fields_from_json(cls, data: dict) -> dict:
        return {key: tuple(value) if isinstance(value, list) else value for key, value in data.items()}


@dataclass(frozen=True)
class Metric:
    """A column `commbench compare --fail NAME:PERCENT` gates on."""

    name: str
    column: str
    higher_is_better: bool
    samples: str | None
    """The per-iteration column of samples.csv behind it (significance needs samples); None = one value per row."""
    default_threshold_pct: float | None = None
    """Gated by default (compare without --fail) at this threshold; None = only when asked for."""


@dataclass(frozen=True)
class Plot:
    """A report figure of the kinds that list it: its file stem and caption. report/drawings.py names the function
    that draws it (imported only when a report is drawn, with matplotlib)."""

    stem: str
    caption: str


@dataclass(frozen=True)
class Bench:
    """A bench resolved from its options, before anything launches: the same on every rank."""

    kind: Any
    """The BenchKind."""
    spec: Spec
    """What the ranks run (to_json() / the kind's spec_from_json())."""
    points: list
    """One per result row, in run order; each has .index and .label() (the progress bar's)."""
    notes: tuple[str, ...] = ()
    """Printed with the results: what was measured differently from what was asked, and why."""
    process_per_point: bool = False
    """Launch the ranks once per point (--only INDEX) instead of once for the whole bench."""
    cores: tuple[int, ...] | None = None
    """--bind-cores: the core each local rank is pinned to (rank.py), by local rank; None leaves them unpinned."""
    environments: tuple[tuple[dict, tuple[int, ...]], ...] = ()
    """Launches by environment (--env-axis): each (the variables it sets, the indexes of its points) is a launch of
    its own (--only INDEXES), since NCCL reads its environment when it creates a communicator. A launch that fails
    before storing a row (NCCL refused the combination) leaves its points as rows noted "not available", and the
    next launch runs. Empty: one launch for the whole bench."""
    launch_env: dict = field(default_factory=dict)
    """Variables every launch of the bench gets (--tuner-plugin, --tuner-config)."""


@dataclass
class RankRun:
    """What a kind's measure() gets on every rank besides the point."""

    ctx: Any
    """commbench.execution.distributed.RankContext."""
    run_id: str
    sampler: Any = None
    """This rank's GPU sampler (NVML) or None."""
    trace_dir: Path | None = None
    """Where this rank writes its profiler traces, when the bench records them."""
    fault: Any = None
    """A test-only fault (commbench/faults.py)."""
    run_dir: Path | None = None
    """The run folder (rank 0 writes into it; a kind may write files of its own there, e.g. hunt.json)."""
    state: Any = None
    """What the kind's prepare() returned for this launch."""


@dataclass
class Measured:
    row: dict | None
    """The result row (rank 0); None on other ranks."""
    samples: list[dict] = field(default_factory=list)
    """Per-iteration sample rows, without the stamp (rank 0)."""
    gpu_samples: list[dict] = field(default_factory=list)
    """This rank's GPU samples during the point (rank 0 writes its own)."""
    rows: list[dict] = field(default_factory=list)
    """More result rows after `row`, for a point that measures several things (a hunt's phase); their samples
    carry their own key columns."""
    iterations: list[dict] = field(default_factory=list)
    """Per-rank iteration times inside each batch (nccl-tests -I), without the stamp (rank 0); the kind's
    iteration_columns."""


class BenchKind:
    name: str = ""
    """meta.json's "kind" and the rows' `bench` value."""
    command: str = ""
    """The CLI command and a suite's `kind = ...` (collective sweeps are `commbench sweep`)."""
    title: str = ""
    """What the kind is called in messages, e.g. "DDP sweep (commbench ddp)"."""
    options: type = object
    """The options dataclass (fields made with benches.options.option)."""
    bare_suite: str | None = None
    """The shipped suite the command runs when it is given no bench option (bare `commbench sweep`)."""
    result_columns: tuple[str, ...] = ()
    required_columns: tuple[str, ...] = ()
    """What a results file must have; columns added later are filled in empty when an older file lacks them."""
    column_defaults: dict = {}
    """Values of key columns added after a results or samples file was written (older files lack them)."""
    sample_columns: tuple[str, ...] = ()
    sample_keys: tuple[str, ...] = ()
    """Row columns copied into each of its samples (with schema_version and run_id): they join samples to rows."""
    gpu_sample_columns: tuple[str, ...] | None = None
    """Columns of gpu_samples.csv, or None when the kind writes no per-sample GPU file."""
    iteration_columns: tuple[str, ...] | None = None
    """Columns of iteration_times.csv (written only by points that record iteration times), or None."""
    identity: tuple[str, ...] = ()
    """The columns that name a row across runs (compare joins on them)."""
    comparability: tuple[str, ...] = ()
    """Columns that must agree for two rows to be compared at all."""
    cross_source_identity: tuple[str, ...] = ()
    """How its rows meet another tool's imported rows (commbench import), where it has such rows: the columns both
    measured. Empty: the kind's rows come from commbench alone."""
    metrics: tuple[Metric, ...] = ()
    plots: tuple[Plot, ...] = ()
    wrong_message: str = "{n} wrong result(s) in the check; results are not valid"
    """What exit code 1 says, with {n} the count n_wrong() returns."""
    point_noun: str = "point"
    """What one of its points is called where rows are counted (a training sweep's are configurations)."""
    selftest_values: dict[str, Any] | None = None
    """The options (by field name, besides the target's) of a run small enough for `commbench selftest` to run this
    kind as a step of its own, named by its command; None: selftest does not run it on its own (the collective sweep
    has selftest's own sweep and profile steps)."""

    @property
    def run_sets(self) -> bool:
        """Whether the command offers --launches N (a run set): the kinds the gate compares by default (a metric
        with a default threshold)."""
        return any(metric.default_threshold_pct is not None for metric in self.metrics)

    def help(self) -> str:
        """The command's help text (its first line is the summary `commbench --help` lists)."""
        return type(self).__doc__ or ""

    # before launch (the launching process)
    def resolve(self, options, machine) -> Bench:
        raise NotImplementedError

    def spec_from_json(self, text: str):
        raise NotImplementedError

    # on every rank
    def points(self, spec, world: int) -> list:
        raise NotImplementedError

    def run_meta(self, spec) -> dict:
        """Fields rank 0 adds to meta.json when the ranks start: the expectation of the kinds that measure busbw."""
        return {"expectation": spec.expectation_document} if spec.expectation_document else {}

    def prepare(self, spec, ctx):
        """Per launch, before the first point; the value reaches measure() as run.state."""
        return None

    def measure(self, spec, point, run: RankRun) -> Measured:
        raise NotImplementedError

    # after the run (stored files only)
    def table(self, results, verbose: bool = False) -> str:
        """The terminal table of a run's rows: short by default, every detail with verbose (--verbose)."""
        raise NotImplementedError

    def key_numbers(self, results):
        """The report's key numbers of one run, as a DataFrame."""
        raise NotImplementedError

    def row_label(self, row) -> str:
        raise NotImplementedError

    def unavailable_row(self, spec, point, *, run_id: str, world: int, reason: str) -> dict:
        """The row of a point whose launch (an environment combination, Bench.environments) failed before measuring
        it: its keys, no numbers, and a note "not available: <reason>". Kinds with environment axes define it."""
        raise NotImplementedError

    def samples_of(self, samples, row):
        """The boolean mask of samples.csv rows that belong to results row `row`."""
        mask = None
        for column in self.sample_keys:
            values, wanted = samples[column], row[column]
            default = self.column_defaults.get(column)
            if isinstance(default, str):  # a key written empty reads back as NaN on either side (env "")
                values = values.astype(object).where(values.notna(), default)
                wanted = default if wanted != wanted or wanted is None else wanted
            match = values.astype(str) == str(wanted)
            mask = match if mask is None else mask & match
        return mask

    def selftest_verdict(self, rows) -> tuple[bool, str]:
        """Selftest's verdict on this kind's run, whose rows came in full and without wrong results: whether they show
        what the kind must show, and the table's detail."""
        return True, f"{len(rows)} row(s), 0 wrong"

    def n_wrong(self, results) -> int:
        """What makes the exit code 1 (wrong results; a hunt's suspects). Counts what a check found: an unchecked row
        adds nothing here, and n_unchecked() says how many there are."""
        if results is None or results.empty:
            return 0
        return int(results["n_wrong"].fillna(0).sum())

    def unchecked(self, results):
        """The boolean mask of measured rows that no check verified: a figure in one of the kind's metric columns and
        an empty n_wrong (--no-check, perf -c 0, an import whose source has no #wrong). Their correctness is
        unknown, not 0 wrong. Rows without figures (a refused environment, a hunt's findings) are not counted."""
        import pandas as pd

        columns = [metric.column for metric in self.metrics if metric.column in results.columns]
        if "n_wrong" not in results.columns or not columns:
            return pd.Series(False, index=results.index)
        figures = results[columns].apply(pd.to_numeric, errors="coerce")
        return pd.to_numeric(results["n_wrong"], errors="coerce").isna() & figures.notna().any(axis=1)

    def n_unchecked(self, results) -> int:
        """How many measured rows no check verified (unchecked())."""
        if results is None or results.empty:
            return 0
        return int(self.unchecked(results).sum())
