"""Medical segmentation: the planner's rules, Dice/IoU against a hand count, exact patch replay, and
``medical/unet`` / ``medical/swinunetr`` end to end on MONAI's synthetic data, a Decathlon-style
NIfTI folder and a PNG image/mask folder, with their bad inputs."""
import csv
import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import conftest
from recipe_zoo.recipes.medical import data as meddata
from recipe_zoo.recipes.medical import patches, preprocess
from recipe_zoo.recipes.medical import plan as planner
from recipe_zoo.recipes.medical import split as medsplit
from recipe_zoo.recipes.medical import unet
from recipe_zoo.core import datasets
from recipe_zoo.core.budget import parse_budget
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import torch_state_kept

run_ok = functools.partial(conftest.run_ok, budget="40steps")
run_bad = functools.partial(conftest.run_bad, budget="2steps")
TINY = ["width=4", "levels=3", "eval_every=0", "tta=false", "compile=false"]


def fingerprint(**over) -> dict:
    fp = {"cases": 20, "channels": 1, "spatial_dims": 2, "median_shape": [512, 512], "total_voxels": 20 * 512 ** 2,
          "median_spacing": [1.0, 1.0], "anisotropy": 1.0, "modality": "",
          "intensity_fg": {"mean": 0.0, "std": 1.0, "p00_5": -1.0, "p99_5": 1.0}}
    return {**fp, **over}


def plan(fp, budget="5m", measure=lambda dims, levels, width: (2e4, 500.0), **cfg):
    return planner.make_plan(fp, unet.plan_settings(unet.MedicalConfig(**cfg)), torch.device("cpu"),
                             parse_budget(budget), measure)


def test_a_latency_bound_gpu_budget_keeps_the_median_patch():
    """6 s a fold on an H200 (30 ms a step) buys at most 200 steps at any patch: the plan keeps ISBI's 512 px
    slices and the deep net rather than shrinking the patch towards 16 px for steps it cannot get; a CPU, with no
    latency, still shrinks the patch for min_steps."""
    from recipe_zoo.core import devices

    fp = fingerprint()
    h200 = planner.make_plan(fp, unet.plan_settings(unet.MedicalConfig()), devices.gpu("H200", memory=1e11),
                             parse_budget("6s"), lambda dims, levels, width: (2e4, 500.0))
    assert h200["patch"] == [512, 512] and h200["levels"] == 6 and h200["expected_steps"] >= 100
    cpu = plan(fp, budget="6s")
    assert max(cpu["patch"]) < 512 and cpu["expected_steps"] >= 240 or max(cpu["patch"]) <= 16
    # the reasons say what bound each plan: ISBI's 20 slices allow 1 patch a step by nnU-Net's 5% rule, under 2;
    # the CPU's patch was halved for the steps
    assert h200["why"] == "batch 2, the least: nnU-Net's 5% of the training voxels a step alone would allow 1"
    assert cpu["why"].startswith("patch halved from nnU-Net's 512x512 to ") and cpu["why"].endswith("309 steps")
    roomy = planner.make_plan(fingerprint(total_voxels=2000 * 512 ** 2), unet.plan_settings(unet.MedicalConfig()),
                              devices.gpu("H200", memory=1e11), parse_budget("6s"), lambda d, lv, w: (2e6, 500.0))
    assert roomy["patch"] == [512, 512] and roomy["batch_size"] > 2
    assert roomy["why"].startswith(f"nnU-Net's patch; batch {roomy['batch_size']} bound by the budget's steps; "
                                   f"the budget buys {roomy['expected_steps']} steps (at least 100) (min_steps=309 "
                                   "lowered: at 30 ms a step of latency the budget buys at most 200)")



def test_compile_none_compiles_only_a_fold_given_five_minutes_or_more():
    """A cold compile costs tens of seconds (43 s of ISBI's plan on 2 CPU cores): compile=none (the default) compiles
    a fold only under a time budget of 5 minutes or more, and zoo plan's CPU shares follow what it resolves to."""
    from recipe_zoo.core import devices, loop

    assert unet.MedicalConfig().compile is None
    assert loop.resolve_compile(None, parse_budget("5m")) and not loop.resolve_compile(None, parse_budget("299s"))
    assert not loop.resolve_compile(None, parse_budget("100000steps"))  # step budgets: eager unless asked
    assert loop.resolve_compile(True, parse_budget("10s")) and not loop.resolve_compile(False, parse_budget("1h"))
    said = []
    assert unet.with_compile(unet.MedicalConfig(), parse_budget("60s"), said.append).compile is False
    assert said[0].startswith("compile=none: eager (a fold's budget 1m")
    assert unet.with_compile(unet.MedicalConfig(compile=False), parse_budget("1h"), said.append).compile is False
    assert len(said) == 1  # a value the user set is kept, silently
    eager = devices.cpu(peak=1e11, memory=1e10)
    compiled = devices.with_compile(eager, True)
    assert compiled.compiled and compiled.share("conv") == pytest.approx(
        eager.share("conv") * devices.COMPILE_SPEEDUP["conv"])
    assert devices.with_compile(compiled, False).share("conv") == eager.share("conv")
    h200 = devices.gpu("H200")
    assert devices.with_compile(h200, True) is h200  # a GPU's shares do not depend on it
    for budget, share in (("1m", "18%"), ("5m", "24%")):  # zoo plan on one split: eager's share, then compiled's
        out = conftest.zoo_in_process("plan", "--recipe", "medical/unet", "--budget", budget, "--device", "cpu")
        assert out.returncode == 0 and f"conv reaches {share}" in out.stdout.splitlines()[0], out.stdout[-500:]


def test_plan_follows_the_data():
    p = plan(fingerprint(), budget="100steps")
    assert p["dims"] == 2 and p["patch"] == [512, 512] and p["normalize"] == "zscore" and p["set_by_user"] == []
    assert p["levels"] == 6  # 512 -> 16 after five halvings, the deepest map ~8-16 voxels
    ct = plan(fingerprint(spatial_dims=3, median_shape=[200, 200, 60], median_spacing=[0.8, 0.8, 5.0],
                          anisotropy=6.25, modality="CT", total_voxels=20 * 200 * 200 * 60), budget="100steps")
    assert ct["dims"] == 2 and ct["slice_axis"] == 2 and ct["normalize"] == "ct"  # 5 mm slices: 2-D across them
    iso = plan(fingerprint(spatial_dims=3, median_shape=[96, 96, 96], median_spacing=[1.0, 1.0, 1.5],
                           anisotropy=1.5, modality="MRI", total_voxels=20 * 96 ** 3), budget="100steps")
    assert iso["dims"] == 3 and iso["slice_axis"] is None and len(iso["patch"]) == 3


def test_plan_sizes_the_patch_for_the_time_budget():
    """The budget buys at least min_steps steps: a short budget halves the patch; set values are kept."""
    long, short = plan(fingerprint(), budget="2h"), plan(fingerprint(), budget="20s")
    assert long["patch"] == [512, 512] and long["expected_steps"] >= 240
    assert max(short["patch"]) < 512 and short["levels"] < long["levels"]
    kept = plan(fingerprint(), budget="20s", patch="512,512", batch_size=3, dims=2)
    assert kept["patch"] == [512, 512] and kept["batch_size"] == 3
    assert set(kept["set_by_user"]) == {"patch", "batch_size", "dims"}


@pytest.mark.parametrize("key,value,message", [("dims", 3, "spatial dims"), ("patch", "64", "needs 2 sizes"),
                                               ("spacing", "1,x", "numbers"), ("normalize", "minmax", "choose"),
                                               ("levels", 1, "2 levels at least")])
def test_plan_rejects_bad_overrides(key, value, message):
    with pytest.raises(ZooError, match=message):
        plan(fingerprint(), **{key: value})


def test_flip_axes_follow_the_slicing():
    """Axes name the volume's axes; a 2-D plan across one of them drops it and renumbers the rest."""
    data = meddata.SegData([], ["background", "x"], "vol", symmetric_axes=(0, 1, 2))
    assert unet.resolve_flip_axes(unet.MedicalConfig(), data, {"slice_axis": 0}, 3) == (0, 1)
    assert unet.resolve_flip_axes(unet.MedicalConfig(flip_axes="0,2"), data, {"slice_axis": 1}, 3) == (0, 1)
    assert unet.resolve_flip_axes(unet.MedicalConfig(flip_axes="none"), data, {"slice_axis": None}, 3) == ()


def test_dice_and_iou_match_a_hand_count():
    """A network that thresholds its input: Dice 2|A∩B|/(|A|+|B|) per class, IoU per class, mIoU over all."""
    truth = torch.zeros(1, 32, 32, dtype=torch.uint8)
    truth[0, 4:20, 4:20] = 1  # 256 foreground pixels
    guess = torch.zeros(1, 32, 32)
    guess[0, 8:20, 4:24] = 1  # 240 pixels, 192 of them right
    model = lambda x: torch.cat([-x, x], 1) * 10  # noqa: E731
    case = preprocess.Case("a", guess, truth)
    p = {"patch": [16, 16], "batch_size": 2, "slice_axis": None, "spacing": [1.0, 1.0]}
    got = unet.evaluate(model, [case], p, ["background", "fg"], torch.device("cpu"), overlap=0.5, hd95=True)
    assert got["dice_fg"] == pytest.approx(2 * 192 / (256 + 240))
    iou_fg, iou_bg = 192 / (256 + 240 - 192), (1024 - 304) / (1024 - 192)
    assert got["iou_fg"] == pytest.approx(iou_fg) and got["miou"] == pytest.approx((iou_fg + iou_bg) / 2)
    assert got["hd95"] == pytest.approx(4.0)  # the worst boundary points sit 4 pixels apart


def test_patches_replay_exactly_after_resume():
    data = meddata.load_synthetic(datasets.get("synthetic-2d"))
    fp = planner.fingerprint(data, data.cases[:4])
    aug = unet.patch_augmentation(unet.MedicalConfig())
    p = {"patch": [32, 32], "dims": 2, "spacing": [1.0, 1.0], "normalize": "zscore"}
    cases = [preprocess.preprocess(c, p, fp) for c in data.cases[:4]]
    make = lambda: patches.PatchBatches(cases, patches.augmentation(aug, p, (0, 1)), 3, [32, 32], seed=5)  # noqa: E731
    a = make()
    for _ in range(7):
        a.next_batch()
    b = make()
    b.load_state_dict(a.state_dict())
    (xa, ya), (xb, yb) = a.next_batch(), b.next_batch()
    assert xa.shape == (3, 1, 32, 32) and ya.shape == (3, 1, 32, 32) and ya.dtype == torch.long
    assert torch.equal(xa, xb) and torch.equal(ya, yb)  # one process, the same draws and ops from the same state
    assert not torch.equal(xa, a.next_batch()[0])


def test_patch_shards_are_the_micro_batches_of_accumulation_across_an_epoch_boundary():
    """21 slots an epoch: one process accumulating two draws an epoch's last slot with the next epoch's first
    (that epoch's seed) in one step; two processes must too, not drop it, and a rank resumed right after that
    step goes on the same."""
    data = meddata.load_synthetic(datasets.get("synthetic-2d"))
    fp = planner.fingerprint(data, data.cases[:4])
    aug = unet.patch_augmentation(unet.MedicalConfig())
    p = {"patch": [32, 32], "dims": 2, "spacing": [1.0, 1.0], "normalize": "zscore"}
    cases = [preprocess.preprocess(c, p, fp) for c in data.cases[:4]]
    make = lambda: patches.PatchBatches(cases, patches.augmentation(aug, p, (0, 1)), 3, [32, 32], seed=5)  # noqa: E731
    one = make()
    assert one.slots_per_epoch == one.batches_per_epoch == 21
    expected = [one.next_batch() for _ in range(2 * 13)]  # 13 steps of 2: step 11 straddles the boundary at 21
    ranks = []
    for rank in range(2):
        b = make()
        b.shard(rank, 2)
        assert b.batches_per_epoch == 10  # steps_per_epoch still counts whole steps of this process
        drawn = [b.next_batch() for _ in range(11)]
        resumed = make()
        resumed.shard(rank, 2)
        resumed.load_state_dict(b.state_dict())
        drawn += [resumed.next_batch() for _ in range(2)]
        ranks.append(drawn)
    merged = [batch for step in zip(*ranks) for batch in step]
    assert len(merged) == len(expected)
    for i, ((xa, ya), (xb, yb)) in enumerate(zip(merged, expected)):  # one process: the same draws and ops
        assert torch.equal(xa, xb) and torch.equal(ya, yb), f"micro-batch {i} (step {i // 2 + 1}) differs"


# ---------------------------------------------------------------------------------------------
# The split: train / validation / test, or k folds with an inner validation, fixed by each case's key
# ---------------------------------------------------------------------------------------------

def parts_of(folds):
    return [tuple(tuple(part) for part in fold) for fold in folds]


def test_isbi_folds_are_fixed_by_the_slice_paths():
    """ISBI's 30 slices: 5 folds of 6 test slices, each with 4 validation (hash-chosen per fold) and 20 train
    slices, disjoint; every slice tested once; the same for any input order (and no seed is involved)."""
    keys = [f"image/{i}.png" for i in range(30)]
    folds = medsplit.split_keys(keys, 5, 0.2, 0.2)
    assert [tuple(map(len, f)) for f in folds] == [(20, 4, 6)] * 5
    for train, val, test in folds:
        assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
        assert set(train) | set(val) | set(test) == set(keys)
    assert sorted(k for f in folds for k in f[2]) == sorted(keys)
    assert len({f[1] for f in parts_of(folds)}) > 1  # validation drawn anew per fold: every slice trains somewhere
    assert parts_of(medsplit.split_keys(keys[::-1], 5, 0.2, 0.2)) == parts_of(folds)
    shuffled = list(np.random.default_rng(3).permutation(keys))
    assert parts_of(medsplit.split_keys(shuffled, 5, 0.2, 0.2)) == parts_of(folds)


def test_three_parts_by_hash_of_the_case():
    keys = [f"synthetic{i}" for i in range(40)]
    ((train, val, test),) = medsplit.split_keys(keys, 0, 0.2, 0.2)
    assert (len(train), len(val), len(test)) == (26, 6, 8)
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    assert parts_of(medsplit.split_keys(keys[::-1], 0, 0.2, 0.2)) == [(tuple(train), tuple(val), tuple(test))]
    # a case keeps its side when others join (the test set is the lowest hashes, so it can only gain newcomers)
    more = medsplit.split_keys(keys + [f"extra{i}" for i in range(10)], 0, 0.2, 0.2)[0]
    assert set(more[2]) - set(test) <= {f"extra{i}" for i in range(10)}


def test_folds_follow_the_dataset_and_refuse_what_cannot_split():
    assert (meddata.folds_for(6), meddata.folds_for(4), meddata.folds_for(19), meddata.folds_for(20)) == (5, 4, 5, 0)
    cases = [meddata.RawCase(f"c{i}", np.zeros((1, 4, 4), np.float32), np.zeros((1, 4, 4), np.uint8), (1.0, 1.0),
                             key=f"images/c{i}.png") for i in range(6)]
    data = meddata.SegData(cases, ["background", "x"], "cells", folds=meddata.folds_for(6))
    assert len(medsplit.split_cases(data, -1, 0.2, 0.2)) == 5 and len(medsplit.split_cases(data, 0, 0.2, 0.2)) == 1
    for folds, message in ((1, "folds=1"), (7, "folds=7"), (-2, "folds=-2")):
        with pytest.raises(ZooError, match=message):
            medsplit.split_cases(data, folds, 0.2, 0.2)
    with pytest.raises(ZooError, match="val_fraction=1.5"):
        medsplit.split_cases(data, 0, 1.5, 0.2)
    with pytest.raises(ZooError, match="cells: 2 cases are too few to train, validate and test"):
        medsplit.split_cases(meddata.SegData(cases[:2], ["background", "x"], "cells"), 0, 0.2, 0.2)


def test_train_cases_keeps_a_few_of_each_folds_training_cases_and_nothing_else():
    cases = [meddata.RawCase(f"c{i}", np.zeros((1, 4, 4), np.float32), np.zeros((1, 4, 4), np.uint8), (1.0, 1.0),
                             key=f"images/c{i}.png") for i in range(30)]
    data = meddata.SegData(cases, ["background", "x"], "cells", folds=5)
    for folds in (0, 5):
        whole, few = medsplit.split_cases(data, folds, 0.2, 0.2), medsplit.split_cases(data, folds, 0.2, 0.2, 3)
        for a, b in zip(whole, few):
            assert (b.val, b.test) == (a.val, a.test) and len(b.train) == 3 and not a.unused
            assert sorted(c.key for c in b.train + b.unused) == sorted(c.key for c in a.train)
        assert [[c.key for c in f.train] for f in few] == [[c.key for c in f.train] for f in
                                                           medsplit.split_cases(data, folds, 0.2, 0.2, 3)]
    assert len({tuple(c.key for c in f.train) for f in medsplit.split_cases(data, 5, 0.2, 0.2, 3)}) > 1
    with pytest.raises(ZooError, match="train_cases=21: cells.s folds have 20 training cases at the fewest"):
        medsplit.split_cases(data, 5, 0.2, 0.2, 21)


def run_in_process(root: Path, tmp: Path, seed: int = 0, **cfg):
    """``medical/unet`` on ``root`` through a SimpleRun: (its metrics, the run: eval rows, split, reports)."""
    from recipe_zoo import registry
    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.precision import seed_everything

    seed_everything(seed)
    tmp.mkdir(parents=True, exist_ok=True)
    run = SimpleRun(budget=parse_budget("4steps"), seed=seed, dir=tmp, spec=registry.load_all()["medical/unet"],
                    log=lambda line: None)
    config = unet.MedicalConfig(data=str(root), width=4, levels=3, patch="32,32", batch_size=2, eval_every=0.5,
                                tta=False, overlap=0.25, flip_axes="0,1", **cfg)
    with torch_state_kept():  # as `zoo run` leaves the caller's torch switches
        return unet.train(config, run), run


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("n_cases,folds", [(24, 0), (8, 5)])
def test_test_labels_are_read_only_after_training(tmp_path, n_cases, folds):
    """Garbage in the test masks (of fold 0, whose rows metrics.csv holds) leaves every validation row as it
    was and changes only the test score; the split is the same for another seed; the interval holds the value."""
    from PIL import Image

    root = png_folder(tmp_path / "cells", n=n_cases)
    clean, run = run_in_process(root, tmp_path / "a")
    assert len(run.splits) == (3 if folds == 0 else folds)
    test_keys = run.splits["test"] if folds == 0 else run.splits["test fold 0"]
    assert sorted(k for keys in run.splits.values() for k in keys) == sorted(f"images/slice{i}.png"
                                                                              for i in range(n_cases))
    assert clean["test_dice_ci_low"] <= clean["test_dice"] <= clean["test_dice_ci_high"]
    assert ("test_dice_std" in clean) == (folds > 0) and 0 <= clean["val_dice"] <= 1
    _, other_seed = run_in_process(root, tmp_path / "b", seed=1)
    assert other_seed.splits == run.splits
    rng = np.random.default_rng(0)
    for key in test_keys:
        garbage = (rng.random((48, 48)) < 0.5).astype(np.uint8) * 255
        Image.fromarray(garbage).save(root / "masks" / Path(key).name)
    spoiled, again = run_in_process(root, tmp_path / "c")
    assert again.splits == run.splits and again.eval_rows and any("val_dice" in r for r in again.eval_rows)
    assert without_timing(again.eval_rows) == without_timing(run.eval_rows)
    if folds == 0:
        assert spoiled["val_dice"] == clean["val_dice"] and spoiled["test_dice"] != clean["test_dice"]


@pytest.mark.slow
def test_unet_learns_synthetic_2d():
    summary, proc = run_ok("medical/unet", "width=8")
    assert summary["status"] == "ok" and summary["metric"] == "test_dice" and float(summary["value"]) > 0.7
    assert "plan:" in proc.stdout and "2-D, patch 128x128" in summary["plan"]
    assert summary["split"] == "synthetic-2d: 26 train / 6 validation / 8 test cases by a hash of each case's path (or name)"
    run_dir = Path(summary["run_dir"])
    saved = json.loads((run_dir / "plan.json").read_text())
    assert saved["plan"]["dims"] == 2 and saved["fingerprint"]["median_shape"] == [128, 128]
    assert saved["fingerprint"]["cases"] == 26  # the plan read the training cases only
    assert (run_dir / "model.safetensors").is_file()
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["test_dice_ci_low"] <= metrics["test_dice"] <= metrics["test_dice_ci_high"]
    assert 0.5 < metrics["val_dice"] <= 1 and "test_miou" in metrics
    with open(run_dir / "split.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["item"] for r in rows) == sorted(f"synthetic{i}" for i in range(40))  # every case once
    assert [sum(r["split"] == p for r in rows) for p in ("train", "validation", "test")] == [26, 6, 8]
    with open(run_dir / "metrics.csv") as f:
        assert "val_dice" in next(csv.DictReader(f))


@pytest.mark.slow
def test_unet_3d_and_swinunetr():
    summary, _ = run_ok("medical/unet", "data=synthetic-3d", "patch=32,32,32", *TINY, budget="3steps")
    assert "3-D, patch 32x32x32" in summary["plan"] and 0 <= float(summary["value"]) <= 1
    summary, _ = run_ok("medical/swinunetr", "patch=64,64", *TINY, budget="2steps")
    assert "SwinUNETR, feature size 12" in summary["plan"] and summary["status"] == "ok"
    assert "multiples of 32 (at least 64)" in run_bad("medical/swinunetr", "patch=32,32")


def nifti(path: Path, array: np.ndarray, spacing) -> None:
    import nibabel as nib

    nib.save(nib.Nifti1Image(array, np.diag([*spacing, 1.0])), str(path))


@pytest.fixture
def decathlon(tmp_path):
    """Four anisotropic CT-like volumes (5 mm slices) with a bright cube as label 1."""
    root = tmp_path / "Task01_Cubes"
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    rng = np.random.default_rng(0)
    training = []
    for i in range(4):
        label = np.zeros((40, 40, 8), dtype=np.uint8)
        label[10 + i:25 + i, 8:24, 2:6] = 1
        image = (rng.normal(-100, 20, label.shape) + 300.0 * label).astype(np.float32)
        nifti(root / "imagesTr" / f"case{i}.nii.gz", image, (1.0, 1.0, 5.0))
        nifti(root / "labelsTr" / f"case{i}.nii.gz", label, (1.0, 1.0, 5.0))
        training.append({"image": f"./imagesTr/case{i}.nii.gz", "label": f"./labelsTr/case{i}.nii.gz"})
    meta = {"name": "cubes", "modality": {"0": "CT"}, "labels": {"0": "background", "1": "cube"},
            "training": training}
    (root / "dataset.json").write_text(json.dumps(meta))
    return root


@pytest.mark.slow
def test_decathlon_folder_plans_2d_across_thick_slices(decathlon):
    summary, proc = run_ok("medical/unet", f"data={decathlon}", *TINY, budget="3steps")
    assert "2-D, patch" in summary["plan"] and "ct normalisation" in summary["plan"]
    metrics = json.loads((Path(summary["run_dir"]) / "summary.json").read_text())["metrics"]
    assert "test_dice_cube" in metrics and "test_dice_std" in metrics  # 4 cases: 4 folds of one test case
    assert "4-fold cross-validation of 4 cases" in summary["split"]


def load_error(data, **cfg) -> str:
    """The one-line error loading ``data`` raises (the CLI prints it and exits 2; see the run_bad cases)."""
    with pytest.raises(ZooError) as info:
        config = unet.MedicalConfig(data=str(data), **cfg)
        meddata.load_data(config.data, config.label_values)
    return str(info.value)


def test_decathlon_bad_inputs(decathlon):
    (decathlon / "labelsTr" / "case3.nii.gz").unlink()
    assert "case3.nii.gz: listed in dataset.json but not found" in run_bad("medical/unet", f"data={decathlon}")
    nifti(decathlon / "labelsTr" / "case3.nii.gz", np.zeros((40, 40, 7), dtype=np.uint8), (1.0, 1.0, 5.0))
    assert "case3.nii.gz: mask shape (40, 40, 7) does not match image case3.nii.gz" in load_error(decathlon)
    bad = np.zeros((40, 40, 8), dtype=np.uint8)
    bad[0, 0, 0] = 3
    nifti(decathlon / "labelsTr" / "case3.nii.gz", bad, (1.0, 1.0, 5.0))
    assert "case3.nii.gz: unexpected label value 3 (expected one of [0, 1])" in load_error(decathlon)
    nifti(decathlon / "imagesTr" / "case3.nii.gz", np.full((40, 40, 8), np.nan, dtype=np.float32), (1.0, 1.0, 5.0))
    assert "case3.nii.gz: 12800 voxels are NaN or infinite" in load_error(decathlon)
    (decathlon / "dataset.json").write_text(json.dumps({"training": []}))
    assert "dataset.json: no 'labels' mapping" in load_error(decathlon)


def png_folder(root: Path, n: int = 6) -> Path:
    from PIL import Image

    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(1)
    for i in range(n):
        mask = np.zeros((48, 48), dtype=np.uint8)
        mask[5 + i:30 + i, 10:35] = 255
        image = np.clip(rng.normal(60, 15, mask.shape) + 0.5 * mask, 0, 255).astype(np.uint8)
        Image.fromarray(image).save(root / "images" / f"slice{i}.png")
        Image.fromarray(mask).save(root / "masks" / f"slice{i}.png")
    return root


@pytest.mark.slow
def test_png_folder_and_its_bad_inputs(tmp_path):
    root = png_folder(tmp_path / "cells")
    summary, _ = run_ok("medical/unet", f"data={root}", *TINY, "flip_axes=0,1", budget="3steps")
    assert summary["status"] == "ok"
    assert "loss='dice' must be one of" in run_bad("medical/unet", "loss=dice")
    assert load_error(root, label_values="0,128").endswith(
        "slice0.png: unexpected label value 255 (expected one of [0, 128])")
    data = meddata.load_data(str(root), "")
    with pytest.raises(ZooError, match="axis 2 does not exist"):
        unet.resolve_flip_axes(unet.MedicalConfig(flip_axes="2"), data, {"slice_axis": None}, 2)
    assert unet.resolve_flip_axes(unet.MedicalConfig(), data, {"slice_axis": None}, 2) == ()  # own data: no flips
    (root / "images" / "slice9.png").write_bytes(b"not a png at all")
    assert "slice9.png: no matching file in" in load_error(root)
    (root / "masks" / "slice9.png").write_bytes(b"not a png at all")
    assert "slice9.png: cannot read image" in load_error(root)
    from PIL import Image

    Image.fromarray(np.zeros((40, 48), dtype=np.uint8)).save(root / "images" / "slice9.png")
    Image.fromarray(np.zeros((48, 48), dtype=np.uint8)).save(root / "masks" / "slice9.png")
    assert "does not match image slice9.png" in load_error(root)
    empty = tmp_path / "empty"
    (empty / "images").mkdir(parents=True)
    (empty / "masks").mkdir()
    assert "no images" in load_error(empty)
    assert "not a medical dataset" in load_error(tmp_path / "nowhere")


def test_doctor_sees_the_cases_and_finds_no_error(tmp_path, capsys):
    """``zoo doctor`` in-process on synthetic-2d: run.inspect's data checks, then the training checks, without
    an error. At the default lr 2e-3 a fresh UNet needs ~170 steps of batch 25 to take one batch's DiceCE below
    a tenth (what the check asks of a deterministic loss); batch 2 at lr 0.02 does it in ~20 steps."""
    from recipe_zoo.cli import main

    code = main(["doctor", "medical/unet", "width=8", "levels=3", "tta=false", "patch=32,32", "batch_size=2",
                 "lr=0.02", "--steps", "25", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().out[-3000:]
    (folder,) = (tmp_path / "doctor" / "medical" / "unet").iterdir()
    assert "- validation: 6 rows, inputs of shape (6, 1, 128, 128)" in (folder / "report.md").read_text()
    findings = json.loads((folder / "findings.json").read_text())
    severity = {f["check"]: f["severity"] for f in findings}
    assert severity["data/balance"] == "ok" and severity["data/leakage"] == "ok"
    assert "overfit/one-batch" in severity and not [f for f in findings if f["severity"] == "error"], findings
    # cases of different shapes: one content digest each, so a case copied into validation still matches
    a, b = (meddata.RawCase(n, np.ones((1, *s), np.float32), np.zeros((1, *s), np.uint8), (1.0, 1.0))
            for n, s in (("a", (4, 4)), ("b", (4, 6))))
    (train_x, train_y), (val_x, _) = medsplit.inspect_view([a, b], [b])
    assert len(set(train_x)) == 2 and val_x == train_x[1:] and train_y.shape == (40,)


# ---------------------------------------------------------------------------------------------
# Bad input, one table: exit 2, one line naming the file (and the item or key), no ok row
# ---------------------------------------------------------------------------------------------

def _medical_bad_case(case: str, tmp: Path, request):
    """(recipe args, needles the error line must hold, budget) for one bad input."""
    from PIL import Image

    if case == "missing_folder":
        return [f"data={tmp / 'nowhere'}"], ["nowhere", "not a medical dataset"], "3steps"
    if case == "file_not_folder":
        (tmp / "scan.png").write_bytes(b"x")
        return [f"data={tmp / 'scan.png'}"], ["scan.png", "expected a folder"], "3steps"
    if case == "empty_folder":
        (tmp / "empty").mkdir()
        return [f"data={tmp / 'empty'}"], ["empty", "expected an images/ and a masks/"], "3steps"
    if case == "empty_images_folder":
        (tmp / "hollow" / "images").mkdir(parents=True)
        (tmp / "hollow" / "masks").mkdir()
        return [f"data={tmp / 'hollow'}"], [str(tmp / "hollow" / "images"), "no images"], "3steps"
    if case.startswith("decathlon_"):
        root = request.getfixturevalue("decathlon")
        dataset_json, meta = root / "dataset.json", json.loads((root / "dataset.json").read_text())
        if case == "decathlon_bad_json":
            dataset_json.write_text('{"labels": {"0": "background",')
            return [f"data={root}"], [str(dataset_json), "cannot read"], "3steps"
        if case == "decathlon_json_not_object":
            dataset_json.write_text(json.dumps([meta]))
            return [f"data={root}"], [str(dataset_json), "expected a JSON object"], "3steps"
        if case == "decathlon_no_labels":
            dataset_json.write_text(json.dumps({**meta, "labels": []}))
            return [f"data={root}"], [str(dataset_json), "no 'labels' mapping"], "3steps"
        if case == "decathlon_entry_without_label":
            del meta["training"][2]["label"]
            dataset_json.write_text(json.dumps(meta))
            return [f"data={root}"], [str(dataset_json), "'training' entry 3", "'label'"], "3steps"
        if case == "decathlon_listed_file_missing":
            (root / "labelsTr" / "case1.nii.gz").unlink()
            return [f"data={root}"], [str(root / "labelsTr" / "case1.nii.gz"), "not found"], "3steps"
        if case == "decathlon_nan_image":
            nifti(root / "imagesTr" / "case2.nii.gz", np.full((40, 40, 8), np.inf, np.float32), (1.0, 1.0, 5.0))
            return [f"data={root}"], [str(root / "imagesTr" / "case2.nii.gz"), "NaN or infinite"], "3steps"
        if case == "decathlon_mask_not_whole":
            nifti(root / "labelsTr" / "case0.nii.gz", np.full((40, 40, 8), 0.5, np.float32), (1.0, 1.0, 5.0))
            return [f"data={root}"], [str(root / "labelsTr" / "case0.nii.gz"), "not whole numbers"], "3steps"
        if case == "decathlon_label_out_of_range":
            label = np.zeros((40, 40, 8), np.uint8)
            label[3, 3, 3] = 4
            nifti(root / "labelsTr" / "case1.nii.gz", label, (1.0, 1.0, 5.0))
            return [f"data={root}"], [str(root / "labelsTr" / "case1.nii.gz"), "unexpected label value 4"], "3steps"
        raise AssertionError(case)
    root = png_folder(tmp / "cells", n=4)
    images, masks = root / "images", root / "masks"
    if case == "corrupt_image":
        (images / "slice2.png").write_bytes(b"\x89PNG\r\n\x1a\ngarbage")
        return [f"data={root}"], [str(images / "slice2.png"), "cannot read image"], "3steps"
    if case == "corrupt_mask":
        (masks / "slice1.png").write_bytes(b"\xff\xfe\xfa not a png")
        return [f"data={root}"], [str(masks / "slice1.png"), "cannot read image"], "3steps"
    if case == "mask_missing":
        (masks / "slice3.png").unlink()
        return [f"data={root}"], [str(images / "slice3.png"), "no matching file in"], "3steps"
    if case == "image_missing":
        Image.fromarray(np.zeros((48, 48), np.uint8)).save(masks / "slice7.png")
        return [f"data={root}"], [str(masks / "slice7.png"), "no matching file in"], "3steps"
    if case == "mask_size_mismatch":
        Image.fromarray(np.zeros((40, 48), np.uint8)).save(masks / "slice2.png")
        return [f"data={root}"], [str(masks / "slice2.png"), "does not match image slice2.png"], "3steps"
    if case == "mask_value_out_of_range":
        mask = np.zeros((48, 48), np.uint8)
        mask[:4, :4] = 7
        Image.fromarray(mask).save(masks / "slice1.png")
        return ([f"data={root}", "label_values=0,255"],
                [str(masks / "slice1.png"), "unexpected label value 7 (expected one of [0, 255])"], "3steps")
    if case == "masks_are_photos":  # a folder of images given as masks: hundreds of values
        photo = np.random.default_rng(0).integers(0, 256, (48, 48), dtype=np.uint8)
        Image.fromarray(photo).save(masks / "slice2.png")
        return [f"data={root}"], [str(masks / "slice2.png"), "distinct values"], "3steps"
    if case == "channel_mismatch":
        Image.new("RGB", (48, 48), (10, 20, 30)).save(images / "slice3.png")
        return [f"data={root}"], [str(images / "slice3.png"), "channel"], "3steps"
    good = [f"data={root}"]
    if case == "bad_label_values":
        return [*good, "label_values=0,x"], ["label_values='0,x'", "whole numbers"], "3steps"
    if case == "typo_key":
        return [*good, "lossx=ce"], ["unknown key 'lossx'", "did you mean 'loss'?"], "3steps"
    if case == "bad_int":
        return [*good, "batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"
    if case == "bad_float":
        return [*good, "lr=fast"], ["lr='fast'", "not a valid float"], "3steps"
    if case == "bad_choice":
        return [*good, "loss=dice"], ["loss='dice'", "must be one of"], "3steps"
    if case == "zero_budget":
        return good, ["'0s'", "must be positive"], "0s"
    if case == "negative_budget":
        return good, ["'-5'", "expected a number and a unit"], "-5"
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "missing_folder", "file_not_folder", "empty_folder", "empty_images_folder", "decathlon_bad_json",
    "decathlon_json_not_object", "decathlon_no_labels", "decathlon_entry_without_label",
    "decathlon_listed_file_missing", "decathlon_nan_image", "decathlon_mask_not_whole", "decathlon_label_out_of_range", "corrupt_image", "corrupt_mask", "mask_missing",
    "image_missing", "mask_size_mismatch", "mask_value_out_of_range", "masks_are_photos", "channel_mismatch",
    "bad_label_values", "typo_key", "bad_int", "bad_float", "bad_choice", "zero_budget", "negative_budget"])
def test_bad_input_table(case, tmp_path, capfd, request):
    args, needles, budget = _medical_bad_case(case, tmp_path, request)
    conftest.bad_input(capfd, ["medical/unet", *args, *TINY], tmp_path / "runs", *needles, budget=budget)
