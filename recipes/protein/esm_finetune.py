"""protein/esm-finetune: ESM-2 with a new MLP head on its pooled residues, fine-tuned with LoRA on the attention
projections (peft) or end to end, AdamW with warmup + cosine and layer-wise LR decay towards the input; the best
validation state predicts the test rows. esm_model=scratch trains a small ESM-2 from random init instead, the
baseline that says what pretraining buys."""
from __future__ import annotations

import functools
import re

import numpy as np
import torch
from torch import nn

from recipe_zoo.core import optim
from recipe_zoo.core.api import recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision
from recipe_zoo.recipes.protein.config import FinetuneConfig
from recipe_zoo.recipes.protein.data import final_metrics, finish, load_data, primary_metric, show_split
from recipe_zoo.recipes.protein.esm2 import load_esm, pool_tokens, resolve_layer, tokenize
from recipe_zoo.recipes.protein.models import MLPHead, train_supervised

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


@recipe("protein/esm-finetune", config=FinetuneConfig, benchmark="p62593", metric="test_spearman",
        higher_is_better=True, budget="5m",
        summary="ESM-2 + head fine-tuned with LoRA on the attention (peft) or end to end, warmup + cosine, "
                "layer-wise LR decay; esm_model=scratch trains one from random init")
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
    if mode == "lora":
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=LORA_TARGETS, bias="none")
        backbone = get_peft_model(backbone, lora)
    torch.manual_seed(run.seed)
    out = 1 if data.task == "regression" else len(data.classes)
    model = ESMRegressor(backbone, alphabet, layer, cfg.pool, out, cfg.hidden, cfg.dropout).to(device)
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
    if mode == "lora":
        model.esm.save_pretrained(run.dir / "adapter")
    torch.save({k: v for k, v in model.state_dict().items() if k.startswith("head.")}, run.dir / "head.pt")
    run.report("model", f"{what}, {mode}{f' r={cfg.lora_r}' if mode == 'lora' else ''}, "
                        f"{trainable / 1e6:.3f}M trained")
    metrics = final_metrics(data, stats[f"best_val_{primary_metric(data.task)[0]}"], predict_test())  # test, once
    return finish({**metrics,
                   **{k: stats[k] for k in ("train_seconds", "params_M", "peak_mem_mb", "mfu_percent") if k in stats}},
                  data)

