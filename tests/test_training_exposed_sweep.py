"""Exposed communication cost exists for every implementation: real torchrun, real gloo ranks, tiny models. DDP,
ZeRO-1 and FSDP1 ZeRO-2/3 at 2 ranks; FSDP2 ZeRO-3 and HSDP at 4 ranks."""

import math

import pytest

from commbench import store
from commbench.benches.strategy import KIND as STRATEGY
from commbench.runs import load_run
from commbench.training.compute_baseline import METHOD

pytestmark = pytest.mark.distributed
TINY = ("--model", "mlp", "--params", "1M", "--layers", "2", "--seq-len", "16", "--micro-batch", "1", "--steps", "6",
        "--profile-steps", "1", "--isolation", "reset")


def _rows(run) -> list[dict]:
    assert run.returncode == 0, run.stderr[-3000:]
    return load_run(run.run_dir).results.to_dict("records")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def _check_exposed(run, rows: list[dict]) -> None:
    samples = store.read_samples(run.run_dir, STRATEGY)
    for row in rows:
        label = row["config"]
        assert row["n_wrong"] == 0, label
        assert row["compute_baseline"] == METHOD, label
        # step − compute-only step: a number for every implementation (it may be near 0 where compute hides it)
        assert _number(row["exposed_comm_ms_baseline"]), (label, row["exposed_comm_ms_baseline"])
        assert 0 < row["step_time_ms_baseline_p50"], label
        # the trace's figure: median and max over ranks, the max never below the median
        assert _number(row["exposed_comm_ms"]) and row["exposed_comm_ms"] <= row["exposed_comm_ms_max"], label
        assert row["comm_ms"] <= row["comm_ms_max"], label
        mine = samples[samples["config_index"] == row["config_index"]]
        assert (mine["phase"] == "paired_step").sum() == (mine["phase"] == "paired_compute").sum() == 6, label


def test_exposed_cost_for_ddp_zero1_and_fsdp1_at_two_ranks(run_commbench):
    run = run_commbench("zero", "--strategy", "ddp,zero1,zero2,zero3", "--impl", "fsdp1", *TINY, timeout=400)
    rows = _rows(run)
    assert [(row["strategy"], row["impl"]) for row in rows] == [("ddp", "ddp"), ("zero1", "zero1"),
                                                                ("zero2", "fsdp1"), ("zero3", "fsdp1")]
    _check_exposed(run, rows)
    assert _number(rows[0]["exposed_comm_ms_nosync"])  # DDP keeps its no_sync figure beside it
    assert "# exposed = step − compute-only step" in run.stdout  # the one exposed figure the table shows


def test_exposed_cost_for_fsdp2_and_hsdp_at_four_ranks(run_commbench):
    run = run_commbench("zero", "--nproc", "4", "--oversubscribe", "--strategy", "zero3,hsdp", "--shard-group", "2",
                        *TINY, timeout=400)
    rows = _rows(run)
    assert [(row["strategy"], row["impl"]) for row in rows] == [("zero3", "fsdp2"), ("hsdp", "fsdp2")]
    _check_exposed(run, rows)
    assert "FSDP2 over gloo (CPU) unshards synchronously" in run.stdout
