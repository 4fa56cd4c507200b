"""k steps of training configurations on every rank, each against one process that trains on all ranks' micro-batches.

Run under torchrun by tests/test_training.py; argv: out_dir and a JSON list of TrainConfigs (one launch for all, as
a suite runs them: each configuration builds its own model in the same process group). The model is built by
commbench's own code path (training/build.py). Writes rank<R>-<I>.json per configuration I with the losses of both,
the largest parameter difference to the reference, whether replicas agree, and this rank's model state: counted and
predicted.
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
from commbench.training.spec import TrainConfig, TrainSpec
from commbench.training.step import step_function
from commbench.training.synthetic import ModelShape, batch_loss, build_model

STEPS, MICRO_BATCH, SEED, LR = 3, 2, 11, 1e-3
# hidden 72, 3 heads and a 102-token vocabulary: rows that do not divide by 4 ranks, so shards are uneven and FSDP1 pads
shape = ModelShape(kind="transformer", layers=2, hidden=72, heads=3, seq_len=8, vocab=102)
cpu = torch.device("cpu")
meshes = DeviceMeshes()  # the process's meshes, shared by its configurations as in a launch


def check(config: TrainConfig, out_path: Path) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = TrainSpec(bench="strategy", configs=(config,), shape=shape, micro_batch=MICRO_BATCH, steps=STEPS,
                     warmup_steps=2, profile_steps=0, seed=SEED, lr=LR, backend="gloo", device="cpu", nproc=world)
    built = build(config, spec, rank=rank, world=world, device=cpu, meshes=meshes)
    model, optimizer = built.model, built.optimizer
    pool = BatchPool(shape, micro_batch=MICRO_BATCH, seed=SEED, rank=rank, device=cpu)
    step_once = step_function(model, optimizer, pool, accum_steps=config.accum_steps,
                              precision=config.mixed_precision, impl=config.impl, device=cpu)
    local_losses = [step_once() for _ in range(STEPS)]
    state = count(model, optimizer)
    predicted = local_state(impl=config.impl, units=built.units, rank=rank, world=world, shard_group=config.shard_group)
    losses = torch.tensor(local_losses, dtype=torch.float64)
    dist.all_reduce(losses)  # the global loss of a step is the mean of the ranks' losses
    losses /= world

    # full parameters on every rank, in the reference model's order
    if config.impl == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.summon_full_params(model):
            full = [p.detach().clone() for p in model.parameters()]
    elif config.impl == "fsdp2":
        full = [p.full_tensor().detach() for p in model.parameters()]
    else:
        full = [p.detach().clone() for p in model.parameters()]

    # the reference: the mean gradient over ranks and micro-batches is the gradient of the mean loss, on the
    # micro-batches each rank's pool gives
    pools = [BatchPool(shape, micro_batch=MICRO_BATCH, seed=SEED, rank=r, device=cpu) for r in range(world)]
    reference = build_model(shape, seed=SEED)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=LR)
    reference_losses = []
    for step in range(STEPS):
        reference_optimizer.zero_grad()
        loss = sum(batch_loss(reference(inputs), targets) / (world * config.accum_steps)
                   for pool_of_rank in pools for inputs, targets in pool_of_rank.for_step(step, config.accum_steps))
        loss.backward()
        reference_losses.append(float(loss))
        reference_optimizer.step()
    flat = torch.cat([p.flatten() for p in full])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    out_path.write_text(json.dumps({
        "losses": losses.tolist(), "reference_losses": reference_losses,
        "max_param_difference_vs_reference": max(float((a - b.detach()).abs().max())
                                                 for a, b in zip(full, reference.parameters())),
        "identical_across_ranks": all(torch.equal(gathered[0], g) for g in gathered),
        "param_bytes": state.param_bytes, "grad_bytes": state.grad_bytes, "optim_bytes": state.optim_bytes,
        "predicted_bytes": predicted.bytes(PRESETS["fp32-adam"]),
        "numel": sum(p.numel() for p in reference.parameters())}))


out_dir, configs = Path(sys.argv[1]), [TrainConfig(**fields) for fields in json.loads(sys.argv[2])]
dist.init_process_group("gloo")
for index, config in enumerate(configs):
    check(config, out_dir / f"rank{dist.get_rank()}-{index}.json")
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
