"""Timing modes (per-iteration vs nccl-tests' batch) and world size 1, where in-place collectives do no work and a
time at the timer's resolution must never be divided by."""

import math
import time

import pandas as pd
import pytest

from commbench import faults, store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.faults import SKEW_S
from commbench.gate.compare import compare
from commbench.gate.compare_output import format_terminal
from commbench.gate.verdicts import NO_FIGURE, OK
from commbench.measure.bandwidth import algbw_gbps, busbw_gbps
from commbench.measure.timing import BATCH_TARGET_S, MAX_AUTO_BATCH_CALLS, auto_batch_calls
from commbench.sweep.table import format_tables
from tests.conftest import commbench_env

OLD_RUN = store.Path(__file__).parent / "data" / "suite_run_before_kinds" / "gate"
"""A run of the CI suite from before bench kinds and timing modes (the gate's first baseline, 2026-11-29)."""


@pytest.mark.no_process
def test_a_time_at_or_below_zero_gives_no_bandwidth_figure():
    for seconds in (0.0, -1e-9, math.nan):
        assert math.isnan(algbw_gbps(1 << 20, seconds))
        assert math.isnan(busbw_gbps(1 << 20, seconds, 1.0))
    assert algbw_gbps(10**9, 1.0) == pytest.approx(1.0)


@pytest.mark.no_process
def test_auto_batch_lasts_about_the_target():
    assert auto_batch_calls([BATCH_TARGET_S / 10] * 5) == 10
    assert auto_batch_calls([1.0, 2.0, 3.0]) == 1  # a call longer than the target: one call per batch
    assert auto_batch_calls([0.0, 0.0]) == MAX_AUTO_BATCH_CALLS  # nothing measurable: the cap, never a division
    assert auto_batch_calls([1e-12]) == MAX_AUTO_BATCH_CALLS


@pytest.mark.no_process
def test_the_skew_fault_delays_every_barrier_of_its_rank_only(monkeypatch):
    monkeypatch.setenv(faults.ENV_VAR, "skew:1:*")
    fault = faults.from_env()
    calls = []
    barrier = lambda: calls.append("barrier")  # noqa: E731
    assert faults.skewed(fault, barrier, rank=0, point=3) is barrier  # other ranks: the barrier itself
    late = faults.skewed(fault, barrier, rank=1, point=7)  # `*`: every point
    monkeypatch.setattr(faults, "SKEW_S", 0.05)
    start = time.perf_counter()
    late()
    assert calls == ["barrier"] and time.perf_counter() - start >= 0.05


@pytest.mark.no_process
def test_runs_from_before_the_timing_modes_read_as_per_iteration():
    """A run with no timing column: its rows and samples must still join and compare."""
    results = store.read_results(OLD_RUN, COLLECTIVE)
    samples = store.read_samples(OLD_RUN, COLLECTIVE)
    assert set(results["timing"]) == {"per-iteration"} and set(samples["timing"]) == {"per-iteration"}
    assert COLLECTIVE.samples_of(samples, results.iloc[0]).sum() == results.iloc[0]["iters"]


@pytest.mark.distributed
def test_batch_spreads_barrier_skew_that_per_iteration_holds(run_sweep):
    """Rank 1 leaves every timing barrier SKEW_S late (test-only fault): each per-iteration sample holds that skew,
    a batch of 20 calls spreads it over its calls, so batch time per call <= the per-iteration median on the same
    point. (Without the fault this machine's gloo is slower back to back than after a barrier at 4 KiB; measured
    by benchmarks/timing_modes.py, not asserted.)"""
    outcome = run_sweep("-c", "all_reduce", "--impl", "builtin", "--sizes", "4K", "--timing", "per-iteration,batch",
                        "--batch-calls", "20", "--warmup", "2", "--iters", "6",
                        env=commbench_env(COMMBENCH_FAULT="skew:1:*"))
    assert outcome.returncode == 0, outcome.stderr
    results = outcome.results.set_index("timing")
    assert sorted(results.index) == ["batch", "per-iteration"]
    per_iteration, batch = results.loc["per-iteration"], results.loc["batch"]
    assert per_iteration["time_us_p50"] >= SKEW_S * 1e6  # the skew is in every per-iteration sample
    assert batch["time_us_p50"] <= per_iteration["time_us_p50"]
    assert per_iteration["calls_per_sample"] == 1 and batch["calls_per_sample"] == 20
    assert "slowest rank" in per_iteration["timing_method"] and "mean over ranks" in batch["timing_method"]
    assert (per_iteration["n_wrong"], batch["n_wrong"]) == (0, 0)
    samples = outcome.samples
    assert sorted(samples["timing"].unique()) == ["batch", "per-iteration"]
    assert (samples.groupby("timing").size() == 6).all()
    assert "batch timing" in outcome.stdout and "back-to-back calls" in outcome.stdout


@pytest.mark.distributed
def test_world_size_one_marks_no_ops_and_never_divides_by_zero(run_sweep):
    """Point 0 is all_reduce in place (a no-op at 1 rank); point 1 all_gather out of place, whose samples the
    test-only fault switch makes 0 s."""
    outcome = run_sweep("-c", "all_reduce,all_gather", "--impl", "builtin", "--sizes", "64K", "--placement", "both",
                        "--nproc", "1", "--warmup", "1", "--iters", "6", env=commbench_env(COMMBENCH_FAULT="zero:0:1"))
    assert outcome.returncode == 0, outcome.stderr
    assert "Traceback" not in outcome.stderr
    rows = outcome.results
    noops = rows[rows["inplace"]]
    assert len(noops) == 2  # all_reduce and all_gather in place
    assert noops["note"].str.startswith("no-op").all()
    assert noops["algbw_gbps"].isna().all() and (noops["busbw_gbps"] == 0).all()
    zeroed = rows[(rows["collective"] == "all_gather") & ~rows["inplace"]].iloc[0]
    assert zeroed["time_us_p50"] == 0 and pd.isna(zeroed["algbw_gbps"]) and pd.isna(zeroed["busbw_gbps"])
    assert "below the timer's resolution" in zeroed["note"]
    table = format_tables(store.read_results(outcome.run_dir, COLLECTIVE))
    assert "no-op" in table and "inf" not in table
    # the gate on such a run: no 0/0 ratio read as noise or improvement, every figure-less row said so
    entries = compare(outcome.run_dir, outcome.run_dir, {"busbw": 5.0, "time": 5.0})
    by_row = {(entry["row"], entry.get("metric")): entry for entry in entries}
    no_figure = [entry for entry in entries if entry["verdict"] == NO_FIGURE]
    assert len([entry for entry in no_figure if entry["why"].startswith("no-op")]) == 2
    assert any("below the timer's resolution" in entry["why"] for entry in no_figure)
    assert {entry["verdict"] for entry in entries} <= {NO_FIGURE, OK}, by_row
    assert "nan" not in format_terminal(entries).lower()
