"""Text data for the language models: the user's text and the named datasets cut into train, validation and
test, the byte-level BPE tokenizer with its byte-length table, token windows for training, bits per byte over
scored windows (with each window's sums, for the bootstrap interval), and prompt/response JSONL for fine-tuning,
split by a hash of each example's content.
"""
from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from recipe_zoo.core import metrics, splits as core_splits
from recipe_zoo.core.batches import to_device
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm.textfiles import read_text, sources

if TYPE_CHECKING:
    from recipe_zoo.recipes.llm.gpt import GPTConfig

# =============================================================================================
# Text data: train, validation and test, each a list of documents
# =============================================================================================

@dataclass
class Piece:
    """A document, or the part of one a split cut off: its source (a file relative to the data root, a dataset
    row), its text and where that text starts in the document (characters)."""
    source: str
    text: str
    start: int = 0
    whole: bool = True

    def cut(self, a: int, b: int) -> Piece:
        return self if (a, b) == (0, len(self.text)) else Piece(self.source, self.text[a:b], self.start + a, False)

    @property
    def key(self) -> str:
        """The item's name in ``split.csv``: the source, with the characters it holds where a split cut it."""
        return self.source if self.whole else f"{self.source}[{self.start}:{self.start + len(self.text)}]"


@dataclass
class TextSplits:
    name: str
    train: list[str]  # documents; each starts with <|bos|> once tokenized
    val: list[str]
    test: list[str]
    how: str = ""  # how the parts were made, one line (the leaderboard's split text)
    keys: dict[str, list[str]] = field(default_factory=dict)  # train / validation / test: the items (split.csv)

    @classmethod
    def of(cls, name: str, train: list[Piece], val: list[Piece], test: list[Piece], how: str) -> TextSplits:
        return cls(name, [p.text for p in train], [p.text for p in val], [p.text for p in test], how,
                   {"train": [p.key for p in train], "validation": [p.key for p in val],
                    "test": [p.key for p in test]})

    def sizes(self) -> str:
        return sizes_line({"train": sum(map(len, self.train)), "validation": sum(map(len, self.val)),
                           "test": sum(map(len, self.test))})


def sizes_line(characters: dict[str, int]) -> str:
    return " / ".join(f"{part} {n:,}" for part, n in characters.items()) + " characters"


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ZooError(f"{name}={value}: must be between 0 and 1")
    if val_fraction + test_fraction >= 1:
        raise ZooError(f"val_fraction={val_fraction} + test_fraction={test_fraction}: leave some data to train on")


def split_tail(docs: list[Piece], val_fraction: float, test_fraction: float = 0.0) \
        -> tuple[list[Piece], list[Piece], list[Piece]]:
    """In reading order: the last ``test_fraction`` of the characters is test, the ``val_fraction`` before it
    validation, the rest train. Where a cut falls inside a document, the document is split at that character
    and each side is a document of its own (it starts with <|bos|> once tokenized; its key in ``split.csv`` is
    ``source[start:end]``): no character is on two sides, none is dropped."""
    parts: tuple[list[Piece], ...] = ([], [], [])
    for p, bounds in zip(docs, tail_bounds([len(p.text) for p in docs], val_fraction, test_fraction)):
        for part, a, b in zip(parts, bounds, bounds[1:]):
            if b > a:
                part.append(p.cut(a, b))
    return parts


def tail_bounds(lengths: list[int], val_fraction: float, test_fraction: float) -> list[tuple[int, int, int, int]]:
    """``split_tail``'s cuts from the documents' lengths alone (characters): each document's (0, validation start,
    test start, end); its train part is [0, validation start)."""
    total = sum(lengths)
    test_at = int(total * (1 - test_fraction) + 1e-6)  # + 1e-6: a whole product never floors one short
    cuts = (max(0, test_at - round(total * val_fraction)), test_at)
    bounds, seen = [], 0
    for n in lengths:
        bounds.append((0, *(min(max(c - seen, 0), n) for c in cuts), n))
        seen += n
    return bounds


def load_text(data: str, val_fraction: float, test_fraction: float, run) -> TextSplits:
    """Train, validation and test text. One text (a named dataset, a file, a folder of text files, read in
    sorted order): its last ``test_fraction`` is test and the ``val_fraction`` before it validation. Where the
    data holds its own held-out part (``NAME.val.txt`` beside the file, a ``val`` subfolder or ``val.txt``
    inside the folder, the ``validation`` split of ``hf:NAME[:CONFIG]``), that part is test and validation
    is the last ``val_fraction`` of the training text."""
    check_fractions(val_fraction, test_fraction)
    if data.startswith("hf:"):
        return _load_hf_text(data, val_fraction, test_fraction)
    found = sources(data, run)
    docs = [Piece(key, read_text(path)) for key, path in found.docs]
    if found.held:
        return _held_out_split(found.name, docs, [Piece(key, read_text(path)) for key, path in found.held],
                               val_fraction, found.held_how)
    return _tail_split(found.name, docs, val_fraction, test_fraction)


def _tail_split(name: str, docs: list[Piece], val_fraction: float, test_fraction: float) -> TextSplits:
    train, val, test = split_tail(docs, val_fraction, test_fraction)
    return TextSplits.of(name, train, val, test, split_how(val_fraction, test_fraction))


def _held_out_split(name: str, docs: list[Piece], held: list[Piece], val_fraction: float, test: str) -> TextSplits:
    train, val, _ = split_tail(docs, val_fraction)
    return TextSplits.of(name, train, val, held, split_how(val_fraction, 0.0, test))


def split_how(val_fraction: float, test_fraction: float, held: str = "") -> str:
    """The split in one line (the leaderboard's split text); ``held``: what the data's own held-out part is."""
    if held:
        return (f"{held}; validation: the last {100 * val_fraction:g}% of the training text's characters, in reading "
                "order")
    return (f"characters in reading order: first {100 * (1 - val_fraction - test_fraction):g}% train, next "
            f"{100 * val_fraction:g}% validation, last {100 * test_fraction:g}% test")


def _load_hf_text(data: str, val_fraction: float, test_fraction: float) -> TextSplits:
    try:
        import datasets
    except ImportError:
        raise ZooError(f"data={data}: needs the Hugging Face datasets package: pip install 'recipe-zoo[hf]'") from None
    name, _, subset = data[3:].partition(":")
    try:
        ds = datasets.load_dataset(name, subset or None)
    except Exception as exc:  # offline, unknown name, gated: one line either way
        raise ZooError(f"data={data}: cannot load from the Hugging Face hub: {str(exc).splitlines()[0]}") from None
    column = "text" if "text" in ds["train"].column_names else ds["train"].column_names[0]

    def rows(split: str) -> list[Piece]:
        return [Piece(f"{split}/{i}", t) for i, t in enumerate(ds[split][column]) if t and t.strip()]

    if "validation" in ds:
        return _held_out_split(data, rows("train"), rows("validation"), val_fraction,
                               "test: the dataset's validation split")
    return _tail_split(data, rows("train"), val_fraction, test_fraction)


def eval_text(splits: TextSplits, eval_bytes: int, part: str = "test") -> str:
    """The text a part is scored on: the first ``eval_bytes`` bytes of test (fewer is an error: runs compare
    only on the same bytes), or of validation (up to ``eval_bytes``: a short validation part is scored whole);
    cut at a character boundary."""
    text = "".join(splits.test if part == "test" else splits.val).encode()
    return scored_prefix(splits.name, text, len(text), eval_bytes, part)


def scored_prefix(name: str, head: bytes, size: int, eval_bytes: int, part: str) -> str:
    """``eval_text`` of a part of ``size`` bytes that starts with ``head`` (its first ``eval_bytes`` at least)."""
    if part == "test" and size < eval_bytes:
        raise ZooError(f"{name}: the test split has {size:,} bytes, fewer than eval_bytes={eval_bytes:,}; "
                       f"set eval_bytes={max(1, size)} (runs then compare only with that size) or give more text")
    if not size:
        raise ZooError(f"{name}: the {part} split is empty; give more text")
    return head[:eval_bytes].decode("utf-8", errors="ignore")


# =============================================================================================
# Tokenizer: byte-level BPE trained on the training split, with a byte-length table for BPB
# =============================================================================================

BOS = "<|bos|>"
# GPT-4's pre-tokenizer split: contractions, words with a leading non-letter, numbers of up to 3
# digits, punctuation runs, newlines, whitespace.
SPLIT_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
                 r"""|\s*[\r\n]|\s+(?!\S)|\s+""")


def train_bpe(docs: Iterable[str], vocab_size: int, byte_only: bool = False):
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


def load_tokenizer(cfg: GPTConfig, train_docs: Iterable[str]):
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
    offset and shuffles it, so every token is trained on once per epoch; state is (epoch, index).

    Under N processes ``index`` counts micro-batch slots and rank r takes slot ``index + r``, as one process
    accumulating N micro-batches does, across an epoch's end too (as ``core.batches.TensorBatches``)."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int, source: str = "",
                 device: torch.device | str = "cpu"):
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.device = torch.device(device)  # where the batches go (one pinned copy of the rows a step)
        self.windows = (len(tokens) - 1 - seq_len) // seq_len  # a grid shifted by < seq_len still fits
        if self.windows < batch_size:
            raise ZooError(f"{source + ': ' if source else ''}the training split has {len(tokens):,} tokens: fewer "
                           f"than one batch of {batch_size} windows of {seq_len}; lower micro_batch or seq_len, or "
                           "give more text")
        self.epoch, self.index = 0, 0
        self._grid: tuple[int, torch.Tensor] | None = None  # (epoch, its grid), the last one drawn
        self.rank, self.world = 0, 1
        self.offsets = torch.arange(seq_len + 1)

    def shard(self, rank: int, world: int) -> None:
        """Under N processes each step's N micro-batches are consecutive slices of the epoch's grid."""
        if self.windows < self.batch_size * world:
            raise ZooError(f"the training split has {self.windows:,} windows of {self.seq_len}: fewer than "
                           f"{world} processes x micro_batch {self.batch_size}")
        self.rank, self.world = rank, world

    @property
    def slots_per_epoch(self) -> int:  # micro-batches in one pass over the grid, all processes together
        return self.windows // self.batch_size

    @property
    def batches_per_epoch(self) -> int:
        return self.slots_per_epoch // self.world

    def _epoch_grid(self, epoch: int) -> torch.Tensor:
        if self._grid is None or self._grid[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            shift = int(torch.randint(self.seq_len, (1,), generator=g))
            self._grid = (epoch, shift + torch.randperm(self.windows, generator=g) * self.seq_len)
        return self._grid[1]

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        per_epoch = self.slots_per_epoch
        if self.index >= per_epoch:
            self.epoch, self.index = self.epoch + 1, self.index - per_epoch
        # this rank's micro-batch may open the next epoch (the step straddles the boundary)
        ahead, slot = divmod(self.index + self.rank, per_epoch)
        starts = self._epoch_grid(self.epoch + ahead)[slot * self.batch_size:(slot + 1) * self.batch_size]
        self.index += self.world
        rows = to_device(self.tokens[starts[:, None] + self.offsets].long(), self.device)
        return rows[:, :-1], rows[:, 1:]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index, self._grid = int(state["epoch"]), int(state["index"]), None


# =============================================================================================
# Bits per byte
# =============================================================================================

@torch.no_grad()
def window_sums(logits_fn, tokens: torch.Tensor, seq_len: int, batch_size: int, device,
                bytes_per_target: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Each scoring window's summed next-token cross-entropy (nats) and the bytes its targets spell: every
    token of ``tokens`` after the first is predicted once, in non-overlapping windows of ``seq_len`` (the
    last one shorter). ``bytes_per_target`` has one entry per predicted token."""
    n = len(tokens) - 1
    full = list(range(0, n - seq_len + 1, seq_len))
    groups = [(full[i:i + batch_size], seq_len) for i in range(0, len(full), batch_size)]
    if len(full) * seq_len < n:  # the last, shorter window on its own
        groups.append(([len(full) * seq_len], n - len(full) * seq_len))
    nats, n_bytes = [], []
    for starts, size in groups:
        rows = torch.stack([tokens[s:s + size + 1] for s in starts]).long().to(device)
        logits = logits_fn(rows[:, :-1]).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1), reduction="none")
        nats.extend(loss.view(len(starts), size).double().sum(1).tolist())
        n_bytes.extend(float(bytes_per_target[s:s + size].double().sum()) for s in starts)
    return np.array(nats), np.array(n_bytes)


def bits_per_byte(logits_fn, tokens: torch.Tensor, seq_len: int, batch_size: int, device,
                  bytes_per_target: torch.Tensor) -> float:
    """Sum of next-token cross-entropy (nats) over every token of ``tokens`` after the first, in
    non-overlapping windows of ``seq_len``, divided by ln 2 x the bytes those tokens spell."""
    nats, n_bytes = window_sums(logits_fn, tokens, seq_len, batch_size, device, bytes_per_target)
    return metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum()))


def bpb_interval(nats: np.ndarray, n_bytes: np.ndarray, rounds: int = 1000) -> tuple[float, float]:
    """95% bootstrap interval of bits per byte over the scored items (windows, or examples) resampled with
    replacement: sum of their nats / (ln 2 x sum of their bytes)."""
    nats, n_bytes = np.asarray(nats, dtype=np.float64), np.asarray(n_bytes, dtype=np.float64)
    return metrics.bootstrap(lambda idx: nats[idx].sum() / (math.log(2) * n_bytes[idx].sum()), len(nats),
                             rounds=rounds)


# =============================================================================================
# Prompt/response JSONL: the loss and the score on the response only
# =============================================================================================

@dataclass
class Example:
    ids: list[int]
    labels: list[int]  # -100 on the prompt: the loss is on the response only
    response_bytes: int
    line: int = 0  # its line in the file
    key: bytes = b""  # its content (prompt and response): copies of an example share a side of the split


def load_jsonl(path: Path, tokenizer) -> list[Example]:
    """Every ``{"prompt", "response"}`` line, tokenized, whatever its length (``split_examples`` decides)."""
    examples = []
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
        examples.append(Example(prompt + response, [-100] * len(prompt) + response, len(item["response"].encode()),
                                number, json.dumps([item["prompt"], item["response"]]).encode()))
    if not examples:
        raise ZooError(f"{path}: no {{'prompt', 'response'}} examples")
    return examples


@dataclass
class ExampleSplits:
    train: list[Example]
    val: list[Example]
    test: list[Example]
    keys: dict[str, list[str]]  # train / validation / test: the examples' lines (split.csv)
    how: str


def split_examples(examples: list[Example], val_fraction: float, test_fraction: float, seq_len: int, source,
                   log=print) -> ExampleSplits:
    """Test and validation chosen by a hash of each example's content (``core.splits.carve``: the same examples
    in any order, on any machine; copies of an example share a side): ``test_fraction`` of the distinct examples
    are test, ``val_fraction`` of them validation, the rest train. Training drops examples longer than
    ``seq_len`` + 1 tokens (counted); a held-out one is kept by cropping its prompt from the left, so the parts
    scored do not depend on ``seq_len`` unless a response alone is longer (those are left out, counted)."""
    check_fractions(val_fraction, test_fraction)
    distinct = list(dict.fromkeys(e.key for e in examples))
    if len(distinct) < 3:
        raise ZooError(f"{source}: {len(distinct)} distinct examples: too few to hold out validation and test and "
                       "still train on some (3 at least)")
    test_keys = {k for k, held in zip(distinct, core_splits.carve(distinct, test_fraction, salt="test")) if held}
    rest = [k for k in distinct if k not in test_keys]
    val_keys = {k for k, held in zip(rest, core_splits.carve(rest, val_fraction / (1 - test_fraction)))
                if held}
    side = {k: "test" if k in test_keys else "validation" if k in val_keys else "train" for k in distinct}
    parts: dict[str, list[Example]] = {"train": [], "validation": [], "test": []}
    for e in examples:
        parts[side[e.key]].append(e)
    keys = {part: [f"line {e.line}" for e in chosen] for part, chosen in parts.items()}
    train = [e for e in parts["train"] if len(e.ids) <= seq_len + 1]
    if len(train) < len(parts["train"]):
        log(f"{source}: {len(parts['train']) - len(train)} of {len(parts['train'])} training examples are longer than "
            f"seq_len={seq_len} + 1 tokens and were dropped (raise seq_len to keep them)")
    if not train:
        raise ZooError(f"{source}: no usable training examples ({len(parts['train'])} longer than seq_len={seq_len} "
                       "+ 1 tokens)")
    held = {}
    for part in ("validation", "test"):
        fitted = [f for f in (_fit(e, seq_len) for e in parts[part]) if f is not None]
        if len(fitted) < len(parts[part]):
            log(f"{source}: {len(parts[part]) - len(fitted)} of {len(parts[part])} {part} examples have a response "
                f"longer than seq_len={seq_len} tokens and are not scored (raise seq_len to score them)")
        if not fitted:
            raise ZooError(f"{source}: no {part} example fits seq_len={seq_len} (raise seq_len)")
        held[part] = fitted
    how = (f"examples by a hash of their content: {100 * test_fraction:g}% test, {100 * val_fraction:g}% validation, "
           f"the rest train")
    return ExampleSplits(train, held["validation"], held["test"], keys, how)


def _fit(e: Example, seq_len: int) -> Example | None:
    """A held-out example within ``seq_len`` + 1 tokens: its prompt cropped from the left (one token of it at
    least stays as context); None when the response alone does not fit."""
    if len(e.ids) <= seq_len + 1:
        return e
    if sum(1 for t in e.labels if t != -100) > seq_len:
        return None
    return Example(e.ids[-(seq_len + 1):], e.labels[-(seq_len + 1):], e.response_bytes, e.line, e.key)


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
