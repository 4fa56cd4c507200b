"""Collective calls read out of traces: every call with its size, group and bandwidth, the size histogram, and who
arrives last. The real GPU traces (../shared/data/traces/gpu, from HTA's test data) are checked against figures
worked out here by hand from their events; a small trace in the same format carries the newer ncclDevKernel_*
names."""

import json
import math

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.profiling.call_stats import size_histogram
from commbench.profiling.collective_calls import collective_calls
from commbench.profiling.stragglers import straggler_view
from commbench.profiling.trace_file import load_trace
from tests.test_trace_analysis import GENERIC_KERNEL, GPU_TRACES, _nccl_trace, needs_gpu_traces

pytestmark = pytest.mark.no_process

DDP = "ddp-allreduce-2rank-rank0.json.gz"
SENDRECV = ["sendrecv-128rank-rank0.json.gz", "sendrecv-128rank-rank1.json.gz"]


@needs_gpu_traces
def test_the_ddp_trace_calls_and_their_bandwidth_by_hand():
    calls = collective_calls(load_trace(GPU_TRACES / DDP))
    # each of the 3 ProfilerSteps broadcasts the model's buffers (2 calls) then all-reduces 5 gradient buckets
    assert [call.kind for call in calls] == (["broadcast"] * 2 + ["all_reduce"] * 5) * 3
    assert [call.step for call in calls] == [4] * 7 + [5] * 7 + [6] * 7
    third = calls[2]  # the first all-reduce: ncclKernel_AllReduce_RING_LL_Sum_float, args In msg nelems 2049000,
    # dtype Float, Group size 2, Process Group Name "0"; ts 4458676524716.094, dur 3306.963 µs, rounded inward to
    # whole µs as HTA does: ts 4458676524717, end floor(4458676528023.057) = 4458676528023, so 3306 µs
    assert (third.message.elements, third.message.bytes, third.message.dtype) == (2049000, 8196000, "float32")
    assert (third.group, third.group_size, third.duration_us) == ("0", 2, 3306.0)
    # algbw = 8196000 B / 3306 µs = 2.479129 GB/s; busbw = algbw × 2(n-1)/n = × 1 at n = 2
    assert third.algbw_gbps == pytest.approx(8196000 / 3306 / 1e3) == pytest.approx(2.479129, abs=1e-6)
    assert third.busbw_gbps == pytest.approx(third.algbw_gbps)
    second = calls[1]  # broadcast of 53 Long elements (the int64 buffer), 424 B, busbw factor 1
    assert (second.message.bytes, second.message.dtype) == (53 * 8, "int64")
    histogram = {(row["kind"], row["size_from_bytes"]): row for row in size_histogram(calls)}
    assert histogram[("all_reduce", 8 * 2**20)]["calls"] == 3  # 2049000 × 4 B = 7.8 MiB: one bucket per step
    assert sum(row["calls"] for row in histogram.values()) == 21


@needs_gpu_traces
def test_the_sendrecv_traces_name_no_straggler_where_one_rank_is_last_5_of_6_times():
    calls = {name: collective_calls(load_trace(GPU_TRACES / name)) for name in SENDRECV}
    # rank 0's 3rd SendRecv kernel (step 551, no size recorded) starts at 1682725898295662, rank 1's at
    # 1682725898298964: rank 1 is last by 3302 µs
    view = straggler_view(calls)
    first = view["matched"][0]
    assert (first["step"], first["kind"], first["bytes"], first["last_rank"], first["late_by_us"]) == \
        (551, "sendrecv", None, 1, 3302.0)
    assert len(view["matched"]) == 6 and view["unmatched"] == 8  # sizes differ per rank: all-to-all's splits
    shares = {share["rank"]: share for share in view["ranks"]}
    assert (shares[1]["last"], shares[0]["last"]) == (5, 1)
    assert shares[1]["p_value"] == pytest.approx(7 / 64)  # P(X ≥ 5 | 6 calls, p = 1/2) = (6 + 1) / 2^6
    assert view["stragglers"] == []  # 0.109 is no evidence at p < 0.01


@needs_gpu_traces
def test_sizes_of_an_older_trace_come_from_input_dims():
    calls = collective_calls(load_trace(GPU_TRACES / SENDRECV[0]))
    # record_param_comms of that PyTorch records no msg nelems: Input Dims [[419430400]], Input type unsigned char
    sized = [call for call in calls if call.message is not None]
    assert [(call.message.bytes, call.message.dtype) for call in sized] == [
        (3072, "int64"), (419430400, "uint8"), (419430400, "uint8"), (11386880, "int32")]
    assert calls[1].busbw_gbps == pytest.approx(419430400 / 62783 / 1e3)  # sendrecv: factor 1


def test_new_nccl_kernel_names_are_calls_with_the_size_of_their_launching_call(tmp_path):
    path = _nccl_trace(tmp_path / "rank0.json", [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 200, {}),
        (GENERIC_KERNEL, 300, {}),
        ("ampere_sgemm_128x64_nn", 600, {})])
    calls = collective_calls(load_trace(path))
    assert [(call.kind, call.message.bytes, call.duration_us, call.step) for call in calls] == [
        ("all_reduce", 4096, 50.0, 4), ("all_reduce", 4096, 50.0, 4)]
    assert calls[0].busbw_gbps == pytest.approx(4096 / 50 / 1e3)  # 2 ranks: all-reduce factor 1
    assert [call.sequence for call in calls] == [0, 1]


def test_a_rank_last_every_time_is_named(tmp_path):
    kernels = [("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 120 + 30 * k, {}) for k in range(8)]
    late = [("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 125 + 30 * k, {}) for k in range(8)]
    traces = {str(path): collective_calls(load_trace(path)) for path in (
        _nccl_trace(tmp_path / "rank0.json", kernels, rank=0), _nccl_trace(tmp_path / "rank1.json", late, rank=1))}
    view = straggler_view(traces)
    assert len(view["matched"]) == 8 and {entry["late_by_us"] for entry in view["matched"]} == {5.0}
    assert view["stragglers"] == [1]  # last 8 of 8: p = 1/256
    result = CliRunner().invoke(main, ["trace", "analyze", *traces])
    assert result.exit_code == 0, result.output
    assert "straggler: rank 1 (last far more often than 1/N, p < 0.01)" in result.output


@needs_gpu_traces
def test_cli_prints_calls_and_json_holds_them():
    paths = [str(GPU_TRACES / name) for name in SENDRECV]
    text = CliRunner().invoke(main, ["trace", "analyze", "--calls", *paths])
    assert text.exit_code == 0, text.output
    assert "collective calls by kind and size" in text.output and "stragglers:" in text.output
    assert "no straggler" in text.output
    document = json.loads(CliRunner().invoke(main, ["trace", "analyze", "--json", *paths]).output)
    assert len(document["calls"]) == 20 and document["stragglers"]["stragglers"] == []
    sized = [call for call in document["calls"] if call["bytes"] == 419430400]
    assert all(math.isclose(call["busbw_gbps"], call["bytes"] / call["duration_us"] / 1e3) for call in sized)
