"""Several FSDP configurations built and trained in one process group, as a sweep with --isolation reset runs them;
writes rank<R>.json: the process groups this rank holds after each configuration, and each one's losses.

Run under torchrun (4 ranks) by tests/test_training_mesh.py; argv: out_dir. The configurations are built by
commbench's own code path (training/build.py) and trained by the step the sweep times (training/step.py).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from commbench.training.batches import BatchPool
from commbench.training.build import build
from commbench.training.meshes import DeviceMeshes
from commbench.training.spec import ModelShape, TrainConfig, TrainSpec
from commbench.training.step import step_function

shape = ModelShape(kind="mlp", layers=2, hidden=64, heads=4, seq_len=4)
cpu = torch.device("cpu")
meshes = DeviceMeshes()  # the process's meshes, shared by its configurations as in a launch
HSDP = dict(strategy="hsdp", reshard_after_forward=True, wrap="block", shard_group=2)
CONFIGS = [TrainConfig(impl="fsdp2", **HSDP), TrainConfig(impl="fsdp1", **HSDP),
           TrainConfig(impl="fsdp2", accum_steps=2, **HSDP), TrainConfig(impl="fsdp1", accum_steps=2, **HSDP),
           TrainConfig(strategy="zero3", impl="fsdp2", reshard_after_forward=True, wrap="block")]

out_dir = Path(sys.argv[1])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
groups, losses = [], []
for config in CONFIGS:
    spec = TrainSpec(bench="strategy", configs=(config,), shape=shape, micro_batch=1, steps=6, warmup_steps=2,
                     profile_steps=0, seed=0, lr=1e-3, backend="gloo", device="cpu", nproc=world)
    built = build(config, spec, rank=rank, world=world, device=cpu, meshes=meshes)
    pool = BatchPool(shape, micro_batch=1, seed=0, rank=rank, device=cpu)
    step = step_function(built.model, built.optimizer, pool, accum_steps=config.accum_steps,
                         precision=config.mixed_precision, impl=config.impl, device=cpu)
    losses.append([step() for _ in range(2)])
    built = pool = step = None  # dropped as measure.py drops them
    groups.append(len(distributed_c10d._world.pg_map))
(out_dir / f"rank{rank}.json").write_text(json.dumps({"process_groups": groups, "losses": losses}))
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
