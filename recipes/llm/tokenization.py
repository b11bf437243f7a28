"""The tokenizer of ``llm/gpt``: a byte-level BPE trained on the training split (or bytes alone, or a
``tokenizer.json`` of the user's), the UTF-8 length of each token (what bits per byte divides by), and documents
encoded into one stream, each opened by <|bos|>.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

import torch

from recipe_zoo.core.errors import ZooError

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


def load_tokenizer(tokenizer: str, vocab_size: int, train_docs: Iterable[str]):
    """``tokenizer=``: bpe (``vocab_size`` tokens, trained on ``train_docs``), bytes, or a tokenizer.json."""
    if tokenizer in ("bpe", "bytes"):
        return train_bpe(train_docs, vocab_size, byte_only=tokenizer == "bytes")
    from tokenizers import Tokenizer

    path = Path(tokenizer).expanduser()
    if not path.is_file():
        raise ZooError(f"tokenizer={tokenizer}: not bpe, bytes or an existing tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ZooError(f"{path}: not a tokenizers JSON file ({str(exc).splitlines()[0]})") from None
    if tok.token_to_id(BOS) is None:
        raise ZooError(f"{path}: the tokenizer has no {BOS} token")
    return tok


def token_bytes(tok) -> torch.Tensor:
    """UTF-8 length of every token (0 for special tokens): the denominator of bits per byte."""
    byte_of = byte_level_decoder()
    special = {t.content for t in tok.get_added_tokens_decoder().values()}
    lengths = torch.zeros(tok.get_vocab_size(), dtype=torch.int32)
    for piece, i in tok.get_vocab().items():
        if piece not in special:  # a byte-level piece spells one byte per character
            lengths[i] = len(piece) if all(c in byte_of for c in piece) else len(piece.encode())
    return lengths


@functools.cache
def byte_level_decoder() -> dict[str, int]:
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

