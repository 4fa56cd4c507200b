"""gloo on CUDA tensors in a GPU trace: no NCCL kernel, so HTA's kernel rule finds no communication. The trace is one
rank's step as Kineto writes it (this machine has no GPU to record one): the c10d operator on the main thread copies
the tensor to the host (a DtoH memcpy), gloo's thread runs gloo:all_reduce, a compute kernel runs meanwhile, and the
result is copied back (HtoD). The communication is gloo's span; the kernels are the computation."""

import pytest

from commbench.profiling.collective_calls import collective_calls
from commbench.profiling.overlap import analyze
from commbench.profiling.trace_file import load_trace
from tests import kineto_trace as kt

pytestmark = pytest.mark.no_process

ELEMENTS = 1024
COMPUTE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"


def _gloo_on_cuda_step(tmp_path, *, rank: int = 0, world: int = 2):
    events = [
        kt.annotation("ProfilerStep#1", 0, 2000),
        kt.cpu_op("c10d::allreduce_", 100, 30, **{"Input Dims": [[[ELEMENTS]], [], [], [], [], []],
                                                   "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"]}),
        kt.launch("cudaMemcpyAsync", 110, correlation=11),
        kt.device("Memcpy DtoH (Device -> Pinned)", 120, 10, correlation=11, cat="gpu_memcpy"),
        kt.launch("cudaLaunchKernel", 150, correlation=12),
        kt.device(COMPUTE, 500, 300, correlation=12),
        kt.annotation("gloo:all_reduce", 200, 400, tid=kt.GLOO_THREAD,
                      **{"Input Dims": [[ELEMENTS]], "Input type": ["float"]}),
        kt.launch("cudaMemcpyAsync", 590, correlation=13, tid=kt.GLOO_THREAD),
        kt.device("Memcpy HtoD (Pinned -> Device)", 620, 10, correlation=13, cat="gpu_memcpy"),
    ]
    return load_trace(kt.write(tmp_path / f"rank{rank}.json", events, rank=rank, world=world, backend="gloo"))


def test_gloo_spans_are_the_communication_of_a_gpu_trace(tmp_path):
    result = analyze(_gloo_on_cuda_step(tmp_path))
    assert result["device"] == "gpu"
    # gloo's 400 µs span; the 300 µs compute kernel overlaps its last 100 µs; the copies are neither
    assert (result["comm_us"], result["compute_us"], result["overlap_us"]) == (400, 300, 100)
    assert result["exposed_comm_us"] == 300 and result["overlap_pct"] == 25.0
    assert [step["comm_us"] for step in result["steps"]] == [400]
    assert [(entry["kind"], entry["count"], entry["unattributed"]) for entry in result["collectives"]] == \
        [("all_reduce", 1, False)]


def test_a_gloo_span_in_a_gpu_trace_is_a_call_with_its_operator_s_kind_and_size(tmp_path):
    [call] = collective_calls(_gloo_on_cuda_step(tmp_path))
    assert (call.kind, call.raw_kind, call.step, call.duration_us) == ("all_reduce", "allreduce_", 1, 400.0)
    assert (call.message.dtype, call.message.bytes, call.group_size) == ("float32", ELEMENTS * 4, 2)
