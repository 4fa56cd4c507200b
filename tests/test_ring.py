"""The hand-written ring against the backend's own collective, with real gloo ranks."""

import pytest
import torch

from commbench.collectives import COLLECTIVES, ring
from commbench.collectives.ring import default_pieces

FAST = ("--warmup", "1", "--iters", "6")
MIB = 1024**2


@pytest.mark.distributed
@pytest.mark.parametrize("nproc", [2, 4])  # odd worlds: the five-rank test below
def test_ring_is_exact_and_sends_the_ring_bytes(run_sweep, nproc):
    # 4036 bytes: 1009 (prime) float32 elements for all_reduce, so its chunks are uneven at every world size, and
    # 2018 bfloat16 ones, uneven at 4 ranks; three pieces per step make uneven pieces at 2 ranks too.
    run = run_sweep("--nproc", str(nproc), "--oversubscribe", "-c", "all_reduce,reduce_scatter,all_gather",
                    "--impl", "builtin,ring",
                    "--placement", "both", "--dtype", "bfloat16,float32", "--op", "sum,max,min,avg",
                    "--sizes", "4036", "--ring-chunks", "3", *FAST)
    assert run.returncode == 0, run.stderr
    results = run.results
    assert (results["n_wrong"] == 0).all()
    assert 1009 in set(results[results["collective"] == "all_reduce"]["count"])
    ring = results[results["impl"] == "ring"]
    keys = ["collective", "dtype", "op", "inplace", "size_bytes"]
    builtin = results[results["impl"] == "builtin"]
    assert sorted(map(tuple, ring[keys].values)) == sorted(map(tuple, builtin[keys].values))
    assert (ring["ring_chunks"] == 3).all()
    for _, row in ring.iterrows():
        collective = COLLECTIVES[row["collective"]]
        size = collective.algbw_bytes(collective.layout(row["size_bytes"], 2 if row["dtype"] == "bfloat16" else 4,
                                                        nproc), nproc)
        phases = 2 if row["collective"] == "all_reduce" else 1  # reduce-scatter + all-gather
        assert row["bytes_source"] == "counted"
        # counted bytes summed over ranks (the column is their mean): exactly phases·(n−1)/n·S per rank
        assert round(row["bytes_sent_per_rank"] * nproc) == phases * (nproc - 1) * size
    assert run.stdout.count("# ring vs builtin:") == 3


@pytest.mark.no_process
def test_default_pieces_rule():
    assert default_pieces(1 * MIB) == 1
    assert default_pieces(4 * MIB) == 1
    assert default_pieces(8 * MIB) == 2
    assert default_pieces(32 * MIB) == 4
    assert default_pieces(1024 * MIB) == 4


@pytest.mark.distributed
def test_ring_runs_every_dtype_gloo_supports(run_sweep):
    run = run_sweep("-c", "all_reduce,reduce_scatter,all_gather", "--impl", "ring", "--placement", "both",
                    "--dtype", "int32,float16,float64", "--op", "sum,max,min", "--sizes", "1000", *FAST)
    assert run.returncode == 0, run.stderr
    assert set(run.results["dtype"]) == {"int32", "float16", "float64"}
    assert (run.results["n_wrong"] == 0).all()
    assert set(run.results["impl"]) == {"ring"}


@pytest.mark.distributed
def test_five_ranks_reuse_scratch_safely_and_handle_empty_chunks(run_sweep):
    # From 5 ranks on, reduce-scatter writes scratch buffers it sent one step earlier: the wait that guards them
    # only shows at n ≥ 5. An 8-byte all_reduce has 2 elements for 5 ranks: three chunks are empty (reduce_scatter
    # skips 8 B: below one 16-byte chunk per rank). One launch for both.
    run = run_sweep("--nproc", "5", "--oversubscribe", "-c", "reduce_scatter,all_reduce", "--impl", "ring",
                    "--placement", "both",
                    "--sizes", "8,4036", "--ring-chunks", "2", "--op", "sum,max", *FAST)
    assert run.returncode == 0, run.stderr
    assert (run.results["n_wrong"] == 0).all()
    scatter = run.results[run.results["collective"] == "reduce_scatter"]
    assert len(scatter) == 4 and set(scatter["inplace"]) == {True, False}  # 4036 B × sum, max × both placements
    assert 2 in set(run.results[run.results["collective"] == "all_reduce"]["count"])
    assert "reduce_scatter float32: 1 size(s) below" in run.stdout


@pytest.mark.no_process
@pytest.mark.parametrize("world, spares", [(2, 1), (3, 3), (4, 4), (5, 4)])
def test_ring_allocates_only_the_spare_buffers_its_steps_use(world, spares, monkeypatch):
    # On a GPU an allocation counts whether touched or not: at 2 ranks a reduce-scatter needs one landing buffer and
    # no scratch. Building a runner posts nothing, so no process group is needed here.
    made = []
    empty_like = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda *args, **kwargs: made.append(1) or empty_like(*args, **kwargs))
    send, recv = torch.zeros(world * 64), torch.zeros(64)
    runner = ring.reduce_scatter(send, recv, rank=0, world=world, batched=False, op="sum", ring_chunks=1)
    used = {tensor.untyped_storage().data_ptr() for phase in runner._phases for step in phase.steps
            for piece in step for tensor in (piece.send, piece.recv, piece.into) if tensor is not None}
    assert len(used - {send.untyped_storage().data_ptr(), recv.untyped_storage().data_ptr()}) == spares
    assert len(made) == spares
