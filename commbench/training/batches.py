"""The micro-batches a configuration trains on, drawn on the device before anything is timed.

Drawing a batch inside the timed step would time the random-number generator and, for a batch drawn on the host, a
copy from pageable memory: for hidden-sized vectors of 8 × 1024 × 1088 one CPU thread drew a micro-batch in 0.1 to
0.3 s on the machines measured, time a real training step does not spend. So a configuration first draws a small
pool of micro-batches on its device, and the step only picks from it: micro-batch k of the configuration
(step × accum_steps + micro) is pool entry k mod POOL_SIZE, reused round-robin. Each entry is make_batch of (seed,
entry, rank): the data stay a pure function of seed, rank and step. The pool is held for the configuration's whole
life and counts in its peak memory, as a data loader's prefetched batches do: POOL_SIZE × 2 tensors (inputs,
targets) of micro_batch × seq_len int64 token ids for a transformer, of micro_batch × seq_len × hidden fp32 values
for the mlp model.
"""

import torch

from commbench.training.spec import ModelShape
from commbench.training.synthetic import make_batch

POOL_SIZE = 4
"""Micro-batches drawn per configuration: enough that consecutive micro-batches differ, few enough to cost little
memory (a transformer's micro-batch at the GPU default shape is 8 × 1024 token ids, inputs and targets: 128 KiB)."""


def pool_entry(micro_batch_number: int, size: int = POOL_SIZE) -> int:
    """The pool entry that micro-batch number k (step × accum_steps + micro) of a configuration trains on."""
    return micro_batch_number % size


class BatchPool:
    """POOL_SIZE micro-batches of one rank, drawn on `device` when the pool is made."""

    def __init__(self, shape: ModelShape, *, micro_batch: int, seed: int, rank: int, device: torch.device | str,
                 size: int = POOL_SIZE):
        self.batches = tuple(make_batch(shape, micro_batch=micro_batch, seed=seed, step=entry, rank=rank,
                                        device=device) for entry in range(size))

    def for_step(self, step: int, accum_steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (inputs, targets) of each micro-batch of optimizer step `step`: tensors already on the device."""
        size = len(self.batches)
        return [self.batches[pool_entry(step * accum_steps + micro, size)] for micro in range(accum_steps)]

    @property
    def nbytes(self) -> int:
        return sum(tensor.numel() * tensor.element_size() for batch in self.batches for tensor in batch)
