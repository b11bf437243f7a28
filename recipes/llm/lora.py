"""``llm/lora``: LoRA fine-tuning of a ``transformers`` causal LM, bits per byte before and after.

The parts are those of ``llm/gpt`` for text; for JSONL, validation and test are chosen by a hash of each
example's content. Validation is scored during training, test once at the end (with and without the adapter).

Reads top to bottom: config, the response-only loss, the adapter, then training. The model is a local
``save_pretrained`` folder (or a hub name when online); the data is text, trained on in windows as
``llm/gpt`` does, or prompt/response JSONL, where the loss and the score are on the response only.
Only the adapter trains (AdamW); it is saved, and optionally merged into the base model.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F

from recipe_zoo.core import artifact, metrics, optim, schedule
from recipe_zoo.core.api import Count, Fraction, NonNegative, Positive, Share, Unit, recipe
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.recipes.llm import data, infer, models

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class LoRAConfig(LoopSettings):
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("val_fraction", "test_fraction", "eval_bytes")
    model: str = ""  # a transformers causal LM: a local save_pretrained folder, or a hub name when online
    data: str = "tinyshakespeare"  # text (as llm/gpt) or a .jsonl of {"prompt", "response"} lines
    val_fraction: Share = 0.05  # validation: as llm/gpt for text; JSONL: the share of examples (by content hash)
    test_fraction: Share = 0.1  # test: as llm/gpt for text; JSONL: the share of examples (by content hash)
    eval_bytes: Count = 100_000  # text: test bytes scored (validation: up to N); JSONL: every held-out response
    rank: Count = 8  # LoRA rank
    alpha: Positive = 16.0  # LoRA scaling numerator (scale = alpha / rank)
    lora_dropout: Fraction = 0.05  # dropout on the LoRA input
    target_modules: str = "all-linear"  # comma-separated module names, or all-linear (every linear but the head)
    lr: Positive = 2e-4  # AdamW LR of the adapter
    weight_decay: NonNegative = 0.0  # AdamW weight decay on the adapter
    schedule: Literal["wsd", "cosine", "linear", "constant"] = "cosine"  # LR shape over budget progress
    warmup: Unit = 0.05  # warmup fraction
    lr_final: NonNegative = 0.1  # LR multiplier at the end
    seq_len: Count = 256  # tokens per training window / longest JSONL example kept whole
    micro_batch: Count = 8  # sequences per forward/backward pass
    clip_grad: NonNegative = 1.0  # max global grad norm
    merge: bool = False  # also save the base model with the adapter merged in (merged/)
    eval_every: Unit = 0.5  # fraction of the budget between validations


# =============================================================================================
# Loss, adapter and training
# =============================================================================================

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


def lora_config(cfg: LoRAConfig):
    from peft import LoraConfig

    targets = cfg.target_modules if cfg.target_modules == "all-linear" else \
        [m.strip() for m in cfg.target_modules.split(",") if m.strip()]
    return LoraConfig(task_type="CAUSAL_LM", r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets)


def encode_text(tokenizer, start: int, docs: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each document as [start] + its tokens, in one stream, and the bytes each predicted token spells (0 for a
    start token between documents)."""
    ids, per_target = [], [torch.zeros(0, dtype=torch.float64)]
    for i, doc in enumerate(docs):
        body = tokenizer(doc, add_special_tokens=False).input_ids
        ids += [start] + body
        per_target += [torch.zeros(int(i > 0), dtype=torch.float64), bytes_per_token(tokenizer, doc, body)]
    return torch.tensor(ids), torch.cat(per_target)


def text_sums(model, tokens, per_target, cfg: LoRAConfig, device, batch: int = 0, progress=None):
    """Each window's nats and bytes, as ``llm/gpt`` scores text."""
    return infer.window_sums(lambda x: model(input_ids=x).logits, tokens, cfg.seq_len, batch or cfg.micro_batch,
                             device, per_target, progress)


def example_sums(model, examples: list, pad_id: int, eos: int | None, device, batch: int, progress=None):
    """Each prompt/response example's nats over its response (the end token not counted) and response bytes."""
    nats = []
    for i in range(0, len(examples), batch):
        nats.append(response_nats(model, data.pad_examples(examples[i:i + batch], pad_id), device, skip_token=eos)[0])
        if progress is not None:
            progress(min(i + batch, len(examples)), len(examples), "examples")
    return torch.cat(nats).double().cpu().numpy(), np.array([e.response_bytes for e in examples], dtype=np.float64)


# =============================================================================================
# The trained model: saved for use, applied to prompts and text (zoo predict), exported
# =============================================================================================

SAMPLE_TOKENS, TEMPERATURE = 160, 0.8  # zoo predict prompt=...: llm/gpt's default sampling


@dataclass
class LoRAPredictOptions(infer.LMPredictOptions):
    before: bool = False  # also score the base model, the adapter off (bpb_before; the run's test: test_bpb_before)


def dtype_of(precision: str) -> torch.dtype:
    return torch.bfloat16 if precision == "bf16" else torch.float32


def save_card(run, cfg: LoRAConfig, precision: str, start: int, rows: list[dict]) -> None:
    jsonl = cfg.data.endswith(".jsonl")
    artifact.write_card(run.dir, recipe=run.spec.name, task="tokens", weights=["adapter"] + ["merged"] * cfg.merge,
                        selected=f"{'ema' if cfg.ema_decay > 0 else 'final'} adapter, on the base model {cfg.model}",
                        preprocess={"tokenizer": "adapter", "start_token": start,
                                    "text": "prompt/response JSONL" if jsonl else "documents after the start token"},
                        evaluation={"metric": "test_bpb", "batch": cfg.micro_batch, "precision": precision,
                                    "scored": "each held-out example's response bytes" if jsonl else
                                    f"the first {cfg.eval_bytes} test bytes in windows of {cfg.seq_len} tokens"},
                        base_model=cfg.model, dtype=str(dtype_of(precision)).removeprefix("torch."))
    artifact.write_predictions(run.dir, rows)


def predict_lora(cfg: LoRAConfig, opts: LoRAPredictOptions, run) -> artifact.Predictions:
    """prompt=/prompts=: continuations (``generate``); data=TEXT or .jsonl: bits per byte, as the run scores text
    or responses; neither: the run's test split scored again. The base model with the saved adapter."""
    prompts = infer.prompts_of(opts)
    device = choose_device(run.device)
    speed_switches(device)
    precision = resolve_precision(device, cfg.precision)
    model, tokenizer, start = models.load_trained_lora(cfg, run.dir, dtype_of(precision), run.log)
    model.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start
    jsonl = opts.data.endswith(".jsonl") or (not opts.data and cfg.data.endswith(".jsonl"))
    if prompts:
        completions = []
        for i, prompt in enumerate(prompts):  # as training began its sequences
            ids = tokenizer(prompt).input_ids if cfg.data.endswith(".jsonl") else \
                [start] + tokenizer(prompt, add_special_tokens=False).input_ids
            with warnings.catch_warnings(), autocast(device, precision):
                warnings.simplefilter("ignore")  # transformers' notices on generation settings
                out = models.sample_hf(model, ids, opts.max_tokens or SAMPLE_TOKENS,
                                       TEMPERATURE if opts.temperature < 0 else opts.temperature, opts.top_k,
                                       run.seed if opts.seed < 0 else opts.seed, opts.n, pad_id)
            completions.append([tokenizer.decode(c, skip_special_tokens=True) for c in out])
            run.progress(i + 1, len(prompts), "prompts")
        return infer.generations(prompts, completions)
    batch, prefix, dropped = opts.batch_size or cfg.micro_batch, "" if opts.data else "test_", []
    if jsonl:
        examples, dropped = infer.jsonl_examples(cfg, opts.data, run, tokenizer)

        def score(m):
            return example_sums(m, examples, pad_id, tokenizer.eos_token_id, device, batch, run.progress)

        def rows(nats, n_bytes):
            return sorted(infer.example_rows(examples, nats, n_bytes) + [{"line": n} for n in dropped],
                          key=lambda r: r["line"])
    else:
        docs = infer.read_documents(opts.data, run)[1] if opts.data else \
            [data.eval_text(data.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run), cfg.eval_bytes)]
        tokens, per_target = encode_text(tokenizer, start, docs)

        def score(m):
            return text_sums(m, tokens, per_target, cfg, device, batch, run.progress)

        def rows(nats, n_bytes):
            return infer.window_rows(nats, n_bytes, cfg.seq_len, len(tokens) - 1, "".join(docs))
    with torch.no_grad(), autocast(device, precision):
        nats, n_bytes = score(model)
        scores = infer.bpb_metrics(nats, n_bytes, prefix)
        if opts.before:
            if not hasattr(model, "disable_adapter"):
                raise ZooError(f"before=true: needs the base model {cfg.model} (only the merged copy is here)")
            with model.disable_adapter():
                base_nats, base_bytes = score(model)
            scores[f"{prefix}bpb_before"] = metrics.bits_per_byte(float(base_nats.sum()), float(base_bytes.sum()))
    return artifact.Predictions(rows=rows(nats, n_bytes), metrics=scores, dropped=len(dropped),
                                arrays={"nats": nats, "bytes": n_bytes})


@recipe("llm/lora", config=LoRAConfig, benchmark="tinyshakespeare", metric="test_bpb", higher_is_better=False,
        budget="5m", summary="LoRA fine-tuning of a transformers causal LM (local folder or hub) on text or "
                             "prompt/response JSONL; bits per byte before and after", predict=predict_lora,
        predict_options=LoRAPredictOptions, exports={"pretrained": models.export_pretrained})
def train_lora(cfg: LoRAConfig, run) -> dict[str, float]:
    from peft import get_peft_model

    device = choose_device(run.device)
    speed_switches(device)
    precision = resolve_precision(device, cfg.precision)
    with warnings.catch_warnings(record=True) as caught:  # library notices go to the log, not stderr
        warnings.simplefilter("always")
        model, tokenizer, start = models.load_causal_lm(cfg, torch.bfloat16 if precision == "bf16" else torch.float32,
                                                        run.log)
        try:
            model = get_peft_model(model, lora_config(cfg))
        except ValueError as exc:
            raise ZooError(f"target_modules={cfg.target_modules}: {str(exc).splitlines()[0]}") from None
    for w in {str(w.message) for w in caught}:
        run.log(f"warning: {w}")
    model.to(device)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    run.log(f"LoRA rank {cfg.rank} alpha {cfg.alpha:g} on {cfg.target_modules}: {trainable / 1e6:.3f}M trainable "
            f"parameters ({100 * trainable / sum(p.numel() for p in model.parameters()):.2f}%)")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start

    if cfg.data.endswith(".jsonl"):
        parts = data.split_examples(data.load_jsonl(Path(cfg.data).expanduser(), tokenizer), cfg.val_fraction,
                                    cfg.test_fraction, cfg.seq_len, cfg.data, run.log)
        train_examples, val_examples = parts.train, parts.val
        batches = TensorBatches((torch.arange(len(train_examples)),), cfg.micro_batch, seed=run.seed,
                                transform=lambda batch, g: data.pad_examples([train_examples[i] for i in batch[0]],
                                                                             pad_id))
        run.log(f"{cfg.data}: {len(train_examples)} train / {len(val_examples)} validation / {len(parts.test)} test "
                f"examples ({sum(e.response_bytes for e in val_examples):,} validation response bytes scored)")
        split_line = (f"{parts.how} ({len(parts.keys['train'])} / {len(parts.keys['validation'])} / "
                      f"{len(parts.keys['test'])} lines; the response bytes are scored)")
        # one row per example (prompt + response token ids): exact duplicates across the splits are found
        run.inspect(train=([e.ids for e in train_examples],), val=([e.ids for e in val_examples],),
                    task="unlabelled", fine_tune=("lora_",))

        def loss_fn(model, batch):
            nats, count = response_nats(model, batch, device)
            return nats.sum() / max(count, 1)

        def score(model, part):  # each example's nats and response bytes
            return example_sums(model, val_examples if part == "validation" else parts.test, pad_id,
                                tokenizer.eos_token_id, device, cfg.micro_batch)

        def rows(nats, n_bytes):
            return infer.example_rows(parts.test, nats, n_bytes)
    else:
        splits = data.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run)
        texts = {"validation": data.eval_text(splits, cfg.eval_bytes, "validation"),
                 "test": data.eval_text(splits, cfg.eval_bytes)}
        parts = splits
        split_line = (f"{splits.how} ({splits.sizes()}; scored: validation {len(texts['validation'].encode()):,} "
                      f"bytes, test the first {cfg.eval_bytes:,})")
        ids = [[start] + tokenizer(d, add_special_tokens=False).input_ids for d in splits.train]
        train_tokens = torch.tensor([t for doc in ids for t in doc], dtype=torch.int32)

        val_tokens, val_bytes = encode_text(tokenizer, start, [texts["validation"]])
        batches = data.TokenWindows(train_tokens, cfg.seq_len, cfg.micro_batch, seed=run.seed, source=splits.name,
                                    device=device)
        run.log(f"{splits.name}: {len(train_tokens):,} train tokens; validation scores "
                f"{len(texts['validation'].encode()):,} bytes = {len(val_tokens) - 1:,} tokens")
        run.inspect(train=(train_tokens,), val=(val_tokens,), task="tokens", fine_tune=("lora_",))

        def loss_fn(model, batch):
            x, y = (t.to(device) for t in batch)
            logits = model(input_ids=x).logits.float()
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

        def score(model, part):  # each window's nats and bytes
            tokens, per_target = (val_tokens, val_bytes) if part == "validation" else \
                encode_text(tokenizer, start, [texts["test"]])
            return text_sums(model, tokens, per_target, cfg, device)

        def rows(nats, n_bytes):
            n_targets = len(encode_text(tokenizer, start, [texts["test"]])[0]) - 1
            return infer.window_rows(nats, n_bytes, cfg.seq_len, n_targets, texts["test"])

    def evaluate(model):
        nats, n_bytes = score(model, "validation")
        return {"val_bpb": metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum()))}

    run.record_split(parts.keys)
    run.report("split", split_line)
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        before = evaluate(model)["val_bpb"]
    model.train()
    run.log(f"val_bpb before fine-tuning: {before:.4f}")
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": cfg.weight_decay}]
    optimizer = optim.adamw(groups, lr=cfg.lr)
    lr = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, final=cfg.lr_final)
    settings = LoopSettings.of(cfg)
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr), settings=settings)
    # The test, once, after training: the fine-tuned model, then the base model (the adapter switched off)
    tested = result.eval_model or model
    tested.eval()
    with torch.no_grad(), autocast(device, precision):
        nats, n_bytes = score(tested, "test")
        with tested.disable_adapter():
            base_nats, base_bytes = score(tested, "test")
    test_bpb = metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum()))
    low, high = data.bpb_interval(nats, n_bytes)
    test_before = metrics.bits_per_byte(float(base_nats.sum()), float(base_bytes.sum()))
    tested.save_pretrained(str(run.dir / "adapter"))  # the adapter the test scored (the EMA's, with ema_decay)
    tokenizer.save_pretrained(str(run.dir / "adapter"))
    if cfg.merge:
        merged = tested.merge_and_unload()
        merged.save_pretrained(str(run.dir / "merged"))
        tokenizer.save_pretrained(str(run.dir / "merged"))
    save_card(run, cfg, precision, start, rows(nats, n_bytes))
    after = result.metrics["val_bpb"]
    run.report("val_bpb_before", f"{before:.4f}")
    run.report("test_bpb_before", f"{test_before:.4f}")
    run.report("trainable_M", f"{trainable / 1e6:.3f}")
    run.log(f"val_bpb {before:.4f} -> {after:.4f} ({after - before:+.4f}); test_bpb {test_before:.4f} -> "
            f"{test_bpb:.4f} (95% interval {low:.4f}-{high:.4f}); adapter saved to {run.dir / 'adapter'}")
    return {**result.stats(), **result.metrics, "test_bpb": test_bpb, "test_bpb_ci_low": low,
            "test_bpb_ci_high": high, "val_bpb_before": before, "test_bpb_before": test_before,
            "trainable_M": trainable / 1e6}
