"""``molecules/dmpnn``: a directed message-passing network over bonds (chemprop's D-MPNN, Yang et al. 2019)
in plain torch. Targets standardised on the training rows, RDKit descriptors concatenated to the readout,
AdamW with warmup and cosine decay through the core loop, a masked loss for multi-task gaps, the best
validation checkpoint kept; k-fold and ensembles average the models' predictions. The test molecules are
predicted only once a split's models are final, and scored once all are; then each model's best validation
weights (safetensors), each split's scalers and the featuriser's settings are kept for ``zoo predict``.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, distributed, finetune, optim, schedule
from recipe_zoo.core.api import recipe
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.weights import BestState
from recipe_zoo.core.metrics import score_tasks
from recipe_zoo.core.precision import choose_device, resolve_precision
from recipe_zoo.recipes.molecules import blend, feature_cache, inference, models
from recipe_zoo.recipes.molecules.config import DMPNNConfig
from recipe_zoo.recipes.molecules.features import Graphs, featurize, rdkit_descriptors
from recipe_zoo.recipes.molecules.run_data import inspect_split, load_for, splits_for
from recipe_zoo.recipes.molecules.scoring import METRIC_NAMES, SCORE_TASK, finish, primary_metric
from recipe_zoo.recipes.molecules.table import MolTable, parent_smiles

# =============================================================================================
# Loss and scaling: missing targets masked, targets and descriptors standardised on the training rows
# =============================================================================================

def masked_loss(pred: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    mask = ~torch.isnan(y)
    target = torch.nan_to_num(y)
    if task == "classification":
        loss = F.binary_cross_entropy_with_logits(pred, target, reduction="none")
    else:
        loss = F.mse_loss(pred, target, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def standardizer(values: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over the training rows (NaN-aware), std 1 where a column is constant or empty."""
    mean = np.nan_to_num(np.nanmean(values[idx], axis=0))
    std = np.nan_to_num(np.nanstd(values[idx], axis=0), nan=1.0)
    std[std < 1e-8] = 1.0
    return mean, std


# =============================================================================================
# One model on one split: AdamW, warmup + cosine, the core loop, the best validation checkpoint
# =============================================================================================

def scale_descriptors(desc: np.ndarray, mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.clip(np.nan_to_num((desc - mean) / std), -10, 10).astype(np.float32))


def unscale(p: np.ndarray, task: str, scaler: dict) -> np.ndarray:
    return p * scaler["target_std"] + scaler["target_mean"] if task == "regression" else p


def network(cfg: DMPNNConfig, atom_dim: int, bond_dim: int, extra_dim: int, tasks: int) -> models.DMPNN:
    """The D-MPNN of these settings (predict: the dimensions the card records)."""
    return models.DMPNN(atom_dim, bond_dim, extra_dim, tasks, depth=cfg.depth, hidden=cfg.hidden, readout=cfg.readout,
                        ffn_hidden=cfg.ffn_hidden, ffn_layers=cfg.ffn_layers, dropout=cfg.dropout)


def train_dmpnn_split(cfg: DMPNNConfig, run, table: MolTable, graphs: Graphs, desc, train_idx: np.ndarray,
                      val_idx: np.ndarray, budget: Budget, device, member_seed: int, label: str,
                      start: Start | None = None) -> tuple:
    """One model trained on ``train_idx``, its best validation state kept: returns (predict, stats, model, scaler),
    where ``predict(rows)`` gives the restored model's predictions on the original scale and ``scaler`` holds the
    training rows' target and descriptor statistics. ``start``: a source run's weights and descriptor statistics
    (a fine-tune), its validation scored before the first step (``val_METRIC_start``)."""
    task = table.task
    y = table.y.copy()
    if task == "regression":
        y_mean, y_std = standardizer(y, train_idx)
        y = (y - y_mean) / y_std
    scaler = {"target_mean": y_mean, "target_std": y_std} if task == "regression" else {}
    extra = None
    if desc is not None:
        d_mean, d_std = standardizer(desc, train_idx) if start is None else start.descriptors
        extra = scale_descriptors(desc, d_mean, d_std)
        scaler.update(descriptor_mean=d_mean, descriptor_std=d_std)
    torch.manual_seed(member_seed)
    model = network(cfg, graphs.x.size(1), graphs.edge_attr.size(1), 0 if extra is None else extra.size(1),
                    y.shape[1])
    if start is not None:
        start.load(model, run.log if label == "" else lambda line: None)
    model.to(device)
    targets = torch.from_numpy(y).float()
    # Batches of molecule indices (the shared batcher keeps resume exact), each collated into one graph.
    batches = TensorBatches((torch.as_tensor(train_idx),), cfg.batch_size, seed=member_seed,
                            transform=lambda batch, g: (models.collate(graphs, batch[0], extra), targets[batch[0]]))
    groups = optim.decay_groups(model, cfg.weight_decay)
    optimizer = optim.adamw(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)
    lr = schedule.make_schedule("cosine", warmup=cfg.warmup, final=cfg.lr_final, start=0.1)
    metric, higher = primary_metric(task)
    best = BestState(higher)

    def evaluate(m: nn.Module) -> dict[str, float]:
        pred = unscale(models.predict(m, graphs, val_idx, extra, device, task), task, scaler)
        val = score_tasks(table.y[val_idx], pred, SCORE_TASK[task], METRIC_NAMES[task])
        value = val.get(metric, float("nan"))
        best.update(value, m)
        return {f"val_{k}": v for k, v in val.items()}

    def loss_fn(m: nn.Module, batch) -> torch.Tensor:
        b, target = batch
        return masked_loss(m(b.to(device)), target.to(device), task)

    begun = {}
    if start is not None:  # the source's weights on this split's validation: also a candidate for the best state
        scores = finetune.score_start(model, evaluate, device, resolve_precision(device, cfg.precision))
        begun = {f"{k}_start": v for k, v in scores.items() if k == f"val_{metric}"}
    settings = LoopSettings.of(cfg)
    result = fit(model, optimizer, batches, loss_fn, run.part(budget, main=label == ""), device=device,
                 evaluate=evaluate, update_hparams=functools.partial(schedule.apply_schedules, lr=lr),
                 settings=settings, keep={"best": best},
                 on_step=head_first(model, cfg.head_fraction, run.log if label == "" else None) if start else None)
    best.restore(model)  # the best validation checkpoint, as chemprop keeps
    stats = result.stats()
    stats[f"best_val_{metric}"] = best.value
    stats.update(begun)
    return lambda rows: unscale(models.predict(model, graphs, rows, extra, device, task), task, scaler), stats, model, \
        scaler


# =============================================================================================
# Fine-tuning from a run: the encoder and featuriser kept, the targets' scaling (and a new head) this run's
# =============================================================================================

# What must match the source: the encoder's shape and the featuriser (standardisation, descriptors). Inherited by
# default: the descriptors' statistics (input-side state, so the encoder sees its inputs scaled as it learnt them).
# Refitted: the targets' mean and std (another assay has another scale), and the output layer when the targets'
# count differs (a new layer, logged).
ENCODER_FIELDS = ("depth", "hidden", "readout", "ffn_hidden", "ffn_layers", "descriptors", "standardize")


class Start:
    """A source run's first model and its first split's descriptor statistics, checked against this zoo."""

    def __init__(self, source: finetune.Source, log):
        from types import SimpleNamespace

        inference.check_featuriser(SimpleNamespace(card=source.card, dir=source.folder, log=log))
        self.source, self.name = source, source.card["weights"][0]
        self.state = artifact.load_tensors(source.path(self.name))
        saved = artifact.load_tensors(source.path(SCALERS))
        self.descriptors = ((saved["split0.descriptor_mean"].numpy(), saved["split0.descriptor_std"].numpy())
                            if "split0.descriptor_mean" in saved else None)
        count = len(source.card["weights"])
        log(f"fine-tuning from {source.folder}: {self.name}" + (f" (the first of its {count} models)" if count > 1
                                                                  else "") + ", its descriptor statistics")

    def new_tensors(self, targets: int) -> tuple[str, ...]:
        """The tensors this fine-tune starts afresh: the output layer where the count of targets differs."""
        last = max(int(k.split(".")[1]) for k in self.state if k.startswith("head."))
        return (f"head.{last}.",) if self.state[f"head.{last}.weight"].shape[0] != targets else ()

    def load(self, model: nn.Module, log) -> None:
        own = model.state_dict()
        out = [k for k in self.state if k.startswith("head.") and self.state[k].shape != own[k].shape]
        model.load_state_dict({k: v for k, v in self.state.items() if k not in out}, strict=not out)
        if out:
            log(f"a new output layer for {own[out[0]].shape[0]} target(s) (the source predicts "
                f"{self.state[out[0]].shape[0]}): {', '.join(out)} initialised afresh")


def head_first(model: nn.Module, fraction: float, log=None):
    """A fine-tune's stages as a function of progress: the FFN head alone on the frozen encoder until
    ``fraction`` of the budget, then every parameter (``fraction`` 0: every parameter from the start)."""
    encoder = [p for name, p in model.named_parameters() if not name.startswith("head.")]
    state = {"frozen": None}

    def on_step(progress: float, step: int) -> None:
        frozen = progress < fraction
        if frozen != state["frozen"]:
            for p in encoder:
                p.requires_grad_(not frozen)
            if log is not None and state["frozen"] is not None:
                log(f"head_fraction={fraction:g}: the encoder trains from step {step} on")
            state["frozen"] = frozen

    return on_step


def from_source(cfg: DMPNNConfig, run) -> tuple[DMPNNConfig, Start | None]:
    if not cfg.weights:
        if cfg.head_fraction > 0:
            raise ZooError(f"head_fraction={cfg.head_fraction:g}: a fine-tune's first stage; give weights=RUN_DIR "
                           "(a molecules/dmpnn run) or leave it at 0")
        return cfg, None
    source = finetune.read_source(cfg.weights, ("molecules/dmpnn",))
    theirs = {name: source.config[name] for name in ENCODER_FIELDS if name in source.config}
    return finetune.inherit(cfg, source, theirs, "encoder and featuriser"), Start(source, run.log)


# =============================================================================================
# What the run keeps (each model's best validation state, the scalers, the card), and predict
# =============================================================================================

SCALERS = "scalers.safetensors"


def weights_name(k: int, member: int, splits: int, ensemble: int) -> str:
    return f"model{f'-fold{k}' if splits > 1 else ''}{f'-member{member}' if ensemble > 1 else ''}.safetensors"


def save_dmpnn(cfg: DMPNNConfig, run, table: MolTable, graphs: Graphs, desc, nets: list, scalers: list,
               predicted: list, start: Start | None = None, trees: tuple | None = None) -> None:
    """After scoring: each model's restored best validation weights, each split's scalers (float64 targets,
    float32 descriptors, as computed), ``trees`` (each split's boosters and blend weight), the card and the test
    molecules' predictions. A SimpleRun (tests, notebooks) has no run directory of its own and keeps nothing."""
    if run.spec is None:
        return
    names = [weights_name(k, m, len(nets), cfg.ensemble) for k in range(len(nets)) for m in range(cfg.ensemble)]
    if distributed.is_main():
        for name, net in zip(names, (net for members in nets for net in members)):
            artifact.save_tensors(net.state_dict(), run.dir / name, metadata={"recipe": run.spec.name})
        artifact.save_tensors({f"split{k}.{key}": torch.from_numpy(np.asarray(value))
                               for k, scaler in enumerate(scalers) for key, value in scaler.items()}, run.dir / SCALERS)
    mixed = {"blend": blend.save(run, *trees, write=distributed.is_main())} if trees else {}
    files = [SCALERS, *(f for split in mixed["blend"]["files"] for f in split)] if trees else [SCALERS]
    count = (f"ensemble of {cfg.ensemble} models" if cfg.ensemble > 1 else "one model") + (
        ", blended with XGBoost trees (weights chosen on validation)" if trees else "")
    selected = (f"best-val: {len(nets)} folds x {count} (new data: the mean of all {len(names)})" if len(nets) > 1
                else f"best-val: {count}")
    pre = inference.featuriser(cfg, table, atom_dim=graphs.x.size(1), bond_dim=graphs.edge_attr.size(1),
                               extra_dim=0 if desc is None else desc.shape[1])
    artifact.write_card(run.dir, recipe=run.spec.name, task=table.task, weights=names, selected=selected,
                        preprocess=pre, files=files, evaluation={"folds": len(nets), "ensemble": cfg.ensemble,
                                                                     "batch_size": 256},
                        **({"source": finetune.provenance(start.source)} if start is not None else {}), **mixed)
    artifact.write_predictions(run.dir, inference.split_rows(table, pre["smiles"], predicted, pre))


def load_nets(cfg: DMPNNConfig, run, device) -> list[list[nn.Module]]:
    """The saved models, per split, in evaluation mode on ``device``."""
    pre, card = run.card["preprocess"], run.card
    per_split = card["evaluation"]["ensemble"]
    nets = []
    for i, name in enumerate(card["weights"]):
        net = network(cfg, pre["atom_dim"], pre["bond_dim"], pre["extra_dim"], len(pre["targets"]))
        artifact.load_into(net, run.path(name))
        if i % per_split == 0:
            nets.append([])
        nets[-1].append(net.to(device).eval())
    return nets


def predict_dmpnn(cfg: DMPNNConfig, opts: inference.MolPredictOptions, run) -> artifact.Predictions:
    """New molecules: every saved model's prediction, averaged per split's ensemble, then over splits. No data=:
    each split's test (and validation) molecules by that split's models, scored as the run scored them."""
    pre = inference.check_featuriser(run)
    device = choose_device(run.device)
    nets, task, batch = load_nets(cfg, run, device), pre["task"], opts.batch_size or 256
    saved = artifact.load_tensors(run.path(SCALERS))
    scalers = [{key.split(".", 1)[1]: value.numpy() for key, value in saved.items() if key.startswith(f"split{k}.")}
               for k in range(len(nets))]
    mixed = blend.load(run)

    def ensemble(k: int, graphs: Graphs, desc, rows: np.ndarray, X) -> np.ndarray:
        s = scalers[k]
        extra = None if desc is None else scale_descriptors(desc, s["descriptor_mean"], s["descriptor_std"])
        net = np.mean([unscale(models.predict(net, graphs, rows, extra, device, task, batch), task, s)
                       for net in nets[k]], axis=0)
        return net if mixed is None else blend.mix(mixed, k, net, X[rows])

    if not opts.data:
        table, splits = inference.own_table(cfg, run)
        graphs = feature_cache.cached("graphs", table, featurize, run.log)
        desc = (feature_cache.cached("descriptors", table, rdkit_descriptors, run.log) if pre["descriptors"]
                else None)
        X = None if mixed is None else blend.table_features(cfg, table, run.log, mixed)
        predicted = [(val, ensemble(k, graphs, desc, val, X), test, ensemble(k, graphs, desc, test, X))
                     for k, (_, val, test) in enumerate(splits)]
        return inference.own_split(table, pre["smiles"], predicted, finish(run, table, predicted), pre)
    inp = inference.read_molecules(opts, run, pre)

    def some(mols: list) -> np.ndarray:
        graphs = featurize(mols)
        desc = rdkit_descriptors(mols, pre["descriptors"]) if pre["descriptors"] else None
        rows, X = np.arange(len(mols)), None if mixed is None else blend.features(mixed, mols, desc)
        return np.mean([ensemble(k, graphs, desc, rows, X) for k in range(len(nets))], axis=0)

    return inference.new_rows(inp, inference.in_batches(inp.mols, batch, some, len(pre["targets"]), run), pre)


# =============================================================================================
# The recipe: each split (or fold), each ensemble member, their test predictions averaged
# =============================================================================================

# precision=auto on a CPU: fp32: bf16 no faster (docs/LOG.md#2026-12-04-cpu-precision-esm-finetune-dmpnn-byol), or
# worse at 90 s; on Lipophilicity pass precision=bf16 (docs/LOG.md#2026-12-06-dmpnn-precision-on-family-26).
@recipe("molecules/dmpnn", config=DMPNNConfig, benchmark="esol", metric="test_rmse", higher_is_better=False,
        budget="30s", summary="directed message passing over bonds (chemprop's D-MPNN) in plain torch; random or "
                              "scaffold splits, k-fold, ensembles; RMSE or ROC-AUC",
        predict=predict_dmpnn, predict_options=inference.MolPredictOptions)
def train_dmpnn(cfg: DMPNNConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    cfg, start = from_source(cfg, run)
    table = load_for(cfg, run)
    graphs = feature_cache.cached("graphs", table, featurize, run.log)  # in chunks: a rerun reuses those done
    desc = feature_cache.cached("descriptors", table, rdkit_descriptors, run.log) if cfg.descriptors else None
    if cfg.ensemble < 1:
        raise ZooError(f"ensemble={cfg.ensemble}: must be at least 1")
    splits = splits_for(cfg, table, run)
    if start is not None:
        names = parent_smiles(table)
        finetune.check_unseen(start.source, (names[i] for _, _, test in splits for i in test), "molecules")
    inspect_split(run, table, splits[0], loop=True,
                  fine_tune=(start.new_tensors(table.y.shape[1]) or True) if start is not None else False)
    per_model = Budget(run.budget.kind, run.budget.amount * (1 - cfg.trees) / (cfg.ensemble * len(splits)))
    X = blend.table_features(cfg, table, run.log) if cfg.trees else None  # the trees' input (trees=S)
    tree_seconds = blend.tree_seconds(cfg.trees, run.budget, len(splits), table.y.shape[1])
    predicted, total_seconds, total_steps, last, nets, scalers, begun = [], 0.0, 0, {}, [], [], {}
    trees: tuple[list, list] = ([], [])  # each split's boosters and the D-MPNN's weight in the blend
    for k, (train_idx, val_idx, test_idx) in enumerate(splits):
        members = []
        nets.append([])
        for member in range(cfg.ensemble):
            label = "" if k == 0 and member == 0 else f"fold {k} model {member}"
            predict, stats, net, scaler = train_dmpnn_split(cfg, run, table, graphs, desc, train_idx, val_idx,
                                                            per_model, device, member_seed=run.seed * 1000 + member,
                                                            label=label, start=start)
            members.append(predict)
            nets[k].append(net)
            total_seconds, total_steps = total_seconds + stats["train_seconds"], total_steps + stats.get("steps", 0)
            last = stats
            begun = begun or {name: v for name, v in stats.items() if name.endswith("_start")}  # the first model's
        scalers.append(scaler)  # the split's training rows: the same for each of its members
        # This split's models are final: the ensemble's mean predictions, scored with the others at the end.
        val_pred, test_pred = (np.mean([p(val_idx) for p in members], axis=0),
                               np.mean([p(test_idx) for p in members], axis=0))
        if X is not None:
            began = time.perf_counter()
            boosters, w, val_pred, test_pred = blend.fit_split(cfg, run, table, X, (train_idx, val_idx, test_idx), k,
                                                               tree_seconds, (val_pred, test_pred))
            total_seconds += time.perf_counter() - began
            trees[0].append(boosters)
            trees[1].append(w)
        predicted.append((val_idx, val_pred, test_idx, test_pred))
    metrics = finish(run, table, predicted)
    save_dmpnn(cfg, run, table, graphs, desc, nets, scalers, predicted, start, trees if X is not None else None)
    mixed = {"net_weight": float(np.mean(trees[1]))} if X is not None else {}
    return {**metrics, **begun, **mixed, "train_seconds": total_seconds, "steps": total_steps,
            "params_M": last["params_M"], "peak_mem_mb": last["peak_mem_mb"], "mfu_percent": last["mfu_percent"],
            "molecules": len(table.mols)}
