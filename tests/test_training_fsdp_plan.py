"""FSDP2 as torchtitan lays it out, before anything launches: the units and their settings (a pure function that
apply_fsdp2 applies), no two rows of an FSDP sweep that run the same, the language model's embedding and head."""

import math

import pytest
import torch

from commbench.benches import get_kind
from commbench.benches.options import parse_options
from commbench.machine import Machine
from commbench.models import comm_volume
from commbench.training import plan
from commbench.training.fsdp2_units import fsdp2_units
from commbench.training.spec import ModelShape, TrainConfig
from commbench.training.synthetic import batch_loss, build_model, count_params, make_batch


def _resolved(gpus: int, **values):
    kind = get_kind("fsdp")
    options = parse_options(kind.options, {"backend": "nccl" if gpus else "gloo", "device": "cuda" if gpus else "cpu",
                                           "steps": 10, **values})
    return kind.resolve(options, Machine.for_job(nodes=1, ranks_per_node=gpus or 2, gpus_per_node=gpus))


def _runs_as(config: TrainConfig, blocks: int = 4):
    """What a configuration gives FSDP: for FSDP2 the settings of every unit, FSDP2's implicit backward prefetch
    written out as what its documentation says it is (the next unit in backward, one ahead); where no unit reshards
    after forward, backward gathers nothing, so no backward prefetch at all."""
    settings = {name: value for name, value in config.settings().items() if name != "backward_prefetch"}
    if config.impl == "fsdp2":
        depth = 1 if config.backward_prefetch == "default" else int(config.backward_prefetch)
        units = fsdp2_units(blocks=blocks, has_embedding=True, reshard_after_forward=config.reshard_after_forward,
                            forward_prefetch=config.forward_prefetch or 0, backward_prefetch=depth,
                            per_block=config.wrap != "model")
        gathers_in_backward = any(unit.reshard_after_forward not in (None, False) for unit in units)
        units = [unit if gathers_in_backward else (unit.name, unit.reshard_after_forward, unit.forward_prefetch)
                 for unit in units]
        return config.impl, tuple(sorted(settings.items())), tuple(units)
    gathers_in_backward = config.reshard_after_forward is not False  # FSDP1 SHARD_GRAD_OP keeps them gathered
    backward = config.backward_prefetch if gathers_in_backward else None
    return config.impl, tuple(sorted(settings.items())), backward


def _assert_distinct(configs) -> None:
    seen = {}
    for config in configs:
        key = _runs_as(config)
        assert key not in seen, f"{config.label()} runs as {seen[key].label()}"
        seen[key] = config


@pytest.mark.parametrize("gpus", [0, 8])
@pytest.mark.no_process
def test_no_two_rows_of_a_default_fsdp_sweep_are_the_same_configuration(gpus):
    configs = _resolved(gpus).spec.configs
    _assert_distinct(configs)
    # the axes still vary: resharding, forward prefetch, and backward prefetch where backward gathers
    assert {c.reshard_after_forward for c in configs} == {True, False}
    assert {c.forward_prefetch for c in configs} == {0, 1}
    assert {c.backward_prefetch for c in configs if c.reshard_after_forward} == {"default", "2"}


@pytest.mark.no_process
def test_every_backward_value_of_both_implementations_runs_once():
    configs, notes = plan.fsdp_plan(impls=("fsdp2", "fsdp1"), reshard_after_forward=(True, False),
                                    forward_prefetch=(0, 1), backward_prefetch=("default", "1", "2", "pre", "post",
                                                                                "none"),
                                    limit_all_gathers=(True,), wraps=("block", "model"), precisions=("fp32",),
                                    accum_steps=(1,), world=2)
    _assert_distinct(configs)
    assert {c.backward_prefetch for c in configs if c.impl == "fsdp2"} == {"default", "2"}
    assert {c.backward_prefetch for c in configs if c.impl == "fsdp1" and c.reshard_after_forward} == \
        {"pre", "post", "none"}
    assert {c.backward_prefetch for c in configs if c.reshard_after_forward is False} == {"default", "pre"}
    assert len(notes) == len(set(notes)) and all("\n" not in note for note in notes)


@pytest.mark.no_process
def test_backward_default_and_1_are_one_row_and_a_note_names_both():
    configs, notes = plan.fsdp_plan(impls=("fsdp2",), reshard_after_forward=(True,), forward_prefetch=(0,),
                                    backward_prefetch=("default", "1"), limit_all_gathers=(True,), wraps=("block",),
                                    precisions=("fp32",), accum_steps=(1,), world=2)
    assert [c.backward_prefetch for c in configs] == ["default"]
    assert len(notes) == 1 and "--backward-prefetch 1 runs as default" in notes[0]


@pytest.mark.no_process
def test_the_sweep_says_which_requested_values_it_merged():
    bench = _resolved(0, backward_prefetch="default,1", reshards="true")
    assert len(bench.spec.configs) == 2  # forward prefetch 0 and 1
    assert any("--backward-prefetch 1 runs as default" in note for note in bench.notes)
    # the default sweep: backward depth 2 without resharding is the default there, said once
    assert [note for note in _resolved(0).notes if "backward-prefetch" in note] == [
        "fsdp2 --backward-prefetch 2 with --reshard-after-forward false runs as default: the parameters stay gathered "
        "from forward, so backward gathers nothing to prefetch"]


@pytest.mark.no_process
def test_units_follow_torchtitan_root_default_and_last_block_kept():
    units = fsdp2_units(blocks=3, has_embedding=True, reshard_after_forward=2, forward_prefetch=2,
                        backward_prefetch=1)
    assert [unit.name for unit in units] == ["embedding", "block0", "block1", "block2", "root"]  # children first
    assert {unit.name: unit.reshard_after_forward for unit in units} == {
        "embedding": 2, "block0": 2, "block1": 2, "block2": False, "root": None}
    assert {unit.name: unit.forward_prefetch for unit in units}["root"] == ("embedding", "block0")
    assert {unit.name: unit.backward_prefetch for unit in units} == {
        "root": ("block2",), "block2": ("block1",), "block1": ("block0",), "block0": ("embedding",), "embedding": ()}
    # the implicit prefetch stays implicit, and one unit for the model takes the configured resharding
    assert all(unit.backward_prefetch is None and unit.forward_prefetch == ()
               for unit in fsdp2_units(blocks=2, has_embedding=False, reshard_after_forward=True))
    assert fsdp2_units(blocks=2, has_embedding=True, reshard_after_forward=True, per_block=False)[0] \
        .reshard_after_forward is True


@pytest.mark.no_process
def test_fsdp2_gathers_the_root_and_the_last_block_once_per_micro_batch():
    units = [[(10, 4)], [(8, 4)], [(8, 4)], [(6, 4)]]  # embedding, two blocks, root
    traffic = comm_volume.training_traffic(strategy="zero3", impl="fsdp2", units=units, world=2, accum_steps=1)
    gathered = 2 * 40 + 2 * 32 + 32 + 24
    assert traffic.msg_elements == gathered + (40 + 32 + 32 + 24)  # the gathers, then one reduce-scatter each
    one_unit = comm_volume.training_traffic(strategy="zero3", impl="fsdp2", units=[[(34, 4)]], world=2,
                                            accum_steps=1)
    assert one_unit.msg_elements == 3 * 136


@pytest.mark.no_process
def test_the_transformer_is_a_language_model_with_an_embedding_and_a_head():
    shape = ModelShape(kind="transformer", layers=2, hidden=64, heads=4, seq_len=8, vocab=300)
    model = build_model(shape, seed=0)
    assert model.embedding.weight.shape == model.head.weight.shape == (300, 64)
    assert sum(p.numel() for p in model.parameters()) == count_params(shape)
    inputs, targets = make_batch(shape, micro_batch=2, seed=0, step=0, rank=0)
    assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape == (2, 8)
    assert int(inputs.max()) < 300 and torch.equal(inputs[:, 1:], targets[:, :-1])  # the next token is the target
    with torch.no_grad():
        logits = model(inputs)
    assert logits.shape == (2, 8, 300)
    # cross-entropy over the vocabulary: near ln(vocab) for a freshly initialised head
    assert float(batch_loss(logits, targets)) == pytest.approx(math.log(300), abs=0.5)
    # the mlp model keeps regression on hidden-sized vectors, without embedding or vocabulary
    mlp = ModelShape(kind="mlp", layers=2, hidden=64, heads=4, seq_len=8, vocab=300)
    assert build_model(mlp, seed=0).embedding is None
    assert sum(p.numel() for p in build_model(mlp, seed=0).parameters()) == count_params(mlp)
    assert make_batch(mlp, micro_batch=2, seed=0, step=0, rank=0)[0].shape == (2, 8, 64)


@pytest.mark.no_process
def test_vocab_is_an_option_with_a_realistic_gpu_default():
    assert _resolved(8).spec.shape.vocab == 32000
    assert _resolved(0, vocab=512).spec.shape.vocab == 512
