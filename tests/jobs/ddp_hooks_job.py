"""DDP's comm hooks and static graph as commbench applies them (training/wrappers.apply_ddp), on real gloo ranks: run
under torchrun by tests/test_training_ddp_hooks.py; argv: out_dir. Writes rank<R>.json: each hook's gradient against
DDP's own fp32 all-reduce of the same backward, and the gradients of a static graph trained with accumulation (no_sync
on the first micro-batch of each step) beside the same steps without a static graph."""

import contextlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from commbench.training.wrappers import apply_ddp

cpu = torch.device("cpu")


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))


def hook_gradients(hook: str, rank: int) -> torch.Tensor:
    ddp = apply_ddp(model(), device=cpu, comm_hook=hook)
    for step in range(4):  # PowerSGD all-reduces plainly for 2 iterations, then compresses
        ddp.zero_grad(set_to_none=True)
        generator = torch.Generator().manual_seed(100 * step + rank)
        ddp(torch.randn(16, 64, generator=generator)).pow(2).sum().backward()
    return torch.cat([p.grad.flatten() for p in ddp.parameters()])


def accumulated_gradients(static_graph: bool, rank: int) -> list[list[float]]:
    ddp = apply_ddp(model(), device=cpu, static_graph=static_graph)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    sums = []
    for step in range(3):
        optimizer.zero_grad(set_to_none=True)
        for micro in range(2):
            generator = torch.Generator().manual_seed(10 * step + micro + 1000 * rank)
            with ddp.no_sync() if micro == 0 else contextlib.nullcontext():
                ddp(torch.randn(16, 64, generator=generator)).pow(2).sum().backward()
        sums.append([float(p.grad.double().sum()) for p in ddp.parameters()])
        optimizer.step()
    return sums


def main(out_dir: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    reference = hook_gradients("none", rank)
    errors = {hook: float((hook_gradients(hook, rank) - reference).abs().max() / reference.abs().max())
              for hook in ("bf16", "fp16", "powersgd")}
    result = {"relative_error": errors, "static": accumulated_gradients(True, rank),
              "dynamic": accumulated_gradients(False, rank)}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
