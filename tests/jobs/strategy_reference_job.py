"""k steps of one parallel strategy on every rank against one process training on all ranks' micro-batches.

Run under torchrun by tests/test_training.py; argv: out_dir strategy [shard_group]. Writes rank<R>.json with the
largest parameter difference to the reference, whether ranks agree, and this rank's model-state bytes.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

from commbench.training.model_state import count
from commbench.training.step import train_step
from commbench.training.synthetic import ModelShape, build_model, make_batch
from commbench.training.wrappers import apply_ddp, apply_fsdp1, apply_fsdp2, apply_zero1

STEPS, MICRO_BATCH, SEED, LR = 3, 2, 11, 1e-3
out_dir, strategy = Path(sys.argv[1]), sys.argv[2]
shard_group = int(sys.argv[3]) if len(sys.argv) > 3 else None
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cpu = torch.device("cpu")
# hidden 72 and 3 heads: rows that do not divide by 4 ranks, so FSDP shards are uneven
shape = ModelShape(kind="transformer", layers=2, hidden=72, heads=3, seq_len=8)
model = build_model(shape, seed=SEED)
optimizer = None
if strategy == "ddp":
    model = apply_ddp(model, device=cpu)
elif strategy == "zero1":
    model, optimizer = apply_zero1(model, device=cpu, lr=LR)
elif strategy in ("zero2", "zero3"):
    model = apply_fsdp2(model, mesh=init_device_mesh("cpu", (world,)), reshard_after_forward=strategy == "zero3",
                        forward_prefetch=1, backward_prefetch=1)
elif strategy == "hsdp":
    model = apply_fsdp2(model, mesh=init_device_mesh("cpu", (world // shard_group, shard_group),
                                                     mesh_dim_names=("replicate", "shard")))
elif strategy.startswith("fsdp1-"):
    mesh = init_device_mesh("cpu", (world // shard_group, shard_group),
                            mesh_dim_names=("replicate", "shard")) if shard_group else None
    model = apply_fsdp1(model, device=cpu, sharding_strategy=strategy.removeprefix("fsdp1-").upper(),
                        device_mesh=mesh)
optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=LR)
for step in range(STEPS):
    train_step(model, optimizer, shape=shape, micro_batch=MICRO_BATCH, accum_steps=1, seed=SEED, step=step,
               rank=rank, device=cpu)
state = count(model, optimizer)

# full parameters on every rank, in the reference model's order
if strategy.startswith("fsdp1-"):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.summon_full_params(model):
        full = [p.detach().clone() for p in model.parameters()]
elif strategy in ("zero2", "zero3", "hsdp"):
    full = [p.full_tensor().detach() for p in model.parameters()]
else:
    full = [p.detach().clone() for p in model.parameters()]

reference = build_model(shape, seed=SEED)
reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=LR)
for step in range(STEPS):
    reference_optimizer.zero_grad()
    loss = sum(F.mse_loss(reference(inputs), targets) / world for inputs, targets in (
        make_batch(shape, micro_batch=MICRO_BATCH, seed=SEED, step=step, rank=r) for r in range(world)))
    loss.backward()
    reference_optimizer.step()
flat = torch.cat([p.flatten() for p in full])
gathered = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
(out_dir / f"rank{rank}.json").write_text(json.dumps({
    "max_param_difference_vs_reference": max(float((a - b.detach()).abs().max())
                                             for a, b in zip(full, reference.parameters())),
    "identical_across_ranks": all(torch.equal(gathered[0], g) for g in gathered),
    "param_bytes": state.param_bytes, "grad_bytes": state.grad_bytes, "optim_bytes": state.optim_bytes,
    "numel": sum(p.numel() for p in reference.parameters())}))
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
