"""Datasets assembled from files that Debian packages ship: ``zoo data fetch`` downloads the ``.deb`` files
(checksummed), and a build reads the wanted members out of each package's ``data.tar`` without unpacking it to
disk (no member path is ever written, so none can escape) and writes the dataset's files.

``linux-python-docs``: the reStructuredText and plain-text sources of the Linux kernel's documentation and
Python's, one text file, the documents in the order of a hash of their names (so the tail that is validation and
test is a sample of both, not the last folders).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

from recipe_zoo.core.errors import ZooError

MAX_TEXT_BYTES = 1 << 30  # refuse a build whose documents add up to more than this


def ar_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """The (name, content) members of an ``ar`` archive (the container of a ``.deb``)."""
    raw = path.read_bytes()
    if raw[:8] != b"!<arch>\n":
        raise ZooError(f"{path}: not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(raw):
        header = raw[pos:pos + 60]
        try:
            name, size = header[:16].decode("ascii").strip().rstrip("/"), int(header[48:58])
        except ValueError:
            raise ZooError(f"{path}: a damaged ar member header at offset {pos}") from None
        if pos + 60 + size > len(raw):
            raise ZooError(f"{path}: member {name!r} runs past the end of the file (truncated download?)")
        yield name, raw[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)


def package_files(deb: Path, rules: tuple[tuple[str, str], ...]) -> Iterator[tuple[str, bytes]]:
    """(name under its prefix, content) of the regular files in the package's ``data.tar`` that start with one
    of the ``(prefix, suffix)`` rules' prefixes and end with its suffix; ``.gz`` ones come out decompressed
    (and named without the ``.gz``)."""
    data = [blob for name, blob in ar_members(deb) if name.startswith("data.tar")]
    if not data:
        raise ZooError(f"{deb}: no data.tar member: not a Debian binary package")
    try:
        with tarfile.open(fileobj=io.BytesIO(data[0])) as tf:
            for member in tf:
                if not member.isfile():
                    continue
                name = member.name.removeprefix("./")
                for prefix, suffix in rules:
                    if name.startswith(prefix) and name.endswith(suffix):
                        content = tf.extractfile(member).read()
                        if name.endswith(".gz"):
                            content, name = gzip.decompress(content), name[:-3]
                        yield name[len(prefix):], content
                        break
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ZooError(f"{deb}: its data.tar cannot be read ({exc})") from None


def hashed_order(documents: dict[str, str]) -> list[str]:
    """The documents' names in the order of their sha256: a fixed shuffle, the same on any machine."""
    return sorted(documents, key=lambda name: hashlib.sha256(name.encode()).hexdigest())


def write_documents(documents: dict[str, str], out: Path, filename: str) -> Path:
    """One UTF-8 text file: the documents in hashed order, each ending in one newline, a blank line between."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename
    path.write_text("\n".join(documents[name].strip("\n") + "\n" for name in hashed_order(documents)),
                    encoding="utf-8", newline="")
    return path


LINUX_DOCS = (("usr/share/doc/linux-doc-6.1/Documentation/", ".rst.gz"),
              ("usr/share/doc/linux-doc-6.1/Documentation/", ".txt.gz"))
PYTHON_DOCS = (("usr/share/doc/python3.11/html/_sources/", ".rst.txt"),)


def linux_python_docs(files: list[Path], out: Path) -> None:
    """``linux-python-docs`` from its two packages (linux-doc-6.1, python3.11-doc, in that order)."""
    documents: dict[str, str] = {}
    total = 0
    for deb, prefix, rules in ((files[0], "linux/", LINUX_DOCS), (files[1], "python/", PYTHON_DOCS)):
        found = 0
        for name, content in package_files(deb, rules):
            try:
                documents[prefix + name] = content.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ZooError(f"{deb}: {name} is not UTF-8 text (byte at offset {exc.start})") from None
            total += len(content)
            found += 1
            if total > MAX_TEXT_BYTES:
                raise ZooError(f"{deb}: the documents add up to more than {MAX_TEXT_BYTES} bytes; refusing")
        if not found:
            raise ZooError(f"{deb}: none of its files match {', '.join(p + '*' + s for p, s in rules)}: "
                           "not the package this dataset is built from")
    write_documents(documents, out, "docs.txt")
