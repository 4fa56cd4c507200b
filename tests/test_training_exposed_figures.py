"""Exposed communication's pure parts: the trace figure across ranks (median and max, never the least rank), the
paired cost against the compute-only baseline, the baseline's memory rule, and how old and new rows read."""

import math

import pandas as pd
import pytest

from commbench.schema.training import EXPOSED_COLUMNS, RESULT_COLUMNS
from commbench.training.compute_baseline import extra_bytes, refusal
from commbench.training.exposed import FSDP2_GLOO_NOTE, median_and_max, paired_cost, table_notes, trace_figures
from commbench.training.table import format_training_table, key_numbers


def _rank(comm_ms, exposed_ms):
    return {"comm_ms": comm_ms, "exposed_comm_ms": exposed_ms, "comm_calls": 3.0, "comm_msg_elems": 1000.0}


@pytest.mark.no_process
def test_the_trace_figure_is_the_median_and_max_over_ranks_not_the_least_rank():
    # rank 2 waited longest for a straggler; rank 0 least: the least-exposed rank (5 ms) is neither figure
    ranks = [_rank(20.0, 5.0), _rank(24.0, 12.0), _rank(40.0, 30.0), _rank(22.0, 9.0)]
    figures = trace_figures(ranks)
    assert figures["exposed_comm_ms"] == 10.5 and figures["exposed_comm_ms_max"] == 30.0
    assert figures["comm_ms"] == 23.0 and figures["comm_ms_max"] == 40.0
    # each rank's own overlap (75, 50, 25, 59.09 %), median of those
    assert figures["overlap_pct"] == pytest.approx((50 + 100 * (1 - 9 / 22)) / 2, abs=0.01)
    assert (figures["comm_calls"], figures["comm_msg_elems"]) == (3.0, 1000.0)


@pytest.mark.no_process
def test_median_and_max_skip_ranks_without_a_number():
    assert median_and_max([3.0, None, math.nan, 1.0, 2.0]) == (2.0, 3.0)
    assert median_and_max([None, math.nan]) == (None, None)
    assert trace_figures([_rank(0.0, 0.0), _rank(0.0, 0.0)])["overlap_pct"] is None  # no comm: no overlap


@pytest.mark.no_process
def test_the_paired_cost_is_the_median_of_step_by_step_differences():
    # drift: both halves of each pair slow down together; the differences stay 10, 12, 11
    assert paired_cost([110.0, 212.0, 311.0], [100.0, 200.0, 300.0]) == 11.0
    assert paired_cost([], []) is None


@pytest.mark.no_process
def test_the_baseline_s_memory_and_when_it_is_absent():
    # DDP: the copy's fp32 parameters and gradients, AdamW's two moments of the whole model
    assert extra_bytes(copy_elements=1000, copy_element_bytes=4, optimizer_elements=1000, state_bytes=8,
                       clone_element_bytes=0) == 16_000
    # FSDP bf16 at 4 ranks: bf16 copy and gradients, plus fp32 clones, gradients and moments of the 250-element shard
    assert extra_bytes(copy_elements=1000, copy_element_bytes=2, optimizer_elements=250, state_bytes=8,
                       clone_element_bytes=4) == 4000 + 4000
    # ZeRO-1 with master weights at 2 ranks: bf16 copy, bf16 clones of the partition, fp32 master and moments
    assert extra_bytes(copy_elements=1000, copy_element_bytes=2, optimizer_elements=500, state_bytes=12,
                       clone_element_bytes=2) == 4000 + 500 * 16
    assert refusal(peak_bytes=60 * 2**20, extra=30 * 2**20, capacity_bytes=100 * 2**20) is None
    assert refusal(peak_bytes=None, extra=30 * 2**20, capacity_bytes=100 * 2**20) is None  # nobody can tell
    text = refusal(peak_bytes=80 * 2**20, extra=30 * 2**20, capacity_bytes=100 * 2**20)
    assert text == ("absent: the local copy needs 30 MiB beside the configuration's peak of 80 MiB, over the 100 MiB "
                    "a rank's device holds")


def _row(**values) -> dict:
    row = dict.fromkeys(RESULT_COLUMNS)
    row.update(schema_version=1, run_id="hand", bench="strategy", config_index=0, config="zero3/fsdp2",
               strategy="zero3", impl="fsdp2", backend="gloo", device="cpu", world_size=2, model_kind="mlp",
               params=1e6, micro_batch=1, accum_steps=1, global_batch=2, step_time_ms_p50=100.0,
               step_time_ms_ci_lo=95.0, step_time_ms_ci_hi=105.0, samples_per_s=20.0, comm_ms=30.0,
               exposed_comm_ms=28.0, overlap_pct=6.7, peak_mem_bytes=2**29, model_state_bytes=2**24,
               model_state_bytes_predicted=2**24, fits=True, n_wrong=0, exposed_comm_ms_nosync=math.nan)
    row.update(values)
    return row


@pytest.mark.no_process
def test_the_table_shows_the_cost_against_compute_and_says_fsdp2_cannot_overlap_over_gloo():
    results = pd.DataFrame([_row(exposed_comm_ms_baseline=31.5, exposed_comm_ms_max=29.0,
                                 compute_baseline="unsharded local copy"),
                            _row(config_index=1, config="ddp", strategy="ddp", impl="ddp",
                                 compute_baseline="absent: the local copy needs 30 MiB beside ...")])
    table = format_training_table(results)
    header, _, first, second = table.splitlines()[:4]
    # the one exposed column is the cost against compute; the trace's 28.0 is not in the short table
    assert header.split().count("exposed") == 1 and "31.5" in first.split() and "31.5" not in second.split()
    assert "28.0" not in first.split()
    assert f"# {FSDP2_GLOO_NOTE}" in table.splitlines()
    assert "# exposed absent: the local copy needs 30 MiB beside ... (the trace's figure, in --verbose, is the one " \
           "left)" in table.splitlines()
    numbers = key_numbers(results)
    assert list(numbers["exposed comm (ms)"])[0] == 31.5
    # the other figures stay in results.csv: the report's key numbers hold one exposed column
    assert [name for name in numbers.columns if "exposed" in name or "no_sync" in name] == ["exposed comm (ms)"]


def _cell(table: str, row: int, name: str) -> str:
    """The cell of column `name` in data row `row`: columns are right-aligned, so it ends where its header does."""
    lines = table.splitlines()
    end = lines[0].index(f" {name}") + 1 + len(name)
    return lines[2 + row][:end].split()[-1]


@pytest.mark.no_process
def test_verbose_shows_all_three_exposed_figures():
    results = pd.DataFrame([_row(impl="ddp", strategy="ddp", exposed_comm_ms_baseline=31.5, exposed_comm_ms_max=29.0,
                                 exposed_comm_ms_nosync=27.25)])
    short, verbose = format_training_table(results), format_training_table(results, verbose=True)
    assert [_cell(verbose, 0, name) for name in ("exposed", "trace exp", "trace max", "no_sync Δ")] == \
        ["31.5", "28.0", "29.0", "27.2"]
    assert _cell(short, 0, "exposed") == "31.5"
    assert "no_sync Δ" not in short.splitlines()[0] and "trace exp" not in short.splitlines()[0]
    assert "trace exp/max = " in verbose and "in --verbose and results.csv" in short


@pytest.mark.no_process
def test_rows_without_the_exposed_columns_still_make_a_table():
    old = pd.DataFrame([{name: value for name, value in _row(impl="ddp", strategy="ddp").items()
                         if name not in EXPOSED_COLUMNS}])
    table = format_training_table(old)
    assert _cell(table, 0, "exposed") == "-"
    assert FSDP2_GLOO_NOTE not in table  # no FSDP2 row
    assert not [note for note in table_notes(old) if "absent" in note]
    assert math.isnan(list(key_numbers(old)["exposed comm (ms)"])[0])


@pytest.mark.no_process
def test_an_older_results_file_without_the_exposed_columns_loads_with_them_missing(tmp_path):
    from commbench import store
    from commbench.benches.strategy import KIND

    old = [name for name in RESULT_COLUMNS if name not in EXPOSED_COLUMNS]
    row = _row(impl="ddp", strategy="ddp")
    (tmp_path / store.RESULTS_FILE).write_text(",".join(old) + "\n" + ",".join(
        "" if row[name] is None else str(row[name]) for name in old) + "\n")
    results = store.read_results(tmp_path, KIND)
    assert results["exposed_comm_ms_baseline"].isna().all() and results["exposed_comm_ms_max"].isna().all()
    assert results["exposed_comm_ms"].tolist() == [28.0]
