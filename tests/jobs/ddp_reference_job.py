"""k DDP steps on every rank, compared with one process that trains on all ranks' micro-batches together.

Run under torchrun by tests/test_training.py; argv: out_dir bucket_cap_mb accum_steps. Writes rank<R>.json.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from commbench.training.model_state import count
from commbench.training.step import train_step
from commbench.training.synthetic import ModelShape, build_model, make_batch
from commbench.training.wrappers import apply_ddp

STEPS, MICRO_BATCH, SEED = 3, 2, 7
out_dir, bucket_cap_mb, accum = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
shape = ModelShape(kind="transformer", layers=2, hidden=64, heads=4, seq_len=16)
cpu = torch.device("cpu")

model = apply_ddp(build_model(shape, seed=SEED), device=cpu, bucket_cap_mb=bucket_cap_mb)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = [train_step(model, optimizer, shape=shape, micro_batch=MICRO_BATCH, accum_steps=accum, seed=SEED, step=s,
                     rank=rank, device=cpu) for s in range(STEPS)]

# the single-process reference: the mean gradient over ranks and micro-batches is the gradient of the mean loss
reference = build_model(shape, seed=SEED)
reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
for s in range(STEPS):
    reference_optimizer.zero_grad()
    loss = 0.0
    for r in range(world):
        for micro in range(accum):
            inputs, targets = make_batch(shape, micro_batch=MICRO_BATCH, seed=SEED, step=s * accum + micro, rank=r)
            loss = loss + F.mse_loss(reference(inputs), targets) / (world * accum)
    loss.backward()
    reference_optimizer.step()

max_difference = max(float((a - b).abs().max()) for a, b in zip(model.module.parameters(), reference.parameters()))
flat = torch.cat([p.detach().flatten() for p in model.module.parameters()])
gathered = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
state = count(model.module, optimizer)
(out_dir / f"rank{rank}.json").write_text(json.dumps({
    "losses": losses, "max_param_difference_vs_reference": max_difference,
    "identical_across_ranks": all(torch.equal(gathered[0], g) for g in gathered),
    "param_bytes": state.param_bytes, "grad_bytes": state.grad_bytes, "optim_bytes": state.optim_bytes,
    "numel": sum(p.numel() for p in model.module.parameters())}))
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
