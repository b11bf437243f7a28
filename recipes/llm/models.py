"""The networks: a GPT built from a shape (RMSNorm, RoPE, QK-norm, ReLU^2 or SwiGLU MLP, soft-capped
logits, per-block residual scalars) and its parameter count without building it, and a ``transformers``
causal LM loaded from a local folder or the hub for LoRA.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core.errors import ZooError

if TYPE_CHECKING:
    from recipe_zoo.recipes.llm.gpt import GPTConfig
    from recipe_zoo.recipes.llm.lora import LoRAConfig

# =============================================================================================
# The GPT
# =============================================================================================

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
    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
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
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
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
    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, mlp: str):
        super().__init__()
        self.attn = Attention(width, heads, kv_heads, head_dim)
        self.mlp = MLP(width, mlp)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(rms_norm(x), cos, sin)
        return x + self.mlp(rms_norm(x))


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
    def from_depth(cls, depth: int, cfg: GPTConfig, vocab: int) -> GPTShape:
        width = depth * cfg.aspect
        heads = max(1, width // cfg.head_dim)
        kv = cfg.kv_heads or heads
        if heads % kv:
            raise ZooError(f"kv_heads={cfg.kv_heads}: must divide the {heads} query heads of depth {depth}")
        return cls(depth, width, heads, kv, width // heads, vocab, cfg.seq_len, cfg.mlp, cfg.softcap)


class GPT(nn.Module):
    """Pre-norm decoder: RMSNorm (no gains), RoPE, QK-norm, ReLU^2 MLP, untied head, soft-capped
    logits, zero-initialised output projections, and per-block scalars that mix the residual
    stream with the embedding (x = a_i x + b_i x0)."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads, shape.kv_heads, shape.head_dim, shape.mlp)
                                    for _ in range(shape.depth))
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

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 x matmul parameters + attention scores (fwd + bwd)."""
        s = self.shape
        return 6 * self.scaling_params() + 12 * s.depth * s.heads * s.head_dim * s.seq_len

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


# =============================================================================================
# A transformers causal LM, for LoRA
# =============================================================================================

def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def load_causal_lm(cfg: LoRAConfig, dtype: torch.dtype, log=print):
    """Model and tokenizer from a local ``save_pretrained`` folder, or the hub when online.
    A broken local folder names its file: config.json, the tokenizer files, or the weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # stderr is kept for one-line errors
    try:  # the hub client's own retry notices (offline) would also land on stderr
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()
    except ImportError:
        pass
    if not cfg.model:
        raise ZooError("llm/lora needs model=PATH: a transformers causal LM folder (or a hub name when online)")
    local = Path(cfg.model).expanduser()
    if not local.exists() and (local.is_absolute() or cfg.model.startswith((".", "~")) or cfg.model.count("/") > 1):
        raise ZooError(f"{cfg.model}: no such model folder (give a transformers save_pretrained folder)")
    if local.exists() and not (local / "config.json").is_file():
        raise ZooError(f"{local}: not a transformers model folder (no config.json)")
    source = str(local) if local.exists() else cfg.model
    where = "the folder" if local.exists() else "the hub (offline, or no such model)"
    # a local folder's broken file is named; from the hub, the model name is
    name = (lambda file: str(local / file)) if local.exists() else (lambda file: f"model={cfg.model}")
    from safetensors import SafetensorError

    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError) as exc:  # unreadable JSON, an unknown model_type
        raise ZooError(f"{name('config.json')}: cannot load the model config from {where}: "
                       f"{_first_line(exc)}") from None
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and cfg.seq_len > limit:
        raise ZooError(f"seq_len={cfg.seq_len} is over the model's context limit of {limit} tokens "
                       f"(max_position_embeddings in {cfg.model}/config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:  # tokenizers' own errors are ValueErrors
        where_tok = next((f for f in ("tokenizer.json", "tokenizer_config.json") if (local / f).is_file()),
                         "tokenizer files")
        raise ZooError(f"{name(where_tok)}: cannot load the tokenizer from {where}: {_first_line(exc)}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError, RuntimeError, SafetensorError, EOFError) as exc:
        weights = next((f for f in WEIGHT_FILES if (local / f).is_file()), "") if local.exists() else ""
        why = _first_line(exc)
        if isinstance(exc, RuntimeError) and "mismatched" in why:  # transformers' report of each shape went to its log
            why = "the weights do not fit the shapes in config.json (another size of the model?)"
        raise ZooError(f"{name(weights)}: cannot load the model weights from {where}: {why}") from None
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ZooError(f"model={cfg.model}: its tokenizer has neither a BOS nor an EOS token to start documents")
    log(f"{cfg.model}: {model.config.model_type}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params")
    return model, tokenizer, start


def load_trained_lora(cfg: LoRAConfig, run_dir: Path, dtype: torch.dtype, log=print):
    """A finished ``llm/lora`` run's model as it was scored: the base (``cfg.model``) with the saved adapter; when
    the base is no longer there, the run's merged copy (``merge=true``) instead. (model, tokenizer, start)."""
    import dataclasses

    from peft import PeftModel

    adapter = run_dir / "adapter"
    try:
        model, tokenizer, start = load_causal_lm(cfg, dtype, log)
    except ZooError as exc:
        merged = run_dir / "merged"
        if not (merged / "config.json").is_file():
            raise ZooError(f"{exc} (the base model of the adapter in {adapter}; a run with merge=true also keeps a "
                           "merged copy)") from None
        log(f"the base model is not there ({exc}): using the run's merged copy, {merged}")
        model, tokenizer, start = load_causal_lm(dataclasses.replace(cfg, model=str(merged)), dtype, log)
        return model.eval(), tokenizer, start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's notices on the base model's config
        model = PeftModel.from_pretrained(model, str(adapter))
    return model.eval(), tokenizer, start


@torch.no_grad()
def sample_hf(model, prompt: list[int], n_tokens: int, temperature: float, top_k: int, seed: int, n: int,
              pad_id: int) -> list[list[int]]:
    """``n`` continuations of ``prompt`` by ``transformers``' ``generate`` (greedy at temperature 0), the RNG seeded
    with ``seed`` (the caller's RNG state is kept)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    sampling = dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=1.0) if temperature > 0 else \
        dict(do_sample=False)
    out = []
    with torch.random.fork_rng(devices=[device] if device.type != "cpu" else [], device_type=device.type):
        torch.manual_seed(seed)
        for _ in range(n):
            seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_tokens,
                                 pad_token_id=pad_id, **sampling)
            out.append(seq[0, len(prompt):].tolist())
    return out


def export_pretrained(cfg: LoRAConfig, run, out: Path) -> list[Path]:
    """``zoo export --format pretrained`` of an ``llm/lora`` run: ``save_pretrained`` folders, each with the
    tokenizer: ``adapter/`` (peft's ``PeftModel.from_pretrained(base, out/adapter)``) and ``merged/``
    (``AutoModelForCausalLM.from_pretrained``; merged now when the run kept none)."""
    import shutil

    shutil.copytree(run.path("adapter"), out / "adapter", dirs_exist_ok=True)
    if (run.dir / "merged" / "config.json").is_file():
        shutil.copytree(run.dir / "merged", out / "merged", dirs_exist_ok=True)
    else:
        model, tokenizer, _ = load_trained_lora(cfg, run.dir, getattr(torch, run.card["dtype"]), run.log)
        model.merge_and_unload().save_pretrained(str(out / "merged"))
        tokenizer.save_pretrained(str(out / "merged"))
    return [out / "adapter", out / "merged"]
