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
RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".txt.gz", ".md.gz")  # files of documents read into memory
READS = ".txt/.md files or a folder of them, JSONL (text_field=), parquet (a text column), gzipped text or JSONL"
BLOCK_BYTES = 16 << 20  # bytes read at a time from a file streamed in blocks


@dataclass(frozen=True)
class Record:
    """A document held in memory: a JSONL line's text field, a parquet row's, a gzipped file's text. Read as a
    text file is (``read_text``, ``count_chars``, ``text_blocks``, ``size_of`` take either)."""
    text: str


def size_of(doc: Path | Record) -> int:
    """The bytes a document holds (what progress counts)."""
    return len(doc.text.encode()) if isinstance(doc, Record) else doc.stat().st_size


def is_records(path: Path) -> bool:
    return path.name.lower().endswith(RECORD_SUFFIXES)


def read_records(path: Path, text_field: str = "text") -> list[tuple[str, Record]]:
    """The documents of a JSONL file (each line an object; ``text_field`` its text), a parquet file (its
    ``text_field`` column) or a gzipped text file (one document), named for split.csv (``FILE:LINE``, ``FILE:ROW``,
    ``FILE``). Blank documents are left out and counted by the caller (``Sources.blank``)."""
    import gzip
    import json

    name = path.name
    lower = name.lower()
    if lower.endswith(".parquet"):
        return _parquet_records(path, text_field)
    try:
        raw = gzip.open(path).read() if lower.endswith(".gz") else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise ZooError(f"{path}: cannot read ({exc})") from None
    nul = raw.find(b"\0")
    if nul >= 0:
        raise _binary(path, nul, raw.count(b"\n", 0, nul) + 1)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, raw[exc.start], exc.start, raw.count(b"\n", 0, exc.start) + 1) from None
    if not lower.endswith((".jsonl", ".jsonl.gz")):
        if not text.strip():
            raise ZooError(f"{path}: empty file")
        return [(name, Record(text))]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ZooError(f"{path} line {n}: not JSON ({exc})") from None
        if not isinstance(row, dict) or text_field not in row:
            keys = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
            raise ZooError(f"{path} line {n}: no field {text_field!r} (has: {keys}); set text_field=")
        if not isinstance(row[text_field], str):
            raise ZooError(f"{path} line {n}: field {text_field!r} is {type(row[text_field]).__name__}, not text")
        out.append((f"{name}:{n}", Record(row[text_field])))
    if not out:
        raise ZooError(f"{path}: no JSON lines")
    return out


def _parquet_records(path: Path, text_field: str) -> list[tuple[str, Record]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ZooError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow's errors for a file that is not parquet
        raise ZooError(f"{path}: cannot read as parquet ({exc})") from None
    if text_field not in table.column_names:
        raise ZooError(f"{path}: no column {text_field!r} (columns: {', '.join(table.column_names)}); set "
                       "text_field=")
    values = table.column(text_field).to_pylist()
    bad = next((i for i, v in enumerate(values) if v is not None and not isinstance(v, str)), None)
    if bad is not None:
        raise ZooError(f"{path} row {bad + 1}: column {text_field!r} holds {type(values[bad]).__name__}, not text")
    return [(f"{path.name}:{i + 1}", Record(v)) for i, v in enumerate(values) if v is not None]


def _binary(path: Path, offset: int, line: int) -> ZooError:
    return ZooError(f"{path}: looks binary (NUL byte at offset {offset}, line {line}); give a UTF-8 text file")


def _not_utf8(path: Path, byte: int, offset: int, line: int) -> ZooError:
    return ZooError(f"{path}: not UTF-8 text (byte 0x{byte:02x} at offset {offset}) on line {line}")


def read_text(path: Path | Record) -> str:
    """A UTF-8 text file, or a one-line error naming the file and the offending byte."""
    if isinstance(path, Record):
        return path.text
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
    if isinstance(path, Record):
        if progress is not None:
            progress.update(size_of(path))
        return len(path.text)
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
    if isinstance(path, Record):
        if progress is not None:
            progress.update(size_of(path))
        yield path.text
        return
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
    docs: list[tuple[str, Path | Record]]
    held: list[tuple[str, Path | Record]] = field(default_factory=list)
    held_how: str = ""  # what the held-out part is, for the split's one line
    whole: bool = False  # documents are records (JSONL lines, parquet rows): the split keeps each one whole


def sources(data: str, log=print, text_field: str = "text") -> Sources:
    """One text (a named dataset, a file, a folder of text files, read in sorted order), and its held-out part
    where it has one: ``NAME.val.txt`` beside the file, a ``val`` subfolder or ``val.txt`` inside the folder.
    A JSONL, parquet or gzipped file is its records (``read_records``): documents kept whole by the split."""
    if datasets.is_dataset(data):
        path = datasets.locate(data)
        docs = ([(p.relative_to(path).as_posix(), p) for p in text_files(path)] if path.is_dir()
                else [(path.name, path)])
        return Sources(data, docs)
    path = Path(data).expanduser()
    if not path.exists():
        raise ZooError(f"{data}: no such file or folder, and not a dataset name (see `zoo data list`)")
    if path.is_file() and is_records(path):
        records = read_records(path, text_field)
        docs = [(name, r) for name, r in records if r.text.strip()]
        if len(docs) < len(records):
            log(f"{path}: {len(records) - len(docs)} of {len(records)} documents are blank, left out")
        if not docs:
            raise ZooError(f"{path}: every document is blank")
        return Sources(str(path), docs, whole=True)
    if path.is_file() and path.suffix.lower() not in TEXT_SUFFIXES:
        found = _other_format(path)
        if found:
            raise ZooError(f"{path}: {found}; llm/gpt reads {READS}")
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


def _other_format(path: Path) -> str:
    """What a file is, where its first bytes say it is not text ('' otherwise: it is read as text)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return ""
    for magic, what in ((b"PAR1", "a parquet file not named .parquet"), (b"PK\x03\x04", "a zip archive"),
                        (b"\x1f\x8b", "gzip-compressed, and not named .txt.gz, .md.gz or .jsonl.gz"),
                        (b"%PDF", "a PDF")):
        if head.startswith(magic):
            return what
    return ""
