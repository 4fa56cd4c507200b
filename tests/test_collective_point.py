"""A collective point's row from its timed samples (commbench/sweep/collective_point.py), in this process: a one-rank
gloo group, the timing replaced by known samples, so that the row's figures can be computed from their definitions."""

import statistics

import pytest

from commbench.bench_kind import RankRun
from commbench.execution.distributed import RankContext
from commbench.measure.timing import Measurement
from commbench.names import PER_ITERATION, STOP_ITERS
from commbench.platform import CpuPlatform
from commbench.schema import common
from commbench.sweep import collective_point
from commbench.sweep.spec import SweepSpec, plan

pytestmark = pytest.mark.no_process


def test_the_row_holds_the_samples_in_microseconds_and_algbw_in_gb_per_second(tmp_path, monkeypatch):
    import torch.distributed as dist

    samples_s = [2e-3, 3e-3, 2.5e-3, 2e-3, 4e-3, 2.5e-3, 3e-3]  # seconds per call, median 2.5 ms

    def timed(spec, point, run, iteration):
        return Measurement(list(samples_s), STOP_ITERS, 1, "known samples", PER_ITERATION), []

    monkeypatch.setattr(collective_point, "_timed", timed)
    spec = SweepSpec(collectives=("all_gather",), impls=("builtin",), sizes=(1 << 20,), dtypes=("float32",),
                     ops=("sum",), placement="out", warmup=0, iters=len(samples_s), backend="gloo", device="cpu",
                     nproc=1, timeout_s=60.0)
    (point,) = plan(spec, 1)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ctx = RankContext(rank=0, world=1, local_rank=0, local_world=1, backend="gloo", platform=CpuPlatform("gloo"))
        measured = collective_point.measure_point(spec, point, RankRun(ctx, "r", state=None))
    finally:
        dist.destroy_process_group()
    row = measured.row
    assert [sample["time_us"] for sample in measured.samples] == pytest.approx([s * 1e6 for s in samples_s])
    assert row[common.TIME_US_P50] == pytest.approx(statistics.median(samples_s) * 1e6)  # 2500 µs
    assert row[common.TIME_US_MIN] == pytest.approx(2000.0)
    # S = 1 MiB (nccl-tests' size of an all_gather), algbw = S / t in GB/s (1e9 B/s); busbw × (n−1)/n = 0 at n = 1
    assert row[common.ALGBW_GBPS] == pytest.approx((1 << 20) / 2.5e-3 / 1e9)
    assert row[common.BUSBW_GBPS] == 0.0
    assert row[common.N_WRONG] == 0
