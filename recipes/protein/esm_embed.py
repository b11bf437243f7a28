"""protein/esm-embed: frozen ESM-2 embeddings (residues mean-pooled, or the BOS token, from one layer), cached
on disk per sequence, or your own NPZ of embeddings; then the heads of protein/onehot (ridge, RBF kernel ridge or
an MLP, chosen on validation). The cheap way to use a protein language model: one forward pass per sequence."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from recipe_zoo.core.api import Count, recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import LoopSettings
from recipe_zoo.core.precision import choose_device, resolve_precision
from recipe_zoo.recipes.protein.config import ESMFields, HeadChoice, HeadFields, ProteinConfig, Representation, replaced
from recipe_zoo.recipes.protein.esm2 import check_digest, embed, load_esm, resolve_layer, weights_digest
from recipe_zoo.recipes.protein.heads import fit_head
from recipe_zoo.recipes.protein.inference import SequenceOptions
from recipe_zoo.recipes.protein.loading import load_data, show_split
from recipe_zoo.recipes.protein.saved import predict_fixed, save_fixed_head
from recipe_zoo.recipes.protein.scoring import finish


@dataclass
class EmbedConfig(ProteinConfig, HeadFields, HeadChoice, ESMFields, Representation, LoopSettings):
    data: str = "tem1-esm2-8m"  # dataset name (zoo data list), or a FASTA / CSV file, or an NPZ of embeddings
    toks_per_batch: Count = 8192  # tokens per embedding forward pass


EmbedConfig.REPLACED = replaced(EmbedConfig)


@dataclass
class EmbedOptions(SequenceOptions):
    esm_weights: str = ""  # the ESM-2 .pt file to embed with ('' = the run's); checked against the run's weights


def predict_esm_embed(cfg: EmbedConfig, opts: EmbedOptions, run):
    """Sequences embedded as in training (the same ESM-2, checked by a digest of its weights, layer and pooling;
    cached per sequence) or an NPZ of embeddings, then the saved head."""
    pre = run.card["preprocess"]
    esm = {}  # loaded on first use: an NPZ needs no model

    def featurize(seqs, emb):
        if emb is not None:
            if emb.shape[1] != pre["width"]:
                raise ZooError(f"data={opts.data or cfg.data}: embeddings {emb.shape[1]} wide; the head was fitted on "
                               f"{pre['width']}")
            return emb
        if pre["source"] == "npz":
            raise ZooError(f"data={opts.data}: this run's head was fitted on precomputed embeddings, not on ESM-2's: "
                           "give an .npz with 'emb'")
        if not esm:
            model, alphabet, what = load_esm(dataclasses.replace(cfg, esm_weights=opts.esm_weights or cfg.esm_weights),
                                             run)
            check_digest(model, pre["esm"], what)
            esm.update(model=model, alphabet=alphabet)
        device = choose_device(run.device)
        toks = opts.batch_size * (max(map(len, seqs)) + 2) if opts.batch_size else cfg.toks_per_batch
        return embed(esm["model"], esm["alphabet"], seqs, pre["layer"], pre["pool"], device,
                     resolve_precision(device, cfg.precision), toks, run.log,
                     lambda done, total: run.progress(done, total, "sequences embedded"))

    return predict_fixed(cfg, opts, run, featurize, npz=True)


# precision=auto on a CPU: fp32 (bf16 slower for so small a head: docs/LOG.md#2026-12-04-esm-embed-mlp-head-fp32)
@recipe("protein/esm-embed", config=EmbedConfig, benchmark="tem1-esm2-8m", metric="test_spearman",
        higher_is_better=True, budget="1m",
        summary="frozen ESM-2 embeddings (cached per sequence) or your own .npz, + ridge / RBF kernel ridge / MLP head",
        scale_out="single process: the embeddings are cached once and the head is a ridge or a small MLP",
        predict=predict_esm_embed, predict_options=EmbedOptions)
def train_esm_embed(cfg: EmbedConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    show_split(run, data, loop=cfg.head in ("auto", "mlp"))  # the MLP head trains in the core loop
    start = time.perf_counter()
    if data.emb is not None:
        X = data.emb
        run.report("embeddings", f"precomputed, {X.shape[1]} wide, from {data.name}")
        preprocess = {"source": "npz", "width": X.shape[1], "scale": True}
    else:
        device = choose_device(run.device)
        model, alphabet, what = load_esm(cfg, run)
        layer = resolve_layer(model, cfg.layer)
        precision = resolve_precision(device, cfg.precision)
        X = embed(model, alphabet, data.seqs, layer, cfg.pool, device, precision, cfg.toks_per_batch, run.log)
        run.report("embeddings", f"{what}, layer {layer}, {cfg.pool} pooled, {X.shape[1]} wide")
        preprocess = {"source": "esm", "width": X.shape[1], "scale": True, "layer": layer, "pool": cfg.pool,
                      "precision": precision, "esm": {"model": cfg.esm_model, "weights": cfg.esm_weights,
                                                      "what": what, "digest": weights_digest(model)}}
    embed_seconds = time.perf_counter() - start  # a one-off cache: logged, not in train_seconds
    run.log(f"embeddings ready in {embed_seconds:.1f}s (not counted in train_seconds)")
    metrics, head, test_pred = fit_head(cfg, run, data, X, scale=True)
    save_fixed_head(run, data, head, test_pred, recipe="protein/esm-embed", preprocess=preprocess)
    metrics["embed_seconds"] = embed_seconds
    return finish(metrics, data)

