"""Dataset registry and ``zoo data fetch`` against a local HTTP server (never the internet)."""
import functools
import hashlib
import http.server
import io
import tarfile
import threading
import zipfile

import pytest

from conftest import zoo
from recipe_zoo import data
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
        info = data.register(data.DatasetInfo(domain="vision", source="cache", description="t", split="t",
                                              metric="t", **kw))
        added.append(info.name)
        return info

    yield add
    for name in added:
        data.DATASETS.pop(name)


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
    fake_dataset(name="tiny-cifar", path="vision/tiny", tree_sha256=data.tree_sha256(expected),
                 downloads=(data.Download(url=f"{url}/a.tar.gz",
                                          sha256=hashlib.sha256((www / "a.tar.gz").read_bytes()).hexdigest(),
                                          archive_root="repo-abc", select=(("train/*", 3), ("test/*", 2))),))
    cache = tmp_path / "cache"
    target = data.fetch("tiny-cifar", root=cache)
    assert target == cache / "vision/tiny"
    assert sorted(p.name for p in (target / "train" / "cat").iterdir()) == ["0000.jpg", "0001.jpg", "0002.jpg"]
    assert data.tree_sha256(target) == data.tree_sha256(expected)


def test_fetch_several_plain_files_through_cli(server, fake_dataset, tmp_path):
    www, url = server
    (www / "f.csv").write_text("a,b\n1,2\n")
    (www / "labels.gz").write_bytes(b"\x1f\x8b not unpacked")
    digest = hashlib.sha256(b"a,b\n1,2\n").hexdigest()
    gz_digest = hashlib.sha256(b"\x1f\x8b not unpacked").hexdigest()
    fake_dataset(name="tiny-csv", path="tabular/tiny", downloads=(data.Download(url=f"{url}/f.csv", sha256=digest),
                                                                  data.Download(url=f"{url}/labels.gz", sha256=gz_digest)))
    target = data.fetch("tiny-csv", root=tmp_path / "c")
    assert (target / "f.csv").read_text() == "a,b\n1,2\n" and (target / "labels.gz").is_file()


def test_sha256_mismatch_discards_file(server, fake_dataset, tmp_path):
    www, url = server
    (www / "f.csv").write_text("tampered")
    fake_dataset(name="bad-sum", path="x/bad", downloads=(data.Download(url=f"{url}/f.csv", sha256="0" * 64),))
    with pytest.raises(ZooError, match="sha256 mismatch"):
        data.fetch("bad-sum", root=tmp_path / "c")
    assert not (tmp_path / "c" / "x" / "bad").exists()


def test_tree_mismatch_places_nothing(server, fake_dataset, tmp_path):
    www, url = server
    _tar(www / "a.tar.gz", {"r/train/cat/0.jpg": b"x"})
    fake_dataset(name="bad-tree", path="x/tree", tree_sha256="f" * 64,
                 downloads=(data.Download(url=f"{url}/a.tar.gz", sha256=None, archive_root="r"),))
    with pytest.raises(ZooError, match="does not match the registry"):
        data.fetch("bad-tree", root=tmp_path / "c")
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
        data.safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_safe_extract_refuses_zip_slip_and_bombs(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../slip.txt", "x")
    with pytest.raises(ZooError, match="escapes"):
        data.safe_extract(archive, tmp_path / "out")
    big = tmp_path / "big.zip"
    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * 10_000)
    with pytest.raises(ZooError, match="unpacks to more than"):
        data.safe_extract(big, tmp_path / "out2", max_bytes=1000)


def test_fetch_unreachable_address_is_a_clear_error(fake_dataset, tmp_path):
    fake_dataset(name="offline", path="x/off", downloads=(data.Download(url="http://127.0.0.1:9/none.csv", sha256=None),))
    with pytest.raises(ZooError, match="cannot download http://127.0.0.1:9/none.csv"):
        data.fetch("offline", root=tmp_path / "c")


def test_cli_data_list_and_errors(tmp_path):
    proc = zoo("data", "list", env={"ZOO_DATA": str(tmp_path)})
    assert proc.returncode == 0
    assert "digits" in proc.stdout and "cifar10-subset" in proc.stdout
    proc = zoo("data", "fetch", "digit")
    assert proc.returncode == 2 and "unknown dataset 'digit'; did you mean 'digits'?" in proc.stderr
    proc = zoo("data", "fetch", "digits")
    assert proc.returncode == 2 and "bundled: nothing to fetch" in proc.stderr


def test_registered_cifar_subset_matches_the_cache_layout():
    info = data.get("cifar10-subset")
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
