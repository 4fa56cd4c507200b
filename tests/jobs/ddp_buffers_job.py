"""A 2-rank gloo DDP job whose model has buffers (a BatchNorm: float running statistics and an int64 step count),
one step traced the way commbench traces a training step (profiling/capture.py, record_shapes).

DDP broadcasts a module's buffers from rank 0 at the start of every forward, coalesced per dtype: the step holds an
int64 broadcast besides the float32 one and the gradient all-reduce. Run by tests/test_replay_wide_jobs.py under
torchrun; writes rank<R>-ddp-config000.json.gz into the folder given as argv[1].
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from commbench.platform import CpuPlatform
from commbench.profiling.capture import capture

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU(),
                                              nn.Linear(256, 16)), bucket_cap_mb=0.1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(32, 256, generator=torch.Generator().manual_seed(rank))


def step():
    optimizer.zero_grad()
    model(inputs).square().mean().backward()
    optimizer.step()


for _ in range(2):  # DDP rebuilds its buckets in the second step: the traced step has its final ones
    step()
capture(step, barrier=dist.barrier, iterations=1, platform=CpuPlatform("gloo"),
        path=Path(sys.argv[1]) / f"rank{rank}-ddp-config000.json.gz", record_shapes=True)
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
