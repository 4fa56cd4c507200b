"""Rank entry point of a launch (`torchrun ... -m commbench.rank --run-dir DIR ...`): run the benches prepared in
those run folders (spec.json, and meta.json naming the kind), in order, in one process group."""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from commbench import faults, store
from commbench.bench_kind import BenchKind, Spec
from commbench.benches import get_kind
from commbench.execution import driver
from commbench.machine import Machine
from commbench.names import BIND_CORES_ENV

FAILED_RANK_LINGER_S = 1.0
"""A rank whose run raised (typically: a peer died and gloo/NCCL reported the broken connection) waits this long
before exiting, so that torchrun, polling every 0.1 s, observes the rank that died first and names it as the root
cause. With ranks forked by torchrun, it reports only the lowest-numbered failed rank it sees in one poll."""
WATCHED_TIMEOUT_GRACE_S = 30.0
"""Launched ranks leave hang detection to the launcher's watchdog (which names the hang); their own collective
timeout comes later so that it does not race the watchdog. Ranks running in place have no watchdog: theirs is the
bench's --timeout."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="commbench rank (started by commbench through torchrun)")
    parser.add_argument("--run-dir", type=Path, action="append", required=True, help="a prepared run folder")
    parser.add_argument("--only", type=_indexes, default=None,
                        help="measure only these points, comma-separated (a launch per point or per environment)")
    args = parser.parse_args(argv)
    _threads_as_torchrun_set()
    machine = Machine.here()
    benches: list[tuple[BenchKind, Spec, Path]] = []
    for run_dir in args.run_dir:
        kind = get_kind(store.read_meta(run_dir)["kind"])
        benches.append((kind, kind.spec_from_json((run_dir / store.SPEC_FILE).read_text(encoding="utf-8")), run_dir))
    timeout_s = max(spec.timeout_s for _, spec, _ in benches) + WATCHED_TIMEOUT_GRACE_S
    try:
        with driver.joined(machine, [spec for _, spec, _ in benches], timeout_s=timeout_s) as (ctx, _):
            _bind_to_core(machine.local_rank)
            for kind, spec, run_dir in benches:
                driver.run_bench(kind, spec, ctx, run_dir=run_dir, only=args.only)
    except Exception:
        time.sleep(FAILED_RANK_LINGER_S)
        raise
    assert machine.rank is not None  # driver.joined (init_group) refuses a machine without RANK
    faults.on_exit(faults.from_env(), rank=machine.rank, point=min(args.only) if args.only else None)


def _indexes(text: str) -> frozenset[int]:
    return frozenset(int(index) for index in text.split(","))


def _bind_to_core(local_rank: int) -> None:
    """--bind-cores: this rank's main thread (which issues and times the calls) on a core of its own. Only this
    thread: the process group's threads, started already, stay free to run on any core. Pinned with them, the
    main thread and gloo's I/O thread took turns on one core and a 1 KiB all_reduce read ~3.5 ms instead of ~0.5."""
    cores = os.environ.get(BIND_CORES_ENV)
    if cores:
        os.sched_setaffinity(0, {int(cores.split(",")[local_rank])})


def _threads_as_torchrun_set() -> None:
    """torchrun sets OMP_NUM_THREADS (1) for its ranks; a rank forked from torchrun's agent (CPU launches) has an
    OpenMP runtime that read the variable before it was set, so apply it here."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


if __name__ == "__main__":
    main(sys.argv[1:])
