"""Molecules: RDKit reading and featurisation, splits, the D-MPNN, metrics, bad inputs, both recipes
end to end on a small synthetic table (targets computed by RDKit, so they are learnable)."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import bad_input, check_items, run_doctor, summary_block, write_file, zoo_in_process
from recipe_zoo.core import finetune
from recipe_zoo.core.metrics import score_tasks
from recipe_zoo.recipes.molecules import dmpnn, models
from recipe_zoo.recipes.molecules.features import bond_dim, featurize, rdkit_descriptors
from recipe_zoo.recipes.molecules.run_data import splits_for
from recipe_zoo.recipes.molecules.scoring import METRIC_NAMES, SCORE_TASK, item_scores
from recipe_zoo.recipes.molecules.splits import fold_indices, parse_sizes, scaffolds, split_indices
from recipe_zoo.recipes.molecules.table import read_table, standardize
from recipe_zoo.recipes.molecules.config import DMPNNConfig, FPXGBConfig, MolConfig
from recipe_zoo.core.errors import ZooError

RINGS = ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCOC1", "c1ccc2ccccc2c1", "C1CC1"]
HEADS = ["", "C", "CC", "O", "N", "Cl", "CCC", "FC(F)(F)", "OC(=O)"]
TAILS = ["", "C", "CC", "O", "CO", "C(=O)O", "N", "Cl", "CCC", "C(F)(F)F"]


def smiles_set() -> list[str]:
    """540 small molecules: a substituent, a ring, a substituent (plus a few alcohols)."""
    return [head + ring + tail for ring in RINGS for head in HEADS for tail in TAILS] + \
        ["C" * n + "O" for n in range(1, 9)]


def write_table(path, rows, header=("smiles", "y")):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture
def logp_csv(tmp_path):
    from rdkit import Chem
    from rdkit.Chem import Descriptors

    rows = [(s, round(Descriptors.MolLogP(Chem.MolFromSmiles(s)), 3)) for s in smiles_set()]
    return write_table(tmp_path / "logp.csv", rows)


def cfg(cls=MolConfig, **kw) -> MolConfig:
    """``cls`` (the data fields alone by default) on ``kw``, target y; fields ``cls`` lacks are left out."""
    return cls(**{k: v for k, v in {"target": "y", **kw}.items() if k in cls.__dataclass_fields__})


def test_featurised_bonds_pair_up_and_batches_keep_molecules_apart():
    from rdkit import Chem

    mols = [Chem.MolFromSmiles(s) for s in ("CCO", "C", "c1ccccc1", "CC(=O)N")]
    g = featurize(mols)
    assert g.x.shape[0] == 3 + 1 + 6 + 4 and g.edge_attr.shape == (2 * (2 + 0 + 6 + 3), bond_dim())
    b = models.collate(g, torch.tensor([3, 1, 0]), None)
    assert torch.equal(b.src[b.rev], b.dst) and torch.equal(b.dst[b.rev], b.src)
    assert torch.equal(b.mol_of_atom[b.src], b.mol_of_atom[b.dst])  # no bond crosses molecules
    assert b.x.shape[0] == 4 + 1 + 3
    torch.manual_seed(0)
    model = dmpnn.network(DMPNNConfig(hidden=16, ffn_hidden=8), g.x.size(1), g.edge_attr.size(1), 0, 1).eval()
    together = model(b)
    alone = torch.cat([model(models.collate(g, torch.tensor([i]), None)) for i in (3, 1, 0)])
    assert torch.allclose(together, alone, atol=1e-5)  # permutation- and batch-invariant


def test_standardisation_strips_salts_and_charges():
    from rdkit import Chem

    parent = standardize(Chem.MolFromSmiles("[Na+].CC(=O)[O-]"))
    assert Chem.MolToSmiles(parent) == "CC(=O)O"


def test_splits_are_seeded_disjoint_and_scaffolds_stay_whole():
    from rdkit import Chem

    second = [r.replace("1", "3").replace("2", "4") for r in RINGS]  # other ring-closure digits
    mols = [Chem.MolFromSmiles(a + "C" + b + t) for a in RINGS for b in second for t in TAILS]  # 36 scaffolds
    assert all(m is not None for m in mols)
    scaffold = scaffolds(mols)
    for kind in ("random", "scaffold"):
        a = split_indices(mols, kind, (0.8, 0.1, 0.1), seed=1)
        b = split_indices(mols, kind, (0.8, 0.1, 0.1), seed=1)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert sorted(np.concatenate(a).tolist()) == list(range(len(mols)))
        assert len(a[0]) >= 0.75 * len(mols) and len(a[1]) > 0 and len(a[2]) > 0
    train, val, test = split_indices(mols, "scaffold", (0.8, 0.1, 0.1), seed=1)
    parts = [{scaffold[i] for i in part} for part in (train, val, test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    folds = list(fold_indices(mols, "scaffold", 4, seed=0))
    tested = np.concatenate([f[2] for f in folds])
    assert sorted(tested.tolist()) == list(range(len(mols)))  # every molecule is tested exactly once
    for train, val, test in folds:
        assert not ({scaffold[i] for i in train} & {scaffold[i] for i in test})
    with pytest.raises(ZooError, match="the scaffold split left the validation set empty"):
        split_indices(mols[:20], "scaffold", (0.8, 0.1, 0.1), seed=0)  # two scaffolds of 10
    with pytest.raises(ZooError, match="at least 3 folds"):
        list(fold_indices(mols, "random", 2, seed=0))
    with pytest.raises(ZooError, match="split_sizes"):
        parse_sizes("0.8,0.1")


def test_metrics_match_their_definitions():
    y = np.array([[1.0], [2.0], [3.0], [np.nan]])
    p = np.array([[1.5], [2.0], [2.0], [9.0]])
    s = score_tasks(y, p, "regression", METRIC_NAMES["regression"])
    assert s["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 1) / 3)) and s["mae"] == pytest.approx(0.5)
    c = score_tasks(np.array([[0.0], [1.0], [1.0], [0.0]]), np.array([[0.1], [0.8], [0.2], [0.3]]),
                    SCORE_TASK["classification"], METRIC_NAMES["classification"])
    assert c["roc_auc"] == pytest.approx(0.75) and 0 < c["macro_f1"] <= 1


def test_reading_bad_tables(tmp_path, logp_csv):
    t = read_table(cfg(data=str(logp_csv)))
    assert t.task == "regression" and len(t.mols) == len(smiles_set()) and t.y.shape == (len(smiles_set()), 1)
    bad = write_table(tmp_path / "bad.csv", [("CCO", 1), ("C1CC", 2), ("CC", 3), ("xyz", 4)])
    with pytest.raises(ZooError, match=r"bad.csv: 2 SMILES do not parse \(rows 3, 5\)"):
        read_table(cfg(data=str(bad)))
    t = read_table(cfg(data=str(bad), on_invalid="skip"))
    assert t.skipped == 2 and len(t.mols) == 2
    with pytest.raises(ZooError, match="no column 'activity'"):
        read_table(cfg(data=str(bad), target="activity"))
    text = write_table(tmp_path / "text.csv", [("CCO", 1), ("CC", "high")])
    with pytest.raises(ZooError, match="text.csv row 3: target 'y' is 'high', not a number"):
        read_table(cfg(data=str(text)))
    empty = write_table(tmp_path / "empty.csv", [("CCO", 1), ("CC", "")])
    with pytest.raises(ZooError, match="1 rows have no target value \\(first: row 3\\)"):
        read_table(cfg(data=str(empty)))
    multi = write_table(tmp_path / "multi.csv", [("CCO", 1, ""), ("CC", "", 0), ("CCC", 0, 1)],
                        header=("smiles", "a", "b"))
    t = read_table(cfg(data=str(multi), target="a,b"))
    assert t.task == "classification" and np.isnan(t.y).sum() == 2
    with pytest.raises(ZooError, match="no such file"):
        read_table(cfg(data=str(tmp_path / "nope.csv")))


def test_dmpnn_learns_logp_end_to_end(tmp_path, logp_csv):
    r = zoo_in_process("run", "molecules/dmpnn", f"data={logp_csv}", "target=y", "--budget", "200steps", "hidden=64",
                       "ffn_hidden=64", "batch_size=32", "eval_every=0.1",
                       "descriptors=false")  # RDKit's descriptors include logP itself: learn it from the graph
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_block(r.stdout)
    assert s["metric"] == "test_rmse" and s["benchmark"].startswith("own:")
    metrics = json.loads((next((tmp_path / "runs" / "molecules" / "dmpnn").iterdir()) / "summary.json")
                         .read_text())["metrics"]
    y = np.loadtxt(logp_csv, delimiter=",", skiprows=1, usecols=1)
    assert metrics["test_rmse"] < 0.4 * y.std() and metrics["test_r2"] > 0.8  # far better than the mean
    check_items(Path(s["run_dir"]))
    r = zoo_in_process("run", "molecules/dmpnn", f"data={logp_csv}", "target=y", "--budget", "6steps", "hidden=16",
                       "ffn_hidden=16", "split=scaffold", "folds=3", "ensemble=2")
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_block(r.stdout)
    assert s["benchmark"].endswith(":split=scaffold:folds=3:target=y")
    metrics = json.loads((tmp_path / "runs" / "molecules" / "dmpnn" / sorted(
        p.name for p in (tmp_path / "runs" / "molecules" / "dmpnn").iterdir())[-1] / "summary.json").read_text())
    assert "test_rmse_std" in metrics["metrics"]
    check_items(Path(s["run_dir"]))  # three folds' test molecules pooled


@pytest.mark.slow
def test_classification_reports_roc_auc_and_fp_xgb_runs(tmp_path):
    rows = [(s, int("O" in s or "N" in s)) for s in smiles_set()]
    data = write_table(tmp_path / "cls.csv", rows)
    r = zoo_in_process("run", "molecules/dmpnn", f"data={data}", "target=y", "--budget", "5steps", "hidden=16",
                       "ffn_hidden=16")
    assert r.returncode == 0, r.stderr + r.stdout
    assert summary_block(r.stdout)["metric"] == "test_roc_auc"
    check_items(Path(summary_block(r.stdout)["run_dir"]))
    r = zoo_in_process("run", "molecules/fp-xgb", f"data={data}", "target=y", "n_estimators=50", "bits=256")
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_block(r.stdout)
    assert s["metric"] == "test_roc_auc" and 0.0 <= float(s["value"]) <= 1.0
    assert s["features"].endswith("(256 Morgan r2 counts + RDKit descriptors)")
    check_items(Path(s["run_dir"]))


def test_bad_smiles_from_the_command_line_is_one_line_exit_2(tmp_path):
    data = write_table(tmp_path / "bad.csv", [("CCO", 1), ("C1CC", 2)] + [("C" * n, n) for n in range(1, 12)])
    r = zoo_in_process("run", "molecules/fp-xgb", f"data={data}", "target=y")
    assert r.returncode == 2 and "1 SMILES do not parse (row 3)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_bench_row_takes_the_metric_the_data_chose(tmp_path):
    rows = [(s, int("O" in s or "N" in s)) for s in smiles_set()]
    data = write_table(tmp_path / "cls.csv", rows)
    r = zoo_in_process("bench", "molecules/fp-xgb", "--seeds", "2", f"data={data}", "target=y", "n_estimators=20",
                       "bits=64", "folds=3", "--out", tmp_path / "runs", "--allow-dirty")
    assert r.returncode == 0, r.stderr + r.stdout
    row = json.loads((tmp_path / "board" / "benchmarks" / "results.jsonl").read_text().splitlines()[-1])
    assert row["metric"] == "test_roc_auc" and row["higher_is_better"] is True and row["n"] == 2
    assert row["benchmark"].startswith("own:") and row["benchmark"].endswith(":folds=3:target=y")
    assert row["peak_mem_mb"] > 0


# ---------------------------------------------------------------------------------------------
# Selection on validation, the test molecules scored once (issue 26)
# ---------------------------------------------------------------------------------------------

def two_ring_set() -> list[str]:
    """Two rings joined by a carbon, with a tail: 36 Bemis-Murcko scaffolds (fewer molecules, once repeats go)."""
    second = [r.replace("1", "3").replace("2", "4") for r in RINGS]  # other ring-closure digits
    return [a + "C" + b + t for a in RINGS for b in second for t in TAILS]


def unique_logp_csv(path, smiles=None):
    """The molecules (smiles_set by default) without repeats (methyl + cyclohexane is cyclohexane + methyl): one row
    per molecule, its target RDKit's logP."""
    from rdkit import Chem
    from rdkit.Chem import Descriptors

    seen, rows = set(), []
    for s in smiles or smiles_set():
        m = Chem.MolFromSmiles(s)
        if Chem.MolToSmiles(m) not in seen:
            seen.add(Chem.MolToSmiles(m))
            rows.append((s, round(Descriptors.MolLogP(m), 3)))
    return write_table(path, rows)


def _simple_run(budget: str, seed: int = 0, log=None):
    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import parse_budget

    return SimpleRun(budget=parse_budget(budget), seed=seed, log=log or (lambda line: None))


def test_split_csv_names_every_molecule_once_by_canonical_smiles(tmp_path):
    from rdkit import Chem

    path = unique_logp_csv(tmp_path / "unique.csv", two_ring_set())
    for kind, folds in (("random", 0), ("scaffold", 0), ("scaffold", 4)):
        c = cfg(data=str(path), split=kind, folds=folds)
        table = read_table(c)
        run = _simple_run("5steps")
        splits = splits_for(c, table, run)
        canonical = sorted(Chem.MolToSmiles(m) for m in table.mols)
        assert sorted(k for keys in run.splits.values() for k in keys) == canonical  # every molecule once
        if folds:
            assert list(run.splits) == [f"fold{k}" for k in range(folds)]
            assert "4-fold Bemis-Murcko scaffold" in run.extra["split"]
            continue
        assert list(run.splits) == ["train", "validation", "test"]
        train, val, test = (set(run.splits[p]) for p in ("train", "validation", "test"))
        assert not (train & val or train & test or val & test)  # disjoint by molecule
        assert [len(run.splits[p]) for p in ("train", "validation", "test")] == [len(i) for i in splits[0]]
        assert run.extra["split"].startswith(f"{'Bemis-Murcko scaffold' if kind == 'scaffold' else 'random'} "
                                             "0.8,0.1,0.1 by the run's seed: train ")


@pytest.mark.parametrize("name", ["molecules/dmpnn", "molecules/fp-xgb"])
def test_test_molecules_are_read_only_at_the_end(tmp_path, name):
    """Garbage test targets change the test metrics and nothing else: every validation value during training, the
    split and the validation metrics are the same, so nothing read the test targets before the models were final."""
    from recipe_zoo.recipes.molecules.dmpnn import train_dmpnn
    from recipe_zoo.recipes.molecules.fp_xgb import train_fp_xgb

    from rdkit import Chem

    train, cls = (train_dmpnn, DMPNNConfig) if name == "molecules/dmpnn" else (train_fp_xgb, FPXGBConfig)
    clean = unique_logp_csv(tmp_path / "clean.csv")
    args = dict(target="y", hidden=16, ffn_hidden=16, batch_size=32, eval_every=0.2, n_estimators=40, bits=128)
    runs = {}
    for path in (clean, tmp_path / "garbage.csv"):
        if path != clean:
            test = set(runs[clean][0].splits["test"])
            with open(clean) as f:
                rows = list(csv.reader(f))[1:]
            rows = [(s, 1000.0 + i if Chem.MolToSmiles(Chem.MolFromSmiles(s)) in test else y)
                    for i, (s, y) in enumerate(rows)]
            write_table(path, rows)
        run = _simple_run("30steps")
        runs[path] = (run, train(cfg(cls, data=str(path), **{k: v for k, v in args.items() if k != "target"}), run))
    (a, ma), (b, mb) = runs.values()
    strip = lambda rows: [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]  # noqa: E731
    assert a.splits == b.splits and strip(a.eval_rows) == strip(b.eval_rows)
    assert ma["val_rmse"] == mb["val_rmse"] and ma["val_r2"] == mb["val_r2"] and mb["test_rmse"] > 100
    assert ma["test_rmse_ci_low"] <= ma["test_rmse"] <= ma["test_rmse_ci_high"]
    if name == "molecules/dmpnn":
        assert len(a.eval_rows) >= 5 and all("val_rmse" in r and not any(k.startswith("test") for k in r)
                                             for r in a.eval_rows)


def test_multi_task_interval_resamples_molecules():
    """Two classification targets with gaps: the interval resamples molecules and scores them as score_tasks does."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, (200, 2)).astype(float)
    y[rng.random((200, 2)) < 0.2] = np.nan
    pred = np.nan_to_num(y, nan=0.5) * 0.3 + rng.random((200, 2)) * 0.7  # informative, far from perfect
    stat = item_scores(y, pred, "classification").statistic
    everything = np.arange(200)
    assert stat(everything) == pytest.approx(score_tasks(y, pred, "binary", ("roc_auc",))["roc_auc"])
    from recipe_zoo.core.metrics import bootstrap

    low, high = bootstrap(stat, 200)
    assert low < stat(everything) < high and 0.02 < high - low < 0.3
    reg = item_scores(np.where(np.isnan(y), np.nan, y * 3), pred, "regression").statistic
    idx = rng.integers(0, 200, 200)
    assert reg(idx) == pytest.approx(score_tasks(np.where(np.isnan(y), np.nan, y * 3)[idx], pred[idx], "regression",
                                                 ("rmse",))["rmse"])


def test_descriptors_are_finite_float32_or_nan():
    from rdkit import Chem

    big = Chem.MolFromSmiles("C" * 40 + "".join(f"C(c{i}ccccc{i})" for i in range(1, 9)) + "O" * 4 +
                             "C" * 40)  # large, branched: RDKit's Ipc overflows float32
    d = rdkit_descriptors([big, Chem.MolFromSmiles("CCO")])
    assert d.dtype == np.float32 and not np.isinf(d).any()


@pytest.mark.parametrize("name", ["molecules/dmpnn", "molecules/fp-xgb"])
def test_doctor_runs_clean_on_a_small_table(tmp_path, capsys, name):
    data = write_table(tmp_path / "alcohols.csv", [("C" * n + "O", n) for n in range(1, 30)])
    small = ["n_estimators=20", "bits=64"] if name == "molecules/fp-xgb" else []
    code, findings = run_doctor(name, [f"data={data}", "target=y", *small, "--steps", "12"], tmp_path)
    assert code == 0, capsys.readouterr().out[-3000:]
    checks = {f["check"] for f in findings}
    assert {"data/target", "data/leakage"} <= checks and not [f for f in findings if f["severity"] == "error"]
    assert ("overfit/one-batch" in checks) == (name == "molecules/dmpnn")  # fp-xgb stops after the data checks


def test_doctor_compares_molecules_not_spellings(tmp_path):
    """Each alcohol twice, written forwards and backwards (CCO, OCC): copies the doctor must see across the split."""
    rows = [(s, n) for n in range(1, 30) for s in ("C" * n + "O", "O" + "C" * n)]
    data = write_table(tmp_path / "twice.csv", rows)
    code, findings = run_doctor("molecules/fp-xgb", [f"data={data}", "target=y", "bits=64", "--steps", "12"], tmp_path)
    leak = next(f for f in findings if f["check"] == "data/leakage")
    assert code == 1 and leak["severity"] == "error" and "exact copies of training rows" in leak["message"]


# ---------------------------------------------------------------------------------------------
# Bad input, one table: each case through `zoo run` in-process, one line naming the file and row or key
# ---------------------------------------------------------------------------------------------

def _alcohols(smiles=lambda n: "C" * n + "O", y=lambda n: n) -> str:
    """Rows 2.. of the file hold the alcohols with 1.. carbons."""
    return "smiles,y\n" + "".join(f"{smiles(n)},{y(n)}\n" for n in range(1, 30))


GOOD = _alcohols()
TINY = ["target=y"]


@pytest.mark.parametrize("recipe, name, content, args, needles, budget", [
    ("molecules/dmpnn", "nope.csv", None, TINY, ["nope.csv", "no such file"], "3steps"),
    ("molecules/fp-xgb", "zero.csv", b"", TINY, ["zero.csv", "empty file"], "3steps"),
    ("molecules/dmpnn", "header.csv", "smiles,y\n", TINY, ["header.csv", "no rows"], "3steps"),
    ("molecules/fp-xgb", "t.csv", GOOD, [*TINY, "smiles=smi"], ["t.csv", "no column 'smi' (columns: smiles, y)"],
     "3steps"),
    ("molecules/dmpnn", "t.csv", GOOD, [*TINY, "target=logp"], ["t.csv", "no column 'logp'"], "3steps"),
    ("molecules/fp-xgb", "t.csv", _alcohols(y=lambda n: "high" if n == 4 else n), TINY,
     ["t.csv row 5", "target 'y' is 'high', not a number"], "3steps"),
    ("molecules/dmpnn", "t.csv", _alcohols(y=lambda n: "" if n in (3, 8) else n), TINY,
     ["t.csv", "2 rows have no target value (first: row 4)"], "3steps"),
    ("molecules/dmpnn", "t.csv", _alcohols(smiles=lambda n: "C1CC" if n == 6 else "C" * n + "O"), TINY,
     ["t.csv", "1 SMILES do not parse (row 7)", "row 7 is 'C1CC'"], "3steps"),
    ("molecules/fp-xgb", "t.csv", _alcohols(smiles=lambda n: "CXO" if n in (2, 5) else "C" * n + "O"), TINY,
     ["t.csv", "2 SMILES do not parse (rows 3, 6)", "row 3 is 'CXO'"], "3steps"),
    ("molecules/fp-xgb", "latin.csv", GOOD.encode().replace(b"\nCCCO,", b"\nCC\xff\xfe\xfa,"), TINY,
     ["latin.csv row 4", "0xff", "not UTF-8"], "3steps"),
    ("molecules/dmpnn", "t.csv", GOOD, [*TINY, "smile=smiles"], ["unknown key 'smile'", "did you mean 'smiles'"],
     "3steps"),
    ("molecules/fp-xgb", "t.csv", GOOD, [*TINY, "n_estimator=5"],
     ["unknown key 'n_estimator'", "did you mean 'n_estimators'"], "3steps"),
    ("molecules/dmpnn", "t.csv", GOOD, [*TINY, "batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"),
    ("molecules/fp-xgb", "t.csv", _alcohols(y=lambda n: int(n == 2)), TINY,
     ["t.csv", "target 'y' has one class only among the 23 training molecules"], "3steps"),
    ("molecules/fp-xgb", "t.csv", _alcohols(y=lambda n: int(n == 1)), TINY, ["test_roc_auc is undefined"], "3steps"),
    ("molecules/fp-xgb", "t.csv", GOOD, TINY, ["budget '0s'", "positive"], "0s"),
    ("molecules/dmpnn", "t.csv", GOOD, TINY, ["budget '-5'"], "-5"),
    ("molecules/dmpnn", "t.csv", GOOD, [*TINY, "trees=1"], ["trees", "[0, 1)"], "3steps"),
], ids=["missing-file", "empty-0-bytes", "header-only", "no-smiles-column", "no-target-column", "text-target",
        "nan-target", "invalid-smiles-dmpnn", "invalid-smiles-fp-xgb", "non-utf8", "typo-key-dmpnn",
        "typo-key-fp-xgb", "ill-typed-value", "one-class-train", "one-class-test", "budget-0s", "budget-negative",
        "trees-take-everything"])
def test_bad_input_table(tmp_path, capfd, recipe, name, content, args, needles, budget):
    path = write_file(tmp_path / name, content)
    small = {"molecules/dmpnn": ["hidden=16", "ffn_hidden=16"], "molecules/fp-xgb": ["n_estimators=20", "bits=64"]}
    bad_input(capfd, [recipe, f"data={path}", *args, *small[recipe]], tmp_path / "runs", *needles, budget=budget)


def test_standardize_never_moves_a_molecule_between_splits(tmp_path):
    """Salts whose counter-ion has a ring (besylate, tosylate) give the raw molecule another Bemis-Murcko scaffold
    than its parent's. The split groups the standardised parents whatever ``standardize`` (a method setting, not a
    key field), so both settings give the same train / validation / test molecules and the same split.csv names;
    only what the features read differs."""
    from rdkit import Chem

    salts = ["c1ccc(cc1)S(=O)(=O)[O-]", "Cc1ccc(cc1)S(=O)(=O)[O-]"]  # besylate (10 heavy atoms), tosylate (11)
    drugs = [s for s in two_ring_set() if Chem.MolFromSmiles(s).GetNumHeavyAtoms() > 11]  # the largest fragment
    smiles = [f"{s}.{salts[i % 2]}" if i % 3 == 0 else s for i, s in enumerate(drugs)]
    path = write_table(tmp_path / "salts.csv", [(s, float(i % 7)) for i, s in enumerate(smiles)])
    for folds in (0, 3):
        seen = []
        for standardize_inputs in (True, False):
            c = cfg(data=str(path), split="scaffold", folds=folds, standardize=standardize_inputs)
            table = read_table(c)
            run = _simple_run("5steps")
            seen.append(([tuple(map(tuple, s)) for s in splits_for(c, table, run)], run.splits))
        assert seen[0] == seen[1]
    raw = read_table(cfg(data=str(path), standardize=False))
    assert scaffolds(raw.mols) != scaffolds(raw.split_mols)  # grouping the inputs as read would move the split
    assert any("." in Chem.MolToSmiles(m) for m in raw.mols) and not any("." in s for s in seen[0][1]["fold0"])


def test_dmpnn_fine_tunes_from_a_run_keeping_its_encoder_and_featuriser(tmp_path, logp_csv, capfd):
    """weights=RUN: the source's encoder, featuriser and descriptor statistics are kept; on the source's own data
    its weights, scored before the first step, give its validation RMSE to 1e-6; on two targets the output layer
    is new (logged) and the targets' scaling this run's; the card names the source. A contradicting encoder width,
    test molecules the source trained on (another seed's split of the same table) or another recipe's run: one
    line."""
    from conftest import train_in_process

    small = ["target=y", "hidden=16", "ffn_hidden=16", "batch_size=32"]
    source = train_in_process(tmp_path / "pre", "molecules/dmpnn", f"data={logp_csv}", *small, budget="8steps")
    val = json.loads((source / "summary.json").read_text())["metrics"]["val_rmse"]
    tuned = train_in_process(tmp_path / "same", "molecules/dmpnn", f"data={logp_csv}", "target=y", "batch_size=32",
                             f"weights={source}", budget="4steps")
    summary = json.loads((tuned / "summary.json").read_text())
    assert summary["metrics"]["val_rmse_start"] == pytest.approx(val, abs=1e-6)
    assert summary["benchmark"].endswith(":fine-tuned")
    assert json.loads((tuned / "model.json").read_text())["source"]["run_id"] == source.name
    two = tmp_path / "two.csv"
    with open(logp_csv) as f, open(two, "w", newline="") as g:
        rows = list(csv.reader(f))
        csv.writer(g).writerows([rows[0] + ["z"]] + [r + [str(2 * float(r[1]) + 1)] for r in rows[1:]])
    moved = train_in_process(tmp_path / "two", "molecules/dmpnn", f"data={two}", "target=y,z", "batch_size=32",
                             f"weights={source}", budget="4steps")
    # zoo doctor on that fine-tune: the new output layer may move as it likes; the check is of the kept tensors
    _, findings = run_doctor("molecules/dmpnn", [f"data={two}", "target=y,z", "batch_size=32", f"weights={source}",
                                                 "--steps", "10"], tmp_path / "doc")
    assert "health/weight-change" in {f["check"] for f in findings}
    assert dmpnn.Start(finetune.read_source(str(source), ("molecules/dmpnn",)), print).new_tensors(2) == ("head.4.",)
    log = (moved / "log.txt").read_text()
    assert "a new output layer for 2 target(s) (the source predicts 1)" in log and "fine-tuning from" in log
    bad_input(capfd, ["molecules/dmpnn", f"data={logp_csv}", "target=y", f"weights={source}", "hidden=32"],
              tmp_path / "bad", "hidden=32: the source run", "was trained with hidden=16",
              "keeps its encoder and featuriser")
    bad_input(capfd, ["molecules/dmpnn", f"data={logp_csv}", "target=y", f"weights={source}", "--seed", "5"],
              tmp_path / "bad", "test molecules were in the source run's training or validation data (first: ")
    fp = train_in_process(tmp_path / "fp", "molecules/fp-xgb", f"data={logp_csv}", "target=y", "n_estimators=20",
                          "bits=64", budget="8steps")
    bad_input(capfd, ["molecules/dmpnn", f"data={logp_csv}", "target=y", f"weights={fp}"], tmp_path / "bad",
              "a molecules/fp-xgb run; this recipe fine-tunes from molecules/dmpnn runs")


def test_exclude_pretrains_without_a_later_fine_tunes_molecules(tmp_path, logp_csv, capfd):
    """exclude=CSV: its molecules (matched as standardised canonical SMILES, however written or salted) leave the
    table before the split, counted in the log and the key; a fine-tune on that CSV then passes the leakage check
    that refuses a source trained on its test molecules. A missing file or a CSV without a SMILES column: one
    line."""
    from rdkit import Chem

    from conftest import train_in_process

    target = smiles_set()[::3]  # a third of the molecules, some written as salts or with another atom order
    spelled = [s + ".[Na+].[Cl-]" if i % 7 == 0 else s for i, s in enumerate(target)]
    other = write_table(tmp_path / "other.csv", [(s, i % 5) for i, s in enumerate(spelled)])
    small = ["target=y", "hidden=16", "ffn_hidden=16", "batch_size=32"]
    source = train_in_process(tmp_path / "pre", "molecules/dmpnn", f"data={logp_csv}", f"exclude={other}", *small,
                              budget="4steps")
    with open(source / "split.csv") as f:
        kept = {row["item"] for row in csv.DictReader(f)}
    canon = {s: Chem.MolToSmiles(standardize(Chem.MolFromSmiles(s))) for s in smiles_set()}
    gone = {canon[s] for s in target}
    assert kept == set(canon.values()) - gone
    dropped = sum(canon[s] in gone for s in smiles_set())  # written otherwise in the table, the same molecule
    assert dropped > len(target)
    log = (source / "log.txt").read_text()
    assert f"exclude={other}: {dropped} of {logp_csv}'s {len(smiles_set())} molecules are in it" in log
    assert "exclude=" in json.loads((source / "summary.json").read_text())["benchmark"]
    tuned = train_in_process(tmp_path / "tuned", "molecules/dmpnn", f"data={other}", "target=y", "batch_size=32",
                             f"weights={source}", budget="2steps")
    assert json.loads((tuned / "model.json").read_text())["source"]["run_id"] == source.name
    bad_input(capfd, ["molecules/dmpnn", f"data={logp_csv}", "target=y", f"exclude={tmp_path / 'none.csv'}"],
              tmp_path / "bad", "exclude=", "none.csv: no such CSV file")
    bad_input(capfd, ["molecules/dmpnn", f"data={logp_csv}", "target=y", f"exclude={logp_csv}", "smiles=smiles"],
              tmp_path / "bad", "no molecules left")


def test_dmpnn_fine_tune_can_train_its_head_first_on_the_frozen_encoder(tmp_path, logp_csv, capfd):
    """head_fraction: the FFN head alone trains on the source's frozen encoder for that fraction of the budget,
    then everything. At 1 the encoder is the source's to the bit; at 0.5 it moves, from the step the log names.
    Without weights= it is refused in one line."""
    from conftest import train_in_process
    from recipe_zoo.core import artifact

    small = ["target=y", "hidden=16", "ffn_hidden=16", "batch_size=32"]
    source = train_in_process(tmp_path / "pre", "molecules/dmpnn", f"data={logp_csv}", *small, budget="4steps")
    before = artifact.load_tensors(source / json.loads((source / "model.json").read_text())["weights"][0])

    def encoder_moved(fraction: str) -> tuple[bool, bool, str]:
        run = train_in_process(tmp_path / fraction, "molecules/dmpnn", f"data={logp_csv}", "target=y",
                               "batch_size=32", f"weights={source}", f"head_fraction={fraction}", "lr=0.01",
                               "eval_every=1", budget="6steps")
        after = artifact.load_tensors(run / json.loads((run / "model.json").read_text())["weights"][0])
        moved = {k.startswith("head.") for k in before if not torch.equal(before[k], after[k])}
        return False in moved, True in moved, (run / "log.txt").read_text()

    encoder, head, log = encoder_moved("1")
    assert not encoder and head and "the encoder trains from" not in log
    encoder, head, log = encoder_moved("0.5")
    assert encoder and head and "head_fraction=0.5: the encoder trains from step 3 on" in log
    bad_input(capfd, ["molecules/dmpnn", f"data={logp_csv}", "target=y", "head_fraction=0.2"], tmp_path / "bad",
              "head_fraction=0.2: a fine-tune's first stage; give weights=RUN_DIR")


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_the_blend_weight_follows_the_better_model_on_validation(task):
    """trees=S: the D-MPNN's weight is the one that scores best on validation, whichever way the metric points
    (RMSE down, ROC-AUC up): 1 when the network's validation predictions are exact (an even blend where the
    ROC-AUC ties at 1), 0 when they are backwards."""
    from types import SimpleNamespace

    from recipe_zoo.recipes.molecules import blend

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 8)).astype(np.float32)
    y = X[:, :1] + 0.5 * rng.normal(size=(120, 1))
    if task == "classification":
        y = (y > 0).astype(float)
    table = SimpleNamespace(y=y, task=task, targets=["y"], mols=[None] * 120)
    run = SimpleNamespace(seed=0, log=lambda line: None)
    idx = (np.arange(80), np.arange(80, 100), np.arange(100, 120))
    cfg = DMPNNConfig(data="unused.csv")
    exact = blend.fit_split(cfg, run, table, X, idx, 0, None, (y[idx[1]], y[idx[2]]))
    assert exact[1] == (1.0 if task == "regression" else 0.5)
    backwards = blend.fit_split(cfg, run, table, X, idx, 0, None, (1 - y[idx[1]] * 3, 1 - y[idx[2]] * 3))
    assert backwards[1] == 0.0 and backwards[3].shape == (20, 1)
