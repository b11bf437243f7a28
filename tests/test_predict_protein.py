"""Protein runs as models (issue 25): each recipe saves what inference needs without pickle (heads and
fine-tuned weights as safetensors, their scalars, the ESM-2 choice and pooling in model.json, LoRA as peft's
adapter folder), ``predict`` with no data reproduces the run's test metrics and predictions.csv within 1e-6, new
FASTA / CSV / variant lists are scored as the run scores them, and bad input is one line and exit 2."""
import csv
import json

import numpy as np
import pytest
import torch

from conftest import make_tiny_esm, predict_bad, roundtrip
from recipe_zoo import load
from recipe_zoo.cli import main

WT = "MKTAYIAKQRQISFVKSHFS"  # 20 residues
AMINO = "ACDEFGHIKLMNPQRSTVWY"


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on a shared machine: a second thread mostly waits
    yield
    torch.set_num_threads(threads)


def scan(n: int = 160, seed: int = 0):
    """Single mutants of WT, fitness mostly by position: (mutation strings, sequences, fitness)."""
    rng = np.random.default_rng(seed)
    site = rng.normal(size=len(WT))
    names, seqs, y = [], [], []
    while len(names) < n:
        p = int(rng.integers(len(WT)))
        a = AMINO[int(rng.integers(20))]
        if a == WT[p] or f"{WT[p]}{p + 1}{a}" in names:
            continue
        names.append(f"{WT[p]}{p + 1}{a}")
        seqs.append(WT[:p] + a + WT[p + 1:])
        y.append(site[p] + rng.normal(0, 0.2))
    return names, seqs, np.array(y)


def write_fasta(path, seqs, labels):
    path.write_text("".join(f">v{i}|{lab}\n{s}\n" for i, (s, lab) in enumerate(zip(seqs, labels))))
    return path


def write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.fixture
def fasta(tmp_path):
    _, seqs, y = scan()
    return write_fasta(tmp_path / "scan.fasta", seqs, [f"{v:.4f}" for v in y])


def train(tmp_path, recipe, *args, budget="5steps"):
    out = tmp_path / "runs" / f"{len(list((tmp_path / 'runs').glob('*'))) if (tmp_path / 'runs').exists() else 0}"
    assert main(["run", recipe, *map(str, args), "--budget", budget, "--out", str(out), "--device", "cpu"]) == 0
    (run_dir,) = (out / recipe).iterdir()
    assert not (run_dir / "head.pt").exists()
    card = json.loads((run_dir / "model.json").read_text())
    assert card["recipe"] == recipe and all((run_dir / w).exists() for w in card["weights"])
    return run_dir


def saved_rows(run_dir):
    return list(csv.DictReader(open(run_dir / "predictions.csv")))


def test_onehot_mlp_head_round_trip_new_sequences_and_bad_input(tmp_path, fasta, capfd):
    run_dir = train(tmp_path, "protein/onehot", f"data={fasta}", "head=mlp", "hidden=16")
    result = roundtrip(run_dir)
    assert {"test_spearman", "test_rmse", "val_spearman", "test_spearman_ci_low"} <= set(result.metrics)
    card = json.loads((run_dir / "model.json").read_text())
    assert card["preprocess"]["length"] == len(WT) and card["head"]["head"] == "mlp"
    # the test rows again, from a CSV of their sequences: the same predictions
    ids = {f">{r['id']}" for r in saved_rows(run_dir)}
    records = fasta.read_text().split("\n")
    test = [(records[i][1:], records[i + 1]) for i in range(0, len(records) - 1, 2) if records[i] in ids]
    model = load(run_dir, device="cpu")
    got = model.predict(data=str(write_csv(tmp_path / "new.csv", ["name", "sequence"], test)))
    assert [r["name"] for r in got.rows] == [r["id"] for r in saved_rows(run_dir)]
    for mine, theirs in zip(got.rows, saved_rows(run_dir)):
        assert mine["prediction"] == pytest.approx(float(theirs["prediction"]), abs=1e-6)
    # a longer sequence: residues past the training's length carry no weight (they were padding)
    longer = write_fasta(tmp_path / "longer.fasta", [WT, WT + "GGG"], ["x", "y"])
    a, b = model.predict(data=str(longer)).rows
    assert a["prediction"] == pytest.approx(b["prediction"], abs=1e-6) and a["id"] == "v0|x"
    bad = write_csv(tmp_path / "bad.csv", ["sequence"], [[WT], [WT[:3] + "J" + WT[4:]]])
    predict_bad(capfd, run_dir, f"data={bad}", needles=("bad.csv row 3", "unknown amino-acid letter 'J'"))
    bad_fasta = write_fasta(tmp_path / "bad.fasta", [WT, "MKT*Y"], ["a", "b"])
    predict_bad(capfd, run_dir, f"data={bad_fasta}", needles=("bad.fasta record 'v1|b' (line 3)", "'*'"))
    predict_bad(capfd, run_dir, f"data={write_csv(tmp_path / 'cols.csv', ['seq'], [[WT]])}",
                needles=("cols.csv", "no column 'sequence'"))
    predict_bad(capfd, run_dir, f"data={tmp_path / 'nope.fasta'}", needles=("nope.fasta", "no such file"))
    predict_bad(capfd, run_dir, "sequnce=seq", needles=("unknown key 'sequnce'",))
    assert main(["export", str(run_dir), "--format", "safetensors", "--out", str(tmp_path / "st")]) == 0
    from safetensors.torch import load_file

    tensors = load_file(tmp_path / "st" / "head.safetensors")
    assert {"features.keep", "features.mean", "mlp.net.1.weight"} <= set(tensors)
    card = json.loads((run_dir / "model.json").read_text())
    card["format_version"] = 99
    (run_dir / "model.json").write_text(json.dumps(card))
    predict_bad(capfd, run_dir, needles=("format_version 99",))


def test_onehot_classification_rows_name_the_classes(tmp_path):
    _, seqs, y = scan()
    labels = ["high" if v > np.median(y) else "low" for v in y]
    run_dir = train(tmp_path, "protein/onehot", f"data={write_fasta(tmp_path / 'c.fasta', seqs, labels)}",
                    "head=ridge", "encoding=blosum")
    result = roundtrip(run_dir)
    assert "test_accuracy" in result.metrics
    row = result.rows[0]
    assert row["target"] in ("high", "low") and row["prediction"] in ("high", "low")
    assert row["prediction"] == max(("high", "low"), key=lambda c: row[f"score_{c}"])


def test_esm_embed_round_trip_new_sequences_and_the_weights_check(tmp_path, fasta, tiny_esm, capfd):
    run_dir = train(tmp_path, "protein/esm-embed", f"data={fasta}", f"esm_weights={tiny_esm}", "head=krr")
    roundtrip(run_dir)
    card = json.loads((run_dir / "model.json").read_text())
    pre = card["preprocess"]
    assert card["head"]["head"] == "krr" and card["head"]["gamma"] > 0
    assert pre["layer"] == 2 and pre["pool"] == "mean" and pre["width"] == 32 and pre["esm"]["digest"]
    new = write_csv(tmp_path / "new.csv", ["seq"], [[WT], [WT[::-1]]])
    got = load(run_dir, device="cpu").predict(data=str(new), sequence="seq", batch_size=1)
    assert len(got.rows) == 2 and all(isinstance(r["prediction"], float) for r in got.rows)
    other = make_tiny_esm(tmp_path / "other" / "esm2_t2_tiny.pt", seed=1)
    predict_bad(capfd, run_dir, f"data={new}", "sequence=seq", f"esm_weights={other}",
                needles=("not the ESM-2 weights this run was trained with",))


def test_esm_embed_on_your_own_embeddings(tmp_path, capfd):
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(200, 8)).astype(np.float32)
    np.savez(tmp_path / "e.npz", emb=emb, fitness=emb[:, 0] + rng.normal(0, 0.1, 200))
    run_dir = train(tmp_path, "protein/esm-embed", f"data={tmp_path / 'e.npz'}", "target=fitness", "head=mlp",
                    "hidden=8")
    roundtrip(run_dir)
    np.savez(tmp_path / "new.npz", emb=emb[:5])
    got = load(run_dir, device="cpu").predict(data=str(tmp_path / "new.npz"))
    assert [r["row"] for r in got.rows] == list(range(5))
    np.savez(tmp_path / "wide.npz", emb=np.zeros((3, 9), np.float32))
    predict_bad(capfd, run_dir, f"data={tmp_path / 'wide.npz'}", needles=("9 wide", "fitted on 8"))
    predict_bad(capfd, run_dir, f"data={write_fasta(tmp_path / 's.fasta', [WT], ['1'])}",
                needles=("precomputed embeddings",))


@pytest.mark.parametrize("head", ["mlp", "ridge"])
def test_rank_targets_predict_in_the_targets_units_and_round_trip(tmp_path, head):
    """target_scale=rank: the heads fit Gaussian ranks; the saved head maps predictions back to fitness units (the
    predict promise holds through the map), and the card says which targets were fitted."""
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(200, 8)).astype(np.float32)
    fitness = np.exp(emb[:, 0] + rng.normal(0, 0.1, 200))  # skewed, like fitness
    np.savez(tmp_path / "e.npz", emb=emb, fitness=fitness)
    run_dir = train(tmp_path, "protein/esm-embed", f"data={tmp_path / 'e.npz'}", "target=fitness", f"head={head}",
                    "hidden=8", "target_scale=rank")
    roundtrip(run_dir)
    card = json.loads((run_dir / "model.json").read_text())
    assert card["head"]["target_scale"] == "rank"
    pred = np.array([float(r["prediction"]) for r in saved_rows(run_dir)])
    assert fitness.min() / 10 < np.median(pred) < fitness.max()  # fitness units, not ranks around 0


@pytest.mark.slow
def test_esm_finetune_lora_round_trip_and_export(tmp_path, fasta, tiny_esm, capfd):
    run_dir = train(tmp_path, "protein/esm-finetune", f"data={fasta}", f"esm_weights={tiny_esm}", "hidden=8",
                    "batch_size=16", "lora_r=2")
    roundtrip(run_dir)
    card = json.loads((run_dir / "model.json").read_text())
    assert card["weights"] == ["adapter", "head.safetensors"] and card["preprocess"]["esm"]["mode"] == "lora"
    got = load(run_dir, device="cpu").predict(data=str(write_fasta(tmp_path / "n.fasta", [WT, WT[:-2]], [0, 1])))
    assert [r["id"] for r in got.rows] == ["v0|0", "v1|1"]
    bad = write_csv(tmp_path / "bad.csv", ["sequence"], [[WT + "B"], ["MKTAJ"]])
    predict_bad(capfd, run_dir, f"data={bad}", needles=("bad.csv row 3", "'J'"))
    out = tmp_path / "pretrained"
    assert main(["export", str(run_dir), "--format", "pretrained", "--out", str(out)]) == 0
    from peft import PeftModel
    from safetensors.torch import load_file

    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import Budget
    from recipe_zoo.recipes.protein import esm2
    from recipe_zoo.recipes.protein.config import FinetuneConfig

    base, _, _ = esm2.load_esm(FinetuneConfig(esm_weights=str(tiny_esm)), SimpleRun(Budget("steps", 1)))
    peft = PeftModel.from_pretrained(base, str(out / "adapter"))
    saved = load_file(run_dir / "adapter" / "adapter_model.safetensors")
    state = {k: v for k, v in peft.state_dict().items() if "lora_" in k}
    assert len(state) == len(saved) > 0 and all(any(torch.equal(v, w) for w in state.values()) for v in saved.values())
    assert set(load_file(out / "head.safetensors")) == {"head.net.1.weight", "head.net.1.bias", "head.net.4.weight",
                                                        "head.net.4.bias"}


@pytest.mark.slow
def test_esm_finetune_full_and_scratch_keep_every_weight(tmp_path, fasta, tiny_esm, capfd):
    run_dir = train(tmp_path, "protein/esm-finetune", f"data={fasta}", f"esm_weights={tiny_esm}", "hidden=8",
                    "batch_size=16", "finetune=full")
    tiny_esm.unlink()  # every weight is in the run: the base file is not needed
    roundtrip(run_dir)
    capfd.readouterr()
    assert main(["export", str(run_dir), "--format", "pretrained", "--out", str(tmp_path / "p")]) == 2
    assert "this run fine-tuned every weight" in capfd.readouterr().err
    scratch = train(tmp_path, "protein/esm-finetune", f"data={fasta}", "esm_model=scratch", "scratch_dim=16",
                    "scratch_layers=1", "scratch_heads=2", "hidden=8", "batch_size=16")
    roundtrip(scratch)
    assert json.loads((scratch / "model.json").read_text())["weights"] == ["model.safetensors"]


def test_esm_zeroshot_round_trip_and_variant_lists(tmp_path, tiny_esm, capfd):
    names, _, y = scan(12)
    table = write_csv(tmp_path / "dms.csv", ["mutant", "fitness"], [*zip(names, np.round(y, 4)), ("K2A", "")])
    run_dir = train(tmp_path, "protein/esm-zeroshot", f"data={table}", f"wt={WT}", "target=fitness",
                    f"esm_weights={tiny_esm}")
    result = roundtrip(run_dir)
    assert result.rows[-1]["target"] is None and result.metrics["test_spearman"] == pytest.approx(json.loads(
        (run_dir / "summary.json").read_text())["metrics"]["test_spearman"], abs=1e-6)  # the README's promise
    score = {r["mutant"]: float(r["score"]) for r in saved_rows(run_dir)}
    (tmp_path / "list.txt").write_text(f"{names[0]}\n\n{names[1]}:{names[2]}\n")
    seqs = [WT, WT[:1] + "A" + WT[2:]]
    for name, data in (("txt", tmp_path / "list.txt"), ("fasta", write_fasta(tmp_path / "v.fasta", seqs, "ab"))):
        rows = load(run_dir, device="cpu").predict(data=str(data), batch_size=2).rows
        if name == "txt":
            assert rows[0]["score"] == pytest.approx(score[names[0]], abs=1e-6)
            if int(names[1][1:-1]) != int(names[2][1:-1]):  # two sites: the sum of the single scores
                assert rows[1]["score"] == pytest.approx(score[names[1]] + score[names[2]], abs=1e-5)
        else:
            assert rows[0] == {"id": "v0|a", "mutant": "", "score": 0.0}  # the wild type itself
            assert rows[1]["mutant"] == "K2A" and rows[1]["score"] == pytest.approx(score["K2A"], abs=1e-6)
    new = load(run_dir, device="cpu").predict(data=str(table))  # a measured table: its figures, not the run's
    assert "spearman" in new.metrics and "test_spearman" not in new.metrics
    predict_bad(capfd, run_dir, f"data={write_csv(tmp_path / 'b.csv', ['mutant'], [['K2A'], ['K2J']])}",
                needles=("b.csv row 3", "'J'"))
    predict_bad(capfd, run_dir, f"data={write_fasta(tmp_path / 'j.fasta', [WT[:4] + 'J' + WT[5:]], 'a')}",
                needles=("j.fasta record 'v0|a' (line 1)", "unknown amino-acid letter 'J'"))
    predict_bad(capfd, run_dir, f"data={write_csv(tmp_path / 'c.csv', ['mut'], [['K2A']])}",
                needles=("no column 'mutant'",))


def test_position_mean_round_trip_and_new_variants(tmp_path, capfd):
    names, seqs, y = scan(200)
    table = write_csv(tmp_path / "scan.csv", ["mutant", "sequence", "fitness"], zip(names, seqs, np.round(y, 4)))
    run_dir = train(tmp_path, "protein/position-mean", f"data={table}", "target=fitness")
    roundtrip(run_dir)
    means = json.loads((run_dir / "position_means.json").read_text())
    new = write_csv(tmp_path / "new.csv", ["mutant"], [["K2A"], ["K2A:T3W"], ["M1*"]])
    rows = load(run_dir, device="cpu").predict(data=str(new)).rows
    m = {int(p): v for p, v in means["means"].items()}
    expect = [m.get(2, means["overall"]), np.mean([m[p] for p in (2, 3) if p in m]), m.get(1, means["overall"])]
    assert [r["prediction"] for r in rows] == pytest.approx(expect, abs=1e-12)
    predict_bad(capfd, run_dir, f"data={write_csv(tmp_path / 'b.csv', ['mutant'], [['K2A'], ['K2J']])}",
                needles=("b.csv row 3", "unknown amino-acid letter 'J'"))
    # positions read from variant sequences: new sequences are compared with the training consensus
    fasta_run = train(tmp_path, "protein/position-mean", f"data={write_fasta(tmp_path / 's.fasta', seqs, y)}")
    roundtrip(fasta_run)
    rows = load(fasta_run, device="cpu").predict(data=str(write_fasta(tmp_path / "n.fasta", [seqs[0]], "a"))).rows
    assert rows[0]["prediction"] == pytest.approx(
        json.loads((fasta_run / "position_means.json").read_text())["means"].get(names[0][1:-1]), abs=1e-12)
    predict_bad(capfd, fasta_run, f"data={write_fasta(tmp_path / 'short.fasta', [WT[:-1]], 'a')}",
                needles=("short.fasta record 'v0|a'", "19 residues"))


@pytest.mark.parametrize("features", [30, 150])  # primal ridge (30 < 80 rows) and dual ridge (150 > 80)
def test_saved_closed_form_heads_predict_within_round_off_and_reproduce_the_metrics(tmp_path, features):
    """Saved and read back, a ridge / kernel ridge head keeps its matrices' memory layout (scipy's solves give
    column-major ones) but not their buffers' alignment, and BLAS promises no bitwise result across either: on
    an EPYC (family 25 model 17) 4 of 120 kernel ridge predictions moved by up to 2.0e-15. The predictions agree
    within what Spearman's ranks treat as noise (``metrics.tie_tolerance``, 64 eps of float64 times the largest
    prediction), and the metrics to 1e-6, as the README promises for ``zoo predict``, also where every item is
    there twice (duplicate sequences: predictions equal up to that noise, which once flipped a rank)."""
    from recipe_zoo.core.artifact import PredictRun
    from recipe_zoo.core.metrics import tie_tolerance
    from recipe_zoo.recipes.protein import closed_form, saved
    from recipe_zoo.recipes.protein.inference import split_metrics
    from recipe_zoo.recipes.protein.sequences import ProteinData

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, features)).astype(np.float32)[rng.permutation(np.arange(120) % 60)]  # each row twice
    data = ProteinData("t", X[:, 0] + rng.normal(0, 0.1, 120), "regression",
                       split=(np.arange(80), np.arange(80, 100), np.arange(100, 120)))
    _, val, test = data.split
    for kinds in (["ridge"], ["krr"]):
        _, head = closed_form.select_closed_form(data, X, True, kinds, log=lambda line: None)
        meta = saved.save_head(tmp_path, head)
        back = saved.load_head(PredictRun(dir=tmp_path, card={"head": meta}, out=tmp_path / "o.csv", device="cpu"))
        for name in ("coef", "basis"):
            if getattr(head, name) is not None:
                assert getattr(back, name).stride() == getattr(head, name).stride(), name
        before, after = head.predict(X), back.predict(X)
        assert before.dtype == after.dtype == np.float64
        assert np.abs(after - before).max() <= tie_tolerance(before), (kinds, np.abs(after - before).max())
        reported = split_metrics(data, before[val], before[test])
        again = split_metrics(data, after[val], after[test])
        assert reported.keys() == again.keys() and "val_spearman" in reported
        for key in reported:
            assert abs(again[key] - reported[key]) <= 1e-6, (kinds, key, again[key], reported[key])
