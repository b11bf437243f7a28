"""The plain reference that issue 48 measures llm/gpt against: a textbook GPT trained the usual way, on the same
text, tokenizer kind and test bytes as the recipe, for the same wall-clock budget.

    python benchmarks/plain_gpt.py --budget 5m --seed 0 [--data tinyshakespeare] [--zoo-data ../shared/data]

What it shares with ``zoo run llm/gpt`` (so only the recipe's own choices differ): the split (the last 10% test,
the 5% before it validation, the rest training: ``load_text``), a byte-level BPE of 1,024 tokens trained on the
training text, and the scoring (the first 100,000 test bytes in non-overlapping windows of the context, bits per
byte over the bytes the predicted tokens spell). What is plain: learned position embeddings, pre-LayerNorm blocks
with GELU MLPs (4x), tied input/output embeddings, AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on matrices),
a time-based warmup-stable-decay schedule (5% warmup, the last 20% linear to zero), gradient clipping at 1, fp32;
4 layers of width 192, 6 heads, context 128, 16 sequences a step. Prints one JSON line with validation and test
bits per byte, steps and tokens a second, on the hardware it names.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, width: int, depth: int, heads: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.tok.weight.T  # tied output head


def lr_factor(progress: float, warmup: float = 0.05, decay: float = 0.2) -> float:
    """Warmup-stable-decay on the fraction of the time budget spent."""
    if progress < warmup:
        return progress / warmup
    return min(1.0, (1.0 - progress) / decay)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="5m", help="wall-clock training time: 90s, 5m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default="tinyshakespeare")
    parser.add_argument("--zoo-data", help="the data cache ($ZOO_DATA)")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    if args.zoo_data:
        os.environ["ZOO_DATA"] = str(Path(args.zoo_data).resolve())
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.core.envinfo import hardware
    from recipe_zoo.recipes.llm import datasets  # noqa: F401  (declares tinyshakespeare and the other corpora)
    from recipe_zoo.recipes.llm.scoring import bits_per_byte
    from recipe_zoo.recipes.llm.text_splits import eval_text, load_text
    from recipe_zoo.recipes.llm.tokenization import encode_docs, token_bytes, train_bpe

    budget = parse_budget(args.budget)
    if budget.kind != "seconds":
        raise SystemExit(f"--budget {args.budget}: a time (the reference trains for wall-clock time)")
    torch.manual_seed(args.seed)
    splits = load_text(args.data, 0.05, 0.1, log=lambda *a: None)
    tok = train_bpe(splits.train, 1024)
    train = encode_docs(tok, splits.train).long()
    model = GPT(tok.get_vocab_size(), args.context, args.width, args.depth, args.heads)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    steps, trained, start = 0, 0.0, time.perf_counter()
    while trained < budget.amount:
        for group in opt.param_groups:
            group["lr"] = args.lr * lr_factor(trained / budget.amount)
        at = torch.randint(0, len(train) - args.context - 1, (args.batch,), generator=gen)
        rows = torch.stack([train[a:a + args.context + 1] for a in at])
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps += 1
        trained = time.perf_counter() - start
    model.eval()
    per_token = token_bytes(tok)
    scores = {}
    for part in ("validation", "test"):
        tokens = encode_docs(tok, [eval_text(splits, 100_000, "test" if part == "test" else "val")])
        scores[part] = bits_per_byte(model, tokens, args.context, 32, torch.device("cpu"), per_token[tokens[1:].long()])
    print(json.dumps({"reference": "plain BPE GPT", "data": args.data, "budget": args.budget, "seed": args.seed,
                      "val_bpb": scores["validation"], "test_bpb": scores["test"], "steps": steps,
                      "tokens_per_s": steps * args.batch * args.context / trained, "train_seconds": trained,
                      "params_M": sum(p.numel() for p in model.parameters()) / 1e6,
                      "shape": f"{args.depth}x{args.width}, context {args.context}, batch {args.batch}",
                      "hardware": hardware(), "torch_threads": torch.get_num_threads()}), flush=True)
    assert math.isfinite(scores["test"])


if __name__ == "__main__":
    main()
