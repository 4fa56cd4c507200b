"""Training sweeps before anything launches: axes, validation, one-line errors, and the layout-exact models."""


import pytest

from commbench.errors import CommbenchError
from commbench.models import comm_volume
from commbench.models.shard_layout import dim0_chunk_elements, flat_padded_elements, greedy_partition, local_state
from commbench.training import plan
from commbench.training.spec import TrainConfig, TrainSpec, validate
from commbench.training.synthetic import ModelShape

pytestmark = pytest.mark.no_process


def _spec(configs, **overrides) -> TrainSpec:
    fields = dict(bench="ddp", configs=tuple(configs), shape=ModelShape(), micro_batch=2, steps=10, warmup_steps=2,
                  profile_steps=3, seed=0, lr=1e-4, backend="gloo", device="cpu", nproc=2)
    fields.update(overrides)
    return TrainSpec(**fields)


def test_strategy_keys_come_from_the_model_table():
    assert plan.STRATEGIES == ("ddp", "zero1", "zero2", "zero3", "hsdp")
    assert plan.default_strategies(4) == plan.STRATEGIES
    assert plan.default_strategies(2) == ("ddp", "zero1", "zero2", "zero3")  # HSDP needs two replicas of two


def test_ddp_axes_are_a_cross_product():
    configs = plan.ddp_configs(bucket_cap_mb=(1.0, 25.0), gradient_as_bucket_view=(False, True),
                               static_graph=(False,), comm_hooks=("none", "bf16"), accum_steps=(1, 4))
    assert len(configs) == 2 * 2 * 2 * 2
    assert {config.comm_hook for config in configs} == {"none", "bf16"}


def test_fsdp_axes_give_each_implementation_its_own_values():
    configs = plan.fsdp_configs(impls=("fsdp2", "fsdp1"), reshard_after_forward=(True, False),
                                forward_prefetch=(0, 2), backward_prefetch=("default", "pre"),
                                limit_all_gathers=(True,), wraps=("block",), precisions=("fp32",), accum_steps=(1,),
                                world=2)
    fsdp2 = [c for c in configs if c.impl == "fsdp2"]
    fsdp1 = [c for c in configs if c.impl == "fsdp1"]
    assert {c.backward_prefetch for c in fsdp2} == {"default"} and {c.backward_prefetch for c in fsdp1} == {"pre"}
    assert {c.forward_prefetch for c in fsdp2} == {0, 2} and {c.forward_prefetch for c in fsdp1} == {0}
    assert len(fsdp2) == 4 and len(fsdp1) == 2
    assert {c.strategy for c in configs if c.reshard_after_forward is False} == {"zero2"}


def test_spec_survives_json_and_labels_name_the_settings():
    config = TrainConfig(strategy="hsdp", impl="fsdp2", reshard_after_forward=True, shard_group=2, wrap="block")
    spec = _spec([config], nproc=4)
    assert TrainSpec.from_json(spec.to_json()) == spec
    assert config.label() == "hsdp/fsdp2 accum=1 reshard=true wrap=block shard_group=2"


@pytest.mark.parametrize("overrides, config, message", [
    ({"steps": 1}, {}, "--steps 1 is too few"),
    ({"warmup_steps": 1}, {}, "rebuilds its buckets"),
    ({"nproc": 4}, {"strategy": "hsdp", "impl": "fsdp2", "shard_group": 3}, "--shard-group 3 must divide"),
    ({}, {"strategy": "hsdp", "impl": "fsdp2", "shard_group": 2}, "at least two replicas"),
    ({}, {"accum_steps": 0}, "--accum-steps 0"),
])
def test_validation_names_the_fix(overrides, config, message):
    fields = {"strategy": "ddp", "impl": "ddp", **config}
    with pytest.raises(CommbenchError, match=message):
        validate(_spec([TrainConfig(**fields)], **overrides))


@pytest.mark.parametrize("args, message", [
    (["ddp", "--comm-hook", "int8"], "unknown --comm-hook 'int8'"),
    (["ddp", "--bucket-cap-mb", "big"], "--bucket-cap-mb 'big' is not a number"),
    (["ddp", "--bucket-cap-mb", "0"], "must be above 0 MiB"),
    (["ddp", "--gradient-as-bucket-view", "maybe"], "is not true or false"),
    (["ddp", "--params", "lots"], "bad --params 'lots'"),
    (["ddp", "--memory-budget", "80"], "bad --memory-budget '80'"),
    (["ddp", "--steps", "1"], "--steps 1 is too few"),
    (["zero", "--strategy", "zero4"], "unknown --strategy 'zero4'"),
    (["zero", "--strategy", "hsdp"], "at least two replicas"),
    (["zero", "--nproc", "4", "--oversubscribe", "--strategy", "hsdp", "--shard-group", "3"],
     "--shard-group 3 must divide"),
    (["fsdp", "--reshard-after-forward", "sometimes"], "is not true, false or a rank count"),
    (["fsdp", "--impl", "fsdp3"], "unknown --impl 'fsdp3'"),
    (["fsdp", "--impl", "fsdp1", "--forward-prefetch", "2"], "give --forward-prefetch 0 or 1"),
    (["fsdp", "--backward-prefetch", "later"], "unknown --backward-prefetch 'later'"),
    (["fsdp", "--wrap", "model", "--forward-prefetch", "1", "--backward-prefetch", "1"], "nothing to prefetch"),
    (["fsdp", "--hidden", "100", "--heads", "3"], "must divide by --heads 3"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message, commbench_cli):
    completed = commbench_cli(*args, "--backend", "gloo", "--device", "cpu", "--out", str(tmp_path))
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr
    assert message in completed.stderr
    assert not list(tmp_path.iterdir())  # nothing created before the input was accepted


def test_fsdp2_shards_by_rows_and_fsdp1_pads_its_flat_parameter():
    # 10 rows over 4 ranks: torch.chunk gives 3, 3, 3, 1 rows
    assert [dim0_chunk_elements((10, 5), shard, 4) for shard in range(4)] == [15, 15, 15, 5]
    assert [dim0_chunk_elements((2, 5), shard, 4) for shard in range(4)] == [5, 5, 0, 0]
    # one FSDP1 unit of 50 + 7 elements over 4 ranks: ⌈57/4⌉ = 15 each, 3 of them padding in all
    assert flat_padded_elements([(10, 5), (7,)], 4) == 15


def test_zero1_partition_is_greedy_largest_first():
    shapes = [(4,), (10,), (3,), (9,)]
    assert greedy_partition(shapes, 2) == [[1, 2], [3, 0]]  # 10 → rank 0, 9 → 1, 4 → 1 (9 < 10), 3 → 0
    state = local_state(impl="zero1", units=[shapes], rank=1, world=2)
    assert (state.param_elements, state.optim_elements) == (26, 13)


def test_fsdp_moves_one_and_a_half_times_the_bytes_of_ddp():
    units = [[(64, 64), (64,)], [(64, 64), (64,)], [(64,)]]
    ddp = comm_volume.training_traffic(strategy="ddp", impl="ddp", units=units, world=8, accum_steps=1)
    zero3 = comm_volume.training_traffic(strategy="zero3", impl="fsdp1", units=units, world=8, accum_steps=1)
    zero2 = comm_volume.training_traffic(strategy="zero2", impl="fsdp1", units=units, world=8, accum_steps=1)
    assert zero3.bytes_sent_per_rank / ddp.bytes_sent_per_rank == pytest.approx(1.5, rel=0.02)  # root once
    assert zero2.bytes_sent_per_rank / ddp.bytes_sent_per_rank == pytest.approx(1.0, rel=0.02)
    # FSDP2 as torchtitan lays it out keeps the last block gathered into backward too (training/fsdp2_units.py)
    fsdp2 = comm_volume.training_traffic(strategy="zero3", impl="fsdp2", units=units, world=8, accum_steps=1)
    assert fsdp2.msg_elements == zero3.msg_elements - (64 * 64 + 64)
    # accumulation over 4 micro-batches: DDP's one all-reduce stays one; ZeRO-3 gathers on every micro-batch
    ddp4 = comm_volume.training_traffic(strategy="ddp", impl="ddp", units=units, world=8, accum_steps=4)
    zero3_4 = comm_volume.training_traffic(strategy="zero3", impl="fsdp1", units=units, world=8, accum_steps=4)
    assert ddp4 == ddp
    assert zero3_4.msg_elements == pytest.approx(3 * zero3.msg_elements, rel=0.01)  # 8 gathers + 1 reduce vs 2 + 1


def test_fit_refuses_a_training_run_in_one_line(tmp_path, commbench_cli):
    from commbench import store
    from commbench.benches.ddp import KIND

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store.write_meta(run_dir, {"schema_version": store.SCHEMA_VERSION, "status": "complete", "kind": KIND.name})
    (run_dir / store.RESULTS_FILE).write_text(",".join(KIND.result_columns) + "\n")
    completed = commbench_cli("fit", str(run_dir))
    assert completed.returncode == 2
    assert "holds a DDP sweep (commbench ddp)" in completed.stderr and completed.stderr.count("\n") == 1


def _gloo_cuda(bench: str, args: list[str], gpus: int = 2):
    """A training bench resolved as on a node with GPUs (not this one), with gloo on CUDA tensors."""
    from commbench.benches import get_kind
    from commbench.benches.options import parse_options
    from commbench.machine import Machine

    kind = get_kind(bench)
    values = dict(zip(args[::2], args[1::2], strict=True))
    options = parse_options(kind.options, {"backend": "gloo", "device": "cuda", "steps": 10, **values})
    return kind.resolve(options, Machine.for_job(nodes=1, ranks_per_node=gpus, gpus_per_node=gpus))


@pytest.mark.parametrize("bench, args, refused", [
    ("fsdp", [], "zero3/fsdp2, zero2/fsdp2"),
    ("fsdp", ["impls", "fsdp1", "reshards", "true"], "zero3/fsdp1"),
    ("strategy", [], "zero2/fsdp2, zero3/fsdp2"),
    ("strategy", ["strategies", "zero1,zero3"], "zero3/fsdp2"),
    ("strategy", ["strategies", "hsdp", "shard_group", "2"], "hsdp/fsdp2"),
])
def test_fsdp_on_gloo_cuda_is_refused_before_launch(bench, args, refused):
    gpus = 4 if "hsdp" in args else 2
    with pytest.raises(CommbenchError) as raised:
        _gloo_cuda(bench, args, gpus)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"gloo cannot run {refused} on CUDA tensors")
    assert "all_gather and reduce_scatter" in message and "use --backend nccl or --device cpu" in message
    assert ("--strategy ddp,zero1" in message) == (bench == "strategy")


def test_ddp_and_zero1_on_gloo_cuda_are_not_refused():
    # gloo all-reduces and broadcasts CUDA tensors: what DDP and ZeroRedundancyOptimizer need
    for bench, args in (("ddp", []), ("strategy", ["strategies", "ddp,zero1"])):
        resolved = _gloo_cuda(bench, args)
        assert (resolved.spec.backend, resolved.spec.device) == ("gloo", "cuda")
    with pytest.raises(CommbenchError, match="gloo cannot run zero3/fsdp2"):  # the same check over a spec directly
        validate(_spec([TrainConfig(strategy="zero3", impl="fsdp2", reshard_after_forward=True)], device="cuda"))
    validate(_spec([TrainConfig(strategy="zero1", impl="zero1")], device="cuda"))


def test_slurm_dry_run_refuses_fsdp_on_gloo_cuda_for_gpu_nodes(tmp_path, commbench_cli):
    suite = tmp_path / "gloo-cuda.toml"
    suite.write_text('description = "FSDP over gloo on CUDA"\nbackend = "gloo"\ndevice = "cuda"\n\n'
                     '[[bench]]\nkind = "fsdp"\n')
    out = tmp_path / "results"
    refused = commbench_cli("slurm", "submit", str(suite), "--nodes", "1", "--gpus-per-node", "2", "--dry-run",
                            "--out", str(out))
    assert refused.returncode == 2, refused
    assert len(refused.stderr.strip().splitlines()) == 1 and "gloo cannot run zero3/fsdp2" in refused.stderr
    suite.write_text(suite.read_text().replace('kind = "fsdp"', 'kind = "zero"\nstrategy = ["ddp", "zero1"]'))
    accepted = commbench_cli("slurm", "submit", str(suite), "--nodes", "1", "--gpus-per-node", "2", "--dry-run",
                             "--out", str(out))
    assert accepted.returncode == 0, accepted.stderr
    assert not out.exists()
