"""FSDP2's copy-in and copy-out kernels in a GPU trace are communication-side work, not the computation that hides
communication. The trace is one rank's FSDP2 unshard as Kineto writes it (this machine has no GPU to record one):
inside "FSDP::all_gather (blocks.0)" the fsdp::all_gather_copy_in operator launches a generic copy kernel on the
copy-in stream, then the NCCL all-gather runs on its own stream while a compute kernel runs on the default stream;
"FSDP::all_gather_copy_out" launches fsdp::split_with_sizes_copy's copy kernel after the all-gather, with nothing to
hide it; the reduce-scatter's fsdp::chunk_cat copy-in comes last, with a compute kernel over half of it."""

import pytest

from commbench.profiling.collective_calls import collective_calls
from commbench.profiling.overlap import analyze
from commbench.profiling.trace_file import load_trace
from tests import kineto_trace as kt

COPY = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(...)"
SPLIT_COPY = "void at::native::(anonymous namespace)::split_with_sizes_copy_out_contiguous_no_cast_kernel<float>(...)"
COMPUTE = "ampere_sgemm_128x64_nn"
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COPY_IN_STREAM, AG_STREAM = 21, 22


def _fsdp2_unshard(tmp_path):
    events = [
        kt.annotation("ProfilerStep#1", 0, 2000),
        kt.annotation("FSDP::all_gather (blocks.0)", 10, 120),
        kt.cpu_op("fsdp::all_gather_copy_in", 20, 40),
        kt.launch("cudaLaunchKernel", 30, correlation=1),
        kt.device(COPY, 100, 100, correlation=1, stream=COPY_IN_STREAM),           # 100-200: copy-in
        kt.cpu_op("record_param_comms", 70, 30, **{"Collective name": "_allgather_base", "In msg nelems": 256,
                                                   "Out msg nelems": 512, "dtype": "Float", **kt.world_group(2)}),
        kt.launch("cudaLaunchKernel", 80, correlation=2),
        kt.device(ALL_GATHER, 200, 300, correlation=2, stream=AG_STREAM),          # 200-500: all-gather
        kt.launch("cudaLaunchKernel", 140, correlation=3),
        kt.device(COMPUTE, 150, 250, correlation=3),                               # 150-400: compute
        kt.annotation("FSDP::all_gather_copy_out (blocks.0)", 450, 50),
        kt.cpu_op("fsdp::split_with_sizes_copy", 455, 40),
        kt.launch("cudaLaunchKernel", 460, correlation=4),
        kt.device(SPLIT_COPY, 500, 60, correlation=4),                             # 500-560: copy-out
        kt.cpu_op("fsdp::chunk_cat", 600, 30),
        kt.launch("cudaLaunchKernel", 605, correlation=5),
        kt.device(COPY, 700, 100, correlation=5),                                  # 700-800: reduce-scatter copy-in
        kt.launch("cudaLaunchKernel", 640, correlation=6),
        kt.device(COMPUTE, 750, 100, correlation=6, stream=COPY_IN_STREAM),        # 750-850: compute
    ]
    return load_trace(kt.write(tmp_path / "rank0.json", events, rank=0, world=2, backend="nccl"))


@pytest.mark.no_process
def test_fsdp_copy_kernels_count_as_communication_not_compute(tmp_path):
    result = analyze(_fsdp2_unshard(tmp_path))
    assert result["device"] == "gpu"
    # comm: copy-in 100-200, all-gather 200-500, copy-out 500-560 (one interval 100-560), chunk_cat 700-800
    assert result["comm_us"] == 460 + 100 and result["comm_copy_us"] == 100 + 60 + 100
    # compute: the two compute kernels only (150-400, 750-850), never the copies
    assert result["compute_us"] == 250 + 100
    assert result["overlap_us"] == 250 + 50
    assert result["exposed_comm_us"] == 560 - 300
    # HTA's rule would have counted the copies as compute: compute 100-400, 500-560, 700-850 and an exposed
    # all-gather of 100 µs only; the copies' own time is what that hid


@pytest.mark.no_process
def test_fsdp_copies_are_not_collective_calls(tmp_path):
    trace = _fsdp2_unshard(tmp_path)
    assert [(entry["kind"], entry["count"]) for entry in analyze(trace)["collectives"]] == [("AllGather", 1)]
    assert [call.kind for call in collective_calls(trace)] == ["all_gather"]


@pytest.mark.no_process
def test_a_copy_kernel_launched_outside_fsdp_s_copies_stays_compute(tmp_path):
    events = [kt.annotation("ProfilerStep#1", 0, 1000), kt.cpu_op("aten::cat", 10, 20),
              kt.launch("cudaLaunchKernel", 15, correlation=1), kt.device(COPY, 100, 100, correlation=1)]
    result = analyze(load_trace(kt.write(tmp_path / "rank0.json", events, rank=0, world=2, backend="nccl")))
    assert (result["compute_us"], result["comm_us"], result["comm_copy_us"]) == (100, 0, 0)
