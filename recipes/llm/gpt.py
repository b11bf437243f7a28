"""``llm/gpt``: a GPT pretrained from scratch on text, test bits per byte.

Reads top to bottom: config, the depth the budget buys, the Muon + AdamW optimizer table, what is saved for
use and ``zoo predict`` (prompts, or bits per byte of new text), then pretraining (data, model, schedule, loop,
evaluation on validation, the test scored once at the end) and samples. The tokenizer is trained on the
training split and the metric counts the bytes each token spells, so runs with different tokenizers and
vocabularies compare. The depth is sized by the budget (Chinchilla's 20 tokens per parameter, or a few passes
over a small corpus); Muon trains the hidden matrices, AdamW the embedding, head and scalars.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.core import artifact, devices, distributed, finetune, optim, schedule
from recipe_zoo.core.api import Count, NonNegative, NonNegativeInt, Positive, Range, Share, Unit, recipe
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.flops import peak_flops
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.precision import autocast, choose_device, resolve_precision, speed_switches
from recipe_zoo.recipes.llm import datasets as _datasets  # noqa: F401  (declares the domain's datasets)
from recipe_zoo.recipes.llm import inference, models, scoring, shards, sizing, token_windows, tokenization

# =============================================================================================
# Config
# =============================================================================================


@dataclass
class GPTConfig(LoopSettings):
    # the LR fields of each optimizer group kind, for zoo doctor's range test and zoo sweep's batch rule
    LR_FIELDS: ClassVar[dict] = {"muon": ("matrix_lr",), "adamw": ("embedding_lr", "head_lr", "scalar_lr")}
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ("val_fraction", "test_fraction", "eval_bytes", "text_field")
    DEVICE_FIELDS: ClassVar[tuple[str, ...]] = ("depth", "batch_tokens", "micro_batch", "compile", "precision", "tf32")
    SIZING_INPUTS: ClassVar[tuple[str, ...]] = ("tokens_per_param", "max_epochs")  # read only to choose the depth
    TUNED_BATCH: ClassVar[int] = 4096  # batch_tokens the LR defaults were tuned at (zoo sweep's batch rule)
    data: str = "tinyshakespeare"  # dataset name, file (.txt/.md, .jsonl, .parquet, .gz), folder, hf:NAME, prepared
    text_field: str = "text"  # the text of a .jsonl line (its field) or a .parquet row (its column)
    stream: bool = False  # train from token shards read as used, tokenized once (zoo data prepare llm/gpt)
    val_fraction: Share = 0.05  # validation: the text before the test tail (the training text's tail: val file)
    test_fraction: Share = 0.1  # test: the last part of the text, when the data has no held-out file or split
    eval_bytes: Count = 100_000  # test bytes scored (the first N; validation: up to N): fixed so runs compare
    tokenizer: str = "bpe"  # bpe (trained on the train split) | bytes (256 byte tokens) | a tokenizer.json
    vocab_size: Annotated[int, Range(257)] = 1024  # BPE vocabulary including the 256 bytes and <|bos|>
    depth: NonNegativeInt = 0  # blocks; width = aspect x depth, heads = width / head_dim; 0 = sized by the budget
    aspect: Count = 64  # model width per block
    head_dim: Count = 64  # attention head size
    kv_heads: NonNegativeInt = 0  # key/value heads for grouped-query attention (0 = as many as query heads)
    mlp: Literal["relu2", "swiglu"] = "relu2"  # ReLU^2 MLP (4x wide) or SwiGLU (8/3 x wide)
    softcap: NonNegative = 15.0  # logits = softcap * tanh(logits / softcap) (0 = off)
    seq_len: Count = 256  # context length in tokens
    batch_tokens: NonNegativeInt = 0  # tokens per optimizer step (0 = by the device: 4,096 on a CPU; see zoo plan)
    micro_batch: NonNegativeInt = 0  # sequences per forward/backward pass; accumulation makes up the rest (0 = fit)
    matrix_lr: Positive = 0.04  # Muon LR of the hidden matrices (scaled by max(1, rows/cols)^0.5)
    embedding_lr: Positive = 0.6  # AdamW LR of the token embedding, x (width/768)^-0.5
    head_lr: Positive = 0.004  # AdamW LR of the output head, x (width/768)^-0.5
    scalar_lr: Positive = 0.005  # AdamW LR of the per-block scalars, x (width/768)^-0.5
    dropout: Annotated[float, Range(0, 1, high_open=True)] = 0.0  # attention weights and block outputs, in training
    weight_decay: NonNegative = 0.2  # Muon weight decay (cautious), decaying linearly to 0; never on embeddings
    schedule: Literal["wsd", "cosine", "linear", "constant"] = "wsd"  # LR shape over budget progress
    warmup: Unit = 0.0  # warmup fraction (Muon needs none)
    warmdown: Unit = 0.5  # WSD: the final fraction of the budget decaying the LR
    lr_final: NonNegative = 0.0  # LR multiplier at the end of the budget
    tokens_per_param: Positive = 20.0  # depth=0 sizing: tokens per parameter when data is plentiful (Chinchilla)
    max_epochs: Positive = 3.0  # depth=0 sizing: passes over the data when it is not (past ~3 small texts overfit)
    epoch_cap: NonNegative = 16.0  # time budgets: training ends after this many passes (past ~16 repeats add ~0)
    samples: NonNegativeInt = 3  # text samples written at the end (samples.txt)
    sample_tokens: NonNegativeInt = 160  # tokens per sample
    temperature: NonNegative = 0.8  # sampling temperature (0 = greedy: the likeliest token)
    prompt: str = ""  # text the samples continue ('' = start of a document)
    eval_every: Unit = 0.25  # fraction of the budget between validations
    diverge_factor: Annotated[float, Range(1, low_open=True)] = 3.0  # an LM's loss never rises 3x over its first step's
    compile: bool = True  # torch.compile the model, falls back to eager (docs/LOG.md#2026-11-29-llm-gpt-compile)
    fsdp: bool = False  # under torchrun: shard each block's weights, grads and optimizer state over the processes
    weights: str = ""  # fine-tune from a finished llm/gpt run (its folder): its tokenizer, shape and weights


# =============================================================================================
# The shape, and the depth and batch the budget buys (sizing's rules)
# =============================================================================================

def shape_at(cfg: GPTConfig, depth: int, vocab: int) -> models.GPTShape:
    """The GPT ``cfg`` describes at ``depth`` blocks, over ``vocab`` tokens."""
    return models.GPTShape.from_depth(depth, vocab, aspect=cfg.aspect, head_dim=cfg.head_dim, kv_heads=cfg.kv_heads,
                                      seq_len=cfg.seq_len, mlp=cfg.mlp, softcap=cfg.softcap)


def shape_of(cfg: GPTConfig) -> tuple[models.GPTShape, int]:
    """``zoo plan --recipe llm/gpt depth=N``: the shape a config describes and its parameter count."""
    shape = shape_at(cfg, cfg.depth, cfg.vocab_size)
    return shape, models.param_estimate(shape)


def sizing_rules(cfg: GPTConfig) -> dict[str, float]:
    """What ``sizing`` reads of the config to choose a depth: the batch, the token target and the epoch cap."""
    return {"batch_tokens": cfg.batch_tokens, "epoch_cap": cfg.epoch_cap, "tokens_per_param": cfg.tokens_per_param,
            "max_epochs": cfg.max_epochs}


def size_hook(cfg: GPTConfig, run, profile) -> dict:
    """``zoo plan --recipe llm/gpt --budget B --gpu NAME``: what a run would choose there, its training tokens
    counted as the run counts them (the data is read and tokenized as a run reads it)."""
    budget = run.budget
    if budget.kind != "seconds":
        raise ZooError(f"--budget {budget}: llm/gpt sizes itself for a time budget (e.g. 30s, 5m, 1h)")
    corpus = shards.text_data(cfg, run)
    vocab = corpus.tok.get_vocab_size()
    train_tokens = len(corpus.train)
    shape_at_depth = functools.partial(shape_at, cfg, vocab=vocab)
    profile = sizing.with_dropout(profile, cfg.dropout)
    if cfg.depth:
        c = {**sizing.depth_row(shape_at_depth(cfg.depth), train_tokens, budget.amount, profile, **sizing_rules(cfg)),
             "reason": "depth set by you"}
    else:
        c = sizing.depth_choice(shape_at_depth, train_tokens, budget.amount, profile, **sizing_rules(cfg))
    batch, micro = sizing.batch_sizes(shape_at_depth(c["depth"]), budget, profile, train_tokens,
                                      batch_tokens=cfg.batch_tokens, micro_batch=cfg.micro_batch,
                                      epoch_cap=cfg.epoch_cap, log=lambda line: None)
    return {"shape": f"depth {c['depth']}, width {c['width']}, context {cfg.seq_len}, vocab {vocab}",
            "batch": f"{batch:,} tokens a step, {micro} sequences a pass", "params": c["params"], "steps": c["steps"],
            "rate": f"{c['tokens_per_s']:,.0f} tokens/s", "per_param": f"{c['tokens_per_param']:.2f} tokens/param",
            "data": f"{train_tokens:,} training tokens ({c['tokens'] / train_tokens:.1f} epochs)",
            "reason": c["reason"], "profile": profile}


def sized(cfg: GPTConfig, vocab: int, train_tokens: int, device, world: int, run) -> tuple[GPTConfig, models.GPTShape]:
    """The config with the ``batch_tokens`` and ``micro_batch`` the run trains with, and the model's shape: as set,
    or (0) chosen for the budget on this device. Sized once, by rank 0: a timing- or memory-dependent choice must
    not differ between ranks."""
    profile = devices.for_device(device, world, cfg.precision)
    profile = sizing.with_dropout(profile, cfg.dropout)  # a CPU run with dropout is sized on its cost
    depth = cfg.depth or distributed.broadcast_object(
        sizing.size_for_budget(functools.partial(shape_at, cfg, vocab=vocab), train_tokens, run.budget, profile,
                               **sizing_rules(cfg), log=run.log))
    shape = shape_at(cfg, depth, vocab)
    batch_tokens, micro_batch = distributed.broadcast_object(
        sizing.batch_sizes(shape, run.budget, profile, train_tokens, batch_tokens=cfg.batch_tokens,
                           micro_batch=cfg.micro_batch, epoch_cap=cfg.epoch_cap,
                           log=run.log if distributed.is_main() else lambda line: None))
    return dataclasses.replace(cfg, batch_tokens=batch_tokens, micro_batch=micro_batch), shape


# =============================================================================================
# Optimizer: the Muon + AdamW table
# =============================================================================================

def build_optimizer(cfg: GPTConfig, model: models.GPT) -> optim.MuonAdamW:
    s = optim.width_lr_scale(model.shape.width)
    groups = optim.hybrid_groups(model, head=["lm_head"], matrix_lr=cfg.matrix_lr, embedding_lr=cfg.embedding_lr * s,
                                 head_lr=cfg.head_lr * s, scalar_lr=cfg.scalar_lr * s, matrix_wd=cfg.weight_decay)
    return optim.MuonAdamW(groups)


# =============================================================================================
# The trained model: saved for use, and applied to prompts and text (zoo predict)
# =============================================================================================

def save_model(run, cfg: GPTConfig, model: nn.Module, shape: models.GPTShape, precision: str, rows: list[dict],
               source: dict | None = None) -> None:
    """The weights the test was scored with (its shape in the file and the card), the card (with the run it was
    fine-tuned from) and the test windows' rows; the tokenizer is already saved."""
    export_safetensors(model, run.dir / "model.safetensors", metadata={"recipe": run.spec.name,
                                                                       "shape": json.dumps(dataclasses.asdict(shape))})
    artifact.write_card(run.dir, recipe=run.spec.name, task="tokens", weights=["model.safetensors"],
                        selected="ema" if cfg.ema_decay > 0 else "final", files=["tokenizer.json"],
                        preprocess={"tokenizer": "tokenizer.json", "bos": tokenization.BOS},
                        evaluation={"metric": "test_bpb", "windows": cfg.seq_len, "batch": cfg.micro_batch,
                                    "eval_bytes": cfg.eval_bytes, "precision": precision},
                        shape=dataclasses.asdict(shape),
                        sampling={"sample_tokens": cfg.sample_tokens, "temperature": cfg.temperature},
                        **({"source": source} if source else {}))
    artifact.write_predictions(run.dir, rows)


def predict_gpt(cfg: GPTConfig, opts: inference.LMPredictOptions, run) -> artifact.Predictions:
    """prompt=/prompts=: samples as ``inference.write_samples`` draws them (the run's sample_tokens and temperature
    unless given); data=TEXT: its bits per byte, each document from <|bos|>; neither: the run's test split scored
    again."""
    from tokenizers import Tokenizer

    prompts = inference.prompts_of(opts)
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    tok = Tokenizer.from_file(str(run.path(run.card["preprocess"]["tokenizer"])))
    model = models.GPT(models.GPTShape(**run.card["shape"]))
    artifact.load_into(model, run.path("model.safetensors"))
    model.to(device).eval()
    if prompts:
        temperature = cfg.temperature if opts.temperature < 0 else opts.temperature
        completions = []
        with autocast(device, precision):
            for i, prompt in enumerate(prompts):
                g = torch.Generator().manual_seed(run.seed if opts.seed < 0 else opts.seed)
                ids = [tok.token_to_id(tokenization.BOS)] + tok.encode(prompt, add_special_tokens=False).ids
                completions.append([tok.decode(model.generate(ids, opts.max_tokens or cfg.sample_tokens, temperature,
                                                              g, opts.top_k)) for _ in range(opts.n)])
                run.progress(i + 1, len(prompts), "prompts")
        return inference.generations(prompts, completions)
    if opts.data:
        docs = inference.read_documents(opts.data)[1]
        text, prefix = "".join(docs), ""
    else:
        docs = [shards.test_text(cfg, run)]
        text, prefix = docs[0], "test_"
    tokens = tokenization.encode_docs(tok, docs)
    batch = opts.batch_size or run.card["evaluation"]["batch"]  # the run's micro-batch, as it was sized
    scores, nats, n_bytes = score_test(model, tokens, tokenization.token_bytes(tok)[tokens[1:].long()], cfg, device,
                                       precision, batch, run.progress, prefix)
    return artifact.Predictions(rows=inference.window_rows(nats, n_bytes, cfg.seq_len, len(tokens) - 1, text),
                                metrics=scores, arrays={"nats": nats, "bytes": n_bytes})


# =============================================================================================
# Pretraining
# =============================================================================================

def accumulated(cfg: GPTConfig, world: int, log) -> LoopSettings:
    """The loop's settings, with the micro-batches a step accumulates: ``batch_tokens`` is global, so more processes
    accumulate fewer."""
    per_micro = cfg.micro_batch * cfg.seq_len * world
    accum = max(1, round(cfg.batch_tokens / per_micro))
    if accum * per_micro != cfg.batch_tokens:
        log(f"batch_tokens={cfg.batch_tokens} is not a multiple of micro_batch x seq_len x processes = "
            f"{per_micro}: using {accum * per_micro}")
    settings = LoopSettings.of(cfg)
    settings.accum_steps = accum
    return settings


def shard(model: models.GPT, fsdp: bool, world: int, log) -> None:
    """``fsdp=true`` under torchrun: each block's weights, grads and optimizer state sharded over the processes."""
    if fsdp and world > 1:
        distributed.fully_shard_blocks(model)
        log(f"FSDP2: {len(model.blocks)} blocks and the root sharded over {world} processes")
    elif fsdp:
        log("fsdp=true in a single process: nothing to shard (launch with --nproc N)")


# Fine-tuning from a run (weights=) keeps the source's tokenizer (its file, hence the vocabulary) and every field of
# the shape. The batch, the schedule and the LRs are this run's (lower LRs are the user's to give: the source's
# defaults pretrain). The data may differ: the tokenizer is not refitted on it, so bits per byte stay comparable
# with the source's tokens.
SHAPE_FIELDS = ("aspect", "head_dim", "kv_heads", "mlp", "softcap", "seq_len", "vocab_size")


def from_source(cfg: GPTConfig, source: finetune.Source, log) -> GPTConfig:
    """``cfg`` with the source run's tokenizer and shape; a setting that contradicts them is one line."""
    theirs = {name: source.config[name] for name in SHAPE_FIELDS if name in source.config}
    theirs.update(tokenizer=str(source.path(source.card["preprocess"]["tokenizer"])),
                  depth=source.card["shape"]["depth"])
    if source.config.get("tokenizer") == "bytes":
        theirs.pop("vocab_size", None)  # unread by a byte tokenizer
    cfg = finetune.inherit(cfg, source, theirs, "tokenizer and shape")
    log(f"fine-tuning from {source.folder}: its tokenizer and shape (depth {cfg.depth}, width "
        f"{source.card['shape']['width']}, context {cfg.seq_len})")
    return cfg


def load_source(model: models.GPT, source: finetune.Source) -> None:
    if dataclasses.asdict(model.shape) != source.card["shape"]:
        raise ZooError(f"weights={source.folder}: its card's shape {source.card['shape']} is not the shape rebuilt "
                       f"from its config {dataclasses.asdict(model.shape)}")
    artifact.load_into(model, source.path("model.safetensors"))


# precision=auto on a CPU with bf16 units: bf16 (better validation BPB: docs/LOG.md#2026-12-03-cpu-precision-llm-gpt)
@recipe("llm/gpt", config=GPTConfig, benchmark="tinyshakespeare", metric="test_bpb", higher_is_better=False,
        budget="5m", summary="GPT pretraining: RoPE, QK-norm, ReLU^2, Muon+AdamW table, time-based WSD, sized by "
                             "the budget; test bits per byte",
        scale_out="torchrun: DDP, or FSDP2 with fsdp=true (blocks sharded, gathered checkpoints)",
        hooks={"shape": shape_of, "prepare": shards.prepare_tokens, "size": size_hook}, predict=predict_gpt,
        predict_options=inference.LMPredictOptions, cpu_precision="bf16")
def train_gpt(cfg: GPTConfig, run) -> dict[str, float]:
    device = choose_device(run.device)
    speed_switches(device, tf32=cfg.tf32)
    source = finetune.read_source(cfg.weights, ("llm/gpt",)) if cfg.weights else None
    if source is not None:
        cfg = from_source(cfg, source, run.log)
    corpus = shards.text_data(cfg, run)  # in memory, or token shards read as they are used (stream=true)
    scored, test_text, tok, train_tokens = corpus.val_text, corpus.test_text, corpus.tok, corpus.train
    run.record_split(corpus.keys)
    run.report("split", f"{corpus.how} ({corpus.sizes}; scored: validation {len(scored.encode()):,} bytes, test "
                        f"the first {cfg.eval_bytes:,})")
    tok.save(str(run.dir / "tokenizer.json"))
    lengths = tokenization.token_bytes(tok)
    val_tokens = tokenization.encode_docs(tok, [scored])
    vocab = tok.get_vocab_size()
    per_target = lengths[val_tokens[1:].long()]
    if int(per_target.sum()) != len(scored.encode()):
        raise RuntimeError(f"byte table mismatch: {int(per_target.sum())} != {len(scored.encode())} bytes")
    run.log(f"{corpus.name}: {corpus.train_chars:,} train chars -> {len(train_tokens):,} tokens "
            f"({corpus.train_bytes / len(train_tokens):.2f} bytes/token, vocab {vocab}); "
            f"validation scores {len(scored.encode()):,} bytes = {len(val_tokens) - 1:,} tokens")
    if run.inspecting:  # zoo doctor: scored windows found in train (of shards, in their first tokens)
        run.inspect(train=(corpus.inspected(),), val=(val_tokens,), task="tokens", fine_tune=bool(cfg.weights))

    world = distributed.world_size()
    cfg, shape = sized(cfg, vocab, len(train_tokens), device, world, run)
    model = models.GPT(shape, cfg.dropout)
    if source is not None:
        load_source(model, source)
    model.to(device)
    run.log(f"GPT depth {shape.depth}: width {shape.width}, {shape.heads} heads ({shape.kv_heads} kv) of "
            f"{shape.head_dim}, context {shape.seq_len}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
            f"params ({model.scaling_params() / 1e6:.2f}M excluding the embedding)")
    settings = accumulated(cfg, world, run.log)
    batches = token_windows.TokenWindows(train_tokens, cfg.seq_len, cfg.micro_batch, seed=run.seed,
                                         source=corpus.name, device=device)
    shard(model, cfg.fsdp, world, run.log)  # before the optimizer: it must hold the sharded parameters
    optimizer = build_optimizer(cfg, model)
    lr = schedule.make_schedule(cfg.schedule, warmup=cfg.warmup, decay=cfg.warmdown, final=cfg.lr_final)
    update = functools.partial(schedule.apply_schedules, lr=lr, weight_decay=schedule.weight_decay_linear,
                               momentum=schedule.muon_momentum)
    precision = resolve_precision(device, cfg.precision)

    def loss_fn(model: nn.Module, batch) -> torch.Tensor:
        x, y = (t.to(device, non_blocking=True) for t in batch)
        logits = model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))

    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"val_bpb": scoring.bits_per_byte(model, val_tokens, cfg.seq_len, cfg.micro_batch, device,
                                                 bytes_per_target=per_target)}

    start = {}
    if source is not None:  # the source's weights on this run's validation, before the first step
        start = {"val_bpb_start": finetune.score_start(model, evaluate, device, precision)["val_bpb"]}
        run.log(f"val_bpb before fine-tuning (the source's weights): {start['val_bpb_start']:.6f}")
    result = fit(model, optimizer, batches, loss_fn, run, device=device, evaluate=evaluate,
                 update_hparams=update, settings=settings)
    test_tokens = tokenization.encode_docs(tok, [test_text])
    test, nats, n_bytes = score_test(result.eval_model, test_tokens, lengths[test_tokens[1:].long()], cfg, device,
                                     precision)
    run.log(f"test_bpb {test['test_bpb']:.4f} (95% interval {test['test_bpb_ci_low']:.4f}-"
            f"{test['test_bpb_ci_high']:.4f}) on the first {cfg.eval_bytes:,} test bytes; val_bpb "
            f"{result.metrics['val_bpb']:.4f}")
    save_model(run, cfg, result.eval_model, shape, precision,
               inference.window_rows(nats, n_bytes, cfg.seq_len, len(test_tokens) - 1, test_text),
               finetune.provenance(source) if source is not None else None)
    with autocast(device, precision):
        inference.write_samples(result.eval_model, tok, cfg, run)  # the saved model's: zoo predict prompt=...
    return {**result.stats(), **start, **result.metrics, **test, **throughput(result, model, cfg, device, world,
                                                                     len(train_tokens), run, precision),
            "depth": shape.depth, "vocab_size": vocab, "batch_tokens": result.global_batch * cfg.seq_len,
            "micro_batch": cfg.micro_batch}


def throughput(result, model: models.GPT, cfg: GPTConfig, device, world: int, train_tokens: int,
               run, precision: str) -> dict[str, float]:
    """Tokens seen, tokens a second (the timed steps': not compiling or traced ones), tokens per parameter and MFU
    (model FLOPs; the loop's own counts the optimizer too), reported and logged."""
    tokens = result.samples * cfg.seq_len
    tokens_per_s = result.samples_per_s * cfg.seq_len
    peak = peak_flops(device, precision)  # the peak of the dtype it computes in
    mfu = 100 * models.flops_per_token(model.shape) * tokens_per_s / (peak * world) if peak else float("nan")
    per_param = tokens / model.scaling_params()
    run.report("tokens_per_s", f"{tokens_per_s:,.0f}")
    run.report("tokens_seen", f"{tokens:,} ({tokens / train_tokens:.1f} epochs)")
    run.report("tokens_per_param", f"{per_param:.2f} (Chinchilla: 20)")
    run.log(f"{tokens:,} tokens at {tokens_per_s:,.0f} tokens/s; {per_param:.2f} tokens/param "
            f"(Chinchilla: 20); MFU {mfu:.1f}% of {peak / 1e9 if peak else float('nan'):.0f} GFLOP/s "
            f"(model FLOPs; {result.mfu_percent:.1f}% counting the optimizer)")
    return {"tokens": tokens, "tokens_per_s": tokens_per_s, "tokens_per_param": per_param,
            "chinchilla_tokens_per_param": 20.0, "mfu_percent": mfu, "counted_mfu_percent": result.mfu_percent}


def score_test(model: nn.Module, tokens: torch.Tensor, per_target: torch.Tensor, cfg: GPTConfig, device, precision,
               batch: int = 0, progress=None, prefix: str = "test_") -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Test bits per byte, once, after training: the bootstrap interval over the windows, and each window's nats
    and bytes. Every rank scores (FSDP forwards are collective); rank 0's numbers are the ones reported."""
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        nats, n_bytes = scoring.window_sums(model, tokens, cfg.seq_len, batch or cfg.micro_batch, device, per_target,
                                            progress)
    return distributed.broadcast_object(scoring.bpb_metrics(nats, n_bytes, prefix)), nats, n_bytes
