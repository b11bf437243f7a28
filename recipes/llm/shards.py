"""Token shards: a text source tokenized once (``zoo data prepare llm/gpt data=SOURCE``, or ``llm/gpt stream=true``)
and trained on from disk; and the text ``llm/gpt`` trains and scores on, from memory or from shards.

A prepared folder holds ``train.npy`` (the training split's tokens, uint16 when the vocabulary fits, else uint32;
each document opened by <|bos|>, as in memory), ``tokenizer.json``, ``val.txt`` and ``test.txt`` (the held-out
text, whole: bits per byte reads its first ``eval_bytes``, as before) and ``split.json`` (split.csv's items). The
split is the in-memory one (``text_splits.tail_bounds`` on the same character counts), and so are the tokens: the
source is read in blocks and encoded in chunks cut only after a newline that a non-space follows, where no pre-token
of ``tokenization.SPLIT_PATTERN`` spans, so a BPE trained on the chunks and the chunks encoded give the tokenizer and
the tokens whole documents give. Memory holds a block and a batch of chunks, whatever the size of the corpus.
"""
from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recipe_zoo.core import distributed, prepared
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress
from recipe_zoo.core.streams import NpyArray, NpyWriter
from recipe_zoo.recipes.llm import text_splits, textfiles, tokenization

# fixed at prepare time (eval_bytes is not)
FIXED = ("tokenizer", "vocab_size", "val_fraction", "test_fraction", "text_field")
FILES = ["train.npy", "tokenizer.json", "val.txt", "test.txt", "split.json"]
CHUNK_CHARS = 1 << 16  # a chunk ends at the first clean cut past this many characters
BATCH_CHARS = 1 << 20  # characters handed to the tokenizer at once (its threads share the chunks)
LONG_CHARS = 1 << 22  # no clean cut in this many characters: cut between two words, else anywhere (logged)
INSPECT_TOKENS = 1 << 20  # zoo doctor on shards: the first training tokens
CLEAN_CUT = re.compile(r"\n(?=\S)")  # after a newline, before a non-space: no pre-token spans it
WORD_CUT = re.compile(r"(?<=[^\W\d_]) (?=[^\W\d_])")  # between a letter and " letter" (checked with isalpha)


def fixed_fields(cfg) -> tuple[str, ...]:
    """The settings a prepared folder is made for: the vocabulary size only matters to a BPE trained here."""
    return FIXED if cfg.tokenizer == "bpe" else tuple(f for f in FIXED if f != "vocab_size")


# =============================================================================================
# Preparing: zoo data prepare llm/gpt data=SOURCE
# =============================================================================================

def prepare_tokens(cfg, run, out: Path | None = None, force: bool = False) -> Path:
    """``zoo data prepare llm/gpt data=SOURCE [tokenizer=...] [vocab_size=N] [val_fraction=..] [test_fraction=..]``:
    the token shards of a text source, made once (an up-to-date folder is reused)."""
    if str(cfg.data).startswith("hf:"):
        raise ZooError(f"data={cfg.data}: Hugging Face datasets are not prepared; save the text as files (one per "
                       "document) and prepare those")
    if prepared.is_prepared(cfg.data):
        raise ZooError(f"data={cfg.data}: already prepared; train on it: zoo run llm/gpt data={cfg.data}")
    text_splits.check_fractions(cfg.val_fraction, cfg.test_fraction)
    return prepared.ensure(cfg, run, kind="tokens", fields=fixed_fields(cfg), recipe="llm/gpt", out=out,
                           force=force, make=lambda folder: write_shards(cfg, run, folder))


def write_shards(cfg, run, folder: Path) -> dict:
    """Three passes over the source: count its characters (and check it), train the BPE on the training split's
    chunks (tokenizer=bpe only), then encode them into ``train.npy`` and copy the held-out text."""
    found = textfiles.sources(cfg.data, run.log, cfg.text_field)
    files = [path for _, path in found.docs + found.held]
    reading = Progress(sum(map(textfiles.size_of, files)), "reading", run.log, "bytes")
    lengths = [textfiles.count_chars(path, progress=reading) for _, path in found.docs]
    held_chars = sum(textfiles.count_chars(path, progress=reading) for _, path in found.held)
    reading.done()
    bounds = text_splits.tail_bounds(lengths, cfg.val_fraction, 0.0 if found.held else cfg.test_fraction,
                                     found.whole)
    training = Progress(None, "training the tokenizer", run.log, "characters")
    tok = tokenization.load_tokenizer(cfg.tokenizer, cfg.vocab_size,
                                      (c for doc, b in zip(found.docs, bounds)
                                       for c in clean_chunks(_train_part(doc[1], b, training), log=run.log)))
    if cfg.tokenizer == "bpe":
        training.done()
    tok.save(str(folder / "tokenizer.json"))
    dtype = np.dtype(np.uint16 if tok.get_vocab_size() <= 1 << 16 else np.uint32)
    table = byte_table(tok, dtype) if cfg.tokenizer == "bytes" else None
    bos, train_bytes = np.array([tok.token_to_id(tokenization.BOS)], dtype), 0
    tokenizing = Progress(sum(map(textfiles.size_of, files)), "tokenizing", run.log, "bytes")
    with NpyWriter(folder / "train.npy", dtype) as train, open(folder / "val.txt", "w", encoding="utf-8",
                                                                newline="") as val, \
            open(folder / "test.txt", "w", encoding="utf-8", newline="") as test:
        for (_, path), b in zip(found.docs, bounds):
            for part, pieces in itertools.groupby(_parts(path, b, tokenizing), key=lambda piece: piece[0]):
                texts = (text for _, text in pieces)
                if part == 0:  # the document's training text: <|bos|>, then its tokens
                    train.append(bos)
                    for ids, n_bytes in encode_chunks(tok, texts, dtype, table, run.log):
                        train.append(ids)
                        train_bytes += n_bytes
                else:
                    (val if part == 1 else test).writelines(texts)
        for _, path in found.held:
            test.writelines(textfiles.text_blocks(path, progress=tokenizing))
        tokens = train.rows
    tokenizing.done()
    keys = split_keys(found, bounds)
    (folder / "split.json").write_text(json.dumps(keys))
    characters = {"train": sum(b[1] for b in bounds), "validation": sum(b[2] - b[1] for b in bounds),
                  "test": sum(b[3] - b[2] for b in bounds) + held_chars}
    run.log(f"{found.name}: {characters['train']:,} training characters -> {tokens:,} tokens ({dtype.name}, vocab "
            f"{tok.get_vocab_size()})")
    return {"files": FILES, "name": found.name, "dtype": dtype.name, "vocab": tok.get_vocab_size(),
            "how": text_splits.split_how(cfg.val_fraction, 0.0 if found.held else cfg.test_fraction, found.held_how,
                                         whole=found.whole and all(sum(b[k + 1] > b[k] for k in range(3)) == 1
                                                                   for b in bounds)),
            "characters": characters, "tokens": {"train": tokens},
            "bytes": {"train": train_bytes, "validation": (folder / "val.txt").stat().st_size,
                      "test": (folder / "test.txt").stat().st_size}}


def _parts(path: Path, bounds: tuple[int, ...], progress=None) -> Iterator[tuple[int, str]]:
    """A document's text in reading order as (part, text) pieces: part 0 train, 1 validation, 2 test, cut at
    ``bounds`` (characters: 0, validation start, test start, end)."""
    seen = 0
    for block in textfiles.text_blocks(path, progress=progress):
        for part, (a, b) in enumerate(zip(bounds, bounds[1:])):
            lo, hi = max(a - seen, 0), min(b - seen, len(block))
            if hi > lo:
                yield part, block[lo:hi]
        seen += len(block)


def _train_part(path: Path, bounds: tuple[int, ...], progress=None) -> Iterator[str]:
    """A document's training text (read no further than it goes)."""
    if bounds[1] > 0:
        for part, text in _parts(path, bounds):
            if part:
                return
            if progress is not None:
                progress.update(len(text))
            yield text


def clean_chunks(blocks: Iterable[str], size: int | None = None, log=print) -> Iterator[str]:
    """The text of ``blocks`` in chunks of about ``size`` characters, each ending where no pre-token spans (a clean
    cut); a stretch of ``LONG_CHARS`` without one is cut between two words, and one without those anywhere (logged:
    tokens there may differ from those of the whole text)."""
    size = size or CHUNK_CHARS
    buf, pos = "", 0
    for block in blocks:
        buf, pos = buf[pos:] + block, 0
        while len(buf) - pos > size:
            at = _cut(buf, pos, size, log)
            if at is None:
                break
            yield buf[pos:at]
            pos = at
    if len(buf) > pos:
        yield buf[pos:]


def _cut(buf: str, pos: int, size: int, log) -> int | None:
    found = CLEAN_CUT.search(buf, pos + size)
    if found is not None:
        return found.end()
    if len(buf) - pos < LONG_CHARS:
        return None  # read on: a clean cut is likely in the next block
    for found in WORD_CUT.finditer(buf, pos + size):
        if buf[found.start() - 1].isalpha() and buf[found.end()].isalpha():
            return found.start()
    log(f"tokenizing: {len(buf) - pos:,} characters without a line break or a space between letters; cut there "
        "(the tokens at the cut may differ from those of the text encoded whole)")
    return len(buf)


def byte_table(tok, dtype: np.dtype) -> np.ndarray:
    """tokenizer=bytes: each byte's token id (the byte-level vocabulary has no merges, so a text's tokens are its
    bytes looked up: what ``encode`` gives, at the speed of a table)."""
    alphabet = {b: c for c, b in tokenization.byte_level_decoder().items()}
    return np.array([tok.token_to_id(alphabet[b]) for b in range(256)], dtype=dtype)


def encode_chunks(tok, texts: Iterable[str], dtype: np.dtype, table: np.ndarray | None,
                  log=print) -> Iterator[tuple[np.ndarray, int]]:
    """The token ids of a document's text (without its <|bos|>), a batch of chunks at a time, and the bytes each
    batch spells."""
    if table is not None:
        for text in texts:
            raw = text.encode()
            yield table[np.frombuffer(raw, dtype=np.uint8)], len(raw)
        return
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    batch: list[str] = []
    size = 0
    for chunk in itertools.chain(clean_chunks(texts, log=log), [None]):
        if chunk is not None:
            batch.append(chunk)
            size += len(chunk)
        if batch and (chunk is None or size >= BATCH_CHARS):
            ids = [np.asarray(e.ids, dtype=dtype) for e in encode(batch, add_special_tokens=False)]
            yield np.concatenate(ids), sum(len(c.encode()) for c in batch)
            batch, size = [], 0


def split_keys(found: textfiles.Sources, bounds: list[tuple[int, ...]]) -> dict[str, list[str]]:
    """split.csv's items, as ``text_splits.Piece.key`` names them: a document, or ``source[start:end]`` where a cut
    fell."""
    keys: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for (name, _), b in zip(found.docs, bounds):
        for part, lo, hi in zip(keys, b, b[1:]):
            if hi > lo:
                keys[part].append(name if (lo, hi) == (0, b[-1]) else f"{name}[{lo}:{hi}]")
    keys["test"] += [name for name, _ in found.held]
    return keys


# =============================================================================================
# What llm/gpt trains and scores on: from memory, or from shards
# =============================================================================================

@dataclass
class TextData:
    """The training tokens (a tensor, or shards read as they are used), the scored validation and test text, the
    tokenizer, and the split (its line, sizes and split.csv's items)."""
    name: str
    how: str
    sizes: str
    keys: dict
    tok: object
    train: torch.Tensor | NpyArray
    val_text: str
    test_text: str
    train_chars: int
    train_bytes: int

    def inspected(self) -> torch.Tensor:
        """The training tokens zoo doctor checks: all of them in memory, the first ``INSPECT_TOKENS`` of shards."""
        return self.train if isinstance(self.train, torch.Tensor) else self.train[:INSPECT_TOKENS]


def streams(cfg) -> bool:
    return cfg.stream or prepared.is_prepared(cfg.data)


def text_data(cfg, run) -> TextData:
    """``cfg.data`` split, tokenized and ready to train on: in memory, or (stream=true, or a prepared folder) from
    token shards prepared once."""
    if streams(cfg):
        return open_shards(prepared_folder(cfg, run), cfg, run.log)
    splits = text_splits.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run.log, cfg.text_field)
    val_text = text_splits.eval_text(splits, cfg.eval_bytes, "validation")
    test_text = text_splits.eval_text(splits, cfg.eval_bytes)
    tok = tokenization.load_tokenizer(cfg.tokenizer, cfg.vocab_size,
                                      (chunk for doc in splits.train for chunk in clean_chunks([doc], log=run.log)))
    return TextData(splits.name, splits.how, splits.sizes(), splits.keys, tok, encode_docs(tok, splits.train, run.log),
                    val_text, test_text, sum(map(len, splits.train)), len("".join(splits.train).encode()))


def encode_docs(tok, docs: list[str], log=print) -> torch.Tensor:
    """``tokenization.encode_docs``'s tokens (each document opened by <|bos|>), its documents cut at clean cuts and
    handed to the tokenizer a batch at a time, so that its threads share a long one (the same tokens, faster:
    docs/LOG.md#2026-12-02-llm-batched-encoding). Unlike ``encode_chunks`` per document (the prepare path), a
    batch spans documents, so many short documents encode faster too."""
    bos = np.array([tok.token_to_id(tokenization.BOS)], dtype=np.int32)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    parts: list[np.ndarray] = []
    batch: list[str | None] = []  # None: a document starts here

    def flush():
        encoded = iter(encode([b for b in batch if b is not None], add_special_tokens=False))
        parts.extend(bos if b is None else np.asarray(next(encoded).ids, dtype=np.int32) for b in batch)
        batch.clear()

    size = 0
    for doc in docs:
        batch.append(None)
        for chunk in clean_chunks([doc], log=log):
            batch.append(chunk)
            size += len(chunk)
            if size >= BATCH_CHARS:
                flush()
                size = 0
    flush()
    return torch.from_numpy(np.concatenate(parts)) if parts else torch.zeros(0, dtype=torch.int32)


def prepared_folder(cfg, run) -> Path:
    """``cfg.data`` if prepared, else its prepared folder (made by rank 0 if not up to date; the others wait)."""
    if prepared.is_prepared(cfg.data):
        return Path(cfg.data)
    folder = prepare_tokens(cfg, run) if distributed.is_main() else None
    return Path(distributed.broadcast_object(str(folder) if folder is not None else ""))


def open_shards(folder: Path, cfg, log=print) -> TextData:
    """A prepared folder; the run must ask for the tokenizer, vocabulary and split it was made with (one line)."""
    from tokenizers import Tokenizer

    manifest = prepared.read(folder, "tokens")
    prepared.check(manifest, cfg, folder)
    name = manifest["name"]
    val_text = scored_text(folder / "val.txt", name, cfg.eval_bytes, "validation")
    test_text = scored_text(folder / "test.txt", name, cfg.eval_bytes, "test")
    train = NpyArray(folder / "train.npy")
    log(f"{folder}: {manifest['source']} prepared as {len(train):,} training tokens ({manifest['dtype']}), read "
        "from disk as they are used")
    keys = json.loads((folder / "split.json").read_text())
    return TextData(name, manifest["how"], text_splits.sizes_line(manifest["characters"]), keys,
                    Tokenizer.from_file(str(folder / "tokenizer.json")), train, val_text, test_text,
                    manifest["characters"]["train"], manifest["bytes"]["train"])


def scored_text(path: Path, name: str, eval_bytes: int, part: str) -> str:
    """``text_splits.eval_text`` of a held-out part kept as a file: its first ``eval_bytes`` bytes are all it reads."""
    with open(path, "rb") as f:
        head = f.read(eval_bytes)
    return text_splits.scored_prefix(name, head, path.stat().st_size, eval_bytes, part)


def test_text(cfg, run) -> str:
    """The run's scored test text again (``zoo predict`` with no data): from the prepared folder, or for stream=true
    from the source's test part, read up to ``eval_bytes`` (the corpus is never held whole)."""
    if prepared.is_prepared(cfg.data):
        return scored_text(Path(cfg.data) / "test.txt", prepared.read(cfg.data, "tokens")["name"], cfg.eval_bytes,
                           "test")
    if not streams(cfg):
        splits = text_splits.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run.log, cfg.text_field)
        return text_splits.eval_text(splits, cfg.eval_bytes)
    found = textfiles.sources(cfg.data, run.log, cfg.text_field)
    bounds = text_splits.tail_bounds([textfiles.count_chars(path) for _, path in found.docs], cfg.val_fraction,
                                     0.0 if found.held else cfg.test_fraction, found.whole)
    pieces = itertools.chain((text for (_, path), b in zip(found.docs, bounds) if b[3] > b[2]
                              for part, text in _parts(path, b) if part == 2),
                             (text for _, path in found.held for text in textfiles.text_blocks(path)))
    head = b""
    for text in pieces:
        head += text.encode()
        if len(head) >= cfg.eval_bytes:
            break
    return text_splits.scored_prefix(found.name, head, len(head), cfg.eval_bytes, "test")
