"""protein/onehot: each position one-hot (21 letters) or its BLOSUM62 row, then a ridge, an RBF kernel ridge
(both closed form, the regularisation chosen on validation) or an MLP head. No pretraining: the floor every
protein fitness table needs, and on variants of one protein (deep mutational scans) a strong one."""
from __future__ import annotations

from recipe_zoo.core.api import recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.protein.config import OnehotConfig
from recipe_zoo.recipes.protein.encodings import encode
from recipe_zoo.recipes.protein.heads import fit_head
from recipe_zoo.recipes.protein.inference import SequenceOptions
from recipe_zoo.recipes.protein.loading import load_data, show_split
from recipe_zoo.recipes.protein.saved import predict_fixed, save_fixed_head
from recipe_zoo.recipes.protein.scoring import finish


def predict_onehot(cfg: OnehotConfig, opts: SequenceOptions, run):
    """Sequences (FASTA, or a CSV column) encoded as in training, at the training's length, then the saved head."""
    length = run.card["preprocess"]["length"]
    return predict_fixed(cfg, opts, run, lambda seqs, emb: encode(seqs, cfg.encoding, length))


@recipe("protein/onehot", config=OnehotConfig, benchmark="p62593", metric="test_spearman", higher_is_better=True,
        budget="1m", summary="one-hot or BLOSUM62 per position + ridge / RBF kernel ridge (chosen on validation) "
                             "or an MLP: the no-pretraining floor; Spearman",
        scale_out="single process: a closed-form ridge / kernel ridge or a small MLP head; seconds on one device",
        predict=predict_onehot, predict_options=SequenceOptions, defaults={"target_scale": "standard"})
def train_onehot(cfg: OnehotConfig, run) -> dict[str, float]:
    data = load_data(cfg, run)
    if data.seqs is None:
        raise ZooError(f"{data.name}: holds embeddings, not sequences: use protein/esm-embed")
    show_split(run, data, loop=cfg.head in ("auto", "mlp"))  # the MLP head trains in the core loop
    X = encode(data.seqs, cfg.encoding)
    run.report("features", f"{X.shape[1]} ({cfg.encoding}, {X.shape[1] // (21 if cfg.encoding == 'onehot' else 20)}"
                           " positions)")
    metrics, head, test_pred = fit_head(cfg, run, data, X, scale=False)
    save_fixed_head(run, data, head, test_pred, recipe="protein/onehot",
                    preprocess={"encoding": cfg.encoding, "length": max(len(s) for s in data.seqs), "scale": False})
    return finish(metrics, data)

