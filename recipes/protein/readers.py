"""Reading FASTA records and CSV rows, with one-line errors that name the file and the line."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError


FASTA_SUFFIXES = (".fasta", ".fa", ".faa", ".fas")


def read_fasta(path: Path) -> list[tuple[str, str, int]]:
    """(header, sequence, line number of the header) for each record."""
    records: list[tuple[str, list[str], int]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if line.startswith(">"):
                    records.append((line[1:].strip(), [], n))
                elif line:
                    if not records:
                        raise ZooError(f"{path} line {n}: sequence before the first '>' header; is this FASTA?")
                    records[-1][1].append(line)
    except UnicodeDecodeError:
        raise not_utf8(path, "line") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read as a UTF-8 FASTA file ({exc})") from None
    if not records:
        raise ZooError(f"{path}: no FASTA records")
    return [(h, "".join(s), n) for h, s, n in records]


def read_csv_rows(path: Path | io.StringIO, name: str) -> tuple[list[str], list[dict]]:
    try:
        f = open(path, newline="", encoding="utf-8-sig") if isinstance(path, Path) else path
        with f:
            reader = csv.DictReader(f)
            columns, rows = list(reader.fieldnames or []), list(reader)
    except UnicodeDecodeError as exc:
        if isinstance(path, Path):
            raise not_utf8(path) from None
        raise ZooError(f"{name}: cannot read as a UTF-8 CSV ({exc})") from None
    except (OSError, csv.Error) as exc:
        raise ZooError(f"{name}: cannot read as a UTF-8 CSV ({exc})") from None
    if not columns:
        raise ZooError(f"{name}: empty file (no header row, no rows)")
    return columns, rows


def need_columns(name: str, columns: list[str], wanted: list[str], hint: str) -> None:
    for col in wanted:
        if col not in columns:
            raise ZooError(f"{name}: no column {col!r} (columns: {column_list(columns)}); {hint}")
