"""The GPT of ``llm/gpt``, built from a shape (RMSNorm, RoPE, QK-norm, ReLU^2 or SwiGLU MLP, soft-capped logits,
per-block residual scalars), and its parameter count and training FLOPs per token without building it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core.errors import ZooError


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


def rotary_tables(seq_len: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos()[None, None], angles.sin()[None, None]  # (1, 1, T, head_dim / 2)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos + b * sin, b * cos - a * sin), dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, dropout: float = 0.0):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.dropout = heads, kv_heads, head_dim, dropout
        self.q = nn.Linear(width, heads * head_dim, bias=False)
        self.k = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.proj = nn.Linear(heads * head_dim, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rms_norm(apply_rotary(q, cos, sin)), rms_norm(apply_rotary(k, cos, sin))  # QK-norm
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, width: int, kind: str):
        super().__init__()
        self.kind = kind
        hidden = 4 * width if kind == "relu2" else 64 * math.ceil(8 * width / 3 / 64)
        self.fc = nn.Linear(width, hidden * (2 if kind == "swiglu" else 1), bias=False)
        self.proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.kind == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            return self.proj(F.silu(gate) * up)
        return self.proj(F.relu(h).square())


class Block(nn.Module):
    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, mlp: str, dropout: float = 0.0):
        super().__init__()
        self.attn = Attention(width, heads, kv_heads, head_dim, dropout)
        self.mlp = MLP(width, mlp)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(rms_norm(x), cos, sin))
        return x + self.drop(self.mlp(rms_norm(x)))

    def drop(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.dropout, self.training) if self.dropout else x


@dataclass
class GPTShape:
    depth: int
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    seq_len: int
    mlp: str = "relu2"
    softcap: float = 15.0

    @classmethod
    def from_depth(cls, depth: int, vocab: int, *, aspect: int, head_dim: int, kv_heads: int, seq_len: int, mlp: str,
                   softcap: float) -> GPTShape:
        """The one-knob shape: width ``aspect`` x ``depth``, heads of about ``head_dim`` (``kv_heads`` 0: as many
        key/value heads as query heads)."""
        width = depth * aspect
        heads = max(1, width // head_dim)
        kv = kv_heads or heads
        if heads % kv:
            raise ZooError(f"kv_heads={kv_heads}: must divide the {heads} query heads of depth {depth}")
        return cls(depth, width, heads, kv, width // heads, vocab, seq_len, mlp, softcap)


class GPT(nn.Module):
    """Pre-norm decoder: RMSNorm (no gains), RoPE, QK-norm, ReLU^2 MLP, untied head, soft-capped
    logits, zero-initialised output projections, and per-block scalars that mix the residual
    stream with the embedding (x = a_i x + b_i x0). ``dropout`` (training only) drops attention weights and each
    block's two branch outputs before they join the residual stream."""

    def __init__(self, shape: GPTShape, dropout: float = 0.0):
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads, shape.kv_heads, shape.head_dim, shape.mlp,
                                          dropout) for _ in range(shape.depth))
        self.lm_head = nn.Linear(shape.width, shape.vocab, bias=False)
        self.resid_scales = nn.Parameter(torch.ones(shape.depth))
        self.x0_scales = nn.Parameter(torch.zeros(shape.depth))
        cos, sin = rotary_tables(shape.seq_len, shape.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.embed.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=0.001)
        bound = 3 ** 0.5 * self.shape.width ** -0.5  # uniform with std width^-0.5
        for block in self.blocks:
            for linear in (block.attn.q, block.attn.k, block.attn.v, block.mlp.fc):
                nn.init.uniform_(linear.weight, -bound, bound)
            nn.init.zeros_(block.attn.proj.weight)  # each block starts as the identity
            nn.init.zeros_(block.mlp.proj.weight)
        self.resid_scales.fill_(1.0)
        self.x0_scales.fill_(0.0)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        if T > self.shape.seq_len:
            raise ValueError(f"sequence of {T} tokens is longer than the model's context {self.shape.seq_len}")
        cos, sin = self.cos[:, :, :T], self.sin[:, :, :T]
        x = x0 = rms_norm(self.embed(idx))
        for i, block in enumerate(self.blocks):
            x = block(self.resid_scales[i] * x + self.x0_scales[i] * x0, cos, sin)
        logits = self.lm_head(rms_norm(x)).float()
        if self.shape.softcap > 0:
            logits = self.shape.softcap * torch.tanh(logits / self.shape.softcap)
        return logits

    def scaling_params(self) -> int:
        """Parameters that cost FLOPs per token (all but the embedding lookup)."""
        return sum(p.numel() for p in self.parameters()) - self.embed.weight.numel()

    @torch.no_grad()
    def generate(self, prompt: list[int], n_tokens: int, temperature: float, generator: torch.Generator,
                 top_k: int = 0) -> list[int]:
        ids = torch.tensor([prompt], device=self.embed.weight.device)
        for _ in range(n_tokens):
            logits = self(ids[:, -self.shape.seq_len:])[0, -1]
            if temperature <= 0:
                nxt = logits.argmax()[None]
            else:
                if 0 < top_k < len(logits):  # only the k likeliest tokens may be drawn
                    logits = logits.masked_fill(logits < logits.topk(top_k).values[-1], float("-inf"))
                probs = torch.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs.cpu(), 1, generator=generator).to(ids.device)
            ids = torch.cat([ids, nxt[None]], dim=1)
        return ids[0, len(prompt):].tolist()


def param_estimate(shape: GPTShape) -> int:
    """Scaling parameters of a shape without building it (matrices + head + scalars)."""
    d, L = shape.width, shape.depth
    attn = d * shape.heads * shape.head_dim * 2 + d * shape.kv_heads * shape.head_dim * 2
    hidden = 4 * d if shape.mlp == "relu2" else 64 * math.ceil(8 * d / 3 / 64)
    mlp = d * hidden * (3 if shape.mlp == "swiglu" else 2)
    return L * (attn + mlp) + d * shape.vocab + 2 * L


def flops_per_token(shape: GPTShape) -> float:
    """Training FLOPs per token, what sizing predicts steps with and MFU counts: 6 x matmul parameters + attention
    scores (fwd + bwd) over the width (heads x head size wherever the heads divide the width)."""
    return 6 * param_estimate(shape) + 12 * shape.depth * shape.width * shape.seq_len
