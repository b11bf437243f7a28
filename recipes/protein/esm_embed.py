"""protein/esm-embed: frozen ESM-2 embeddings (residues mean-pooled, or the BOS token, from one layer), cached
on disk per sequence, or your own NPZ of embeddings; then the heads of protein/onehot (ridge, RBF kernel ridge or
an MLP, chosen on validation). The cheap way to use a protein language model: one forward pass per sequence."""
from __future__ import annotations

import time
from dataclasses import dataclass

from recipe_zoo.core.api import Count, recipe
from recipe_zoo.core.loop import LoopSettings
from recipe_zoo.core.precision import choose_device, resolve_precision
from recipe_zoo.recipes.protein.config import ESMFields, HeadFields, ProteinConfig, Representation, replaced
from recipe_zoo.recipes.protein.data import finish, load_data, show_split
from recipe_zoo.recipes.protein.esm2 import embed, load_esm, resolve_layer
from recipe_zoo.recipes.protein.models import fit_head


@dataclass
class EmbedConfig(ProteinConfig, HeadFields, ESMFields, Representation, LoopSettings):
    data: str = "tem1-esm2-8m"  # dataset name (zoo data list), or a FASTA / CSV file, or an NPZ of embeddings
    toks_per_batch: Count = 8192  # tokens per embedding forward pass


EmbedConfig.REPLACED = replaced(EmbedConfig)


@recipe("protein/esm-embed", config=EmbedConfig, benchmark="tem1-esm2-8m", metric="test_spearman",
        higher_is_better=True, budget="1m",
        summary="frozen ESM-2 embeddings (cached per sequence) or your own .npz, + ridge / RBF kernel ridge / MLP head",
        scale_out="single process: the embeddings are cached once and the head is a ridge or a small MLP")
def train_esm_embed(cfg: EmbedConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    show_split(run, data, loop=cfg.head in ("auto", "mlp"))  # the MLP head trains in the core loop
    start = time.perf_counter()
    if data.emb is not None:
        X = data.emb
        run.report("embeddings", f"precomputed, {X.shape[1]} wide, from {data.name}")
    else:
        device = choose_device(run.device)
        model, alphabet, what = load_esm(cfg, run)
        layer = resolve_layer(model, cfg.layer)
        X = embed(model, alphabet, data.seqs, layer, cfg.pool, device, resolve_precision(device, cfg.precision),
                  cfg.toks_per_batch, run.log)
        run.report("embeddings", f"{what}, layer {layer}, {cfg.pool} pooled, {X.shape[1]} wide")
    embed_seconds = time.perf_counter() - start  # a one-off cache: logged, not in train_seconds
    run.log(f"embeddings ready in {embed_seconds:.1f}s (not counted in train_seconds)")
    metrics = fit_head(cfg, run, data, X, scale=True)
    metrics["embed_seconds"] = embed_seconds
    return finish(metrics, data)

