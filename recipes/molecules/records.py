"""A molecules file as rows, whatever format a chemist keeps it in: delimited text (CSV, TSV, or any separator, with
``#`` comment lines: MobleyLab's FreeSolv ``database.txt`` as it is), or an SD file (``.sdf``, ``.sdf.gz``) read by
RDKit, each record a row of its properties with its name and its molecule's SMILES. Anything else is refused in one
line naming what it is and what is read.
"""
from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo.core.datafiles import not_utf8
from recipe_zoo.core.errors import ZooError

SDF_SUFFIXES = (".sdf", ".sdf.gz", ".sd")
TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".dat", ".smi", ".csv.gz", ".tsv.gz", ".txt.gz")
READS = "delimited text (.csv, .tsv, .txt: any separator, # comments) or SDF (.sdf, .sdf.gz)"
SEPARATORS = ",\t;|"  # what sniffing chooses among (sep= names any other)
NAME = "name"  # the column an SD file's record names go in


@dataclass
class Records:
    path: Path
    columns: list[str]
    rows: list[dict]
    names: list[str] | None = None  # an SD file's record names ("" where a record has none)

    def where(self, i: int) -> str:
        """Row ``i`` as its file counts it: a delimited file's line, an SD file's record (1-based) and name."""
        if self.names is None:
            return f"row {self.line[i]}"
        return f"record {i + 1}" + (f" ({self.names[i]!r})" if self.names[i] else "")

    line: list[int] | None = None  # the line of each delimited row (1-based, comments and header counted)

    def which(self, indices) -> str:
        """The first five of ``indices`` as the file counts them: ``rows 3, 5`` or ``record 3 ('x'), record 9``."""
        shown = list(indices)[:5]
        more = ", ..." if len(list(indices)) > 5 else ""
        if self.names is None:
            return f"row{'s' if len(list(indices)) > 1 else ''} {', '.join(str(self.line[i]) for i in shown)}{more}"
        return ", ".join(self.where(i) for i in shown) + more


def is_sdf(path: Path) -> bool:
    return path.name.lower().endswith(SDF_SUFFIXES)


def read(path: Path, smiles: str, sep: str = "", comment: str = "") -> Records:
    """The rows of ``path``: an SD file's records (``smiles`` names the column their SMILES go in) or a delimited
    file's rows. A format neither is (parquet, Excel, a gzip of something else) is one line naming it."""
    if is_sdf(path):
        return read_sdf(path, smiles)
    found = sniff_format(path)
    if found:
        raise ZooError(f"{path}: {found}; the molecules recipes read {READS}")
    return read_delimited(path, sep, comment)


def sniff_format(path: Path) -> str:
    """What a file is when it is not text the molecules recipes read ('' when it may be): by its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise ZooError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if head.startswith(b"PAR1"):
        return "a parquet file"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (an Excel .xlsx is one)"
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        return "an OLE file (an Excel .xls is one)"
    if head.startswith(b"\x1f\x8b") and not path.name.lower().endswith(TEXT_SUFFIXES):
        return "gzip-compressed, and not named .csv.gz, .tsv.gz, .txt.gz or .sdf.gz"
    if head.startswith(b"SQLite format"):
        return "an SQLite database"
    return ""


def sniff_separator(lines: list[str]) -> str:
    """The one of , tab ; | that splits every sample line (quotes honoured) into the same number of fields, the
    most fields where several do; a comma where none splits them (a single column)."""
    best, most = ",", 1
    for sep in SEPARATORS:
        counts = {len(cells) for cells in csv.reader(lines, delimiter=sep, skipinitialspace=True)}
        if len(counts) == 1 and (n := counts.pop()) > most:
            best, most = sep, n
    return best


def _text(path: Path) -> str:
    try:
        raw = gzip.open(path).read() if path.name.lower().endswith(".gz") else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise ZooError(f"{path}: cannot read ({exc})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise not_utf8(path) from None


def read_delimited(path: Path, sep: str = "", comment: str = "") -> Records:
    """A delimited file: ``sep`` (sniffed among , tab ; | where not given; spaces after it ignored), lines that
    start with ``comment`` skipped (by default a run of ``#`` lines at the top, whose last line is the header when
    it has as many fields as the first row: FreeSolv's ``# compound id (and file prefix); SMILES; ...``)."""
    lines = _text(path).splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    header_from_comment = None
    if comment:
        numbered = [(n, line) for n, line in numbered if not line.lstrip().startswith(comment)]
    else:
        top = []
        while numbered and numbered[0][1].lstrip().startswith("#"):
            top.append(numbered.pop(0)[1])
        header_from_comment = top[-1].lstrip()[1:].strip() if top else None
    if not numbered:
        raise ZooError(f"{path}: empty file (no header row, no rows)")
    if not sep:
        sep = "\t" if path.name.lower().endswith((".tsv", ".tsv.gz")) else sniff_separator(
            [line for _, line in numbered[:50]])
    elif len(sep) != 1:
        sep = {"tab": "\t", "\\t": "\t", "space": " "}.get(sep, sep)
        if len(sep) != 1:
            raise ZooError(f"sep={sep!r}: one character (or tab, space)")
    parsed = list(csv.reader(io.StringIO("\n".join(line for _, line in numbered)), delimiter=sep,
                             skipinitialspace=True))
    if header_from_comment is not None:
        header = next(csv.reader([header_from_comment], delimiter=sep, skipinitialspace=True))
        if len(header) == len(parsed[0]) or (len(header) == len(parsed[0]) - 1 and parsed[0][-1] == ""):
            parsed.insert(0, header)
            numbered.insert(0, (numbered[0][0] - 1, header_from_comment))
    columns = [c.strip() for c in parsed[0]]
    if len(set(columns)) < len(columns):
        twice = next(c for c in columns if columns.count(c) > 1)
        raise ZooError(f"{path}: column {twice!r} appears twice in the header")
    rows, line = [], []
    for (n, _), cells in zip(numbered[1:], parsed[1:]):  # cells past the header's go; missing ones are blank
        rows.append({c: (cells[k].strip() if k < len(cells) else "") for k, c in enumerate(columns)})
        line.append(n)
    return Records(path, columns, rows, line=line)


def read_sdf(path: Path, smiles: str) -> Records:
    """An SD file's records as rows: each one's properties (as written), its name (the ``name`` column) and its
    molecule as SMILES (the ``smiles`` column; blank where RDKit cannot parse the record, so the caller counts
    and names it). Records are the blocks between ``$$$$`` lines."""
    from rdkit import Chem

    text = _text(path)
    blocks = [b for b in text.split("$$$$") if b.strip()]
    if not blocks:
        raise ZooError(f"{path}: no records (an SD file's records end with $$$$ lines)")
    names, rows, columns = [], [], [NAME, smiles]
    for block in blocks:
        block = block.lstrip("\r\n")
        name = block.splitlines()[0].strip() if block.strip() else ""
        end = block.find("M  END")
        mol = Chem.MolFromMolBlock(block[:end + 6], sanitize=True) if end >= 0 else None
        props = _properties(block)
        for key in props:
            if key not in columns:
                columns.append(key)
        names.append(name)
        rows.append({NAME: name, smiles: Chem.MolToSmiles(mol) if mol is not None and mol.GetNumAtoms() else "",
                     **props})
    for row in rows:
        for c in columns:
            row.setdefault(c, "")
    return Records(path, columns, rows, names=names)


def _properties(block: str) -> dict[str, str]:
    """The data items of one SD record: ``> <NAME>`` (or ``>  <NAME> (n)``) lines, each followed by its value
    lines up to a blank one."""
    props, key, value = {}, None, []
    for line in block.splitlines():
        if line.startswith(">") and "<" in line and ">" in line[line.index("<"):]:
            key, value = line[line.index("<") + 1:line.index(">", line.index("<"))], []
        elif key is not None:
            if line.strip() == "":
                props[key], key = "\n".join(value).strip(), None
            else:
                value.append(line)
    if key is not None:
        props[key] = "\n".join(value).strip()
    return props
