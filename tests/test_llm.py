"""LLM recipes: tokenizer and bits per byte, the GPT, the optimizer table, text data and its bad
inputs, and LoRA on a tiny transformers Llama built locally."""
import json
import math

import pytest
import torch

from conftest import bad_input, make_tiny_llama, run_doctor, summary_block, zoo
from recipe_zoo.recipes.llm import data as llm_data, gpt, models
from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.budget import Budget, parse_budget
from recipe_zoo.core.errors import ZooError

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\n") * 40


def small_cfg(**kw) -> gpt.GPTConfig:
    return gpt.GPTConfig(**{"aspect": 32, "head_dim": 16, "seq_len": 32, "vocab_size": 300, **kw})


def test_bpe_round_trips_any_text_and_byte_table_counts_utf8():
    tok = llm_data.train_bpe([TEXT], 320)
    lengths = llm_data.token_bytes(tok)
    assert lengths[tok.token_to_id(llm_data.BOS)] == 0
    for text in (TEXT[:200], "naïve café — 😀 日本語\r\n\tend", "\x01\x7f"):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
        assert int(lengths[torch.tensor(ids)].sum()) == len(text.encode())
    assert tok.get_vocab_size() == 320
    byte_tok = llm_data.train_bpe([TEXT], 0, byte_only=True)
    assert byte_tok.get_vocab_size() == 257 and len(byte_tok.encode("héllo").ids) == 6
    with pytest.raises(ZooError, match="vocab_size=100"):
        llm_data.train_bpe([TEXT], 100)


def test_bits_per_byte_of_a_uniform_model_is_log2_vocab_per_byte():
    vocab, seq = 50, 8
    tokens = torch.randint(vocab, (1 + 37,))  # 37 targets: 4 full windows and a short one
    per_target = torch.randint(1, 4, (37,))
    uniform = lambda x: torch.zeros(*x.shape, vocab)  # noqa: E731
    for batch in (1, 3, 16):
        bpb = llm_data.bits_per_byte(uniform, tokens, seq, batch, "cpu", bytes_per_target=per_target)
        assert bpb == pytest.approx(37 * math.log2(vocab) / int(per_target.sum()), rel=1e-6)


def test_token_windows_cover_each_epoch_once_and_resume_exactly():
    tokens = torch.arange(1000, dtype=torch.int32)
    a = llm_data.TokenWindows(tokens, seq_len=10, batch_size=4, seed=3)
    seen = torch.cat([a.next_batch()[0] for _ in range(a.batches_per_epoch)])
    starts = seen[:, 0]
    assert len(set(starts.tolist())) == len(starts) and bool(((starts - starts[0]) % 10 == 0).all())
    x, y = a.next_batch()
    assert torch.equal(y[:, :-1], x[:, 1:]) and a.epoch == 1
    b = llm_data.TokenWindows(tokens, seq_len=10, batch_size=4, seed=3)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.next_batch()[0], b.next_batch()[0])
    with pytest.raises(ZooError, match="fewer than one batch"):
        llm_data.TokenWindows(tokens[:50], seq_len=10, batch_size=8, seed=0)


@pytest.mark.parametrize("mlp,kv_heads", [("relu2", 0), ("swiglu", 1)])
def test_gpt_is_causal_starts_as_identity_blocks_and_caps_logits(mlp, kv_heads):
    torch.manual_seed(0)
    shape = models.GPTShape.from_depth(2, small_cfg(mlp=mlp, kv_heads=kv_heads, softcap=5.0), vocab=64)
    model = models.GPT(shape)
    assert model.scaling_params() == models.param_estimate(shape)
    x = torch.randint(64, (2, 16))
    # zero-initialised output projections: at init the blocks add nothing to the residual stream
    expected = model.lm_head(models.rms_norm(model.embed(x)))
    assert torch.allclose(model(x), 5.0 * torch.tanh(expected / 5.0), atol=1e-5)
    for p in model.parameters():  # break the identity so causality is tested on a real network
        p.data.add_(0.1 * torch.randn_like(p))
    logits = model(x)
    assert logits.abs().max() <= 5.0
    y = x.clone()
    y[:, 10:] = (y[:, 10:] + 1) % 64
    assert torch.allclose(model(y)[:, :10], logits[:, :10], atol=1e-5)
    assert not torch.allclose(model(y)[:, 10:], logits[:, 10:])
    with pytest.raises(ValueError, match="longer than the model's context"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_optimizer_follows_the_recipe_table():
    cfg = gpt.GPTConfig(aspect=48)  # depth 4: width 192, s = (192/768)^-0.5 = 2
    model = models.GPT(models.GPTShape.from_depth(4, cfg, vocab=100))
    opt = gpt.build_optimizer(cfg, model)
    by_kind = {g["kind"]: g for g in opt.param_groups}
    assert by_kind["matrix"]["optimizer"] == "muon" and by_kind["matrix"]["lr"] == 0.04
    assert by_kind["matrix"]["weight_decay"] == 0.2
    assert by_kind["embedding"]["lr"] == pytest.approx(1.2) and by_kind["embedding"]["weight_decay"] == 0
    assert by_kind["head"]["lr"] == pytest.approx(0.008) and by_kind["scalar"]["lr"] == pytest.approx(0.01)
    assert len(by_kind["scalar"]["params"]) == 2  # the per-block residual and x0 scales
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


def test_depth_grows_with_the_budget_and_the_data(monkeypatch):
    monkeypatch.setattr(gpt, "peak_flops", lambda device: 1e11)  # a fixed machine, not this one's measurement
    cfg = gpt.GPTConfig()

    def depth(budget: str, train_tokens: int) -> int:
        return gpt.size_for_budget(cfg, 1024, train_tokens, parse_budget(budget), torch.device("cpu"), log=print)

    assert depth("10s", 10**9) <= depth("5m", 10**9) < depth("1h", 10**9) < depth("24h", 10**9)
    assert depth("1h", 10**5) > depth("1h", 10**9)  # a small corpus caps the epochs: spend compute on size
    assert depth("100steps", 10**5) == 4


def test_text_sources_and_bad_inputs(tmp_path):
    f = tmp_path / "book.txt"
    f.write_text("abcdefghij" * 10)
    s = llm_data.load_text(str(f), 0.1, SimpleRun(Budget("steps", 1)))
    assert "".join(s.train) + "".join(s.val) == "abcdefghij" * 10 and len("".join(s.val)) == 10
    (tmp_path / "book.val.txt").write_text("held out")
    assert llm_data.load_text(str(f), 0.1, SimpleRun(Budget("steps", 1))).val == ["held out"]
    folder = tmp_path / "docs"
    (folder / "val").mkdir(parents=True)
    (folder / "a.md").write_text("doc a")
    (folder / "b.txt").write_text("doc b")
    (folder / "val" / "c.txt").write_text("doc c")
    (folder / "notes.pdf").write_bytes(b"%PDF")
    logged = []
    s = llm_data.load_text(str(folder), 0.1, SimpleRun(Budget("steps", 1), log=logged.append))
    assert s.train == ["doc a", "doc b"] and s.val == ["doc c"] and "1 files" in logged[0]
    with pytest.raises(ZooError, match="validation split has 8 bytes, fewer than eval_bytes=100"):
        llm_data.eval_text(llm_data.TextSplits("x", ["a"], ["held out"]), 100)
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "bin.txt").write_bytes(b"abc\0def")
    (tmp_path / "latin1.txt").write_bytes("caf".encode() + b"\xe9 au lait")
    (tmp_path / "nothing").mkdir()
    for name, message in (("empty.txt", "empty file"), ("bin.txt", "NUL byte at offset 3"),
                          ("latin1.txt", "not UTF-8 text \\(byte 0xe9 at offset 3\\)"),
                          ("nothing", "no .txt or .md files"), ("missing.txt", "no such file")):
        with pytest.raises(ZooError, match=message):
            llm_data.load_text(str(tmp_path / name), 0.1, SimpleRun(Budget("steps", 1)))
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ZooError, match="needs the Hugging Face `datasets` package"):
            llm_data.load_text("hf:wikitext:wikitext-2-raw-v1", 0.1, SimpleRun(Budget("steps", 1)))


def test_zoo_run_gpt_end_to_end(tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT * 3)
    r = zoo("run", "llm/gpt", "--budget", "6steps", f"data={data}", "depth=1", "aspect=32", "head_dim=16",
            "seq_len=32", "micro_batch=4", "batch_tokens=256", "eval_bytes=1500", "vocab_size=300",
            "samples=2", "sample_tokens=20", "prompt=First", "compile=false")
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_block(r.stdout)
    assert s["status"] == "ok" and s["benchmark"].startswith("own:") and 1.0 < float(s["value"]) < 9.0
    assert s["tokens_seen"].startswith("1,536 (") and "(Chinchilla: 20)" in s["tokens_per_param"]
    assert float(s["tokens_per_s"].replace(",", "")) > 0
    run_dir = tmp_path / "runs" / "llm" / "gpt"
    run_dir = next(run_dir.iterdir())
    assert (run_dir / "tokenizer.json").is_file() and (run_dir / "model.safetensors").is_file()
    samples = (run_dir / "samples.txt").read_text()
    assert samples.startswith("First") and samples.count("----------") == 1
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["tokens"] == 6 * 256 and metrics["depth"] == 1 and metrics["vocab_size"] == 300
    assert metrics["tokens_per_param"] > 0 and metrics["tokens_per_s"] > 0


@pytest.mark.parametrize("args,message", [
    (["eval_bytes=10000000"], "fewer than eval_bytes=10,000,000"),
    (["kv_heads=3"], "kv_heads=3: must divide"),
    (["vocab_size=99"], "vocab_size=99: must be at least 257"),
])
def test_zoo_run_gpt_bad_config_is_one_line_exit_2(tmp_path, args, message):
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT)
    r = zoo("run", "llm/gpt", "--budget", "1steps", f"data={data}", "depth=2", "eval_bytes=500", *args)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_zoo_run_gpt_non_utf8_names_file_and_offset(tmp_path):
    data = tmp_path / "bad.txt"
    data.write_bytes(TEXT.encode() + b"\xff\xfe")
    r = zoo("run", "llm/gpt", "--budget", "1steps", f"data={data}")
    assert r.returncode == 2 and f"{data}: not UTF-8 text (byte 0xff at offset {len(TEXT)})" in r.stderr


# ---------------------------------------------------------------------------------------------
# LoRA on a tiny random Llama saved locally
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def test_lora_fine_tunes_text_and_saves_adapter_and_merged_model(tiny_llama, tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT * 2)
    r = zoo("run", "llm/lora", "--budget", "12steps", f"model={tiny_llama}", f"data={data}", "seq_len=32",
            "micro_batch=4", "eval_bytes=1000", "lr=0.01", "merge=true")
    assert r.returncode == 0, r.stderr + r.stdout
    run_dir = next((tmp_path / "runs" / "llm" / "lora").iterdir())
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["val_bpb"] < metrics["val_bpb_before"]  # a random model learns the repeated text
    assert float(summary_block(r.stdout)["val_bpb_before"]) == pytest.approx(metrics["val_bpb_before"], abs=1e-4)
    assert (run_dir / "adapter" / "adapter_config.json").is_file()
    assert (run_dir / "merged" / "config.json").is_file()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(run_dir / "merged")
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_lora_jsonl_loss_is_on_the_response_only(tiny_llama, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"Q{i}: speak?", "response": " Speak, speak."})
                              for i in range(20)) + "\n" + json.dumps({"prompt": "x " * 80, "response": "y"}) + "\n")
    logged = []
    examples = llm_data.load_jsonl(path, tokenizer, 32, log=logged.append)
    assert len(examples) == 20 and "1 of 21 examples are longer" in logged[0]
    e = examples[0]
    n_prompt = len(tokenizer("Q0: speak?").input_ids)
    assert e.labels[:n_prompt] == [-100] * n_prompt and e.labels[n_prompt:] == e.ids[n_prompt:]
    ids, labels, mask = llm_data.pad_examples(examples[:3], pad_id=0)
    assert ids.shape == labels.shape == mask.shape and int(mask.sum()) == sum(len(x.ids) for x in examples[:3])
    r = zoo("run", "llm/lora", "--budget", "3steps", f"model={tiny_llama}", f"data={path}", "seq_len=32",
            "micro_batch=4", "val_fraction=0.2")
    assert r.returncode == 0, r.stderr + r.stdout
    assert math.isfinite(float(summary_block(r.stdout)["value"]))


def test_lora_bad_inputs_exit_2(tiny_llama, tmp_path, capsys):
    """Through the CLI's own entry point, in-process (a subprocess per case costs ~5 s of imports)."""
    from recipe_zoo.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n{not json\n")
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"prompt": "a"}) + "\n")
    for args, message in (([f"data={bad}"], "bad.jsonl line 2: not valid JSON"),
                          ([f"data={missing}"], "missing.jsonl line 1: missing string field 'response'"),
                          (["seq_len=128"], "over the model's context limit of 64"),
                          ([f"model={tmp_path}"], "not a transformers model folder")):
        code = main(["run", "llm/lora", "--budget", "1steps", f"model={tiny_llama}", "seq_len=32", *args])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert main(["run", "llm/lora", "--budget", "1steps"]) == 2
    assert "llm/lora needs model=PATH" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# zoo doctor: the recipes' data views (run.inspect) and the training checks on tiny configs
# ---------------------------------------------------------------------------------------------

def doctor(name: str, args: list[str], out) -> tuple[int, dict[str, list[dict]]]:
    """``zoo doctor`` in-process: (exit code, findings by check)."""
    code, findings = run_doctor(name, args, out)
    found: dict[str, list[dict]] = {}
    for f in findings:
        found.setdefault(f["check"], []).append(f)
    return code, found


def test_doctor_gpt_sees_its_token_splits_and_runs_clean(tmp_path, capsys):
    """The scored validation tokens are checked against the training tokens: a tail of a repeated line
    is flagged, a separate validation file is not; the training checks pass on a tiny model."""
    data = tmp_path / "corpus.txt"
    data.write_text("To be, or not to be, that is the question.\n" * 200)
    tiny = [f"data={data}", "seq_len=32", "micro_batch=4", "eval_bytes=800", "depth=1", "aspect=32", "head_dim=16",
            "batch_tokens=128", "vocab_size=300", "samples=0", "compile=false", "--steps", "12"]
    code, found = doctor("llm/gpt", tiny, tmp_path / "leaky")
    assert code == 0 and found["data/leakage"][0]["severity"] == "warn", capsys.readouterr().out[-3000:]
    assert "3 of 3 validation windows of 64 tokens" in found["data/leakage"][0]["message"]
    (tmp_path / "corpus.val.txt").write_text(TEXT[:1000])  # validation held out by file: not a line of train
    code, found = doctor("llm/gpt", tiny, tmp_path / "clean")
    loud = [f for fs in found.values() for f in fs if f["severity"] in ("warn", "error")]
    assert code == 0 and not loud, loud
    assert found["data/leakage"][0]["message"].startswith("0 of ")
    for check in ("overfit/one-batch", "overfit/transfer", "lr/range", "health/schedule", "health/loss"):
        assert check in found, check


def test_doctor_lora_jsonl_rows_and_adapter_tensors(tiny_llama, tmp_path, capsys):
    """JSONL examples are rows: an example copied into the held-out tail is an exact duplicate; the LoRA
    tensors are the new ones, so moving them is not 'pretrained weights moved'."""
    path = tmp_path / "pairs.jsonl"
    lines = [json.dumps({"prompt": f"Q{i}: speak?", "response": " Speak, speak."}) for i in range(19)]
    path.write_text("\n".join(lines + [lines[0]]) + "\n")  # the last of the 4 held-out examples repeats the first
    code, found = doctor("llm/lora", [f"model={tiny_llama}", f"data={path}", "seq_len=32", "micro_batch=4",
                                      "val_fraction=0.2", "lr=0.01", "--steps", "10"], tmp_path)
    assert code == 1, capsys.readouterr().out[-3000:]  # the leak is an error
    (leak,) = found["data/leakage"]
    assert leak["severity"] == "error" and "1 of 4 validation rows are exact copies" in leak["message"]
    assert "(val 3 = train 0)" in leak["message"]
    assert found["health/weight-change"][0]["severity"] == "ok"


# ---------------------------------------------------------------------------------------------
# Bad input, one table: exit 2, one line naming the file (and the line, item or key), no ok row
# ---------------------------------------------------------------------------------------------

GPT_TINY = ["seq_len=32", "micro_batch=4", "eval_bytes=800", "depth=1", "aspect=32", "head_dim=16",
            "batch_tokens=128", "vocab_size=300", "samples=0", "compile=false"]
PAIR = json.dumps({"prompt": "Q: speak?", "response": " Speak, speak."})


def _gpt_bad_case(case: str, tmp):
    """llm/gpt: (args, needles the error line must hold, budget) for one bad input."""
    corpus = tmp / "corpus.txt"
    corpus.write_text(TEXT * 2)
    if case == "missing_file":
        return [f"data={tmp / 'missing.txt'}"], ["missing.txt", "no such file or folder"], "3steps"
    if case == "empty_file":
        (tmp / "empty.txt").write_bytes(b"")
        return [f"data={tmp / 'empty.txt'}"], [str(tmp / "empty.txt"), "empty file"], "3steps"
    if case == "blank_file":
        (tmp / "blank.txt").write_text(" \n\n\t\n")
        return [f"data={tmp / 'blank.txt'}"], [str(tmp / "blank.txt"), "empty file"], "3steps"
    if case == "non_utf8":
        (tmp / "latin.txt").write_bytes(b"line one\nline two\n\xff\xfe\xfa three\n")
        return ([f"data={tmp / 'latin.txt'}"],
                [str(tmp / "latin.txt"), "not UTF-8 text (byte 0xff at offset 18) on line 3"], "3steps")
    if case == "binary_file":
        (tmp / "model.txt").write_bytes(b"PK\x03\x04\x00\x00junk")
        return [f"data={tmp / 'model.txt'}"], [str(tmp / "model.txt"), "NUL byte at offset 4, line 1"], "3steps"
    if case == "empty_folder":
        (tmp / "docs").mkdir()
        return [f"data={tmp / 'docs'}"], [str(tmp / "docs"), "no .txt or .md files"], "3steps"
    if case == "folder_with_only_val":
        (tmp / "docs" / "val").mkdir(parents=True)
        (tmp / "docs" / "val" / "a.txt").write_text(TEXT)
        return [f"data={tmp / 'docs'}"], [str(tmp / "docs"), "no .txt or .md files to train on"], "3steps"
    if case == "non_utf8_file_in_folder":
        (tmp / "docs").mkdir()
        (tmp / "docs" / "a.txt").write_text(TEXT)
        (tmp / "docs" / "b.md").write_bytes(b"# notes\n\xe9t\xe9\n")
        return [f"data={tmp / 'docs'}"], [str(tmp / "docs" / "b.md"), "not UTF-8", "line 2"], "3steps"
    if case == "non_utf8_val_file":
        (tmp / "corpus.val.txt").write_bytes(b"\xff\xfe\xfa")
        return [f"data={corpus}"], [str(tmp / "corpus.val.txt"), "not UTF-8", "line 1"], "3steps"
    if case == "too_little_validation":
        return [f"data={corpus}", "eval_bytes=1000000"], [str(corpus), "fewer than eval_bytes=1,000,000"], "3steps"
    if case == "too_little_training":
        (tmp / "short.txt").write_text(TEXT[:400])  # at most 360 training tokens: fewer than 16 windows of 32
        return ([f"data={tmp / 'short.txt'}", "eval_bytes=20", "micro_batch=16"],
                [str(tmp / "short.txt"), "fewer than one batch"], "3steps")
    if case == "missing_tokenizer":
        return [f"data={corpus}", f"tokenizer={tmp / 'tok.json'}"], ["tok.json", "not bpe, bytes or"], "3steps"
    if case == "corrupt_tokenizer":
        (tmp / "tok.json").write_bytes(b"{\xff\xfe")
        return ([f"data={corpus}", f"tokenizer={tmp / 'tok.json'}"],
                [str(tmp / "tok.json"), "not a tokenizers JSON file"], "3steps")
    if case == "typo_key":
        return [f"data={corpus}", "sequence_len=64"], ["unknown key 'sequence_len'"], "3steps"
    if case == "typo_key_near":
        return [f"data={corpus}", "micro_bach=4"], ["unknown key 'micro_bach'", "did you mean 'micro_batch'?"], "3steps"
    if case == "bad_int":
        return [f"data={corpus}", "micro_batch=abc"], ["micro_batch='abc'", "not a valid int"], "3steps"
    if case == "bad_float":
        return [f"data={corpus}", "matrix_lr=fast"], ["matrix_lr='fast'", "not a valid float"], "3steps"
    if case == "bad_choice":
        return [f"data={corpus}", "mlp=gelu"], ["mlp='gelu'", "must be one of"], "3steps"
    if case == "zero_budget":
        return [f"data={corpus}"], ["'0s'", "must be positive"], "0s"
    if case == "negative_budget":
        return [f"data={corpus}"], ["'-5'", "expected a number and a unit"], "-5"
    raise AssertionError(case)


def _lora_bad_case(case: str, tmp, model):
    """llm/lora: (args, needles the error line must hold, budget) for one bad input."""
    pairs = tmp / "pairs.jsonl"
    pairs.write_text("\n".join([PAIR] * 6) + "\n")
    good = [f"data={pairs}"]
    if case == "missing_jsonl":
        return [f"data={tmp / 'missing.jsonl'}"], [str(tmp / "missing.jsonl"), "cannot read"], "3steps"
    if case == "empty_jsonl":
        (tmp / "empty.jsonl").write_text("\n\n")
        return [f"data={tmp / 'empty.jsonl'}"], [str(tmp / "empty.jsonl"), "empty file"], "3steps"
    if case == "non_utf8_jsonl":
        pairs.write_bytes(PAIR.encode() + b"\n" + b'{"prompt": "\xff\xfe\xfa", "response": "x"}\n')
        return good, [str(pairs), "not UTF-8", "on line 2"], "3steps"
    if case == "invalid_json_line":
        pairs.write_text(PAIR + "\n" + PAIR + "\n{\"prompt\": \"a\",\n")
        return good, [f"{pairs} line 3", "not valid JSON"], "3steps"
    if case == "not_an_object":
        pairs.write_text(PAIR + "\n" + json.dumps(["Q", "A"]) + "\n")
        return good, [f"{pairs} line 2", "expected an object", "got list"], "3steps"
    if case == "wrong_field_name":
        pairs.write_text(PAIR + "\n" + json.dumps({"prompt": "Q", "completion": "A"}) + "\n")
        return good, [f"{pairs} line 2", "missing string field 'response'", "completion"], "3steps"
    if case == "wrong_field_type":
        pairs.write_text(PAIR + "\n" + PAIR + "\n" + json.dumps({"prompt": 5, "response": "A"}) + "\n")
        return good, [f"{pairs} line 3", "field 'prompt' must be a string, got int"], "3steps"
    if case == "all_too_long":
        pairs.write_text(json.dumps({"prompt": "x " * 80, "response": "y"}) + "\n")
        return good, [str(pairs), "no usable", "longer than seq_len=32"], "3steps"
    if case == "one_example":
        pairs.write_text(PAIR + "\n")
        return good, [str(pairs), "1 examples leave none to train on"], "3steps"
    if case == "non_utf8_text":
        (tmp / "book.txt").write_bytes(TEXT.encode() + b"\xfa")
        return [f"data={tmp / 'book.txt'}"], [str(tmp / "book.txt"), "not UTF-8", f"offset {len(TEXT)}"], "3steps"
    if case == "missing_model_folder":
        return [*good, f"model={tmp / 'no-model'}"], [str(tmp / "no-model"), "no such model folder"], "3steps"
    if case in ("corrupt_config", "corrupt_tokenizer", "corrupt_weights", "unknown_model_type", "weights_do_not_fit"):
        import shutil

        broken = tmp / "broken"
        shutil.copytree(model, broken)
        file, content, needle = {
            "corrupt_config": ("config.json", b"{not json", "cannot load the model config"),
            "unknown_model_type": ("config.json", None, "cannot load the model config"),
            "corrupt_tokenizer": ("tokenizer.json", b"\xff\xfe\xfa", "cannot load the tokenizer"),
            "corrupt_weights": ("model.safetensors", b"\x00garbage", "cannot load the model weights"),
            "weights_do_not_fit": ("model.safetensors", None, "do not fit")}[case]
        if case == "unknown_model_type":
            config = json.loads((broken / file).read_text())
            (broken / file).write_text(json.dumps({**config, "model_type": "no-such-architecture"}))
        elif case == "weights_do_not_fit":  # config.json promises a wider model than the weights hold
            config = json.loads((broken / "config.json").read_text())
            (broken / "config.json").write_text(json.dumps({**config, "hidden_size": 2 * config["hidden_size"]}))
        else:
            (broken / file).write_bytes(content)
        return [*good, f"model={broken}"], [str(broken / file), needle], "3steps"
    if case == "typo_key":
        return [*good, "rnak=4"], ["unknown key 'rnak'", "did you mean 'rank'?"], "3steps"
    if case == "bad_int":
        return [*good, "micro_batch=abc"], ["micro_batch='abc'", "not a valid int"], "3steps"
    if case == "bad_float":
        return [*good, "lr=fast"], ["lr='fast'", "not a valid float"], "3steps"
    if case == "zero_budget":
        return good, ["'0s'", "must be positive"], "0s"
    if case == "negative_budget":
        return good, ["'-5'", "expected a number and a unit"], "-5"
    raise AssertionError(case)


GPT_CASES = ["missing_file", "empty_file", "blank_file", "non_utf8", "binary_file", "empty_folder",
             "folder_with_only_val", "non_utf8_file_in_folder", "non_utf8_val_file", "too_little_validation",
             "too_little_training", "missing_tokenizer", "corrupt_tokenizer", "typo_key", "typo_key_near", "bad_int",
             "bad_float", "bad_choice", "zero_budget", "negative_budget"]
LORA_CASES = ["missing_jsonl", "empty_jsonl", "non_utf8_jsonl", "invalid_json_line", "not_an_object",
              "wrong_field_name", "wrong_field_type", "all_too_long", "one_example", "non_utf8_text",
              "missing_model_folder", "corrupt_config", "unknown_model_type", "corrupt_tokenizer", "corrupt_weights",
              "weights_do_not_fit", "typo_key", "bad_int", "bad_float", "zero_budget", "negative_budget"]


@pytest.mark.parametrize("recipe,case", [("llm/gpt", c) for c in GPT_CASES] + [("llm/lora", c) for c in LORA_CASES])
def test_bad_input_table(recipe, case, tmp_path, capfd, request):
    if recipe == "llm/gpt":
        args, needles, budget = _gpt_bad_case(case, tmp_path)
        args = [*GPT_TINY, *args]
    else:
        model = request.getfixturevalue("tiny_llama")
        args, needles, budget = _lora_bad_case(case, tmp_path, model)
        args = [f"model={model}", "seq_len=32", "micro_batch=2", "eval_bytes=200", *args]
    bad_input(capfd, [recipe, *args], tmp_path / "runs", *needles, budget=budget)
