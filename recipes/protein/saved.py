"""What a protein run keeps for inference and how its predict hook reads it back. No pickle: a head on fixed
features (ridge, kernel ridge, MLP) is ``head.safetensors`` (the feature scaling, the coefficients or weights) with
its scalars (alpha, gamma, target mean and std) in ``model.json``; new data (FASTA, a CSV of sequences, an NPZ of
embeddings) is read and checked by the training's own readers; ``predictions.csv`` holds the test rows; with no
``data=``, predict loads the run's data again and scores its test split as the run did."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from recipe_zoo.core import artifact
from recipe_zoo.core.api import NonNegativeInt
from recipe_zoo.core.distributed import is_main
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.metrics import score
from recipe_zoo.core.precision import choose_device
from recipe_zoo.recipes.protein.data import (SCORING, ProteinData, check_sequence, final_metrics, load_data,
                                             need_columns, primary_metric, read_csv_rows, read_fasta)
from recipe_zoo.recipes.protein.models import ClosedForm, Features, MLPFit, MLPHead, closed_form_device

HEAD_FILE = "head.safetensors"
FASTA_SUFFIXES = (".fasta", ".fa", ".faa", ".fas")


@dataclass
class SequenceOptions(artifact.PredictOptions):
    sequence: str = ""  # CSV column of the sequences ('' = the run's sequence=)
    batch_size: NonNegativeInt = 0  # sequences per batch; 0 = the run's evaluation batch


# =============================================================================================
# The heads on fixed features: safetensors + their scalars in model.json
# =============================================================================================

def save_head(run_dir: Path, head: ClosedForm | MLPFit) -> dict:
    """``head.safetensors`` (main process) and what model.json says of the head."""
    feats = head.feats
    tensors = {"features.keep": torch.from_numpy(np.asarray(feats.keep, dtype=np.int64)),
               "features.mean": torch.from_numpy(np.ascontiguousarray(feats.mean)),
               "features.std": torch.from_numpy(np.ascontiguousarray(feats.std))}
    meta = {"head": head.head, "target_mean": head.mean, "target_std": head.std}
    if isinstance(head, MLPFit):
        tensors.update({f"mlp.{k}": v for k, v in head.model.state_dict().items()})
        first, last = head.model.net[1], head.model.net[4]
        meta.update(d_in=first.in_features, hidden=first.out_features, out=last.out_features,
                    dropout=head.model.net[0].p, task=head.task)
    else:
        tensors["coef"] = head.coef
        if head.basis is not None:
            tensors["basis"] = head.basis
        meta.update(alpha=head.alpha, gamma=head.gamma)
    # column-major matrices (numpy's column indexing, scipy's solves) are stored row-major; predict restores the
    # layout, since BLAS sums in another order for another layout and a near-tie in Spearman's ranks can flip
    meta["column_major"] = [k for k, t in tensors.items() if t.dim() == 2 and t.size(0) > 1 and
                            t.stride() == (1, t.size(0))]
    if is_main():
        artifact.save_tensors(tensors, run_dir / HEAD_FILE)
    return meta


def load_head(run: artifact.PredictRun) -> ClosedForm | MLPFit:
    meta = run.card["head"]
    t = artifact.load_tensors(run.path(HEAD_FILE))
    for k in meta.get("column_major", []):
        t[k] = torch.empty_strided(t[k].shape, (1, t[k].size(0)), dtype=t[k].dtype).copy_(t[k])
    feats = Features(t["features.keep"].numpy(), t["features.mean"].numpy(), t["features.std"].numpy())
    if meta["head"] == "mlp":
        device = choose_device(run.device)
        model = MLPHead(meta["d_in"], meta["hidden"], meta["out"], meta["dropout"])
        model.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("mlp.")})
        return MLPFit(feats, model.to(device), meta["target_mean"], meta["target_std"], meta["task"], device)
    device = closed_form_device(run)
    basis = t["basis"].to(device) if "basis" in t else None
    return ClosedForm(meta["head"], meta["alpha"], feats, t["coef"].to(device), basis, meta["gamma"],
                      meta["target_mean"], meta["target_std"])


def recipe_name(run, default: str) -> str:
    """The name the run was trained under (a `zoo new` copy has its own), else the recipe's."""
    return getattr(getattr(run, "spec", None), "name", None) or default


def save_fixed_head(run, data: ProteinData, head, test_pred: np.ndarray, *, recipe: str, preprocess: dict) -> None:
    """protein/onehot, protein/esm-embed: the head, the card and the test rows."""
    meta = save_head(run.dir, head)
    recipe = recipe_name(run, recipe)
    selected = ("best-val (the MLP head's best validation state)" if head.head == "mlp" else
                f"{head.head} fitted on train, chosen on validation")
    artifact.write_card(run.dir, recipe=recipe, task=data.task, weights=[HEAD_FILE], selected=selected,
                        classes=data.classes, preprocess=preprocess, head=meta)
    artifact.write_predictions(run.dir, split_rows(data, data.split[2], test_pred))


# =============================================================================================
# Rows and metrics
# =============================================================================================

def prediction_columns(task: str, classes: list[str] | None, p: np.ndarray) -> dict:
    """Regression: the prediction; classes: the predicted class and the head's score for each (the ridge heads'
    least-squares outputs, the networks' logits: what the argmax ran on)."""
    p = np.ravel(p)
    if task == "regression":
        return {"prediction": float(p[0])}
    return {"prediction": classes[int(np.argmax(p))], **{f"score_{c}": float(v) for c, v in zip(classes, p)}}


def split_rows(data: ProteinData, idx: np.ndarray, pred: np.ndarray) -> list[dict]:
    """predictions.csv: the row of each item in the data (split.csv's numbering), its name, target, prediction."""
    pred = np.asarray(pred).reshape(len(idx), -1)
    rows = []
    for i, p in zip(idx, pred):
        row: dict = {"row": int(i)}
        if data.ids is not None:
            row["id"] = data.ids[i]
        row["target"] = float(data.y[i]) if data.task == "regression" else data.classes[int(data.y[i])]
        rows.append({**row, **prediction_columns(data.task, data.classes, p)})
    return rows


def split_metrics(data: ProteinData, val_pred: np.ndarray, test_pred: np.ndarray) -> dict[str, float]:
    """The run's test metrics (and its validation value), computed as the run computed them."""
    val = data.split[1]
    value = score(data.y[val], val_pred, *SCORING[data.task])[primary_metric(data.task)[0]]
    return final_metrics(data, value, test_pred)


# =============================================================================================
# New data: FASTA, a CSV of sequences, an NPZ of embeddings
# =============================================================================================

@dataclass
class NewData:
    rows: list[dict]  # what each output row starts with: the CSV's own columns, the FASTA header, the NPZ row
    seqs: list[str] | None = None
    emb: np.ndarray | None = None
    path: Path | None = None


def data_file(text: str, run, what: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file() and run.is_dataset(text):
        path = run.data_path(text)
    if not path.is_file():
        raise ZooError(f"data={text}: no such file ({what})")
    return path


def read_new(text: str, cfg, column: str, run, npz: bool = False) -> NewData:
    """Sequences from a FASTA file or a CSV column (each checked as in training: letters, max_len), or (``npz``)
    the 'emb' array of an NPZ. A bad row is one line naming the file and the row."""
    what = "a FASTA or CSV of sequences" + (", or an NPZ of embeddings" if npz else "")
    path = data_file(text, run, what)
    suffix = path.suffix.lower()
    if suffix in FASTA_SUFFIXES:
        records = read_fasta(path)
        seqs = [check_sequence(s, f"{path} record {h.split()[0] if h else '?'!r} (line {n})", cfg)
                for h, s, n in records]
        return NewData([{"id": h} for h, _, _ in records], seqs=seqs, path=path)
    if suffix == ".csv":
        columns, rows = read_csv_rows(path, str(path))
        need_columns(str(path), columns, [column], "set sequence=COLUMN")
        if not rows:
            raise ZooError(f"{path}: no rows")
        seqs = [check_sequence(r[column] or "", f"{path} row {i + 2}", cfg) for i, r in enumerate(rows)]
        return NewData([dict(r) for r in rows], seqs=seqs, path=path)
    if npz and suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                emb = f["emb"] if "emb" in f.files else None
        except (OSError, ValueError) as exc:
            raise ZooError(f"{path}: cannot read as a NumPy .npz file ({exc})") from None
        if emb is None or emb.ndim != 2:
            raise ZooError(f"{path}: no (n, d) array 'emb' (the embeddings to predict from)")
        bad = np.where(~np.isfinite(emb).all(axis=1))[0]
        if len(bad):
            raise ZooError(f"{path}: 'emb' row {bad[0]} has NaN or inf")
        return NewData([{"row": i} for i in range(len(emb))], emb=emb.astype(np.float32), path=path)
    raise ZooError(f"{path}: expected {what} (.fasta, .csv{', .npz' if npz else ''})")


# =============================================================================================
# The predict hook of the fixed-feature recipes
# =============================================================================================

def predict_fixed(cfg, opts, run: artifact.PredictRun,
                  featurize: Callable[[list[str] | None, np.ndarray | None], np.ndarray],
                  npz: bool = False) -> artifact.Predictions:
    """No data: the run's own test split, scored again (its metrics); else the head's prediction for each row
    of the file, in batches. ``featurize(seqs, emb)``: the features the head was fitted on."""
    head = load_head(run)
    card = run.card
    if not opts.data:
        data = load_data(cfg, run)
        X = featurize(data.seqs, data.emb)
        _, val, test = data.split
        test_pred = head.predict(X[test])
        return artifact.Predictions(rows=split_rows(data, test, test_pred),
                                    metrics=split_metrics(data, head.predict(X[val]), test_pred),
                                    arrays={"prediction": test_pred})
    new = read_new(opts.data, cfg, opts.sequence or cfg.sequence, run, npz=npz)
    X = featurize(new.seqs, new.emb)
    size = opts.batch_size or 4096
    parts = []
    for start in range(0, len(X), size):
        parts.append(head.predict(X[start:start + size]))
        run.progress(min(start + size, len(X)), len(X), "rows predicted")
    pred = np.concatenate(parts)
    rows = [{**r, **prediction_columns(card["task"], card["classes"], p)} for r, p in zip(new.rows, pred)]
    return artifact.Predictions(rows=rows, arrays={"prediction": pred})
