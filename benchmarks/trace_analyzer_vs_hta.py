"""Benchmark (not a test): commbench's trace analyser against Holistic Trace Analysis on the same traces.

For each dataset of the shared GPU traces (../shared/data/traces/gpu, present in the developers' checkout), times
(a) commbench: load + analyse every rank's trace, and (b) HTA: TraceAnalysis(trace_dir) + get_comm_comp_overlap(),
interleaved over rounds, and prints the median seconds, the speed ratio (goal: commbench ≥ 2× faster) and both
tools' overlap % (they must agree).

    pip install --no-deps traceinsight==0.6.1 && pip install -e '.[hta]'
    python benchmarks/trace_analyzer_vs_hta.py [--rounds 5]
"""

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from commbench.profiling.overlap import analyze
from commbench.profiling.trace_file import load_trace

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "gpu"
DATASETS = {"ddp 2-rank (rank 0)": ["ddp-allreduce-2rank-rank0.json.gz"],
            "sendrecv 128-rank (ranks 0, 1)": ["sendrecv-128rank-rank0.json.gz", "sendrecv-128rank-rank1.json.gz"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    print(f"{'dataset':>32} {'commbench s':>12} {'HTA s':>8} {'speed-up':>9}   overlap % commbench / HTA")
    for label, names in DATASETS.items():
        folder = Path(tempfile.mkdtemp())
        for name in names:
            shutil.copy(TRACES / name, folder / name)
        ours_s, theirs_s = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            ours = [analyze(load_trace(folder / name)) for name in names]
            ours_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            table = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True).get_comm_comp_overlap(
                visualize=False)
            theirs_s.append(time.perf_counter() - start)
        ours_pct = "/".join(f"{r['overlap_pct']:.2f}" for r in sorted(ours, key=lambda r: r["rank"]))
        theirs_pct = "/".join(f"{p:.2f}" for p in table.sort_values("rank")["comp_comm_overlap_pctg"])
        ours_median, theirs_median = statistics.median(ours_s), statistics.median(theirs_s)
        print(f"{label:>32} {ours_median:>12.3f} {theirs_median:>8.3f} {theirs_median / ours_median:>8.2f}x   "
              f"{ours_pct} / {theirs_pct}")
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
