"""protein/esm-finetune: ESM-2 with a new MLP head on its pooled residues, fine-tuned with LoRA on the attention
projections (peft) or end to end, AdamW with warmup + cosine and layer-wise LR decay towards the input; the best
validation state predicts the test rows. esm_model=scratch trains a small ESM-2 from random init instead, the
baseline that says what pretraining buys."""
from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import torch
from torch import nn

from recipe_zoo.core import artifact, optim
from recipe_zoo.core.api import recipe
from recipe_zoo.core.distributed import is_main
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision
from recipe_zoo.recipes.protein.config import FinetuneConfig, head_dropout
from recipe_zoo.recipes.protein.esm2 import check_digest, load_esm, pool_tokens, resolve_layer, tokenize, weights_digest
from recipe_zoo.recipes.protein.inference import (SequenceOptions, prediction_columns, read_new, split_metrics,
                                                  split_rows)
from recipe_zoo.recipes.protein.loading import load_data, show_split
from recipe_zoo.recipes.protein.scoring import final_metrics, finish, primary_metric
from recipe_zoo.recipes.protein.supervised import MLPHead, target_scaling, train_supervised, unscaled

# =============================================================================================
# Model: ESM-2 + a head on pooled residues; LoRA (peft) or every weight
# =============================================================================================

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj"]


class ESMRegressor(nn.Module):
    """ESM-2 residues pooled (mean or BOS) into an MLP head."""

    def __init__(self, esm_model: nn.Module, alphabet, layer: int, pool: str, out: int, hidden: int, dropout: float):
        super().__init__()
        self.esm, self.alphabet, self.layer, self.pool = esm_model, alphabet, layer, pool
        self.head = MLPHead(esm_model.embed_dim, hidden, out, dropout)  # a peft wrapper forwards the attribute

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        rep = self.esm(tokens, repr_layers=[self.layer])["representations"][self.layer]
        return self.head(pool_tokens(rep, tokens, self.alphabet, self.pool))


# =============================================================================================
# Optimizer: AdamW groups with layer-wise LR decay (the core's optim.layer_decay)
# =============================================================================================

def layer_of(name: str, num_layers: int) -> int:
    """Depth of a backbone parameter for layer-wise decay: 0 embeddings, i + 1 block i, top for the rest."""
    m = re.search(r"layers\.(\d+)\.", name)
    if m:
        return int(m.group(1)) + 1
    return 0 if "embed_tokens" in name else num_layers + 1


def finetune_groups(model: ESMRegressor, num_layers: int, lr: float, cfg: FinetuneConfig) -> list[dict]:
    """AdamW groups: backbone LR x layer_decay^(depth from the top), no decay on biases/norms/embeddings;
    the head at head_lr."""
    depth = {name: layer_of(name, num_layers) for name, p in model.named_parameters()
             if p.requires_grad and not name.startswith("head.")}
    lr_scale = optim.layer_decay(depth, cfg.layer_decay, top=num_layers + 1)  # the top is above the last block
    groups: dict[tuple, dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = 0.0 if optim.no_decay(name, p) or "embed_tokens" in name else cfg.weight_decay
        if name.startswith("head."):
            key, group_lr = ("head", decay), cfg.head_lr
        else:
            key, group_lr = (depth[name], decay), lr * lr_scale[name]
        groups.setdefault(key, {"params": [], "lr": group_lr, "weight_decay": decay})["params"].append(p)
    return list(groups.values())


# =============================================================================================
# Evaluation and training
# =============================================================================================

@torch.no_grad()
def predict_tokens(model: nn.Module, tokens: torch.Tensor, device, precision: str, batch: int) -> np.ndarray:
    model.eval()
    out = []
    for i in range(0, len(tokens), batch):
        with autocast(device, precision):
            out.append(model(tokens[i:i + batch].to(device)).float().cpu())
    model.train()
    return torch.cat(out).numpy()


# =============================================================================================
# What the run keeps (LoRA: the peft adapter + the head; full / scratch: every weight), and predict
# =============================================================================================

def save_finetuned(run, cfg: FinetuneConfig, data, model: ESMRegressor, mode: str, base_digest: str | None,
                   test_pred: np.ndarray) -> None:
    state = model.state_dict()
    if mode == "lora":
        weights = ["adapter", "head.safetensors"]
        tensors = {k: v for k, v in state.items() if k.startswith("head.")}
    else:  # clones: ESM-2 ties its LM head to the token embedding, and safetensors refuses shared storage
        weights, tensors = ["model.safetensors"], {k: v.clone() for k, v in state.items()}
    if is_main():
        if mode == "lora":
            model.esm.save_pretrained(run.dir / "adapter")
        artifact.save_tensors(tensors, run.dir / weights[-1])
    esm = model.esm.get_base_model() if mode == "lora" else model.esm
    mean, std = target_scaling(data)
    artifact.write_card(
        run.dir, recipe=artifact.recipe_name(run, "protein/esm-finetune"), task=data.task, weights=weights,
        classes=data.classes,
        selected=f"best-val ({'the LoRA adapter and head' if mode == 'lora' else 'every weight'} at the best "
                 "validation state)",
        preprocess={"layer": model.layer, "pool": model.pool, "target_mean": mean, "target_std": std,
                    "esm": {"model": cfg.esm_model, "weights": cfg.esm_weights, "digest": base_digest, "mode": mode,
                            "layers": esm.num_layers, "width": esm.embed_dim, "heads": esm.attention_heads,
                            "token_dropout": esm.token_dropout}},
        head={"out": model.head.net[4].out_features, "hidden": model.head.net[1].out_features,
              "dropout": model.head.net[0].p})
    artifact.write_predictions(run.dir, split_rows(data, data.split[2], test_pred))


def load_finetuned(cfg: FinetuneConfig, opts, run) -> ESMRegressor:
    import esm as fair_esm
    from peft import PeftModel

    pre, head = run.card["preprocess"], run.card["head"]
    spec = pre["esm"]
    if spec["mode"] == "lora":  # the base model as trained on (checked), then the adapter
        base, _, what = load_esm(dataclasses.replace(cfg, esm_weights=opts.esm_weights or cfg.esm_weights), run)
        check_digest(base, spec, what)
        backbone = PeftModel.from_pretrained(base, str(run.path("adapter")))
        names = ["head.safetensors"]
    else:  # every weight was trained: the architecture alone, then the saved state
        backbone = fair_esm.model.esm2.ESM2(num_layers=spec["layers"], embed_dim=spec["width"],
                                            attention_heads=spec["heads"], alphabet="ESM-1b",
                                            token_dropout=spec["token_dropout"])
        names = ["model.safetensors"]
    model = ESMRegressor(backbone, backbone.alphabet, pre["layer"], pre["pool"], head["out"], head["hidden"],
                         head["dropout"])
    path = run.path(names[0])
    state = artifact.load_tensors(path)
    if spec["mode"] == "lora":
        artifact.fit_state(model.head, {k.removeprefix("head."): v for k, v in state.items()}, path)
    else:
        artifact.fit_state(model, state, path)
    return model


@dataclasses.dataclass
class FinetuneOptions(SequenceOptions):
    esm_weights: str = ""  # LoRA runs: the base ESM-2 .pt file ('' = the run's); checked against the run's weights


def predict_esm_finetune(cfg: FinetuneConfig, opts: FinetuneOptions, run) -> artifact.Predictions:
    """Sequences through the fine-tuned ESM-2 and head (evaluation mode, the run's precision rule), in batches."""
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    model = load_finetuned(cfg, opts, run).to(device)
    pre, card = run.card["preprocess"], run.card
    batch = opts.batch_size or (cfg.batch_size or 16) * 4  # the run's evaluation batch

    def predict(tokens):
        return unscaled(predict_tokens(model, tokens, device, precision, batch), pre["target_mean"],
                        pre["target_std"], card["task"])

    if not opts.data:
        data = load_data(cfg, run)
        tokens = tokenize(model.alphabet, data.seqs)  # padded to the data's longest, as in training
        _, val, test = data.split
        test_pred = predict(tokens[test])
        return artifact.Predictions(rows=split_rows(data, test, test_pred),
                                    metrics=split_metrics(data, predict(tokens[val]), test_pred),
                                    arrays={"prediction": test_pred})
    new = read_new(opts.data, cfg, opts.sequence or cfg.sequence)
    parts = []
    for start in range(0, len(new.seqs), batch):
        parts.append(predict(tokenize(model.alphabet, new.seqs[start:start + batch])))
        run.progress(min(start + batch, len(new.seqs)), len(new.seqs), "sequences predicted")
    pred = np.concatenate(parts)
    rows = [{**r, **prediction_columns(card["task"], card["classes"], p)} for r, p in zip(new.rows, pred)]
    return artifact.Predictions(rows=rows, arrays={"prediction": pred})


def export_pretrained(cfg: FinetuneConfig, run, out) -> list:
    """A LoRA run as peft's save_pretrained folder (PeftModel.from_pretrained over the base ESM-2) + the head."""
    import shutil

    if run.card["preprocess"]["esm"]["mode"] != "lora":
        raise ZooError(f"{run.dir}: --format pretrained is the LoRA adapter; this run fine-tuned every weight "
                       "(--format safetensors)")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run.path("adapter"), out / "adapter", dirs_exist_ok=True)
    for name in ("head.safetensors", artifact.CARD):
        shutil.copy2(run.path(name), out / name)
    return [out / "adapter", out / "head.safetensors", out / artifact.CARD]


# precision=auto on a CPU: fp32 (bf16 no faster: docs/LOG.md#2026-12-04-cpu-precision-esm-finetune-dmpnn-byol)
@recipe("protein/esm-finetune", config=FinetuneConfig, benchmark="p62593", metric="test_spearman",
        higher_is_better=True, budget="5m",
        summary="ESM-2 + head fine-tuned with LoRA on the attention (peft) or end to end, warmup + cosine, "
                "layer-wise LR decay; esm_model=scratch trains one from random init",
        predict=predict_esm_finetune, predict_options=FinetuneOptions, exports={"pretrained": export_pretrained})
def train_esm_finetune(cfg: FinetuneConfig, run) -> dict[str, float]:
    from peft import LoraConfig, get_peft_model

    data = load_data(cfg, run)
    if data.seqs is None:
        raise ZooError(f"{data.name}: holds embeddings, not sequences: use protein/esm-embed")
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    backbone, alphabet, what = load_esm(cfg, run)
    layer, num_layers = resolve_layer(backbone, cfg.layer), backbone.num_layers
    scratch = cfg.esm_model == "scratch"
    mode = "full" if scratch else cfg.finetune
    show_split(run, data, loop=True, fine_tune=False if scratch else ("head.net.", "lora_"))  # new tensors
    base_digest = weights_digest(backbone) if mode == "lora" else None  # predict checks the base it loads
    if mode == "lora":
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=LORA_TARGETS, bias="none")
        backbone = get_peft_model(backbone, lora)
    torch.manual_seed(run.seed)
    out = 1 if data.task == "regression" else len(data.classes)
    dropout = head_dropout(cfg, by_split=False)  # the rule for held-out positions is measured on fixed features only
    model = ESMRegressor(backbone, alphabet, layer, cfg.pool, out, cfg.hidden, dropout).to(device)
    lr = cfg.lr or (1e-3 if scratch or mode == "lora" else 3e-5)
    optimizer = optim.adamw(finetune_groups(model, num_layers, lr, cfg), lr=lr)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    run.log(f"{what}; {mode}: {trainable / 1e6:.3f}M of {total / 1e6:.2f}M parameters trained, backbone LR {lr:g}"
            f"{f', layer decay {cfg.layer_decay}' if cfg.layer_decay != 1 else ''}, head LR {cfg.head_lr:g}")
    batch = cfg.batch_size or 16
    tokens = tokenize(alphabet, data.seqs)
    model, stats, predict_test = train_supervised(
        cfg, run, data, model, tokens, batch, optimizer, device,
        functools.partial(predict_tokens, device=device, precision=precision, batch=batch * 4))
    run.report("model", f"{what}, {mode}{f' r={cfg.lora_r}' if mode == 'lora' else ''}, "
                        f"{trainable / 1e6:.3f}M trained")
    test_pred = predict_test()  # test, once
    metrics = final_metrics(data, stats[f"best_val_{primary_metric(data.task)[0]}"], test_pred)
    save_finetuned(run, cfg, data, model, mode, base_digest, test_pred)
    return finish({**metrics,
                   **{k: stats[k] for k in ("train_seconds", "steps", "samples_per_s", "params_M", "peak_mem_mb",
                                            "mfu_percent") if k in stats}},
                  data)

