"""llm/gpt's sizing rules: the tokens a step and the sequences a forward pass on a device (``core.devices``), and
the depth a time budget buys there. ``shape_at(depth)`` is the shape the run's config describes at a depth."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from recipe_zoo.recipes.llm import models

MIN_STEPS = 200  # depth=0 never chooses a model that gets fewer optimizer steps than this in the budget
# nor one that sees fewer tokens than this per parameter (docs/LOG.md#2026-12-05-llm-tokens-per-param-floor)
MIN_TOKENS_PER_PARAM = 0.1
CAPPED_TOKENS_PER_PARAM = 0.2  # a run ending at the epoch cap (a GPU's, on little data): the largest model keeping this
BATCH_CHOICES = tuple(4096 * 2**k for k in range(8))  # batch_tokens=0 picks one of 4,096 ... 524,288 tokens a step
LATENCY_SHARE = 0.25  # the smallest batch whose step spends at most this share of its time in the fixed latency
MEMORY_SHARE = 0.5  # micro_batch=0: activations of at most this share of the device's free memory
# Dropout's cost on a CPU (attention dropout leaves the fused attention kernel): the tokens/s ratio without and
# with dropout 0.1 on llm/gpt (docs/LOG.md#2026-12-04-llm-dropout-cost-on-cpu)
CPU_DROPOUT_SLOWDOWN = 1.49


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


def cap_tokens(epoch_cap: float, train_tokens: int) -> float:
    """The tokens a time-budget run sees at most: ``epoch_cap`` passes (unbounded without a cap)."""
    return epoch_cap * train_tokens if epoch_cap > 0 else math.inf


def step_seconds(shape: models.GPTShape, batch_tokens: int, profile) -> float:
    """One optimizer step of ``batch_tokens`` on ``profile``: the model's FLOPs (and Muon's, where counted)."""
    flops = models.flops_per_token(shape) * batch_tokens + optimizer_flops(shape, profile)
    return profile.step_seconds(flops, "matmul", shape.width)


def batch_choice(shape: models.GPTShape, seconds: float | None, profile, max_tokens: float = math.inf) \
        -> tuple[int, str]:
    """``batch_tokens=0``: the smallest of ``BATCH_CHOICES`` whose step spends at most ``LATENCY_SHARE`` of its time
    in the profile's fixed latency (a step bound by latency wastes the device:
    docs/LOG.md#2026-12-02-llm-batch-by-device), kept small enough for ``MIN_STEPS`` steps in a time budget and in
    ``max_tokens`` (the epoch cap's).
    With no latency (a CPU) it is 4,096, the batch of every CPU row."""
    latency = profile.latency("matmul")
    if latency == 0:
        return BATCH_CHOICES[0], "no fixed step latency on this device"
    chosen, chosen_t = BATCH_CHOICES[0], 0.0
    for batch in BATCH_CHOICES:
        t = step_seconds(shape, batch, profile)
        steps = min(seconds / t if seconds is not None else math.inf, max_tokens / batch)
        if steps < MIN_STEPS:
            if batch == BATCH_CHOICES[0]:
                return batch, f"the smallest: no batch gets {MIN_STEPS} steps"
            return chosen, (f"the largest that keeps {MIN_STEPS} steps (its step {1e3 * chosen_t:.0f} ms, "
                            f"{1e3 * latency:.0f} of them latency)")
        chosen, chosen_t = batch, t
        if latency <= LATENCY_SHARE * t:
            break
    return chosen, (f"the smallest whose step ({1e3 * chosen_t:.0f} ms) is at most {LATENCY_SHARE:.0%} fixed "
                    f"latency ({1e3 * latency:.0f} ms)")


def bytes_per_token(shape: models.GPTShape) -> float:
    """Training memory a token of the micro-batch holds (activations in bf16, fp32 logits), fitted to GPU runs at
    depth 12 (docs/LOG.md#2026-12-02-llm-batch-by-device)."""
    return 2 * 34 * shape.depth * shape.width + 16 * shape.vocab


def micro_batch_choice(shape: models.GPTShape, batch_tokens: int, profile) -> tuple[int, str]:
    """``micro_batch=0``: the whole step in one pass per process when its activations fit in ``MEMORY_SHARE`` of
    the free memory, else the largest power of two of sequences that does (accumulation makes up the rest)."""
    want = max(1, batch_tokens // (shape.seq_len * profile.processes))
    fit = int(MEMORY_SHARE * profile.memory / (shape.seq_len * bytes_per_token(shape)))
    if want <= fit:
        return want, "the step's sequences in one pass"
    micro = 2 ** max(0, fit.bit_length() - 1)
    return micro, (f"activations of ~{bytes_per_token(shape) / 1e3:.0f} KB a token within {MEMORY_SHARE:.0%} of "
                   f"{profile.memory / 2**30:.0f} GiB free")


def depth_row(shape: models.GPTShape, train_tokens: int, seconds: float, profile, *, batch_tokens: int,
              epoch_cap: float, tokens_per_param: float, max_epochs: float) -> dict:
    """What ``shape`` gets in ``seconds`` on ``profile``: parameters, batch, steps, tokens, and the token target
    (``tokens_per_param``, or ``max_epochs`` passes when fewer); ``batch_tokens`` 0: ``batch_choice``'s."""
    n = models.param_estimate(shape)
    batch = batch_tokens or batch_choice(shape, seconds, profile, cap_tokens(epoch_cap, train_tokens))[0]
    steps = seconds / step_seconds(shape, batch, profile)
    rate = steps * batch / seconds
    capped = epoch_cap > 0 and steps * batch > epoch_cap * train_tokens
    if capped:  # the run ends at the cap, before the budget
        steps = math.ceil(epoch_cap * train_tokens / batch)
    tokens = steps * batch
    return {"depth": shape.depth, "width": shape.width, "params": n, "batch_tokens": batch, "steps": steps,
            "tokens": tokens, "tokens_per_s": rate, "tokens_per_param": tokens / n, "capped": capped,
            "target": min(tokens_per_param * n, max_epochs * train_tokens)}


def depth_choice(shape_at: Callable[[int], models.GPTShape], train_tokens: int, seconds: float, profile, *,
                 batch_tokens: int, epoch_cap: float, tokens_per_param: float, max_epochs: float) -> dict:
    """The depth whose token count in ``seconds`` on ``profile`` is nearest the target (Chinchilla's tokens per
    parameter, or ``max_epochs`` passes over the training tokens when that is fewer), among the depths that get
    at least ``MIN_STEPS`` steps and ``MIN_TOKENS_PER_PARAM``: a step bound by latency (a GPU's small steps)
    makes a bigger model look free, and these floors stop the choice there.

    Where the budget buys more than ``epoch_cap`` passes the run ends at the cap, so those depths' tokens are the
    cap's and tie: the largest of them with ``CAPPED_TOKENS_PER_PARAM`` is chosen (on a GPU with little data, one
    size whatever the budget, instead of the biggest model hundreds of epochs could feed)."""
    best, best_gap, rows = None, float("inf"), []
    for depth in range(1, 49):
        row = depth_row(shape_at(depth), train_tokens, seconds, profile, batch_tokens=batch_tokens,
                        epoch_cap=epoch_cap, tokens_per_param=tokens_per_param, max_epochs=max_epochs)
        rows.append(row)
        n, tokens, target = row["params"], row["tokens"], row["target"]
        floor = CAPPED_TOKENS_PER_PARAM if row["capped"] else MIN_TOKENS_PER_PARAM
        if (row["steps"] < MIN_STEPS and not row["capped"]) or tokens < floor * n:
            continue  # (the cap's steps are the data's: fewer than MIN_STEPS is all a small corpus gives)
        gap = abs(math.log(tokens / target))
        if gap < best_gap or (gap == best_gap and row["capped"]):
            best, best_gap = row, gap
    if best is None:
        return {**rows[0], "reason": f"no depth gets {MIN_STEPS} steps: depth 1"}
    if best["capped"]:
        return {**best, "reason": f"every depth up to this one reaches epoch_cap={epoch_cap:g} passes over "
                                  f"{train_tokens:,} tokens before the budget ends: the largest of them, with at "
                                  f"least {CAPPED_TOKENS_PER_PARAM:g} tokens/param"}
    limit = "data" if best["target"] < tokens_per_param * best["params"] else "compute"
    reason = (f"nearest to {tokens_per_param:g} tokens/param" if limit == "compute" else
              f"nearest to {max_epochs:g} epochs of {train_tokens:,} tokens")
    return {**best, "reason": f"{reason}, with at least {MIN_STEPS} steps and {MIN_TOKENS_PER_PARAM:g} tokens/param"}


def with_dropout(profile, dropout: float):
    """The profile a run with ``dropout`` is sized on: a CPU's matmul share over ``CPU_DROPOUT_SLOWDOWN`` (a GPU's:
    not measured, unchanged)."""
    if not dropout or profile.kind != "cpu":
        return profile
    slowed = profile.work["matmul"].scaled(f"over {CPU_DROPOUT_SLOWDOWN:.2f}x for dropout", over=CPU_DROPOUT_SLOWDOWN)
    return dataclasses.replace(profile, work={**profile.work, "matmul": slowed})


def size_for_budget(shape_at: Callable[[int], models.GPTShape], train_tokens: int, budget, profile, *,
                    batch_tokens: int, epoch_cap: float, tokens_per_param: float, max_epochs: float,
                    log=print) -> int:
    """``depth_choice`` for a time budget on this device's profile (step and epoch budgets: depth 4).

    On tinyshakespeare (362K training tokens) in bf16 on 2 CPU cores this picks depth 2 for 60 s, 3 for 2 minutes
    and 5 for 5 minutes (~3 passes; depth 4's 5.6-6.4 and depth 6's 1.9 were worse on validation there).
    """
    if budget.kind != "seconds":
        log("depth=0 with a step or epoch budget: depth 4")
        return 4
    c = depth_choice(shape_at, train_tokens, budget.amount, profile, batch_tokens=batch_tokens, epoch_cap=epoch_cap,
                     tokens_per_param=tokens_per_param, max_epochs=max_epochs)
    log(f"depth=0: depth {c['depth']} for {budget} on {profile.name}: ~{c['steps']:,.0f} steps, "
        f"~{c['tokens_per_s']:,.0f} tokens/s predicted ({c['reason']})")
    return c["depth"]


def batch_sizes(shape: models.GPTShape, budget, profile, train_tokens: int, *, batch_tokens: int, micro_batch: int,
                epoch_cap: float, log=print) -> tuple[int, int]:
    """The run's ``batch_tokens`` and ``micro_batch``: as set, or (0) chosen for ``shape`` on ``profile``."""
    batch, micro = batch_tokens, micro_batch
    windows = max(1, (train_tokens - 1 - shape.seq_len) // shape.seq_len)  # the training split's (token_windows)
    if not batch:
        timed = budget.kind == "seconds"
        batch, why = batch_choice(shape, budget.amount if timed else None, profile,
                                  cap_tokens(epoch_cap, train_tokens) if timed else math.inf)
        if batch // shape.seq_len > windows:  # a GPU's batch can outgrow a small corpus (tinyshakespeare on an H200)
            batch = max([b for b in BATCH_CHOICES if b // shape.seq_len <= windows] or BATCH_CHOICES[:1])
            why = f"the largest whose sequences fit in the training split's {windows:,} windows"
        log(f"batch_tokens=0: {batch:,} tokens a step on {profile.name}: {why}")
    if not micro:
        micro, why = micro_batch_choice(shape, batch, profile)
        if micro * profile.processes > windows:
            micro, why = max(1, windows // profile.processes), f"the training split's {windows:,} windows"
        log(f"micro_batch=0: {micro} sequences of {shape.seq_len} a pass: {why}")
    return batch, micro

