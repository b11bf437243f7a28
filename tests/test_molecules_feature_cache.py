"""Molecule features cached in chunks: written as they are made, so a featurisation stopped mid-way (an exception,
SIGKILL) keeps its finished chunks and the rerun featurises only the rest, bitwise the same as in one go; files
that do not read (truncated, or a pickle carrying code) are logged and featurised again, and never run."""
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from recipe_zoo.core.progress import Progress
from recipe_zoo.recipes.molecules import feature_cache
from recipe_zoo.recipes.molecules.features import featurize, morgan, rdkit_descriptors
from recipe_zoo.recipes.molecules.table import MolTable, standardize

SMILES = ["CCO", "c1ccccc1O", "CC(=O)N", "C", "O", "C1CCCCC1", "CC(C)(C)Cl", "N#CC=C", "OC(=O)c1ccccc1", "CCN(CC)CC",
          "[Na+].[Cl-]", "C/C=C/C", "C[C@H](N)C(=O)O", "c1ccncc1", "CS(=O)(=O)C", "FC(F)(F)c1ccccc1", "CCCCCCCCO"]


def table() -> MolTable:
    from rdkit import Chem

    mols = [standardize(Chem.MolFromSmiles(s)) for s in SMILES]  # methane, water, Cl-: molecules without bonds
    return MolTable("t", SMILES, mols, np.zeros((len(SMILES), 1)), ["y"], "regression")


KINDS = {"graphs": featurize, "descriptors": rdkit_descriptors,
         "morgan": lambda mols: morgan(mols, 2, 64, True)}


def same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return all(getattr(a, f).dtype == getattr(b, f).dtype and torch.equal(getattr(a, f), getattr(b, f))
               for f in ("x", "edge_attr", "src", "dst", "atom_ptr", "edge_ptr"))


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(feature_cache, "BATCH", 2)  # progress checks (and make calls) every 2 molecules


@pytest.mark.parametrize("kind", list(KINDS))
def test_chunks_join_to_the_features_made_in_one_go_and_are_read_back(kind, small_batches):
    t, logs = table(), []
    whole = KINDS[kind](t.mols)
    made = feature_cache.cached(kind, t, KINDS[kind], logs.append, chunk=5)
    assert same(made, whole)  # offsets shifted across chunks, bondless molecules included
    assert sorted(p.name for p in feature_cache.cache_dir(kind, t).iterdir()) == [
        "0000000-0000005.safetensors", "0000005-0000010.safetensors", "0000010-0000015.safetensors",
        "0000015-0000017.safetensors"]
    again = feature_cache.cached(kind, t, lambda mols: pytest.fail("read from the cache, not made again"),
                                 logs.append, chunk=5)
    assert same(again, whole)
    assert f"{kind}: featurised 17 molecules" in logs[0] and "0 from the cache" in logs[0]
    assert logs[1].startswith(f"{kind}: all 17 molecules from the cache")


def test_a_stopped_featurisation_keeps_its_chunks_and_the_rerun_makes_only_the_rest(small_batches):
    t, logs, seen = table(), [], []

    def stops_in_the_third_chunk(mols):
        if len(seen) >= 10:
            raise KeyboardInterrupt  # Ctrl-C while chunk 10:15 is being made
        seen.extend(mols)
        return rdkit_descriptors(mols)

    with pytest.raises(KeyboardInterrupt):
        feature_cache.cached("descriptors", t, stops_in_the_third_chunk, logs.append, chunk=5)
    folder = feature_cache.cache_dir("descriptors", t)
    assert sorted(p.name for p in folder.iterdir()) == ["0000000-0000005.safetensors", "0000005-0000010.safetensors"]
    rest = []
    resumed = feature_cache.cached("descriptors", t, lambda mols: rest.extend(mols) or rdkit_descriptors(mols),
                              logs.append, chunk=5)
    assert len(rest) == 7 and all(a is b for a, b in zip(rest, t.mols[10:]))  # only the molecules not yet done
    assert "featurised 7 molecules" in logs[-1] and "10 from the cache" in logs[-1]
    assert same(resumed, rdkit_descriptors(t.mols))


def test_a_process_killed_mid_way_keeps_its_chunks():
    """SIGKILL: no handler, no cleanup runs; what was renamed into place is all there is, and it is enough."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_molecules_feature_cache import table
        from recipe_zoo.recipes.molecules import feature_cache
        from recipe_zoo.recipes.molecules.features import featurize
        feature_cache.BATCH = 2
        done = []
        def make(mols):
            if len(done) >= 10:
                os.kill(os.getpid(), signal.SIGKILL)
            done.extend(mols)
            return featurize(mols)
        feature_cache.cached("graphs", table(), make, print, chunk=5)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    t, logs = table(), []
    folder = feature_cache.cache_dir("graphs", t)
    assert sorted(p.name for p in folder.iterdir()) == ["0000000-0000005.safetensors", "0000005-0000010.safetensors"]
    made = []
    graphs = feature_cache.cached("graphs", t, lambda mols: made.extend(mols) or featurize(mols), logs.append,
                                  chunk=5)
    assert len(made) == 7 and "10 from the cache" in logs[-1]
    assert same(graphs, featurize(t.mols))


class _Payload:
    """Unpickling this calls os.system: what a tampered cache file would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("damage", ["truncated", "pickle with code", "other molecules"])
def test_a_damaged_chunk_is_logged_and_made_again(tmp_path, damage):
    t, logs = table(), []
    whole = feature_cache.cached("graphs", t, featurize, logs.append, chunk=5)
    folder = feature_cache.cache_dir("graphs", t)
    path = feature_cache.chunk_path(folder, 5, 10)
    marker = tmp_path / "pwned"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "pickle with code":
        torch.save({"x": _Payload(marker)}, path)  # a cache file replaced by code
    else:
        four = feature_cache.tensors(featurize(t.mols[5:9]))
        feature_cache.write_chunk(path, four)  # four molecules' features in the file of five
    made = []
    again = feature_cache.cached("graphs", t, lambda mols: made.extend(mols) or featurize(mols), logs.append,
                                 chunk=5)
    assert same(again, whole) and not marker.exists()  # the payload never ran
    warned = [line for line in logs if line.startswith("feature cache ")]
    assert len(made) == 5 and len(warned) == 1 and f"{path}: " in warned[0] and warned[0].endswith("featurised again")
    assert "featurised 5 molecules" in logs[-1]
    if damage == "other molecules":
        assert "not the features of 5 molecules" in warned[0]
    assert same(feature_cache.cached("graphs", t, lambda mols: pytest.fail("repaired"), logs.append, chunk=5), whole)


def test_featurising_says_its_progress_while_it_runs_and_nothing_for_quick_work(small_batches, monkeypatch):
    t, quick, lines = table(), [], []
    feature_cache.cached("graphs", t, featurize, quick.append, chunk=5)
    assert len(quick) == 1 and quick[0].startswith("graphs: featurised 17 molecules")  # the summary alone
    monkeypatch.setattr(feature_cache, "Progress", functools.partial(Progress, every=0.0))  # as if each step were slow
    feature_cache.cached("descriptors", t, rdkit_descriptors, lines.append, chunk=5)
    steps = [line for line in lines if line.startswith("featurising (descriptors): ")]
    counts = [line.split(": ")[1].split(" ")[0] for line in steps]
    assert counts == [f"{n}/17" for n in (2, 4, 5, 7, 9, 10, 12, 14, 15, 17)]  # each batch of 2, each chunk's end
    assert all(line.endswith("s left") for line in steps) and lines[-1].startswith("descriptors: featurised 17")
