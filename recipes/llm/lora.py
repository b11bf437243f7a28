"""``llm/lora``: LoRA fine-tuning of a ``transformers`` causal LM, bits per byte before and after.

The parts are those of ``llm/gpt`` for text; for JSONL, validation and test are chosen by a hash of each
example's content. Validation is scored during training, test once at the end (with and without the adapter).

Reads top to bottom: config, the adapter and the data, what is saved for use and ``zoo predict``, then training.
The model is a local ``save_pretrained`` folder (or a hub name when online; ``causal_lm``); the data is text,
trained on in windows as ``llm/gpt`` does, or prompt/response JSONL, where the loss and the score are on the
response only. Only the adapter trains (AdamW); it is saved, and optionally merged into the base model.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from recipe_zoo.core import artifact, items, metrics, optim, schedule
from recipe_zoo.core.api import Count, Fraction, NonNegative, Positive, Share, Unit, recipe
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.recipes.llm import datasets as _datasets  # noqa: F401  (declares the domain's datasets)
from recipe_zoo.recipes.llm import causal_lm, inference, prompt_response, scoring, text_splits, token_windows

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
# The adapter, and the data as training and zoo predict read it
# =============================================================================================

def lora_config(cfg: LoRAConfig):
    from peft import LoraConfig

    targets = cfg.target_modules if cfg.target_modules == "all-linear" else \
        [m.strip() for m in cfg.target_modules.split(",") if m.strip()]
    return LoraConfig(task_type="CAUSAL_LM", r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets)


def text_sums(model, tokens, per_target, cfg: LoRAConfig, device, batch: int = 0, progress=None):
    """Each window's nats and bytes, as ``llm/gpt`` scores text."""
    return scoring.window_sums(lambda x: model(input_ids=x).logits, tokens, cfg.seq_len, batch or cfg.micro_batch,
                               device, per_target, progress)


def example_splits(cfg: LoRAConfig, tokenizer, log) -> prompt_response.ExampleSplits:
    """The prompt/response examples of ``cfg.data`` tokenized and split, as training and ``zoo predict`` read them."""
    return prompt_response.split_examples(prompt_response.load_jsonl(Path(cfg.data).expanduser(), tokenizer),
                                          cfg.val_fraction, cfg.test_fraction, cfg.seq_len, cfg.data, log)


# =============================================================================================
# The trained model: saved for use, applied to prompts and text (zoo predict), exported
# =============================================================================================

SAMPLE_TOKENS, TEMPERATURE = 160, 0.8  # zoo predict prompt=...: llm/gpt's default sampling


@dataclass
class LoRAPredictOptions(inference.LMPredictOptions):
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
    prompts = inference.prompts_of(opts)
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    model, tokenizer, start = causal_lm.load_trained_lora(cfg.model, cfg.seq_len, run.dir, dtype_of(precision),
                                                          run.log)
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
                out = causal_lm.sample_hf(model, ids, opts.max_tokens or SAMPLE_TOKENS,
                                          TEMPERATURE if opts.temperature < 0 else opts.temperature, opts.top_k,
                                          run.seed if opts.seed < 0 else opts.seed, opts.n, pad_id)
            completions.append([tokenizer.decode(c, skip_special_tokens=True) for c in out])
            run.progress(i + 1, len(prompts), "prompts")
        return inference.generations(prompts, completions)
    batch, prefix = opts.batch_size or cfg.micro_batch, "" if opts.data else "test_"
    if jsonl:
        examples = inference.jsonl_examples(opts.data, tokenizer) if opts.data else \
            example_splits(cfg, tokenizer, run.log).test

        def score(m):
            return causal_lm.example_sums(m, examples, cfg.seq_len, pad_id, tokenizer.eos_token_id, device, batch,
                                          run.progress)

        def rows(nats, n_bytes):
            return inference.example_rows(examples, nats, n_bytes)
    else:
        docs = inference.read_documents(opts.data)[1] if opts.data else \
            [text_splits.eval_text(text_splits.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run.log),
                                   cfg.eval_bytes)]
        tokens, per_target = causal_lm.encode_text(tokenizer, start, docs)

        def score(m):
            return text_sums(m, tokens, per_target, cfg, device, batch, run.progress)

        def rows(nats, n_bytes):
            return inference.window_rows(nats, n_bytes, cfg.seq_len, len(tokens) - 1, "".join(docs))
    with torch.no_grad(), autocast(device, precision):
        nats, n_bytes = score(model)
        scores = scoring.bpb_metrics(nats, n_bytes, prefix, windows=not jsonl)
        if opts.before:
            if not hasattr(model, "disable_adapter"):
                raise ZooError(f"before=true: needs the base model {cfg.model} (only the merged copy is here)")
            with model.disable_adapter():
                base_nats, base_bytes = score(model)
            scores[f"{prefix}bpb_before"] = metrics.bits_per_byte(float(base_nats.sum()), float(base_bytes.sum()))
    return artifact.Predictions(rows=rows(nats, n_bytes), metrics=scores,
                                arrays={"nats": nats, "bytes": n_bytes})


def export_pretrained(cfg: LoRAConfig, run, out: Path) -> list[Path]:
    """``zoo export --format pretrained``: the adapter and the merged model (``causal_lm.export_pretrained``)."""
    return causal_lm.export_pretrained(cfg.model, cfg.seq_len, run, out)


# =============================================================================================
# Training
# =============================================================================================

@dataclass
class Task:
    """What training reads of the data: its batches and the loss on one, the scores of a held-out part (each window's
    or example's nats and bytes), the test's rows in predictions.csv, and the split (split.csv's items, one line)."""
    batches: object
    loss_fn: Callable
    score: Callable  # score(model, "validation" | "test") -> (nats, bytes)
    rows: Callable  # rows(nats, bytes) of the test
    keys: dict[str, list[str]]
    split_line: str


def adapted_model(cfg: LoRAConfig, dtype: torch.dtype, log):
    """The base model with a fresh adapter (only the adapter trains), its tokenizer and start token; the libraries'
    notices go to the log, not stderr."""
    from peft import get_peft_model

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, tokenizer, start = causal_lm.load_causal_lm(cfg.model, cfg.seq_len, dtype, log)
        try:
            model = get_peft_model(model, lora_config(cfg))
        except ValueError as exc:
            raise ZooError(f"target_modules={cfg.target_modules}: {str(exc).splitlines()[0]}") from None
    for w in {str(w.message) for w in caught}:
        log(f"warning: {w}")
    return model, tokenizer, start


def jsonl_task(cfg: LoRAConfig, run, tokenizer, pad_id: int, device) -> Task:
    """Prompt/response examples: the loss and the score on the response only."""
    parts = example_splits(cfg, tokenizer, run.log)
    train_examples, val_examples = parts.train, parts.val
    batches = TensorBatches((torch.arange(len(train_examples)),), cfg.micro_batch, seed=run.seed,
                            transform=lambda batch, g: prompt_response.pad_examples(
                                [train_examples[i] for i in batch[0]], pad_id))
    run.log(f"{cfg.data}: {len(train_examples)} train / {len(val_examples)} validation / {len(parts.test)} test "
            f"examples ({sum(e.response_bytes for e in val_examples):,} validation response bytes scored)")
    split_line = (f"{parts.how} ({len(parts.keys['train'])} / {len(parts.keys['validation'])} / "
                  f"{len(parts.keys['test'])} lines; the response bytes are scored)")
    # one row per example (prompt + response token ids): exact duplicates across the splits are found
    run.inspect(train=([e.ids for e in train_examples],), val=([e.ids for e in val_examples],),
                task="unlabelled", fine_tune=("lora_",))

    def loss_fn(model, batch):
        nats, count = causal_lm.response_nats(model, batch, device)
        return nats.sum() / max(count, 1)

    def score(model, part):  # each example's nats and response bytes
        return causal_lm.example_sums(model, val_examples if part == "validation" else parts.test, cfg.seq_len,
                                      pad_id, tokenizer.eos_token_id, device, cfg.micro_batch)

    def rows(nats, n_bytes):
        return inference.example_rows(parts.test, nats, n_bytes)

    return Task(batches, loss_fn, score, rows, parts.keys, split_line)


def text_task(cfg: LoRAConfig, run, tokenizer, start: int, device) -> Task:
    """Text, trained on in windows and scored in bits per byte as ``llm/gpt`` does."""
    splits = text_splits.load_text(cfg.data, cfg.val_fraction, cfg.test_fraction, run.log)
    texts = {"validation": text_splits.eval_text(splits, cfg.eval_bytes, "validation"),
             "test": text_splits.eval_text(splits, cfg.eval_bytes)}
    split_line = (f"{splits.how} ({splits.sizes()}; scored: validation {len(texts['validation'].encode()):,} "
                  f"bytes, test the first {cfg.eval_bytes:,})")
    ids = [[start] + tokenizer(d, add_special_tokens=False).input_ids for d in splits.train]
    train_tokens = torch.tensor([t for doc in ids for t in doc], dtype=torch.int32)

    val_tokens, val_bytes = causal_lm.encode_text(tokenizer, start, [texts["validation"]])
    batches = token_windows.TokenWindows(train_tokens, cfg.seq_len, cfg.micro_batch, seed=run.seed,
                                         source=splits.name, device=device)
    run.log(f"{splits.name}: {len(train_tokens):,} train tokens; validation scores "
            f"{len(texts['validation'].encode()):,} bytes = {len(val_tokens) - 1:,} tokens")
    run.inspect(train=(train_tokens,), val=(val_tokens,), task="tokens", fine_tune=("lora_",))

    def loss_fn(model, batch):
        x, y = (t.to(device) for t in batch)
        logits = model(input_ids=x).logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    def score(model, part):  # each window's nats and bytes
        tokens, per_target = (val_tokens, val_bytes) if part == "validation" else \
            causal_lm.encode_text(tokenizer, start, [texts["test"]])
        return text_sums(model, tokens, per_target, cfg, device)

    def rows(nats, n_bytes):
        n_targets = len(causal_lm.encode_text(tokenizer, start, [texts["test"]])[0]) - 1
        return inference.window_rows(nats, n_bytes, cfg.seq_len, n_targets, texts["test"])

    return Task(batches, loss_fn, score, rows, splits.keys, split_line)


def save_adapter(model, tokenizer, merge: bool, run_dir: Path) -> None:
    """The adapter the test scored (the EMA's, with ema_decay), and with ``merge`` the base model with it merged in."""
    model.save_pretrained(str(run_dir / "adapter"))
    tokenizer.save_pretrained(str(run_dir / "adapter"))
    if merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(str(run_dir / "merged"))
        tokenizer.save_pretrained(str(run_dir / "merged"))


@recipe("llm/lora", config=LoRAConfig, benchmark="tinyshakespeare", metric="test_bpb", higher_is_better=False,
        budget="5m", summary="LoRA fine-tuning of a transformers causal LM (local folder or hub) on text or "
                             "prompt/response JSONL; bits per byte before and after", predict=predict_lora,
        predict_options=LoRAPredictOptions, exports={"pretrained": export_pretrained})
def train_lora(cfg: LoRAConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device, tf32=cfg.tf32)
    precision = resolve_precision(device, cfg.precision)
    model, tokenizer, start = adapted_model(cfg, dtype_of(precision), run.log)
    model.to(device)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    run.log(f"LoRA rank {cfg.rank} alpha {cfg.alpha:g} on {cfg.target_modules}: {trainable / 1e6:.3f}M trainable "
            f"parameters ({100 * trainable / sum(p.numel() for p in model.parameters()):.2f}%)")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start
    jsonl = cfg.data.endswith(".jsonl")
    task = jsonl_task(cfg, run, tokenizer, pad_id, device) if jsonl else text_task(cfg, run, tokenizer, start, device)

    def evaluate(model):
        nats, n_bytes = task.score(model, "validation")
        return {"val_bpb": metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum()))}

    run.record_split(task.keys)
    run.report("split", task.split_line)
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        before = evaluate(model)["val_bpb"]
    model.train()
    run.log(f"val_bpb before fine-tuning: {before:.4f}")
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": cfg.weight_decay}]
    optimizer = optim.adamw(groups, lr=cfg.lr)
    lr = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, final=cfg.lr_final)
    result = fit(model, optimizer, task.batches, task.loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=functools.partial(schedule.apply_schedules, lr=lr), settings=LoopSettings.of(cfg))
    # The test, once, after training: the fine-tuned model, then the base model (the adapter switched off)
    tested = result.eval_model or model
    tested.eval()
    with torch.no_grad(), autocast(device, precision):
        nats, n_bytes = task.score(tested, "test")
        with tested.disable_adapter():
            base_nats, base_bytes = task.score(tested, "test")
    test_bpb = metrics.bits_per_byte(float(nats.sum()), float(n_bytes.sum()))
    low, high = items.test_interval(scoring.bpb_items(nats, n_bytes, windows=not jsonl))
    test_before = metrics.bits_per_byte(float(base_nats.sum()), float(base_bytes.sum()))
    save_adapter(tested, tokenizer, cfg.merge, run.dir)
    save_card(run, cfg, precision, start, task.rows(nats, n_bytes))
    after = result.metrics["val_bpb"]
    run.report("val_bpb_before", f"{before:.4f}")
    run.report("test_bpb_before", f"{test_before:.4f}")
    run.report("trainable_M", f"{trainable / 1e6:.3f}")
    run.log(f"val_bpb {before:.4f} -> {after:.4f} ({after - before:+.4f}); test_bpb {test_before:.4f} -> "
            f"{test_bpb:.4f} (95% interval {low:.4f}-{high:.4f}); adapter saved to {run.dir / 'adapter'}")
    return {**result.stats(), **result.metrics, "test_bpb": test_bpb, "test_bpb_ci_low": low,
            "test_bpb_ci_high": high, "val_bpb_before": before, "test_bpb_before": test_before,
            "trainable_M": trainable / 1e6}
