"""Prompt/response JSONL for fine-tuning (``llm/lora``): each ``{"prompt", "response"}`` line tokenized with the loss
and the score on the response only, split by a hash of each example's content, held-out examples fitted to the
context, and a batch padded to its longest example.
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
    ``seq_len`` + 1 tokens (counted); a held-out one is kept by cropping its prompt from the left, so the parts
    scored do not depend on ``seq_len`` unless a response alone is longer (those are left out, counted)."""
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
    held = {}
    for part in ("validation", "test"):
        fitted = [f for f in (fit_example(e, seq_len) for e in parts[part]) if f is not None]
        if len(fitted) < len(parts[part]):
            log(f"{source}: {len(parts[part]) - len(fitted)} of {len(parts[part])} {part} examples have a response "
                f"longer than seq_len={seq_len} tokens and are not scored (raise seq_len to score them)")
        if not fitted:
            raise ZooError(f"{source}: no {part} example fits seq_len={seq_len} (raise seq_len)")
        held[part] = fitted
    how = (f"examples by a hash of their content: {100 * test_fraction:g}% test, {100 * val_fraction:g}% validation, "
           f"the rest train")
    return ExampleSplits(train, held["validation"], held["test"], keys, how)


def fit_example(e: Example, seq_len: int) -> Example | None:
    """A held-out example within ``seq_len`` + 1 tokens: its prompt cropped from the left (one token of it at
    least stays as context); None when the response alone does not fit."""
    if len(e.ids) <= seq_len + 1:
        return e
    if sum(1 for t in e.labels if t != -100) > seq_len:
        return None
    return Example(e.ids[-(seq_len + 1):], e.labels[-(seq_len + 1):], e.response_bytes, e.line, e.key)


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
