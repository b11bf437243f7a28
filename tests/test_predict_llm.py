"""LLM runs as models you can use: llm/gpt and llm/lora save what predict needs (model.json, the test windows or
examples as predictions.csv), `zoo predict` scores the run's own test split again to the run's numbers, scores a
new text file, continues prompts (seeded, as the run's samples), refuses bad input in one line, and `zoo export`
writes files their libraries load back."""
import csv
import json
import math
import shutil

import pytest
import torch

from conftest import make_tiny_llama, predict_bad, roundtrip

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\n") * 40
GPT_ARGS = ["depth=1", "aspect=32", "head_dim=16", "seq_len=32", "micro_batch=4", "batch_tokens=128",
            "eval_bytes=1500", "vocab_size=300", "compile=false", "samples=2", "sample_tokens=12", "prompt=First",
            "precision=fp32"]  # its scores compared at 1e-6 across batchings (a file, a folder): bf16's differ by more
LORA_ARGS = ["seq_len=32", "micro_batch=4", "lr=0.01"]


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: on a shared machine a second thread mostly waits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train(out, recipe: str, *args: str, budget: str = "5steps"):
    """`zoo run` in-process on one thread (tiny models); the run's folder."""
    from recipe_zoo.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:  # module-scoped: the per-test isolation is not in place yet
            mp.setenv("ZOO_RUNS", str(out))
            mp.setenv("ZOO_BOARD_DIR", str(out / "board"))
            mp.setenv("ZOO_DATA", str(out / "data"))
            assert main(["run", recipe, *args, "--budget", budget, "--out", str(out), "--device", "cpu"]) == 0
    finally:
        torch.set_num_threads(threads)
    return next((out / recipe).iterdir())


def predictions_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_metrics(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())["metrics"]


def test_text(run_dir) -> str:
    """The text the run's test scored (the first eval_bytes of its test split), rebuilt from its config."""
    from recipe_zoo.recipes.llm import text_splits

    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    splits = text_splits.load_text(cfg["data"], cfg["val_fraction"], cfg["test_fraction"])
    return text_splits.eval_text(splits, cfg["eval_bytes"])


test_text.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(TEXT * 3)
    return path


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory, corpus):
    return train(tmp_path_factory.mktemp("gpt"), "llm/gpt", f"data={corpus}", *GPT_ARGS)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_llama, corpus):
    """On text, with the merged copy kept."""
    return train(tmp_path_factory.mktemp("lora"), "llm/lora", f"model={tiny_llama}", f"data={corpus}", *LORA_ARGS,
                 "eval_bytes=1000", "merge=true")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Q{i}: who speaks?", "response": f" Citizen {i % 7}, speak."})
                            + "\n" for i in range(40)))
    return path


@pytest.fixture(scope="module")
def lora_jsonl_run(tmp_path_factory, tiny_llama, pairs):
    """On prompt/response JSONL, no merged copy (export merges it)."""
    return train(tmp_path_factory.mktemp("lora-jsonl"), "llm/lora", f"model={tiny_llama}", f"data={pairs}",
                 *LORA_ARGS, "val_fraction=0.2", "test_fraction=0.2")


# ---------------------------------------------------------------------------------------------
# llm/gpt
# ---------------------------------------------------------------------------------------------

def test_gpt_run_saves_a_card_and_its_test_windows_and_predict_reproduces_them(gpt_run):
    card = json.loads((gpt_run / "model.json").read_text())
    assert card["recipe"] == "llm/gpt" and card["weights"] == ["model.safetensors"] and card["selected"] == "final"
    assert card["files"] == ["tokenizer.json"] and card["shape"]["depth"] == 1 and card["shape"]["vocab"] == 300
    result = roundtrip(gpt_run)
    reported = run_metrics(gpt_run)
    assert {"test_bpb", "test_bpb_ci_low", "test_bpb_ci_high"} <= set(result.metrics)
    # the same windows, batches and weights, read back into other buffers (BLAS promises no bitwise result across
    # alignments): within the README's 1e-6
    assert result.metrics["test_bpb"] == pytest.approx(reported["test_bpb"], abs=1e-6)
    rows = predictions_csv(gpt_run / "predictions.csv")
    assert list(rows[0]) == ["window", "start_byte", "bytes", "tokens", "nats", "bpb", "text"]
    assert sum(int(r["bytes"]) for r in rows) == 1500 and all(int(r["tokens"]) <= 32 for r in rows)
    nats = sum(float(r["nats"]) for r in rows)
    assert nats / (math.log(2) * 1500) == pytest.approx(reported["test_bpb"], rel=1e-12)
    assert "".join(r["text"] for r in rows) == test_text(gpt_run)  # the windows tile the scored bytes, in order


def test_gpt_prompts_are_continued_as_the_run_sampled(gpt_run, tmp_path, capsys):
    """prompt=First n=2 with the run's seed, sample_tokens and temperature gives the run's samples.txt (zoo predict
    prints them; the Python API does not); a prompts file gives each prompt the same continuation as alone; top_k=1
    is greedy."""
    from recipe_zoo import load
    from recipe_zoo.cli import main

    model = load(gpt_run, device="cpu")
    samples = (gpt_run / "samples.txt").read_text().rstrip("\n").split("\n\n----------\n\n")
    alone = model.predict(prompt="First", n=2)
    assert [r["prompt"] + r["completion"] for r in alone.rows] == samples
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("First\n\nAll:\n")
    both = model.predict(tmp_path / "gen.csv", prompts=str(prompts), n=2)
    assert [(r["prompt"], r["sample"]) for r in both.rows] == [("First", 1), ("First", 2), ("All:", 1), ("All:", 2)]
    assert both.rows[:2] == alone.rows and predictions_csv(tmp_path / "gen.csv")[0]["completion"] == \
        alone.rows[0]["completion"]
    greedy = model.predict(prompt="All:", temperature=0, max_tokens=5).rows[0]["completion"]
    assert model.predict(prompt="All:", top_k=1, seed=7, max_tokens=5).rows[0]["completion"] == greedy
    assert model.predict(prompt="First", seed=5, n=2).rows != alone.rows
    assert "First" not in capsys.readouterr().out
    assert main(["predict", str(gpt_run), "prompt=First", "n=2", "--out", str(tmp_path / "p.csv")]) == 0
    printed = capsys.readouterr().out
    assert all(sample in printed for sample in samples) and "2 predictions -> " in printed


def test_gpt_scores_a_text_file_and_a_folder(gpt_run, tmp_path):
    from recipe_zoo import load
    from recipe_zoo.recipes.llm import scoring, tokenization

    model = load(gpt_run, device="cpu")
    same = tmp_path / "test.txt"
    same.write_text(test_text(gpt_run))  # the run's own test bytes, as a file: the run's test_bpb
    assert model.predict(data=str(same)).metrics["bpb"] == pytest.approx(run_metrics(gpt_run)["test_bpb"], abs=1e-6)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(TEXT)
    (folder / "b.md").write_text("All:\nSpeak, speak. — naïve 😀\n" * 40)
    (folder / "skip.pdf").write_bytes(b"%PDF")
    result = model.predict(data=str(folder), batch_size=2)
    assert set(result.metrics) == {"bpb", "bpb_ci_low", "bpb_ci_high"}
    # each document from <|bos|>, as training packed them; in chunks (progress) the same as in one call
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(gpt_run / "tokenizer.json"))
    tokens = tokenization.encode_docs(tok, [TEXT, (folder / "b.md").read_text()])
    per_target = tokenization.token_bytes(tok)[tokens[1:].long()]
    assert len(tokens) - 1 > 2 * 32 * 32  # more than one chunk of windows (32 batches of 2)
    from recipe_zoo.core import artifact
    from recipe_zoo.recipes.llm import models

    gpt = models.GPT(models.GPTShape(**model.card["shape"]))
    gpt.load_state_dict(artifact.load_tensors(gpt_run / "model.safetensors"))
    gpt.eval()
    whole = scoring.window_sums(gpt, tokens, 32, 2, "cpu", per_target)
    chunked = scoring.window_sums(gpt, tokens, 32, 2, "cpu", per_target, progress=lambda *a: None)
    assert whole[0].tolist() == chunked[0].tolist() and whole[1].tolist() == chunked[1].tolist()
    assert result.metrics["bpb"] == pytest.approx(whole[0].sum() / (math.log(2) * whole[1].sum()), abs=1e-6)
    assert sum(r["bytes"] for r in result.rows) == len(TEXT.encode()) + len((folder / "b.md").read_bytes())


def test_gpt_predict_bad_input_is_one_line(gpt_run, tmp_path, capfd):
    (tmp_path / "latin1.txt").write_bytes("caf".encode() + b"\xe9 au lait")
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "empty").mkdir()
    for args, needles in (
            ([f"data={tmp_path / 'missing.txt'}"], ("missing.txt", "no such file")),
            ([f"data={tmp_path / 'latin1.txt'}"], ("latin1.txt", "not UTF-8 text (byte 0xe9 at offset 3)")),
            ([f"data={tmp_path / 'blank.txt'}"], ("blank.txt", "empty file")),
            ([f"data={tmp_path / 'empty'}"], ("empty", "no .txt or .md files")),
            ([f"prompts={tmp_path / 'missing.txt'}"], ("prompts=", "missing.txt", "no such file")),
            (["prompt=First", f"data={tmp_path / 'blank.txt'}"], ("not both",)),
            (["promt=First"], ("unknown key 'promt'", "did you mean 'prompt'?")),
            (["temperature=hot"], ("temperature='hot'",))):
        predict_bad(capfd, gpt_run, *args, needles=needles)
    broken = tmp_path / "run"
    shutil.copytree(gpt_run, broken)
    (broken / "tokenizer.json").unlink()
    predict_bad(capfd, broken, needles=(str(broken / "tokenizer.json"), "not found"))
    card = json.loads((broken / "model.json").read_text())
    (broken / "model.json").write_text(json.dumps({**card, "format_version": 99}))
    predict_bad(capfd, broken, needles=("format_version 99",))


def test_gpt_export_safetensors_loads_back(gpt_run, tmp_path):
    from safetensors import safe_open
    from tokenizers import Tokenizer

    from recipe_zoo.cli import main
    from recipe_zoo.core import artifact
    from recipe_zoo.recipes.llm import models

    assert main(["export", str(gpt_run), "--format", "safetensors", "--out", str(tmp_path / "x")]) == 0
    out = tmp_path / "x"
    assert {p.name for p in out.iterdir()} == {".zoo-written", "model.json", "config.json", "model.safetensors",
                                                "tokenizer.json"}
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        shape = json.loads(f.metadata()["shape"])
    assert shape == json.loads((out / "model.json").read_text())["shape"]
    model = models.GPT(models.GPTShape(**shape))
    model.load_state_dict(artifact.load_tensors(out / "model.safetensors"))
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = torch.tensor([[tok.token_to_id("<|bos|>")] + tok.encode("First Citizen:").ids])
    assert torch.isfinite(model(ids)).all() and model(ids).shape == (1, ids.shape[1], 300)


# ---------------------------------------------------------------------------------------------
# llm/lora
# ---------------------------------------------------------------------------------------------

def test_lora_text_run_round_trips_before_and_after(lora_run, tmp_path):
    card = json.loads((lora_run / "model.json").read_text())
    assert card["recipe"] == "llm/lora" and card["weights"] == ["adapter", "merged"] and card["dtype"] == "float32"
    result = roundtrip(lora_run, before=True)
    assert {"test_bpb", "test_bpb_ci_low", "test_bpb_ci_high", "test_bpb_before"} <= set(result.metrics)
    assert result.metrics["test_bpb"] == pytest.approx(run_metrics(lora_run)["test_bpb"], abs=1e-6)  # as above
    rows = predictions_csv(lora_run / "predictions.csv")
    assert "".join(r["text"] for r in rows) == test_text(lora_run)
    same = tmp_path / "test.txt"
    same.write_text(test_text(lora_run))
    from recipe_zoo import load

    assert load(lora_run, device="cpu").predict(data=str(same)).metrics["bpb"] == pytest.approx(
        run_metrics(lora_run)["test_bpb"], abs=1e-6)


def test_lora_prompts_are_seeded(lora_run):
    from recipe_zoo import load

    model = load(lora_run, device="cpu")
    a = model.predict(prompt="First", n=2, max_tokens=6, seed=3).rows
    assert len(a) == 2 and a == model.predict(prompt="First", n=2, max_tokens=6, seed=3).rows
    greedy = model.predict(prompt="All:", temperature=0, max_tokens=6).rows[0]["completion"]
    assert model.predict(prompt="All:", top_k=1, max_tokens=6, seed=9).rows[0]["completion"] == greedy


def test_lora_without_its_base_uses_the_merged_copy(lora_run, tmp_path, capfd):
    from recipe_zoo import load

    moved = tmp_path / "run"
    shutil.copytree(lora_run, moved)
    saved = json.loads((moved / "config.json").read_text())
    saved["config"]["model"] = str(tmp_path / "gone")
    (moved / "config.json").write_text(json.dumps(saved))
    result = load(moved, device="cpu").predict()
    assert result.metrics["test_bpb"] == pytest.approx(run_metrics(lora_run)["test_bpb"], abs=1e-4)
    predict_bad(capfd, moved, "before=true", needles=("before=true", "only the merged copy"))
    shutil.rmtree(moved / "merged")
    (moved / "model.json").write_text(json.dumps({**json.loads((moved / "model.json").read_text()),
                                                  "weights": ["adapter"]}))
    predict_bad(capfd, moved, needles=("gone", "no such model folder", "merge=true"))


def test_lora_jsonl_round_trip_and_new_examples(lora_jsonl_run, tiny_llama, tmp_path, capfd):
    result = roundtrip(lora_jsonl_run, before=True)
    assert result.metrics["test_bpb"] == pytest.approx(run_metrics(lora_jsonl_run)["test_bpb"], abs=1e-6)
    rows = predictions_csv(lora_jsonl_run / "predictions.csv")
    assert list(rows[0]) == ["line", "bytes", "nats", "bpb"] and len(rows) >= 2
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"prompt": "Q1: who speaks?", "response": " Citizen 1, speak."}) + "\n" +
                   json.dumps({"prompt": "long", "response": " speak" * 60}) + "\n" +
                   json.dumps({"prompt": "x " * 80, "response": " All."}) + "\n")
    from recipe_zoo import load

    got = load(lora_jsonl_run, device="cpu").predict(data=str(new))
    # the response longer than seq_len=32 is scored whole, in windows (it used to be left out)
    assert got.dropped == 0 and [r["line"] for r in got.rows] == [1, 2, 3]
    assert got.rows[1]["bytes"] == len(" speak" * 60) and all(math.isfinite(r["bpb"]) for r in got.rows)
    assert got.rows[0]["bytes"] == len(" Citizen 1, speak.") and math.isfinite(got.metrics["bpb"])
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n{not json\n")
    predict_bad(capfd, lora_jsonl_run, f"data={tmp_path / 'bad.jsonl'}", needles=("bad.jsonl line 2",
                                                                                    "not valid JSON"))
    predict_bad(capfd, lora_jsonl_run, f"data={tmp_path / 'no.jsonl'}", needles=("no.jsonl", "no such file"))


@pytest.mark.parametrize("which", ["text", "jsonl"])
def test_lora_export_pretrained_loads_in_transformers_and_peft(which, lora_run, lora_jsonl_run, tiny_llama,
                                                               tmp_path):
    """adapter/ on the base (peft) and merged/ (transformers) give the logits of the model predict scores with;
    a run without a merged copy is merged at export."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe_zoo import load
    from recipe_zoo.cli import main
    from recipe_zoo.recipes.llm import causal_lm

    run_dir = lora_run if which == "text" else lora_jsonl_run
    assert (run_dir / "merged").is_dir() == (which == "text")
    out = tmp_path / "pretrained"
    assert main(["export", str(run_dir), "--format", "pretrained", "--out", str(out)]) == 0
    m = load(run_dir, device="cpu")
    ours = causal_lm.load_trained_lora(m.cfg.model, m.cfg.seq_len, run_dir, torch.float32, log=lambda line: None)[0]
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_llama), out / "adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([AutoTokenizer.from_pretrained(out / "merged")("First Citizen: speak").input_ids])
    with torch.no_grad():
        expected = ours(input_ids=ids).logits
        # peft's adapter and ours: the same weights in other modules and buffers; float32's tolerance (assert_close's)
        torch.testing.assert_close(adapted(input_ids=ids).logits, expected)
        assert (merged(input_ids=ids).logits - expected).abs().max() < 1e-4
