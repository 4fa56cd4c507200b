"""`commbench zero` end to end, and exposed communication cost for every implementation: real torchrun, real gloo
ranks, tiny models. One launch per rank count (a suite of two benches, the CLI called in this process) feeds every
test: at 2 ranks the strategy sweep (DDP, ZeRO-1, FSDP2 ZeRO-2/3) checked against the formulas, with FSDP1 ZeRO-2/3
beside it; at 4 ranks FSDP2 and FSDP1, each as ZeRO-3 and HSDP."""

import math

import pytest

from commbench import store
from commbench.benches.strategy import KIND as STRATEGY
from commbench.training.compute_baseline import METHOD
from commbench.training.spec import ModelShape
from commbench.training.synthetic import params_per_block
from tests.training_runs import Launched, launch_shared

pytestmark = pytest.mark.distributed
STEPS = 2
TINY = f'model = "mlp"\nparams = "1M"\nlayers = 2\nseq-len = 16\nmicro-batch = 1\nsteps = {STEPS}\nprofile-steps = 1\n'
SMALL = f'params = "1M"\nsteps = {STEPS}\nprofile-steps = 1\n'


def _suite(tmp_path_factory, name: str, nproc: int, benches: str) -> Launched:
    folder = tmp_path_factory.mktemp(name)
    suite = folder / "suite.toml"
    suite.write_text(f'description = "{name}"\nbackend = "gloo"\ndevice = "cpu"\nnproc = {nproc}\n\n{benches}')
    return launch_shared(folder / "out", "run", str(suite), *(["--oversubscribe"] if nproc > 2 else []), run_id=name)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Launched:
    """The strategy sweep at the formulas' own size (a 2M transformer, two profiled steps), and FSDP1's ZeRO-2/3 (DDP
    and ZeRO-1 have no FSDP1: the sweep's rows are theirs)."""
    return _suite(tmp_path_factory, "two-ranks", 2,
                  f'[[bench]]\nname = "strategies"\nkind = "zero"\nparams = "2M"\nsteps = {STEPS}\nprofile-steps = 2\n'
                  'isolation = "reset"\n\n'
                  '[[bench]]\nname = "fsdp1"\nkind = "zero"\nstrategy = ["zero2", "zero3"]\nimpl = "fsdp1"\n'
                  f'isolation = "reset"\n{TINY}')


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Launched:
    """ZeRO-3 and HSDP (shard group 2 of 4 ranks) over FSDP2 (the exposed-cost model) and FSDP1 (the default
    transformer)."""
    return _suite(tmp_path_factory, "four-ranks", 4,
                  '[[bench]]\nname = "fsdp2"\nkind = "zero"\nstrategy = ["zero3", "hsdp"]\nshard-group = 2\n'
                  f'isolation = "reset"\n{TINY}\n'
                  '[[bench]]\nname = "fsdp1"\nkind = "zero"\nimpl = "fsdp1"\nstrategy = ["zero3", "hsdp"]\n'
                  f'shard-group = 2\nisolation = "reset"\n{SMALL}')


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def _check_exposed(run: Launched, bench: str, rows: list[dict]) -> None:
    samples = store.read_samples(run.run_dir / bench, STRATEGY)
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
        # a real step and a compute-only step per timed step
        assert (mine["phase"] == "paired_step").sum() == (mine["phase"] == "paired_compute").sum() == STEPS, label


def test_exposed_cost_for_ddp_zero1_and_fsdp1_at_two_ranks(two_ranks):
    sweep, fsdp1 = two_ranks.rows("strategies"), two_ranks.rows("fsdp1")
    assert [(row["strategy"], row["impl"]) for row in sweep] == [("ddp", "ddp"), ("zero1", "zero1"),
                                                                 ("zero2", "fsdp2"), ("zero3", "fsdp2")]
    assert [(row["strategy"], row["impl"]) for row in fsdp1] == [("zero2", "fsdp1"), ("zero3", "fsdp1")]
    _check_exposed(two_ranks, "strategies", sweep)
    _check_exposed(two_ranks, "fsdp1", fsdp1)
    assert _number(sweep[0]["exposed_comm_ms_nosync"])  # DDP keeps its no_sync figure beside it
    # the one exposed figure the table shows
    assert "# exposed = step − compute-only step" in two_ranks.printed_for("strategies")


def test_strategy_sweep_agrees_with_the_formulas(two_ranks):
    rows = {row["strategy"]: row for row in two_ranks.rows("strategies")}
    assert list(rows) == ["ddp", "zero1", "zero2", "zero3"]
    for row in rows.values():
        assert row["n_wrong"] == 0 and row["model_state_exact_ranks"] == 2
        assert row["comm_msg_elems"] == row["comm_msg_elems_predicted"]
    params = rows["ddp"]["params"]
    # the paper's bytes per rank (fp32 Adam, even shards at this size): DDP 16Ψ, ZeRO-3 16Ψ/N
    assert rows["ddp"]["model_state_bytes"] == rows["ddp"]["model_state_bytes_formula"] == 16 * params
    assert rows["zero3"]["model_state_bytes"] == rows["zero3"]["model_state_bytes_formula"] == 8 * params
    assert rows["zero2"]["model_state_formula"] == "ZeRO-3/FSDP"  # FSDP reshards ZeRO-2 parameters after backward
    # ZeRO-1: parameters and gradients whole, Adam state split by ZeroRedundancyOptimizer's greedy partition
    assert rows["zero1"]["model_param_bytes"] == rows["zero1"]["model_grad_bytes"] == 4 * params
    assert rows["zero1"]["model_optim_bytes"] >= 4 * params
    # The paper's FSDP moves 1.5× the bytes of DDP: three messages of the model (gather, gather, reduce-scatter)
    # against one all-reduce, which a ring sends twice. FSDP2 as torchtitan lays it out keeps the root (final norm
    # and LM head) and the last block gathered from forward into backward: those two are gathered once.
    shape = ModelShape(kind="transformer", layers=rows["zero3"]["layers"], hidden=rows["zero3"]["hidden"],
                       heads=rows["zero3"]["heads"])
    block, hidden = params_per_block(shape), shape.hidden
    root = (params - shape.layers * block - 2 * hidden) // 2 + 2 * hidden  # the head (vocab × hidden) and the norm
    assert rows["zero3"]["comm_msg_elems"] == pytest.approx(3 * params - root - block, rel=0.01)
    assert rows["zero3"]["comm_bytes_per_rank_predicted"] / rows["ddp"]["comm_bytes_per_rank_predicted"] == \
        pytest.approx((3 * params - root - block) / (2 * params), rel=0.01)


def test_hsdp_and_fsdp1_at_four_ranks(four_ranks):
    rows = four_ranks.rows("fsdp1")
    assert [(row["strategy"], row["impl"], row["shard_group"] if row["shard_group"] == row["shard_group"] else None)
            for row in rows] == [("zero3", "fsdp1", None), ("hsdp", "fsdp1", 2)]
    for row in rows:
        assert row["n_wrong"] == 0 and row["model_state_exact_ranks"] == 4
        assert row["comm_msg_elems"] == row["comm_msg_elems_predicted"]
    # HSDP holds twice ZeRO-3's shard (shard group 2 of 4 ranks)
    assert rows[1]["model_state_bytes_predicted"] == pytest.approx(2 * rows[0]["model_state_bytes_predicted"],
                                                                   rel=0.01)


def test_exposed_cost_for_fsdp2_and_hsdp_at_four_ranks(four_ranks):
    rows = four_ranks.rows("fsdp2")
    assert [(row["strategy"], row["impl"]) for row in rows] == [("zero3", "fsdp2"), ("hsdp", "fsdp2")]
    _check_exposed(four_ranks, "fsdp2", rows)
    assert "FSDP2 over gloo (CPU) unshards synchronously" in four_ranks.printed_for("fsdp2")
