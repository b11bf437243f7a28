"""Dataset registry and ``zoo data fetch`` against a local HTTP server (never the internet)."""
import dataclasses
import functools
import gzip
import hashlib
import http.server
import io
import tarfile
import threading
import zipfile

import pytest

from conftest import zoo, zoo_in_process
from recipe_zoo import data
from recipe_zoo.core import datasets, downloads
from recipe_zoo.recipes.llm import debian_docs
from recipe_zoo.core.errors import ZooError


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _tar(path, files: dict, links: dict | None = None):
    with tarfile.open(path, "w:gz") as tf:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)


@pytest.fixture
def fake_dataset():
    added = []

    def add(**kw):
        info = datasets.dataset(datasets.DatasetInfo(domain="vision", source="cache", description="t", split="t",
                                                     metric="t", **kw))
        added.append(info.name)
        return info

    yield add
    for name in added:
        datasets.DATASETS.pop(name)


def test_fetch_archive_selects_and_verifies_tree(server, fake_dataset, tmp_path):
    www, url = server
    files = {f"repo-abc/{split}/{cls}/{i:04d}.jpg": f"{split}{cls}{i}".encode()
             for split in ("train", "test") for cls in ("cat", "dog") for i in range(4)}
    _tar(www / "a.tar.gz", files)
    expected = tmp_path / "expected"
    for name, content in files.items():
        _, split, cls, fname = name.split("/")
        if int(fname[:4]) < (3 if split == "train" else 2):
            (expected / split / cls).mkdir(parents=True, exist_ok=True)
            (expected / split / cls / fname).write_bytes(content)
    fake_dataset(name="tiny-cifar", path="vision/tiny", tree_sha256=datasets.tree_sha256(expected),
                 downloads=(datasets.Download(url=f"{url}/a.tar.gz",
                                          sha256=hashlib.sha256((www / "a.tar.gz").read_bytes()).hexdigest(),
                                          archive_root="repo-abc", select=(("train/*", 3), ("test/*", 2))),))
    cache = tmp_path / "cache"
    target = downloads.fetch("tiny-cifar", root=cache)
    assert target == cache / "vision/tiny"
    assert sorted(p.name for p in (target / "train" / "cat").iterdir()) == ["0000.jpg", "0001.jpg", "0002.jpg"]
    assert datasets.tree_sha256(target) == datasets.tree_sha256(expected)


def test_fetch_several_plain_files_through_cli(server, fake_dataset, tmp_path):
    www, url = server
    (www / "f.csv").write_text("a,b\n1,2\n")
    (www / "labels.gz").write_bytes(b"\x1f\x8b not unpacked")
    digest = hashlib.sha256(b"a,b\n1,2\n").hexdigest()
    gz_digest = hashlib.sha256(b"\x1f\x8b not unpacked").hexdigest()
    fake_dataset(name="tiny-csv", path="tabular/tiny", downloads=(datasets.Download(url=f"{url}/f.csv", sha256=digest),
                                                                  datasets.Download(url=f"{url}/labels.gz", sha256=gz_digest)))
    target = downloads.fetch("tiny-csv", root=tmp_path / "c")
    assert (target / "f.csv").read_text() == "a,b\n1,2\n" and (target / "labels.gz").is_file()


def test_sha256_mismatch_discards_file(server, fake_dataset, tmp_path):
    www, url = server
    (www / "f.csv").write_text("tampered")
    fake_dataset(name="bad-sum", path="x/bad", downloads=(datasets.Download(url=f"{url}/f.csv", sha256="0" * 64),))
    with pytest.raises(ZooError, match="sha256 mismatch"):
        downloads.fetch("bad-sum", root=tmp_path / "c")
    assert not (tmp_path / "c" / "x" / "bad").exists()


def test_tree_mismatch_places_nothing(server, fake_dataset, tmp_path):
    www, url = server
    _tar(www / "a.tar.gz", {"r/train/cat/0.jpg": b"x"})
    fake_dataset(name="bad-tree", path="x/tree", tree_sha256="f" * 64,
                 downloads=(datasets.Download(url=f"{url}/a.tar.gz", sha256=None, archive_root="r"),))
    with pytest.raises(ZooError, match="does not match the registry"):
        downloads.fetch("bad-tree", root=tmp_path / "c")
    assert not (tmp_path / "c" / "x" / "tree").exists()


@pytest.mark.parametrize("files,links,message", [
    ({"../evil.txt": b"x"}, None, "escapes the target"),
    ({"/etc/evil.txt": b"x"}, None, "escapes the target"),
    ({"ok.txt": b"x"}, {"link": "../../etc/passwd"}, "points outside"),
    ({"ok.txt": b"x"}, {"abs": "/etc/passwd"}, "points outside"),
])
def test_safe_extract_refuses_crafted_tars(tmp_path, files, links, message):
    archive = tmp_path / "evil.tar.gz"
    _tar(archive, files, links)
    with pytest.raises(ZooError, match=message):
        downloads.safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_safe_extract_refuses_zip_slip_and_bombs(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../slip.txt", "x")
    with pytest.raises(ZooError, match="escapes"):
        downloads.safe_extract(archive, tmp_path / "out")
    big = tmp_path / "big.zip"
    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * 10_000)
    with pytest.raises(ZooError, match="unpacks to more than"):
        downloads.safe_extract(big, tmp_path / "out2", max_bytes=1000)


def test_fetch_unreachable_address_is_a_clear_error(fake_dataset, tmp_path):
    fake_dataset(name="offline", path="x/off", downloads=(datasets.Download(url="http://127.0.0.1:9/none.csv", sha256=None),))
    with pytest.raises(ZooError, match="cannot download http://127.0.0.1:9/none.csv"):
        downloads.fetch("offline", root=tmp_path / "c")


def test_cli_data_list_and_errors(tmp_path):
    proc = zoo("data", "list", env={"ZOO_DATA": str(tmp_path)})
    assert proc.returncode == 0
    assert "digits" in proc.stdout and "cifar10-subset" in proc.stdout
    proc = zoo_in_process("data", "fetch", "digit")
    assert proc.returncode == 2 and "unknown dataset 'digit'; did you mean 'digits'?" in proc.stderr
    proc = zoo_in_process("data", "fetch", "digits")
    assert proc.returncode == 2 and "bundled: nothing to fetch" in proc.stderr


def test_registered_cifar_subset_matches_the_cache_layout():
    info = data.load_all()["cifar10-subset"]
    assert info.path == "vision/cifar10_subset" and len(info.tree_sha256) == 64


def test_cli_fetch_through_a_mirror_verifies_checksums(server, tmp_path):
    """The registered MNIST files, served by a local mirror with wrong content, are refused."""
    www, url = server
    raw = www / "raw.githubusercontent.com/lijie2020/vae/6aa58aba724f46dba967fc7058945941d171d433/data/MNIST/MNIST/raw"
    raw.mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (raw / name).write_bytes(b"not mnist")
    proc = zoo("data", "fetch", "mnist-test", env={"ZOO_DATA": str(tmp_path / "cache"), "ZOO_MIRROR": url})
    assert proc.returncode == 2 and "sha256 mismatch" in proc.stderr and "t10k-images" in proc.stderr
    assert not (tmp_path / "cache" / "vision" / "mnist_test").exists()


def _deb(path, files: dict, links: dict | None = None):
    """A Debian binary package: an ar archive of debian-binary, control.tar.xz and data.tar.xz (``files``)."""
    data_tar = io.BytesIO()
    with tarfile.open(fileobj=data_tar, mode="w:xz") as tf:
        for name, content in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo("./" + name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    out = b"!<arch>\n"
    for name, blob in (("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", data_tar.getvalue())):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(blob):<10}`\n".encode() + blob + b"\n" * (len(blob) % 2)
    path.write_bytes(out)
    return hashlib.sha256(out).hexdigest()


LINUX = "usr/share/doc/linux-doc-6.1/Documentation/"
PYTHON = "usr/share/doc/python3.11/html/_sources/"


def _docs_dataset(www, url, fake_dataset, linux: dict, python: dict, links: dict | None = None):
    sums = [_deb(www / "linux.deb", linux, links), _deb(www / "python.deb", python)]
    return fake_dataset(name="tiny-docs", path="text/tiny_docs", build=debian_docs.linux_python_docs,
                        downloads=tuple(datasets.Download(f"{url}/{n}.deb", s, unpack=False)
                                        for n, s in zip(("linux", "python"), sums)))


def test_a_dataset_built_from_debian_packages(server, fake_dataset, tmp_path):
    """linux-python-docs' build: the .rst/.txt documents read out of each package's data.tar (gzipped ones
    decompressed; other files, links and other folders left out) into one file, in the order of a hash of their
    names, a blank line between; the registered dataset names its packages by checksum and its result by tree."""
    www, url = server
    linux = {LINUX + "PCI/pci.rst.gz": gzip.compress(b"PCI\n===\n\nBuses.\n"), LINUX + "old.txt.gz":
             gzip.compress(b"\n\nplain text\n\n\n"), LINUX + "abi.yaml.gz": gzip.compress(b"skip: me\n"),
             "usr/share/doc/linux-doc-6.1/html/_sources/PCI/pci.rst.txt": b"a copy\n"}
    python = {PYTHON + "tutorial/index.rst.txt": "Tutorial — héllo\n".encode(), PYTHON + "x.js": b"skip"}
    _docs_dataset(www, url, fake_dataset, linux, python, links={LINUX + "link.rst.gz": "PCI/pci.rst.gz"})
    target = downloads.fetch("tiny-docs", root=tmp_path / "cache")
    texts = {"linux/PCI/pci.rst": "PCI\n===\n\nBuses.\n", "linux/old.txt": "plain text\n",
             "python/tutorial/index.rst.txt": "Tutorial — héllo\n"}
    order = sorted(texts, key=lambda name: hashlib.sha256(name.encode()).hexdigest())
    assert [p.name for p in target.iterdir()] == ["docs.txt"]
    assert (target / "docs.txt").read_text() == "\n".join(texts[name] for name in order)
    info = data.load_all()["linux-python-docs"]
    assert info.build is debian_docs.linux_python_docs and len(info.tree_sha256) == 64
    assert all(d.sha256 and not d.unpack for d in info.downloads)


@pytest.mark.parametrize("linux, python, message", [
    (None, {PYTHON + "a.rst.txt": b"x"}, "not a Debian package"),
    ({LINUX + "a.rst.gz": gzip.compress(b"x")}, {"usr/share/doc/other/a.rst.txt": b"x"}, "none of its files match"),
    ({LINUX + "bad.rst.gz": gzip.compress(b"caf\xe9\n")}, {PYTHON + "a.rst.txt": b"x"}, "is not UTF-8 text"),
])
def test_a_package_that_is_not_the_expected_one_places_nothing(server, fake_dataset, tmp_path, linux, python,
                                                               message):
    www, url = server
    _docs_dataset(www, url, fake_dataset, linux or {}, python)
    if linux is None:  # a file that is no ar archive at all, under its own checksum
        (www / "linux.deb").write_bytes(b"<html>not found</html>")
        info = datasets.DATASETS["tiny-docs"]
        datasets.DATASETS["tiny-docs"] = dataclasses.replace(info, downloads=(
            datasets.Download(f"{url}/linux.deb", hashlib.sha256(b"<html>not found</html>").hexdigest(), unpack=False),
            info.downloads[1]))
    with pytest.raises(ZooError, match=message) as info:
        downloads.fetch("tiny-docs", root=tmp_path / "cache")
    assert "\n" not in str(info.value) and not (tmp_path / "cache" / "text" / "tiny_docs").exists()
    truncated = tmp_path / "cut.deb"
    _deb(truncated, {PYTHON + "a.rst.txt": b"x" * 5000})
    truncated.write_bytes(truncated.read_bytes()[:-100])
    with pytest.raises(ZooError, match="runs past the end of the file"):
        list(debian_docs.package_files(truncated, debian_docs.PYTHON_DOCS))


def test_data_list_imports_no_torch_and_each_dataset_is_declared_once_beside_its_recipes(tmp_path):
    """``zoo data list`` reads every domain's declarations without torch; each name is declared by one module,
    under ``recipe_zoo.recipes``; a second declaration of a name elsewhere is an error naming both places."""
    import subprocess
    import sys

    code = ("import sys; from recipe_zoo.cli import main; code = main(['data', 'list']); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "ZOO_DATA": str(tmp_path)})
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("no torch"), proc.stdout[-500:] + proc.stderr
    known = data.load_all()
    modules = data.dataset_modules()
    assert len(known) >= 20 and {info.declared_in for info in known.values()} <= set(modules)
    info = known["digits"]
    with pytest.raises(ZooError, match=r"dataset 'digits' is declared twice: in recipe_zoo\.recipes\.image_datasets "
                                       r"and in test_data"):
        datasets.dataset(dataclasses.replace(info, description="another", declared_in=""))
    with pytest.raises(ZooError, match="declared twice"):  # the same content from another module too
        datasets.dataset(dataclasses.replace(info, declared_in=""))
    assert datasets.dataset(info) == info  # its own module imported again (a reload): no error
