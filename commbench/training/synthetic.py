"""Synthetic models that need no download, deterministic by seed: a transformer language model (token embedding,
attention + MLP blocks, final norm, LM head over a vocabulary, cross-entropy on next-token targets) and an MLP stack
(regression on hidden-sized vectors: no embedding, no head over a vocabulary)."""

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
    """Parameters of SyntheticModel(shape): the blocks, the final LayerNorm and the output layer; a transformer's
    output is the LM head (vocab × hidden, no bias) and it has a token embedding (vocab × hidden) too, untied."""
    if shape.kind == "mlp":
        ends = shape.hidden * shape.hidden + shape.hidden  # output linear, hidden to hidden
    else:
        ends = 2 * shape.vocab * shape.hidden  # embedding and LM head
    return shape.layers * params_per_block(shape) + 2 * shape.hidden + ends


def shape_for_params(target: float, *, kind: str = "transformer", layers: int | None = None, heads: int = 4,
                     seq_len: int = 128, vocab: int = ModelShape.vocab) -> ModelShape:
    """The shape whose parameter count is closest to target: layers given (or 4 up to 1B, then 32), hidden chosen."""
    if kind not in MODEL_KINDS:
        raise CommbenchError(f"unknown model kind {kind!r}; choose from {', '.join(MODEL_KINDS)}")
    layers = layers or (4 if target <= 1e9 else 32)
    step = math.lcm(_HIDDEN_STEP, heads)
    best: tuple[float, ModelShape] | None = None
    for hidden in range(step, step * 4096, step):
        shape = ModelShape(kind=kind, layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab)
        error = abs(count_params(shape) - target)
        if best is not None and error > best[0]:
            break  # the count grows with hidden: the previous one was closest
        best = (error, shape)
    assert best is not None  # the range above is never empty
    return best[1]


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Block(nn.Module):
    """One unit of sharding and prefetching: attention (transformer only) then MLP."""

    def __init__(self, shape: ModelShape):
        super().__init__()
        self.attention = _Attention(shape.hidden, shape.heads) if shape.kind == "transformer" else None
        self.mlp = _MLP(shape.hidden, shape.ffn_mult * shape.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x) if self.attention is not None else x)


class SyntheticModel(nn.Module):
    """transformer: token ids (batch × seq_len) in, logits (batch × seq_len × vocab) out; mlp: hidden-sized vectors in
    and out. The embedding is registered first, so the parameter order is the order the units run in forward
    (embedding, blocks, norm, head): what training/build.py's parameter_units and ZeRO-1's partition rely on."""

    def __init__(self, shape: ModelShape):
        super().__init__()
        if shape.hidden % shape.heads:
            raise CommbenchError(f"hidden size {shape.hidden} must divide by --heads {shape.heads}")
        self.shape = shape
        # untied, as in Llama: the embedding and the head are separate FSDP units, the largest of a real LLM
        self.embedding = nn.Embedding(shape.vocab, shape.hidden) if shape.kind == "transformer" else None
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.hidden)
        self.head = nn.Linear(shape.hidden, shape.vocab, bias=False) if shape.kind == "transformer" \
            else nn.Linear(shape.hidden, shape.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batch_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of logits against token ids (transformer), mean squared error against vectors (mlp)."""
    if targets.dtype.is_floating_point:
        return F.mse_loss(outputs, targets)
    return F.cross_entropy(outputs.flatten(0, 1), targets.flatten())


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
    """Inputs and targets for one micro-batch, a pure function of (seed, step, rank) on each device type: for a
    transformer, token ids (int64, micro_batch × seq_len) and the next token of each (one sequence of seq_len + 1
    tokens, shifted); for mlp, hidden-sized vectors and regression targets. Drawn on the device itself (its own
    generator): no host random numbers, no copy from pageable host memory. Training steps take batches from a
    BatchPool (training/batches.py), drawn before anything is timed."""
    generator = torch.Generator(device=device).manual_seed(hash((seed, step, rank)) & 0x7FFF_FFFF_FFFF)
    if shape.kind == "transformer":
        tokens = torch.randint(shape.vocab, (micro_batch, shape.seq_len + 1), generator=generator, device=device)
        return tokens[:, :-1].clone(), tokens[:, 1:].clone()  # separate tensors: the pool's bytes are its tensors'
    size = (micro_batch, shape.seq_len, shape.hidden)
    return (torch.randn(size, generator=generator, device=device),
            torch.randn(size, generator=generator, device=device))
