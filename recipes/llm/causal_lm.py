"""A ``transformers`` causal LM, what ``llm/lora`` trains an adapter on: loaded from a local ``save_pretrained``
folder or the hub (and a finished run's model, the base with its adapter), sampled from, and scored: the loss on
labelled tokens only, each example's response nats, and text encoded with the bytes each token spells.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm import prompt_response


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def load_causal_lm(model_id: str, seq_len: int, dtype: torch.dtype, log=print):
    """Model and tokenizer from a local ``save_pretrained`` folder, or the hub when online (``model_id``), for
    sequences of ``seq_len`` tokens. A broken local folder names its file: config.json, the tokenizer files, or the
    weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # stderr is kept for one-line errors
    try:  # the hub client's own retry notices (offline) would also land on stderr
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()
    except ImportError:
        pass
    if not model_id:
        raise ZooError("llm/lora needs model=PATH: a transformers causal LM folder (or a hub name when online)")
    local = Path(model_id).expanduser()
    if not local.exists() and (local.is_absolute() or model_id.startswith((".", "~")) or model_id.count("/") > 1):
        raise ZooError(f"{model_id}: no such model folder (give a transformers save_pretrained folder)")
    if local.exists() and not (local / "config.json").is_file():
        raise ZooError(f"{local}: not a transformers model folder (no config.json)")
    source = str(local) if local.exists() else model_id
    where = "the folder" if local.exists() else "the hub (offline, or no such model)"
    # a local folder's broken file is named; from the hub, the model name is
    name = (lambda file: str(local / file)) if local.exists() else (lambda file: f"model={model_id}")
    from safetensors import SafetensorError

    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError) as exc:  # unreadable JSON, an unknown model_type
        raise ZooError(f"{name('config.json')}: cannot load the model config from {where}: "
                       f"{_first_line(exc)}") from None
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and seq_len > limit:
        raise ZooError(f"seq_len={seq_len} is over the model's context limit of {limit} tokens "
                       f"(max_position_embeddings in {model_id}/config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:  # tokenizers' own errors are ValueErrors
        where_tok = next((f for f in ("tokenizer.json", "tokenizer_config.json") if (local / f).is_file()),
                         "tokenizer files")
        raise ZooError(f"{name(where_tok)}: cannot load the tokenizer from {where}: {_first_line(exc)}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError, RuntimeError, SafetensorError, EOFError) as exc:
        weights = next((f for f in WEIGHT_FILES if (local / f).is_file()), "") if local.exists() else ""
        why = _first_line(exc)
        if isinstance(exc, RuntimeError) and "mismatched" in why:  # transformers' report of each shape went to its log
            why = "the weights do not fit the shapes in config.json (another size of the model?)"
        raise ZooError(f"{name(weights)}: cannot load the model weights from {where}: {why}") from None
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ZooError(f"model={model_id}: its tokenizer has neither a BOS nor an EOS token to start documents")
    log(f"{model_id}: {model.config.model_type}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params")
    return model, tokenizer, start


def load_trained_lora(base: str, seq_len: int, run_dir: Path, dtype: torch.dtype, log=print):
    """A finished ``llm/lora`` run's model as it was scored: the base model with the saved adapter; when the base is
    no longer there, the run's merged copy (``merge=true``) instead. (model, tokenizer, start)."""
    from peft import PeftModel

    adapter = run_dir / "adapter"
    try:
        model, tokenizer, start = load_causal_lm(base, seq_len, dtype, log)
    except ZooError as exc:
        merged = run_dir / "merged"
        if not (merged / "config.json").is_file():
            raise ZooError(f"{exc} (the base model of the adapter in {adapter}; a run with merge=true also keeps a "
                           "merged copy)") from None
        log(f"the base model is not there ({exc}): using the run's merged copy, {merged}")
        model, tokenizer, start = load_causal_lm(str(merged), seq_len, dtype, log)
        return model.eval(), tokenizer, start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's notices on the base model's config
        model = PeftModel.from_pretrained(model, str(adapter))
    return model.eval(), tokenizer, start


@torch.no_grad()
def sample_hf(model, prompt: list[int], n_tokens: int, temperature: float, top_k: int, seed: int, n: int,
              pad_id: int) -> list[list[int]]:
    """``n`` continuations of ``prompt`` by ``transformers``' ``generate`` (greedy at temperature 0), the RNG seeded
    with ``seed`` (the caller's RNG state is kept)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    sampling = dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=1.0) if temperature > 0 else \
        dict(do_sample=False)
    out = []
    with torch.random.fork_rng(devices=[device] if device.type != "cpu" else [], device_type=device.type):
        torch.manual_seed(seed)
        for _ in range(n):
            seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_tokens,
                                 pad_token_id=pad_id, **sampling)
            out.append(seq[0, len(prompt):].tolist())
    return out


def export_pretrained(base: str, seq_len: int, run, out: Path) -> list[Path]:
    """``zoo export --format pretrained`` of an ``llm/lora`` run on ``base``: ``save_pretrained`` folders, each with
    the tokenizer: ``adapter/`` (peft's ``PeftModel.from_pretrained(base, out/adapter)``) and ``merged/``
    (``AutoModelForCausalLM.from_pretrained``; merged now when the run kept none)."""
    import shutil

    shutil.copytree(run.path("adapter"), out / "adapter", dirs_exist_ok=True)
    if (run.dir / "merged" / "config.json").is_file():
        shutil.copytree(run.dir / "merged", out / "merged", dirs_exist_ok=True)
    else:
        model, tokenizer, _ = load_trained_lora(base, seq_len, run.dir, getattr(torch, run.card["dtype"]), run.log)
        model.merge_and_unload().save_pretrained(str(out / "merged"))
        tokenizer.save_pretrained(str(out / "merged"))
    return [out / "adapter", out / "merged"]


def response_nats(model, batch, device, skip_token: int | None = None) -> tuple[torch.Tensor, int]:
    """Each row's summed next-token cross-entropy over its labelled tokens (optionally not ``skip_token``), and
    how many tokens that is in all."""
    ids, labels, mask = (t.to(device) for t in batch)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    targets = labels[:, 1:]
    if skip_token is not None:
        targets = targets.masked_fill(targets == skip_token, -100)
    nats = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100,
                           reduction="none")
    return nats.view(targets.shape).sum(1), int((targets != -100).sum())


def bytes_per_token(tokenizer, text: str, ids: list[int]) -> torch.Tensor:
    """The UTF-8 bytes each of ``ids`` (``text``'s tokens) spells, summing to the text's bytes: from a fast
    tokenizer's character offsets, token i holds the characters after the previous token's end up to its own
    (the last also any the tokenizer left uncovered). A tokenizer without offsets shares the bytes evenly."""
    total = len(text.encode())
    try:
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    except (NotImplementedError, ValueError, TypeError, KeyError):
        offsets = None
    if offsets is None or len(offsets) != len(ids) or not ids:
        return torch.full((len(ids),), total / max(len(ids), 1), dtype=torch.float64)
    prefix = np.concatenate([[0], np.cumsum([len(c.encode()) for c in text])])
    ends = np.maximum.accumulate(np.clip([e for _, e in offsets], 0, len(text)))
    at = prefix[ends]
    per = np.diff(np.concatenate([[0], at])).astype(np.float64)
    per[-1] += total - at[-1]
    return torch.from_numpy(per)


def encode_text(tokenizer, start: int, docs: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each document as [start] + its tokens, in one stream, and the bytes each predicted token spells (0 for a
    start token between documents)."""
    ids, per_target = [], [torch.zeros(0, dtype=torch.float64)]
    for i, doc in enumerate(docs):
        body = tokenizer(doc, add_special_tokens=False).input_ids
        ids += [start] + body
        per_target += [torch.zeros(int(i > 0), dtype=torch.float64), bytes_per_token(tokenizer, doc, body)]
    return torch.tensor(ids), torch.cat(per_target)


def example_sums(model, examples: list, seq_len: int, pad_id: int, eos: int | None, device, batch: int,
                 progress=None):
    """Each prompt/response example's nats over its whole response (the end token not counted), scored in windows
    of at most ``seq_len`` + 1 tokens (``prompt_response.score_windows``), and its response bytes."""
    windows, owner = [], []
    for i, e in enumerate(examples):
        pieces = prompt_response.score_windows(e, seq_len)
        windows += pieces
        owner += [i] * len(pieces)
    nats = []
    for i in range(0, len(windows), batch):
        nats.append(response_nats(model, prompt_response.pad_examples(windows[i:i + batch], pad_id), device,
                                  skip_token=eos)[0])
        if progress is not None:
            progress(min(i + batch, len(windows)), len(windows), "windows")
    per_example = np.zeros(len(examples), dtype=np.float64)
    np.add.at(per_example, owner, torch.cat(nats).double().cpu().numpy())
    return per_example, np.array([e.response_bytes for e in examples], dtype=np.float64)
