"""Language models: GPT pretraining from scratch (``llm/gpt``) and LoRA fine-tuning (``llm/lora``).

Reads top to bottom: config, text data, tokenizer, bits per byte, the GPT, the optimizer table,
pretraining, then LoRA on a ``transformers`` model. The metric is validation bits per byte over a
fixed number of validation bytes, so runs with different tokenizers and vocabularies compare.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import distributed, optim, schedule
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.flops import peak_flops
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import recipe

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class GPTConfig(LoopSettings):
    # the LR fields of each optimizer group kind, for zoo doctor's range test and zoo sweep's batch rule
    LR_FIELDS: ClassVar[dict] = {"muon": ("matrix_lr",), "adamw": ("embedding_lr", "head_lr", "scalar_lr")}
    data: str = "tinyshakespeare"  # dataset name, a text file, a folder of .txt/.md files, or hf:NAME[:CONFIG]
    val_fraction: float = 0.1  # tail held out for validation when there is no val file
    eval_bytes: int = 100_000  # validation bytes scored (the first N of the split): fixed so runs compare
    tokenizer: str = "bpe"  # bpe (trained on the train split) | bytes (256 byte tokens) | a tokenizer.json
    vocab_size: int = 1024  # BPE vocabulary including the 256 bytes and <|bos|>
    depth: int = 0  # transformer blocks; width = aspect x depth, heads = width / head_dim; 0 = sized by the budget
    aspect: int = 64  # model width per block
    head_dim: int = 64  # attention head size
    kv_heads: int = 0  # key/value heads for grouped-query attention (0 = as many as query heads)
    mlp: Literal["relu2", "swiglu"] = "relu2"  # ReLU^2 MLP (4x wide) or SwiGLU (8/3 x wide)
    softcap: float = 15.0  # logits = softcap * tanh(logits / softcap) (0 = off)
    seq_len: int = 256  # context length in tokens
    batch_tokens: int = 4096  # tokens per optimizer step; gradient accumulation makes up the rest
    micro_batch: int = 16  # sequences per forward/backward pass
    matrix_lr: float = 0.04  # Muon LR of the hidden matrices (scaled by max(1, rows/cols)^0.5)
    embedding_lr: float = 0.6  # AdamW LR of the token embedding, x (width/768)^-0.5
    head_lr: float = 0.004  # AdamW LR of the output head, x (width/768)^-0.5
    scalar_lr: float = 0.005  # AdamW LR of the per-block scalars, x (width/768)^-0.5
    weight_decay: float = 0.2  # Muon weight decay (cautious), decaying linearly to 0; never on embeddings
    schedule: Literal["wsd", "cosine", "linear", "constant"] = "wsd"  # LR shape over budget progress
    warmup: float = 0.0  # warmup fraction (Muon needs none)
    warmdown: float = 0.5  # WSD: the final fraction of the budget decaying the LR
    lr_final: float = 0.0  # LR multiplier at the end of the budget
    tokens_per_param: float = 20.0  # depth=0 sizing: tokens per parameter when data is plentiful (Chinchilla)
    max_epochs: float = 4.0  # depth=0 sizing: passes over the data when it is not (repeats past ~4 stop paying)
    samples: int = 3  # text samples written at the end (samples.txt)
    sample_tokens: int = 160  # tokens per sample
    temperature: float = 0.8  # sampling temperature
    prompt: str = ""  # text the samples continue ('' = start of a document)
    eval_every: float = 0.25  # fraction of the budget between validations
    diverge_factor: float = 3.0  # a language model's loss never rises 3x above its first step's
    compile: bool = True  # torch.compile the model (1.2x tokens/s on 2 CPU cores; falls back to eager)
    fsdp: bool = False  # under torchrun: shard each block's weights, grads and optimizer state over the processes


@dataclass
class LoRAConfig(LoopSettings):
    model: str = ""  # a transformers causal LM: a local save_pretrained folder, or a hub name when online
    data: str = "tinyshakespeare"  # text (as llm/gpt) or a .jsonl of {"prompt", "response"} lines
    val_fraction: float = 0.1  # held-out tail of the text / of the JSONL examples
    eval_bytes: int = 100_000  # text: validation bytes scored (JSONL: every held-out response)
    rank: int = 8  # LoRA rank
    alpha: float = 16.0  # LoRA scaling numerator (scale = alpha / rank)
    lora_dropout: float = 0.05  # dropout on the LoRA input
    target_modules: str = "all-linear"  # comma-separated module names, or all-linear (every linear but the head)
    lr: float = 2e-4  # AdamW LR of the adapter
    weight_decay: float = 0.0  # AdamW weight decay on the adapter
    schedule: Literal["wsd", "cosine", "linear", "constant"] = "cosine"  # LR shape over budget progress
    warmup: float = 0.05  # warmup fraction
    lr_final: float = 0.1  # LR multiplier at the end
    seq_len: int = 256  # tokens per training window / longest JSONL example kept whole
    micro_batch: int = 8  # sequences per forward/backward pass
    clip_grad: float = 1.0  # max global grad norm
    merge: bool = False  # also save the base model with the adapter merged in (merged/)
    eval_every: float = 0.5  # fraction of the budget between validations


# =============================================================================================
# Text data: a train and a validation string, each a list of documents
# =============================================================================================

TEXT_SUFFIXES = (".txt", ".md")


@dataclass
class TextSplits:
    name: str
    train: list[str]  # documents; each starts with <|bos|> once tokenized
    val: list[str]


def read_text(path: Path) -> str:
    """A UTF-8 text file, or a one-line error naming the file and the offending byte."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ZooError(f"{path}: cannot read: {exc.strerror}") from None
    if not raw.strip():
        raise ZooError(f"{path}: empty file")

    def line(offset: int) -> int:
        return raw.count(b"\n", 0, offset) + 1

    nul = raw.find(b"\0")
    if nul >= 0:
        raise ZooError(f"{path}: looks binary (NUL byte at offset {nul}, line {line(nul)}); give a UTF-8 text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZooError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}) on line "
                       f"{line(exc.start)}") from None


def _text_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)


def split_tail(docs: list[str], fraction: float) -> tuple[list[str], list[str]]:
    """The last ``fraction`` of the characters, in reading order, is validation (a document may be cut)."""
    if not 0 < fraction < 1:
        raise ZooError(f"val_fraction={fraction}: must be between 0 and 1")
    total = sum(len(d) for d in docs)
    cut = int(total * (1 - fraction))
    train, val, seen = [], [], 0
    for d in docs:
        if seen + len(d) <= cut:
            train.append(d)
        elif seen >= cut:
            val.append(d)
        else:
            train.append(d[:cut - seen])
            val.append(d[cut - seen:])
        seen += len(d)
    return [d for d in train if d], [d for d in val if d]


def load_text(data: str, val_fraction: float, run) -> TextSplits:
    """A named dataset, a text file (``NAME.val.txt`` beside it is validation), a folder of text
    files (a ``val`` subfolder or ``val.txt`` inside is validation), or ``hf:NAME[:CONFIG]``."""
    log = run.log
    if data.startswith("hf:"):
        return _load_hf_text(data, val_fraction)
    if run.is_dataset(data):
        path = run.data_path(data)
        docs = [read_text(p) for p in _text_files(path)] if path.is_dir() else [read_text(path)]
        train, val = split_tail(docs, val_fraction)
        return TextSplits(data, train, val)
    path = Path(data).expanduser()
    if not path.exists():
        raise ZooError(f"{data}: no such file or folder, and not a dataset name (see `zoo data list`)")
    if path.is_file():
        val_file = path.with_name(path.stem + ".val" + path.suffix)
        if val_file.is_file():
            return TextSplits(str(path), [read_text(path)], [read_text(val_file)])
        train, val = split_tail([read_text(path)], val_fraction)
        return TextSplits(str(path), train, val)
    files = _text_files(path)
    val_files = [p for p in files if p.relative_to(path).parts[0] in ("val", "val.txt", "val.md")]
    train_files = [p for p in files if p not in val_files]
    if not train_files:
        raise ZooError(f"{path}: no .txt or .md files to train on")
    skipped = sum(1 for p in path.rglob("*") if p.is_file()) - len(files)
    if skipped:
        log(f"{path}: {skipped} files without a .txt/.md suffix were skipped")
    if val_files:
        return TextSplits(str(path), [read_text(p) for p in train_files], [read_text(p) for p in val_files])
    train, val = split_tail([read_text(p) for p in train_files], val_fraction)
    return TextSplits(str(path), train, val)


def _load_hf_text(data: str, val_fraction: float) -> TextSplits:
    try:
        import datasets
    except ImportError:
        raise ZooError(f"data={data}: needs the Hugging Face `datasets` package (pip install datasets)") from None
    name, _, subset = data[3:].partition(":")
    try:
        ds = datasets.load_dataset(name, subset or None)
    except Exception as exc:  # offline, unknown name, gated: one line either way
        raise ZooError(f"data={data}: cannot load from the Hugging Face hub: {str(exc).splitlines()[0]}") from None
    column = "text" if "text" in ds["train"].column_names else ds["train"].column_names[0]
    train = [t for t in ds["train"][column] if t and t.strip()]
    if "validation" in ds:
        return TextSplits(data, train, [t for t in ds["validation"][column] if t and t.strip()])
    train, val = split_tail(train, val_fraction)
    return TextSplits(data, train, val)


def eval_text(splits: TextSplits, eval_bytes: int) -> str:
    """The first ``eval_bytes`` bytes of the validation split (cut at a character boundary)."""
    val = "".join(splits.val)
    size = len(val.encode())
    if size < eval_bytes:
        raise ZooError(f"{splits.name}: the validation split has {size:,} bytes, fewer than eval_bytes={eval_bytes:,}; "
                       f"set eval_bytes={max(1, size)} (runs then compare only with that size) or give more text")
    return val.encode()[:eval_bytes].decode("utf-8", errors="ignore")


# =============================================================================================
# Tokenizer: byte-level BPE trained on the training split, with a byte-length table for BPB
# =============================================================================================

BOS = "<|bos|>"
# GPT-4's pre-tokenizer split: contractions, words with a leading non-letter, numbers of up to 3
# digits, punctuation runs, newlines, whitespace.
SPLIT_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
                 r"""|\s*[\r\n]|\s+(?!\S)|\s+""")


def train_bpe(docs: list[str], vocab_size: int, byte_only: bool = False):
    """A byte-level BPE ``tokenizers.Tokenizer``: every byte is a token, so any text encodes."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    size = len(alphabet) + 1 if byte_only else vocab_size
    if size < len(alphabet) + 1:
        raise ZooError(f"vocab_size={vocab_size}: must be at least {len(alphabet) + 1} (256 bytes + {BOS})")
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=[BOS], initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(docs if not byte_only else [""], trainer)
    return tok


def load_tokenizer(cfg: GPTConfig, train_docs: list[str]):
    if cfg.tokenizer in ("bpe", "bytes"):
        return train_bpe(train_docs, cfg.vocab_size, byte_only=cfg.tokenizer == "bytes")
    from tokenizers import Tokenizer

    path = Path(cfg.tokenizer).expanduser()
    if not path.is_file():
        raise ZooError(f"tokenizer={cfg.tokenizer}: not bpe, bytes or an existing tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ZooError(f"{path}: not a tokenizers JSON file ({str(exc).splitlines()[0]})") from None
    if tok.token_to_id(BOS) is None:
        raise ZooError(f"{path}: the tokenizer has no {BOS} token")
    return tok


def token_bytes(tok) -> torch.Tensor:
    """UTF-8 length of every token (0 for special tokens): the denominator of bits per byte."""
    byte_of = _byte_level_decoder()
    special = {t.content for t in tok.get_added_tokens_decoder().values()}
    lengths = torch.zeros(tok.get_vocab_size(), dtype=torch.int32)
    for piece, i in tok.get_vocab().items():
        if piece not in special:  # a byte-level piece spells one byte per character
            lengths[i] = len(piece) if all(c in byte_of for c in piece) else len(piece.encode())
    return lengths


@functools.cache
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-to-printable-character table, inverted (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def encode_docs(tok, docs: list[str]) -> torch.Tensor:
    """Documents packed into one stream without padding, each starting with <|bos|>."""
    bos = tok.token_to_id(BOS)
    ids: list[int] = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.append(bos)
        ids.extend(enc.ids)
    return torch.tensor(ids, dtype=torch.int32)


class TokenWindows:
    """(input, target) windows from one token stream. Each epoch shifts the window grid by a random
    offset and shuffles it, so every token is trained on once per epoch; state is (epoch, index)."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int, source: str = ""):
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.windows = (len(tokens) - 1 - seq_len) // seq_len  # a grid shifted by < seq_len still fits
        if self.windows < batch_size:
            raise ZooError(f"{source + ': ' if source else ''}the training split has {len(tokens):,} tokens: fewer "
                           f"than one batch of {batch_size} windows of {seq_len}; lower micro_batch or seq_len, or "
                           "give more text")
        self.epoch, self.index, self._grid = 0, 0, None
        self.rank, self.world = 0, 1
        self.offsets = torch.arange(seq_len + 1)

    def shard(self, rank: int, world: int) -> None:
        """Under N processes each step's N micro-batches are consecutive slices of the epoch's grid."""
        if self.windows < self.batch_size * world:
            raise ZooError(f"the training split has {self.windows:,} windows of {self.seq_len}: fewer than "
                           f"{world} processes x micro_batch {self.batch_size}")
        self.rank, self.world = rank, world

    @property
    def batches_per_epoch(self) -> int:
        return self.windows // (self.batch_size * self.world)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.index >= self.batches_per_epoch:
            self.epoch, self.index, self._grid = self.epoch + 1, 0, None
        if self._grid is None:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            shift = int(torch.randint(self.seq_len, (1,), generator=g))
            self._grid = shift + torch.randperm(self.windows, generator=g) * self.seq_len
        slot = self.index * self.world + self.rank
        starts = self._grid[slot * self.batch_size:(slot + 1) * self.batch_size]
        self.index += 1
        rows = self.tokens[starts[:, None] + self.offsets].long()
        return rows[:, :-1], rows[:, 1:]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self._grid = int(state["epoch"]), int(state["index"]), None


# =============================================================================================
# Bits per byte
# =============================================================================================

@torch.no_grad()
def bits_per_byte(logits_fn, tokens: torch.Tensor, seq_len: int, batch_size: int, device,
                  bytes_per_target: torch.Tensor | None = None, total_bytes: int | None = None) -> float:
    """Sum of next-token cross-entropy (nats) over every token of ``tokens`` after the first, in
    non-overlapping windows of ``seq_len``, divided by ln 2 x the bytes those tokens spell.

    ``bytes_per_target`` (one entry per predicted token) or ``total_bytes`` gives the denominator.
    """
    n = len(tokens) - 1
    full = list(range(0, n - seq_len + 1, seq_len))
    groups = [(full[i:i + batch_size], seq_len) for i in range(0, len(full), batch_size)]
    if len(full) * seq_len < n:  # the last, shorter window on its own
        groups.append(([len(full) * seq_len], n - len(full) * seq_len))
    nats = 0.0
    for starts, size in groups:
        rows = torch.stack([tokens[s:s + size + 1] for s in starts]).long().to(device)
        logits = logits_fn(rows[:, :-1]).float()
        nats += F.cross_entropy(logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1), reduction="sum").item()
    denominator = float(bytes_per_target.sum()) if bytes_per_target is not None else float(total_bytes)
    return nats / (math.log(2) * denominator)


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
    def generate(self, prompt: list[int], n_tokens: int, temperature: float, generator: torch.Generator) -> list[int]:
        ids = torch.tensor([prompt], device=self.embed.weight.device)
        for _ in range(n_tokens):
            logits = self(ids[:, -self.shape.seq_len:])[0, -1]
            if temperature <= 0:
                nxt = logits.argmax()[None]
            else:
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


ASSUMED_MFU = 0.5  # model-FLOPs utilisation measured for depths 2-4 on 2 CPU cores with compile: 50-61%


def size_for_budget(cfg: GPTConfig, vocab: int, train_tokens: int, budget, device: torch.device, log=print,
                    processes: int = 1) -> int:
    """The depth whose token count, at the compute the budget buys (on ``processes`` devices), is nearest the
    target: Chinchilla's tokens per parameter, or ``max_epochs`` passes over the training tokens when that
    is fewer.

    On tinyshakespeare (383K tokens) this picks depth 2 for 60 s, 3 for 163 s and 4 for 5 minutes on
    2 CPU cores, the best depths the sweep in the LLM issue's closing note found.
    """
    if budget.kind != "seconds":
        log("depth=0 with a step or epoch budget: depth 4")
        return 4
    peak = peak_flops(device) or 1e11
    compute = peak * ASSUMED_MFU * budget.amount * processes
    best, best_gap = 1, float("inf")
    for depth in range(1, 49):
        shape = GPTShape.from_depth(depth, cfg, vocab)
        n = param_estimate(shape)
        tokens = compute / (6 * n + 12 * depth * shape.width * cfg.seq_len)
        target = min(cfg.tokens_per_param * n, cfg.max_epochs * train_tokens)
        gap = abs(math.log(tokens / target))
        if gap < best_gap:
            best, best_gap = depth, gap
    log(f"depth=0: depth {best} for {budget} at ~{peak * ASSUMED_MFU * processes / 1e9:.0f} GFLOP/s "
        f"(nearest to {cfg.tokens_per_param:g} tokens/param or {cfg.max_epochs:g} epochs of {train_tokens:,} tokens)")
    return best


# =============================================================================================
# Optimizer: the Muon + AdamW table
# =============================================================================================

def build_optimizer(cfg: GPTConfig, model: GPT) -> optim.MuonAdamW:
    s = optim.width_lr_scale(model.shape.width)
    groups = optim.hybrid_groups(model, head=["lm_head"], matrix_lr=cfg.matrix_lr, embedding_lr=cfg.embedding_lr * s,
                                 head_lr=cfg.head_lr * s, scalar_lr=cfg.scalar_lr * s, matrix_wd=cfg.weight_decay)
    return optim.MuonAdamW(groups)


# =============================================================================================
# Pretraining
# =============================================================================================

def shape_of(cfg: GPTConfig) -> tuple[GPTShape, int]:
    """``zoo plan --recipe llm/gpt depth=N``: the shape a config describes and its parameter count."""
    shape = GPTShape.from_depth(cfg.depth, cfg, cfg.vocab_size)
    return shape, param_estimate(shape)


@recipe("llm/gpt", config=GPTConfig, benchmark="tinyshakespeare", metric="val_bpb", higher_is_better=False,
        budget="5m", summary="GPT pretraining: RoPE, QK-norm, ReLU^2, Muon+AdamW table, time-based WSD, sized by "
                             "the budget; validation bits per byte",
        scale_out="torchrun: DDP, or FSDP2 with fsdp=true (blocks sharded, gathered checkpoints)",
        hooks={"shape": shape_of})
def train_gpt(cfg: GPTConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device)
    splits = load_text(cfg.data, cfg.val_fraction, run)
    scored = eval_text(splits, cfg.eval_bytes)
    tok = load_tokenizer(cfg, splits.train)
    tok.save(str(run.dir / "tokenizer.json"))
    lengths = token_bytes(tok)
    train_tokens = encode_docs(tok, splits.train)
    val_tokens = encode_docs(tok, [scored])
    vocab = tok.get_vocab_size()
    per_target = lengths[val_tokens[1:].long()]
    if int(per_target.sum()) != len(scored.encode()):
        raise RuntimeError(f"byte table mismatch: {int(per_target.sum())} != {len(scored.encode())} bytes")
    run.log(f"{splits.name}: {sum(len(d) for d in splits.train):,} train chars -> {len(train_tokens):,} tokens "
            f"({len(''.join(splits.train).encode()) / len(train_tokens):.2f} bytes/token, vocab {vocab}); "
            f"validation scores {cfg.eval_bytes:,} bytes = {len(val_tokens) - 1:,} tokens")
    run.inspect(train=(train_tokens,), val=(val_tokens,), task="tokens")  # leakage: scored windows found in train

    world = distributed.world_size()
    # Sized once, by rank 0: a timing-dependent choice must not differ between ranks.
    depth = cfg.depth or distributed.broadcast_object(
        size_for_budget(cfg, vocab, len(train_tokens), run.budget, device, run.log, processes=world))
    shape = GPTShape.from_depth(depth, cfg, vocab)
    model = GPT(shape).to(device)
    run.log(f"GPT depth {depth}: width {shape.width}, {shape.heads} heads ({shape.kv_heads} kv) of {shape.head_dim}, "
            f"context {shape.seq_len}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params "
            f"({model.scaling_params() / 1e6:.2f}M excluding the embedding)")

    per_micro = cfg.micro_batch * cfg.seq_len * world  # batch_tokens is global: more processes, less accumulation
    accum = max(1, round(cfg.batch_tokens / per_micro))
    if accum * per_micro != cfg.batch_tokens:
        run.log(f"batch_tokens={cfg.batch_tokens} is not a multiple of micro_batch x seq_len x processes = "
                f"{per_micro}: using {accum * per_micro}")
    settings = LoopSettings.of(cfg)
    settings.accum_steps = accum
    batches = TokenWindows(train_tokens, cfg.seq_len, cfg.micro_batch, seed=run.seed, source=splits.name)
    if cfg.fsdp and world > 1:  # before the optimizer: it must hold the sharded parameters
        distributed.fully_shard_blocks(model)
        run.log(f"FSDP2: {len(model.blocks)} blocks and the root sharded over {world} processes")
    elif cfg.fsdp:
        run.log("fsdp=true in a single process: nothing to shard (launch with --nproc N)")
    optimizer = build_optimizer(cfg, model)
    lr = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, decay=cfg.warmdown, final=cfg.lr_final)
    update = functools.partial(schedule.apply_schedules, lr=lr, weight_decay=schedule.weight_decay_linear,
                               momentum=schedule.muon_momentum)
    precision = resolve_precision(device, cfg.precision)

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        x, y = (t.to(device, non_blocking=True) for t in batch)
        logits = model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))

    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"val_bpb": bits_per_byte(model, val_tokens, cfg.seq_len, cfg.micro_batch, device,
                                         bytes_per_target=per_target)}

    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=update, settings=settings)
    export_safetensors(model, run.dir / "model.safetensors", metadata={"recipe": run.spec.name,
                                                                       "shape": json.dumps(dataclasses.asdict(shape))})
    with autocast(device, precision):
        write_samples(model, tok, cfg, run)
    tokens = result.samples * cfg.seq_len
    tokens_per_s = tokens / max(result.train_seconds, 1e-9)
    peak = peak_flops(device)
    mfu = 100 * model.flops_per_token() * tokens_per_s / (peak * world) if peak else float("nan")
    stats = {**result.stats(), **result.metrics, "tokens": tokens, "tokens_per_s": tokens_per_s,
             "tokens_per_param": tokens / model.scaling_params(), "chinchilla_tokens_per_param": 20.0,
             "mfu_percent": mfu, "counted_mfu_percent": result.mfu_percent, "depth": depth,
             "vocab_size": vocab}
    run.report("tokens_per_s", f"{tokens_per_s:,.0f}")
    run.report("tokens_seen", f"{tokens:,} ({tokens / len(train_tokens):.1f} epochs)")
    run.report("tokens_per_param", f"{stats['tokens_per_param']:.2f} (Chinchilla: 20)")
    run.log(f"{tokens:,} tokens at {tokens_per_s:,.0f} tokens/s; {stats['tokens_per_param']:.2f} tokens/param "
            f"(Chinchilla: 20); MFU {mfu:.1f}% of {peak / 1e9 if peak else float('nan'):.0f} GFLOP/s "
            f"(model FLOPs; {result.mfu_percent:.1f}% counting the optimizer)")
    return stats


def write_samples(model: GPT, tok, cfg: GPTConfig, run) -> None:
    if cfg.samples <= 0:
        return
    model.eval()
    prompt = [tok.token_to_id(BOS)] + tok.encode(cfg.prompt, add_special_tokens=False).ids
    g = torch.Generator().manual_seed(run.seed)
    texts = [cfg.prompt + tok.decode(model.generate(prompt, cfg.sample_tokens, cfg.temperature, g))
             for _ in range(cfg.samples)]
    (run.dir / "samples.txt").write_text("\n\n----------\n\n".join(texts) + "\n")
    for i, text in enumerate(texts):
        run.log(f"sample {i + 1}:\n{text}")


# =============================================================================================
# LoRA fine-tuning of a transformers causal LM
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


@dataclass
class Example:
    ids: list[int]
    labels: list[int]  # -100 on the prompt: the loss is on the response only
    response_bytes: int


def load_jsonl(path: Path, tokenizer, seq_len: int, log=print) -> list[Example]:
    """``{"prompt", "response"}`` lines; examples longer than ``seq_len`` + 1 tokens are dropped, counted."""
    examples, too_long = [], 0
    lines = read_text(path).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ZooError(f"{path} line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise ZooError(f"{path} line {number}: expected an object with 'prompt' and 'response', "
                           f"got {type(item).__name__}")
        for key in ("prompt", "response"):
            if key not in item:
                near = [k for k in item if isinstance(k, str) and k.lower().strip() == key]
                raise ZooError(f"{path} line {number}: missing string field {key!r}"
                               + (f" (found {near[0]!r})" if near else f" (fields: {', '.join(map(str, item))})"))
            if not isinstance(item[key], str):
                raise ZooError(f"{path} line {number}: field {key!r} must be a string, got "
                               f"{type(item[key]).__name__}")
        prompt = tokenizer(item["prompt"], add_special_tokens=True).input_ids
        response = tokenizer(item["response"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        if len(prompt) + len(response) > seq_len + 1:
            too_long += 1
            continue
        examples.append(Example(prompt + response, [-100] * len(prompt) + response, len(item["response"].encode())))
    if too_long:
        log(f"{path}: {too_long} of {len(examples) + too_long} examples are longer than seq_len={seq_len} + 1 "
            "tokens and were dropped (raise seq_len to keep them)")
    if not examples:
        raise ZooError(f"{path}: no usable {{'prompt', 'response'}} examples"
                       + (f" ({too_long} longer than seq_len={seq_len} + 1 tokens)" if too_long else ""))
    return examples


def pad_examples(examples: list[Example], pad_id: int) -> tuple[torch.Tensor, ...]:
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, e in enumerate(examples):
        ids[row, :len(e.ids)] = torch.tensor(e.ids)
        labels[row, :len(e.labels)] = torch.tensor(e.labels)
        mask[row, :len(e.ids)] = 1
    return ids, labels, mask


def response_nats(model, batch, device, skip_token: int | None = None) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the labelled tokens (optionally not ``skip_token``)."""
    ids, labels, mask = (t.to(device) for t in batch)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    targets = labels[:, 1:]
    if skip_token is not None:
        targets = targets.masked_fill(targets == skip_token, -100)
    nats = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100,
                           reduction="sum")
    return nats, int((targets != -100).sum())


def lora_config(cfg: LoRAConfig):
    from peft import LoraConfig

    targets = cfg.target_modules if cfg.target_modules == "all-linear" else \
        [m.strip() for m in cfg.target_modules.split(",") if m.strip()]
    return LoraConfig(task_type="CAUSAL_LM", r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets)


@recipe("llm/lora", config=LoRAConfig, benchmark="tinyshakespeare", metric="val_bpb", higher_is_better=False,
        budget="5m", summary="LoRA fine-tuning of a transformers causal LM (local folder or hub) on text or "
                             "prompt/response JSONL; bits per byte before and after")
def train_lora(cfg: LoRAConfig, run) -> dict[str, float]:
    from peft import get_peft_model

    device = choose_device(run.device)
    speed_switches(device)
    precision = resolve_precision(device, cfg.precision)
    with warnings.catch_warnings(record=True) as caught:  # library notices go to the log, not stderr
        warnings.simplefilter("always")
        model, tokenizer, start = load_causal_lm(cfg, torch.bfloat16 if precision == "bf16" else torch.float32,
                                                 run.log)
        try:
            model = get_peft_model(model, lora_config(cfg))
        except ValueError as exc:
            raise ZooError(f"target_modules={cfg.target_modules}: {str(exc).splitlines()[0]}") from None
    for w in {str(w.message) for w in caught}:
        run.log(f"warning: {w}")
    model.to(device)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    run.log(f"LoRA rank {cfg.rank} alpha {cfg.alpha:g} on {cfg.target_modules}: {trainable / 1e6:.3f}M trainable "
            f"parameters ({100 * trainable / sum(p.numel() for p in model.parameters()):.2f}%)")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start

    if cfg.data.endswith(".jsonl"):
        examples = load_jsonl(Path(cfg.data).expanduser(), tokenizer, cfg.seq_len, run.log)
        n_val = max(1, round(len(examples) * cfg.val_fraction))
        if len(examples) - n_val < 1:
            raise ZooError(f"{cfg.data}: {len(examples)} examples leave none to train on after holding out {n_val}")
        train_examples, val_examples = examples[:-n_val], examples[-n_val:]
        batches = TensorBatches((torch.arange(len(train_examples)),), cfg.micro_batch, seed=run.seed,
                                transform=lambda batch, g: pad_examples([train_examples[i] for i in batch[0]],
                                                                        pad_id))
        val_bytes = sum(e.response_bytes for e in val_examples)
        run.log(f"{cfg.data}: {len(train_examples)} train / {len(val_examples)} validation examples "
                f"({val_bytes:,} response bytes scored)")
        # one row per example (prompt + response token ids): exact duplicates across the splits are found
        run.inspect(train=([e.ids for e in train_examples],), val=([e.ids for e in val_examples],),
                    task="unlabelled", fine_tune=("lora_",))

        def loss_fn(model, batch):
            nats, count = response_nats(model, batch, device)
            return nats / max(count, 1)

        def evaluate(model):
            nats = sum(response_nats(model, pad_examples(val_examples[i:i + cfg.micro_batch], pad_id), device,
                                     skip_token=tokenizer.eos_token_id)[0].item()
                       for i in range(0, len(val_examples), cfg.micro_batch))
            return {"val_bpb": nats / (math.log(2) * val_bytes)}
    else:
        splits = load_text(cfg.data, cfg.val_fraction, run)
        scored = eval_text(splits, cfg.eval_bytes)
        ids = [[start] + tokenizer(d, add_special_tokens=False).input_ids for d in splits.train]
        train_tokens = torch.tensor([t for doc in ids for t in doc], dtype=torch.int32)
        val_tokens = torch.tensor([start] + tokenizer(scored, add_special_tokens=False).input_ids)
        batches = TokenWindows(train_tokens, cfg.seq_len, cfg.micro_batch, seed=run.seed, source=splits.name)
        run.log(f"{splits.name}: {len(train_tokens):,} train tokens; validation scores {cfg.eval_bytes:,} bytes = "
                f"{len(val_tokens) - 1:,} tokens")
        run.inspect(train=(train_tokens,), val=(val_tokens,), task="tokens", fine_tune=("lora_",))

        def loss_fn(model, batch):
            x, y = (t.to(device) for t in batch)
            logits = model(input_ids=x).logits.float()
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

        def evaluate(model):
            return {"val_bpb": bits_per_byte(lambda x: model(input_ids=x).logits, val_tokens, cfg.seq_len,
                                             cfg.micro_batch, device, total_bytes=len(scored.encode()))}

    model.eval()
    with torch.no_grad(), autocast(device, precision):
        before = evaluate(model)["val_bpb"]
    model.train()
    run.log(f"val_bpb before fine-tuning: {before:.4f}")
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": cfg.weight_decay}]
    optimizer = optim.adamw(groups, lr=cfg.lr)
    lr = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, final=cfg.lr_final)
    settings = LoopSettings.of(cfg)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr), settings=settings)
    model.save_pretrained(str(run.dir / "adapter"))
    tokenizer.save_pretrained(str(run.dir / "adapter"))
    if cfg.merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(str(run.dir / "merged"))
        tokenizer.save_pretrained(str(run.dir / "merged"))
    after = result.metrics["val_bpb"]
    run.report("val_bpb_before", f"{before:.4f}")
    run.report("trainable_M", f"{trainable / 1e6:.3f}")
    run.log(f"val_bpb {before:.4f} -> {after:.4f} ({after - before:+.4f}); adapter saved to {run.dir / 'adapter'}")
    return {**result.stats(), **result.metrics, "val_bpb_before": before, "trainable_M": trainable / 1e6}
