"""Domain-free helpers for reading users' files: errors that name the file and the row, columns in messages."""
from __future__ import annotations

from pathlib import Path

from recipe_zoo.core.errors import ZooError


def not_utf8(path: Path, unit: str = "row") -> ZooError:
    """The error for a text file that is not UTF-8: the line (``row`` in a CSV, the header being row 1) and
    the first byte that does not decode, so the user can find it."""
    try:
        raw = Path(path).read_bytes()
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return ZooError(f"{path} {unit} {line}: byte 0x{raw[exc.start]:02x} is not UTF-8 text; save the file as UTF-8")
    except OSError as exc:
        return ZooError(f"{path}: cannot read ({exc.strerror})")
    return ZooError(f"{path}: cannot read as UTF-8 text")


def column_list(names) -> str:
    """Column names for a one-line message: as they are, or quoted where they hold a newline or other
    unprintable character."""
    return ", ".join(n if n.isprintable() else repr(n) for n in map(str, names))
