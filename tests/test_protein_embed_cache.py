"""The ESM-2 embedding cache written in shards as embedding runs: a run stopped mid-way (an exception, SIGKILL)
keeps what it embedded, the rerun embeds only the rest, in the same batches, bitwise the same as in one go; an
unreadable shard is logged, removed and embedded again; progress lines while it runs. A tiny random ESM-2 (no
downloads)."""
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.progress import Progress
from recipe_zoo.recipes.protein import embed_cache, esm2
from recipe_zoo.recipes.protein.config import FinetuneConfig

AMINO = "ACDEFGHIKLMNPQRSTVWY"
SEQS = [("MKTAYIAKQR" + AMINO[i % 20] + AMINO[i * 7 % 20] + "QISFVKSHFSRQ")[: 14 + i % 9] for i in range(40)]
TOKS = 100  # tokens per forward pass: batches of 3 to 6 sequences


def load(path):
    model, alphabet, _ = esm2.load_esm(FinetuneConfig(esm_weights=str(path)), SimpleRun(Budget("steps", 1)))
    return model, alphabet


@pytest.fixture
def tiny(tiny_esm):
    return load(tiny_esm)


def embed(tiny, seqs, log, progress=None):
    model, alphabet = tiny
    return esm2.embed(model, alphabet, seqs, 2, "mean", torch.device("cpu"), "fp32", TOKS, log, progress)


def shards():
    return sorted((esm2.features_root()).glob("*/shard-*.npz"))


def in_one_go(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "uninterrupted"))
    whole = embed(tiny, SEQS, print)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return whole


def test_a_stopped_embedding_keeps_its_shards_and_the_rerun_embeds_only_the_rest(tiny, tmp_path, monkeypatch):
    whole = in_one_go(tiny, tmp_path, monkeypatch)
    monkeypatch.setattr(embed_cache, "CHUNK_SEQUENCES", 8)
    logs = []

    def stop(done, total):
        if done >= 20:
            raise KeyboardInterrupt  # Ctrl-C after the batch that passed 20 sequences

    with pytest.raises(KeyboardInterrupt):
        embed(tiny, SEQS, logs.append, stop)
    kept = sum(len(np.load(s)["keys"]) for s in shards())
    assert 20 <= kept < 40 and len(shards()) >= 3  # shards of 8+ as it went, and the batches done when it stopped
    resumed = embed(tiny, SEQS, logs.append)
    assert f"embedded {40 - kept} new sequences" in logs[-1] and f"({kept} from the cache" in logs[-1]
    assert resumed.dtype == np.float32 and resumed.tobytes() == whole.tobytes()  # the same batches: the same bits


def test_a_process_killed_mid_way_keeps_its_shards(tiny, tiny_esm, tmp_path, monkeypatch):
    whole = in_one_go(tiny, tmp_path, monkeypatch)
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import torch
        import test_protein_embed_cache as t
        from recipe_zoo.recipes.protein import embed_cache
        embed_cache.CHUNK_SEQUENCES = 8
        def kill(done, total):
            if done >= 20:
                os.kill(os.getpid(), signal.SIGKILL)  # no handler, no cleanup
        t.embed(t.load({str(tiny_esm)!r}), t.SEQS, print, kill)  # the fixture's weights
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    kept = sum(len(np.load(s)["keys"]) for s in shards())
    assert 8 <= kept < 30 and all(not p.name.startswith(".") for p in shards()[0].parent.iterdir())
    logs = []
    resumed = embed(tiny, SEQS, logs.append)
    assert f"embedded {40 - kept} new sequences" in logs[-1] and f"({kept} from the cache" in logs[-1]
    assert resumed.tobytes() == whole.tobytes()


@pytest.mark.parametrize("damage", ["truncated", "pickled object", "wrong width"])
def test_an_unreadable_shard_is_logged_removed_and_embedded_again(tiny, tmp_path, monkeypatch, damage):
    monkeypatch.setattr(embed_cache, "CHUNK_SEQUENCES", 8)
    logs = []
    whole = embed(tiny, SEQS, logs.append)
    bad = shards()[1]
    lost = len(np.load(bad)["keys"])
    if damage == "truncated":
        bad.write_bytes(bad.read_bytes()[:200])
    elif damage == "pickled object":
        np.savez(bad, keys=np.array(list(np.load(bad)["keys"]), dtype=object), emb=np.zeros((lost, 32)))
    else:
        np.savez(bad, keys=np.load(bad)["keys"], emb=np.zeros((lost, 31), dtype=np.float32))
    again = embed(tiny, SEQS, logs.append)
    warned = [line for line in logs if line.startswith("embedding cache shard")]
    assert len(warned) == 1 and str(bad) in warned[0] and "removed, its sequences are embedded again" in warned[0]
    assert f"embedded {lost} new sequences" in logs[-1] and again.tobytes() == whole.tobytes()
    embed(tiny, SEQS, logs.append)
    assert logs[-1].startswith("all 40 embeddings from the cache")  # repaired: no second warning


def test_embedding_says_its_progress_while_it_runs(tiny, monkeypatch):
    quiet, lines = [], []
    embed(tiny, SEQS[:5], quiet.append)  # quick work: only the summary
    assert len(quiet) == 1 and quiet[0].startswith("embedded 5 new sequences")
    monkeypatch.setattr(esm2, "Progress", functools.partial(Progress, every=0.0))  # as if each batch were slow
    embed(tiny, SEQS, lines.append)
    steps = [line for line in lines if line.startswith("embedding: ")]
    assert len(steps) >= 5 and all("/35 sequences (" in line and line.endswith("s left") for line in steps)
    assert lines[-1].startswith("embedded 35 new sequences") and "/s, written in 1 shard)" in lines[-1]
