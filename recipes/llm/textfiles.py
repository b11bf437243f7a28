"""Text sources for the language models: what a ``data=`` source holds (its documents in reading order and its own
held-out part), and UTF-8 text files read whole (``read_text``) or in blocks (``count_chars``, ``text_blocks``: a
corpus larger than memory), with the same one-line errors either way.
"""
from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from recipe_zoo.core import datasets
from recipe_zoo.core.errors import ZooError

TEXT_SUFFIXES = (".txt", ".md")
BLOCK_BYTES = 16 << 20  # bytes read at a time from a file streamed in blocks


def _binary(path: Path, offset: int, line: int) -> ZooError:
    return ZooError(f"{path}: looks binary (NUL byte at offset {offset}, line {line}); give a UTF-8 text file")


def _not_utf8(path: Path, byte: int, offset: int, line: int) -> ZooError:
    return ZooError(f"{path}: not UTF-8 text (byte 0x{byte:02x} at offset {offset}) on line {line}")


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
        raise _binary(path, nul, line(nul))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, raw[exc.start], exc.start, line(exc.start)) from None


def count_chars(path: Path, block_bytes: int | None = None, progress=None) -> int:
    """The characters of a UTF-8 text file, read in blocks: the file checked as ``read_text`` checks it, with the
    same error for the same file (an empty file, then a NUL byte, then the first byte that is not UTF-8)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    chars = offset = lines = 0
    blank, nul, bad = True, None, None
    try:
        with open(path, "rb") as f:
            while block := f.read(block_bytes or BLOCK_BYTES):
                blank = blank and not block.strip()
                at = block.find(b"\0") if nul is None else -1
                if at >= 0:
                    nul = (at + offset, lines + block.count(b"\n", 0, at) + 1)
                if bad is None:
                    try:
                        chars += len(decoder.decode(block))
                    except UnicodeDecodeError as exc:
                        bad = _bad_byte(exc, block, offset, lines)
                lines += block.count(b"\n")
                offset += len(block)
                if progress is not None:
                    progress.update(len(block))
            if bad is None:
                try:
                    decoder.decode(b"", final=True)  # a sequence cut short by the end of the file
                except UnicodeDecodeError as exc:
                    bad = _bad_byte(exc, b"", offset, lines)
    except OSError as exc:
        raise ZooError(f"{path}: cannot read: {exc.strerror}") from None
    if blank:
        raise ZooError(f"{path}: empty file")
    if nul is not None:
        raise _binary(path, *nul)
    if bad is not None:
        raise _not_utf8(path, *bad)
    return chars


def _bad_byte(exc: UnicodeDecodeError, block: bytes, offset: int, lines: int) -> tuple[int, int, int]:
    """(byte, offset in the file, line) of a decoding error in ``block`` read at ``offset``: the decoder's input is
    the bytes it held back from the previous block (never a newline), then the block."""
    at = offset - (len(exc.object) - len(block)) + exc.start
    return exc.object[exc.start], at, lines + block.count(b"\n", 0, max(0, at - offset)) + 1


def text_blocks(path: Path, block_bytes: int | None = None, progress=None) -> Iterator[str]:
    """A UTF-8 text file's text in blocks of about ``block_bytes`` (checked first: ``count_chars``)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with open(path, "rb") as f:
            while block := f.read(block_bytes or BLOCK_BYTES):
                if progress is not None:
                    progress.update(len(block))
                yield decoder.decode(block)
            yield decoder.decode(b"", final=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise ZooError(f"{path}: cannot read, or changed while it was read ({exc})") from None


def text_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)


@dataclass
class Sources:
    """The files of a text source: ``docs`` in reading order, each a document, and the data's own held-out part
    (``held``, its test; empty when the test is the tail of ``docs``), each as (its name in split.csv, file)."""
    name: str
    docs: list[tuple[str, Path]]
    held: list[tuple[str, Path]] = field(default_factory=list)
    held_how: str = ""  # what the held-out part is, for the split's one line


def sources(data: str, log=print) -> Sources:
    """One text (a named dataset, a file, a folder of text files, read in sorted order), and its held-out part
    where it has one: ``NAME.val.txt`` beside the file, a ``val`` subfolder or ``val.txt`` inside the folder."""
    if datasets.is_dataset(data):
        path = datasets.locate(data)
        docs = ([(p.relative_to(path).as_posix(), p) for p in text_files(path)] if path.is_dir()
                else [(path.name, path)])
        return Sources(data, docs)
    path = Path(data).expanduser()
    if not path.exists():
        raise ZooError(f"{data}: no such file or folder, and not a dataset name (see `zoo data list`)")
    if path.is_file():
        held_file = path.with_name(path.stem + ".val" + path.suffix)
        if held_file.is_file():
            return Sources(str(path), [(path.name, path)], [(held_file.name, held_file)], f"test: {held_file.name}")
        return Sources(str(path), [(path.name, path)])
    if (path / "prepared.json").is_file():
        raise ZooError(f"{path}: prepared token shards (zoo data prepare), which llm/gpt trains on; give this the "
                       "text it was prepared from")
    files = text_files(path)
    held_files = [p for p in files if p.relative_to(path).parts[0] in ("val", "val.txt", "val.md")]
    train_files = [p for p in files if p not in held_files]
    if not train_files:
        raise ZooError(f"{path}: no .txt or .md files to train on")
    skipped = sum(1 for p in path.rglob("*") if p.is_file()) - len(files)
    if skipped:
        log(f"{path}: {skipped} files without a .txt/.md suffix were skipped")
    named = [(p.relative_to(path).as_posix(), p) for p in train_files]
    held = [(p.relative_to(path).as_posix(), p) for p in held_files]
    return Sources(str(path), named, held, f"test: the {len(held_files)} files under val" if held else "")
