"""``tabular/mlp``: a neural network for large tables through the core loop. An MLP over standardised numbers
and categorical embeddings (or ``model=ft-transformer``), trained with AdamW on a cosine schedule; the best
validation state is kept (early stopping) and scores the test rows once training ends; it is saved as
safetensors (one per fold), predicts new tables (``zoo predict``) and exports to ONNX. ``stream=true`` reads the
file a chunk at a time and trains from the rows encoded on disk (``encoded.py``).
"""
from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, finetune, optim, schedule, streams
from recipe_zoo.core.api import recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.batches import TensorBatches, to_device
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.weights import BestState
from recipe_zoo.core.precision import choose_device, resolve_precision
from recipe_zoo.recipes.tabular import data, encoded, inference, models, protocol, stream
from recipe_zoo.recipes.tabular.config import MLPConfig
from recipe_zoo.recipes.tabular.data import Table

# =============================================================================================
# One network on one split: encoding, model, AdamW + warmup-cosine, the core loop, the best validation state
# =============================================================================================

def fit_nn(cfg: MLPConfig, run, table: Table, X, fit_rows: np.ndarray, val: np.ndarray, budget,
           label: str = "", encode=None, start: Start | None = None) -> tuple:
    """Train on ``fit_rows``, evaluate on ``val`` (the best validation state is kept) and return (predict, stats):
    ``predict(rows)`` gives the restored best model's predictions. ``encode(X, fit_rows) -> (encoding, Encoded)``:
    the network's input for every row (in memory by default; ``encoded.encoder``'s arrays on disk for a stream).
    ``start``: a source run's network, input encoding and target scaling, kept (a refit on new rows)."""
    device = choose_device(run.device)
    if start is not None:
        encoding = start.saved["encoding"]
        enc = models.encode(X, encoding)
    elif encode is None:
        encoding = models.fit_encoding(X, fit_rows, cfg.quantile, run.seed)
        enc = models.encode(X, encoding)
    else:
        encoding, enc = encode(X, fit_rows)
    # the network takes the log when the target is positive and skewed (a refit: as its source did)
    log = start.saved["target"]["log"] if start is not None else data.use_log(table, fit_rows, cfg)[-1]
    metric, higher = data.primary_metric(table.task)
    scale = {"task": table.task, "log": log}
    if table.task == "regression":
        t = np.log1p(table.y) if log else table.y
        if start is not None:
            scale.update(mean=start.saved["target"]["mean"], std=start.saved["target"]["std"])
        else:
            scale.update(mean=float(t[fit_rows].mean()), std=float(t[fit_rows].std()) or 1.0)
        target = torch.from_numpy((t - scale["mean"]) / scale["std"]).float()
        out = 1
    else:
        target = torch.tensor(table.y)  # a copy: zoo doctor hands in a read-only array
        out = 1 if table.task == "binary" else len(table.classes)
    to_pred = functools.partial(to_prediction, scale=scale)

    torch.manual_seed(run.seed)
    spec = {"model": cfg.model, "n_num": enc.num.shape[1], "cards": enc.cardinalities, "out": out,
            "hidden": cfg.hidden, "layers": cfg.layers, "dropout": cfg.dropout}
    model = models.network(spec)
    if start is not None:  # the source's network (its encoding gives the same inputs: checked in Start.check)
        model.load_state_dict(start.state)
    model.to(device)
    weights = data.sample_weights(table, np.arange(len(table.y)), cfg)
    w = torch.from_numpy(weights).float() if weights is not None else torch.ones(len(table.y))
    if len(fit_rows) < 2:  # batch norm: one row has no spread
        raise ZooError(f"{table.name}: {len(fit_rows)} training row left beside the test and validation rows; "
                       "the network trains on 2 or more")
    rows = torch.as_tensor(fit_rows)
    inputs = (streams.rows(enc.num, fit_rows), streams.rows(enc.cat, fit_rows))  # a stream's: read by batch
    batches = TensorBatches((*inputs, target[rows], w[rows]), cfg.batch_size, seed=run.seed)
    best = BestState(higher)

    def evaluate(m: nn.Module) -> dict[str, float]:
        values = data.scores(table, val, to_pred(models.nn_predict(m, enc, val, device)))
        best.update(values[metric], m)
        return {f"val_{k}": v for k, v in values.items()}

    def loss_fn(m: nn.Module, b) -> torch.Tensor:
        num, cat, y, weight = (to_device(t, device) for t in b)
        raw = m(num, cat)
        if table.task == "regression":
            loss = F.mse_loss(raw[:, 0], y, reduction="none")
        elif table.task == "binary":
            loss = F.binary_cross_entropy_with_logits(raw[:, 0], y.float(), reduction="none")
        else:
            loss = F.cross_entropy(raw, y, reduction="none")
        return (loss * weight).sum() / weight.sum()

    begun = {}
    if start is not None:  # the source's network on this split's validation: also a candidate for the best state
        scores = finetune.score_start(model, evaluate, device, resolve_precision(device, cfg.precision))
        begun = {f"{k}_start": v for k, v in scores.items() if k == f"val_{metric}"}
    optimizer = optim.adamw(optim.decay_groups(model, cfg.weight_decay), lr=cfg.lr)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=0.0)
    result = fit(model, optimizer, batches, loss_fn, run.part(budget, main=not label), device=device,
                 evaluate=evaluate, update_hparams=functools.partial(schedule.apply_schedules, lr=lr),
                 settings=LoopSettings.of(cfg), keep={"best": best})
    best.restore(model)
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    stats.update(begun)
    stats["log_target"] = log
    stats["model"], stats["saved"] = model, {"network": spec, "encoding": encoding, "target": scale}
    return lambda rows: to_pred(models.nn_predict(model, enc, rows, device)), stats


# =============================================================================================
# Refitting from a run: its network, input encoding and target scaling kept
# =============================================================================================

SHAPE_FIELDS = ("model", "hidden", "layers", "quantile")  # what a refit takes from its source, never resized


class Start:
    """A ``tabular/mlp`` source run's first network (of its folds), with the input encoding and target scaling it
    was trained with: input-side state is inherited, so the network sees its inputs scaled as it learnt them and
    ``weights=SOURCE`` on the source's own data starts at the source's validation score."""

    def __init__(self, source: finetune.Source, log):
        self.source = source
        self.preprocess = json.loads(source.path(inference.PREPROCESS).read_text())
        self.saved = self.preprocess["splits"][0]
        self.state = artifact.load_tensors(source.path(self.saved["weights"]))
        count = len(self.preprocess["splits"])
        log(f"refitting from {source.folder}: {self.saved['weights']}"
            + (f" (the first of its {count} fold models)" if count > 1 else "")
            + "; its network, input encoding and target scaling kept")

    def check(self, table: Table, X) -> None:
        """One line naming what differs when this table is not one the source's network can take: another target
        or task (or classes), a column the source had that is missing, one it never saw, or a column read as
        another type."""
        where = f"weights={self.source.folder}"
        theirs = (self.preprocess["target"], self.preprocess["task"], self.preprocess["classes"])
        if (table.target, table.task, table.classes) != theirs:
            raise ZooError(f"{where}: the source predicts {theirs[0]!r} ({theirs[1]}"
                           + (f", classes {theirs[2]}" if theirs[2] else "") + f"); this table's target is "
                           f"{table.target!r} ({table.task}" + (f", classes {table.classes}" if table.classes
                                                                 else "") + "): a refit keeps its source's output, "
                           "so train another target from scratch")
        encoding = self.saved["encoding"]
        numeric, categorical = encoding["numeric"], list(encoding["categories"])
        mine = {c: "category" if str(X[c].dtype) == "category" else "number" for c in X.columns}
        source = {**{c: "number" for c in numeric}, **{c: "category" for c in categorical}}
        missing = [c for c in source if c not in mine]
        if missing:
            raise ZooError(f"{where}: the source was trained with column {missing[0]!r}, missing here "
                           f"({len(missing)} missing); give the same columns (and features=) as the source")
        extra = [c for c in mine if c not in source]
        if extra:
            raise ZooError(f"{where}: column {extra[0]!r} is not one the source was trained with ({len(extra)} new); "
                           f"drop it (drop={extra[0]}) or train from scratch")
        kind = next((c for c in source if source[c] != mine[c]), None)
        if kind is not None:
            raise ZooError(f"{where}: column {kind!r} is a {mine[kind]} here and was a {source[kind]} for the "
                           "source; give it the source's type (categorical=)")

    def check_unseen(self, table: Table, test_rows: np.ndarray, log) -> None:
        """None of this run's test rows (by content: every cell, target included) was a training or validation row
        of the source, read again from the source's data; one line naming the first that was. A source whose data
        cannot be read any more is said in the log."""
        from dataclasses import fields

        known = {f.name for f in fields(MLPConfig)}
        src_cfg = MLPConfig(**{k: v for k, v in self.source.config.items() if k in known})
        try:
            src = data.load_table(src_cfg, SimpleNamespace(report=lambda *a, **k: None))
        except (ZooError, OSError) as exc:
            log(f"weights={self.source.folder}: its data {src_cfg.data} could not be read again ({exc}); "
                "the test rows were not checked against its training rows")
            return
        number = {str(r): i for i, r in enumerate(src.rows)}
        seen = {src.keys[number[n]] for n in finetune.seen_items(self.source) if n in number}
        leaked = [i for i in test_rows if table.keys[i] in seen]
        if leaked:
            raise ZooError(f"weights={self.source.folder}: {len(leaked)} of this run's {len(test_rows)} test rows "
                           f"were training or validation rows of the source (first: row {table.rows[leaked[0]]}); "
                           "a refit must be scored on rows its source never saw: give a test file the source did "
                           "not train on (or the source's own split)")


def from_source(cfg: MLPConfig, run) -> tuple[MLPConfig, Start | None]:
    """``weights=RUN_DIR``: the source's network shape and encoding settings taken (a contradicting setting refused),
    and its first network read; ``(cfg, None)`` from scratch."""
    if not cfg.weights:
        return cfg, None
    if cfg.stream:
        raise ZooError("weights= with stream=true: a refit reads the table whole; leave stream unset")
    source = finetune.read_source(cfg.weights, ("tabular/mlp",))
    theirs = {name: source.config[name] for name in SHAPE_FIELDS if name in source.config}
    return finetune.inherit(cfg, source, theirs, "network and input encoding"), Start(source, run.log)


def to_prediction(raw: np.ndarray, scale: dict) -> np.ndarray:
    """The network's outputs as predictions: values (standardised, maybe log1p, undone), P(class 1), or softmax."""
    if scale["task"] == "regression":
        v = raw[:, 0] * scale["std"] + scale["mean"]
        return np.expm1(v) if scale["log"] else v
    if scale["task"] == "binary":
        return 1 / (1 + np.exp(-raw[:, 0]))
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# =============================================================================================
# The recipe
# =============================================================================================

# =============================================================================================
# Predict and export: the saved best-validation networks on new rows
# =============================================================================================

ONNX_OPSET = 18  # torch.onnx.export(dynamo=True): the torch.export-based exporter; 18 is its torchlib opset


def load_network(run, split: dict, device) -> nn.Module:
    model = models.network(split["network"])
    artifact.load_into(model, run.path(split["weights"]))
    return model.to(device).eval()


def predict_mlp(cfg: MLPConfig, opts: inference.TabularPredictOptions, run) -> artifact.Predictions:
    """Rows through the split's saved encoding, then its network in batches of ``batch_size`` (4096, the batch
    training scored with, by default)."""
    device = choose_device(run.device)
    batch = opts.batch_size or 4096

    def load_split(k: int, split: dict):
        model = load_network(run, split, device)

        def apply(X, rows: np.ndarray) -> np.ndarray:
            enc, out = models.encode(X, split["encoding"]), []
            for i in range(0, len(rows), batch):
                out.append(models.nn_predict(model, enc, rows[i:i + batch], device, batch))
                if len(rows) > batch:  # several batches: worth a progress line
                    run.progress(min(i + batch, len(rows)), len(rows), "rows")
            return to_prediction(np.concatenate(out), split["target"])

        return apply

    return inference.predict(cfg, opts, run, load_split)


def export_onnx(cfg: MLPConfig, run, out: Path) -> list[Path]:
    """Each saved network as ONNX (torch.onnx.export, dynamo=True, opset 18): inputs ``num`` (float32, rows x
    encoded numbers) and ``cat`` (int64, rows x categorical indices), output ``output`` (logits, or the standardised
    target); the encoding and target scaling that feed and read it are in ``preprocess.json``, copied beside."""
    import json
    import shutil
    import warnings

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for split in json.loads(run.path(inference.PREPROCESS).read_text())["splits"]:
        model, spec = load_network(run, split, "cpu"), split["network"]
        example = (torch.zeros(2, spec["n_num"]), torch.zeros(2, len(spec["cards"]), dtype=torch.long))
        rows = torch.export.Dim("rows")
        path = out / f"{Path(split['weights']).stem}.onnx"
        with warnings.catch_warnings():  # that num and cat share the rows axis is what is meant
            warnings.filterwarnings("ignore", message=".*The axis name")
            torch.onnx.export(model, example, str(path), dynamo=True, opset_version=ONNX_OPSET, external_data=False,
                              input_names=["num", "cat"], output_names=["output"],
                              dynamic_shapes=({0: rows}, {0: rows}), verbose=False)
        written.append(path)
    written.append(Path(shutil.copy2(run.path(inference.PREPROCESS), out / inference.PREPROCESS)))
    return written


# =============================================================================================
# The recipe
# =============================================================================================

# precision=auto on a CPU: fp32 (bf16 not 1.3x faster: docs/LOG.md#2026-12-04-cpu-precision-tabular-mlp-swinunetr)
@recipe("tabular/mlp", config=MLPConfig, benchmark="california-housing", metric="test_rmse",
        higher_is_better=False, budget="1m",
        summary="an MLP (or model=ft-transformer) over standardised numbers and categorical embeddings through "
                "the core loop; for large tables",
        predict=predict_mlp, predict_options=inference.TabularPredictOptions, exports={"onnx": export_onnx})
def train_mlp(cfg: MLPConfig, run) -> dict[str, float]:
    from recipe_zoo.core.budget import Budget
    from recipe_zoo.core.distributed import is_main

    cfg, start = from_source(cfg, run)
    reader = stream if cfg.stream else protocol
    table, views = reader.prepare(cfg, run)
    if start is not None:
        for X, _, _, test, _ in views:
            start.check(table, X)
        start.check_unseen(table, np.concatenate([test for *_, test, _ in views]), run.log)
    reader.inspect_split(run, table, views, loop=True, fine_tune=start is not None)
    budget = Budget(run.budget.kind, run.budget.amount / len(views)) if run.budget.kind == "seconds" else run.budget
    # stream=true: each split's rows encoded in a folder of the run's, read a batch at a time
    with encoded.workspace(run) if cfg.stream else contextlib.nullcontext() as folder:
        metrics, per_split, total, test_preds = protocol.over_splits(run, table, views, lambda k, X, train, val: fit_nn(
            cfg, run, table, X, train, val, budget, f"fold {k}" if k else "",
            encoded.encoder(cfg, run, table, views[k], folder / f"split{k}") if cfg.stream else None, start))
    stats = per_split[-1]
    metric = data.primary_metric(table.task)[0]
    run.report("network", f"{cfg.model}, {'quantile' if cfg.quantile else 'z-score'} numbers"
                          f"{', log target' if stats['log_target'] else ''}; best validation {metric} "
                          f"{stats[f'best_val_{metric}']:.4f}")
    weights = ["model.safetensors"] if len(views) == 1 else [f"model_fold{k}.safetensors" for k in range(len(views))]
    if is_main():
        for name, split in zip(weights, per_split):
            artifact.save_tensors(split["model"].state_dict(), run.dir / name)
    saved = [{"weights": w, **s["saved"]} for w, s in zip(weights, per_split)]
    inference.save(run, cfg, table, views, test_preds, saved, recipe="tabular/mlp", weights=weights,
                   selected="best-validation state", log_target=[s["log_target"] for s in per_split],
                   **({"source": finetune.provenance(start.source)} if start is not None else {}))
    begun = {k: v for k, v in stats.items() if k.endswith("_start")}
    return {**metrics, **begun, "train_seconds": total, "params_M": stats["params_M"],
            "peak_mem_mb": stats["peak_mem_mb"], "mfu_percent": stats.get("mfu_percent"),
            "samples_per_s": stats.get("samples_per_s"), "rows": len(table.y)}  # the last split's, as MFU
