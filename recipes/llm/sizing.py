"""llm/gpt's sizing rule: the depth a time budget buys on a device (``core.devices``), and the ``size`` hook
``zoo plan --recipe llm/gpt --budget B`` calls."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm import models, shards

if TYPE_CHECKING:
    from recipe_zoo.recipes.llm.gpt import GPTConfig

MIN_STEPS = 200  # depth=0 never chooses a model that gets fewer optimizer steps than this in the budget
MIN_TOKENS_PER_PARAM = 0.2  # nor one that sees fewer tokens than this per parameter (the 2-core CPU's picks: 0.3-7)


def newton_schulz_flops(shape: models.GPTShape, ns_steps: int = 5) -> float:
    """Muon's orthogonalisation per optimizer step: each iteration on an m x n matrix (m <= n) costs
    4 m^2 n + 2 m^3 FLOPs. At depth 32 it is twice the model's work on a 4,096-token step."""
    d = shape.width
    q, kv, hidden = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, 4 * d
    mats = [(d, q), (d, kv), (d, kv), (q, d), (d, hidden), (hidden, d)]
    return shape.depth * ns_steps * sum(4 * min(m, n) ** 2 * max(m, n) + 2 * min(m, n) ** 3 for m, n in mats)


def optimizer_flops(shape: models.GPTShape, profile) -> float:
    """Muon's work where the profile's shares were fitted with it counted (a GPU's); a CPU's shares are model
    FLOPs per second, its optimizer's time already inside them."""
    return newton_schulz_flops(shape) if profile.counts_optimizer("matmul") else 0.0


def depth_row(cfg: GPTConfig, vocab: int, depth: int, train_tokens: int, seconds: float, profile) -> dict:
    """What ``depth`` gets in ``seconds`` on ``profile``: parameters, steps, tokens, and the token target."""
    shape = models.GPTShape.from_depth(depth, cfg, vocab)
    n = models.param_estimate(shape)
    per_token = 6 * n + 12 * depth * shape.width * cfg.seq_len
    steps = profile.steps(seconds, per_token * cfg.batch_tokens + optimizer_flops(shape, profile), "matmul",
                          shape.width)
    rate = steps * cfg.batch_tokens / seconds
    capped = cfg.epoch_cap > 0 and steps * cfg.batch_tokens > cfg.epoch_cap * train_tokens
    if capped:  # the run ends at the cap, before the budget
        steps = math.ceil(cfg.epoch_cap * train_tokens / cfg.batch_tokens)
    tokens = steps * cfg.batch_tokens
    return {"depth": depth, "width": shape.width, "params": n, "steps": steps, "tokens": tokens,
            "tokens_per_s": rate, "tokens_per_param": tokens / n, "capped": capped,
            "target": min(cfg.tokens_per_param * n, cfg.max_epochs * train_tokens)}


def depth_choice(cfg: GPTConfig, vocab: int, train_tokens: int, seconds: float, profile) -> dict:
    """The depth whose token count in ``seconds`` on ``profile`` is nearest the target (Chinchilla's tokens per
    parameter, or ``max_epochs`` passes over the training tokens when that is fewer), among the depths that get
    at least ``MIN_STEPS`` steps and ``MIN_TOKENS_PER_PARAM``: a step bound by latency (a GPU's small steps)
    makes a bigger model look free, and these floors stop the choice there.

    Where the budget buys more than ``epoch_cap`` passes the run ends at the cap, so those depths' tokens are the
    cap's and tie: the largest of them that keeps the floors is chosen (on a GPU with little data, one size
    whatever the budget, instead of the biggest model hundreds of epochs could feed)."""
    best, best_gap, rows = None, float("inf"), []
    for depth in range(1, 49):
        row = depth_row(cfg, vocab, depth, train_tokens, seconds, profile)
        rows.append(row)
        n, tokens, target = row["params"], row["tokens"], row["target"]
        if (row["steps"] < MIN_STEPS and not row["capped"]) or tokens < MIN_TOKENS_PER_PARAM * n:
            continue  # (the cap's steps are the data's: fewer than MIN_STEPS is all a small corpus gives)
        gap = abs(math.log(tokens / target))
        if gap < best_gap or (gap == best_gap and row["capped"]):
            best, best_gap = row, gap
    if best is None:
        return {**rows[0], "reason": f"no depth gets {MIN_STEPS} steps: depth 1"}
    if best["capped"]:
        return {**best, "reason": f"every depth up to this one reaches epoch_cap={cfg.epoch_cap:g} passes over "
                                  f"{train_tokens:,} tokens before the budget ends: the largest of them, with at "
                                  f"least {MIN_TOKENS_PER_PARAM:g} tokens/param"}
    limit = "data" if best["target"] < cfg.tokens_per_param * best["params"] else "compute"
    reason = (f"nearest to {cfg.tokens_per_param:g} tokens/param" if limit == "compute" else
              f"nearest to {cfg.max_epochs:g} epochs of {train_tokens:,} tokens")
    return {**best, "reason": f"{reason}, with at least {MIN_STEPS} steps and {MIN_TOKENS_PER_PARAM:g} tokens/param"}


def size_for_budget(cfg: GPTConfig, vocab: int, train_tokens: int, budget, profile, log=print) -> int:
    """``depth_choice`` for a time budget on this device's profile (step and epoch budgets: depth 4).

    On tinyshakespeare (362K training tokens) this picks depth 2 for 60 s, 3 for 163 s and 4 for 5 minutes on
    2 CPU cores, the best depths the sweep in the LLM issue's closing note found.
    """
    if budget.kind != "seconds":
        log("depth=0 with a step or epoch budget: depth 4")
        return 4
    c = depth_choice(cfg, vocab, train_tokens, budget.amount, profile)
    log(f"depth=0: depth {c['depth']} for {budget} on {profile.name}: ~{c['steps']:,.0f} steps, "
        f"~{c['tokens_per_s']:,.0f} tokens/s predicted ({c['reason']})")
    return c["depth"]


def size_hook(cfg: GPTConfig, run, profile) -> dict:
    """``zoo plan --recipe llm/gpt --budget B --gpu NAME``: what a run would choose there, its training tokens
    counted as the run counts them (the data is read and tokenized as a run reads it)."""
    budget = run.budget
    if budget.kind != "seconds":
        raise ZooError(f"--budget {budget}: llm/gpt sizes itself for a time budget (e.g. 30s, 5m, 1h)")
    corpus = shards.text_data(cfg, run)
    vocab = corpus.tok.get_vocab_size()
    train_tokens = len(corpus.train)
    if cfg.depth:
        c = {**depth_row(cfg, vocab, cfg.depth, train_tokens, budget.amount, profile), "reason": "depth set by you"}
    else:
        c = depth_choice(cfg, vocab, train_tokens, budget.amount, profile)
    return {"shape": f"depth {c['depth']}, width {c['width']}, context {cfg.seq_len}, vocab {vocab}",
            "batch": f"{cfg.batch_tokens:,} tokens a step", "params": c["params"], "steps": c["steps"],
            "rate": f"{c['tokens_per_s']:,.0f} tokens/s", "per_param": f"{c['tokens_per_param']:.2f} tokens/param",
            "data": f"{train_tokens:,} training tokens ({c['tokens'] / train_tokens:.1f} epochs)",
            "reason": c["reason"]}
