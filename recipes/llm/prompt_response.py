"""Prompt/response JSONL for fine-tuning (``llm/lora``): each ``{"prompt", "response"}`` line tokenized with the loss
and the score on the response only, split by a hash of each example's content, held-out examples scored whole in
windows that fit the context, and a batch padded to its longest example.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from recipe_zoo.core import splits as core_splits
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm.text_splits import check_fractions
from recipe_zoo.recipes.llm.textfiles import read_text


@dataclass
class Example:
    ids: list[int]
    labels: list[int]  # -100 on the prompt: the loss is on the response only
    response_bytes: int
    line: int = 0  # its line in the file
    key: bytes = b""  # its content (prompt and response): copies of an example share a side of the split


def load_jsonl(path: Path, tokenizer) -> list[Example]:
    """Every ``{"prompt", "response"}`` line, tokenized, whatever its length (``split_examples`` decides)."""
    examples = []
    lines = read_text(path).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ZooError(f"{path} line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise ZooError(f"{path} line {number}: expected an object with 'prompt' and 'response', "
                           f"got {type(item).__name__}")
        for key in ("prompt", "response"):
            if key not in item:
                near = [k for k in item if isinstance(k, str) and k.lower().strip() == key]
                raise ZooError(f"{path} line {number}: missing string field {key!r}"
                               + (f" (found {near[0]!r})" if near else f" (fields: {', '.join(map(str, item))})"))
            if not isinstance(item[key], str):
                raise ZooError(f"{path} line {number}: field {key!r} must be a string, got "
                               f"{type(item[key]).__name__}")
        prompt = tokenizer(item["prompt"], add_special_tokens=True).input_ids
        response = tokenizer(item["response"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        examples.append(Example(prompt + response, [-100] * len(prompt) + response, len(item["response"].encode()),
                                number, json.dumps([item["prompt"], item["response"]]).encode()))
    if not examples:
        raise ZooError(f"{path}: no {{'prompt', 'response'}} examples")
    return examples


@dataclass
class ExampleSplits:
    train: list[Example]
    val: list[Example]
    test: list[Example]
    keys: dict[str, list[str]]  # train / validation / test: the examples' lines (split.csv)
    how: str


def split_examples(examples: list[Example], val_fraction: float, test_fraction: float, seq_len: int, source,
                   log=print) -> ExampleSplits:
    """Test and validation chosen by a hash of each example's content (``core.splits.carve``: the same examples
    in any order, on any machine; copies of an example share a side): ``test_fraction`` of the distinct examples
    are test, ``val_fraction`` of them validation, the rest train. Training drops examples longer than
    ``seq_len`` + 1 tokens (counted); held-out ones are kept whole, whatever their length (``score_windows``
    fits them to the context when they are scored), so the items and tokens scored do not depend on ``seq_len``."""
    check_fractions(val_fraction, test_fraction)
    distinct = list(dict.fromkeys(e.key for e in examples))
    if len(distinct) < 3:
        raise ZooError(f"{source}: {len(distinct)} distinct examples: too few to hold out validation and test and "
                       "still train on some (3 at least)")
    test_keys = {k for k, held in zip(distinct, core_splits.carve(distinct, test_fraction, salt="test")) if held}
    rest = [k for k in distinct if k not in test_keys]
    val_keys = {k for k, held in zip(rest, core_splits.carve(rest, val_fraction / (1 - test_fraction)))
                if held}
    side = {k: "test" if k in test_keys else "validation" if k in val_keys else "train" for k in distinct}
    parts: dict[str, list[Example]] = {"train": [], "validation": [], "test": []}
    for e in examples:
        parts[side[e.key]].append(e)
    keys = {part: [f"line {e.line}" for e in chosen] for part, chosen in parts.items()}
    train = [e for e in parts["train"] if len(e.ids) <= seq_len + 1]
    if len(train) < len(parts["train"]):
        log(f"{source}: {len(parts['train']) - len(train)} of {len(parts['train'])} training examples are longer than "
            f"seq_len={seq_len} + 1 tokens and were dropped (raise seq_len to keep them)")
    if not train:
        raise ZooError(f"{source}: no usable training examples ({len(parts['train'])} longer than seq_len={seq_len} "
                       "+ 1 tokens)")
    how = (f"examples by a hash of their content: {100 * test_fraction:g}% test, {100 * val_fraction:g}% validation, "
           f"the rest train")
    return ExampleSplits(train, parts["validation"], parts["test"], keys, how)


def score_windows(e: Example, seq_len: int) -> list[Example]:
    """The windows of at most ``seq_len`` + 1 tokens that score ``e``'s whole response, each token once: the
    example itself where it fits; else one window with the prompt cropped from the left (a token of it at least
    stays as context) where the response fits; a longer response in windows of ``seq_len // 2`` scored tokens,
    each token seeing at least ``seq_len // 2`` tokens before it (the prompt's end, then the response)."""
    if len(e.ids) <= seq_len + 1:
        return [e]
    scored = [i for i, t in enumerate(e.labels) if t != -100]  # one run: the response follows the prompt
    first, end = scored[0], scored[-1] + 1
    step = end - first if end - first <= seq_len else max(1, seq_len // 2)
    windows = []
    for a in range(first, end, step):
        b = min(a + step, end)
        lo = max(0, b - seq_len - 1)
        windows.append(Example(e.ids[lo:b], [-100] * (a - lo) + e.labels[a:b], 0, e.line, e.key))
    return windows


def pad_examples(examples: list[Example], pad_id: int) -> tuple[torch.Tensor, ...]:
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, e in enumerate(examples):
        ids[row, :len(e.ids)] = torch.tensor(e.ids)
        labels[row, :len(e.labels)] = torch.tensor(e.labels)
        mask[row, :len(e.ids)] = 1
    return ids, labels, mask
