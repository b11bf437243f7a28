"""A protein run's predictions, row by row: the options every sequence predict takes, the test split's rows
(``predictions.csv``) and metrics, and new data (FASTA, a CSV column, or an NPZ of embeddings; a file, or a dataset's
name) read and checked by the training's own readers. The heads themselves are saved and loaded in ``saved.py``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core import artifact, datasets
from recipe_zoo.core.api import NonNegativeInt
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.metrics import score
from recipe_zoo.recipes.protein.readers import FASTA_SUFFIXES, need_columns, read_csv_rows, read_fasta
from recipe_zoo.recipes.protein.scoring import SCORING, final_metrics, primary_metric
from recipe_zoo.recipes.protein.sequences import ProteinData, check_sequence


@dataclass
class SequenceOptions(artifact.PredictOptions):
    sequence: str = ""  # CSV column of the sequences ('' = the run's sequence=)
    batch_size: NonNegativeInt = 0  # sequences per batch; 0 = the run's evaluation batch


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


def data_file(text: str, what: str) -> Path:
    """The file ``data=`` names: a path, else a dataset's file in the cache."""
    path = Path(text).expanduser()
    if not path.is_file() and datasets.is_dataset(text):
        path = datasets.locate(text)
    if not path.is_file():
        raise ZooError(f"data={text}: no such file ({what})")
    return path


def read_new(text: str, cfg, column: str, npz: bool = False) -> NewData:
    """Sequences from a FASTA file or a CSV column (each checked as in training: letters, max_len), or (``npz``)
    the 'emb' array of an NPZ. A bad row is one line naming the file and the row."""
    what = "a FASTA or CSV of sequences" + (", or an NPZ of embeddings" if npz else "")
    path = data_file(text, what)
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
