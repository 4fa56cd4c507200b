"""Synthetic models that need no download: a transformer-block stack and an MLP stack, deterministic by seed."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from commbench.errors import CommbenchError
from commbench.names import CPU
from commbench.training.spec import MODEL_KINDS, ModelShape

_HIDDEN_STEP = 64  # hidden sizes are multiples of this (and of the head count)


def params_per_block(shape: ModelShape) -> int:
    """Parameters of one block, from the layer sizes below (weights and biases)."""
    hidden, ffn = shape.hidden, shape.ffn_mult * shape.hidden
    mlp = hidden * ffn + ffn + ffn * hidden + hidden + 2 * hidden  # two linears and a LayerNorm
    if shape.kind == "mlp":
        return mlp
    return mlp + 3 * hidden * hidden + 3 * hidden + hidden * hidden + hidden + 2 * hidden  # qkv, proj, LayerNorm


def count_params(shape: ModelShape) -> int:
    head = shape.hidden * shape.hidden + shape.hidden + 2 * shape.hidden  # final LayerNorm and output linear
    return shape.layers * params_per_block(shape) + head


def shape_for_params(target: float, *, kind: str = "transformer", layers: int | None = None, heads: int = 4,
                     seq_len: int = 128) -> ModelShape:
    """The shape whose parameter count is closest to target: layers given (or 4 up to 1B, then 32), hidden chosen."""
    if kind not in MODEL_KINDS:
        raise CommbenchError(f"unknown model kind {kind!r}; choose from {', '.join(MODEL_KINDS)}")
    layers = layers or (4 if target <= 1e9 else 32)
    step = math.lcm(_HIDDEN_STEP, heads)
    best = None
    for hidden in range(step, step * 4096, step):
        shape = ModelShape(kind=kind, layers=layers, hidden=hidden, heads=heads, seq_len=seq_len)
        error = abs(count_params(shape) - target)
        if best is not None and error > best[0]:
            break  # the count grows with hidden: the previous one was closest
        best = (error, shape)
    return best[1]


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, tokens, hidden = x.shape
        q, k, v = self.qkv(self.norm(x)).view(batch, tokens, 3, self.heads, hidden // self.heads).unbind(2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return x + self.proj(out.transpose(1, 2).reshape(batch, tokens, hidden))


class _MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Block(nn.Module):
    """One unit of sharding and prefetching: attention (transformer only) then MLP."""

    def __init__(self, shape: ModelShape):
        super().__init__()
        self.attention = _Attention(shape.hidden, shape.heads) if shape.kind == "transformer" else None
        self.mlp = _MLP(shape.hidden, shape.ffn_mult * shape.hidden)

    def forward(self, x):
        return self.mlp(self.attention(x) if self.attention is not None else x)


class SyntheticModel(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        if shape.hidden % shape.heads:
            raise CommbenchError(f"hidden size {shape.hidden} must divide by --heads {shape.heads}")
        self.shape = shape
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.hidden)
        self.head = nn.Linear(shape.hidden, shape.hidden)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_model(shape: ModelShape, *, seed: int, device: torch.device | str = CPU) -> SyntheticModel:
    """The same weights on every rank and every run for the same seed."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return SyntheticModel(shape).to(device)
    finally:
        torch.random.set_rng_state(generator_state)


def make_batch(shape: ModelShape, *, micro_batch: int, seed: int, step: int, rank: int,
               device: torch.device | str = CPU) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and regression targets for one micro-batch, a pure function of (seed, step, rank) on each device type.
    Drawn on the device itself (its own generator): no host random numbers, no copy from pageable host memory.
    Training steps take batches from a BatchPool (training/batches.py), drawn before anything is timed."""
    generator = torch.Generator(device=device).manual_seed(hash((seed, step, rank)) & 0x7FFF_FFFF_FFFF)
    size = (micro_batch, shape.seq_len, shape.hidden)
    return (torch.randn(size, generator=generator, device=device),
            torch.randn(size, generator=generator, device=device))
