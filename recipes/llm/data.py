"""Text data for the language models: the user's text and the named datasets with their validation
split, the byte-level BPE tokenizer with its byte-length table, token windows for training, bits per
byte over validation windows, and prompt/response JSONL for fine-tuning.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from recipe_zoo.core import metrics
from recipe_zoo.core.errors import ZooError

if TYPE_CHECKING:
    from recipe_zoo.recipes.llm.gpt import GPTConfig

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
    return metrics.bits_per_byte(nats, denominator)


# =============================================================================================
# Prompt/response JSONL: the loss and the score on the response only
# =============================================================================================

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
