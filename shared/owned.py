"""What the zoo may write to and read from: a folder it is told to write into is new, empty or one it wrote itself
(never a user's folder, wiped or mixed into); a file it is told to write is new or one it wrote; a name read from a
run's card or config stays inside the run folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from recipe_zoo.core.errors import ZooError

MARKER = ".zoo-written"  # in a folder the zoo wrote (an export): what wrote it
WRITTEN = ".zoo-written.json"  # beside files the zoo wrote into a user's folder (predictions): their names


def check_folder(folder: Path, what: str, owned: bool = False) -> None:
    """``folder`` may be written: absent, empty, holding the zoo's marker, or ``owned`` (a run's own folder)."""
    if folder.is_symlink():
        raise ZooError(f"{what} {folder}: a link; give the folder itself")
    if not folder.exists() or owned:
        return
    if not folder.is_dir():
        raise ZooError(f"{what} {folder}: a file, not a folder")
    if (folder / MARKER).is_file() or not any(folder.iterdir()):
        return
    raise ZooError(f"{what} {folder}: holds files the zoo did not write (no {MARKER}); give a new or empty folder")


def mark_folder(folder: Path, **what) -> None:
    """Say that the zoo wrote ``folder`` (what wrote it, as JSON): a later write there may replace it."""
    (folder / MARKER).write_text(json.dumps(what, sort_keys=True) + "\n")


def check_file(path: Path, what: str, owned: bool = False) -> None:
    """``path`` may be written: absent, ``owned`` (inside a run folder), or listed in its folder's ``WRITTEN``."""
    if path.is_symlink():
        raise ZooError(f"{what} {path}: a link; give a file of its own")
    if not path.exists() or owned:
        return
    if path.is_dir():
        raise ZooError(f"{what} {path}: a folder, not a file")
    if path.name not in _written(path.parent):
        raise ZooError(f"{what} {path}: exists, and the zoo did not write it; refusing to overwrite (remove it, or "
                       "give a new name)")


def mark_file(path: Path) -> None:
    """Record that the zoo wrote ``path`` (in its folder's ``WRITTEN``), so that a later run may replace it."""
    names = _written(path.parent) | {path.name}
    tmp = path.parent / f".{WRITTEN}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(sorted(names)) + "\n")
    os.replace(tmp, path.parent / WRITTEN)


def _written(folder: Path) -> set[str]:
    try:
        names = json.loads((folder / WRITTEN).read_text())
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def inside(base: Path, name: str, what: str) -> Path:
    """``base / name`` for a ``name`` read from a card, config or manifest: refused, in one line naming it, where
    it is absolute, climbs out with ``..`` or resolves outside ``base`` through a link."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ZooError(f"{what}: {name!r} is not a path inside {base}")
    path = base / name
    if not path.resolve().is_relative_to(base.resolve()):
        raise ZooError(f"{what}: {name!r} resolves outside {base} (a link)")
    return path
