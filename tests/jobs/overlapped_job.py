"""A 2-rank gloo job whose all_reduce runs on gloo's thread while the main thread multiplies matrices, traced.

Run by tests/test_trace_analysis.py under torchrun; writes trace-rank<R>.json.gz into the folder given as argv[1].
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

dist.init_process_group("gloo")
rank = dist.get_rank()
gradients = torch.ones(8 * 1024 * 1024)  # 32 MiB: tens of ms on gloo, long enough to overlap
left, right = torch.randn(384, 384), torch.randn(384, 384)
path = Path(sys.argv[1]) / f"trace-rank{rank}.json.gz"
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
             on_trace_ready=lambda prof: prof.export_chrome_trace(str(path))) as profiler:
    for _ in range(4):
        dist.barrier()
        work = dist.all_reduce(gradients, async_op=True)
        for _ in range(20):
            torch.mm(left, right)  # computation while the all_reduce is in flight
        work.wait()
        for _ in range(5):
            torch.mm(left, right)  # computation after it: cannot overlap
        profiler.step()
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
