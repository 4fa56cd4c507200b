"""Bench kind `p2p` (`commbench p2p`): point-to-point bandwidth and latency between every ordered pair of ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.bench_kind import Bench, Metric, Plot, Spec
from commbench.benches.cluster_kind import ClusterKind
from commbench.benches.options import TargetOptions, option
from commbench.cluster.specs import SCHEDULES, STATISTICS, Schedule, Statistic
from commbench.errors import CommbenchError
from commbench.machine import resolve_target
from commbench.names import CPU, CUDA, GLOO
from commbench.schema import common
from commbench.schema.p2p import KEY_COLUMNS, REQUIRED_COLUMNS, RESULT_COLUMNS, SAMPLE_COLUMNS, SCHEDULE

if TYPE_CHECKING:
    import pandas as pd

    from commbench.benches.cluster_kind import RankSide, TableSide
    from commbench.cluster.p2p_rank import P2pState
    from commbench.machine import Machine

DEFAULT_SIZES = {CPU: "8,4M", CUDA: "8,256M"}


@dataclass(frozen=True, kw_only=True)
class P2pOptions(TargetOptions):
    sizes: str | None = option("--sizes", help="Bytes sent per transfer: a comma list or min:max:xF; the smallest "
                                               "gives the latency matrix [default: 8,4M on CPU, 8,256M on GPU].")
    schedule: Schedule = option("--schedule", choices=SCHEDULES, default="concurrent", show_default=True,
                           help="concurrent: the disjoint pairs of a round at once (circle method, n−1 rounds); "
                                "serial: one pair at a time, the other ranks idle.")
    statistic: Statistic = option("--statistic", choices=STATISTICS, default="median", show_default=True,
                            help="The figure of each transfer: median, or p10 (10th percentile of its samples; "
                                 "for noisy shared hosts, see commbench hunt --help).")
    warmup: int = option("--warmup", type=int, lowest=0, default=3, show_default=True,
                         help="Untimed transfers before timing each direction.")
    iters: int = option("--iters", type=int, lowest=6, default=20, show_default=True,
                        help="Timed transfers per direction and size (the median is reported).")
    timeout: float = option("--timeout", type=float, above_zero=True, unit="seconds", default=300.0,
                            show_default=True, help="Seconds without a finished size before the run is ended as "
                                                    "failed.")


@dataclass(frozen=True, kw_only=True)
class P2pSpec(Spec):
    sizes: tuple[int, ...]
    schedule: Schedule
    statistic: Statistic
    warmup: int
    iters: int
    records_traces: bool = False


@dataclass(frozen=True)
class P2pPoint:
    index: int
    size_bytes: int

    def label(self) -> str:
        from commbench.units import format_bytes

        return f"p2p all ordered pairs, {format_bytes(self.size_bytes)}"


class P2pKind(ClusterKind[P2pSpec, P2pPoint, P2pOptions, "P2pState"]):
    """Point-to-point bandwidth and latency between every ordered pair of ranks: a rank × rank matrix per size (CSV
    in the run folder, a heatmap with the node boundaries in the report), over the process group's transport.

    Each transfer is timed per iteration (a barrier in the pair's own group before it; the slower side's time) and
    checked once after timing (n_wrong: bytes that are not the sender's). Launches torchrun like a sweep, or runs in
    place inside torchrun/srun (then across nodes). Exit codes: 0 all transfers correct, 1 wrong bytes, 2 bad
    input, 3 the run failed.
    """

    name = command = "p2p"
    title = "point-to-point matrix (commbench p2p)"
    spec_class = P2pSpec
    options = P2pOptions
    result_columns, required_columns = RESULT_COLUMNS, REQUIRED_COLUMNS
    sample_columns = SAMPLE_COLUMNS
    sample_keys = KEY_COLUMNS
    identity = KEY_COLUMNS
    comparability = (common.SCHEMA_VERSION, common.BACKEND, common.DEVICE, common.WORLD_SIZE, SCHEDULE)
    metrics = (Metric("busbw", common.BUSBW_GBPS, True, common.TIME_US),
               Metric("time", common.TIME_US_P50, False, common.TIME_US))
    plots = (Plot("p2p_matrix", "p2p: rank × rank bandwidth (largest size) and latency (smallest size)"),)
    wrong_message = "{n} transfer(s) delivered wrong bytes (see n_wrong); results are not valid"

    def sides(self) -> tuple[RankSide[P2pSpec, P2pPoint, P2pState], TableSide]:
        from commbench.cluster import p2p_rank, p2p_table

        return p2p_rank, p2p_table

    def resolve(self, options: P2pOptions, machine: Machine) -> Bench[P2pSpec, P2pPoint, P2pOptions, P2pState]:
        from commbench.expect.rows import ACROSS_NODES, SAME_NODE, for_machine
        from commbench.units import parse_size_spec

        target = resolve_target(machine, backend=options.backend, device=options.device, nproc=options.nproc,
                                oversubscribe=options.oversubscribe, bind_cores=options.bind_cores)
        if (target.backend, target.device) == (GLOO, CUDA):
            raise CommbenchError("p2p sends between ranks, which gloo cannot do with CUDA tensors; use --backend "
                                 "nccl, or --device cpu")
        if target.nproc < 2:
            raise CommbenchError("p2p needs at least 2 ranks to have a pair; use --nproc 2 or more")
        sizes = tuple(parse_size_spec(options.sizes or DEFAULT_SIZES[target.device]))
        spec = P2pSpec(backend=target.backend, device=target.device, nproc=target.nproc, sizes=sizes,
                       schedule=options.schedule, statistic=options.statistic, warmup=options.warmup,
                       iters=options.iters,
                       timeout_s=options.timeout)
        spec = for_machine(machine, device=target.device, nproc=target.nproc,
                               wanted={SAME_NODE: ("sendrecv", 1), ACROSS_NODES: ("sendrecv", 2)}).onto(spec)
        return Bench(self, spec, self.points(spec, target.nproc), cores=target.cores)

    def points(self, spec: P2pSpec, world: int) -> list[P2pPoint]:
        return [P2pPoint(index, size) for index, size in enumerate(spec.sizes)]

    def row_label(self, row: pd.Series) -> str:
        from commbench.units import format_bytes

        return f"p2p {row['src']}→{row['dst']} {format_bytes(int(row['size_bytes']))}"


KIND = P2pKind()
