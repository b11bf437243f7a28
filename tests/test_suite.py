"""``zoo bench --suite gpu``: its entries are valid runs, it copies the data it reads, and (slow) the whole suite runs
on a CPU at a small scale on tiny stand-ins for its datasets, in the data cache's layout."""
import gzip
import struct

import numpy as np
import pytest
from PIL import Image

from conftest import zoo

CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def make_suite_data(root):
    """Tiny files where the suite's datasets live in the cache: the texts, image folders, MNIST's idx files, the
    membrane slices, the housing table, ESOL's table and the beta-lactamase FASTA."""
    rng = np.random.default_rng(0)
    text = root / "text" / "tinyshakespeare"
    text.mkdir(parents=True)
    (text / "input.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\n" * 1200)
    docs = root / "text" / "linux_python_docs"
    docs.mkdir(parents=True)
    (docs / "docs.txt").write_text("PCI\n===\n\nThe ``pci_enable_device()`` call wakes the device.\n\n" * 1500)
    for part, n in (("train", 12), ("test", 4)):
        for c, name in enumerate(CIFAR_CLASSES):
            folder = root / "vision" / "cifar10_subset" / part / name
            folder.mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                img[:, :, c % 3] = 25 * c  # a class signal
                Image.fromarray(img).save(folder / f"{i:04d}.jpg")
    mnist = root / "vision" / "mnist_test"
    mnist.mkdir(parents=True)
    labels = np.arange(200, dtype=np.uint8) % 10
    images = rng.integers(0, 60, (200, 28, 28), dtype=np.uint8)
    for i, label in enumerate(labels):
        images[i, 4 + 2 * label:8 + 2 * label, 6:22] = 255  # a bar whose height is the digit
    with gzip.open(mnist / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, 200, 28, 28) + images.tobytes())
    with gzip.open(mnist / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 0x801, 200) + labels.tobytes())
    isbi = root / "medical_seg" / "isbi2012_membrane" / "train"
    (isbi / "image").mkdir(parents=True)
    (isbi / "label").mkdir()
    for i in range(30):  # ISBI's 30 slices, 64 px instead of 512
        label = np.full((64, 64), 255, np.uint8)
        label[rng.integers(0, 64, 3)] = 0  # membrane lines (0) on cell interiors (255)
        label[:, rng.integers(0, 64, 3)] = 0
        image = np.where(label == 0, 60, 180).astype(np.uint8) + rng.integers(0, 30, (64, 64), dtype=np.uint8)
        Image.fromarray(image).save(isbi / "image" / f"{i}.png")
        Image.fromarray(label).save(isbi / "label" / f"{i}.png")
    housing = root / "tabular" / "california_housing"
    housing.mkdir(parents=True)
    rows = ["longitude,latitude,housing_median_age,total_rooms,total_bedrooms,population,households,median_income,"
            "median_house_value,ocean_proximity"]
    for i in range(300):
        income = rng.uniform(1, 10)
        rows.append(f"{rng.uniform(-124, -114):.2f},{rng.uniform(32, 42):.2f},{rng.integers(1, 52)},"
                    f"{rng.integers(100, 5000)},{rng.integers(20, 900)},{rng.integers(50, 3000)},"
                    f"{rng.integers(20, 900)},{income:.4f},{income * 40000 + rng.normal(0, 20000):.0f},"
                    f"{'INLAND' if i % 3 else 'NEAR BAY'}")
    (housing / "housing.csv").write_text("\n".join(rows) + "\n")
    mols = root / "molecules" / "moleculenet"
    mols.mkdir(parents=True)
    smiles = [f"{'C' * n}O" for n in range(1, 15)] + [f"{'C' * n}N" for n in range(1, 15)] + \
             [f"c1ccccc1{'C' * n}" for n in range(0, 12)]
    (mols / "ESOL_delaney-processed.csv").write_text(
        "Compound ID,measured log solubility in mols per litre,smiles\n"
        + "".join(f"m{i},{-0.3 * len(s):.2f},{s}\n" for i, s in enumerate(smiles)))
    protein = root / "protein" / "esm_blat_ecolx"
    protein.mkdir(parents=True)
    wild = "MSIQHFRVALIPFFAAFCLPVFAHPETLVKVKDAEDQLGARVGYIELDLNSGK"
    lines = []
    for i in range(40):
        seq = list(wild)
        seq[i % len(wild)] = "ACDEFGHIKLMNPQRSTVWY"[i % 20]
        lines += [f">{i}|variant_{i}|{(i % 7) / 7:.3f}", "".join(seq)]
    (protein / "P62593.fasta").write_text("\n".join(lines) + "\n")


def test_every_entry_is_a_valid_run_at_both_scales():
    """Each entry's settings (and its small ones) are fields of its recipe's config with valid values; its budget
    is a time; the datasets it names are registered."""
    from recipe_zoo import config, registry, suite
    from recipe_zoo.data import load_all

    for entry in suite.entries("gpu"):
        spec = registry.get(entry.recipe)
        for scale in (1.0, 0.05):
            config.build(spec.config, spec.defaults, None, suite.settings_of(entry, scale), spec.name)
            assert suite.scaled_budget(entry.budget, scale).endswith("s")
    assert set(suite.datasets("gpu")) <= set(load_all())
    assert not set(suite.LEFT_OUT) & {e.recipe for e in suite.entries("gpu")}
    torch_recipes = {r["name"] for r in registry.static_list()} - {"molecules/fp-xgb", "tabular/xgb",
                                                                 "protein/onehot", "protein/position-mean"}
    assert torch_recipes == {e.recipe for e in suite.entries("gpu")} | set(suite.LEFT_OUT)


def test_copy_data_copies_what_the_suite_reads(tmp_path, monkeypatch):
    cache = tmp_path / "cache-data"
    make_suite_data(cache)
    (cache / "text" / "other.txt").write_text("not read by the suite")
    proc = zoo("bench", "--suite", "gpu", "--copy-data", tmp_path / "carry", env={"ZOO_DATA": str(cache)})
    assert proc.returncode == 0, proc.stderr
    copied = sorted(str(p.relative_to(tmp_path / "carry")) for p in (tmp_path / "carry").rglob("*") if p.is_file())
    expected = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() and p.name != "other.txt")
    assert copied == expected
    assert "ZOO_DATA=" in proc.stdout


def test_copy_data_with_reference_copies_what_those_reference_runs_read(tmp_path):
    cache = tmp_path / "cache-data"
    make_suite_data(cache)
    proc = zoo("bench", "llm/gpt", "--reference", "--copy-data", tmp_path / "carry", env={"ZOO_DATA": str(cache)})
    assert proc.returncode == 0, proc.stderr
    copied = [str(p.relative_to(tmp_path / "carry")) for p in (tmp_path / "carry").rglob("*") if p.is_file()]
    assert copied == ["text/tinyshakespeare/input.txt"]
    # digits ships with scikit-learn: nothing to copy
    proc = zoo("bench", "vision/resnet", "--reference", "digits", "--copy-data", tmp_path / "none",
               env={"ZOO_DATA": str(cache)})
    assert proc.returncode == 0 and "copied 0.0 MB" in proc.stdout, proc.stderr


def test_a_summary_line_shows_what_a_recipe_did_not_report_as_a_dash():
    from recipe_zoo import suite

    summary = {"metric": "test_rmse", "value": 0.5, "mfu_percent": 1.0, "metrics": {"test_rmse": 0.5}}
    line = suite._line("tabular/mlp", [], "10s", summary, 3.0, "")
    assert " - steps  - samples/s  MFU 1.0%  ok" in line
    summary["metrics"] |= {"steps": 1200, "tokens_per_s": 51234.6}
    assert " 1,200 steps  51,235 tok/s " in suite._line("llm/gpt", [], "20s", summary, 3.0, "")


@pytest.mark.parametrize("args, needle", [
    (["--suite", "cpu"], "--suite cpu: no such suite (have: gpu)"),
    (["--suite", "gpu", "--scale", "0"], "--scale 0.0: give a factor in (0, 1]"),
    (["--suite", "gpu", "vision/resnet"], "--suite runs its own recipes"),
    (["--scale", "0.5"], "--scale and --copy-data go with --suite NAME"),
])
def test_suite_refusals_are_one_line(args, needle):
    proc = zoo("bench", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert needle in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_suite_runs_on_a_cpu_at_a_small_scale(tmp_path):
    """Every entry, with its small settings and a twentieth of its budget, on the tiny data: each ends ok, one line
    per recipe and the total wall time are printed, and no leaderboard row is written (a check, not a measure)."""
    make_suite_data(tmp_path / "data")
    proc = zoo("bench", "--suite", "gpu", "--scale", "0.05", "--allow-dirty", "--out", tmp_path / "runs",
               env={"ZOO_DATA": str(tmp_path / "data"), "ZOO_BOARD_DIR": str(tmp_path / "board")}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    from recipe_zoo import suite

    summary = proc.stdout.split("\nsuite gpu at scale 0.05")[1].splitlines()
    assert "recipes in" in summary[0] and "no rows written" in summary[0]
    lines = [line for line in summary if line.startswith("  ")]
    assert len(lines) == len(suite.entries("gpu")) and all(line.endswith("ok") for line in lines)
    assert "tok/s" in lines[0] and "MFU" in lines[0]
    traced = [line for line in proc.stdout.splitlines() if "llm/gpt's traced steps:" in line]  # GPT-2-small's
    assert len(traced) == 1 and "5 optimizer steps traced" in open(traced[0].split(": ")[-1]).read()
    assert not (tmp_path / "board").exists() or not any((tmp_path / "board").iterdir())
