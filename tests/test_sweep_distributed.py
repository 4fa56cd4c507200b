"""End-to-end sweeps with real torchrun and gloo ranks on CPU: files, schema, checks, crashes, hangs, concurrency."""

import json
import re
import subprocess
import sys
import time

import pandas as pd
import pytest

from commbench import store
from commbench.benches.collective import DEFAULT_MAX_TIME_S
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.collectives import COLLECTIVES
from tests.conftest import commbench_env
from tests.rank_jobs import assert_ended_or_torn_down
from tests.test_stopping_rule import counts_tested_at

pytestmark = pytest.mark.distributed

FAST = ("--warmup", "1", "--iters", "6")
GLOO_CPU = ("--backend", "gloo", "--device", "cpu")


def _assert_consistent(results: pd.DataFrame, samples: pd.DataFrame) -> None:
    assert list(results.columns) == list(COLLECTIVE.result_columns)
    assert list(samples.columns) == list(COLLECTIVE.sample_columns)
    for _, row in results.iterrows():
        assert row["time_us_min"] <= row["time_us_p50"] <= row["time_us_p95"]
        assert row["time_us_ci_lo"] <= row["time_us_p50"] <= row["time_us_ci_hi"]
        collective = COLLECTIVES[row["collective"]]
        layout = collective.layout(row["size_bytes"], {"float32": 4, "bfloat16": 2}[row["dtype"]],
                                   row["world_size"])
        moved = collective.algbw_bytes(layout, row["world_size"])
        assert row["algbw_gbps"] == pytest.approx(moved / (row["time_us_p50"] * 1e-6) / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * collective.busbw_factor(row["world_size"]))
        # the ring counts what it sends; builtin rows carry the same ring model, and both must equal it exactly
        assert row["bytes_source"] == ("counted" if row["impl"] == "ring" else "model")
        assert row["bytes_sent_per_rank"] == pytest.approx(collective.bus_bytes(layout, row["world_size"]), rel=1e-12)
        keys = (samples[list(COLLECTIVE.sample_keys)] == row[list(COLLECTIVE.sample_keys)]).all(axis=1)
        point_samples = samples[keys]
        assert len(point_samples) == row["iters"]
        assert point_samples["time_us"].median() == pytest.approx(row["time_us_p50"])


def test_two_rank_sweep_of_every_collective(run_sweep):
    run = run_sweep("-c", "all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all,sendrecv",
                    "--sizes", "1K,64K", "--dtype", "float32,bfloat16", "--placement", "both", "--impl", "builtin,ring",
                    *FAST)
    assert run.returncode == 0, run.stderr
    meta = run.meta
    assert meta["status"] == "complete" and meta["reason"] is None
    for field in ("schema_version", "command_line", "start_time", "end_time", "commbench_version", "git_commit",
                  "torch_version", "backend", "backend_version", "world_size", "hosts", "device_names", "env",
                  "driver_version"):
        assert field in meta, field
    assert meta["world_size"] == 2 and meta["backend"] == "gloo" and len(meta["device_names"]) == 2
    results = run.results
    # RS and AG in both placements, AR, broadcast and reduce in place only, a2a and sendrecv out of place only: 2 sizes
    # x 2 dtypes each; AR, RS and AG also with the ring
    per_collective = results.groupby(["collective", "impl"]).size().to_dict()
    assert per_collective == {("reduce_scatter", "builtin"): 8, ("reduce_scatter", "ring"): 8,
                              ("all_gather", "builtin"): 8, ("all_gather", "ring"): 8,
                              ("all_reduce", "builtin"): 4, ("all_reduce", "ring"): 4,
                              ("broadcast", "builtin"): 4, ("reduce", "builtin"): 4, ("all_to_all", "builtin"): 4,
                              ("sendrecv", "builtin"): 4}
    assert (results["n_wrong"] == 0).all()
    assert set(results["stop_reason"]) == {"iters"}
    _assert_consistent(results, run.samples)
    assert "#  size (B)  count (elements)      type" in run.stdout
    assert "mean busbw ≥ 1 MiB: no size ≥ 1 MiB measured" in run.stdout
    assert f"# Results: {run.run_dir}" in run.stdout
    # gloo blocks the host: no issue time apart from the call, no spin, and the rows and the table say so
    assert results["issue_us_per_call"].isna().all() and results["spin_covered"].isna().all()
    assert set(results["host_bound"]) == {"not applicable"}
    assert results["timing_method"].str.contains("gloo's calls block the host: its issue is part of the call").all()
    assert "host-bound" not in run.stdout  # the short table keeps quiet about it; --verbose and perf say it


def test_three_ranks_with_every_reduction(run_sweep):
    run = run_sweep("--nproc", "3", "--oversubscribe", "-c", "all_reduce,reduce_scatter,all_gather,all_to_all",
                    "--impl", "builtin",
                    "--op", "sum,max,min,avg", "--sizes", "1000,1M", "--dtype", "float32,bfloat16", *FAST)
    assert run.returncode == 0, run.stderr
    results = run.results
    assert (results["world_size"] == 3).all() and (results["n_wrong"] == 0).all()
    rs = results[(results["collective"] == "reduce_scatter") & (results["dtype"] == "float32")]
    assert sorted(set(rs["count"])) == [80, 87380]  # 250 floats / 3 ranks -> 83 -> multiple of 4
    _assert_consistent(results, run.samples)
    # only all_reduce keeps 1 MiB; the others round below it and their mean ≥ 1 MiB names no size
    assert run.stdout.count("mean busbw ≥ 1 MiB: ") == 4 and run.stdout.count("(8 results, at 1 MiB)") == 1


def test_roots_prod_and_the_small_integer_types(run_sweep):
    """broadcast and reduce from rank 1, prod among the reductions, and nccl-tests' int8, uint8 and int64: every
    point checked exactly (the check's patterns stay exact in each type), every row saying its root."""
    run = run_sweep("-c", "broadcast,reduce,all_reduce", "--root", "1", "--dtype", "int8,uint8,int64",
                    "--op", "sum,prod,max", "--sizes", "1K", *FAST)
    assert run.returncode == 0, run.stderr
    results = run.results
    assert len(results) == 3 + 9 + 9 and (results["n_wrong"] == 0).all()
    assert set(results.loc[results["collective"] != "all_reduce", "root"]) == {1}
    assert set(results.loc[results["collective"] == "all_reduce", "root"]) == {-1}
    assert set(results["op"]) == {"sum", "prod", "max", "none"}


def test_injected_wrong_result_is_caught(run_sweep):
    run = run_sweep("-c", "all_reduce", "--sizes", "1K,4K,16K", "--impl", "builtin", *FAST,
                    env=commbench_env(COMMBENCH_FAULT="wrong:1:1"))
    assert run.returncode == 1
    assert "wrong element" in run.stderr
    assert list(run.results["n_wrong"]) == [0, 1, 0]
    assert "WRONG RESULT" in run.stdout
    assert run.meta["status"] == "complete"
    # every row checked: a count in the report's key numbers, and no word of unchecked rows
    assert COLLECTIVE.key_numbers(run.results)["#wrong"].tolist() == [1] and "unchecked" not in run.stderr


def test_killed_rank_keeps_written_rows_and_marks_failed(run_sweep):
    started = time.monotonic()
    run = run_sweep("-c", "all_reduce", "--sizes", "1K,4K,16K,64K", "--impl", "builtin", "--timeout", "60", *FAST,
                    env=commbench_env(COMMBENCH_FAULT="kill:1:2"))
    assert time.monotonic() - started < 60
    assert run.returncode == 3
    meta = run.meta
    assert meta["status"] == "failed"
    assert "rank 1 exited with code -9 (SIGKILL)" in meta["reason"]
    assert "sweep failed" in run.stderr and "Traceback" not in run.stderr
    results = run.results
    assert list(results["size_bytes"]) == [1024, 4096]  # the two points measured before the kill, intact
    assert (results["n_wrong"] == 0).all()
    _assert_consistent(results, run.samples)


def test_rank_dying_after_the_last_row_leaves_the_run_complete_with_a_note(run_sweep):
    # seen for real: a rank aborting in gloo's teardown ("terminate called without an active exception") after every
    # point was stored and checked on all ranks; the run is complete, and says how its ranks ended
    run = run_sweep("-c", "all_reduce", "--impl", "builtin", "--sizes", "4K", *FAST,
                    env=commbench_env(COMMBENCH_FAULT="abort:1:0"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.meta["status"] == "complete" and "rank 1 exited with code -6 (SIGABRT)" in run.meta["teardown"]
    assert "ranks failed on the way out: rank 1 exited with code -6 (SIGABRT)" in run.stdout
    assert (run.results["n_wrong"] == 0).all()


def test_hung_rank_ends_the_sweep_within_the_timeout(run_sweep, tmp_path):
    timeout = 8
    started = time.monotonic()
    run = run_sweep("-c", "all_reduce", "--sizes", "1K,4K,16K", "--impl", "builtin", "--timeout", str(timeout),
                    *FAST, env=commbench_env(COMMBENCH_FAULT="hang:1:1"))
    elapsed = time.monotonic() - started
    assert run.returncode == 3
    # launch (~5 s) + one point + the timeout + stopping the ranks; far below the 300 s a gloo hang could last
    assert elapsed < timeout + 40, elapsed
    assert "no point finished for" in run.meta["reason"]
    assert list(run.results["size_bytes"]) == [1024]
    leftover = subprocess.run(["pgrep", "-f", str(run.run_dir)], capture_output=True, text=True).stdout
    assert leftover == "", f"ranks still running: {leftover}"


def test_two_sweeps_at_once_do_not_collide(tmp_path):
    commands = [[sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce", "--sizes", "1K,64K",
                 "--impl", "builtin", *FAST, *GLOO_CPU, "-q", "--out", str(tmp_path / "results")] for _ in range(2)]
    processes = [subprocess.Popen(command, cwd=tmp_path, env=commbench_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for command in commands]
    outputs = [process.communicate(timeout=180) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    run_dirs = sorted((tmp_path / "results").iterdir())
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        assert store.read_meta(run_dir)["status"] == "complete"
        assert len(store.read_results(run_dir, COLLECTIVE)) == 2


def test_inside_torchrun_it_runs_in_place(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               "-m", "commbench", "sweep", "-c", "all_gather", "--sizes", "4K", "--impl", "builtin,ring", *FAST,
               *GLOO_CPU, "--profile",
               "--profile-iters", "2",
               "--out", str(tmp_path / "results"), "--run-id", "inplace"]
    completed = subprocess.run(command, cwd=tmp_path, env=commbench_env(), capture_output=True, text=True,
                               timeout=180)
    run_dir = tmp_path / "results" / "inplace"
    assert store.read_meta(run_dir)["status"] == store.STATUS_COMPLETE, completed.stderr[-3000:]
    assert_ended_or_torn_down(completed, stored_complete=True)
    assert [path.name for path in (tmp_path / "results").iterdir()] == ["inplace"]  # rank 1 wrote nothing
    assert not (run_dir / store.LAUNCH_LOG).exists()  # no nested torchrun
    assert store.read_meta(run_dir)["world_size"] == 2
    assert list(store.read_results(run_dir, COLLECTIVE)["impl"]) == ["builtin", "ring"]
    # rank 1 was not handed the run folder; it learns it from rank 0 and writes its own traces there
    assert sorted(path.name.split("-")[0] for path in (run_dir / "traces").iterdir()) == ["rank0"] * 2 + ["rank1"] * 2
    assert completed.stdout.count("# Results:") == 1


@pytest.mark.parametrize("target, budget, reason", [("100", (), "ci"), ("0.0001", ("--max-time", "1"), "max_time")])
def test_adaptive_sampling_records_why_it_stopped(run_sweep, target, budget, reason):
    run = run_sweep("-c", "all_reduce", "--impl", "builtin", "--sizes", "1K", "--warmup", "1", "--iters", "6",
                    "--target-ci", target, *budget)
    assert run.returncode == 0, run.stderr
    row = run.results.iloc[0]
    assert row["stop_reason"] == reason
    if reason == "max_time":
        assert row["iters"] > 6
        assert re.search(r"^ +1024 .* max-time$", run.stdout, re.MULTILINE), run.stdout  # the row says so
    else:  # --target-ci alone: the default budget per point, far from spent; the stop came at a test count
        assert row["iters"] in counts_tested_at(6, 100_000)
        spec = json.loads((run.run_dir / store.SPEC_FILE).read_text())
        assert spec["max_time_s"] == DEFAULT_MAX_TIME_S
    _assert_consistent(run.results, run.samples)


def test_auto_timing_picks_a_mode_per_point_and_says_why(run_sweep):
    run = run_sweep("-c", "all_reduce", "--impl", "builtin", "--sizes", "1K,4M", "--timing", "auto", *FAST)
    assert run.returncode == 0, run.stderr
    assert len(run.results) == 2
    for _, row in run.results.iterrows():
        assert row["timing"] in ("per-iteration", "batch")
        assert f"auto: {row['timing']}, since per-iteration timing spent" in row["timing_method"]
        assert row["timing_method"].startswith(row["timing"])
    _assert_consistent(run.results, run.samples)


def test_world_size_one_without_check(run_sweep):
    run = run_sweep("--nproc", "1", "-c", "all_reduce,reduce_scatter", "--sizes", "1K", "--no-check",
                    "--impl", "builtin,ring", *FAST)
    assert run.returncode == 0, run.stderr
    assert list(run.results["impl"]) == ["builtin", "ring", "builtin", "ring"]  # the ring is a no-op at n = 1
    assert (run.results["busbw_gbps"] == 0).all()
    # all_reduce is in place: nothing moves at n = 1, so no algbw figure; reduce_scatter out of place copies
    in_place = run.results["inplace"]
    assert run.results[in_place]["algbw_gbps"].isna().all() and (run.results[~in_place]["algbw_gbps"] > 0).all()
    assert (run.results["bytes_sent_per_rank"] == 0).all()
    assert run.results["n_wrong"].isna().all()
    assert "busbw is 0 at world size 1" in run.stdout
    assert "N/A" in run.stdout
    # exit 0 vouches for no row here: said on stderr, and the report's key numbers say unchecked, not 0 wrong
    assert "commbench: sweep: 4 row(s) unchecked (n_wrong empty" in run.stderr
    assert COLLECTIVE.key_numbers(run.results)["#wrong"].tolist() == ["unchecked"] * 4  # collective × impl


def test_the_json_of_an_unchecked_sweep_counts_its_rows_unchecked_not_0_wrong(run_sweep):
    run = run_sweep("--nproc", "1", "-c", "all_reduce", "--sizes", "1K,4K", "--no-check", "--json", *FAST)
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["n_unchecked"] == 2 and document["n_wrong"] == 0


def test_bind_cores_pins_each_ranks_calling_thread_to_its_own_core(run_sweep):
    import os

    run = run_sweep("-c", "all_reduce", "--impl", "builtin", "--sizes", "1K", "--nproc", "2", "--bind-cores", *FAST)
    if len(os.sched_getaffinity(0)) < 2:
        assert run.returncode == 2 and "needs a core per rank" in run.stderr
        return
    assert run.returncode == 0, run.stderr
    usable = sorted(os.sched_getaffinity(0))
    assert run.meta["rank_cores"] == [[usable[0]], [usable[1]]]
    free = run_sweep("-c", "all_reduce", "--impl", "builtin", "--sizes", "1K", "--nproc", "2", *FAST)
    assert free.meta["rank_cores"] == [usable, usable]
