"""llm/gpt from token shards (``zoo data prepare llm/gpt``, ``stream=true``): the same split, tokenizer and tokens as
in memory, so the same training bit for bit; exact resume; each process reading its own windows; bounded memory."""
import gzip
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, bad_input, roundtrip, summary_block, without_timing, zoo, zoo_in_process
from recipe_zoo.core import datasets, prepared
from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.streams import NpyArray, NpyWriter
from recipe_zoo.recipes.llm import gpt, shards, text_splits, textfiles, token_windows, tokenization

WORDS = ["the", "king", "Romeo", "thou", "art", "'tis", "I'll", "don't", "o'er", "naïve", "café", "Ἀθῆναι", "東京",
         "2024", "1st", "hath", "we've", "they're", "--", "...", "?!", "«quoi»", "ñandú", "x²"]


def shakespeare_like(lines: int, seed: int = 0) -> str:
    """Speakers, verse, contractions, digits, non-ASCII letters, indents, blank and whitespace-only lines, CRLF."""
    r = random.Random(seed)
    out = []
    for _ in range(lines):
        k = r.random()
        if k < 0.1:
            out.append(r.choice(["ROMEO", "First Citizen", "ALL", "Ñoño"]) + ":\n")
        elif k < 0.15:
            out.append(r.choice(["\n", " \n", "\n\n", "\t\n", "  \n  \n", "\r\n"]))
        else:
            lead = r.choice(["", "", "", "  ", "\t", "'", "-- ", "1. ", "«"])
            words = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 12)))
            out.append(lead + words + r.choice([".", ",", ";", "!", "?", "", " ", "  ", ":", "'"])
                       + r.choice(["\n", "\n", "\r\n", "\n\n"]))
    return "".join(out)


def pre_tokens(tok, texts) -> list[str]:
    return [piece for text in texts for piece, _ in tok.pre_tokenizer.pre_tokenize_str(text)]


def test_chunks_cut_where_no_pretoken_spans_so_bpe_and_tokens_match_the_whole_text(monkeypatch):
    """Cut after a newline that a non-space follows (or, in a long line, between two words): the GPT-4 split of the
    chunks is the split of the whole text, so a BPE trained on chunks and the chunks encoded are the whole text's."""
    text = shakespeare_like(3000)
    whole = tokenization.train_bpe([text], 400)
    for size in (40, 700):
        chunks = list(shards.clean_chunks((text[i:i + 997] for i in range(0, len(text), 997)), size=size))
        assert "".join(chunks) == text and len(chunks) > len(text) // (size * 4)
        assert pre_tokens(whole, chunks) == pre_tokens(whole, [text])
        trained = tokenization.train_bpe(iter(chunks), 400)
        assert trained.to_str() == whole.to_str()
        assert [i for e in trained.encode_batch_fast(chunks, add_special_tokens=False) for i in e.ids] == \
            whole.encode(text, add_special_tokens=False).ids
    monkeypatch.setattr(shards, "LONG_CHARS", 300)  # one long line: cut between two words
    flat = text.replace("\n", " ").replace("\r", " ")
    chunks = list(shards.clean_chunks([flat], size=50))
    assert "".join(chunks) == flat and len(chunks) > 100
    assert pre_tokens(whole, chunks) == pre_tokens(whole, [flat])
    logged = []  # no line break and no space: cut anyway, and say so
    assert list(shards.clean_chunks(["x" * 1000], size=50, log=logged.append)) == ["x" * 1000]
    assert "without a line break" in logged[0]


def write_sources(root, kind: str) -> str:
    text = shakespeare_like(400, seed=1)
    if kind == "file":
        (root / "corpus.txt").write_text(text, newline="")
        return str(root / "corpus.txt")
    if kind == "held_file":  # NAME.val.txt beside it is the test; validation the training text's tail
        (root / "corpus.txt").write_text(text, newline="")
        (root / "corpus.val.txt").write_text(shakespeare_like(120, seed=2), newline="")
        return str(root / "corpus.txt")
    if kind in ("jsonl", "jsonl.gz", "parquet"):  # records: documents kept whole by the split
        docs = [shakespeare_like(20 + 7 * (i % 5), seed=20 + i) for i in range(30)]
        path = root / f"docs.{kind}"
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"id": list(range(30)), "body": docs}), path)
        else:
            lines = "".join(json.dumps({"id": i, "body": d}) + "\n" for i, d in enumerate(docs))
            path.write_bytes(gzip.compress(lines.encode()) if kind.endswith(".gz") else lines.encode())
        return str(path)
    folder = root / "docs"
    (folder / "b").mkdir(parents=True)
    for i, name in enumerate(["a.txt", "b/c.md", "d.txt", "e.txt"]):  # the cuts fall inside and between documents
        (folder / name).write_text(shakespeare_like(100 + 150 * (i % 2), seed=10 + i), newline="")
    (folder / "notes.csv").write_text("skipped\n")
    if kind == "held_folder":
        (folder / "val").mkdir()
        (folder / "val" / "x.txt").write_text(shakespeare_like(120, seed=3), newline="")
    return str(folder)


@pytest.mark.parametrize("kind", ["file", "held_file", "folder", "held_folder", "jsonl", "jsonl.gz", "parquet"])
@pytest.mark.parametrize("tokenizer", ["bpe", "bytes"])
def test_prepared_shards_hold_the_in_memory_split_tokenizer_and_tokens(tmp_path, monkeypatch, kind, tokenizer):
    """Read in blocks of a few bytes (multi-byte characters straddle them) and encoded in small chunks, the shards
    hold what memory holds: the same split (items, sizes, line), tokenizer, tokens (<|bos|> once per document)
    and scored text; and memory's chunks give the tokenizer and tokens of whole documents."""
    monkeypatch.setattr(textfiles, "BLOCK_BYTES", 1000)
    monkeypatch.setattr(shards, "CHUNK_CHARS", 200)
    monkeypatch.setattr(shards, "BATCH_CHARS", 1500)
    source = write_sources(tmp_path, kind)
    field = "body" if kind in ("jsonl", "jsonl.gz", "parquet") else "text"
    cfg = gpt.GPTConfig(data=source, tokenizer=tokenizer, vocab_size=400, eval_bytes=2000, val_fraction=0.1,
                        test_fraction=0.15, text_field=field)
    run = SimpleRun(Budget("steps", 1), log=lambda message: None)
    memory = shards.text_data(cfg, run)
    splits = text_splits.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run.log, field)  # whole documents
    if field == "body":  # records: every one whole on one side of the split
        assert "each whole" in memory.how and not any("[" in k for keys in memory.keys.values() for k in keys)
        assert all(memory.keys[part] for part in ("train", "validation", "test"))
    whole = tokenization.load_tokenizer(cfg.tokenizer, cfg.vocab_size, splits.train)
    assert memory.tok.to_str() == whole.to_str()
    assert torch.equal(memory.train, tokenization.encode_docs(whole, splits.train))
    cfg.stream = True
    streamed = shards.text_data(cfg, run)
    assert isinstance(streamed.train, NpyArray) and streamed.train.dtype == np.uint16
    assert torch.equal(streamed.train[0:len(streamed.train)], memory.train)
    assert (streamed.name, streamed.how, streamed.sizes, streamed.keys) == (memory.name, memory.how, memory.sizes,
                                                                           memory.keys)
    assert (streamed.val_text, streamed.test_text) == (memory.val_text, memory.test_text)
    assert (streamed.train_chars, streamed.train_bytes) == (memory.train_chars, memory.train_bytes)
    assert streamed.tok.to_str() == memory.tok.to_str()
    assert shards.test_text(cfg, run) == memory.test_text  # zoo predict of a stream=true run, from the source
    folder = shards.prepared_folder(cfg, run)
    manifest = prepared.read(folder, "tokens")
    assert manifest["settings"] == {"tokenizer": tokenizer, **({"vocab_size": 400} if tokenizer == "bpe" else {}),
                                    "val_fraction": 0.1, "test_fraction": 0.15, "text_field": field}
    assert manifest["tokens"]["train"] == len(memory.train)
    assert manifest["benchmark"] == datasets.own_data_key(Path(source))  # a source's benchmark: its content


def test_a_tokenizer_file_past_65536_tokens_gives_uint32_shards(tmp_path):
    from tokenizers import Tokenizer, models

    trained = tokenization.train_bpe([shakespeare_like(300)], 400)
    vocab = {**trained.get_vocab(), **{f"filler{i}": 400 + i for i in range(70_000)}}
    big = Tokenizer(models.BPE(vocab, []))  # the trained merges are dropped: encoding spells bytes
    big.pre_tokenizer, big.decoder = trained.pre_tokenizer, trained.decoder
    big.add_special_tokens([tokenization.BOS])
    big.save(str(tmp_path / "big.json"))
    (tmp_path / "c.txt").write_text(shakespeare_like(200))
    cfg = gpt.GPTConfig(data=str(tmp_path / "c.txt"), tokenizer=str(tmp_path / "big.json"), eval_bytes=500)
    run = SimpleRun(Budget("steps", 1), log=lambda message: None)
    memory = shards.text_data(cfg, run)
    splits = text_splits.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run.log)  # whole documents, one each
    whole = tokenization.load_tokenizer(cfg.tokenizer, cfg.vocab_size, splits.train)
    assert memory.tok.to_str() == whole.to_str()
    assert torch.equal(memory.train, tokenization.encode_docs(whole, splits.train))
    cfg.stream = True
    streamed = shards.text_data(cfg, run)
    assert streamed.train.dtype == np.uint32 and streamed.train[0:2].dtype == torch.int64
    assert torch.equal(streamed.train[0:len(streamed.train)], memory.train.long())


@pytest.mark.parametrize("content", [b"", b" \n\t\n", b"abc\n" * 300 + b"\0" + b"x\xff",
                                     b"ab\n" * 400 + "é".encode() * 300 + b"\xc3(\n\x00", b"ok\n" * 500 + b"\xe2\x82",
                                     "é".encode() * 499 + b"\xe9 done"])
def test_text_read_in_blocks_fails_as_read_whole(tmp_path, content):
    """Every bad file gets the one line read_text gives, whichever block the fault is in."""
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(ZooError) as whole:
        textfiles.read_text(path)
    with pytest.raises(ZooError) as blocks:
        textfiles.count_chars(path, block_bytes=64)
    assert str(blocks.value) == str(whole.value)
    good = "héllo\n" * 100
    path.write_text(good)
    assert textfiles.count_chars(path, block_bytes=7) == len(good)
    assert "".join(textfiles.text_blocks(path, block_bytes=7)) == good


def test_prepare_says_where_it_writes_shows_progress_and_reuses_an_up_to_date_folder(tmp_path, monkeypatch, capfd):
    from recipe_zoo.cli import main

    from recipe_zoo.core.progress import Progress

    monkeypatch.setattr(shards, "Progress", lambda *a, **kw: Progress(*a, **{**kw, "every": 0}))
    source = tmp_path / "c.txt"
    source.write_text(shakespeare_like(300))
    args = ["data", "prepare", "llm/gpt", f"data={source}", "vocab_size=300"]
    assert main(args) == 0
    out, err = capfd.readouterr()
    folder = out.splitlines()[0]
    assert folder.startswith(str(tmp_path / "cache" / "zoo" / "prepared" / "tokens-c.txt-"))
    assert f"train on it: zoo run llm/gpt data={folder}" in out
    assert f"into {folder}" in err and "tokenizing: " in err and "training the tokenizer: " in err
    assert sorted(os.listdir(folder)) == sorted([*shards.FILES, "prepared.json"])
    assert main(args) == 0
    assert "prepared data up to date" in capfd.readouterr().err
    source.write_text(shakespeare_like(301))  # an edited source is prepared again, into another folder
    assert main(args) == 0
    assert capfd.readouterr().out.splitlines()[0] != folder


GPT_RUN = ["depth=1", "aspect=32", "head_dim=16", "seq_len=32", "micro_batch=4", "batch_tokens=256",
           "eval_bytes=1500", "vocab_size=300", "compile=false", "samples=1", "sample_tokens=16", "eval_every=0.25",
           "log_every=0"]


def one_run(out) -> str:
    (run_dir,) = (out / "llm" / "gpt").iterdir()
    return run_dir


def assert_same_training(ref_dir, run_dir) -> None:
    from safetensors.torch import load_file

    for name in ("metrics.csv", "train.csv", "split.csv", "samples.txt", "predictions.csv"):
        if name.endswith(".csv"):
            import csv

            assert without_timing(list(csv.DictReader(open(run_dir / name)))) == \
                without_timing(list(csv.DictReader(open(ref_dir / name)))), name
        else:
            assert (run_dir / name).read_text() == (ref_dir / name).read_text()
    a, b = load_file(ref_dir / "model.safetensors"), load_file(run_dir / "model.safetensors")
    # bit for bit: two processes of the same kind on this machine, the same ops in the same order on the same batches
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ref, got = (json.loads((d / "summary.json").read_text()) for d in (ref_dir, run_dir))
    assert (got["benchmark"], got["value"]) == (ref["benchmark"], ref["value"])
    keep = ("val_bpb", "test_bpb", "test_bpb_ci_low", "test_bpb_ci_high", "tokens", "depth", "vocab_size")
    assert {k: got["metrics"][k] for k in keep} == {k: ref["metrics"][k] for k in keep}


def test_prepared_and_streamed_runs_train_bit_for_bit_as_in_memory_and_resume_exactly(tmp_path, monkeypatch,
                                                                                      capfd):
    """data=PREPARED and stream=true train exactly as the text in memory does (weights, every evaluation, the test
    score, samples, benchmark); a streamed run stopped by SIGTERM at step 8 and resumed ends the same; each predicts
    its test split again; a run asking for another tokenizer or split than the shards were made with gets one line."""
    source = tmp_path / "corpus.txt"
    source.write_text(shakespeare_like(500, seed=5).replace("\r", ""))  # (conftest.roundtrip reads CSV rows by line)
    common = ["run", "llm/gpt", f"data={source}", *GPT_RUN, "--budget", "16steps", "--seed", "2"]
    assert zoo_in_process(*common, "--out", tmp_path / "memory").returncode == 0
    ref = one_run(tmp_path / "memory")

    folder = tmp_path / "shards"
    prepared = zoo_in_process("data", "prepare", "llm/gpt", f"data={source}", "vocab_size=300", "--out", folder)
    assert prepared.returncode == 0
    at_folder = ["run", "llm/gpt", f"data={folder}", *GPT_RUN, "--budget", "16steps", "--seed", "2"]
    assert zoo_in_process(*at_folder, "--out", tmp_path / "prepared").returncode == 0
    assert_same_training(ref, one_run(tmp_path / "prepared"))
    roundtrip(one_run(tmp_path / "prepared"))

    stop_at = 7 * 2  # micro-batches: 2 per step; the signal lands in step 8, which ends before the loop stops
    next_batch = token_windows.TokenWindows.next_batch

    def interrupted(self):
        if self.index == stop_at and isinstance(self.tokens, NpyArray):
            os.kill(os.getpid(), signal.SIGTERM)  # the loop stops after this step and checkpoints
        return next_batch(self)

    out = tmp_path / "streamed"
    with monkeypatch.context() as patched:
        patched.setattr(token_windows.TokenWindows, "next_batch", interrupted)
        assert zoo_in_process(*common, "stream=true", "--out", out).returncode == 128 + signal.SIGTERM
    assert "interrupted: SIGTERM at step 8" in (one_run(out) / "log.txt").read_text()
    assert zoo_in_process("run", "--resume", one_run(out), "--out", out).returncode == 0
    assert_same_training(ref, one_run(out))
    roundtrip(one_run(out))

    for wrong, needle in (("tokenizer=bytes", "prepared with tokenizer=bpe, and this run asks tokenizer=bytes"),
                          ("vocab_size=512", "vocab_size=300, and this run asks vocab_size=512"),
                          ("val_fraction=0.1", "val_fraction=0.05, and this run asks val_fraction=0.1")):
        bad_input(capfd, ["llm/gpt", f"data={folder}", *GPT_RUN, wrong], tmp_path / "bad", needle,
                  f"zoo data prepare llm/gpt data={source} {wrong}")


def test_bad_prepare_requests_are_one_line(tmp_path, capfd):
    from recipe_zoo.cli import main

    source = tmp_path / "c.txt"
    source.write_text(shakespeare_like(100))
    folder = tmp_path / "p"
    assert main(["data", "prepare", "llm/gpt", f"data={source}", "tokenizer=bytes", "--out", str(folder)]) == 0
    for args, needle in (([f"data={folder}"], "already prepared; train on it: zoo run llm/gpt data="),
                         (["data=hf:wikitext"], "Hugging Face datasets are not prepared"),
                         ([f"data={tmp_path / 'none.txt'}"], "none.txt: no such file or folder"),
                         ([f"data={source}", "val_fraction=0.6", "test_fraction=0.5"], "leave some data to train on")):
        capfd.readouterr()
        assert main(["data", "prepare", "llm/gpt", *args]) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err
    with pytest.raises(ZooError, match="prepared token shards"):  # llm/lora reads text, not shards
        text_splits.load_text(str(folder), 0.05, 0.1)


def test_each_process_reads_only_its_own_windows(tmp_path, monkeypatch):
    """Under N processes TokenWindows over shards reads, on each rank, the tokens of that rank's windows and no
    others: rank r's micro-batches are one process's micro-batches r, r + 2, ... (accumulation), read from disk."""
    tokens = torch.from_numpy((np.arange(20_000) * 7919 % 300).astype(np.int32))
    with NpyWriter(tmp_path / "t.npy", np.uint16) as w:
        w.append(tokens.numpy())
    reads: list[tuple[int, int]] = []
    read = NpyArray._read
    monkeypatch.setattr(NpyArray, "_read", lambda self, start, count: reads.append((start, count))
                        or read(self, start, count))
    one = token_windows.TokenWindows(tokens, 16, 4, seed=1)
    reference = [one.next_batch() for _ in range(12)]
    for rank in (0, 1):
        w = token_windows.TokenWindows(NpyArray(tmp_path / "t.npy"), 16, 4, seed=1)
        w.shard(rank, 2)
        reads.clear()
        for i in range(6):
            x, y = w.next_batch()
            assert torch.equal(x, reference[2 * i + rank][0]) and torch.equal(y, reference[2 * i + rank][1])
        starts = one._epoch_grid(0)[torch.cat([torch.arange(4) + 4 * (2 * i + rank) for i in range(6)])]
        wanted = {int(s) + k for s in starts for k in range(17)}
        got = [start + k for start, count in reads for k in range(count)]
        assert set(got) == wanted and len(got) <= 6 * 4 * 17 < len(tokens) // 40


@pytest.mark.slow
def test_two_processes_streaming_train_like_one_accumulating(tmp_path):
    """stream=true under torchrun: rank 0 prepares, both read their own windows; 2 x micro-batch 4 trains like one
    process at 8 in memory (the first step exactly; later ones within DDP's fp32 rounding)."""
    import csv

    source = tmp_path / "corpus.txt"
    source.write_text(shakespeare_like(500, seed=5))
    common = ["run", "llm/gpt", f"data={source}", *GPT_RUN, "--budget", "8steps"]
    one = zoo_in_process(*common, "micro_batch=8", "--out", tmp_path / "one")
    two = zoo(*common, "micro_batch=4", "stream=true", "--nproc", "2", "--out", tmp_path / "two")
    for proc in (one, two):
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert summary_block(two.stdout)["processes"] == "2"
    losses = [[float(r["train_loss"]) for r in csv.DictReader(open(one_run(tmp_path / out) / "train.csv"))]
              for out in ("one", "two")]
    assert losses[1][0] == pytest.approx(losses[0][0], rel=1e-6) and losses[1] == pytest.approx(losses[0], rel=1e-3)


def child_peak_rss_mb(args: list, log) -> float:
    """Peak resident memory of ``python -m recipe_zoo ARGS`` (the child alone, from wait4); it must succeed."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "recipe_zoo", *map(str, args)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, log.read_text()[-3000:]
    return usage.ru_maxrss / 1024


@pytest.mark.slow
def test_a_corpus_past_the_memory_cap_trains_streaming_within_it(tmp_path):
    """256 MB of text: in memory it would need at least the text and its int32 tokens (1 token per byte with
    tokenizer=bytes), over 1 GB, 4x the 256 MB of growth allowed. Prepared in blocks and trained from shards, the
    prepare and the run each stay within 256 MB of a tiny in-memory run's peak."""
    cap_mb, corpus_mb = 256, 256
    line = shakespeare_like(20_000, seed=7).encode()
    with open(tmp_path / "big.txt", "wb") as f:
        for _ in range(corpus_mb * 2**20 // len(line)):
            f.write(line)
    size = (tmp_path / "big.txt").stat().st_size
    in_memory_mb = (size + 4 * 0.85 * size) / 2**20  # its text, plus int32 tokens of the training 85%
    assert in_memory_mb >= 3 * cap_mb
    (tmp_path / "tiny.txt").write_bytes(line[:line.index(b"\n", 400_000) + 1])
    run = ["depth=1", "aspect=32", "head_dim=16", "seq_len=256", "micro_batch=4", "batch_tokens=1024",
           "eval_bytes=20000", "tokenizer=bytes", "samples=0", "compile=false", "--budget", "10steps"]
    baseline = child_peak_rss_mb(["run", "llm/gpt", f"data={tmp_path / 'tiny.txt'}", *run, "--out", tmp_path / "a"],
                                 tmp_path / "tiny.log")
    folder = tmp_path / "shards"
    prepare = child_peak_rss_mb(["data", "prepare", "llm/gpt", f"data={tmp_path / 'big.txt'}", "tokenizer=bytes",
                                 "--out", folder], tmp_path / "prepare.log")
    assert len(NpyArray(folder / "train.npy")) > 0.8 * size  # a token per byte of the first 85% of characters
    streamed = child_peak_rss_mb(["run", "llm/gpt", f"data={folder}", *run, "--out", tmp_path / "b"],
                                 tmp_path / "run.log")
    summary = summary_block((tmp_path / "run.log").read_text())
    assert summary["status"] == "ok" and float(summary["peak_rss_mb"]) <= streamed + 1
    print(f"peak RSS: tiny in-memory run {baseline:.0f} MB, prepare {prepare:.0f} MB, streamed run {streamed:.0f} MB")
    assert prepare - baseline < cap_mb and streamed - baseline < cap_mb, (baseline, prepare, streamed)
