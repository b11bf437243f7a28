"""Prepared data: a dataset written once in the form training streams from (token shards, decoded image arrays), by
``zoo data prepare RECIPE data=SOURCE`` or by a run with ``stream=true``.

A prepared folder holds its files and ``prepared.json``: the kind (``tokens``, ``images``), the source and its
benchmark key (a prepared named benchmark is still that benchmark), the settings fixed at prepare time (a tokenizer,
an image size, the split fractions) and a key over the source and those settings. Preparing again with the same key
reuses the folder; a changed source (any file's size or modification time) or setting makes a new one. A run given
the folder (``data=FOLDER``) is checked against the fixed settings: one that asks for something else gets one line.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recipe_zoo.core import datasets, owned
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.progress import Progress

FORMAT, FORMAT_VERSION, MANIFEST = "recipe-zoo-prepared", 1, "prepared.json"


def is_prepared(data: str | os.PathLike) -> bool:
    return bool(str(data)) and (Path(data) / MANIFEST).is_file()


def benchmark_key(data: str) -> str:
    """The benchmark key of ``data``: a prepared folder is still its source's benchmark (its manifest records which),
    anything else is keyed by ``datasets.data_key`` (a dataset's name, or ``own:<content hash>``)."""
    if is_prepared(data) and not datasets.is_dataset(data):
        return str(read(Path(data)).get("benchmark") or datasets.own_data_key(Path(data)))
    return datasets.data_key(data)


def cache_root() -> Path:
    """``$ZOO_PREPARED``, else ``~/.cache/zoo/prepared`` (``$XDG_CACHE_HOME`` honoured): beside the feature caches,
    not in the data cache (which may be read-only)."""
    if os.environ.get("ZOO_PREPARED"):
        return Path(os.environ["ZOO_PREPARED"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo" / "prepared"


def fingerprint(path: Path) -> str:
    """A source's identity without reading it: each file's relative path, size and modification time (a tree of
    gigabytes is fingerprinted in a listing, and any edit changes it)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for p in files:
        st = p.stat()
        name = p.relative_to(path).as_posix() if p != path else p.name
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@dataclass
class PrepareRun:
    """What a prepare hook is handed outside a run (``zoo data prepare``): the log, a seed, the reports."""

    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr, flush=True)
    seed: int = 0
    extra: dict = field(default_factory=dict)

    inspecting = False

    def progress(self, total: int | None, what: str, unit: str = "items") -> Progress:
        return Progress(total, what, self.log, unit)

    def report(self, key: str, value) -> None:  # what a run would put in its summary: the log says it here
        self.log(f"{key}: {value}")

    def record_split(self, parts) -> None:
        pass


def settings_of(cfg, fields: tuple[str, ...]) -> dict:
    return {name: getattr(cfg, name) for name in fields}


def _zoo_prepared(folder: Path) -> bool:
    """``folder`` holds a manifest this zoo wrote (any kind, any version): a prepare may replace it."""
    try:
        return json.loads((folder / MANIFEST).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def ensure(cfg, run, *, kind: str, fields: tuple[str, ...], recipe: str, make: Callable[[Path], dict],
           out: Path | None = None, force: bool = False) -> Path:
    """The prepared folder of ``cfg.data`` under the settings ``fields`` name, made by ``make(folder) -> dict``
    (what to add to the manifest: the parts, their sizes) unless an up-to-date one is there. Written into a temp
    folder and renamed into place, so an interrupted prepare leaves nothing half-made under the final name."""
    source = datasets.source_path(cfg.data)
    if not source.exists():
        raise ZooError(f"data={cfg.data}: no such file or folder, and not a dataset name (see `zoo data list`)")
    settings = settings_of(cfg, fields)
    key = hashlib.sha256(json.dumps({"kind": kind, "format_version": FORMAT_VERSION, "source": fingerprint(source),
                                     "settings": settings}, sort_keys=True, default=str).encode()).hexdigest()
    name = Path(str(cfg.data).rstrip("/")).name or "data"
    folder = Path(out).expanduser() if out else cache_root() / f"{kind}-{name}-{key[:12]}"
    manifest_path = folder / MANIFEST
    if out is not None and not _zoo_prepared(folder):  # a folder of the user's is never replaced
        owned.check_folder(folder, "--out")
    if manifest_path.is_file() and not force:
        current = json.loads(manifest_path.read_text())
        if current.get("key") == key:
            run.log(f"prepared data up to date: {folder}")
            return folder
        if out is None:
            raise ZooError(f"{folder}: holds data prepared from another source or settings")
    run.log(f"preparing {cfg.data} ({kind}) into {folder}")
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        parts = make(tmp)
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "recipe": recipe,
                    "source": str(cfg.data), "source_path": str(source.resolve()), "benchmark": benchmark_key(cfg.data),
                    "settings": settings, "key": key, **parts}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    run.log(f"prepared: {folder}")
    return folder


def read(folder: str | os.PathLike, kind: str | None = None) -> dict:
    """A prepared folder's manifest, checked: its format, version and kind (any, when None), and that its files
    are there."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ZooError(f"{path}: not a prepared-data manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ZooError(f"{path}: not a recipe zoo prepared-data manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ZooError(f"{path}: format_version {manifest.get('format_version')!r}, and this zoo reads "
                       f"{FORMAT_VERSION}; prepare the data again (zoo data prepare)")
    if kind is not None and manifest.get("kind") != kind:
        raise ZooError(f"{folder}: prepared as {manifest.get('kind')!r} data (by {manifest.get('recipe')}), and this "
                       f"recipe reads {kind!r} data")
    for name in manifest.get("files", []):
        if not owned.inside(folder, name, str(path)).is_file():
            raise ZooError(f"{folder / name}: not found (prepared.json lists it); prepare the data again")
    return manifest


def check(manifest: dict, cfg, folder: str | os.PathLike) -> None:
    """The run's config must ask for what was fixed at prepare time (the tokenizer, the image size, the split)."""
    for name, fixed in manifest.get("settings", {}).items():
        asked = getattr(cfg, name, fixed)
        if asked != fixed:
            raise ZooError(f"data={folder}: prepared with {name}={fixed}, and this run asks {name}={asked}; set "
                           f"{name}={fixed}, or prepare again: zoo data prepare {manifest.get('recipe')} "
                           f"data={manifest.get('source')} {name}={asked}")
