"""Mutations: the wild type (a FASTA file or the sequence), H24C:A50G strings checked against it, the mutant
sequences they spell, and the positions a mutation string names."""
from __future__ import annotations

import re
from pathlib import Path

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.protein.readers import FASTA_SUFFIXES, read_fasta
from recipe_zoo.recipes.protein.sequences import AMINO


def read_wild_type(text: str) -> str:
    """A FASTA file (its first record) or the sequence itself."""
    path = Path(text).expanduser()
    if path.suffix.lower() in FASTA_SUFFIXES or path.is_file():
        if not path.is_file():
            raise ZooError(f"wt={text}: no such FASTA file")
        return read_fasta(path)[0][1]
    return text


def parse_mutations(text: str, wt: str, offset: int, where: str) -> list[tuple[int, str, str]]:
    """'H24C:A50G' -> [(index into wt, 'H', 'C'), ...], each wild-type letter checked against wt."""
    out = []
    for part in text.strip().split(":"):
        m = re.fullmatch(r"([A-Z])(\d+)([A-Z])", part.strip())
        if not m:
            raise ZooError(f"{where}: mutation {part!r} is not like H24C (or H24C:A50G for several)")
        w, pos, mt = m.group(1), int(m.group(2)), m.group(3)
        i = pos - offset
        if not 0 <= i < len(wt):
            raise ZooError(f"{where}: position {pos} of {part} is outside the wild type "
                           f"({offset}..{offset + len(wt) - 1} with offset={offset})")
        if wt[i] != w:
            raise ZooError(f"{where}: {part} says {w} at {pos} but the wild type has {wt[i]} there (offset={offset})")
        if mt not in AMINO:
            raise ZooError(f"{where}: {part} mutates to {mt!r}, not one of the 20 amino acids")
        out.append((i, w, mt))
    return out


def mutant_sequence(wt: str, variant: list[tuple[int, str, str]]) -> str:
    """The wild type with the variant's mutations applied (H24C:A50G and A50G:H24C are one sequence)."""
    seq = list(wt)
    for i, _, mt in variant:
        seq[i] = mt
    return "".join(seq)


def mutation_positions(text: str, where: str) -> tuple[int, ...]:
    """'H24C:A50G' -> (24, 50); '' or a synonymous 'wt' -> ()."""
    parts = [p.strip() for p in text.strip().split(":") if p.strip() and p.strip().lower() not in ("wt", "_wt")]
    out = []
    for part in parts:
        m = re.fullmatch(r"[A-Z*]?(\d+)[A-Z*]?", part)
        if not m:
            raise ZooError(f"{where}: mutation {part!r} is not like H24C (or H24C:A50G for several)")
        out.append(int(m.group(1)))
    return tuple(out)
