"""Filling the data cache: a declared dataset's downloads fetched, checked against their sha256, extracted safely
(no absolute paths, ``..``, links out, devices or oversized archives) and moved into place; and a single file
(pretrained weights) downloaded and checked. ``zoo data fetch NAME`` calls ``fetch``; nothing here runs in tests."""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from recipe_zoo.core.datasets import Download, cache_root, get, sha256_file, tree_sha256
from recipe_zoo.core.errors import ZooError

MAX_ARCHIVE_BYTES = 4 * 2**30  # refuse archives that unpack to more than this


def mirrored(url: str) -> str:
    """``$ZOO_MIRROR`` (e.g. ``http://mirror.local/zoo``) serves ``<mirror>/<host>/<path>`` instead;
    checksums are verified the same way, so a mirror cannot change what lands in the cache."""
    mirror = os.environ.get("ZOO_MIRROR")
    if not mirror:
        return url
    return mirror.rstrip("/") + "/" + url.split("://", 1)[1]


def download(url: str, dest: Path, sha256: str | None, timeout: float = 60) -> Path:
    """Stream ``url`` to ``dest`` and check its sha256 before it is used."""
    url = mirrored(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as f:
            shutil.copyfileobj(response, f, 1 << 20)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ZooError(f"cannot download {url}: {exc}") from None
    if sha256 is not None:
        got = sha256_file(tmp)
        if got != sha256:
            tmp.unlink()
            raise ZooError(f"{url}: sha256 mismatch (expected {sha256}, got {got}); file discarded")
    os.replace(tmp, dest)
    return dest


def _check_member(name: str, is_link: bool, target: str | None) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        raise ZooError(f"archive member {name!r} escapes the target folder; refusing to extract")
    if is_link and target is not None:
        t = PurePosixPath(target)
        if t.is_absolute() or ".." in (p.parent / t).parts:
            raise ZooError(f"archive link {name!r} -> {target!r} points outside the target folder; refusing")


def safe_extract(archive: Path, dest: Path, max_bytes: int = MAX_ARCHIVE_BYTES) -> None:
    """Extract a tar or zip archive, refusing absolute paths, ``..``, links out and oversized contents."""
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for m in members:
                _check_member(m.filename, False, None)
            if sum(m.file_size for m in members) > max_bytes:
                raise ZooError(f"{archive}: unpacks to more than {max_bytes} bytes; refusing")
            zf.extractall(dest)
        return
    try:
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            for m in members:
                if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                    raise ZooError(f"archive member {m.name!r} is a device or fifo; refusing")
                _check_member(m.name, m.issym() or m.islnk(), m.linkname if m.issym() else None)
                if m.islnk():
                    _check_member(m.linkname, False, None)
            if sum(m.size for m in members) > max_bytes:
                raise ZooError(f"{archive}: unpacks to more than {max_bytes} bytes; refusing")
            tf.extractall(dest, filter="data")
    except tarfile.TarError as exc:
        raise ZooError(f"{archive}: not a readable tar or zip archive ({exc})") from None


def _select(src: Path, dest: Path, rules: tuple[tuple[str, int], ...]) -> None:
    for pattern, first_n in rules:
        for class_dir in sorted(p for p in src.glob(pattern) if p.is_dir()):
            out = dest / class_dir.relative_to(src)
            out.mkdir(parents=True, exist_ok=True)
            for f in sorted(p for p in class_dir.iterdir() if p.is_file())[:first_n]:
                shutil.copy2(f, out / f.name)


def fetch(name: str, root: Path | None = None) -> Path:
    """Download a cache dataset into ``root`` (default the cache), verified, then moved into place."""
    info = get(name)
    if info.source != "cache" or not info.downloads:
        raise ZooError(f"dataset {name!r} is {info.source}: nothing to fetch")
    root = root or cache_root()
    target = root / info.path
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=_writable_parent(root)) as tmp:
        tmp = Path(tmp)
        staged = tmp / "staged"
        staged.mkdir()
        placed = [_stage(d, tmp / f"download-{i}", staged) for i, d in enumerate(info.downloads)]
        if info.build is not None:  # the dataset's files are made from the downloads
            staged = tmp / "built"
            info.build(placed, staged)
        if info.tree_sha256 is not None:
            got = tree_sha256(staged)
            if got != info.tree_sha256:
                raise ZooError(f"dataset {name!r}: content sha256 {got} does not match the registry "
                               f"({info.tree_sha256}); nothing was placed in the cache")
        target.parent.mkdir(parents=True, exist_ok=True)
        files = list(staged.iterdir())
        if PurePosixPath(info.path).suffix and len(files) == 1 and files[0].is_file():
            shutil.move(files[0], target)  # a one-file dataset is that file, beside its siblings
        else:
            shutil.move(staged, target)
    return target


def _stage(d: Download, work: Path, staged: Path) -> Path:
    """Download one file into ``work``; unpack archives (or their selected subset) into ``staged``. Returns the
    file placed in ``staged``, or ``staged`` for an archive."""
    work.mkdir()
    filename = PurePosixPath(d.url.split("?")[0]).name or "download"
    path = download(d.url, work / filename, d.sha256)
    is_archive = d.unpack and (not filename.endswith(".gz") or filename.endswith(".tar.gz"))
    if is_archive and (tarfile.is_tarfile(path) or zipfile.is_zipfile(path)):
        unpacked = work / "unpacked"
        safe_extract(path, unpacked)
        src = unpacked / d.archive_root if d.archive_root else unpacked
        if d.select:
            _select(src, staged, d.select)
        else:
            for item in src.iterdir():
                shutil.move(item, staged / item.name)
        return staged
    return Path(shutil.move(path, staged / filename))


def _writable_parent(root: Path) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"{root}: cannot write to the data cache: {exc.strerror}") from None
    return root
