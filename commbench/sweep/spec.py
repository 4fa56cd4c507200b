"""What a collective sweep runs: the frozen spec, its validation, and the ordered points every rank agrees on."""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.backends import unsupported_reason
from commbench.bench_kind import Spec
from commbench.collectives import get_collective
from commbench.collectives.base import Collective, Layout
from commbench.errors import CommbenchError
from commbench.names import (
    AUTO,
    BATCH,
    BLOCKING_MODES,
    CPU,
    CUDA,
    DTYPE_BYTES,
    GLOO,
    MEAN,
    NO_OP,
    PER_ITERATION,
    PLACEMENTS,
    Implementation,
    OpName,
    RankAverage,
    ReduceOp,
    TimingChoice,
)
from commbench.units import format_bytes

if TYPE_CHECKING:
    from commbench.measure.timers import BatchOptions  # imports torch: only for the annotation


@dataclass(frozen=True, kw_only=True)
class SweepSpec(Spec):
    """A collective sweep, fully resolved (no `auto` left): the same on every rank."""

    collectives: tuple[str, ...]
    """Collectives in the order they run."""
    impls: tuple[Implementation, ...] = ("builtin", "ring")
    """Implementations: "builtin" is the backend's own collective, "ring" the hand-written ring over send/recv.
    A collective runs those of them it has."""
    sizes: tuple[int, ...]
    """Requested message sizes in bytes; each collective rounds them to whole elements as nccl-tests does."""
    dtypes: tuple[str, ...]
    ops: tuple[ReduceOp, ...]
    """Reduction ops; collectives that do not reduce run once with op "none"."""
    placement: str
    """out, in or both: out-of-place and/or in-place buffers."""
    warmup: int
    iters: int
    """Timed iterations per point (per batch in adaptive mode)."""
    timings: tuple[TimingChoice, ...] = (PER_ITERATION,)
    """Timing modes (commbench/measure/timing.py): per-iteration and/or batch; each point is measured in each."""
    batch_calls: int | None = None
    """Calls per sample in batch mode; None = enough for a batch of about 5 ms (from the warm-up)."""
    target_ci_pct: float | None = None
    """Adaptive mode: stop once the 95 % CI of the median is within ± this percent of the median."""
    max_time_s: float | None = None
    """Adaptive mode: the time budget of one point."""
    ring_chunks: int | None = None
    """Pieces in flight per ring step (--ring-chunks); None = the measured default (collectives/ring.py)."""
    profile_iters: int = 0
    """Iterations per point to record with torch.profiler after timing (0 = no traces)."""
    check: bool = True
    check_iters: int = 1
    """Check runs per point (nccl-tests -c), each on fresh inputs; the first with wrong elements ends the check."""
    timeout_s: float = 300.0
    """A point that makes no progress for this long ends the sweep as failed."""
    root: int = 0
    """The root rank of broadcast and reduce (nccl-tests -r)."""
    agg_iters: int = 1
    """Batch timing: calls per iteration, issued as one group where torch can (nccl-tests -m)."""
    average: RankAverage = MEAN
    """Batch timing: how the ranks' times per call combine (nccl-tests -a; names.RANK_AVERAGES)."""
    blocking: int = 0
    """Batch timing: waits inside a batch (nccl-tests -z; names.BLOCKING_MODES)."""
    cuda_graph: int = 0
    """Batch timing on CUDA: replays of the batch captured as a CUDA graph (nccl-tests -G); 0 = no graph."""
    iteration_times: bool = False
    """Batch timing: also record every iteration's time inside each batch, per rank (nccl-tests -I 1)."""
    environments: tuple[dict, ...] = ({},)
    """The environment combinations of --env-axis (commbench/sweep/env_axes.py), each its own launch with its
    points; ({},) = one launch in the environment the sweep was started in."""
    tuner: dict = field(default_factory=dict)
    """--tuner-plugin and --tuner-config: the NCCL_TUNER_PLUGIN and NCCL_TUNER_CONFIG_FILE every launch gets, with the
    config's SHA-256, recorded in meta.json."""
    left_out: tuple[tuple[str, str], ...] = ()
    """(dtype, op) pairs of the dtypes × ops product that are not run: `commbench perf -d all -o all` runs avg for
    the types its backend averages and leaves out the pairs it cannot run (perf/flags.py fit_to says which)."""

    @classmethod
    def _fields_from_json(cls, data: dict) -> dict:
        fields = super()._fields_from_json(data)
        fields["left_out"] = tuple(tuple(pair) for pair in fields.get("left_out") or ())  # JSON lists → pairs
        return fields

    @property
    def records_traces(self) -> bool:
        return self.profile_iters > 0

    @property
    def batch_options(self) -> "BatchOptions":
        """What batch timing does besides the calls per sample (commbench/measure/timing.py)."""
        from commbench.measure.timers import BatchOptions

        # the number as its BlockingMode: validate() refused any other, and index() raises on one all the same
        blocking = BLOCKING_MODES[BLOCKING_MODES.index(self.blocking)]
        return BatchOptions(agg=self.agg_iters, blocking=blocking, graph_launches=self.cuda_graph,
                            iteration_times=self.iteration_times, average=self.average)


@dataclass(frozen=True)
class Point:
    """One measured row: a collective × impl × dtype × op × placement × size × timing mode."""

    index: int
    collective: str
    impl: Implementation
    dtype: str
    op: OpName
    inplace: bool
    layout: Layout = field(compare=False)
    timing: TimingChoice = PER_ITERATION
    env: str = ""
    """The label of the environment combination it runs under (env_axes.label_of); "" without --env-axis."""

    def label(self) -> str:
        placement = "in-place" if self.inplace else "out-of-place"
        timing = "" if self.timing == PER_ITERATION else f" ({self.timing} timing)"
        env = f" [{self.env}]" if self.env else ""
        return (f"{self.collective} {self.dtype} {self.op} {placement} {format_bytes(self.layout.size_bytes)}"
                f"{timing}{env}")


def validate(spec: SweepSpec, *, nccl_version: tuple[int, ...] | None = None,
             gpu_capability: tuple[int, ...] | None = None) -> None:
    """Refuse anything that cannot run, naming the fix; called before any process is launched. nccl_version and
    gpu_capability: the machine's (None when unknown), for what old NCCL versions and older GPUs lack.

    Each value on its own (a choice, a bound: --iters 1 or more, --timeout above 0) is the option's to check, where
    CollectiveOptions declares it (benches/options.py checks it while the options are read); what is checked here
    relates options to each other, to the collectives and to the machine."""
    for name in spec.collectives:
        get_collective(name)  # refuses an unknown one, naming those there are
    _check_timing_modes(spec)
    _validate_batch_options(spec)
    _check_implementations(spec)
    _check_adaptive(spec)
    _check_root(spec)
    _check_backend_runs(spec, nccl_version, gpu_capability)
    plan(spec, spec.nproc)


def _check_implementations(spec: SweepSpec) -> None:
    """Each collective has one of the implementations asked for."""
    for name in spec.collectives:
        if not impls_for(spec, name):
            has = ", ".join(get_collective(name).implementations)
            raise CommbenchError(f"{name} has no {' or '.join(spec.impls)} implementation (it has: {has}); "
                                 f"add --impl {has.split(', ')[0]}")


def _check_timing_modes(spec: SweepSpec) -> None:
    """auto alone or the modes, and a batch of at least one call (--batch-calls is a number or auto, which the
    option leaves to the sweep to read)."""
    if AUTO in spec.timings and len(spec.timings) > 1:
        raise CommbenchError(f"--timing auto picks one mode per point, so it does not combine with "
                             f"{', '.join(t for t in spec.timings if t != AUTO)}: give auto alone, or the modes")
    if spec.batch_calls is not None and spec.batch_calls < 1:
        raise CommbenchError(f"--batch-calls {spec.batch_calls} must be 1 or more calls per batch, or auto")


def _check_adaptive(spec: SweepSpec) -> None:
    """--target-ci and --max-time together (the adaptive mode), the budget below the hang timeout."""
    if spec.target_ci_pct is None:
        if spec.max_time_s is not None:
            raise CommbenchError("--max-time applies to the adaptive mode only: add --target-ci PERCENT or drop it")
        return
    if spec.max_time_s is None:
        raise CommbenchError("--target-ci needs a time budget per point above 0: add --max-time SECONDS")
    if spec.max_time_s >= spec.timeout_s:
        raise CommbenchError(f"--max-time {spec.max_time_s:g} must be below --timeout {spec.timeout_s:g}, "
                             "or a point on budget would be taken for a hang")


def _check_root(spec: SweepSpec) -> None:
    """The root of broadcast and reduce is a rank of this run."""
    rooted = [name for name in spec.collectives if get_collective(name).has_root]
    if rooted and not 0 <= spec.root < spec.nproc:
        raise CommbenchError(f"--root {spec.root} is not a rank of this run ({', '.join(rooted)} with {spec.nproc} "
                             f"ranks): give a rank from 0 to {spec.nproc - 1}")


def _check_backend_runs(spec: SweepSpec, nccl_version: tuple[int, ...] | None,
                        gpu_capability: tuple[int, ...] | None) -> None:
    """Every collective, implementation, dtype and op the sweep runs is one the backend runs on this device."""
    for name in spec.collectives:
        for impl, dtype, op in itertools.product(impls_for(spec, name), spec.dtypes, ops_for(spec, name)):
            if (dtype, op) in spec.left_out:
                continue
            reason = unsupported_reason(backend=spec.backend, device=spec.device, collective=name, impl=impl,
                                        dtype=dtype, op=op,
                                        nccl_version=nccl_version, gpu_capability=gpu_capability)
            if reason:
                raise CommbenchError(reason)


def _validate_batch_options(spec: SweepSpec) -> None:
    """nccl-tests' knobs: each shapes batch timing only, and the CUDA graph needs CUDA work to capture."""
    if spec.blocking not in BLOCKING_MODES:  # --blocking declares its lowest, 0; the modes end at 3
        raise CommbenchError(f"--blocking {spec.blocking}: choose 0 (calls back to back), 1 (a wait and a barrier "
                             "after each iteration), 2 (a wait after each) or 3 (a wait and a barrier, the barrier "
                             "not timed)")
    asked = [option for option, value in (("--agg-iters", spec.agg_iters != 1), ("--average", spec.average != MEAN),
                                          ("--blocking", spec.blocking != 0), ("--cuda-graph", spec.cuda_graph != 0),
                                          ("--iteration-times", spec.iteration_times)) if value]
    if asked and not ({BATCH, AUTO} & set(spec.timings)):
        raise CommbenchError(f"{', '.join(asked)} shape{'s' if len(asked) == 1 else ''} batch timing, and this sweep "
                             f"times per iteration only: add --timing batch, or drop {' and '.join(asked)}")
    grouped = [option for option, value in (("--agg-iters", spec.agg_iters != 1), ("--cuda-graph", spec.cuda_graph))
               if value]
    if grouped and AUTO in spec.timings:
        raise CommbenchError(f"{' and '.join(grouped)} change what a batch issues, and --timing auto may time a point "
                             "per iteration instead (one call): give --timing batch")
    if spec.cuda_graph:
        _check_cuda_graph(spec)


def _check_cuda_graph(spec: SweepSpec) -> None:
    """--cuda-graph: NCCL work on CUDA to capture, and nothing that needs a stop between the iterations."""
    if spec.device != CUDA or spec.backend == GLOO:
        where = "on CPU" if spec.device == CPU else "with gloo, which cannot be captured"
        raise CommbenchError(f"--cuda-graph {spec.cuda_graph} replays CUDA work captured from NCCL, and this run "
                             f"is {where}; drop --cuda-graph (nccl-tests -G), or run with NCCL on GPUs")
    if spec.blocking == 3:
        raise CommbenchError("--cuda-graph and --blocking 3 do not combine (a graph replays every iteration at "
                             "once, so no barrier can stand between them): drop one")
    if spec.iteration_times:
        raise CommbenchError("--cuda-graph and --iteration-times do not combine (a graph replay has no events "
                             "between iterations): drop one")
    if "ring" in spec.impls:
        raise CommbenchError("--cuda-graph captures the backend's own collectives: use --impl builtin")


def impls_for(spec: SweepSpec, collective: str) -> tuple[Implementation, ...]:
    """The asked-for implementations this collective has (broadcast and all_to_all have no ring)."""
    return tuple(impl for impl in spec.impls if impl in get_collective(collective).implementations)


def ops_for(spec: SweepSpec, collective: str) -> tuple[OpName, ...]:
    """The ops a collective runs with: the asked-for reductions, or "none" when it does not reduce."""
    return spec.ops if get_collective(collective).reduces else (NO_OP,)


def placements_for(spec: SweepSpec, collective: str) -> tuple[bool, ...]:
    """The placements measured for a collective: those asked for that torch can express, else what it can."""
    choices = get_collective(collective).inplace_choices
    wanted = tuple(inplace for inplace in PLACEMENTS[spec.placement] if inplace in choices)
    return wanted or choices


def placement_notes(spec: SweepSpec) -> list[str]:
    """Say where a collective is measured in another placement than asked for, and why."""
    notes = []
    for name in spec.collectives:
        measured = placements_for(spec, name)
        if not set(measured) >= set(PLACEMENTS[spec.placement]):
            only = "in-place" if measured == (True,) else "out-of-place"
            notes.append(f"{name}: torch.distributed offers it {only} only, so it is measured {only}")
    return notes


def plan(spec: SweepSpec, world: int) -> list[Point]:
    """Every point in run order: environment combination (each one launch), collective, impl, dtype, op, size,
    placement (nccl-tests' line holds both), then timing mode (both modes of one buffer back to back)."""
    from commbench.sweep.env_axes import label_of

    points: list[Point] = []
    for environment in spec.environments:
        env = label_of(environment)
        for name in spec.collectives:
            collective = get_collective(name)
            for impl in impls_for(spec, name):
                for dtype in spec.dtypes:
                    elt_bytes = DTYPE_BYTES[dtype]
                    layouts = _layouts(collective, spec.sizes, elt_bytes, world, dtype)
                    for op in ops_for(spec, name):
                        if (dtype, op) in spec.left_out:
                            continue
                        for layout in layouts:
                            for inplace in placements_for(spec, name):
                                for timing in spec.timings:
                                    points.append(Point(len(points), name, impl, dtype, op, inplace, layout, timing,
                                                        env))
    return points


def _layouts(collective: Collective, sizes: Sequence[int], elt_bytes: int, world: int, dtype: str) -> list[Layout]:
    layouts: dict[int, Layout] = {}
    for size in sizes:
        layout = collective.layout(size, elt_bytes, world)
        if layout.count >= 1:  # sizes below one element per rank are skipped (size_notes says so)
            layouts.setdefault(layout.size_bytes, layout)  # sizes that round to one message are measured once
    if not layouts:
        raise CommbenchError(f"size {max(sizes)} B is below one {dtype} element per rank for {collective.name} with "
                             f"{world} ranks (rounded as nccl-tests does); use sizes of "
                             f"{format_bytes(_smallest_size(collective, elt_bytes, world))} or more")
    return list(layouts.values())


def _smallest_size(collective: Collective, elt_bytes: int, world: int) -> int:
    return next(s for s in (2**k for k in range(64)) if collective.layout(s, elt_bytes, world).count >= 1)


def size_notes(spec: SweepSpec, world: int) -> list[str]:
    """Say which requested sizes a collective skips: below one element per rank, nccl-tests would round them to 0 B
    (a sweep from 8 B, as nccl-tests runs it, meets this for reduce_scatter, all_gather and all_to_all)."""
    notes = []
    for name in spec.collectives:
        collective = get_collective(name)
        for dtype in spec.dtypes:
            smallest = _smallest_size(collective, DTYPE_BYTES[dtype], world)
            skipped = [size for size in spec.sizes if collective.layout(size, DTYPE_BYTES[dtype], world).count < 1]
            if skipped:
                notes.append(f"{name} {dtype}: {len(skipped)} size(s) below {format_bytes(smallest)} skipped (each "
                             f"rank's share rounds to 0 elements with {world} ranks, as in nccl-tests)")
    return notes
