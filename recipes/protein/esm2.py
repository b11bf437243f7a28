"""ESM-2 (fair-esm): weights by name (the torch hub cache, downloaded when online), from a local file, or a
randomly initialised model; tokens; pooled embeddings cached on disk per sequence; masked marginals
(Meier et al. 2021) for zero-shot mutation scores."""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from recipe_zoo.core.artifact import PredictRun
from recipe_zoo.core.checkpoint import read_weights
from recipe_zoo.core.datasets import sha256_file
from recipe_zoo.core.downloads import download
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import autocast
from recipe_zoo.core.progress import Progress
from recipe_zoo.recipes.protein.config import ESMFields
from recipe_zoo.recipes.protein.embed_cache import ShardWriter, read_shards, sequence_key

# =============================================================================================
# ESM-2 weights: fair-esm names (torch hub cache, downloaded when online), a local file, or scratch
# =============================================================================================

ESM_URL = "https://dl.fbaipublicfiles.com/fair-esm/models/{}.pt"
ESM2_MODELS = ("esm2_t6_8M_UR50D", "esm2_t12_35M_UR50D", "esm2_t30_150M_UR50D", "esm2_t33_650M_UR50D",
               "esm2_t36_3B_UR50D", "esm2_t48_15B_UR50D")


def read_esm_file(path: Path) -> tuple[nn.Module, object]:
    """A fair-esm checkpoint ({'cfg': {'model': Namespace}, 'model': state}) read with weights_only=True:
    tensors and the config namespace only, so a file carrying code is refused, not run."""
    import esm

    data = read_weights(path, allow=(argparse.Namespace,))
    if not isinstance(data, dict) or not {"cfg", "model"} <= set(data):
        raise ZooError(f"{path}: not a fair-esm checkpoint (expected a dict with 'cfg' and 'model')")
    name = path.stem if path.stem.startswith(("esm1", "esm2")) else "esm2"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "regression weights not found": the contact head is not used
            model, alphabet = esm.pretrained.load_model_and_alphabet_core(name, data, None)
    except (RuntimeError, AttributeError, KeyError) as exc:
        raise ZooError(f"{path}: does not match the ESM architecture its config names "
                       f"({str(exc).splitlines()[0][:200]})") from None
    return model, alphabet


def load_esm(cfg: ESMFields, run) -> tuple[nn.Module, object, str]:
    """(model, alphabet, description): a scratch model, a local file, or a fair-esm name. A file is checked against
    ``esm_sha256`` when given, before it is read; its sha256 is in the description either way (fair-esm publishes
    no checksums: a run's log gives the value to pin)."""
    import esm

    if cfg.esm_model == "scratch":
        torch.manual_seed(run.seed)
        model = esm.model.esm2.ESM2(num_layers=cfg.scratch_layers, embed_dim=cfg.scratch_dim,
                                    attention_heads=cfg.scratch_heads, alphabet="ESM-1b", token_dropout=False)
        return model, model.alphabet, (f"ESM-2 from scratch ({cfg.scratch_layers} layers, width {cfg.scratch_dim}, "
                                       "random init)")
    if cfg.esm_weights:
        path = Path(cfg.esm_weights).expanduser()
        if not path.is_file():
            raise ZooError(f"esm_weights={cfg.esm_weights}: no such file (a fair-esm .pt checkpoint, e.g. "
                           f"{ESM_URL.format(ESM2_MODELS[0])})")
    else:
        if not re.fullmatch(r"esm[\w.]+", cfg.esm_model):
            raise ZooError(f"esm_model={cfg.esm_model!r}: a fair-esm name ({', '.join(ESM2_MODELS)}) or scratch")
        path = Path(torch.hub.get_dir()) / "checkpoints" / f"{cfg.esm_model}.pt"
        if not path.is_file():
            try:
                if isinstance(run, PredictRun):  # zoo predict's run does not download
                    raise ZooError("not downloaded when predicting")
                download(ESM_URL.format(cfg.esm_model), path, sha256=cfg.esm_sha256.lower() or None, timeout=30)
            except ZooError as exc:
                reason = str(exc).rsplit(": ", 1)[-1]
                raise ZooError(f"ESM weights {cfg.esm_model} are not on this machine and the download failed "
                               f"({reason}): put {cfg.esm_model}.pt in {path.parent}/ or pass esm_weights=PATH.pt"
                               ) from None
    digest = sha256_file(path)
    if cfg.esm_sha256 and digest != cfg.esm_sha256.lower():
        raise ZooError(f"{path}: sha256 {digest}, not the esm_sha256={cfg.esm_sha256} given; not read")
    model, alphabet = read_esm_file(path)
    return model, alphabet, f"{path.name} ({model.num_layers} layers, width {model.embed_dim}, sha256 {digest})"


# =============================================================================================
# Tokens and pooled embeddings, cached per sequence
# =============================================================================================

def weights_digest(model: nn.Module) -> str:
    """A content hash of the weights: the embedding cache key, whatever the file is called. Without the contact
    head: fair-esm files lack its regression weights, so each load draws them at random, and nothing here uses it."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        if name.startswith("contact_head."):
            continue
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def tokenize(alphabet, seqs: list[str]) -> torch.Tensor:
    """(n, longest + 2) token ids: BOS, residues, EOS, padding."""
    _, _, tokens = alphabet.get_batch_converter()([(str(i), s) for i, s in enumerate(seqs)])
    return tokens


def length_batches(seqs: list[str], toks_per_batch: int) -> list[list[int]]:
    """Indices grouped by length (longest first) so each forward pass holds about toks_per_batch tokens."""
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * (len(seqs[current[0]]) + 2) > toks_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current] if current else batches


def pool_tokens(rep: torch.Tensor, tokens: torch.Tensor, alphabet, pool: str) -> torch.Tensor:
    if pool == "bos":
        return rep[:, 0]
    residues = (tokens != alphabet.padding_idx) & (tokens != alphabet.cls_idx) & (tokens != alphabet.eos_idx)
    return (rep * residues.unsqueeze(-1)).sum(1) / residues.sum(1, keepdim=True).clamp(min=1)


def resolve_layer(model: nn.Module, layer: int) -> int:
    if not -model.num_layers - 1 <= layer <= model.num_layers:
        raise ZooError(f"layer={layer}: the model has layers 0..{model.num_layers}")
    return layer % (model.num_layers + 1)


def features_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo" / "features" / "esm"


def check_digest(model: nn.Module, card_esm: dict, what: str) -> None:
    """Predict on the ESM-2 weights the run used: a file of the same name with other weights is one line."""
    digest = weights_digest(model)
    if digest != card_esm["digest"]:
        raise ZooError(f"{what}: not the ESM-2 weights this run was trained with (weights digest {digest}, the run's "
                       f"{card_esm['digest']}); pass esm_weights=PATH.pt of the run's model")


@torch.inference_mode()
def embed(model: nn.Module, alphabet, seqs: list[str], layer: int, pool: str, device, precision: str,
          toks_per_batch: int, log, progress=None) -> np.ndarray:
    """(n, width) pooled embeddings, cached on disk per (weights, layer, pool, precision) and sequence:
    a sequence embedded once is never embedded again by the same model, in any dataset. The cache is written in
    shards as embedding runs (``embed_cache``): a run stopped mid-way keeps them and the next embeds only the rest,
    in the same batches. ``progress(done, total)``: called after each forward pass (default: a log line every few
    seconds)."""
    folder = features_root() / f"{weights_digest(model)}-layer{layer}-{pool}-{precision}"
    keys = [sequence_key(s) for s in seqs]
    found = read_shards(folder, model.embed_dim, log)
    todo = sorted({s for s, k in zip(seqs, keys) if k not in found})
    if not todo:
        log(f"all {len(seqs)} embeddings from the cache {folder}")
        return np.stack([found[k] for k in keys])
    start, lines = time.perf_counter(), Progress(len(todo), "embedding", log, "sequences")  # a line every 5 s
    model.eval().to(device)
    writer, done = ShardWriter(folder), 0
    try:
        for idx in length_batches(todo, toks_per_batch):
            batch = [todo[i] for i in idx]
            tokens = tokenize(alphabet, batch).to(device)
            with autocast(device, precision):
                rep = model(tokens, repr_layers=[layer])["representations"][layer]
            emb = pool_tokens(rep.float(), tokens, alphabet, pool).cpu().numpy().astype(np.float32)
            batch_keys = [sequence_key(s) for s in batch]
            found.update(zip(batch_keys, emb))
            writer.add(batch_keys, emb)
            done += len(batch)
            if progress is None:
                lines.update(len(batch))
            else:
                progress(done, len(todo))
    finally:
        writer.flush()  # also on Ctrl-C or an error: the batches done are kept
    seconds = time.perf_counter() - start
    cached = len(set(keys)) - len(todo)  # distinct sequences: a duplicate is embedded once, not read back
    log(f"embedded {len(todo)} new sequences in {seconds:.1f}s ({cached} from the cache {folder}; "
        f"{len(todo) / max(seconds, 1e-9):.1f}/s, written in {writer.shards} shard{'s' * (writer.shards != 1)})")
    return np.stack([found[k] for k in keys])


# =============================================================================================
# Zero-shot: masked marginals
# =============================================================================================

@torch.inference_mode()
def masked_marginals(model: nn.Module, alphabet, wt: str, positions: list[int], device, precision: str,
                     toks_per_batch: int, progress=None) -> dict[int, torch.Tensor]:
    """Position -> log-probabilities over the alphabet with that position masked (Meier et al. 2021).
    ``progress(done, total)``: called after each forward pass."""
    model.eval().to(device)
    base = tokenize(alphabet, [wt])[0]
    per_batch = max(1, toks_per_batch // len(base))
    out = {}
    for i in range(0, len(positions), per_batch):
        chunk = positions[i:i + per_batch]
        tokens = base.repeat(len(chunk), 1)
        rows = torch.arange(len(chunk))
        cols = torch.tensor(chunk) + 1  # after BOS
        tokens[rows, cols] = alphabet.mask_idx
        with autocast(device, precision):
            logits = model(tokens.to(device))["logits"].float().cpu()
        logp = torch.log_softmax(logits[rows, cols], dim=-1)
        out.update(zip(chunk, logp))
        if progress is not None:
            progress(len(out), len(positions))
    return out

