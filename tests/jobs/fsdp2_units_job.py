"""FSDP2 as commbench applies it, observed on real ranks: run under torchrun by tests/test_training_fsdp_units.py;
argv: out_dir and a JSON list of TrainConfigs (fsdp2). Writes rank<R>-<I>.json per configuration I: each unit's
sharded state right after forward (before backward), whom each unit prefetches, the model's parameter shapes, and
this rank's model state after one optimizer step, counted and predicted.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from commbench.models.memory import PRESETS
from commbench.models.shard_layout import local_state
from commbench.training.batches import BatchPool
from commbench.training.build import build
from commbench.training.meshes import DeviceMeshes
from commbench.training.model_state import count
from commbench.training.spec import ModelShape, TrainConfig, TrainSpec
from commbench.training.synthetic import batch_loss

# hidden 72 and 3 heads, vocab 100: rows that do not divide evenly by the ranks
shape = ModelShape(kind="transformer", layers=3, hidden=72, heads=3, seq_len=8, vocab=100)
cpu = torch.device("cpu")
meshes = DeviceMeshes()  # the process's meshes, shared by its configurations as in a launch


def observe(config: TrainConfig, out_path: Path) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = TrainSpec(bench="fsdp", configs=(config,), shape=shape, micro_batch=2, steps=6, warmup_steps=2,
                     profile_steps=0, seed=3, lr=1e-3, backend="gloo", device="cpu", nproc=world)
    built = build(config, spec, rank=rank, world=world, device=cpu, meshes=meshes)
    model = built.model
    units = {"root": model, "embedding": model.embedding,
             **{f"block{index}": block for index, block in enumerate(model.blocks)}}
    names = {id(module._get_fsdp_state()): name for name, module in units.items() if hasattr(module, "reshard")}
    shapes = [list(parameter.shape) for parameter in model.parameters()]  # global shapes (DTensors)
    inputs, targets = BatchPool(shape, micro_batch=2, seed=3, rank=rank, device=cpu, size=1).batches[0]
    loss = batch_loss(model(inputs), targets)
    # what FSDP2 holds between forward and backward: a unit resharded after forward holds its shard only
    after_forward = {names[id(module._get_fsdp_state())]: not module._get_fsdp_state()._fsdp_param_group.is_sharded
                     for module in units.values() if hasattr(module, "reshard")}
    loss.backward()
    built.optimizer.step()
    prefetch = {names[id(module._get_fsdp_state())]: {
        "forward": [names[id(state)] for state in module._get_fsdp_state()._states_to_forward_prefetch],
        "backward": [names[id(state)] for state in module._get_fsdp_state()._states_to_backward_prefetch]}
        for module in units.values() if hasattr(module, "reshard")}
    state = count(model, built.optimizer)
    predicted = local_state(impl=config.impl, units=built.units, rank=rank, world=world).bytes(PRESETS["fp32-adam"])
    out_path.write_text(json.dumps({
        "gathered_after_forward": after_forward, "prefetch": prefetch, "shapes": shapes,
        "state_bytes": state.param_bytes + state.grad_bytes + state.optim_bytes, "predicted_bytes": predicted,
        "loss": float(loss.detach())}))


def main() -> None:
    out_dir, configs = Path(sys.argv[1]), [TrainConfig(**fields) for fields in json.loads(sys.argv[2])]
    dist.init_process_group("gloo")
    try:
        for index, config in enumerate(configs):
            observe(config, out_dir / f"rank{dist.get_rank()}-{index}.json")
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
