"""The memory plan made before a sweep launches (commbench/sweep/memory_plan.py): each collective's own buffer
sizes, the
ring's spare space and the check's working memory, against the memory the ranks share; a sweep that cannot fit is
refused in one line before any process starts."""

import subprocess
import sys
import time

import pytest
import torch

from commbench.collectives import COLLECTIVES, check_data
from commbench.errors import CommbenchError
from commbench.machine import Machine
from commbench.names import DTYPE_BYTES
from commbench.sweep.memory_plan import (
    CUDA_CONTEXT_BYTES,
    NCCL_BUFFERS_BYTES,
    check_fits,
    largest_fitting_size,
    need_at,
    pool_for,
)
from commbench.sweep.spec import SweepSpec
from commbench.units import size_text
from tests.conftest import commbench_env

GiB = 1024**3
MiB = 1024**2


def spec_of(**changes) -> SweepSpec:
    fields = dict(collectives=("all_reduce", "reduce_scatter", "all_gather"), impls=("builtin",), sizes=(1024, 2**40),
                  dtypes=("float32",), ops=("sum",), placement="out", backend="gloo", device="cpu", nproc=2,
                  warmup=1, iters=1)
    return SweepSpec(**{**fields, **changes})


def storages(*tensors) -> dict[int, int]:
    """Distinct memory blocks behind these tensors (views share their base's): data pointer → bytes."""
    return {tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes() for tensor in tensors}


@pytest.mark.no_process
@pytest.mark.parametrize("name", sorted(COLLECTIVES))
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_each_collective_states_the_buffers_it_allocates(name, world):
    """buffer_elements is what make_buffers really allocates (all_gather's output is n × its input, all_to_all holds
    two world-sized buffers, in place the smaller buffer is a view of the larger)."""
    collective = COLLECTIVES[name]
    for dtype_name, dtype in (("float32", torch.float32), ("int8", torch.int8)):
        layout = collective.layout(4096 + 48, DTYPE_BYTES[dtype_name], world)
        for inplace in collective.inplace_choices:
            buffers = collective.make_buffers(layout, inplace=inplace, dtype=dtype, device=torch.device("cpu"),
                                              rank=world - 1, world=world)
            allocated = sum(storages(buffers.send, buffers.recv).values())
            assert allocated == collective.buffer_elements(layout, inplace=inplace) * layout.elt_bytes


RING_CASES = [(name, inplace) for name, collective in sorted(COLLECTIVES.items())
              if "ring" in collective.implementations for inplace in collective.inplace_choices]
"""Every placement of every collective the ring runs."""


@pytest.mark.no_process
@pytest.mark.parametrize("name, inplace", RING_CASES)
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_the_ring_states_its_spare_space(name, inplace, world):
    """ring_spare_elements is what the hand-written ring allocates besides the buffers when its runner is built (every
    step is prepared then; nothing is allocated in the timed call): the distinct blocks its pieces touch, less the
    buffers'. Built without a process group (gloo's sends are only prepared, not posted)."""
    from commbench.collectives.base import RunSetup

    collective = COLLECTIVES[name]
    layout = collective.layout(3 * 1024 + 20, 4, world)
    buffers = collective.make_buffers(layout, inplace=inplace, dtype=torch.float32, device=torch.device("cpu"),
                                      rank=world - 1, world=world)
    runner = collective.ring(buffers, RunSetup(rank=world - 1, world=world, p2p_batched=False,
                                               op="sum" if collective.reduces else "none"))
    touched = [tensor for phase in runner._phases for step in phase.steps for piece in step
               for tensor in (piece.send, piece.recv, piece.own, piece.into) if tensor is not None]
    own = storages(buffers.send, buffers.recv)
    spare = sum(nbytes for pointer, nbytes in storages(*touched).items() if pointer not in own) if touched else 0
    assert spare == collective.ring_spare_elements(layout, world) * layout.elt_bytes


@pytest.mark.no_process
@pytest.mark.parametrize("dtype, op, world", [("float32", "avg", 3), ("float32", "sum", 2), ("int8", "sum", 300),
                                               ("bfloat16", "prod", 70)])
def test_the_checks_working_memory_stays_within_its_stated_bound(dtype, op, world):
    """The allocations the check makes besides the point's buffers, writing a rank's input and comparing an output:
    torch's profiler attributes each CPU allocation and free to the op that made it (or to a [memory] event outside
    any op); their running sum in time order, which returns to 0 at the end, peaks at most at
    check_data.working_bytes."""
    from commbench.backends import DTYPES
    from commbench.names import FLOATING_DTYPES

    buffer = torch.empty(3 * (1 << 20) + 5, dtype=DTYPES[dtype])
    segments = [check_data.Segment(buffer.numel())]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profiler:
        check_data.write_expected(buffer, segments, world=world, op=op)
        check_data.count_wrong(buffer, segments, op=op, world=world)
    live = peak = 0
    for event in sorted(profiler.events(), key=lambda event: event.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    assert live == 0  # every allocation seen was freed: the accounting is complete
    assert 0 < peak <= check_data.working_bytes(elt_bytes=DTYPE_BYTES[dtype], world=world, op=op,
                                                floating=dtype in FLOATING_DTYPES)


@pytest.mark.no_process
def test_the_largest_point_needs_its_collectives_own_buffers():
    need = need_at(spec_of(collectives=("all_reduce", "all_gather")), 2**40)
    # all_gather out of place: the 1 TiB output (n × a 0.5 TiB input) and the input apart from it
    assert need.case == "all_gather float32 out of place 1024 GiB"
    check = check_data.working_bytes(elt_bytes=4, world=2, op="sum", floating=True)
    assert need.per_rank == 2**40 + 2**39 + check
    ring = need_at(spec_of(collectives=("reduce_scatter",), impls=("ring",), nproc=4), 2**30)
    # the 1 GiB input, a 256 MiB output chunk, and two landing and two scratch chunks of the ring
    assert ring.per_rank == 2**30 + 5 * 2**28 + check_data.working_bytes(elt_bytes=4, world=4, op="sum", floating=True)
    assert need_at(spec_of(check=False, collectives=("all_reduce",)), 2**30).per_rank == 2**30


@pytest.mark.no_process
def test_ranks_on_one_machine_share_its_ram_and_on_cuda_each_gpu_its_own():
    cpu = Machine(gpus=0, nccl_available=False, host_memory_bytes=64 * GiB)
    assert pool_for(spec_of(nproc=4), cpu).ranks == 4
    in_job = Machine(gpus=0, nccl_available=False, rank=0, world_size=16, local_world_size=8, host_memory_bytes=GiB)
    assert pool_for(spec_of(nproc=16), in_job).ranks == 8
    gpus = Machine(gpus=8, nccl_available=True, gpu_memory_bytes=80 * GiB)
    assert pool_for(spec_of(nproc=8, backend="nccl", device="cuda"), gpus).ranks == 1
    one_gpu = Machine(gpus=1, nccl_available=True, gpu_memory_bytes=80 * GiB)
    assert pool_for(spec_of(nproc=4, backend="gloo", device="cuda"), one_gpu).ranks == 4  # gloo ranks share it
    assert pool_for(spec_of(), Machine(gpus=0, nccl_available=False)) is None  # unknown: nothing refused
    assert pool_for(spec_of(), Machine.for_job(nodes=2, ranks_per_node=2, gpus_per_node=0)) is None


@pytest.mark.no_process
def test_with_the_memory_unknown_the_plan_is_skipped_with_one_warning_line(capsys):
    """No figure to check against (no NVML, no /proc/meminfo): nothing is refused, and one `commbench: warning:`
    line says the plan was skipped and why. Machines stated for a job's nodes are planned there: no warning."""
    from commbench.cli.shared import show_warnings, warnings_held

    for spec, unknown in ((spec_of(), "this machine's available memory"),
                          (spec_of(backend="nccl", device="cuda"), "the memory of its GPUs (NVML gave none)")):
        with warnings_held():
            check_fits(spec, Machine(gpus=1, nccl_available=True))
            shown = show_warnings()
        lines = capsys.readouterr().err.splitlines()
        assert lines == [f"commbench: warning: {shown[0]}"] and len(shown) == 1
        assert lines[0].startswith(f"commbench: warning: memory plan skipped: {unknown}")
        assert "largest point (1024G) was not checked against it" in lines[0]
    stated = Machine.for_job(nodes=2, ranks_per_node=2, gpus_per_node=0)
    known = Machine(gpus=0, nccl_available=False, host_memory_bytes=2**50)
    for machine in (stated, known):
        with warnings_held():
            check_fits(spec_of(), machine)
            assert show_warnings() == []


@pytest.mark.no_process
def test_a_sweep_that_cannot_fit_is_refused_with_both_figures_and_the_size_that_fits():
    machine = Machine(gpus=0, nccl_available=False, host_memory_bytes=24 * GiB)
    with pytest.raises(CommbenchError) as refused:
        check_fits(spec_of(), machine)
    message = str(refused.value)
    assert "\n" not in message
    # reduce_scatter and all_gather both hold 1.5 × the size out of place; the first in the sweep is named
    assert "reduce_scatter float32 out of place 1024 GiB, needs 3 TiB (1.5 TiB per rank" in message
    assert "× 2 ranks" in message and "available memory" in message and "is 24 GiB" in message
    assert "sizes up to 7G fit: end --sizes there" in message  # 2 × 1.5 × 7 GiB = 21 GiB; 8G needs 24 GiB + check
    check_fits(spec_of(sizes=(1024, 7 * GiB)), machine)


@pytest.mark.no_process
def test_the_size_that_fits_is_the_largest_whole_unit_below_the_limit():
    # two ranks of an all_reduce of S bytes need 2 × (S + the check's few MiB): 5 GiB fits in 10 GiB + 4 MiB
    spec, machine = spec_of(collectives=("all_reduce",)), Machine(gpus=0, nccl_available=False,
                                                                   host_memory_bytes=10 * GiB + 4 * 2**20)
    pool = pool_for(spec, machine)
    fits = largest_fitting_size(spec, pool)
    assert size_text(fits) == "5G"
    assert need_at(spec, fits).per_rank * pool.ranks <= pool.available < need_at(spec, fits + GiB).per_rank * 2
    assert largest_fitting_size(spec, pool_for(spec, Machine(gpus=0, nccl_available=False, host_memory_bytes=1))) \
        is None


def test_sweep_1t_is_refused_within_seconds_and_launches_nothing(tmp_path):
    """On this machine (far less than 3 TiB), `commbench sweep --sizes 1T` exits 2 with one line before torchrun
    starts: no run folder, no launch.log, and no rank ever allocates (a rank dying on 1 TiB was exit 3)."""
    started = time.monotonic()
    completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", "--sizes", "1T", "--out",
                                str(tmp_path / "results")], cwd=tmp_path, env=commbench_env(), capture_output=True,
                               text=True, timeout=120)
    elapsed = time.monotonic() - started
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert completed.returncode == 2, completed.stderr
    assert len(lines) == 1 and lines[0].startswith("commbench: error: the sweep's largest point"), completed.stderr
    assert "needs" in lines[0] and "available memory" in lines[0] and "fit: end --sizes there" in lines[0]
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "results").exists()
    assert elapsed < 60, elapsed


@pytest.mark.no_process
def test_a_gpu_point_that_fits_all_of_the_memory_but_not_what_the_reserve_leaves_is_refused():
    """On a GPU the CUDA context and NCCL's buffers come before the sweep's: a point that needs exactly the GPU's
    memory is refused, naming the reserve; with the reserve's room added it passes."""
    spec = spec_of(backend="nccl", device="cuda", nproc=8, collectives=("all_reduce",), sizes=(1024, 16 * GiB))
    need = need_at(spec, 16 * GiB).per_rank
    reserve = CUDA_CONTEXT_BYTES + NCCL_BUFFERS_BYTES
    exactly = Machine(gpus=8, nccl_available=True, gpu_memory_bytes=need)
    assert pool_for(spec, exactly).reserve == reserve
    with pytest.raises(CommbenchError) as refused:
        check_fits(spec, exactly)
    message = str(refused.value)
    assert "\n" not in message and "the memory of one GPU" in message
    assert "reserve for the CUDA context (512 MiB) and NCCL's buffers (1 GiB)" in message
    assert "sizes up to 14G fit" in message  # 16 GiB less the 1.5 GiB reserve and the check's few MiB
    check_fits(spec, Machine(gpus=8, nccl_available=True, gpu_memory_bytes=need + reserve))


@pytest.mark.no_process
def test_ranks_sharing_a_gpu_each_hold_a_cuda_context_and_gloo_holds_no_nccl_buffers():
    spec = spec_of(backend="gloo", device="cuda", nproc=4, collectives=("all_reduce",), sizes=(1024, GiB))
    pool = pool_for(spec, Machine(gpus=1, nccl_available=True, gpu_memory_bytes=80 * GiB))
    assert (pool.ranks, pool.reserve) == (4, 4 * CUDA_CONTEXT_BYTES)
    assert pool.reserve_what == "4 CUDA contexts (512 MiB each)" and pool.usable == 78 * GiB


@pytest.mark.no_process
def test_cpu_plans_hold_nothing_back():
    for machine in (Machine(gpus=0, nccl_available=False, host_memory_bytes=64 * GiB),
                    Machine(gpus=8, nccl_available=True, gpu_memory_bytes=80 * GiB, host_memory_bytes=64 * GiB)):
        pool = pool_for(spec_of(nproc=4), machine)
        assert (pool.reserve, pool.usable) == (0, pool.available)


@pytest.mark.no_process
def test_the_nccl_reserve_holds_one_communicators_buffers_at_nccls_defaults():
    """The stated figure against its own arithmetic: NCCL's three protocol buffers per connection (Simple
    NCCL_BUFFSIZE 4 MiB; LL 8 lines x 512 threads x 8 steps x 16 B; LL128 120 elements x 640 threads x 8 steps x 8 B),
    32 channels, the ring's one and the tree's two connections to receive on; and the context above torch's measured
    287 MB."""
    per_connection = 4 * MiB + 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8
    assert 32 * 3 * per_connection <= NCCL_BUFFERS_BYTES < 2 * 32 * 3 * per_connection
    assert 287_047_680 <= CUDA_CONTEXT_BYTES <= GiB
