"""The ZeRO paper's ZeRO-2 as DeepSpeed runs it (stage 2 under bf16): what torch has no implementation of.

torch's ZeRO-2 (FSDP SHARD_GRAD_OP, fully_shard with reshard_after_forward=False) frees the gathered parameters after
backward and keeps fp32 sharded gradients, so at rest it holds ZeRO-3's 16Ψ/N. The paper's ZeRO-2 holds 2Ψ + 14Ψ/N:

- the full bf16 parameters stay in the model (2Ψ), as views of flat per-bucket buffers (models/shard_layout.py's
  zero2_buckets: the parameters in backward's order, each bucket padded to a multiple of N);
- as backward accumulates each parameter's gradient (a post-accumulate-grad hook), a full bucket is copied into a flat
  buffer, scaled by 1/N and reduce-scattered (asynchronously) into this rank's slice; the full gradients are freed at
  once, so a rank keeps only its bf16 gradient shard (2Ψ/N);
- the optimizer is MasterWeightAdamW over this rank's slices of the parameter buffers: fp32 master copy and Adam
  moments of the shard only (12Ψ/N). step() waits for the reductions, updates the shards (the bf16 shard is written
  into the parameter buffer itself) and all-gathers every bucket back into the full parameters.

Gradient accumulation: every micro-batch is reduced and the shards accumulate, as DeepSpeed's ZeRO-2 does (it has no
no_sync). Skipping the reduction on all but the last micro-batch would keep the whole gradient (2Ψ) from one
micro-batch to the next, the memory ZeRO-2 exists to save; the cost is a reduce-scatter per micro-batch
(models/comm_volume.py predicts it).

Every parameter must receive a gradient in every backward, as under DDP without find_unused_parameters: a bucket that
is not complete at the end of backward would never be reduced, so that is an error, not a silent skip.
"""

from collections.abc import Callable
from typing import Any, overload

import torch
import torch.distributed as dist

from commbench.collectives.torch_api import all_gather_single, reduce_scatter_single
from commbench.models.shard_layout import zero2_buckets
from commbench.training.master_weights import MasterWeightAdamW


class _Bucket:
    """A flat bucket: the buffer its parameters are views of, this rank's slice of it, and the reduction in flight."""

    def __init__(self, params: list[torch.Tensor], shard_elements: int, *, rank: int, world: int):
        self.params = params
        self.buffer = torch.zeros(shard_elements * world, dtype=params[0].dtype, device=params[0].device)
        self.spans, offset = [], 0
        for param in params:
            view = self.buffer[offset:offset + param.numel()]
            view.copy_(param.detach().reshape(-1))
            param.data = view.view_as(param)
            self.spans.append((offset, offset + param.numel()))
            offset += param.numel()
        self.shard = self.buffer[rank * shard_elements:(rank + 1) * shard_elements]  # the optimizer's "parameter"
        self.arrived = 0  # parameters whose gradient this backward has produced
        self.reduced = False  # reduced in this backward
        # (work, input, output) of a reduce-scatter not yet waited for
        self.pending: tuple[Any, torch.Tensor, torch.Tensor] | None = None


class Zero2AdamW(MasterWeightAdamW):
    """The optimizer of the partitioned ZeRO-2: build it over the (bf16) model before the first forward; it takes
    over the model's parameter storage and its gradient reduction. gradient_shards lists the bf16 gradient shards it
    holds (training/model_state.py counts them: the model's own .grad stay None)."""

    def __init__(self, model: torch.nn.Module, *, lr: float, bucket_cap_mb: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        parameters = list(model.parameters())
        self.buckets = [_Bucket([parameters[index] for index in layout.params], layout.shard, rank=rank,
                                world=self.world)
                        for layout in zero2_buckets([tuple(p.shape) for p in parameters], self.world, bucket_cap_mb)]
        super().__init__([bucket.shard for bucket in self.buckets], lr=lr)
        self._bucket_of = {param: bucket for bucket in self.buckets for param in bucket.params}
        self._end_queued = False
        for param in parameters:
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    @property
    def gradient_shards(self) -> list[torch.Tensor]:
        return [bucket.shard.grad for bucket in self.buckets if bucket.shard.grad is not None]

    def _gradient_ready(self, param: torch.Tensor) -> None:
        if not self._end_queued:  # once per backward: check that every bucket was reduced
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            self._end_queued = True
        bucket = self._bucket_of[param]
        bucket.arrived += 1
        if bucket.arrived == len(bucket.params):
            self._reduce(bucket)

    @torch.no_grad()
    def _reduce(self, bucket: _Bucket) -> None:
        flat = torch.empty_like(bucket.buffer)
        flat[bucket.spans[-1][1]:].zero_()  # the padding
        for param, (start, end) in zip(bucket.params, bucket.spans):
            assert param.grad is not None  # every parameter's post-accumulate-grad hook has run (bucket.arrived)
            flat[start:end].copy_(param.grad.reshape(-1))
            param.grad = None  # the full gradient is not kept: only this rank's shard of the reduced bucket is
        flat.mul_(1 / self.world)  # the mean over ranks, scaled before the summing reduction as DDP scales it
        self._settle(bucket)  # the previous micro-batch's reduction of this bucket, accumulated first
        output = torch.empty_like(bucket.shard)
        bucket.pending = (reduce_scatter_single(output, flat, group=self.group, async_op=True), flat, output)
        bucket.arrived, bucket.reduced = 0, True

    def _settle(self, bucket: _Bucket) -> None:
        """Wait for the bucket's reduction in flight and add it to the gradient shard."""
        if bucket.pending is None:
            return
        work, _, output = bucket.pending
        work.wait()
        bucket.pending = None
        if bucket.shard.grad is None:
            bucket.shard.grad = output
        else:
            bucket.shard.grad.add_(output)

    def _end_of_backward(self) -> None:
        self._end_queued = False
        missing = [bucket for bucket in self.buckets if not bucket.reduced]
        for bucket in self.buckets:
            bucket.reduced = False
        if missing:
            raise RuntimeError(f"ZeRO-2: {len(missing)} of {len(self.buckets)} gradient buckets got no complete "
                               "gradient in this backward; every parameter must take part in every backward")

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # as torch.optim.Optimizer's
        for bucket in self.buckets:
            self._settle(bucket)
        loss = super().step(closure)  # writes each updated bf16 shard into its slice of the parameter buffer
        gathers = [all_gather_single(bucket.buffer, bucket.shard, group=self.group, async_op=True)
                   for bucket in self.buckets]
        for work in gathers:
            work.wait()
        return loss
