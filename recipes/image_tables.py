"""Images listed in a labels table, the layout most image datasets ship in: a folder of image files and a CSV (or
TSV, parquet) with a file column and a label column, optionally a split column (train / val / test). Found as
``labels.csv`` in the data folder, or named by ``labels=FILE``; paths are relative to the table. Every row that
cannot be used is counted and named: missing files and conflicting duplicates stop the run, repeated rows are read
once, labels with one image each are logged.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo.core.datafiles import column_list, not_utf8
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.image_decoding import IMAGE_SUFFIXES

TABLE_NAMES = ("labels.csv", "labels.tsv", "labels.parquet")  # what a data folder's own table is called
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet")
FILE_COLUMNS = ("file", "filename", "file_name", "image", "image_id", "image_name", "path", "filepath", "id")
LABEL_COLUMNS = ("label", "class", "category", "target", "y")
SPLIT_COLUMN = "split"
SPLIT_NAMES = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}


@dataclass(frozen=True)
class LabelsTable:
    """What the recipe's ``labels=``, ``file_column=`` and ``label_column=`` say."""
    path: str = ""  # '' = the data folder's labels.csv (labels.tsv, labels.parquet) when it has one
    file: str = ""  # '' = the first of FILE_COLUMNS the table has
    label: str = ""  # '' = the first of LABEL_COLUMNS the table has


def labels_table(cfg) -> LabelsTable:
    """The labels table settings of an image recipe's config."""
    return LabelsTable(cfg.labels, cfg.file_column, cfg.label_column)


@dataclass
class Listing:
    table: Path
    paths: list[Path]
    labels: list[int]
    classes: list[str]
    split: list[str] | None  # "train" | "val" | "test" per image, from the split column; None without one


def find_table(root: Path, spec: LabelsTable) -> Path | None:
    """The labels table for data folder ``root``: ``spec.path`` (relative to the folder, or as given), else the
    folder's own ``labels.csv`` / ``.tsv`` / ``.parquet``; None when there is none (class folders are read)."""
    if spec.path:
        given = Path(spec.path).expanduser()
        path = given if given.is_absolute() or given.exists() else root / given
        if not path.is_file():
            raise ZooError(f"labels={spec.path}: no such file (looked in {root} too)")
        return path
    if spec.file or spec.label:
        found = next((root / n for n in TABLE_NAMES if (root / n).is_file()), None)
        if found is None:
            raise ZooError(f"{root}: file_column= / label_column= name a labels table's columns, and {root} has no "
                           f"{' or '.join(TABLE_NAMES)}; give labels=FILE")
        return found
    if root.is_file() and root.suffix.lower() in TABLE_SUFFIXES:  # data= the table itself
        return root
    return next((root / n for n in TABLE_NAMES if root.is_dir() and (root / n).is_file()), None)


def read_rows(table: Path) -> tuple[list[str], list[dict]]:
    """The table's columns and rows as text: CSV/TSV by the csv module, parquet by pandas (pyarrow)."""
    if table.suffix.lower() == ".parquet":
        try:
            import pandas as pd

            frame = pd.read_parquet(table)
        except ImportError:
            raise ZooError(f"{table}: reading parquet needs pandas and pyarrow (pip install 'recipe-zoo[tabular]'), "
                           "or give the table as a CSV") from None
        except Exception as exc:  # pyarrow's errors for a file that is not parquet
            raise ZooError(f"{table}: cannot read as parquet ({exc})") from None
        columns = [str(c) for c in frame.columns]
        return columns, [{c: "" if v is None else str(v) for c, v in zip(columns, row)}
                         for row in frame.itertuples(index=False, name=None)]
    try:
        with open(table, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f, delimiter="\t" if table.suffix.lower() == ".tsv" else ",")
            columns = list(reader.fieldnames or [])
            rows = [{k: (v or "").strip() for k, v in row.items() if k is not None} for row in reader]
    except UnicodeDecodeError:
        raise not_utf8(table) from None
    except csv.Error as exc:
        raise ZooError(f"{table}: cannot read as a CSV ({exc})") from None
    return columns, rows


def _column(table: Path, columns: list[str], given: str, names: tuple[str, ...], what: str, key: str) -> str:
    if given:
        if given not in columns:
            raise ZooError(f"{table}: no column {given!r} (columns: {column_list(columns)}); set {key}=")
        return given
    lower = {c.lower(): c for c in columns}
    found = next((lower[n] for n in names if n in lower), None)
    if found is None:
        raise ZooError(f"{table}: no {what} column (looked for {', '.join(names)}; columns: {column_list(columns)}); "
                       f"set {key}=COLUMN")
    return found


def _resolve(base: Path, name: str) -> Path | None:
    """The image a row names: the path as written, or with an image suffix added (``image_id`` columns often omit
    it); None where neither is a file."""
    path = base / name
    if path.is_file():
        return path
    if not path.suffix:
        for suffix in sorted(IMAGE_SUFFIXES):
            if path.with_suffix(suffix).is_file():
                return path.with_suffix(suffix)
    return None


def read_listing(table: Path, spec: LabelsTable, log=print, training: bool = True) -> Listing:
    """The images a labels table lists, their labels and (with a split column) their parts. One line naming the
    table and the row for what cannot be read; repeated rows and labels with one image each are counted in the
    log. ``training``: a table to train on (labels with one image each are named: they cannot be on both sides).
    One label only is for the recipe to judge (a classifier refuses it, a generator need not)."""
    columns, rows = read_rows(table)
    if not columns:
        raise ZooError(f"{table}: empty file (no header row, no rows)")
    if not rows:
        raise ZooError(f"{table}: no rows")
    file_col = _column(table, columns, spec.file, FILE_COLUMNS, "file", "file_column")
    label_col = _column(table, columns, spec.label, LABEL_COLUMNS, "label", "label_column")
    split_col = next((c for c in columns if c.lower() == SPLIT_COLUMN), None)
    base = table.parent
    seen: dict[Path, tuple[int, str]] = {}
    paths, names, split, missing, repeated = [], [], [], [], []
    for i, row in enumerate(rows):
        line = i + 2
        name, label = row.get(file_col, ""), row.get(label_col, "")
        if not name:
            raise ZooError(f"{table} row {line}: no file in column {file_col!r}")
        if not label:
            raise ZooError(f"{table} row {line}: no label in column {label_col!r} for {name!r}")
        part = ""
        if split_col is not None:
            part = SPLIT_NAMES.get(row.get(split_col, "").lower(), "")
            if not part:
                raise ZooError(f"{table} row {line}: split {row.get(split_col, '')!r} is not train, val or test")
        path = _resolve(base, name)
        if path is None:
            missing.append((line, name))
            continue
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise ZooError(f"{table} row {line}: {name!r} is not an image file ({', '.join(sorted(IMAGE_SUFFIXES))})")
        key = path.resolve()
        if key in seen:
            first, first_label = seen[key]
            if first_label != label:
                raise ZooError(f"{table} row {line}: {name!r} is labelled {label!r}, and {first_label!r} in row "
                               f"{first}")
            repeated.append(line)
            continue
        seen[key] = (line, label)
        paths.append(path)
        names.append(label)
        split.append(part)
    if missing:
        shown = ", ".join(f"row {line}: {name!r}" for line, name in missing[:3])
        raise ZooError(f"{table}: {len(missing)} of {len(rows)} listed files are missing ({shown}"
                       f"{', ...' if len(missing) > 3 else ''}; paths are relative to {base})")
    if repeated:
        log(f"{table}: {len(repeated)} repeated rows read once (rows {', '.join(map(str, repeated[:5]))}"
            f"{', ...' if len(repeated) > 5 else ''})")
    classes = sorted(set(names), key=lambda c: (0, int(c), c) if c.lstrip("-").isdigit() else (1, 0, c))
    counts = {c: names.count(c) for c in classes}
    single = [c for c in classes if counts[c] == 1]
    if single and training:
        log(f"{table}: {len(single)} labels have one image each ({', '.join(single[:5])}"
            f"{', ...' if len(single) > 5 else ''}): they cannot be both trained on and tested")
    index = {c: k for k, c in enumerate(classes)}
    return Listing(table, paths, [index[c] for c in names], classes, split if split_col is not None else None)
