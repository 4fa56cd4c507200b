"""Bench kind `collective` (`commbench sweep`): every collective at every message size, checked on every point."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from commbench.bench_kind import Bench, BenchKind, Measured, Metric, Plot, RankRun, Row
from commbench.benches.options import TargetOptions, option
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.machine import resolve_target
from commbench.measure.stats import MIN_SAMPLES_FOR_CI
from commbench.names import (
    AUTO,
    BATCH,
    BUILTIN,
    COLLECTIVE_BENCH,
    COMMBENCH_SOURCE,
    DTYPE_CHOICES,
    DTYPES,
    IMPLEMENTATIONS,
    MEAN,
    NOT_AVAILABLE,
    PER_ITERATION,
    PLACEMENTS,
    RANK_AVERAGES,
    REDUCE_OPS,
    TIMING_CHOICES,
    Implementation,
    RankAverage,
    ReduceOp,
    Timing,
    TimingChoice,
)
from commbench.names import NCCL_TESTS_DTYPES as NCCL_TESTS_TYPES
from commbench.schema import collective as col
from commbench.schema import common
from commbench.schema.collective import (  # the kind's files, declared in commbench/schema/collective.py
    GPU_SAMPLE_COLUMNS,
    ITERATION_COLUMNS,
    KEY_COLUMNS,
    REQUIRED_COLUMNS,
    RESULT_COLUMNS,
    SAMPLE_COLUMNS,
)

if TYPE_CHECKING:
    import pandas as pd

    from commbench.bench_kind import RankContext
    from commbench.machine import Machine
    from commbench.sweep.spec import Point, SweepSpec

DEFAULT_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
DEFAULT_PLACEMENT = "out"
"""Without --placement: out-of-place where torch has it; the in-place-only collectives (all_reduce, broadcast, reduce)
in place, without a note (the table's header says which)."""
DEFAULT_TIMING: Timing = BATCH
"""nccl-tests' method (a sample is the time per call of back-to-back calls); per-iteration is asked for."""
DEFAULT_MAX_TIME_S = 5.0
"""--target-ci without --max-time: each point's budget. A point whose samples are bimodal (scheduler stalls on a
shared CPU) may never reach a tight CI; the budget bounds it and its row says so (stop_reason max_time)."""


@dataclass(frozen=True, kw_only=True)
class CollectiveOptions(TargetOptions):
    collectives: tuple[str, ...] = option(
        "-c", "--collective", many=True, arguments=True,
        help="all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, sendrecv; repeat or "
             "comma-separate, or give them as arguments (commbench sweep all_reduce all_gather) [default: "
             "all_reduce, reduce_scatter, all_gather].")
    sizes: str = option("--sizes", default="1K:16M:x2", show_default=True,
                        help="Message sizes: min:max:xF, min:max:+STEP or a comma list; K/M/G (= KiB/MiB/GiB) are "
                             "1024-based.")
    dtypes: tuple[str, ...] = option("--dtype", many=True, choices=DTYPE_CHOICES,
                                     aliases=tuple(NCCL_TESTS_TYPES.items()),
                                     help=f"{', '.join(DTYPES)} (or nccl-tests' names: float, half, double, ...); "
                                          "repeatable [default: float32].")
    ops: tuple[ReduceOp, ...] = option("--op", many=True, choices=REDUCE_OPS,
                                  help="Reduction for reducing collectives: sum, prod, max, min, avg; repeatable "
                                       "[default: sum].")
    root: int = option("--root", type=int, lowest=0, default=0, show_default=True,
                       help="The root rank of broadcast and reduce.")
    impls: tuple[Implementation, ...] = option("--impl", many=True, choices=IMPLEMENTATIONS,
                                    help="builtin (the backend's own) and/or ring (hand-written over send/recv; "
                                         "all_reduce, reduce_scatter, all_gather) [default: builtin].")
    ring_chunks: int | None = option("--ring-chunks", type=int, lowest=1,
                                     help="Pieces in flight per ring step [default: pieces of at least 4 MiB, at "
                                          "most 4].")
    warmup: int = option("--warmup", type=int, lowest=0, default=5, show_default=True,
                         help="Untimed iterations before timing.")
    iters: int = option("--iters", type=int, lowest=1, default=20, show_default=True,
                        help="Timed samples per point; in adaptive mode the samples before the stopping rule is "
                             "first tested. A 95% CI of the median needs 6 or more.")
    timings: tuple[TimingChoice, ...] = option(
        "--timing", many=True, choices=TIMING_CHOICES,
        help="batch (nccl-tests': a sample is the time per call of back-to-back calls, combined over ranks as "
             "--average says) and/or per-iteration (a barrier before each timed call; the slowest rank's time: the "
             "per-call distribution), repeat for both; or auto: batch where the barriers take over a fifth of "
             "per-iteration timing (5 calls after the warm-up), per-iteration elsewhere [default: batch].")
    batch_calls: str = option("--batch-calls", default=AUTO, show_default=True,
                              help="Iterations per sample with --timing batch (nccl-tests -n); auto = enough for "
                                   "about 5 ms.")
    agg_iters: int = option("--agg-iters", type=int, lowest=1, default=1, show_default=True,
                            help="Batch timing: calls per iteration, issued as one group (nccl-tests -m).")
    average: RankAverage = option("--average", choices=RANK_AVERAGES, default=MEAN, show_default=True,
                          help="Batch timing: the ranks' time per call combined as rank 0's, their mean, the fastest "
                               "(min) or the slowest (max) (nccl-tests -a 0/1/2/3).")
    blocking: int = option("--blocking", type=int, lowest=0, default=0, show_default=True,
                           help="Batch timing (nccl-tests -z): 0 back to back; 1 a wait and a barrier after each "
                                "iteration; 2 a wait after each; 3 as 1 with the barriers not timed.")
    cuda_graph: int = option("--cuda-graph", type=int, lowest=0, default=0, show_default=True,
                             help="Batch timing on NCCL: capture each batch as a CUDA graph and time this many "
                                  "replays of it (nccl-tests -G); 0 = no graph.")
    iteration_times: bool = option("--iteration-times", switch=True, default=False,
                                   help="Batch timing: also record each rank's time of every iteration inside each "
                                        "batch, into iteration_times.csv (nccl-tests -I 1).")
    target_ci: float | None = option("--target-ci", type=float, above_zero=True, unit="percent",
                                     help="Adaptive: sample until the 95% CI of the median is within ±P percent.")
    max_time: float | None = option("--max-time", type=float, above_zero=True, unit="seconds",
                                    help="Adaptive: time budget per point in seconds, warm-up included "
                                         f"[default with --target-ci: {DEFAULT_MAX_TIME_S:g}].")
    placement: str | None = option("--placement", choices=tuple(PLACEMENTS),
                                   help="Out-of-place and/or in-place buffers [default: out-of-place where torch "
                                        "has it, else in-place].")
    check: bool = option("--check", switch=True, negatable=True, default=True, show_default=True,
                         help="Verify every point (n_wrong).")
    check_iters: int = option("--check-iters", type=int, lowest=1, default=1, show_default=True,
                              help="Check runs per point, each on fresh inputs (nccl-tests -c).")
    timeout: float = option("--timeout", type=float, above_zero=True, unit="seconds", default=300.0, show_default=True,
                            help="Seconds without a finished point before the sweep is ended as failed.")
    profile: bool = option("--profile", switch=True, default=False,
                           help="Record torch.profiler traces (per rank and point) under results/<run>/traces/.")
    profile_iters: int = option("--profile-iters", type=int, lowest=1, default=3, show_default=True,
                                help="Iterations per point in each trace (recorded after timing, untimed).")
    env_axes: tuple[str, ...] = option(
        "--env-axis", many=True,
        help="NAME=V1,V2: an environment variable to vary; repeat for more (their cross product). Each "
             "combination is its own launch (NCCL reads its environment when it creates a communicator) and its "
             "rows are keyed by env.")
    nccl_algo: tuple[str, ...] = option("--nccl-algo", many=True,
                                        help="Shortcut for --env-axis NCCL_ALGO=...: ring, tree, nvls, nvlstree, "
                                             "collnetdirect, collnetchain, pat.")
    nccl_proto: tuple[str, ...] = option("--nccl-proto", many=True,
                                         help="Shortcut for --env-axis NCCL_PROTO=...: ll, ll128, simple.")
    tuner_plugin: str | None = option("--tuner-plugin",
                                      help="NCCL_TUNER_PLUGIN for every launch: a tuner plugin library, e.g. "
                                           "NVIDIA's example (see docs/tune.md); recorded in meta.json.")
    tuner_config: str | None = option("--tuner-config",
                                      help="NCCL_TUNER_CONFIG_FILE for every launch (commbench tune writes one); "
                                           "recorded in meta.json with its SHA-256.")
    left_out: tuple[tuple[str, str], ...] = ()
    """Not an option: the (dtype, op) pairs `commbench perf -d all -o all` leaves out (perf/flags.py fit_to), which
    a sweep's own --dtype and --op never do (a pair the backend cannot run is refused there, by name)."""
    gpu_sample_interval: float = option("--gpu-sample-interval", type=float, above_zero=True, unit="seconds",
                                        default=0.05, show_default=True,
                                        help="Seconds between NVML samples of each GPU while a point is timed.")


class CollectiveKind(BenchKind["SweepSpec", "Point", CollectiveOptions, None]):
    """Measure collectives at each message size with statistics and a correctness check on every point.

    COLLECTIVE...: the collectives to run, as -c/--collective names them (`commbench sweep all_reduce all_gather`);
    given both ways, the two must name the same collectives.

    With no option but --out, --run-id, --quiet and --launches, runs the suite suites/default.toml (`commbench run
    default`).

    Launches torchrun once for the whole sweep; inside torchrun or srun (RANK and WORLD_SIZE set) it runs in place.
    Exit codes: 0 all points correct, 1 some point had wrong results, 2 bad input, 3 the run failed.
    """

    name, command, title = COLLECTIVE_BENCH, "sweep", "collective sweep (commbench sweep)"
    options = CollectiveOptions
    bare_suite = "default"
    result_columns, required_columns, sample_columns = RESULT_COLUMNS, REQUIRED_COLUMNS, SAMPLE_COLUMNS
    sample_keys = KEY_COLUMNS
    gpu_sample_columns = GPU_SAMPLE_COLUMNS
    iteration_columns = ITERATION_COLUMNS
    identity = (common.BENCH, col.COLLECTIVE, col.IMPL, col.OP, col.INPLACE, common.SIZE_BYTES, common.DTYPE,
                col.TIMING, col.ENV)
    # runs written before these columns
    column_defaults = MappingProxyType({
        col.TIMING: PER_ITERATION, common.NOTE: "", col.SOURCE: COMMBENCH_SOURCE, col.ENV: "",
        common.EXPECTED_BASIS: "none: the run was written before commbench expected bandwidths"})
    # root: the rows of runs written before it leave it empty (broadcast's root was rank 0 then)
    comparability = (common.SCHEMA_VERSION, common.BACKEND, common.DEVICE, common.WORLD_SIZE)
    cross_source_identity = (common.BENCH, col.COLLECTIVE, col.OP, col.INPLACE, common.SIZE_BYTES, common.DTYPE,
                             col.ENV)
    """The same collective, op, placement, size, dtype and environment (the world size must agree too, as
    comparability says); not impl or timing, which name commbench's own variants."""
    metrics = (Metric("busbw", common.BUSBW_GBPS, True, common.TIME_US, 5.0),
               Metric("time", common.TIME_US_P50, False, common.TIME_US))
    plots = (Plot("busbw_vs_size", "Bus bandwidth vs message size"),
             Plot("latency_fit", "Latency vs message size with the α–β fit"),
             Plot("ring_vs_builtin", "Ring / builtin busbw ratio"))
    wrong_message = "{n} wrong element(s) in the check (see #wrong); results are not valid"

    def resolve(self, options: CollectiveOptions, machine: Machine) -> Bench[SweepSpec, Point, CollectiveOptions, None]:
        from commbench.expect.rows import for_sweep
        from commbench.sweep import environments
        from commbench.sweep.env_axes import label_of
        from commbench.sweep.memory_plan import check_fits
        from commbench.sweep.spec import SweepSpec, placement_notes, plan, size_notes, validate
        from commbench.units import parse_size_spec

        target = resolve_target(machine, backend=options.backend, device=options.device, nproc=options.nproc,
                                oversubscribe=options.oversubscribe, bind_cores=options.bind_cores)
        spec = SweepSpec(
            collectives=options.collectives or DEFAULT_COLLECTIVES,
            impls=options.impls or (BUILTIN,), ring_chunks=options.ring_chunks,
            sizes=parse_size_spec(options.sizes), dtypes=options.dtypes or ("float32",), ops=options.ops or ("sum",),
            placement=options.placement or DEFAULT_PLACEMENT, backend=target.backend, device=target.device,
            nproc=target.nproc,
            warmup=options.warmup, iters=options.iters, timings=options.timings or (DEFAULT_TIMING,),
            batch_calls=_batch_calls(options.batch_calls), target_ci_pct=options.target_ci,
            max_time_s=_max_time(options), check=options.check, check_iters=options.check_iters,
            timeout_s=options.timeout, root=options.root, agg_iters=options.agg_iters, average=options.average,
            blocking=options.blocking, cuda_graph=options.cuda_graph, iteration_times=options.iteration_times,
            profile_iters=options.profile_iters if options.profile else 0,
            gpu_sample_interval_s=options.gpu_sample_interval, left_out=options.left_out)
        launch_environments = environments.resolve(options, backend=target.backend, in_job=machine.in_job)
        spec = replace(spec, environments=launch_environments.combinations, tuner=launch_environments.tuner)
        validate(spec, nccl_version=machine.nccl_version, gpu_capability=machine.gpu_capability)
        spec = for_sweep(machine, device=spec.device, collectives=spec.collectives, nproc=spec.nproc,
                         environments={label_of(combination): combination for combination in spec.environments}
                         ).onto(spec)
        check_fits(spec, machine)  # the largest point's memory against this machine's, before anything launches
        _check_ops_apply(options.ops, spec.collectives)
        few = [few_samples_note(spec.iters)] if spec.iters < MIN_SAMPLES_FOR_CI and spec.target_ci_pct is None else []
        points = plan(spec, spec.nproc)
        by_environment = tuple(
            (combination, tuple(point.index for point in points if point.env == label_of(combination)))
            for combination in spec.environments) if launch_environments.varied else ()
        return Bench(self, spec, points,
                     notes=tuple((placement_notes(spec) if options.placement else []) + size_notes(spec, spec.nproc)
                                 + few), cores=target.cores, environments=by_environment,
                     launch_env=launch_environments.launch_env)

    def spec_from_json(self, text: str) -> SweepSpec:
        from commbench.sweep.spec import SweepSpec

        return SweepSpec.from_json(text)

    def points(self, spec: SweepSpec, world: int) -> list[Point]:
        from commbench.sweep.spec import plan

        return plan(spec, world)

    def prepare(self, spec: SweepSpec, ctx: RankContext) -> None:
        """Nothing kept per launch: each point sets up its own buffers."""
        return None

    def measure(self, spec: SweepSpec, point: Point, run: RankRun[None]) -> Measured:
        from commbench.sweep.collective_point import measure_point

        return measure_point(spec, point, run)

    def table(self, results: pd.DataFrame, verbose: bool = False) -> str:
        from commbench.sweep.table import format_tables

        return format_tables(results, verbose=verbose)

    def key_numbers(self, results: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd

        from commbench.measure.stats import stored_half_width_pct
        from commbench.sweep.bandwidth_bound import AVERAGE_FROM_BYTES
        from commbench.sweep.table_averages import source_average
        from commbench.sweep.table_cells import NOISY_CI_PCT
        from commbench.units import format_bytes

        keys = ["source", "collective", "impl", "backend", "dtype", "env"]
        sources = results["source"] if "source" in results.columns else pd.Series(None, index=results.index)
        envs = results["env"] if "env" in results.columns else pd.Series(None, index=results.index)
        # imported rows say their tool; an empty env is the default environment (a NaN key would drop the rows)
        results = results.assign(source=sources.fillna(COMMBENCH_SOURCE),
                                 env=envs.astype(object).where(envs.notna(), ""))
        # nccl-tests' Avg bus bandwidth is the mean over every row and placement; the mean over the sizes that
        # measure bandwidth rather than latency gets a name of its own
        table = results.groupby(keys, sort=False).agg(**{
            "Avg bus bandwidth (GB/s)": (common.BUSBW_GBPS, "mean"), "max busbw (GB/s)": (common.BUSBW_GBPS, "max")})
        # an imported nccl-tests test: the Avg line its log printed (over unrounded busbw), where a group is whole
        # tests of it
        for key, group in results.groupby(keys, sort=False):
            printed = source_average(group)
            if printed is not None:
                table.loc[key, "Avg bus bandwidth (GB/s)"] = printed[0]
        table["#wrong"] = self._wrong_words(results, keys).reindex(table.index)
        large = results[results[common.SIZE_BYTES] >= AVERAGE_FROM_BYTES].groupby(keys, sort=False)[common.BUSBW_GBPS]
        table.insert(1, f"mean busbw ≥ {format_bytes(AVERAGE_FROM_BYTES)} (GB/s)", large.mean().reindex(table.index))
        table = table.round(3)
        # over every size, not only the large ones: a noisy small point is as untrustworthy as a large one
        widths = results.apply(lambda row: stored_half_width_pct(row, "time_us"), axis=1)
        by_group = (~(widths <= NOISY_CI_PCT)).groupby([results[key] for key in keys], sort=False)
        table["points"] = by_group.size().reindex(table.index).astype(int)
        noisy = by_group.sum().reindex(table.index).astype("Int64")
        # an imported row has no CI to judge: not "noisy", not known (shown as -)
        noisy = noisy.mask(noisy.index.get_level_values("source") != COMMBENCH_SOURCE)
        table[f"noisy points (95 % CI > ±{NOISY_CI_PCT:g} % or none)"] = noisy
        if common.EXPECTED_BUSBW_GBPS in results.columns:  # the busbw the machine allows (commbench expect), or none
            expected = pd.to_numeric(results[common.EXPECTED_BUSBW_GBPS], errors="coerce")
            table.insert(2, "expected busbw (GB/s)",
                         expected.groupby([results[key] for key in keys], sort=False).max().reindex(table.index))
        return table.reset_index()

    def _wrong_words(self, results: pd.DataFrame, keys: list[str]) -> pd.Series:
        """Per group, the wrong elements its checks found, and its unchecked rows said as such: "3", "unchecked"
        (no row checked), "0 (2 unchecked)"; None where nothing was measured. An empty n_wrong is no 0."""
        import pandas as pd

        frame = pd.DataFrame({"wrong": pd.to_numeric(results[common.N_WRONG], errors="coerce"),
                              "unchecked": self.unchecked(results)})
        groups = frame.groupby([results[key] for key in keys], sort=False)
        # one word per group, by the groups' keys (a list, not groupby.apply: that gives a frame without columns
        # when every group's word is None)
        words = [_wrong_word(int(group["wrong"].sum()), int(group["wrong"].notna().sum()),
                             int(group["unchecked"].sum())) for _, group in groups]
        return pd.Series(words, index=groups.size().index)

    def row_label(self, row: pd.Series) -> str:
        from commbench.units import format_bytes  # exact (1 MiB, 1000 B, never a rounded 1.0 MiB): labels stay unique

        placement = "in" if str(row["inplace"]) in ("True", "true", "1") else "out"
        timing = "" if row.get("timing", PER_ITERATION) == DEFAULT_TIMING else f" {row['timing']}"
        env = row.get("env")
        env = f" [{env}]" if isinstance(env, str) and env else ""
        return (f"{row['collective']} {row['impl']} {row['dtype']} {row['op']} {placement} "
                f"{format_bytes(int(row['size_bytes']))}{timing}{env}")

    def unavailable_row(self, spec: SweepSpec, point: Point, *, run_id: str, world: int, reason: str) -> Row:
        from commbench.collectives import get_collective
        from commbench.store import SCHEMA_VERSION

        row: Row = dict.fromkeys(RESULT_COLUMNS, "")  # no number: not measured
        row.update({
            common.SCHEMA_VERSION: SCHEMA_VERSION, common.RUN_ID: run_id, common.BENCH: COLLECTIVE_BENCH,
            col.COLLECTIVE: point.collective, col.IMPL: point.impl, common.BACKEND: spec.backend,
            common.DEVICE: spec.device, common.WORLD_SIZE: world, common.DTYPE: point.dtype, col.OP: point.op,
            col.INPLACE: point.inplace, common.SIZE_BYTES: point.layout.size_bytes, col.TIMING: point.timing,
            col.ENV: point.env, col.COUNT: point.layout.count, common.WARMUP: spec.warmup,
            common.NOTE: NOT_AVAILABLE + reason, col.SOURCE: COMMBENCH_SOURCE,
            col.ROOT: spec.root if get_collective(point.collective).has_root else -1,
            common.EXPECTED_BASIS: "none: not measured"})
        return row

    def run_meta(self, spec: SweepSpec) -> dict[str, object]:
        meta = super().run_meta(spec)
        if spec.environments != ({},):
            from commbench.sweep.env_axes import label_of

            meta["env_combinations"] = [label_of(combination) for combination in spec.environments]
        if spec.tuner:
            meta["tuner"] = spec.tuner
        return meta


def few_samples_note(iters: int) -> str:
    return f"{iters} sample(s) per point: a 95 % CI of the median needs {MIN_SAMPLES_FOR_CI} (±CI shows n/a)"


def _check_ops_apply(ops: tuple[str, ...], collectives: tuple[str, ...]) -> None:
    """--op asked of collectives that take none (they run once per point, op none): refused when no collective of
    the sweep reduces, since the option would change nothing, and a warning when some do, since it applies to
    those."""
    from commbench.collectives import COLLECTIVES

    ignoring = [name for name in collectives if not COLLECTIVES[name].reduces]
    if not ops or not ignoring:
        return
    asked = ",".join(ops)
    takes_none = f"{', '.join(ignoring)} {'takes' if len(ignoring) == 1 else 'take'} no op"
    if len(ignoring) == len(collectives):
        reducing = ", ".join(name for name, collective in COLLECTIVES.items() if collective.reduces)
        raise CommbenchError(f"--op {asked} applies to reducing collectives only ({reducing}) and {takes_none}: "
                             "drop --op, or add a reducing collective with -c")
    reduced = ", ".join(name for name in collectives if name not in ignoring)
    rows = "its rows say" if len(ignoring) == 1 else "their rows say"
    warnings.warn(f"--op {asked} applies to {reduced} only; {takes_none} ({rows} op none)",
                  CommbenchWarning, stacklevel=2)


def _wrong_word(wrong: int, checked: int, unchecked: int) -> str | int | None:
    if not checked:
        return "unchecked" if unchecked else None
    return f"{wrong} ({unchecked} unchecked)" if unchecked else wrong


def _max_time(options: CollectiveOptions) -> float | None:
    if options.max_time is None and options.target_ci is not None:
        return DEFAULT_MAX_TIME_S
    return options.max_time


def _batch_calls(text: str) -> int | None:
    if str(text).strip().lower() == AUTO:
        return None
    try:
        return int(text)
    except ValueError:
        raise CommbenchError(f"bad --batch-calls {text!r}: give a number of calls (e.g. 20) or auto") from None


KIND = CollectiveKind()
