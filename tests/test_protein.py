"""Protein: reading FASTA/CSV/NPZ/FLIP data and its bad inputs, encodings, the closed-form and MLP
heads, ESM-2 weights through the local-file path users take (a tiny random ESM-2 saved in fair-esm's
layout), the embedding cache, LoRA fine-tuning, and masked-marginal zero-shot scores checked by hand."""
import functools
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import conftest
from conftest import run_doctor, zoo
from recipe_zoo.recipes.protein import (closed_form, encodings, esm2, esm_finetune, heads, loading, mutations,
                                       position_mean, scoring, sequences)
from recipe_zoo.recipes.protein import split as psplit
from recipe_zoo.recipes.protein.config import FinetuneConfig, OnehotConfig, ProteinConfig
from recipe_zoo.core import splits
from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.budget import Budget, parse_budget
from recipe_zoo.core.errors import ZooError

WT = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRV"  # 40 residues


def variants(n_single: int = 300, n_double: int = 100, seed: int = 0):
    """Single and double mutants of WT with an additive fitness: a position's tolerance plus a smaller
    residue term (as in deep mutational scans, where the site explains most of the effect)."""
    rng = np.random.default_rng(seed)
    pos_weight = rng.normal(size=len(WT))
    aa_value = {a: v for a, v in zip(sequences.AMINO, rng.normal(size=20))}
    seqs, fitness, names = [], [], []
    for k in range(n_single + n_double):
        s = list(WT)
        muts = []
        for p in rng.choice(len(WT), size=1 if k < n_single else 2, replace=False):
            a = rng.choice([x for x in sequences.AMINO if x != WT[p]])
            s[p] = a
            muts.append(f"{WT[p]}{p + 1}{a}")
        seqs.append("".join(s))
        fitness.append(sum(pos_weight[int(m[1:-1]) - 1] + 0.3 * aa_value[m[-1]] for m in muts) + rng.normal(0, 0.1))
        names.append(":".join(muts))
    return seqs, np.array(fitness), names


def write_fasta(path, seqs, labels):
    path.write_text("".join(f">v{i}|variant|{lab}\n{s}\n" for i, (s, lab) in enumerate(zip(seqs, labels))))
    return path


@pytest.fixture
def variant_fasta(tmp_path):
    seqs, y, _ = variants()
    return write_fasta(tmp_path / "variants.fasta", seqs, [f"{v:.4f}" for v in y])


run_ok = functools.partial(conftest.run_ok, budget="40steps")
run_bad = functools.partial(conftest.run_bad, budget="5steps")


def bad(capfd, tmp_path, *args) -> str:
    """``zoo run ARGS`` on bad input, in-process (``conftest.bad_input``): its one-line message."""
    return conftest.bad_input(capfd, list(args), tmp_path / "runs", budget="5steps")


# ---------------------------------------------------------------------------------------------
# Data and encodings
# ---------------------------------------------------------------------------------------------

def test_onehot_and_blosum_encodings():
    X = encodings.encode(["ACD", "AX"], "onehot")
    assert X.shape == (2, 3 * 21)
    assert X[0].reshape(3, 21).argmax(1).tolist() == [0, 1, 2]
    assert X[1].reshape(3, 21)[1, 20] == 1 and X[1].reshape(3, 21)[2].sum() == 0  # X shares a column; padding 0
    B = encodings.encode(["AW"], "blosum").reshape(2, 20)
    assert B[0, sequences.AMINO.index("A")] == 4 / 4 and B[1, sequences.AMINO.index("W")] == 11 / 4  # BLOSUM62 diagonal
    m = encodings.blosum62()[:20]  # the inlined table: symmetric, its diagonal the largest entry of each row
    assert (m == m.T).all() and (m.argmax(1) == np.arange(20)).all()
    i = {a: n for n, a in enumerate(sequences.AMINO)}
    assert m[i["C"], i["W"]] == -2 / 4 and m[i["F"], i["Y"]] == 3 / 4


@pytest.mark.parametrize("text, message", [
    ("ACDJK", "unknown amino-acid letter 'J' at position 4"),
    ("AC*", "unknown amino-acid letter '*'"),
    ("", "empty sequence"),
])
def test_bad_sequences_name_the_record(text, message):
    with pytest.raises(ZooError, match=message.replace("*", r"\*")):
        sequences.check_sequence(text, "f.fasta record 'x' (line 3)", ProteinConfig())


def test_too_long_sequences_error_or_crop():
    cfg = ProteinConfig(max_len=5)
    with pytest.raises(ZooError, match="longer than max_len=5"):
        sequences.check_sequence("ACDEFG", "r", cfg)
    assert sequences.check_sequence("acdefg", "r", ProteinConfig(max_len=5, too_long="crop")) == "ACDEF"


def test_labels_regression_classes_and_nan():
    y, task, classes = sequences.parse_labels(["1.5", "2", "-0.25"], ["a", "b", "c"], "auto")
    assert task == "regression" and y.tolist() == [1.5, 2.0, -0.25] and classes is None
    y, task, classes = sequences.parse_labels(["cyto", "membrane", "cyto"], ["a", "b", "c"], "auto")
    assert task == "classification" and classes == ["cyto", "membrane"] and y.tolist() == [0, 1, 0]
    with pytest.raises(ZooError, match="row 3: target 'nan'"):
        sequences.parse_labels(["1", "2", "nan"], ["row 1", "row 2", "row 3"], "auto")


def test_flip_csv_split_and_benchmark_key(tmp_path, monkeypatch):
    seqs, y, _ = variants(60, 0)
    rows = ["sequence,target,set,validation"] + [
        f"{s},{v:.3f},{'test' if i % 3 == 0 else 'train'},{'True' if i % 3 == 1 and i < 20 else ''}"
        for i, (s, v) in enumerate(zip(seqs, y))]
    folder = tmp_path / "data" / "protein" / "flip_gb1"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "splits.zip", "w") as zf:
        zf.writestr("splits/three_vs_rest.csv", "\n".join(rows) + "\n")
    data = loading.load_flip(ProteinConfig(), folder)
    train, val, test = data.split
    assert len(test) == 20 and len(val) == 7 and len(train) == 33 and data.name == "flip-gb1:three_vs_rest"
    from recipe_zoo.runs import key_suffix

    assert key_suffix(ProteinConfig(data="flip-gb1")) == ""  # the default split keeps the key flip-gb1
    assert key_suffix(ProteinConfig(data="flip-gb1", split="three_vs_rest")) == ""  # ... named or not
    assert key_suffix(ProteinConfig(data="flip-gb1", split="low_vs_high")) == ":split=low_vs_high"
    assert key_suffix(ProteinConfig(data="tem1-esm2-8m", split="positions")) == ":split=positions"
    assert key_suffix(ProteinConfig(split_sizes="0.7,0.1,0.2", target="y")) == ":split_sizes=0.7,0.1,0.2:target=y"
    for name in ("flip-gb1", "p62593"):  # split_sizes would change the key and nothing else: refused
        with pytest.raises(ZooError, match=f"{name} has its own split"):
            loading.load_data(ProteinConfig(data=name, split_sizes="0.7,0.2,0.1"), SimpleRun(Budget("steps", 1)))
    with pytest.raises(ZooError, match="cannot read splits/low_vs_high.csv"):
        loading.load_flip(ProteinConfig(split="low_vs_high"), folder)
    with pytest.raises(ZooError, match="split='three': FLIP GB1 has"):
        loading.load_flip(ProteinConfig(split="three"), folder)


def test_esm_example_split_is_sklearns_with_a_hashed_validation_carve_out():
    from sklearn.model_selection import train_test_split

    keys = [f"SEQ{i % 5000}" for i in range(5397)]  # 397 sequences twice, as p62593 repeats its wild type
    train, val, test = psplit.esm_example_split(keys)
    assert len(test) == 1080 and len(train) + len(val) == 4317 and 300 < len(val) < 560
    assert set(test) == set(train_test_split(np.arange(5397), train_size=0.8, random_state=42)[1])
    assert not {keys[i] for i in train} & {keys[i] for i in val}  # copies of a sequence share a side
    assert {keys[i] for i in val} == {keys[i] for i in np.concatenate([train, val])
                                      if splits.hash_unit(keys[i]) < 0.1}  # validation: by the sequence alone


# ---------------------------------------------------------------------------------------------
# Heads
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("features", [30, 150])  # the primal (30 < 80 rows) and the dual (150 > 80) systems
def test_closed_form_ridge_matches_scikit_learn(features):
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, features)).astype(np.float32)
    y = X @ rng.normal(size=features) + rng.normal(0, 0.5, size=120)
    data = sequences.ProteinData("t", y, "regression", split=(np.arange(80), np.arange(80, 100), np.arange(100, 120)))
    cands, chosen = closed_form.select_closed_form(data, X, True, ["ridge"])
    assert len(cands) == len(closed_form.RIDGE_ALPHAS) and all(-1 <= c["val"]["spearman"] <= 1 for c in cands)
    assert chosen.alpha == max(cands, key=lambda c: c["val"]["spearman"])["alpha"]  # the best on validation
    fit = np.arange(80)  # fitted on train only: validation chose it, test scores it
    Xs = (X - X[fit].mean(0)) / X[fit].std(0)
    ys = (y - y[fit].mean()) / y[fit].std()
    ref = Ridge(alpha=chosen.alpha).fit(Xs[fit], ys[fit]).predict(Xs[100:]) * y[fit].std() + y[fit].mean()
    assert np.allclose(chosen.predict(X[100:]).ravel(), ref, atol=1e-4)  # float32 features


def test_kernel_ridge_learns_a_nonlinear_target_that_ridge_cannot():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 2)).astype(np.float32)
    y = np.sin(2 * X[:, 0]) * np.cos(2 * X[:, 1]) + rng.normal(0, 0.05, 400)
    data = sequences.ProteinData("t", y, "regression", split=(np.arange(300), np.arange(300, 350), np.arange(350, 400)))
    cands, chosen = closed_form.select_closed_form(data, X, True, ["ridge", "krr"])
    assert chosen.head == "krr" and len(cands) == len(closed_form.RIDGE_ALPHAS) + 25
    best = {k: max(c["val"]["spearman"] for c in cands if c["head"] == k) for k in ("ridge", "krr")}
    assert best["krr"] > 0.8 and best["ridge"] < 0.5


def test_onehot_recipe_learns_additive_variant_effects(variant_fasta):
    s, r = run_ok("protein/onehot", f"data={variant_fasta}")
    assert float(s["value"]) > 0.8 and s["metric"] == "test_spearman"
    assert "head=auto keeps" in r.stdout + r.stderr
    s, _ = run_ok("protein/onehot", f"data={variant_fasta}", "encoding=blosum", "head=ridge")
    assert float(s["value"]) > 0.5 and s["features"].startswith("800 (blosum")


def test_mlp_head_on_precomputed_embeddings(tmp_path):
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(500, 16)).astype(np.float32)
    fitness = np.tanh(emb[:, 0] + 0.5 * emb[:, 1]) + rng.normal(0, 0.05, 500)
    path = tmp_path / "mine.npz"
    np.savez(path, emb=emb, fitness=fitness)
    s, _ = run_ok("protein/esm-embed", f"data={path}", "target=fitness", "head=mlp", "hidden=32",
                  budget="600steps")
    assert float(s["value"]) > 0.8 and s["head"].startswith("mlp (16 -> 32 -> 1)")
    assert s["embeddings"].startswith("precomputed, 16 wide")
    summary = json.loads((Path(s["run_dir"]) / "summary.json").read_text())
    # the MLP's steps, for the speed view (summary.json's value: the block's 0.0 is a tiny MLP on a busy machine)
    assert summary["metrics"]["samples_per_s"] > 0 and summary["mfu_percent"] > 0


@pytest.mark.slow
def test_classification_labels_from_fasta_headers(tmp_path):
    seqs, y, _ = variants(600, 0)
    labels = ["high" if v > np.median(y) else "low" for v in y]
    s, _ = run_ok("protein/onehot", f"data={write_fasta(tmp_path / 'c.fasta', seqs, labels)}")
    assert s["metric"] == "test_accuracy" and float(s["value"]) > 0.7


# ---------------------------------------------------------------------------------------------
# ESM-2 weights, embeddings and the cache
# ---------------------------------------------------------------------------------------------

def test_local_esm_file_loads_the_same_model(tiny_esm):
    model, alphabet, what = esm2.load_esm(FinetuneConfig(esm_weights=str(tiny_esm)), SimpleRun(Budget("steps", 1)))
    saved = torch.load(tiny_esm, weights_only=False)["model"]
    for k, v in model.state_dict().items():
        if not k.startswith("contact_head.regression"):
            assert torch.equal(v, saved[f"encoder.sentence_encoder.{k}"])
    assert "2 layers, width 32" in what


def test_an_esm_file_is_checked_against_the_pinned_sha256_before_it_is_read(tiny_esm, variant_fasta, monkeypatch):
    import hashlib

    digest = hashlib.sha256(tiny_esm.read_bytes()).hexdigest()
    run = SimpleRun(Budget("steps", 1))
    _, _, what = esm2.load_esm(FinetuneConfig(esm_weights=str(tiny_esm), esm_sha256=digest.upper()), run)
    assert f"sha256 {digest}" in what  # logged with every run: the value to pin
    monkeypatch.setattr(esm2, "read_esm_file", lambda path: pytest.fail("read before the check"))
    with pytest.raises(ZooError, match=f"sha256 {digest}, not the esm_sha256=0{{64}} given"):
        esm2.load_esm(FinetuneConfig(esm_weights=str(tiny_esm), esm_sha256="0" * 64), run)
    monkeypatch.undo()
    msg = run_bad("protein/esm-embed", f"data={variant_fasta}", f"esm_weights={tiny_esm}", "esm_sha256=" + "1" * 64)
    assert str(tiny_esm) in msg and "not the esm_sha256=" in msg


def test_a_pickle_carrying_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"cfg": Evil(), "model": {}}, f, protocol=2)
    with pytest.raises(ZooError, match="refused to load"):
        esm2.read_esm_file(path)
    r = zoo("run", "protein/esm-embed", "data=x.fasta", f"esm_weights={path}")
    assert r.returncode == 2 and "pwned" not in r.stdout + r.stderr


def test_missing_weights_say_where_to_put_them(variant_fasta, tmp_path):
    msg = run_bad("protein/esm-embed", f"data={variant_fasta}", f"esm_weights={tmp_path / 'nope.pt'}")
    assert "nope.pt: no such file" in msg
    r = zoo("run", "protein/esm-embed", f"data={variant_fasta}", env={"ZOO_MIRROR": "http://127.0.0.1:9"})
    assert r.returncode == 2
    assert "put esm2_t6_8M_UR50D.pt in" in r.stderr and "or pass esm_weights=PATH.pt" in r.stderr
    assert "esm_model='gpt2'" in run_bad("protein/esm-embed", f"data={variant_fasta}", "esm_model=gpt2")


def test_embeddings_match_a_direct_forward_and_are_cached(tiny_esm, tmp_path):
    model, alphabet, _ = esm2.load_esm(FinetuneConfig(esm_weights=str(tiny_esm)), SimpleRun(Budget("steps", 1)))
    seqs = [WT, WT[:25], WT[5:], WT]  # different lengths share padded batches
    logs = []
    emb = esm2.embed(model, alphabet, seqs, 2, "mean", torch.device("cpu"), "fp32", 100, logs.append)
    with torch.no_grad():
        for s, e in zip(seqs, emb):
            tokens = esm2.tokenize(alphabet, [s])
            rep = model(tokens, repr_layers=[2])["representations"][2][0, 1:len(s) + 1].mean(0)
            assert np.allclose(e, rep.numpy(), atol=1e-5)
    assert "embedded 3 new sequences" in logs[0]  # the duplicate is embedded once
    again = esm2.embed(model, alphabet, seqs + ["ACDEFGHIK"], 2, "mean", torch.device("cpu"), "fp32", 100,
                       logs.append)
    assert np.array_equal(again[:4], emb) and "embedded 1 new sequences" in logs[1]
    assert "(3 from the cache" in logs[1]  # WT twice: one sequence
    bos = esm2.embed(model, alphabet, seqs[:1], 2, "bos", torch.device("cpu"), "fp32", 100, logs.append)
    assert "embedded 1 new" in logs[2] and not np.allclose(bos[0], emb[0])  # pooling is part of the key


@pytest.mark.slow
def test_esm_embed_recipe_end_to_end(variant_fasta, tiny_esm):
    s, r = run_ok("protein/esm-embed", f"data={variant_fasta}", f"esm_weights={tiny_esm}")
    assert s["status"] == "ok" and "layer 2, mean pooled, 32 wide" in s["embeddings"]
    s2, r2 = run_ok("protein/esm-embed", f"data={variant_fasta}", f"esm_weights={tiny_esm}")
    assert "all 400 embeddings from the cache" in r2.stdout + r2.stderr and s2["value"] == s["value"]


# ---------------------------------------------------------------------------------------------
# Fine-tuning
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_lora_trains_adapters_and_head_only(variant_fasta, tiny_esm, tmp_path):
    s, r = run_ok("protein/esm-finetune", f"data={variant_fasta}", f"esm_weights={tiny_esm}", "hidden=16",
                  "batch_size=8", "lora_r=4")
    assert s["status"] == "ok" and "lora r=4" in s["model"]
    run_dir = s["run_dir"]
    config = json.loads(open(f"{run_dir}/adapter/adapter_config.json").read())
    assert config["r"] == 4 and set(config["target_modules"]) == set(esm_finetune.LORA_TARGETS)
    from safetensors.torch import load_file

    adapter = load_file(f"{run_dir}/adapter/adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)  # B starts at zero: it trained
    from safetensors.torch import load_file

    assert set(load_file(f"{run_dir}/head.safetensors")) >= {"head.net.1.weight", "head.net.4.weight"}


def test_layer_decay_groups():
    import esm

    backbone = esm.model.esm2.ESM2(num_layers=3, embed_dim=16, attention_heads=2)
    model = esm_finetune.ESMRegressor(backbone, backbone.alphabet, 3, "mean", 1, 8, 0.0)
    groups = esm_finetune.finetune_groups(model, 3, 1e-3, FinetuneConfig(layer_decay=0.5, head_lr=5e-3))
    lr_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    assert lr_of[id(model.head.net[1].weight)] == 5e-3
    assert lr_of[id(backbone.layers[2].fc1.weight)] == pytest.approx(1e-3 * 0.5)  # top block: one step down
    assert lr_of[id(backbone.layers[0].fc1.weight)] == pytest.approx(1e-3 * 0.5 ** 3)
    assert lr_of[id(backbone.embed_tokens.weight)] == pytest.approx(1e-3 * 0.5 ** 4)
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert decay_of[id(backbone.layers[0].fc1.bias)] == 0 and decay_of[id(backbone.embed_tokens.weight)] == 0
    assert sum(len(g["params"]) for g in groups) == sum(1 for p in model.parameters() if p.requires_grad)


@pytest.mark.slow
def test_scratch_model_trains_end_to_end(variant_fasta):
    s, r = run_ok("protein/esm-finetune", f"data={variant_fasta}", "esm_model=scratch", "scratch_dim=16",
                  "scratch_layers=1", "hidden=16", "batch_size=16")
    assert "from scratch" in s["model"] and ", full," in s["model"]
    losses = [float(line.split("train_loss=")[1].split()[0]) for line in (r.stdout + r.stderr).splitlines()
              if "eval step=" in line]
    assert losses[-1] < losses[0]


# ---------------------------------------------------------------------------------------------
# Zero-shot
# ---------------------------------------------------------------------------------------------

def test_mutation_strings_are_checked_against_the_wild_type():
    assert mutations.parse_mutations("K2A:T3W", WT, 1, "r") == [(1, "K", "A"), (2, "T", "W")]
    assert mutations.parse_mutations("K12A", WT, 11, "r") == [(1, "K", "A")]
    with pytest.raises(ZooError, match="row 7: A2C says A at 2 but the wild type has K there"):
        mutations.parse_mutations("A2C", WT, 1, "row 7")
    with pytest.raises(ZooError, match="not like H24C"):
        mutations.parse_mutations("K2", WT, 1, "r")
    with pytest.raises(ZooError, match="outside the wild type"):
        mutations.parse_mutations("K99A", WT, 1, "r")


def test_zeroshot_scores_are_masked_marginals(tmp_path, tiny_esm):
    (tmp_path / "wt.fasta").write_text(f">wt\n{WT}\n")
    muts = ["K2A", "T3W", "K2A:T3W", "Y5F", "Q9E"]
    table = tmp_path / "dms.csv"
    table.write_text("mutant,fitness\n" + "".join(f"{m},{i * 0.3}\n" for i, m in enumerate(muts)) + "A4G,\n")
    s, r = run_ok("protein/esm-zeroshot", f"data={table}", f"wt={tmp_path / 'wt.fasta'}", "target=fitness",
                  f"esm_weights={tiny_esm}")
    scores = dict(line.split(",") for line in open(f"{s['run_dir']}/scores.csv").read().splitlines()[1:])
    model, alphabet, _ = esm2.load_esm(FinetuneConfig(esm_weights=str(tiny_esm)), SimpleRun(Budget("steps", 1)))
    model.eval()

    def by_hand(mutation):
        total = 0.0
        for part in mutation.split(":"):
            i = int(part[1:-1]) - 1
            tokens = esm2.tokenize(alphabet, [WT])
            tokens[0, i + 1] = alphabet.mask_idx
            with torch.no_grad():
                logp = torch.log_softmax(model(tokens)["logits"][0, i + 1], -1)
            total += float(logp[alphabet.get_idx(part[-1])] - logp[alphabet.get_idx(part[0])])
        return total

    for m in muts:
        assert float(scores[m]) == pytest.approx(by_hand(m), abs=1e-4)
    from scipy.stats import spearmanr

    expected = spearmanr([i * 0.3 for i in range(5)], [float(scores[m]) for m in muts])[0]
    assert float(s["value"]) == pytest.approx(expected, abs=1e-4)
    assert s["unmeasured_variants"] == "1"


@pytest.mark.parametrize("args, message", [
    (["wt=MKTAYIAKQR"], "row 2: A2C says A at 2 but the wild type has K there"),
    (["wt=MKTAYIAKQR", "mutant=mut"], "no column 'mut' (columns: mutant, y)"),
    ([], "needs the wild type"),
    (["wt=MKTAYIAKQR", "esm_model=scratch"], "need a pretrained model"),
])
def test_zeroshot_bad_inputs(tmp_path, capfd, args, message):
    table = tmp_path / "m.csv"
    table.write_text("mutant,y\nA2C,1\n")
    assert message in bad(capfd, tmp_path, "protein/esm-zeroshot", f"data={table}", *args)


# ---------------------------------------------------------------------------------------------
# Bad input through the command
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, args, message", [
    (">a|1.0\nMKTAYI\n>b|2.0\nMKJAYI\n", [], "record 'b|2.0' (line 3): unknown amino-acid letter 'J' at position 3"),
    (">a|1.0\nMKTAYI\n>b|nan\nMKTAYI\n", [], "record 'b|nan' (line 3): target 'nan' is not a finite number"),
    ("MKTAYI\n", [], "line 1: sequence before the first '>' header"),
    ("", [], "no FASTA records"),
    (">a|1.0\nMKTAYI\n", ["label_field=3"], "header has no field 3"),
    (">a|1.0\nMKTAYI\n", ["split=one_vs_rest"], "only flip-gb1 has named splits"),
])
def test_bad_fasta_inputs(tmp_path, capfd, content, args, message):
    path = tmp_path / "bad.fasta"
    path.write_text(content)
    assert message in bad(capfd, tmp_path, "protein/onehot", f"data={path}", *args)


def test_bad_csv_and_npz_inputs(tmp_path, capfd):
    def message(*args):
        return bad(capfd, tmp_path, *args)

    csv_path = tmp_path / "t.csv"
    csv_path.write_text("seq,y\nMKT,1\n")
    assert "no column 'sequence' (columns: seq, y)" in message("protein/onehot", f"data={csv_path}")
    npz = tmp_path / "e.npz"
    np.savez(npz, emb=np.random.default_rng(0).normal(size=(30, 4)), score=np.arange(30.0))
    assert "no array 'target' (arrays: emb, score)" in message("protein/esm-embed", f"data={npz}")
    assert "holds embeddings, not sequences" in message("protein/onehot", f"data={npz}", "target=score")
    np.savez(npz, emb=np.zeros((30, 4)), score=np.arange(30.0))
    assert "30 items but 1 distinct: copies share a side" in message("protein/esm-embed", f"data={npz}",
                                                                     "target=score")
    (tmp_path / "x.txt").write_text("hi")
    assert "expected a .fasta, .csv or .npz file" in message("protein/onehot", f"data={tmp_path / 'x.txt'}")
    assert "no such file, and not a dataset name" in message("protein/onehot", "data=p6259")
    bad_bytes = tmp_path / "latin.fasta"
    bad_bytes.write_bytes(b">a|1\nMK\xe9\n")
    assert "latin.fasta line 2: byte 0xe9 is not UTF-8 text" in message("protein/onehot", f"data={bad_bytes}")


def test_registered_datasets_are_listed():
    r = zoo("data", "list")
    for name in ("tem1-esm2-8m", "p62593", "blat-ecolx-dms", "flip-gb1"):
        assert name in r.stdout


def test_csv_reader_handles_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffsequence,target\nMKT,1\nMKA,2\nMKC,3\n".encode())
    data = loading.load_csv(ProteinConfig(), path, str(path))
    assert data.seqs == ["MKT", "MKA", "MKC"]


@pytest.mark.parametrize("name, extra", [
    # at the configured LR (1e-3) the MLP heads memorise one batch in ~60-100 steps, not 12
    ("protein/onehot", ["batch_size=16", "--steps", "60"]),
    ("protein/esm-embed", ["--steps", "60"]),  # an NPZ: a random tiny ESM-2's embeddings carry little signal
    ("protein/esm-finetune", ["--steps", "100"]),
    ("protein/esm-zeroshot", ["--steps", "12"]),  # data checks only
])
def test_doctor_runs_clean_on_small_variant_tables(tmp_path, capsys, tiny_esm, name, extra):
    if name == "protein/esm-zeroshot":
        (tmp_path / "m.csv").write_text("mutant,y\nK2A,0.1\nT3W,0.5\nK2A:T3W,0.3\nY5F,0.9\nQ9E,\n")
        args = [f"data={tmp_path / 'm.csv'}", "target=y", f"wt={WT}"]
    elif name == "protein/esm-embed":
        rng = np.random.default_rng(0)
        emb = rng.normal(size=(300, 16)).astype(np.float32)
        np.savez(tmp_path / "e.npz", emb=emb, fitness=np.tanh(emb[:, 0] + 0.5 * emb[:, 1]) + rng.normal(0, 0.05, 300))
        args = [f"data={tmp_path / 'e.npz'}", "target=fitness"]
    else:  # distinct variants: the random draws repeat a few single mutants, which would straddle the split
        distinct = dict(zip(*variants()[:2]))
        args = [f"data={write_fasta(tmp_path / 'v.fasta', list(distinct)[:150], list(distinct.values())[:150])}"]
    esm = [] if name == "protein/onehot" else [f"esm_weights={tiny_esm}"]
    code, findings = run_doctor(name, [*args, *esm, *extra], tmp_path)
    assert code == 0, capsys.readouterr().out[-3000:]
    checks = {f["check"] for f in findings}
    assert "data/target" in checks and not [f for f in findings if f["severity"] == "error"]
    assert ("data/leakage" in checks) == (name != "protein/esm-zeroshot")  # zero-shot has no split
    assert ("overfit/one-batch" in checks) == (name != "protein/esm-zeroshot")
    if name == "protein/esm-finetune":
        assert "health/weight-change" in checks  # pretrained tensors only: the head and the LoRA adapters are new


# ---------------------------------------------------------------------------------------------
# Bad input, one table: each case through `zoo run` in-process, one line naming the file and record or key
# ---------------------------------------------------------------------------------------------

def _fasta(label=lambda i: f"{i % 7 / 7:.3f}", seq=lambda i: f"MKT{'AGLV'[i % 4]}YIA{'KRDE'[i // 4 % 4]}QR") -> str:
    """40 records; record i's header is on line 2i + 1."""
    return "".join(f">v{i}|{label(i)}\n{seq(i)}\n" for i in range(40))


def _csv(target=lambda i: f"{i % 7 / 7:.3f}", seq=lambda i: f"MKT{'AGLV'[i % 4]}YIA{'KRDE'[i // 4 % 4]}QR") -> str:
    return "sequence,target\n" + "".join(f"{seq(i)},{target(i)}\n" for i in range(40))


FASTA, CSV = _fasta(), _csv()
MUTANTS = "mutant,y\nM1A,0.1\nK2A,0.5\nT3W,0.2\nM1C:K2D,0.9\n"
TINY = ["hidden=16", "batch_size=8"]
ZERO = ["target=y", "wt=MKTAYIAKQR"]


@pytest.mark.parametrize("recipe, name, content, args, needles, budget", [
    ("protein/onehot", "nope.fasta", None, TINY, ["nope.fasta", "no such file"], "3steps"),
    ("protein/esm-zeroshot", "nope.csv", None, ZERO, ["nope.csv", "no such CSV file"], "3steps"),
    ("protein/esm-embed", "zero.fasta", b"", TINY, ["zero.fasta", "no FASTA records"], "3steps"),
    ("protein/onehot", "zero.csv", b"", TINY, ["zero.csv", "empty file"], "3steps"),
    ("protein/esm-finetune", "header.csv", "sequence,target\n", TINY, ["header.csv", "no rows"], "3steps"),
    ("protein/onehot", "header.fasta", ">a|1.0\n", TINY, ["header.fasta record 'a|1.0' (line 1)", "empty sequence"],
     "3steps"),
    ("protein/onehot", "t.csv", CSV.replace("sequence,", "seq,", 1), TINY,
     ["t.csv", "no column 'sequence' (columns: seq, target)"], "3steps"),
    ("protein/esm-embed", "t.csv", CSV, [*TINY, "target=fitness"], ["t.csv", "no column 'fitness'"], "3steps"),
    ("protein/esm-zeroshot", "m.csv", MUTANTS, [*ZERO, "mutant=mut"], ["m.csv", "no column 'mut'"], "3steps"),
    ("protein/onehot", "t.fasta", _fasta(label=lambda i: "abc" if i == 5 else i / 7), TINY,
     ["t.fasta record 'v5|abc' (line 11)", "target 'abc' is not a number"], "3steps"),
    ("protein/esm-zeroshot", "m.csv", MUTANTS.replace("0.5", "high"), ZERO,
     ["m.csv row 3", "target 'high' is not a finite number"], "3steps"),
    ("protein/esm-finetune", "t.fasta", _fasta(label=lambda i: "nan" if i == 3 else i / 7), TINY,
     ["t.fasta record 'v3|nan' (line 7)", "not a finite number"], "3steps"),
    ("protein/onehot", "t.csv", _csv(target=lambda i: "" if i == 8 else i / 7), TINY,
     ["t.csv row 10", "target '' is not a number"], "3steps"),
    ("protein/esm-embed", "t.fasta", _fasta(seq=lambda i: "MKTJYIAKQR" if i == 2 else "MKTAYIAKQR"), TINY,
     ["t.fasta record 'v2|0.286' (line 5)", "unknown amino-acid letter 'J' at position 4"], "3steps"),
    ("protein/onehot", "t.csv", _csv(seq=lambda i: "MKTAYIAK*R" if i == 6 else "MKTAYIAKQR"), TINY,
     ["t.csv row 8", "unknown amino-acid letter '*' at position 9"], "3steps"),
    ("protein/esm-zeroshot", "m.csv", MUTANTS.replace("T3W", "T3J"), ZERO,
     ["m.csv row 4", "T3J mutates to 'J'"], "3steps"),
    ("protein/esm-zeroshot", "m.csv", MUTANTS, ["target=y", "wt=MKTAYIBKQRZ1"],
     ["wild type (MKTAYIBKQRZ1)", "unknown amino-acid letter '1' at position 12"], "3steps"),
    ("protein/onehot", "latin.fasta", FASTA.encode().replace(b">v1|", b">v1\xff\xfe\xfa|"), TINY,
     ["latin.fasta line 3", "0xff", "not UTF-8"], "3steps"),
    ("protein/esm-zeroshot", "latin.csv", MUTANTS.encode().replace(b"K2A", b"K2\xff\xfe\xfa"), ZERO,
     ["latin.csv row 3", "0xff", "not UTF-8"], "3steps"),
    ("protein/onehot", "t.fasta", FASTA, [*TINY, "hiden=16"], ["unknown key 'hiden'", "did you mean 'hidden'"],
     "3steps"),
    ("protein/esm-finetune", "t.fasta", FASTA, [*TINY, "finetun=full"],
     ["unknown key 'finetun'", "did you mean 'finetune'"], "3steps"),
    ("protein/esm-zeroshot", "m.csv", MUTANTS, [*ZERO, "ofset=1"], ["unknown key 'ofset'", "did you mean 'offset'"],
     "3steps"),
    ("protein/esm-finetune", "t.fasta", FASTA, ["batch_size=abc"], ["batch_size='abc'", "not a valid int"], "3steps"),
    ("protein/esm-embed", "t.fasta", FASTA, TINY, ["budget '0s'", "positive"], "0s"),
    ("protein/esm-zeroshot", "m.csv", MUTANTS, ZERO, ["budget '-5'"], "-5"),
], ids=["missing-file", "missing-file-zeroshot", "empty-0-bytes-fasta", "empty-0-bytes-csv", "header-only-csv",
        "header-only-fasta", "no-sequence-column", "no-target-column", "no-mutant-column", "text-target",
        "text-target-zeroshot", "nan-target", "empty-target-csv", "unknown-amino-acid-fasta", "unknown-amino-acid-csv",
        "unknown-amino-acid-mutant", "unknown-amino-acid-wild-type", "non-utf8-fasta", "non-utf8-csv",
        "typo-key-onehot", "typo-key-finetune", "typo-key-zeroshot", "ill-typed-value", "budget-0s",
        "budget-negative"])
def test_bad_input_table(tmp_path, capfd, request, recipe, name, content, args, needles, budget):
    path = conftest.write_file(tmp_path / name, content)
    weights = [f"esm_weights={request.getfixturevalue('tiny_esm')}"] if "esm" in recipe else []
    conftest.bad_input(capfd, [recipe, f"data={path}", *args, *weights], tmp_path / "runs", *needles, budget=budget)


# ---------------------------------------------------------------------------------------------
# Selection on validation, the test rows scored once (issue 26)
# ---------------------------------------------------------------------------------------------

def _run(folder, budget: str = "40steps", seed: int = 0, log=None) -> SimpleRun:
    folder.mkdir(parents=True, exist_ok=True)
    return SimpleRun(budget=parse_budget(budget), seed=seed, dir=folder, device="cpu", log=log or (lambda line: None))


def _scan_csv(path, seqs, y, names):
    path.write_text("mutant,sequence,fitness\n" + "".join(f"{m},{s},{v:.5f}\n" for m, s, v in zip(names, seqs, y)))
    return path


def test_cropping_never_moves_an_item_between_splits(tmp_path):
    """max_len with too_long=crop is a method setting (not a key field): the split hashes each whole sequence, so
    cropping keeps every item on its side, and variants that differ only past the crop stay apart (hashing the
    cropped sequences would have made them copies, one side for all)."""
    seqs, y, _ = variants()
    seqs = [s + "ACDEFGHIKLMNPQRSTVWY"[i % 20] * (1 + i % 5) for i, s in enumerate(seqs)]  # tails past the crop
    path = write_fasta(tmp_path / "a.fasta", seqs, [f"{v:.4f}" for v in y])
    whole = loading.load_data(ProteinConfig(data=str(path)), _run(tmp_path / "r"))
    short = min(map(len, seqs)) - 1
    cropped = loading.load_data(ProteinConfig(data=str(path), max_len=short, too_long="crop"), _run(tmp_path / "s"))
    assert max(map(len, cropped.seqs)) == short and cropped.seqs != whole.seqs
    assert all(np.array_equal(a, b) for a, b in zip(cropped.split, whole.split))
    by_cropped = psplit.hash_split([s[:short] for s in seqs], (0.8, 0.1, 0.1))
    assert not all(np.array_equal(a, b) for a, b in zip(by_cropped, whole.split))


def test_hash_split_is_disjoint_by_sequence_and_the_same_for_any_seed_or_order(tmp_path):
    seqs, y, _ = variants()
    assert len(set(seqs)) < len(seqs)  # the random draws repeat a few mutants: copies must share a side

    def load(path, seed=0):
        return loading.load_data(ProteinConfig(data=str(path)), _run(tmp_path / "r", seed=seed))

    base = load(write_fasta(tmp_path / "a.fasta", seqs, [f"{v:.4f}" for v in y]))
    assert sorted(np.concatenate(base.split).tolist()) == list(range(len(seqs)))
    by_seq = [{seqs[i] for i in part} for part in base.split]
    assert not (by_seq[0] & by_seq[1] or by_seq[0] & by_seq[2] or by_seq[1] & by_seq[2])
    assert all(0.05 < len(part) / len(seqs) < 0.16 for part in base.split[1:])
    order = np.random.default_rng(3).permutation(len(seqs))
    shuffled = load(write_fasta(tmp_path / "b.fasta", [seqs[i] for i in order], [f"{y[i]:.4f}" for i in order]))
    assert [{shuffled.seqs[i] for i in part} for part in shuffled.split] == by_seq
    other_seed = load(tmp_path / "a.fasta", seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(other_seed.split, base.split))


def test_positions_split_holds_out_every_mutant_at_a_test_position(tmp_path):
    seqs, y, names = variants(600, 200)
    data = loading.load_data(ProteinConfig(data=str(_scan_csv(tmp_path / "m.csv", seqs, y, names)), target="fitness",
                                         split="positions"), _run(tmp_path / "r"))
    train, val, test = data.split
    assert data.positions[0] == tuple(int(m[1:-1]) for m in names[0].split(":"))
    # a position's side, read off its single mutants (600 over 40 positions: every position has some)
    side = {data.positions[i][0]: k for k, part in enumerate(data.split) for i in part if len(data.positions[i]) == 1}
    assert len(side) == len(WT) and sorted(set(side.values())) == [0, 1, 2]
    for k, part in enumerate(data.split):
        for i in part:  # test: a mutant touching a test position; validation: one touching a validation position
            assert k == max(side[p] for p in data.positions[i])  # (and no test one); train: the rest
    # the same positions from the sequences alone (their consensus is the wild type)
    fasta = write_fasta(tmp_path / "v.fasta", seqs, y)
    from_seqs = loading.load_data(ProteinConfig(data=str(fasta), split="positions"), _run(tmp_path / "r"))
    assert [set(p) for p in from_seqs.positions] == [set(p) for p in data.positions]
    assert all(np.array_equal(a, b) for a, b in zip(from_seqs.split, data.split))
    assert "split=positions and protein/position-mean need each item's mutated positions" in run_bad(
        "protein/onehot", f"data={write_fasta(tmp_path / 'len.fasta', [WT, WT[:-1], WT], [1, 2, 3])}",
        "split=positions")


def test_test_labels_are_read_only_at_the_end(tmp_path):
    """Garbage test labels change the test metrics and nothing else: every validation row the MLP head logged,
    the closed-form choice and the validation value are the same, so no test label was read before the end."""
    from recipe_zoo.recipes.protein.onehot import train_onehot

    seqs, y, _ = variants()
    clean = write_fasta(tmp_path / "clean.fasta", seqs, [f"{v:.4f}" for v in y])
    runs, logs, metrics = {}, {}, {}
    for name, path in (("clean", clean), ("garbage", None)):
        if path is None:
            test = set(runs["clean"].splits["test"])
            noise = np.random.default_rng(9).uniform(100, 200, len(y))
            path = write_fasta(tmp_path / "garbage.fasta", seqs, [f"{noise[i] if i in test else y[i]:.4f}"
                                                                  for i in range(len(y))])
        logs[name] = []
        runs[name] = _run(tmp_path / name, "60steps", log=logs[name].append)
        metrics[name] = train_onehot(OnehotConfig(data=str(path), eval_every=0.25), runs[name])
    clean_run, dirty_run = runs["clean"], runs["garbage"]
    assert dirty_run.splits == clean_run.splits
    assert sorted(i for rows in clean_run.splits.values() for i in rows) == list(range(len(y)))  # each item once
    strip = lambda rows: [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]  # noqa: E731
    assert strip(dirty_run.eval_rows) == strip(clean_run.eval_rows) and len(clean_run.eval_rows) >= 4
    assert all("val_spearman" in r and not any(k.startswith("test") for k in r) for r in clean_run.eval_rows)
    choice = [line for line in logs["clean"] if "has the best validation" in line]
    assert choice and choice == [line for line in logs["garbage"] if "has the best validation" in line]
    m, g = metrics["clean"], metrics["garbage"]
    assert m["val_spearman"] == g["val_spearman"] and m["test_spearman"] != g["test_spearman"]
    assert m["test_spearman_ci_low"] < m["test_spearman"] < m["test_spearman_ci_high"]
    assert m["test_spearman"] > 0.8 and m["test_rmse"] < g["test_rmse"]


def test_bootstrap_statistic_is_the_metric():
    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=200), rng.normal(size=200)
    pred[:50] = y[:50]
    idx = rng.integers(0, 200, 200)
    from recipe_zoo.core.metrics import spearman

    assert scoring.item_scores(y, pred, "regression").statistic(idx) == pytest.approx(spearman(y[idx], pred[idx]))
    assert scoring.item_scores(y, np.zeros(200), "regression").statistic(idx) == 0.0
    scores = rng.normal(size=(200, 3))
    labels = rng.integers(0, 3, 200)
    assert scoring.item_scores(labels, scores, "classification").statistic(idx) == pytest.approx(
        (scores[idx].argmax(1) == labels[idx]).mean())


class WallClock:
    """The closed form's wall clock (``closed_form.time``, and ``heads.time`` that adds it to train_seconds) moved by
    the fits only: each Cholesky fit of an r x r system takes ``slow`` x (r / 1000)^3 s, everything else nothing."""

    def __init__(self, slow: float = 1.0):
        self.now, self.slow = 0.0, slow

    def perf_counter(self) -> float:
        return self.now

    def charging(self, solve):
        def timed(M, alpha, Y):
            self.now += self.slow * (len(M) / 1000) ** 3
            return solve(M, alpha, Y)
        return timed


def _big_embeddings(n=2000):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 16)).astype(np.float32)
    y = np.tanh(X[:, 0] + 0.5 * X[:, 1]) + rng.normal(0, 0.1, n)
    cut = int(0.8 * n), int(0.9 * n)
    return X, sequences.ProteinData("t", y, "regression",
                                    split=(np.arange(cut[0]), np.arange(*cut), np.arange(cut[1], n)))


def _counted(monkeypatch, slow: float = 1.0) -> WallClock:
    """The plan counts a fit of r rows as (r / 1000)^3 s (r^3 FLOPs at 1 GFLOP/s); the wall clock takes ``slow``
    times that."""
    clock = WallClock(slow)
    monkeypatch.setattr(closed_form, "time", clock)
    monkeypatch.setattr(heads, "time", clock)
    monkeypatch.setattr(closed_form, "solve_spd", clock.charging(closed_form.solve_spd))
    monkeypatch.setattr(closed_form, "fit_flops", lambda rows: float(rows) ** 3)
    monkeypatch.setattr(closed_form, "closed_form_rate", lambda device: 1e9)
    return clock


@pytest.mark.parametrize("slow", [1.0, 1.9])
def test_a_seconds_budget_shrinks_the_closed_form_grid_by_counted_work(tmp_path, monkeypatch, slow):
    """1,600 training rows at (r / 1000)^3 s a fit: the full kernel ridge grid (25 fits of 1,600 x 1,600, 102 s)
    does not fit in 90% of 20 s; half the rows (25 x 0.51 s) do, so the grid shrinks to them (said in the log), all
    25 candidates are fitted, and train_seconds counts the fits' wall time. The plan reads the counted work, not
    the clock: on a machine 1.9x slower than planned the grid is the same (no probe, no fit dropped)."""
    from recipe_zoo.recipes.protein.config import OnehotConfig

    clock = _counted(monkeypatch, slow)
    X, data = _big_embeddings()
    logs = []
    metrics, head, _ = heads.fit_head(OnehotConfig(head="krr"), _run(tmp_path, "20s", log=logs.append), data, X,
                                      scale=True)
    text = "\n".join(logs)
    assert "the grid shrinks: kernel ridge on 800 of the 1600 training rows" in text, text
    assert "closed form: 25 candidates" in text and head.head == "krr" and len(head.basis) == 800
    assert f"counted {25 * 0.8 ** 3:.1f}s" in text and "dropped" not in text
    assert metrics["train_seconds"] == pytest.approx(slow * 25 * 0.8 ** 3, abs=1e-3) == pytest.approx(clock.now)
    assert metrics["test_spearman"] > 0.5
    # head=auto: the closed form gets half the budget (10 s): kernel ridge a quarter of the rows, ridge all alphas
    logs.clear()
    cands, _ = closed_form.select_closed_form(data, X, True, ["ridge", "krr"], limit=10.0, log=logs.append)
    assert "kernel ridge on 400 of the 1600 training rows" in "\n".join(logs)
    assert len(cands) == len(closed_form.RIDGE_ALPHAS) + 25
    assert all(c["rows"] == 400 for c in cands if c["head"] == "krr")


def test_a_machine_far_slower_than_planned_drops_the_fits_past_twice_the_limit(monkeypatch):
    """The wall clock is only a safety valve: fits taking 100x what was planned stop once the wall clock passes twice
    the limit, and the log says the grid is not the planned one."""
    _counted(monkeypatch, slow=100.0)
    X, data = _big_embeddings()
    logs = []
    cands, _ = closed_form.select_closed_form(data, X, True, ["krr"], limit=10.0, log=logs.append)
    text = "\n".join(logs)
    assert "kernel ridge on 400 of the 1600 training rows" in text  # planned: 25 x 0.064 s counted
    assert len(cands) == 4 and "21 closed-form fits dropped" in text and "not the planned one" in text, text


def test_the_mlp_heads_dropout_follows_the_split_unless_set():
    """dropout=-1: 0.5 on fixed features with whole positions held out (measured on TEM-1), 0.1 otherwise and for
    esm-finetune's head; a value set is kept; a negative one other than -1 is one line."""
    from recipe_zoo.core.errors import ZooError
    from recipe_zoo.recipes.protein.config import OnehotConfig, head_dropout

    assert head_dropout(OnehotConfig(split="positions")) == 0.5 and head_dropout(OnehotConfig()) == 0.1
    assert head_dropout(OnehotConfig(split="positions", dropout=0.2)) == 0.2
    assert head_dropout(OnehotConfig(split="low_vs_high")) == 0.1
    assert head_dropout(OnehotConfig(split="positions"), by_split=False) == 0.1  # esm-finetune's head
    with pytest.raises(ZooError, match=r"dropout=-0.5: must be in \[0, 1\), or -1"):
        head_dropout(OnehotConfig(dropout=-0.5))


def test_rank_map_keeps_the_order_and_maps_back():
    from scipy.stats import spearmanr

    from recipe_zoo.recipes.protein.ranks import RankMap

    rng = np.random.default_rng(0)
    y_train = np.concatenate([rng.beta(5, 1, 300), [0.5, 0.5, 0.5]])  # skewed, with ties
    ranks = RankMap.fit(y_train)
    z = ranks.forward(y_train)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.05  # Gaussian ranks
    assert len(set(z[-3:])) == 1  # tied targets share their mean rank
    y_new = np.concatenate([rng.uniform(-0.5, 1.5, 500), y_train])  # past both ends too
    assert np.all(np.diff(ranks.forward(np.unique(y_new))) > 0)  # strictly increasing: order and Spearman kept
    assert np.allclose(ranks.inverse(ranks.forward(y_new)), y_new)
    pred = rng.normal(size=500)
    assert spearmanr(y_new[:500], pred)[0] == pytest.approx(spearmanr(ranks.forward(y_new[:500]), pred)[0])


def test_head_targets_follow_the_split_unless_set():
    """target_scale=auto: Gaussian ranks under split=positions (measured on TEM-1 with protein/esm-embed), standardised
    otherwise, for classes, and for protein/onehot (its registered default)."""
    from recipe_zoo import registry
    from recipe_zoo.recipes.protein.config import head_target
    from recipe_zoo.recipes.protein.esm_embed import EmbedConfig

    assert head_target(EmbedConfig(split="positions"), "regression") == "rank"
    assert head_target(EmbedConfig(), "regression") == "standard"
    assert head_target(EmbedConfig(split="positions"), "classification") == "standard"
    assert head_target(EmbedConfig(split="positions", target_scale="standard"), "regression") == "standard"
    assert head_target(EmbedConfig(target_scale="rank"), "regression") == "rank"
    assert registry.get("protein/onehot").defaults["target_scale"] == "standard"


def test_position_mean_on_a_random_split_and_on_held_out_positions(tmp_path):
    seqs, y, names = variants(1500, 0)
    table = _scan_csv(tmp_path / "scan.csv", seqs, y, names)
    out = {}
    for split in ("", "positions"):
        run = _run(tmp_path / (split or "random"))
        out[split] = position_mean.train_position_mean(
            position_mean.PositionConfig(data=str(table), target="fitness", split=split), run)
        assert out[split]["test_spearman_ci_low"] <= out[split]["test_spearman"] <= out[split]["test_spearman_ci_high"]
    assert out[""]["test_spearman"] > 0.8 and out[""]["val_spearman"] > 0.8
    assert out["positions"]["test_spearman"] == 0.0  # every test position unseen: one value, the overall mean
    predict, seen = position_mean.position_means([(1,), (1,), (2,), (1, 2), (3,), ()], np.array([1.0, 3, 10, 0, 0, 0]),
                                                 np.arange(3))
    assert seen == 2 and predict(np.arange(6)).tolist() == [2.0, 2.0, 10.0, 6.0, 14 / 3, 14 / 3]
