"""Bench kind `hunt` (`commbench hunt`): name the slow node or the bad link of an allocation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.bench_kind import Bench, Metric, Plot, Spec
from commbench.benches.cluster_kind import ClusterKind
from commbench.benches.options import TargetOptions, option
from commbench.cluster.specs import PHASES, STATISTICS, HuntPhase, Statistic
from commbench.errors import CommbenchError
from commbench.machine import resolve_target
from commbench.names import CPU, CUDA, GLOO
from commbench.schema import common
from commbench.schema.hunt import HUNT_FILE, KEY_COLUMNS, REQUIRED_COLUMNS, RESULT_COLUMNS, SAMPLE_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from commbench.benches.cluster_kind import RankSide, TableSide
    from commbench.cluster.hunt_rank import HuntState
    from commbench.machine import Machine, Target

DEFAULTS = {CPU: {"intra_sizes": "1M,4M", "pair_size": "4M"}, CUDA: {"intra_sizes": "64M,256M", "pair_size": "256M"}}
"""Sized for seconds per round: on CPU (loopback) 4 MiB takes a few ms, on GPU 256 MiB fills a NIC for ~10 ms."""


@dataclass(frozen=True, kw_only=True)
class HuntOptions(TargetOptions):
    pairs: str = option("--pairs", default="all", show_default=True,
                        help="all: every node pair once (circle method, n−1 rounds of disjoint pairs at once); "
                             "random:K: K rounds of random disjoint pairs, for large allocations.")
    pairs_at_once: int = option("--pairs-at-once", type=int, lowest=0, default=0, show_default=True,
                                help="At most this many node pairs measured at once (a round in parts); 0 = every "
                                     "pair of a round at once. 1 on a shared host whose cores cannot run every "
                                     "pair's ranks at once.")
    intra_sizes: str | None = option("--intra-sizes",
                                     help="Intra-node all_reduce sizes, a comma list [default: 1M,4M on CPU, "
                                          "64M,256M on GPU].")
    pair_size: str | None = option("--pair-size", help="Bytes each rank of a pair sends per bandwidth exchange "
                                                       "[default: 4M on CPU, 256M on GPU].")
    latency_size: str = option("--latency-size", default="8", show_default=True,
                               help="Bytes each rank of a pair sends per latency exchange.")
    warmup: int = option("--warmup", type=int, lowest=0, default=3, show_default=True,
                         help="Untimed exchanges before each measurement.")
    iters: int = option("--iters", type=int, lowest=6, default=20, show_default=True,
                        help="Timed bandwidth exchanges per pair and all_reduces per size (the median is used).")
    latency_iters: int = option("--latency-iters", type=int, lowest=6, default=50, show_default=True,
                                help="Timed latency exchanges per pair (cheap, and small messages are the noisier).")
    statistic: Statistic = option("--statistic", choices=STATISTICS, default="p10", show_default=True,
                            help="The figure of each measurement: p10 (the 10th percentile of its samples: a fault of "
                                 "the pair moves every sample, interference from outside moves some; a node slow only "
                                 "sometimes is the stall test's), or the median.")
    threshold: float = option("--threshold", type=float, above_zero=True, unit="percent", default=10.0,
                              show_default=True,
                              help="Percent slower (in time) than the reference that counts as slow.")
    min_z: float = option("--min-z", type=float, lowest=0, default=3.0, show_default=True,
                          help="Robust z-score (median absolute deviation of the node scores) a slow figure must "
                               "also reach.")
    alpha: float = option("--alpha", type=float, above_zero=True, default=0.01, show_default=True,
                          help="Significance of the rank and stall tests (divided by the number of nodes or pairs "
                               "tested, Bonferroni).")
    stall_factor: float = option("--stall-factor", type=float, above_zero=True, default=3.0, show_default=True,
                                 help="An exchange that takes longer than this many times its pair's median "
                                      "bandwidth exchange is a stall (the stall test: time lost to stalls).")
    baseline: str | None = option("--baseline",
                                  help="A previous hunt's run folder or hunt.json (or a JSON of expected "
                                       "bandwidth/latency/intra_all_reduce), or `expected`: the busbw this "
                                       "machine's topology allows (commbench expect); its reference replaces the "
                                       "allocation's median. With `expected`, --threshold is the shortfall from "
                                       "that ceiling that counts as slow, e.g. 40.")
    confirm_partners: int = option("--confirm-partners", type=int, lowest=1, default=2, show_default=True,
                                   help="Known-good nodes each suspect node is re-paired with in the second pass.")
    confirm_repeats: int = option("--confirm-repeats", type=int, lowest=1, default=3, show_default=True,
                                  help="Times each second-pass pair is measured, its samples pooled: one lucky "
                                       "measurement cannot clear a suspect.")
    seed: int = option("--seed", type=int, lowest=0, default=0, show_default=True, help="Seed of --pairs random.")
    timeout: float = option("--timeout", type=float, above_zero=True, unit="seconds", default=300.0,
                            show_default=True, help="Seconds without a finished phase before the hunt is ended as "
                                                    "failed.")


@dataclass(frozen=True, kw_only=True)
class HuntSpec(Spec):
    intra_sizes: tuple[int, ...]
    pair_size: int
    latency_size: int
    warmup: int
    iters: int
    latency_iters: int
    statistic: Statistic
    threshold_pct: float
    min_z: float
    baseline: dict[str, float] | None
    confirm_partners: int
    confirm_repeats: int
    alpha: float
    stall_factor: float
    random_rounds: int
    pairs_at_once: int
    seed: int
    records_traces: bool = False


@dataclass(frozen=True)
class HuntPoint:
    index: int
    phase: HuntPhase

    def label(self) -> str:
        return {"intra": "intra-node all_reduce", "pairs": "node pairs",
                "second_pass": "second pass and diagnosis"}[self.phase]



class HuntKind(ClusterKind[HuntSpec, HuntPoint, HuntOptions, "HuntState"]):
    """Name the slow node or the bad link of an allocation: intra-node all_reduce per node, then every node pair
    (bandwidth and latency, both ways), a diagnosis against the allocation's median or a --baseline, and a second
    pass that re-pairs each suspect with known-good nodes before naming it.

    Run it across nodes: as one rank of a multi-node torchrun or srun job (each node named by SLURMD_NODENAME, else
    COMMBENCH_NODE_NAME, else its host name), or through `commbench slurm submit` with a suite bench kind = "hunt".
    Writes hunt.json (suspect_nodes, suspect_links with their evidence; exclude: the suspects as a Slurm hostlist)
    and the node matrices as CSV. Exit codes: 0 healthy, 1 suspects found (or a transfer delivered wrong bytes),
    2 bad input, 3 the run failed.
    """

    name = command = "hunt"
    title = "hunt (commbench hunt)"
    spec_class = HuntSpec
    options = HuntOptions
    result_columns, required_columns = RESULT_COLUMNS, REQUIRED_COLUMNS
    sample_columns = SAMPLE_COLUMNS
    sample_keys = KEY_COLUMNS
    identity = KEY_COLUMNS
    comparability = (common.SCHEMA_VERSION, common.BACKEND, common.DEVICE, common.WORLD_SIZE)
    metrics = (Metric("time", common.TIME_US_P50, False, common.TIME_US),)
    plots = (Plot("hunt_node_matrix", "hunt: node × node pair bandwidth and latency, suspects marked"),)
    wrong_message = ("{n} suspect(s) named or transfer(s) that delivered wrong bytes: see the table and "
                     + HUNT_FILE)

    def sides(self) -> tuple[RankSide[HuntSpec, HuntPoint, HuntState], TableSide]:
        from commbench.cluster import hunt_rank, hunt_table

        return hunt_rank, hunt_table

    def resolve(self, options: HuntOptions, machine: Machine) -> Bench[HuntSpec, HuntPoint, HuntOptions, HuntState]:
        from commbench.expect.rows import ACROSS_NODES, INTRA_ALL_REDUCE, for_machine


        target = resolve_target(machine, backend=options.backend, device=options.device, nproc=options.nproc,
                                oversubscribe=options.oversubscribe, bind_cores=options.bind_cores)
        if (target.backend, target.device) == (GLOO, CUDA):
            raise CommbenchError("hunt sends between ranks, which gloo cannot do with CUDA tensors; use --backend "
                                 "nccl, or --device cpu")
        defaults = DEFAULTS[target.device]
        spec = HuntSpec(
            backend=target.backend, device=target.device, nproc=target.nproc,
            intra_sizes=tuple(_sizes(options.intra_sizes or defaults["intra_sizes"], "--intra-sizes")),
            pair_size=_one_size(options.pair_size or defaults["pair_size"], "--pair-size"),
            latency_size=_one_size(options.latency_size, "--latency-size"), warmup=options.warmup,
            iters=options.iters, latency_iters=options.latency_iters, statistic=options.statistic,
            threshold_pct=options.threshold,
            min_z=options.min_z,
            baseline=_baseline(options.baseline, machine, target),
            confirm_partners=options.confirm_partners, confirm_repeats=options.confirm_repeats,
            alpha=options.alpha, stall_factor=options.stall_factor, random_rounds=_random_rounds(options.pairs),
            pairs_at_once=options.pairs_at_once, seed=options.seed,
            timeout_s=options.timeout)
        spec = for_machine(machine, device=target.device, nproc=target.nproc,
                               wanted={INTRA_ALL_REDUCE: ("all_reduce", 1), ACROSS_NODES: ("sendrecv", 2)}).onto(spec)
        notes = () if machine.in_job else (
            "one node: commbench launched the ranks here, so there are no node pairs to test; run `commbench hunt` "
            "inside a multi-node torchrun/srun job or through `commbench slurm submit` with kind = \"hunt\"",)
        return Bench(self, spec, self.points(spec, target.nproc), notes=notes, cores=target.cores)

    def points(self, spec: HuntSpec, world: int) -> list[HuntPoint]:
        return [HuntPoint(index, phase) for index, phase in enumerate(PHASES)]


    def row_label(self, row: pd.Series) -> str:
        other = row.get("node_b")
        pair = f"{row['node_a']}–{other}" if isinstance(other, str) and other else row["node_a"]
        return f"hunt {row['phase']} {row['test']} {pair}"

    def n_wrong(self, results: pd.DataFrame | None) -> int:
        """Exit code 1: every suspect named, and every transfer that delivered wrong bytes."""
        if results is None or results.empty:
            return 0
        suspects = int((results["verdict"].astype(str) == "suspect").sum())
        return suspects + int((results[common.N_WRONG].fillna(0) > 0).sum())


def _baseline(text: str | None, machine: Machine, target: Target) -> dict[str, float] | None:
    """--baseline: none (the allocation's own reference), `expected` (this machine's facts, commbench expect's
    model), or a hunt folder or JSON file."""
    from commbench.cluster.baseline import EXPECTED, expected_baseline, read_baseline

    if not text:
        return None
    if text != EXPECTED:
        return read_baseline(text)
    from commbench.expect.probe import facts_here

    facts = facts_here(measure=target.device == CPU, kept_only=machine.in_job)  # ranks in a job never measure
    return expected_baseline(facts, ranks_per_node=machine.local_world_size or target.nproc, device=target.device)


def _sizes(text: str, flag: str) -> tuple[int, ...]:
    from commbench.units import parse_size_spec

    try:
        return parse_size_spec(text)
    except CommbenchError as error:
        raise CommbenchError(f"{flag}: {error}") from None


def _one_size(text: str, flag: str) -> int:
    sizes = _sizes(text, flag)
    if len(sizes) != 1:
        raise CommbenchError(f"{flag} {text!r} names {len(sizes)} sizes; give one, e.g. {flag} 4M")
    return sizes[0]


def _random_rounds(text: str) -> int:
    """--pairs: all → 0; random:K → K."""
    text = text.strip().lower()
    if text == "all":
        return 0
    kind, _, count = text.partition(":")
    if kind == "random" and count.isdigit() and int(count) >= 1:
        return int(count)
    raise CommbenchError(f"--pairs {text!r} is not all or random:K; e.g. --pairs all, or --pairs random:8 for 8 "
                         "rounds of random disjoint pairs")


KIND = HuntKind()
