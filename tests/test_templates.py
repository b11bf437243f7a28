"""zoo new: a recipe's own file as a template, and with --vendor its recipe modules too; each copy runs from
another folder and gives the recipe's own metric."""
import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import roundtrip, small_run_args, summary_block, zoo
from recipe_zoo import load, registry, templates
from recipe_zoo.cli import main
from recipe_zoo.core import api

NAMES = sorted(r["name"] for r in registry.static_list())
# in the fast set: one recipe per domain, but diffusion (each run trains its fid_zoo network: ~50 s)
ONE_PER_DOMAIN = {"contrastive/simclr", "llm/gpt", "medical/unet", "molecules/dmpnn", "protein/onehot",
                  "tabular/xgb", "vision/finetune"}


def _value(argv: list, capsys) -> tuple[str, float, Path]:
    """``zoo run ARGV`` in-process (a subprocess per run would spend seconds importing torch again): the recipe
    name, the full-precision metric from summary.json and the run directory."""
    code = main(["run", *map(str, argv), "--budget", "2steps"])
    out = capsys.readouterr()
    assert code == 0, out.out[-3000:] + out.err[-3000:]
    block = summary_block(out.out)
    run_dir = Path(block["run_dir"])
    return block["recipe"], json.loads((run_dir / "summary.json").read_text())["value"], run_dir


_ORIGINALS: dict[tuple, tuple[str, float]] = {}


def _original(name: str, args: list, tmp_path: Path, capsys) -> tuple[str, float]:
    """The recipe's own run, once per worker for both ways of copying it (the same seed, budget and tiny data,
    written alike into each test's folder): the recipe name and its metric."""
    key = (name, *(str(a).replace(str(tmp_path), "TMP") for a in args))
    if key not in _ORIGINALS:
        recipe, value, _ = _value([name, *args], capsys)
        _ORIGINALS[key] = recipe, value
    return _ORIGINALS[key]


def _moved(path, tmp_path):
    """The written template (and its parts folder) moved to a folder of its own, as a user would keep it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for item in [path, path.with_name(path.stem + "_parts")]:
        if item.exists():
            shutil.move(str(item), elsewhere / item.name)
    return elsewhere / path.name


def _by_domain(names):
    """Every recipe both ways (a copy importing the zoo, and one vendoring the modules it imports); in the fast set
    one recipe per domain, the two ways taken in turn."""
    fast = {(n, i % 2 == 1) for i, n in enumerate(sorted(ONE_PER_DOMAIN))}
    return [pytest.param(n, vendor, marks=() if (n, vendor) in fast else pytest.mark.slow,
                         id=f"{n}-{'vendor' if vendor else 'copy'}") for n in names for vendor in (False, True)]


@pytest.mark.parametrize("name, vendor", _by_domain(NAMES))
def test_a_template_runs_elsewhere_and_equals_the_recipe(tmp_path, name, vendor, monkeypatch, capsys):
    """The copy registers only itself, says what it imports, runs from another folder (with --vendor: imports no
    recipe module of the zoo but its dataset declarations), and its metric equals `zoo run RECIPE`'s at the same seed and budget."""
    spec = registry.get(name)
    written = templates.write_template(spec, "mytask", tmp_path / "mytask.py", "test", vendor=vendor)
    moved = _moved(written[0], tmp_path)
    text = moved.read_text()
    assert text.startswith(f"# mytask: copied from {name} (recipes/") and "@recipe('mytask'" in text
    assert text.count("@recipe(") == 1  # the variants stacked on the same train function are not registered
    header = text.split('"""', 1)[0]
    for module in templates.imported_modules(text):
        assert module in header, module  # the header names every module the copy imports
    fine_tunes = "weights" in spec.config.__dataclass_fields__
    assert ("`zoo run mytask.py weights=RUN_DIR` starts from a finished" in " ".join(header.replace("#", "").split())
            ) == fine_tunes  # how to point it at a checkpoint, where the recipe takes one
    if vendor:
        copies = [moved, *moved.with_name("mytask_parts").glob("*.py")]
        assert len(copies) == len(written)
        imported = {m for p in copies for m in templates.imported_modules(p.read_text()) if ".recipes" in m}
        assert all(map(templates.declares_datasets, imported))  # only the zoo's dataset declarations, never copied
    once = ["eval_every=0"] if "eval_every" in spec.config.__dataclass_fields__ else []  # evaluate at the end only
    # fp32: the copy equals the recipe bit for bit; in bf16 (auto on a CPU with bf16 units) the copied module's own
    # torch.compile may round differently (llm/gpt: 1.9355 against 1.9342)
    fp32 = ["precision=fp32"] if "precision" in spec.config.__dataclass_fields__ else []
    args = [*small_run_args(name, tmp_path), *once, *fp32, "--out", tmp_path / "runs"]
    monkeypatch.chdir(moved.parent)
    monkeypatch.setattr(api, "REGISTRY", dict(api.REGISTRY))  # "mytask" must not outlive this test
    monkeypatch.setattr(sys, "path", list(sys.path))  # nor the folder its run puts on the path
    for module in [m for m in sys.modules if m.split(".")[0] == "mytask_parts"]:  # an earlier test's copy
        monkeypatch.delitem(sys.modules, module)
    recipe, original = _original(name, args, tmp_path, capsys)
    copied_recipe, copied, run_dir = _value([moved, *args], capsys)
    assert (recipe, copied_recipe) == (name, "mytask") and copied == original
    model = load(run_dir, device="cpu", recipe_file=moved)  # the copy's own predict hook, from the file named
    assert model.spec.name == "mytask" and model.spec.predict is not None
    if (run_dir / "predictions.csv").exists():
        roundtrip(run_dir, recipe_file=moved)


def test_new_writes_a_file_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # in-process: four subprocesses would spend seconds each importing torch

    def new(*args) -> tuple[int, str, str]:
        code = main(["new", *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, _, err = new("mytask", "--from", "tabular/xgb")
    assert code == 0 and (tmp_path / "mytask.py").is_file(), err
    code, _, err = new("mytask", "--from", "tabular/xgb")
    assert code == 2 and "refusing to overwrite" in err
    code, out, err = new("other", "--from", "vision/resnet", "--vendor")
    assert code == 0 and "recipe modules in other_parts/" in out, err
    assert (tmp_path / "other_parts" / "images.py").is_file() and (tmp_path / "other_parts" / "vision_data.py").is_file()
    code, _, err = new("third", "--from", "vision/resnet", "--out", tmp_path / "other.py", "--vendor")
    assert code == 2 and "other.py already exists" in err


def test_new_rejects_bad_names(tmp_path):
    proc = zoo("new", "../evil", "--from", "vision/resnet", cwd=tmp_path)
    assert proc.returncode == 2 and "recipe name" in proc.stderr


@pytest.mark.parametrize("line", ["from shared import optim, schedule", "from zoo.registry import recipe",
                                  "from recipes import vision"])
def test_a_template_from_before_the_import_root_names_what_to_change(tmp_path, line):
    """Run from its own folder (in this checkout's root, ``shared`` and ``recipes`` are folders on the path)."""
    old = tmp_path / "old.py"
    old.write_text(f"{line}\n\n\n@recipe('old', config=None, benchmark='x', metric='y')\ndef train(cfg, run):\n"
                   "    return {}\n")
    proc = zoo("run", old, "--out", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (message,) = proc.stderr.strip().splitlines()
    root = line.split()[1].split(".")[0]
    for needle in (str(old), "written by an earlier zoo", f"imports {root!r}", "recipe_zoo.core", "zoo new"):
        assert needle in message, (needle, message)


def test_a_template_brings_a_dataset_of_its_own(tmp_path, monkeypatch, capsys):
    """A copy declares a dataset in its own file: `zoo data list --from` shows it and where it is declared, `zoo run
    FILE data=NAME` reads it from $ZOO_DATA and keys the run by that name; a name the zoo already declares is
    refused with both places named."""
    import numpy as np
    from houses import houses

    from recipe_zoo.core import datasets

    path = templates.write_template(registry.get("tabular/xgb"), "mytask", tmp_path / "mytask.py", "test")[0]
    declaration = ('\n\nfrom recipe_zoo.core.datasets import DatasetInfo, dataset\n\n'
                   'dataset(DatasetInfo(name="{name}", domain="tabular", source="cache", path="tabular/mine.csv",\n'
                   '                    description="my houses", split="80/20", metric="RMSE",\n'
                   '                    info={{"kind": "csv", "target": "price"}}))\n')
    original = path.read_text()
    path.write_text(original + declaration.format(name="my-houses"))
    cache = tmp_path / "cache"
    (cache / "tabular").mkdir(parents=True)
    houses(np.random.default_rng(0), 300).to_csv(cache / "tabular" / "mine.csv", index=False)
    listing = zoo("data", "list", "--from", path, env={"ZOO_DATA": str(cache)})
    assert listing.returncode == 0, listing.stderr
    line = next(x for x in listing.stdout.splitlines() if x.startswith("my-houses"))
    assert "my houses" in line and "mytask" in listing.stdout

    monkeypatch.setenv("ZOO_DATA", str(cache))
    monkeypatch.setattr(api, "REGISTRY", dict(api.REGISTRY))
    monkeypatch.setattr(datasets, "DATASETS", dict(datasets.DATASETS))
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["run", str(path), "data=my-houses", "--budget", "2steps", "--out", str(tmp_path / "runs")]) == 0
    block = summary_block(capsys.readouterr().out)
    summary = json.loads((Path(block["run_dir"]) / "summary.json").read_text())
    assert summary["benchmark"] == "my-houses" and summary["metrics"]["test_rmse"] > 0

    clash = tmp_path / "clash.py"
    clash.write_text(original.replace("'mytask'", "'clash'") + declaration.format(name="wine"))
    proc = zoo("data", "list", "--from", clash, env={"ZOO_DATA": str(cache)})
    assert proc.returncode == 2 and "dataset 'wine' is declared twice: in recipe_zoo.recipes.tabular.datasets" \
        in proc.stderr, proc.stderr
