"""The dataset API: how a domain declares the datasets its recipes use, and where their files are found.

A dataset is declared beside the recipes that use it (each domain's ``datasets.py``; the image sets vision,
contrastive and diffusion share in ``recipes/image_datasets.py``; a recipe file of a user's own may declare its
own), the way ``@recipe`` registers a recipe:

    MY_SET = dataset(DatasetInfo(name="my-set", domain="vision", source="cache", path="vision/my_set", ...))

and a recipe finds its files with ``locate(name)``. Declaring is readable without importing torch: a datasets
module imports this module and nothing heavy, so ``zoo data list`` stays as fast as ``zoo list``. The data cache is
``$ZOO_DATA`` (default ``~/.cache/zoo``): ``recipe_zoo.core.downloads`` fills it (``zoo data fetch NAME``, checked by
sha256); offline, the same layout placed by hand (``ZOO_DATA=../shared/data`` on the zoo's own machines).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recipe_zoo.core.errors import ZooError


@dataclass(frozen=True)
class Download:
    url: str
    sha256: str | None  # of the downloaded file; None when only the extracted tree can be checked
    archive_root: str = ""  # folder inside the archive that becomes the dataset folder
    select: tuple[tuple[str, int], ...] = ()  # (subfolder glob, first N files per class folder) subsets
    unpack: bool = True  # False: an archive kept as the file it is (read in place by the recipe)


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    domain: str
    source: str  # "bundled" (ships with a dependency), "cache" (files in $ZOO_DATA) or "torchvision"
    description: str
    split: str  # how it splits, as the board shows it
    metric: str  # what is scored on it, as the board shows it
    path: str = ""  # relative to the cache root
    downloads: tuple[Download, ...] = ()  # each an archive to unpack or a file to place as is
    tree_sha256: str | None = None  # digest over "relpath sha256" lines of every file, sorted
    info: dict = field(default_factory=dict)  # what its recipes read of it: target columns, label values, ...
    build: Callable[[list[Path], Path], None] | None = None  # build(downloaded files in order, out folder)
    declared_in: str = ""  # the module that declared it (set by ``dataset``)


DATASETS: dict[str, DatasetInfo] = {}


def dataset(info: DatasetInfo) -> DatasetInfo:
    """Register ``info`` under its name and return it. A name is declared once: a second, different declaration
    (another module, another content) is an error naming both places."""
    import inspect

    frame = inspect.currentframe().f_back
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    info = DatasetInfo(**{**info.__dict__, "declared_in": info.declared_in or module})
    known = DATASETS.get(info.name)
    if known is not None and known != info:
        raise ZooError(f"dataset {info.name!r} is declared twice: in {known.declared_in} and in {info.declared_in}")
    DATASETS[info.name] = info
    return info


def is_dataset(name: str) -> bool:
    return name in DATASETS


def get(name: str) -> DatasetInfo:
    if name not in DATASETS:
        import difflib

        near = difflib.get_close_matches(name, list(DATASETS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(sorted(DATASETS))}"
        raise ZooError(f"unknown dataset {name!r}{hint}")
    return DATASETS[name]


def cache_root() -> Path:
    return Path(os.environ.get("ZOO_DATA", Path.home() / ".cache" / "zoo")).expanduser()


def locate(name: str) -> Path:
    """The dataset's folder or file in the cache; a clear error when it is not there."""
    info = get(name)
    path = cache_root() / info.path
    if info.source == "cache" and not path.exists():
        raise ZooError(f"dataset {name!r} not found at {path}: run `zoo data fetch {name}` online, or place the "
                       f"files there (set ZOO_DATA to the cache folder that holds {info.path}/)")
    return path


def source_path(data: str) -> Path:
    """What ``data=`` names: a declared dataset's place in the cache, else a file or folder of the user's."""
    return locate(data) if is_dataset(data) else Path(data).expanduser()


def is_present(info: DatasetInfo) -> bool:
    return info.source == "bundled" or (cache_root() / info.path).exists()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(f"{p.relative_to(root).as_posix()} {sha256_file(p)}\n".encode())
    return h.hexdigest()


def own_data_key(path: Path) -> str:
    """A user's data is its own benchmark, keyed by content alone: same files, same key, wherever
    and under whatever folder name they live."""
    digest = sha256_file(path) if path.is_file() else tree_sha256(path)
    return f"own:{digest[:12]}"


def data_key(data: str) -> str:
    """The benchmark key of a run's ``data``: a dataset's name, else ``own_data_key`` of a file or folder (a missing
    one keeps its name). A prepared folder is its source's benchmark: ``prepared.benchmark_key`` reads that."""
    if data in DATASETS or not Path(data).exists():
        return data
    return own_data_key(Path(data))
