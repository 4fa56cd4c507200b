"""What a bench kind declares (the collectives registry's pattern one level up), and what it resolves to.

A kind is one module in commbench/benches/ with one BenchKind instance named KIND, listed in benches/__init__.py
(this module stands outside that package so that the rank side can import it without loading the registry). It
declares its options dataclass, how options resolve into a Bench (validated before anything launches), the per-rank
measure function the rank driver calls for each point, its result and sample columns, the keys that identify a row
across runs, its compare metrics, its terminal table and key numbers, and its plots. Its module imports nothing heavy
at the top: `commbench --help` lists the kinds without loading torch, pandas or matplotlib.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, Self, TypeVar

from commbench.names import Backend, Device, RankAverage
from commbench.schema.common import N_WRONG

if TYPE_CHECKING:  # types only: the rank side and `commbench --help` load none of these here
    import pandas as pd
    import torch

    from commbench.faults import Fault
    from commbench.machine import Machine
    from commbench.platform import CpuPlatform
    from commbench.profiling.nvml_sampler import GpuSampler

_Shared = TypeVar("_Shared")


class RankContext(Protocol):
    """A rank's place in the job, as every kind's rank side uses it: commbench/execution/distributed.py makes it when
    the rank joins its process group. Declared here, where the kinds meet it, so that the kinds depend on what they
    use and not on the execution layer above them."""

    @property
    def rank(self) -> int: ...
    @property
    def world(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    @property
    def local_world(self) -> int:
        """Ranks of the job on this machine."""
    @property
    def backend(self) -> Backend: ...
    @property
    def platform(self) -> CpuPlatform:
        """What differs between device types (timer, synchronize, memory, sampler, P2P batching)."""
    @property
    def device(self) -> torch.device: ...
    def barrier(self) -> None: ...
    def meet_on_device(self) -> None: ...
    def max_over_ranks(self, values: list[float]) -> list[float]: ...
    def mean_over_ranks(self, values: list[float]) -> list[float]: ...
    def combine_over_ranks(self, values: list[float], how: RankAverage) -> list[float]: ...
    def sum_over_ranks(self, value: int) -> int: ...
    def gather_objects(self, obj: _Shared) -> list[_Shared]:
        """Every rank's value, by rank."""
    def broadcast_object(self, obj: _Shared | None) -> _Shared:
        """Rank 0's value on every rank."""


Row = dict[str, object]
"""A row as a kind makes it (a result row, a sample, a GPU sample, an iteration time): column → value."""
ExpectedBusbw = tuple[float | None, str]
"""The busbw a machine's topology allows (GB/s; None where there is none), and what it rests on or why there is
none (commbench/expect/rows.py)."""


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What a bench's ranks run, resolved before launch: a frozen dataclass written to the run folder as JSON
    (to_json) and read back on every rank (from_json). These are the fields the launcher and the rank driver read of
    every kind's spec; each kind's spec adds its own. Tuples travel as JSON lists; a spec holding dataclasses rebuilds
    them in _fields_from_json."""

    backend: Backend
    device: Device
    nproc: int
    timeout_s: float
    """Seconds a point may take before the launch counts as hung."""
    gpu_sample_interval_s: float = 0.05
    """NVML sampling interval while a point is timed (GPU runs)."""
    expectation: dict[str, ExpectedBusbw] = field(default_factory=dict)
    """Kinds that measure busbw: key (a collective, or the kind's own) → (the busbw this machine's topology allows,
    what it rests on or why there is none), commbench/expect/rows.py; written into each row."""
    expectation_document: dict[str, object] = field(default_factory=dict)
    """The facts, scope and terms of that expectation, for meta.json (a JSON document: origin, facts, scope, each
    key's expectation; or why there is none)."""

    @property
    def records_traces(self) -> bool:
        """Whether the ranks record profiler traces (the driver then gives each rank a trace folder); a kind's spec
        that records them says so with a field or a property of its own."""
        return False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls(**cls._fields_from_json(json.loads(text)))

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The constructor's arguments from the spec's JSON (values as JSON has them: Any)."""
        fields = {key: tuple(value) if isinstance(value, list) else value for key, value in data.items()}
        if "expectation" in data:  # each (busbw, basis) pair travels as a JSON list
            fields["expectation"] = {key: (pair[0], pair[1]) for key, pair in data["expectation"].items()}
        return fields


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


class Point(Protocol):
    """What the harness reads of every kind's points (a kind's own point type has more)."""

    @property
    def index(self) -> int:
        """Its place in run order (--only INDEX names it)."""
        ...

    def label(self) -> str:
        """What the progress bar shows while it runs."""
        ...


SpecT = TypeVar("SpecT", bound=Spec)
"""A kind's spec type."""
PointT = TypeVar("PointT", bound=Point)
"""A kind's point type."""
OptionsT = TypeVar("OptionsT")
"""A kind's options dataclass (benches/options.py: a TargetOptions)."""
StateT = TypeVar("StateT")
"""What a kind's prepare() returns per launch, reaching measure() as run.state (None where it keeps nothing)."""


@dataclass(frozen=True)
class Bench(Generic[SpecT, PointT, OptionsT, StateT]):
    """A bench resolved from its options, before anything launches: the same on every rank."""

    kind: BenchKind[SpecT, PointT, OptionsT, StateT]
    spec: SpecT
    """What the ranks run (to_json() / the kind's spec_from_json())."""
    points: list[PointT]
    """One per result row, in run order; each has .index and .label() (the progress bar's)."""
    notes: tuple[str, ...] = ()
    """Printed with the results: what was measured differently from what was asked, and why."""
    process_per_point: bool = False
    """Launch the ranks once per point (--only INDEX) instead of once for the whole bench."""
    cores: tuple[int, ...] | None = None
    """--bind-cores: the core each local rank is pinned to (rank.py), by local rank; None leaves them unpinned."""
    environments: tuple[tuple[dict[str, str], tuple[int, ...]], ...] = ()
    """Launches by environment (--env-axis): each (the variables it sets, the indexes of its points) is a launch of
    its own (--only INDEXES), since NCCL reads its environment when it creates a communicator. A launch that fails
    before storing a row (NCCL refused the combination) leaves its points as rows noted "not available", and the
    next launch runs. Empty: one launch for the whole bench."""
    launch_env: dict[str, str] = field(default_factory=dict)
    """Variables every launch of the bench gets (--tuner-plugin, --tuner-config)."""


@dataclass
class RankRun(Generic[StateT]):
    """What a kind's measure() gets on every rank besides the point."""

    ctx: RankContext
    run_id: str
    sampler: GpuSampler | None = None
    """This rank's GPU sampler (NVML) or None."""
    trace_dir: Path | None = None
    """Where this rank writes its profiler traces, when the bench records them."""
    fault: Fault | None = None
    """A test-only fault (commbench/faults.py)."""
    run_dir: Path | None = None
    """The run folder (rank 0 writes into it; a kind may write files of its own there, e.g. hunt.json)."""
    state: StateT = field(kw_only=True)
    """What the kind's prepare() returned for this launch (None for a kind that keeps nothing): given by name, so
    that a kind's state is never left out for a default."""


@dataclass
class Measured:
    row: Row | None
    """The result row (rank 0); None on other ranks."""
    samples: list[Row] = field(default_factory=list)
    """Per-iteration sample rows, without the stamp (rank 0)."""
    gpu_samples: list[Row] = field(default_factory=list)
    """This rank's GPU samples during the point (rank 0 writes its own)."""
    rows: list[Row] = field(default_factory=list)
    """More result rows after `row`, for a point that measures several things (a hunt's phase); their samples
    carry their own key columns."""
    iterations: list[Row] = field(default_factory=list)
    """Per-rank iteration times inside each batch (nccl-tests -I), without the stamp (rank 0); the kind's
    iteration_columns."""


class BenchKind(Generic[SpecT, PointT, OptionsT, StateT]):
    """A bench kind, typed by its spec, its points, its options dataclass and its per-launch state: each kind
    declares them (e.g. `BenchKind[SweepSpec, Point, CollectiveOptions, None]`), so its hooks are checked against
    its own spec and points."""

    name: str = ""
    """meta.json's "kind" and the rows' `bench` value."""
    command: str = ""
    """The CLI command and a suite's `kind = ...` (collective sweeps are `commbench sweep`)."""
    title: str = ""
    """What the kind is called in messages, e.g. "DDP sweep (commbench ddp)"."""
    options: type[OptionsT]
    """The options dataclass (fields made with benches.options.option)."""
    bare_suite: str | None = None
    """The shipped suite the command runs when it is given no bench option (bare `commbench sweep`)."""
    result_columns: tuple[str, ...] = ()
    required_columns: tuple[str, ...] = ()
    """What a results file must have; columns added later are filled in empty when an older file lacks them."""
    column_defaults: ClassVar[Mapping[str, object]] = MappingProxyType({})
    """Values of key columns added after a results or samples file was written (older files lack them); read-only,
    shared by every instance of the kind."""
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
    rank_imports: tuple[str, ...] = ()
    """Modules its ranks import that torch's own import does not load (a training step's DDP and FSDP import
    torch._dynamo, 0.85 s of a core per rank): the command's torch host loads them once before it forks torchrun, so
    ranks forked on CPU start with them (execution/torch_host.py)."""
    selftest_values: Mapping[str, object] | None = None
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
    def resolve(self, options: OptionsT, machine: Machine) -> Bench[SpecT, PointT, OptionsT, StateT]:
        raise NotImplementedError

    def spec_from_json(self, text: str) -> SpecT:
        raise NotImplementedError

    # on every rank
    def points(self, spec: SpecT, world: int) -> list[PointT]:
        raise NotImplementedError

    def run_meta(self, spec: SpecT) -> dict[str, object]:
        """Fields rank 0 adds to meta.json when the ranks start: the expectation of the kinds that measure busbw."""
        return {"expectation": spec.expectation_document} if spec.expectation_document else {}

    def prepare(self, spec: SpecT, ctx: RankContext) -> StateT:
        """Per launch, before the first point; the value reaches measure() as run.state (a kind that keeps nothing
        returns None)."""
        raise NotImplementedError

    def measure(self, spec: SpecT, point: PointT, run: RankRun[StateT]) -> Measured:
        raise NotImplementedError

    # after the run (stored files only)
    def table(self, results: pd.DataFrame, verbose: bool = False) -> str:
        """The terminal table of a run's rows: short by default, every detail with verbose (--verbose)."""
        raise NotImplementedError

    def key_numbers(self, results: pd.DataFrame) -> pd.DataFrame:
        """The report's key numbers of one run."""
        raise NotImplementedError

    def row_label(self, row: pd.Series) -> str:
        """One stored row (read back from results.csv) in a few words: compare's and the gate's name for it."""
        raise NotImplementedError

    def unavailable_row(self, spec: SpecT, point: PointT, *, run_id: str, world: int, reason: str) -> Row:
        """The row of a point whose launch (an environment combination, Bench.environments) failed before measuring
        it: its keys, no numbers, and a note "not available: <reason>". Kinds with environment axes define it."""
        raise NotImplementedError

    def samples_of(self, samples: pd.DataFrame, row: pd.Series) -> pd.Series:
        """The boolean mask of samples.csv rows that belong to results row `row` (read back from results.csv)."""
        import pandas as pd

        mask = pd.Series(True, index=samples.index)
        for column in self.sample_keys:
            values, wanted = samples[column], row[column]
            default = self.column_defaults.get(column)
            if isinstance(default, str):  # a key written empty reads back as NaN on either side (env "")
                values = values.astype(object).where(values.notna(), default)
                wanted = default if wanted != wanted or wanted is None else wanted
            mask &= values.astype(str) == str(wanted)
        return mask

    def selftest_verdict(self, rows: pd.DataFrame) -> tuple[bool, str]:
        """Selftest's verdict on this kind's run, whose rows came in full and without wrong results: whether they show
        what the kind must show, and the table's detail."""
        return True, f"{len(rows)} row(s), 0 wrong"

    def n_wrong(self, results: pd.DataFrame | None) -> int:
        """What makes the exit code 1 (wrong results; a hunt's suspects). Counts what a check found: an unchecked row
        adds nothing here, and n_unchecked() says how many there are."""
        if results is None or results.empty:
            return 0
        return int(results[N_WRONG].fillna(0).sum())

    def unchecked(self, results: pd.DataFrame) -> pd.Series:
        """The boolean mask of measured rows that no check verified: a figure in one of the kind's metric columns and
        an empty n_wrong (--no-check, perf -c 0, an import whose source has no #wrong). Their correctness is
        unknown, not 0 wrong. Rows without figures (a refused environment, a hunt's findings) are not counted."""
        import pandas as pd

        columns = [metric.column for metric in self.metrics if metric.column in results.columns]
        if N_WRONG not in results.columns or not columns:
            return pd.Series(False, index=results.index)
        figures = results[columns].apply(pd.to_numeric, errors="coerce")
        return pd.to_numeric(results[N_WRONG], errors="coerce").isna() & figures.notna().any(axis=1)

    def n_unchecked(self, results: pd.DataFrame | None) -> int:
        """How many measured rows no check verified (unchecked())."""
        if results is None or results.empty:
            return 0
        return int(self.unchecked(results).sum())
