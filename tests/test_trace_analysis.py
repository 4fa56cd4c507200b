"""The trace analyser on real GPU traces (against Holistic Trace Analysis) and on gloo traces recorded here."""

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.profiling import intervals
from commbench.profiling.overlap import analyze
from commbench.profiling.trace_file import load_trace
from tests.conftest import commbench_env

GPU_TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "gpu"
needs_gpu_traces = pytest.mark.skipif(not GPU_TRACES.is_dir(),
                                      reason="no shared GPU traces (../shared/data/traces/gpu, in the developers' "
                                             "checkout only)")
DATASETS = {"ddp": ["ddp-allreduce-2rank-rank0.json.gz"],
            "sendrecv": ["sendrecv-128rank-rank0.json.gz", "sendrecv-128rank-rank1.json.gz"]}


@pytest.mark.no_process
def test_union_and_intersection():
    starts, ends = intervals.merge(np.array([5.0, 0.0, 2.0, 10.0]), np.array([6.0, 3.0, 4.0, 12.0]))
    assert starts.tolist() == [0.0, 5.0, 10.0] and ends.tolist() == [4.0, 6.0, 12.0]
    other = intervals.merge(np.array([3.0, 11.0]), np.array([5.5, 20.0]))
    assert intervals.intersection_length((starts, ends), other) == pytest.approx(1.0 + 0.5 + 1.0)
    assert intervals.intersection_length((starts, ends), (np.empty(0), np.empty(0))) == 0.0


@needs_gpu_traces
@pytest.mark.parametrize("dataset", DATASETS)
def test_overlap_equals_hta(dataset, tmp_path):
    hta = pytest.importorskip("hta.trace_analysis", reason="HTA (traceinsight) is not installed")
    for name in DATASETS[dataset]:
        shutil.copy(GPU_TRACES / name, tmp_path / name)
    ours = {r["rank"]: r for r in (analyze(load_trace(tmp_path / name)) for name in DATASETS[dataset])}
    logging.disable(logging.WARNING)  # HTA logs every parse step
    try:
        for include_last in (True, False):
            theirs = hta.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=include_last)
            table = theirs.get_comm_comp_overlap(visualize=False)
            for rank, pct in zip(table["rank"], table["comp_comm_overlap_pctg"]):
                # whole trace = HTA with the last step; complete steps = HTA's default (last step left out)
                mine = ours[rank]["overlap_pct"] if include_last else ours[rank]["complete_steps"]["overlap_pct"]
                assert mine == pytest.approx(pct, abs=0.005), (dataset, rank, include_last)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.no_process
@needs_gpu_traces
def test_gpu_trace_figures():
    result = analyze(load_trace(GPU_TRACES / "ddp-allreduce-2rank-rank0.json.gz"))
    assert (result["rank"], result["world_size"], result["backend"], result["device"]) == (0, 2, "nccl", "gpu")
    assert result["overlap_pct"] == 15.14  # HTA: 15.14 (include_last_profiler_step=True)
    assert result["complete_steps"]["overlap_pct"] == 14.31  # HTA default: 14.31
    assert [step["step"] for step in result["steps"]] == [4, 5, 6]
    assert result["exposed_comm_us"] == pytest.approx(result["comm_us"] - result["overlap_us"])
    kinds = {entry["kind"]: entry for entry in result["collectives"]}
    assert kinds["AllReduce"]["count"] == 15 and kinds["AllReduce"]["bytes"] > 0  # from the kernels' nelems × dtype
    assert set(kinds) == {"AllReduce", "Broadcast"}


@pytest.mark.no_process
@needs_gpu_traces
def test_cli_json_with_skew():
    paths = [str(GPU_TRACES / name) for name in DATASETS["sendrecv"]]
    result = CliRunner().invoke(main, ["trace", "analyze", "--json", *paths])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    for entry in report["traces"]:
        assert {"rank", "overlap_pct", "exposed_comm_us", "comm_us", "compute_us", "steps"} <= set(entry)
        assert len(entry["steps"]) == 2
    assert report["skew"][0]["kind"] == "SendRecv" and report["skew"][0]["matched"] == 10


def _nccl_trace(path: Path, kernels: list[tuple[str, float, dict]], *, rank: int = 0) -> Path:
    """A small Kineto trace in the shared GPU traces' format: one ProfilerStep on the main thread; an all-reduce call
    (c10d::allreduce_ > record_param_comms > nccl:all_reduce) from 100 to 400 µs; a matmul from 500 to 800 µs. Each
    kernel (name, launch time, extra kernel args) is launched by a cudaLaunchKernelExC at that time, 50 µs long."""
    pid, tid, stream = 2910249, 2919752, 40
    comms = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
             "Group size": 2, "Process Group Name": "0"}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": pid, "tid": tid, "ts": 0, "dur": 1000,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": pid, "tid": tid, "ts": 100, "dur": 300,
         "args": {"External id": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid, "ts": 110, "dur": 280,
         "args": {"External id": 3, **comms}},
        {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": pid, "tid": tid, "ts": 120,
         "dur": 250, "args": {"External id": 4}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid, "ts": 500, "dur": 300,
         "args": {"External id": 5}},
    ]
    for correlation, (name, launch, extra) in enumerate(kernels, start=100):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": pid, "tid": tid,
                       "ts": launch, "dur": 5, "args": {"cbid": 430, "correlation": correlation}})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": launch + 10,
                       "dur": 50, "args": {"device": 0, "stream": stream, "correlation": correlation, **extra}})
    document = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
                "traceEvents": events}
    path.write_text(json.dumps(document))
    return path


GENERIC_KERNEL = "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"


@pytest.mark.no_process
def test_nccl_generic_kernels_count_with_the_collective_that_launched_them(tmp_path):
    path = _nccl_trace(tmp_path / "generic.json", [
        (GENERIC_KERNEL, 200, {}),  # launched inside the all-reduce call: an AllReduce
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 300, {}),
        (GENERIC_KERNEL, 320, {"Collective name": "_reduce_scatter_base"}),  # the kernel names its collective
        (GENERIC_KERNEL, 600, {}),  # launched from the matmul, no collective call around it: unattributed
        ("ampere_sgemm_128x64_nn", 650, {}),
    ])
    result = analyze(load_trace(path))
    kinds = {entry["kind"]: entry for entry in result["collectives"]}
    assert set(kinds) == {"AllReduce", "ReduceScatter", "Generic"}
    assert (kinds["AllReduce"]["count"], kinds["AllReduce"]["generic_kernels"]) == (2, 1)
    # the Generic kernel's message, from its record_param_comms; the other AllReduce kernel records none, so 4096 B is
    # the sum over 1 of the 2 calls, and says so
    assert (kinds["AllReduce"]["bytes"], kinds["AllReduce"]["sized"]) == (4096, 1)
    assert kinds["AllReduce"]["total_us"] == 100 and not kinds["AllReduce"]["unattributed"]
    assert kinds["ReduceScatter"]["count"] == 1 and not kinds["ReduceScatter"]["unattributed"]
    assert (kinds["Generic"]["count"], kinds["Generic"]["unattributed"]) == (1, True)
    text = CliRunner().invoke(main, ["trace", "analyze", str(path)])
    assert text.exit_code == 0, text.output
    assert "AllReduce: 2 x, 100 us, 4096 B over the 1 of 2 that record a size (1 of them ncclDevKernel_Generic, " \
           "attributed to the collective that launched them)" in text.output
    assert "Generic: 1 x, 50 us (ncclDevKernel_Generic, unattributed" in text.output


@pytest.mark.no_process
def test_skew_matches_a_generic_kernel_with_the_named_kernel_of_another_rank(tmp_path):
    generic = _nccl_trace(tmp_path / "rank0.json", [(GENERIC_KERNEL, 200, {})], rank=0)
    named = _nccl_trace(tmp_path / "rank1.json", [("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 230, {})], rank=1)
    result = CliRunner().invoke(main, ["trace", "analyze", "--json", str(generic), str(named)])
    assert result.exit_code == 0, result.output
    skew = json.loads(result.output)["skew"]
    assert [(entry["kind"], entry["matched"], entry["skew_us_max"]) for entry in skew] == [("AllReduce", 1, 30.0)]


@pytest.mark.no_process
def test_foreign_file_is_one_line_exit_2(tmp_path):
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    (tmp_path / "broken.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    for path in ("notes.json", "broken.json.gz", "missing.json"):
        result = CliRunner().invoke(main, ["trace", "analyze", str(tmp_path / path)])
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.distributed
def test_profiled_gloo_sweep_records_and_analyses_traces(run_sweep):
    run = run_sweep("-c", "all_reduce", "--impl", "builtin,ring", "--sizes", "1M", "--profile", "--profile-iters",
                    "4", "--warmup", "1", "--iters", "6")
    assert run.returncode == 0, run.stderr
    traces = sorted((run.run_dir / "traces").iterdir())
    assert [path.name for path in traces] == [
        "rank0-all_reduce-builtin-float32-sum-inplace-1048576B.json.gz",
        "rank0-all_reduce-ring-float32-sum-inplace-1048576B.json.gz",
        "rank1-all_reduce-builtin-float32-sum-inplace-1048576B.json.gz",
        "rank1-all_reduce-ring-float32-sum-inplace-1048576B.json.gz"]
    meta = run.meta
    assert meta["traces_dir"].endswith("traces") and meta["gpu_sampling"].startswith("not sampled")
    assert run.results["gpu_mem_used_peak_bytes"].isna().all()  # CPU run: GPU columns stay empty
    result = CliRunner().invoke(main, ["trace", "analyze", "--json", str(run.run_dir / "traces")])
    assert result.exit_code == 0, result.output
    report = {Path(entry["path"]).name: entry for entry in json.loads(result.output)["traces"]}
    builtin = report["rank0-all_reduce-builtin-float32-sum-inplace-1048576B.json.gz"]
    assert (builtin["rank"], builtin["device"], builtin["backend"]) == (0, "cpu", "gloo")
    assert len(builtin["steps"]) == 4
    assert {entry["kind"]: entry["count"] for entry in builtin["collectives"]} == {"all_reduce": 4}
    assert builtin["comm_us"] > 0
    ring = report["rank1-all_reduce-ring-float32-sum-inplace-1048576B.json.gz"]
    kinds = {entry["kind"]: entry["count"] for entry in ring["collectives"]}
    assert kinds == {"send": 8, "recv": 8}  # 2 phases x 1 step x 4 iterations, K = 1
    assert ring["compute_us"] > 0  # the ring's reductions (aten::add) on the main thread
    for entry in report.values():
        assert 0 <= entry["overlap_pct"] <= 100
        assert entry["exposed_comm_us"] == pytest.approx(entry["comm_us"] - entry["overlap_us"])


@pytest.mark.distributed
def test_cpu_overlap_of_async_all_reduce_with_matmuls(tmp_path):
    """gloo's all_reduce runs on its own thread while the main thread computes: the analyser must see overlap,
    and exposed communication below the communication time."""
    job = Path(__file__).parent / "jobs" / "overlapped_job.py"
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                                str(job), str(tmp_path)], env=commbench_env(), capture_output=True, text=True,
                               timeout=180)
    assert completed.returncode == 0, completed.stderr
    for rank in (0, 1):
        result = analyze(load_trace(tmp_path / f"trace-rank{rank}.json.gz"))
        assert result["device"] == "cpu" and result["rank"] == rank and len(result["steps"]) == 3
        kinds = {entry["kind"]: entry["count"] for entry in result["collectives"]}
        assert kinds["all_reduce"] == 3
        assert result["compute_us"] > 0 and result["comm_us"] > 0
        assert 0 < result["overlap_pct"] < 100
        assert 0 < result["exposed_comm_us"] < result["comm_us"]


@pytest.mark.no_process
def test_empty_and_truncated_traces_exit_2(tmp_path):
    import gzip

    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    (tmp_path / "meta-only.json").write_text('{"traceEvents": [{"ph": "M", "name": "process_name"}]}')
    with gzip.open(tmp_path / "whole.json.gz", "wt") as file:
        file.write('{"traceEvents": [' + ", ".join(['{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, '
                                                    '"dur": 2}'] * 2000) + "]}")
    (tmp_path / "truncated.json.gz").write_bytes((tmp_path / "whole.json.gz").read_bytes()[:300])
    for name in ("empty.json", "meta-only.json", "truncated.json.gz"):
        result = CliRunner().invoke(main, ["trace", "analyze", str(tmp_path / name)])
        assert result.exit_code == 2, (name, result.output)
        assert len(result.output.strip().splitlines()) == 1
    assert CliRunner().invoke(main, ["trace", "analyze", str(tmp_path / "whole.json.gz")]).exit_code == 0
