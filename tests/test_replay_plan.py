"""What `commbench replay` plans from the traces of a GPU job this machine cannot run: the collective calls of a
64-rank NCCL job's step, written as Kineto writes them (record_param_comms with its process group, cudaLaunchKernel,
the NCCL kernel). Kineto cuts "Process Group Ranks" to 30 ranks; NCCL runs an all-to-all as SendRecv kernels; DDP
broadcasts int64 buffers. No torch, no ranks: the plan is made in the launching process."""

import pytest

from commbench.errors import CommbenchError
from commbench.names import DTYPE_BYTES
from commbench.profiling.collective_calls import collective_calls, group_of, message_of
from commbench.profiling.trace_file import load_trace
from commbench.replay.plan import load_calls, plan
from tests import kineto_trace as kt

pytestmark = pytest.mark.no_process

WORLD = 64
CALLS = (  # (collective name, elements in / out, torch dtype, NCCL kernel)
    ("broadcast", 3, "Long", "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("allreduce", 1 << 20, "Float", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("all_to_all", WORLD * 512, "BFloat16", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
    ("send", 1024, "Float", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
)


def _step_events(group: dict, calls=CALLS) -> list[dict]:
    events = [kt.annotation("ProfilerStep#1", 0, 100_000)]
    for index, (name, elements, dtype, kernel) in enumerate(calls):
        start = 1000 + index * 10_000
        events += [kt.cpu_op("record_param_comms", start, 50, **{"Collective name": name, "In msg nelems": elements,
                                                                 "Out msg nelems": elements, "dtype": dtype,
                                                                 **group}),
                   kt.launch("cudaLaunchKernel", start + 10, correlation=index + 1),
                   kt.device(kernel, start + 100, 40 + index, correlation=index + 1)]
    return events


def _job(tmp_path, group: dict, calls=CALLS) -> list:
    return [kt.write(tmp_path / f"rank{rank}.json", _step_events(group, calls), rank=rank, world=WORLD,
                     backend="nccl") for rank in (0, 1)]


def test_a_cut_rank_list_names_no_ranks_and_the_group_size_counts_them():
    group = group_of(kt.world_group(WORLD))
    assert kt.world_group(WORLD)["Process Group Ranks"] == "[" + ", ".join(map(str, range(30))) + ", ...]"
    assert (group.name, group.ranks, group.size, group.cut) == ("0", None, WORLD, True)
    small = group_of(kt.world_group(8))
    assert (small.ranks, small.size, small.cut) == (tuple(range(8)), 8, False)


def test_every_world_call_of_a_64_rank_step_is_planned_on_2_ranks(tmp_path):
    calls, trace_world = load_calls(_job(tmp_path, kt.world_group(WORLD)))
    assert trace_world == WORLD
    planned = plan(calls, step=None, world=2, scale_world=2, trace_world=trace_world)
    by_kind = {call["kind"]: call for call in planned.calls}
    assert list(by_kind) == ["broadcast", "all_reduce", "all_to_all"]  # in the traced order
    assert planned.skipped == ("sendrecv 4096 B float32 (commbench replays all_reduce, broadcast, all_gather, "
                               "reduce_scatter, all_to_all)",)
    broadcast = by_kind["broadcast"]  # DDP's buffers: an int64 broadcast, replayed as one
    assert (broadcast["dtype"], broadcast["elements"], broadcast["bytes"]) == ("int64", 3, 3 * DTYPE_BYTES["int64"])
    assert by_kind["all_reduce"]["bytes"] == (1 << 20) * 4
    to_all = by_kind["all_to_all"]  # SendRecv kernels launched by an all_to_all: each rank keeps its part per peer
    assert (to_all["dtype"], to_all["elements"], to_all["bytes"]) == ("bfloat16", 512, 512 * 2 * 2)
    assert planned.trace_world == WORLD and planned.step == 1


def test_sends_stay_sendrecv_so_both_ends_pair_up(tmp_path):
    calls = collective_calls(load_trace(_job(tmp_path, kt.world_group(WORLD))[0]))
    assert [(call.kind, call.raw_kind) for call in calls] == [("broadcast", "Broadcast"), ("all_reduce", "AllReduce"),
                                                              ("all_to_all", "SendRecv"), ("sendrecv", "SendRecv")]
    assert all(call.group_size == WORLD and call.group_ranks is None and call.group_ranks_cut for call in calls)


def test_a_subgroup_and_a_cut_list_without_a_size_are_listed_not_replayed(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    calls, world = load_calls(_job(sub, kt.world_group(8), CALLS[:2]))
    with pytest.raises(CommbenchError, match="scale-world"):
        plan(calls, step=None, world=2, scale_world=None, trace_world=world)
    planned = plan(calls, step=None, world=2, scale_world=2, trace_world=world)
    assert not planned.calls and all("a subgroup of 8 ranks" in why for why in planned.skipped)
    unsized = tmp_path / "unsized"
    unsized.mkdir()
    group = {key: value for key, value in kt.world_group(WORLD).items() if key != "Group size"}
    calls, world = load_calls(_job(unsized, group, CALLS[:2]))
    planned = plan(calls, step=None, world=2, scale_world=2, trace_world=world)
    assert not planned.calls and all("records no group size" in why for why in planned.skipped)


@pytest.mark.parametrize(("torch_name", "dtype"), [("Float8_e4m3fn", "float8_e4m3"), ("Float8_e5m2", "float8_e5m2"),
                                                   ("Long", "int64"), ("Byte", "uint8"), ("Char", "int8")])
def test_a_trace_dtype_takes_commbench_s_name_and_element_size(torch_name, dtype):
    message = message_of({"In msg nelems": 16, "Out msg nelems": 16, "dtype": torch_name})
    assert (message.dtype, message.bytes) == (dtype, 16 * DTYPE_BYTES[dtype])


def test_gloo_spans_started_out_of_queue_order_keep_the_order_they_were_issued_in(tmp_path):
    """gloo runs its queue on two threads: DDP's two buffer broadcasts (float32 then int64, enqueued back to back)
    start in either order, and not in the same order on every rank (as recorded here on 2 ranks). Each span pairs
    with the operator holding its tensor, and the calls keep the enqueue order, the same on every rank."""
    operator_args = {"Input type": ["TensorList", "", "Scalar", "Scalar", "Scalar", "Scalar"]}
    events = [kt.annotation("ProfilerStep#1", 0, 1000),
              kt.cpu_op("c10d::broadcast_", 100, 50, **{**operator_args, "Input Dims": [[[512]], [], [], [], [], []]}),
              kt.cpu_op("c10d::broadcast_", 200, 50, **{**operator_args, "Input Dims": [[[1]], [], [], [], [], []]}),
              kt.annotation("gloo:broadcast", 230, 40, tid=3, **{"Input Dims": [[1]], "Input type": ["long int"]}),
              kt.annotation("gloo:broadcast", 260, 40, tid=kt.GLOO_THREAD,
                            **{"Input Dims": [[512]], "Input type": ["float"]})]
    calls = collective_calls(load_trace(kt.write(tmp_path / "rank0.json", events, rank=0, world=2, backend="gloo")))
    assert [(call.kind, call.message.dtype, call.message.elements, call.start_us) for call in calls] == \
        [("broadcast", "float32", 512, 260.0), ("broadcast", "int64", 1, 230.0)]
