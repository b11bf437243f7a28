"""LLM recipes: tokenizer and bits per byte, the GPT, the optimizer table, text data and its bad
inputs, and LoRA on a tiny transformers Llama built locally."""
import csv
import functools
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import bad_input, check_items, make_tiny_llama, run_doctor, summary_block, zoo_in_process
from recipe_zoo import registry
from recipe_zoo.core import devices
from recipe_zoo.recipes.llm import (gpt, models, prompt_response, scoring, sizing, text_splits, token_windows,
                                    tokenization)
from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.budget import Budget, parse_budget
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import torch_state_kept
from recipe_zoo.core.precision import seed_everything

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\n") * 40


def small_cfg(**kw) -> gpt.GPTConfig:
    return gpt.GPTConfig(**{"aspect": 32, "head_dim": 16, "seq_len": 32, "vocab_size": 300, **kw})


def test_bpe_round_trips_any_text_and_byte_table_counts_utf8():
    tok = tokenization.train_bpe([TEXT], 320)
    lengths = tokenization.token_bytes(tok)
    assert lengths[tok.token_to_id(tokenization.BOS)] == 0
    for text in (TEXT[:200], "naïve café — 😀 日本語\r\n\tend", "\x01\x7f"):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
        assert int(lengths[torch.tensor(ids)].sum()) == len(text.encode())
    assert tok.get_vocab_size() == 320
    byte_tok = tokenization.train_bpe([TEXT], 0, byte_only=True)
    assert byte_tok.get_vocab_size() == 257 and len(byte_tok.encode("héllo").ids) == 6
    with pytest.raises(ZooError, match="vocab_size=100"):
        tokenization.train_bpe([TEXT], 100)


def test_bits_per_byte_of_a_uniform_model_is_log2_vocab_per_byte():
    vocab, seq = 50, 8
    tokens = torch.randint(vocab, (1 + 37,))  # 37 targets: 4 full windows and a short one
    per_target = torch.randint(1, 4, (37,))
    uniform = lambda x: torch.zeros(*x.shape, vocab)  # noqa: E731
    for batch in (1, 3, 16):
        bpb = scoring.bits_per_byte(uniform, tokens, seq, batch, "cpu", bytes_per_target=per_target)
        assert bpb == pytest.approx(37 * math.log2(vocab) / int(per_target.sum()), rel=1e-6)
        nats, n_bytes = scoring.window_sums(uniform, tokens, seq, batch, "cpu", per_target)
        assert nats == pytest.approx([8 * math.log(vocab)] * 4 + [5 * math.log(vocab)])  # each window's nats
        assert n_bytes.tolist() == [int(per_target[i:i + 8].sum()) for i in range(0, 37, 8)]
    # the interval resamples the windows: it brackets the value, and is a point when every window scores alike
    rng = np.random.default_rng(0)
    nats, n_bytes = rng.uniform(50, 150, 40), rng.uniform(60, 90, 40)
    low, high = scoring.bpb_items(nats, n_bytes).interval()
    assert low < nats.sum() / (math.log(2) * n_bytes.sum()) < high
    assert scoring.bpb_items(np.full(9, 2.0), np.full(9, 1.0)).interval() == pytest.approx((2 / math.log(2),) * 2)
    # neighbouring windows that go together (a hard scene, an easy one): resampled in blocks, the interval is
    # wider than one that takes each window as independent of the next (examples of JSONL are)
    nats = np.repeat(rng.uniform(50, 150, 25), 8) + rng.uniform(0, 5, 200)
    blocks, alone = scoring.bpb_items(nats, np.full(200, 70.0)), scoring.bpb_items(nats, np.full(200, 70.0), False)
    assert blocks.block == 6 and alone.block == 1
    assert np.diff(blocks.interval()) > 1.5 * np.diff(alone.interval())


def test_token_windows_cover_each_epoch_once_and_resume_exactly():
    tokens = torch.arange(1000, dtype=torch.int32)
    a = token_windows.TokenWindows(tokens, seq_len=10, batch_size=4, seed=3)
    seen = torch.cat([a.next_batch()[0] for _ in range(a.batches_per_epoch)])
    starts = seen[:, 0]
    assert len(set(starts.tolist())) == len(starts) and bool(((starts - starts[0]) % 10 == 0).all())
    x, y = a.next_batch()
    assert torch.equal(y[:, :-1], x[:, 1:]) and a.epoch == 1
    b = token_windows.TokenWindows(tokens, seq_len=10, batch_size=4, seed=3)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.next_batch()[0], b.next_batch()[0])
    with pytest.raises(ZooError, match="fewer than one batch"):
        token_windows.TokenWindows(tokens[:50], seq_len=10, batch_size=8, seed=0)


def test_token_windows_shard_like_accumulation_across_an_epoch_boundary():
    """11 micro-batches an epoch: one process accumulating two takes an epoch's last window batch with the
    next epoch's first (its own offset and shuffle) in one step; two processes must too, not drop it, and a
    rank resumed right after that step goes on the same."""
    tokens = torch.arange(16 * 45 + 17, dtype=torch.int32)  # 45 windows of 16: 11 micro-batches of 4 an epoch
    one = token_windows.TokenWindows(tokens, 16, 4, seed=7)
    assert one.batches_per_epoch == 11
    expected = [one.next_batch() for _ in range(2 * 14)]  # 14 steps of 2: past the boundaries at 11 and 22
    ranks = []
    for rank in range(2):
        w = token_windows.TokenWindows(tokens, 16, 4, seed=7)
        w.shard(rank, 2)
        assert w.batches_per_epoch == 5  # steps_per_epoch still counts whole steps of this process
        drawn = [w.next_batch() for _ in range(6)]  # step 6 straddles the first boundary
        resumed = token_windows.TokenWindows(tokens, 16, 4, seed=7)
        resumed.shard(rank, 2)
        resumed.load_state_dict(w.state_dict())
        drawn += [resumed.next_batch() for _ in range(8)]
        ranks.append(drawn)
    merged = [batch for step in zip(*ranks) for batch in step]
    assert len(merged) == len(expected)
    for i, ((xa, ya), (xb, yb)) in enumerate(zip(merged, expected)):
        assert torch.equal(xa, xb) and torch.equal(ya, yb), f"micro-batch {i} (step {i // 2 + 1}) differs"


@pytest.mark.parametrize("mlp,kv_heads", [("relu2", 0), ("swiglu", 1)])
def test_gpt_is_causal_starts_as_identity_blocks_and_caps_logits(mlp, kv_heads):
    torch.manual_seed(0)
    shape = gpt.shape_at(small_cfg(mlp=mlp, kv_heads=kv_heads, softcap=5.0), 2, vocab=64)
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
    model = models.GPT(gpt.shape_at(cfg, 4, vocab=100))
    opt = gpt.build_optimizer(cfg, model)
    by_kind = {g["kind"]: g for g in opt.param_groups}
    assert by_kind["matrix"]["optimizer"] == "muon" and by_kind["matrix"]["lr"] == 0.04
    assert by_kind["matrix"]["weight_decay"] == 0.2
    assert by_kind["embedding"]["lr"] == pytest.approx(1.2) and by_kind["embedding"]["weight_decay"] == 0
    assert by_kind["head"]["lr"] == pytest.approx(0.008) and by_kind["scalar"]["lr"] == pytest.approx(0.01)
    assert len(by_kind["scalar"]["params"]) == 2  # the per-block residual and x0 scales
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


def test_depth_grows_with_the_budget_and_the_data():
    cfg, machine = gpt.GPTConfig(), devices.cpu(peak=1e11, memory=8e9)  # a fixed machine, not this one's measurement

    def depth(budget: str, train_tokens: int) -> int:
        return sizing.size_for_budget(functools.partial(gpt.shape_at, cfg, vocab=1024), train_tokens,
                                      parse_budget(budget), machine, **gpt.sizing_rules(cfg), log=print)

    assert depth("10s", 10**9) <= depth("5m", 10**9) < depth("1h", 10**9) < depth("24h", 10**9)
    assert depth("1h", 10**5) > depth("1h", 10**9)  # a small corpus caps the epochs: spend compute on size
    assert depth("100steps", 10**5) == 4


# Tinyshakespeare's training part (the first 85% of its characters) under the default BPE: 361,533 tokens
# (383,353 when training read the first 90%); the default depths read this count. Checked on the real file by
# benchmarks/data_facts.py (the tests never read the data).
SHAKESPEARE_TRAIN_TOKENS = 361_533


@pytest.mark.parametrize("train_tokens", [SHAKESPEARE_TRAIN_TOKENS, 383_353])
@pytest.mark.parametrize("peak, depths", [(170e9, [2, 3, 4]), (220e9, [2, 3, 4]), (280e9, [2, 4, 5])])
def test_default_depths_on_tinyshakespeare_in_fp32(train_tokens, peak, depths):
    """In fp32, 60 s, 163 s and 5 minutes buy depths 2, 3 and 4 with the training part the split leaves, as they
    did with the old one, at the CPU peaks the sweep ran on (165-301 GFLOP/s then; 156-284 now). From 280 GFLOP/s
    the 3-pass rule moves 163 s and 5 minutes up a depth (4 and 5, each ~2.7 passes), as it does in bf16 here,
    where depth 5 beat depth 4 at 5 minutes (test_devices)."""
    cfg, machine = gpt.GPTConfig(), devices.cpu(peak=peak, memory=8e9)
    assert [sizing.size_for_budget(functools.partial(gpt.shape_at, cfg, vocab=1024), train_tokens, parse_budget(b),
                                   machine, **gpt.sizing_rules(cfg), log=print)
            for b in ("60s", "163s", "5m")] == depths


def test_dropout_is_off_by_default_and_a_cpu_run_with_it_is_sized_on_its_cost(capfd, tmp_path):
    """dropout=0 by default (0.1 measured better at 5 minutes and worse at 2, on tinyshakespeare: README); set, a
    CPU run is sized on its measured cost, a GPU's (not measured) as before; out of [0, 1) is one line."""
    assert gpt.GPTConfig().dropout == 0.0
    machine = devices.cpu(peak=417e9, memory=8e9, precision="bf16")
    slowed = sizing.with_dropout(machine, 0.1)
    assert slowed.share("matmul", 256) == pytest.approx(machine.share("matmul", 256) / sizing.CPU_DROPOUT_SLOWDOWN)
    assert sizing.with_dropout(machine, 0.0) is machine
    h200 = devices.gpu("H200")
    assert sizing.with_dropout(h200, 0.1) is h200
    cfg = gpt.GPTConfig()
    shape_at = functools.partial(gpt.shape_at, cfg, vocab=1024)
    # on the CPU it was measured on (bf16, 380-460 GFLOP/s) 2 and 5 minutes keep depths 3 and 4 under its cost
    for peak in (380e9, 417e9, 460e9):
        slow = sizing.with_dropout(devices.cpu(peak=peak, memory=8e9, precision="bf16"), 0.1)
        assert [sizing.size_for_budget(shape_at, SHAKESPEARE_TRAIN_TOKENS, parse_budget(b), slow,
                                       **gpt.sizing_rules(cfg), log=print) for b in ("2m", "5m")] == [3, 4]
    bad_input(capfd, ["llm/gpt", "dropout=1"], tmp_path, "dropout")


def test_dropout_acts_in_training_only():
    shape = gpt.shape_at(gpt.GPTConfig(), 2, 64)
    torch.manual_seed(0)
    plain = models.GPT(shape)
    dropped = models.GPT(shape, dropout=0.5)
    with torch.no_grad():
        for block in (*plain.blocks, *dropped.blocks):  # non-zero branch outputs, so dropping them shows
            torch.nn.init.normal_(block.attn.proj.weight, std=0.02)
            torch.nn.init.normal_(block.mlp.proj.weight, std=0.02)
    dropped.load_state_dict(plain.state_dict())
    idx = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        assert torch.equal(plain.eval()(idx), dropped.eval()(idx))  # evaluation: the same function
        dropped.train()
        assert not torch.allclose(dropped(idx), plain(idx))
        plain.train()
        assert torch.equal(plain(idx), plain.eval()(idx))  # dropout 0: training mode changes nothing


TINYSHAKESPEARE_CHARS = 1_115_394  # ASCII, one file (its dataset card); benchmarks/data_facts.py checks the real file


def test_tinyshakespeare_sized_text_splits_85_5_10_in_reading_order(tmp_path):
    """A text of tinyshakespeare's length and file name, ASCII as it is (the tests never read the real data):
    85% / 5% / 10% of its characters in order, the ranges split.csv names, and the test part's first 100,000 bytes
    scored. The real file's ranges and its training-token count (SHAKESPEARE_TRAIN_TOKENS) are checked where the
    data is: ``ZOO_DATA=... python benchmarks/data_facts.py``."""
    line = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    text = (line * (TINYSHAKESPEARE_CHARS // len(line) + 1))[:TINYSHAKESPEARE_CHARS]
    (tmp_path / "input.txt").write_text(text)
    s = text_splits.load_text(str(tmp_path / "input.txt"), 0.05, 0.1)
    assert s.keys == {"train": ["input.txt[0:948084]"], "validation": ["input.txt[948084:1003854]"],
                      "test": ["input.txt[1003854:1115394]"]}
    assert "".join(s.train) + "".join(s.val) + "".join(s.test) == text
    assert text_splits.eval_text(s, 100_000).encode() == text[1003854:1103854].encode()


def test_text_sources_and_bad_inputs(tmp_path):
    f = tmp_path / "book.txt"
    f.write_text("abcdefghij" * 10)
    s = text_splits.load_text(str(f), 0.05, 0.1)  # in reading order: 85 / 5 / 10 characters
    assert "".join(s.train) + "".join(s.val) + "".join(s.test) == "abcdefghij" * 10
    assert [len("".join(p)) for p in (s.train, s.val, s.test)] == [85, 5, 10]
    assert s.keys == {"train": ["book.txt[0:85]"], "validation": ["book.txt[85:90]"], "test": ["book.txt[90:100]"]}
    (tmp_path / "book.val.txt").write_text("held out")  # the held-out file is test; validation the training tail
    s = text_splits.load_text(str(f), 0.1, 0.1)
    assert s.test == ["held out"] and s.val == ["abcdefghij"] and "".join(s.train) == "abcdefghij" * 9
    assert s.keys["test"] == ["book.val.txt"] and s.keys["validation"] == ["book.txt[90:100]"]
    folder = tmp_path / "docs"
    (folder / "val").mkdir(parents=True)
    (folder / "a.md").write_text("doc a")
    (folder / "b.txt").write_text("doc b")
    (folder / "val" / "c.txt").write_text("doc c")
    (folder / "notes.pdf").write_bytes(b"%PDF")
    logged = []
    s = text_splits.load_text(str(folder), 0.2, 0.1, logged.append)
    assert s.train == ["doc a", "doc"] and s.val == [" b"] and s.test == ["doc c"] and "1 files" in logged[0]
    assert s.keys == {"train": ["a.md", "b.txt[0:3]"], "validation": ["b.txt[3:5]"], "test": ["val/c.txt"]}
    (folder / "val" / "c.txt").unlink()  # no held-out part: the tail of the files in order, cut through b.txt
    s = text_splits.load_text(str(folder), 0.2, 0.3)
    assert s.keys == {"train": ["a.md"], "validation": ["b.txt[0:2]"], "test": ["b.txt[2:5]"]}
    with pytest.raises(ZooError, match="test split has 8 bytes, fewer than eval_bytes=100"):
        text_splits.eval_text(text_splits.TextSplits("x", ["a"], ["b"], ["held out"]), 100)
    short_val = text_splits.TextSplits("x", ["a"], ["héllo"], ["held out"])  # validation is scored up to eval_bytes
    assert text_splits.eval_text(short_val, 100, "validation") == "héllo"
    assert text_splits.eval_text(short_val, 3, "validation") == "hé" and text_splits.eval_text(short_val, 4) == "held"
    for val, test, message in ((0, 0.1, "val_fraction=0: must be between 0 and 1"),
                               (0.1, 1.5, "test_fraction=1.5: must be between"), (0.5, 0.5, "leave some data")):
        with pytest.raises(ZooError, match=message):
            text_splits.load_text(str(f), val, test)
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "bin.txt").write_bytes(b"abc\0def")
    (tmp_path / "latin1.txt").write_bytes("caf".encode() + b"\xe9 au lait")
    (tmp_path / "nothing").mkdir()
    for name, message in (("empty.txt", "empty file"), ("bin.txt", "NUL byte at offset 3"),
                          ("latin1.txt", "not UTF-8 text \\(byte 0xe9 at offset 3\\)"),
                          ("nothing", "no .txt or .md files"), ("missing.txt", "no such file")):
        with pytest.raises(ZooError, match=message):
            text_splits.load_text(str(tmp_path / name), 0.05, 0.1)
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ZooError, match="needs the Hugging Face datasets package: pip install 'recipe-zoo\\[hf\\]'"):
            text_splits.load_text("hf:wikitext:wikitext-2-raw-v1", 0.05, 0.1)


GPT_RUN = ["depth=1", "aspect=32", "head_dim=16", "seq_len=32", "micro_batch=4", "batch_tokens=256",
           "eval_bytes=1500", "vocab_size=300", "compile=false"]


def rows_without_timing(run_dir, name="metrics.csv") -> list[dict]:
    with open(run_dir / name) as f:
        return [{k: v for k, v in r.items() if k != "train_seconds"} for r in csv.DictReader(f)]


def split_csv(run_dir) -> list[tuple[str, str]]:
    with open(run_dir / "split.csv") as f:
        return [(r["item"], r["split"]) for r in csv.DictReader(f)]


def test_zoo_run_gpt_end_to_end_and_the_test_is_read_only_at_the_end(tmp_path):
    """Train on the first 85% of the characters, validate on the next 5%, score the last 10% once at the end.
    A twin run whose test tail is garbage (same length) has the same validation rows and another test_bpb."""
    data = tmp_path / "corpus.txt"
    text = TEXT * 3
    data.write_text(text)
    r = zoo_in_process("run", "llm/gpt", "--budget", "6steps", f"data={data}", *GPT_RUN, "samples=2",
                       "sample_tokens=20", "prompt=First", "--out", tmp_path / "a")
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_block(r.stdout)
    assert s["status"] == "ok" and s["benchmark"].startswith("own:") and 1.0 < float(s["value"]) < 9.0
    assert s["metric"] == "test_bpb" and s["split"].startswith("characters in reading order: first 85% train, next "
                                                               "5% validation, last 10% test (train 15,198 / ")
    assert s["tokens_seen"].startswith("1,536 (") and "(Chinchilla: 20)" in s["tokens_per_param"]
    assert float(s["tokens_per_s"].replace(",", "")) > 0
    check_items(Path(s["run_dir"]))  # each test window's nats and bytes give the test_bpb
    run_dir = next((tmp_path / "a" / "llm" / "gpt").iterdir())
    assert (run_dir / "tokenizer.json").is_file() and (run_dir / "model.safetensors").is_file()
    samples = (run_dir / "samples.txt").read_text()
    assert samples.startswith("First") and samples.count("----------") == 1
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["tokens"] == 6 * 256 and metrics["depth"] == 1 and metrics["vocab_size"] == 300
    assert metrics["tokens_per_param"] > 0 and metrics["tokens_per_s"] > 0
    assert metrics["test_bpb"] == pytest.approx(float(s["value"]), abs=1e-4)
    assert metrics["test_bpb_ci_low"] < metrics["test_bpb"] < metrics["test_bpb_ci_high"]
    assert metrics["val_bpb"] == pytest.approx(float(rows_without_timing(run_dir)[-1]["val_bpb"]))
    # split.csv: every character once, in order: train, then validation, then test
    n, test_at = len(text), int(len(text) * 0.9)
    val_at = test_at - round(n * 0.05)
    assert split_csv(run_dir) == [(f"corpus.txt[0:{val_at}]", "train"), (f"corpus.txt[{val_at}:{test_at}]",
                                  "validation"), (f"corpus.txt[{test_at}:{n}]", "test")]

    garbage = random.Random(0).choices("xyz qv\n", k=n - test_at)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "corpus.txt").write_text(text[:test_at] + "".join(garbage))
    g = zoo_in_process("run", "llm/gpt", "--budget", "6steps", f"data={tmp_path / 'g' / 'corpus.txt'}", *GPT_RUN,
                       "samples=2", "sample_tokens=20", "prompt=First", "--out", tmp_path / "g")
    assert g.returncode == 0, g.stderr + g.stdout
    g_dir = next((tmp_path / "g" / "llm" / "gpt").iterdir())
    # every validation row, bit for bit: two runs of the same kind on this machine, the same ops in the same order
    # on the same tokens (only the test part is garbage)
    assert rows_without_timing(g_dir) == rows_without_timing(run_dir)
    assert rows_without_timing(g_dir, "train.csv") == rows_without_timing(run_dir, "train.csv")
    assert (g_dir / "samples.txt").read_text() == samples
    g_metrics = json.loads((g_dir / "summary.json").read_text())["metrics"]
    assert g_metrics["val_bpb"] == metrics["val_bpb"] and g_metrics["test_bpb"] > metrics["test_bpb"] + 0.5


def test_gpt_split_is_the_same_for_every_seed(tmp_path):
    """The split is a function of the text alone: two seeds record the same split and score the same bytes."""
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT * 3)
    cfg = dict(data=str(data), depth=1, aspect=32, head_dim=16, seq_len=32, micro_batch=4, batch_tokens=128,
               eval_bytes=1500, vocab_size=300, compile=False, samples=0)
    runs = []
    for seed in (0, 1):
        run = SimpleRun(Budget("steps", 2), seed=seed, dir=tmp_path / str(seed), spec=registry.get("llm/gpt"),
                        log=lambda line: None)
        run.dir.mkdir()
        seed_everything(seed)
        with torch_state_kept():  # as `zoo run` leaves the caller's torch switches
            out = gpt.train_gpt(gpt.GPTConfig(**cfg), run)
        runs.append((run, out))
    (a, out_a), (b, out_b) = runs
    assert a.splits == b.splits and set(a.splits) == {"train", "validation", "test"}
    assert a.extra["split"] == b.extra["split"]
    assert out_a["test_bpb"] != out_b["test_bpb"]  # the seeds did train different models


def test_key_fields_name_the_split_and_the_scored_bytes():
    from recipe_zoo.recipes.llm import lora
    from recipe_zoo.runs import key_suffix

    for config in (gpt.GPTConfig, lora.LoRAConfig):
        assert config.KEY_FIELDS[:3] == ("val_fraction", "test_fraction", "eval_bytes")
        assert config.KEY_FIELDS[3:] == (("text_field",) if config is gpt.GPTConfig else ())
        assert key_suffix(config()) == "" and key_suffix(config(lr=0.5) if config is lora.LoRAConfig else
                                                         config(tokenizer="bytes", depth=3)) == ""
        assert key_suffix(config(test_fraction=0.2, eval_bytes=5000)) == ":test_fraction=0.2:eval_bytes=5000"


@pytest.mark.parametrize("args,message", [
    (["eval_bytes=10000000"], "test split has 596 bytes, fewer than eval_bytes=10,000,000"),
    (["val_fraction=0.5", "test_fraction=0.5"], "val_fraction=0.5 + test_fraction=0.5: leave some data to train on"),
    (["kv_heads=3"], "kv_heads=3: must divide"),
    (["vocab_size=99"], "vocab_size='99' must be >= 257"),
])
def test_zoo_run_gpt_bad_config_is_one_line_exit_2(tmp_path, args, message):
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT)
    r = zoo_in_process("run", "llm/gpt", "--budget", "1steps", f"data={data}", "depth=2", "eval_bytes=500", *args)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_zoo_run_gpt_non_utf8_names_file_and_offset(tmp_path):
    data = tmp_path / "bad.txt"
    data.write_bytes(TEXT.encode() + b"\xff\xfe")
    r = zoo_in_process("run", "llm/gpt", "--budget", "1steps", f"data={data}")
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
    r = zoo_in_process("run", "llm/lora", "--budget", "12steps", f"model={tiny_llama}", f"data={data}", "seq_len=32",
                       "micro_batch=4", "eval_bytes=1000", "lr=0.01", "merge=true")
    assert r.returncode == 0, r.stderr + r.stdout
    run_dir = next((tmp_path / "runs" / "llm" / "lora").iterdir())
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert metrics["val_bpb"] < metrics["val_bpb_before"]  # a random model learns the repeated text
    assert metrics["test_bpb"] < metrics["test_bpb_before"]  # scored once at the end, with and without the adapter
    assert metrics["test_bpb_ci_low"] < metrics["test_bpb"] < metrics["test_bpb_ci_high"]
    block = summary_block(r.stdout)
    assert block["metric"] == "test_bpb" and float(block["value"]) == pytest.approx(metrics["test_bpb"], abs=1e-4)
    assert float(block["val_bpb_before"]) == pytest.approx(metrics["val_bpb_before"], abs=1e-4)
    assert [part for _, part in split_csv(run_dir)] == ["train", "validation", "test"]
    check_items(run_dir)
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
    examples = prompt_response.load_jsonl(path, tokenizer)
    assert len(examples) == 21 and [e.line for e in examples] == list(range(1, 22))
    e = examples[0]
    n_prompt = len(tokenizer("Q0: speak?").input_ids)
    assert e.labels[:n_prompt] == [-100] * n_prompt and e.labels[n_prompt:] == e.ids[n_prompt:]
    ids, labels, mask = prompt_response.pad_examples(examples[:3], pad_id=0)
    assert ids.shape == labels.shape == mask.shape and int(mask.sum()) == sum(len(x.ids) for x in examples[:3])
    r = zoo_in_process("run", "llm/lora", "--budget", "3steps", f"model={tiny_llama}", f"data={path}", "seq_len=32",
                       "micro_batch=4", "val_fraction=0.2")
    assert r.returncode == 0, r.stderr + r.stdout
    block = summary_block(r.stdout)
    assert math.isfinite(float(block["value"])) and block["split"].startswith("examples by a hash of their content")
    assert block["benchmark"].endswith(":val_fraction=0.2")
    check_items(Path(block["run_dir"]))  # examples, resampled one by one


def test_lora_bytes_per_token_partition_the_text(tiny_llama):
    """A transformers tokenizer has no byte table: each token gets the bytes of the characters up to its end
    offset, so every window's bytes are known and they add up to the text's."""
    from transformers import AutoTokenizer

    from recipe_zoo.recipes.llm import causal_lm

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    text = "First Citizen:\nBefore we — naïve 😀 proceed.\n\n  end "
    ids = tokenizer(text, add_special_tokens=False).input_ids
    per = causal_lm.bytes_per_token(tokenizer, text, ids)
    assert len(per) == len(ids) and per.sum() == len(text.encode()) and (per >= 0).all()
    ascii_ids = tokenizer("First Citizen", add_special_tokens=False).input_ids
    assert causal_lm.bytes_per_token(tokenizer, "First Citizen", ascii_ids).tolist() == \
        [len(tokenizer.decode([i])) for i in ascii_ids]


def test_jsonl_split_by_content_hash(tiny_llama, tmp_path):
    """Validation and test are chosen by each example's content: disjoint, every line once, the same whatever
    the order of the lines; copies of an example share a side; a held-out example too long for seq_len is kept
    whole (scored in windows), a training one is dropped."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    items = [{"prompt": f"Q{i}: speak?", "response": f" Speak {i}."} for i in range(60)]
    items += [items[3], items[7], items[7]]  # copies
    items += [{"prompt": "long " * 40 + str(i), "response": " y"} for i in range(8)]
    logged = []

    def parts_of(order):
        path = tmp_path / "pairs.jsonl"
        path.write_text("".join(json.dumps(items[i]) + "\n" for i in order))
        p = prompt_response.split_examples(prompt_response.load_jsonl(path, tokenizer), 0.15, 0.2, 32, "pairs.jsonl",
                                           logged.append)
        line = {f"line {n + 1}": i for n, i in enumerate(order)}  # split.csv's lines back to the items
        return p, {part: sorted(line[k] for k in keys) for part, keys in p.keys.items()}

    p, by_item = parts_of(list(range(len(items))))
    assert sorted(sum(by_item.values(), [])) == list(range(len(items)))  # every line once
    key = {i: json.dumps([items[i]["prompt"], items[i]["response"]]) for i in range(len(items))}
    sides = {part: {key[i] for i in chosen} for part, chosen in by_item.items()}
    assert not sides["train"] & sides["validation"] and not sides["train"] & sides["test"]
    assert not sides["validation"] & sides["test"]
    assert 0 < len(sides["validation"]) < len(sides["test"]) < len(sides["train"])  # 15% / 20% / the rest
    assert len({part for part, chosen in by_item.items() if 7 in chosen or 61 in chosen or 62 in chosen}) == 1
    shuffled = list(range(len(items)))
    random.Random(1).shuffle(shuffled)
    assert parts_of(shuffled)[1] == by_item
    assert all(len(e.ids) <= 33 for e in p.train)
    long_held = [e for e in p.val + p.test if len(e.ids) > 33]
    long_train = [i for i in by_item["train"] if i >= 63]
    assert long_held and all(len(e.ids) > 40 for e in long_held)
    assert f"{len(long_train)} of {len(by_item['train'])} training examples are longer" in logged[0]
    assert sum(len(x) for x in (p.train, p.val, p.test)) == len(items) - len(long_train)


def test_a_held_out_response_longer_than_the_context_is_scored_whole(tiny_llama):
    """A held-out example is scored in windows of at most seq_len + 1 tokens that cover its response's tokens
    once each, every one with context before it: a response longer than seq_len is scored in full (it used to be
    left out), a long prompt is cropped from the left; where the example fits, the windows score it exactly as
    the whole example does."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe_zoo.recipes.llm import causal_lm, prompt_response

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()

    def example(prompt, response):
        p = tokenizer(prompt).input_ids
        r = tokenizer(response, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        return prompt_response.Example(p + r, [-100] * len(p) + r, len(response.encode()))

    long_response = example("Q: say it all", " to be or not to be" * 12)
    long_prompt = example("why " * 40, " because.")
    short = example("Q: brief?", " Yes.")
    n_response = sum(t != -100 for t in long_response.labels)
    assert n_response > 40
    for e in (long_response, long_prompt, short):
        scored = [t for w in prompt_response.score_windows(e, 16) for t in w.labels if t != -100]
        assert scored == [t for t in e.labels if t != -100]  # each response token once, in order
        for w in prompt_response.score_windows(e, 16):
            assert len(w.ids) <= 17 and w.labels[0] == -100  # every scored token has a token before it
    assert len(prompt_response.score_windows(long_response, 16)) == -(-n_response // 8)
    with torch.no_grad():
        nats, n_bytes = causal_lm.example_sums(model, [long_response, short], 16, 0, tokenizer.eos_token_id, "cpu", 3)
        whole, _ = causal_lm.example_sums(model, [long_response, short], 512, 0, tokenizer.eos_token_id, "cpu", 3)
    assert n_bytes.tolist() == [long_response.response_bytes, short.response_bytes]
    assert 0 < nats[0] and abs(nats[1] - whole[1]) < 1e-4 * whole[1]  # the short one: the same single window
    assert abs(nats[0] - whole[0]) < 0.5 * whole[0]  # the long one: the same tokens, less context each


def test_lora_jsonl_test_is_read_only_at_the_end(tiny_llama, tmp_path, monkeypatch):
    """Garbage test responses change test_bpb and nothing before it: the validation rows are the same."""
    from recipe_zoo.recipes.llm import lora

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Q{i}: speak?", "response": " Speak, speak."}) + "\n"
                            for i in range(40)))
    cfg = lora.LoRAConfig(model=str(tiny_llama), data=str(path), seq_len=32, micro_batch=4, lr=0.01)
    split = prompt_response.split_examples

    def garbled(*args, **kw):
        parts = split(*args, **kw)
        for e in parts.test:
            e.ids[-4:-1] = e.labels[-4:-1] = [7, 9, 11]  # the response's tokens, the eos kept
        return parts

    results = []
    for garble in (False, True):
        if garble:
            monkeypatch.setattr(prompt_response, "split_examples", garbled)
        run = SimpleRun(Budget("steps", 4), dir=tmp_path / str(garble), spec=registry.get("llm/lora"),
                        log=lambda line: None)
        run.dir.mkdir()
        seed_everything(0)
        with torch_state_kept():
            results.append((lora.train_lora(cfg, run), run))
    (clean, a), (dirty, b) = results
    assert [{k: v for k, v in r.items() if k != "train_seconds"} for r in a.eval_rows] == \
        [{k: v for k, v in r.items() if k != "train_seconds"} for r in b.eval_rows] and a.splits == b.splits
    # one process, the same ops in the same order on the same validation tokens: bit for bit
    assert clean["val_bpb"] == dirty["val_bpb"] and clean["val_bpb_before"] == dirty["val_bpb_before"]
    assert dirty["test_bpb"] != clean["test_bpb"] and dirty["test_bpb_before"] != clean["test_bpb_before"]
    assert clean["test_bpb_ci_low"] <= clean["test_bpb"] <= clean["test_bpb_ci_high"]
    assert len(a.splits["test"]) >= 1 and sorted(sum(a.splits.values(), []), key=lambda k: int(k.split()[1])) == \
        [f"line {n}" for n in range(1, 41)]


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
    """The scored validation tokens are checked against the training tokens: a validation tail that repeats
    the training lines is flagged, one of its own text is not; the training checks pass on a tiny model."""
    data = tmp_path / "corpus.txt"
    data.write_text("To be, or not to be, that is the question.\n" * 200)
    tiny = [f"data={data}", "seq_len=32", "micro_batch=4", "eval_bytes=800", "depth=1", "aspect=32", "head_dim=16",
            "batch_tokens=128", "vocab_size=300", "samples=0", "compile=false", "--steps", "12"]
    code, found = doctor("llm/gpt", tiny, tmp_path / "leaky")
    assert code == 0 and found["data/leakage"][0]["severity"] == "warn", capsys.readouterr().out[-3000:]
    leak = re.match(r"(\d+) of (\d+) validation windows of 64 tokens", found["data/leakage"][0]["message"])
    assert leak and leak[1] == leak[2] and int(leak[1]) >= 1
    # validation is the training text's tail (the held-out file is test): 5% of 9,263 characters, here exactly
    # 463 characters of a text of its own
    words = random.Random(0).choices(["thou", "art", "more", "lovely", "and", "temperate", "rough", "winds"], k=400)
    data.write_text("To be, or not to be, that is the question.\n" * 200 + " ".join(words)[:462] + "\n")
    (tmp_path / "corpus.val.txt").write_text(TEXT[:1000])
    code, found = doctor("llm/gpt", tiny, tmp_path / "clean")
    loud = [f for fs in found.values() for f in fs if f["severity"] in ("warn", "error")]
    assert code == 0 and not loud, loud
    assert found["data/leakage"][0]["message"].startswith("0 of ")
    for check in ("overfit/one-batch", "overfit/transfer", "lr/range", "health/schedule", "health/loss"):
        assert check in found, check


def test_doctor_lora_jsonl_rows_and_adapter_tensors(tiny_llama, tmp_path, capsys):
    """JSONL examples are rows, split by their content: a copy of an example lands on its side, so no validation
    row is an exact copy of a training row; the LoRA tensors are the new ones, so moving them is not
    'pretrained weights moved'."""
    path = tmp_path / "pairs.jsonl"
    lines = [json.dumps({"prompt": f"Q{i}: speak?", "response": " Speak, speak."}) for i in range(19)]
    path.write_text("\n".join(lines + lines[:6]) + "\n")  # six examples twice
    _, found = doctor("llm/lora", [f"model={tiny_llama}", f"data={path}", "seq_len=32", "micro_batch=4",
                                   "val_fraction=0.2", "lr=0.01", "--steps", "10"], tmp_path)
    (leak,) = found["data/leakage"]
    assert leak["severity"] == "ok" and leak["message"].startswith("no validation row is an exact copy")
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
    if case == "bad_fractions":
        return [f"data={corpus}", "val_fraction=0.7", "test_fraction=0.3"], ["leave some data to train on"], "3steps"
    if case == "too_little_test":
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
        pairs.write_text("".join(json.dumps({"prompt": "x " * 80 + str(i), "response": "y"}) + "\n" for i in range(9)))
        return good, [str(pairs), "no usable training examples", "longer than seq_len=32"], "3steps"
    if case == "one_example":
        pairs.write_text(PAIR + "\n")
        return good, [str(pairs), "1 distinct examples: too few to hold out validation and test"], "3steps"
    if case == "copies_of_one_example":  # copies share a side of the split: still one example
        return good, [str(pairs), "1 distinct examples: too few"], "3steps"
    if case == "bad_fractions":
        return [*good, "test_fraction=0"], ["test_fraction='0' must be in (0, 1)"], "3steps"
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
             "folder_with_only_val", "non_utf8_file_in_folder", "non_utf8_val_file", "too_little_test",
             "bad_fractions",
             "too_little_training", "missing_tokenizer", "corrupt_tokenizer", "typo_key", "typo_key_near", "bad_int",
             "bad_float", "bad_choice", "zero_budget", "negative_budget"]
LORA_CASES = ["missing_jsonl", "empty_jsonl", "non_utf8_jsonl", "invalid_json_line", "not_an_object",
              "wrong_field_name", "wrong_field_type", "all_too_long", "one_example", "copies_of_one_example",
              "bad_fractions", "non_utf8_text",
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


def test_gpt_fine_tunes_from_a_run_with_its_tokenizer_and_shape(tmp_path, capfd):
    """weights=RUN: the source's tokenizer and shape are kept (never refitted on the new text, never sized again);
    before the first step, on the source's own data, the source's weights give its validation bits per byte to
    1e-6; the card names the source (folder, sha256 of card and weights); the benchmark key says fine-tuned, so it
    is never ranked as from scratch. A contradicting shape, another recipe's run, a missing folder: one line."""
    import hashlib

    from conftest import train_in_process

    data, other = tmp_path / "corpus.txt", tmp_path / "other.txt"
    data.write_text(TEXT * 3)
    other.write_text(TEXT.upper() * 3)
    tiny = [*GPT_RUN, "precision=fp32", "samples=0"]
    source = train_in_process(tmp_path / "pre", "llm/gpt", f"data={data}", *tiny, budget="6steps")
    before = json.loads((source / "summary.json").read_text())["metrics"]
    tuned = train_in_process(tmp_path / "same", "llm/gpt", f"data={data}", f"weights={source}",
                             "micro_batch=4", "batch_tokens=256", "eval_bytes=1500", "compile=false",
                             "precision=fp32", "samples=0", budget="2steps")
    after = json.loads((tuned / "summary.json").read_text())
    assert after["metrics"]["val_bpb_start"] == pytest.approx(before["val_bpb"], abs=1e-6)
    assert after["metrics"]["depth"] == 1 and after["benchmark"].endswith(":fine-tuned")
    card = json.loads((tuned / "model.json").read_text())
    assert card["shape"] == json.loads((source / "model.json").read_text())["shape"]
    digest = hashlib.sha256((source / "model.json").read_bytes() + (source / "model.safetensors").read_bytes())
    assert card["source"] == {"folder": str(source), "run_id": source.name, "recipe": "llm/gpt",
                              "sha256": digest.hexdigest()}
    moved = train_in_process(tmp_path / "other", "llm/gpt", f"data={other}", f"weights={source}", "micro_batch=4",
                             "batch_tokens=256", "eval_bytes=1500", "compile=false", "samples=0", budget="2steps")
    assert (moved / "tokenizer.json").read_text() == (source / "tokenizer.json").read_text()  # not refitted
    # zoo doctor on a fine-tune checks how far the pretrained weights move (every tensor is pretrained here)
    _, found = doctor("llm/gpt", [f"data={other}", f"weights={source}", "micro_batch=4", "batch_tokens=256",
                                  "eval_bytes=1500", "compile=false", "samples=0", "--steps", "10"], tmp_path / "doc")
    assert found["health/weight-change"][0]["severity"] in ("ok", "warn")
    bad_input(capfd, ["llm/gpt", f"data={data}", f"weights={source}", "depth=2"], tmp_path / "bad",
              "depth=2: the source run", "was trained with depth=1", "keeps its tokenizer and shape")
    bad_input(capfd, ["llm/gpt", f"data={data}", f"weights={tmp_path / 'nowhere'}"], tmp_path / "bad",
              "nowhere: no such run folder")
    vision = train_in_process(tmp_path / "vis", "vision/resnet", "data=digits", "width=8", budget="2steps")
    bad_input(capfd, ["llm/gpt", f"data={data}", f"weights={vision}"], tmp_path / "bad",
              "a vision/resnet run; this recipe fine-tunes from llm/gpt runs")
