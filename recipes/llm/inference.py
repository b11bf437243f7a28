"""Using a trained language model (``zoo predict``): the options both LLM recipes take, prompts to continue,
text to score (a file, a folder of text files or a dataset) or prompt/response examples, and the rows of
``predictions.csv`` (one per scored window or example, or per generated sample).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import torch

from recipe_zoo.core import datasets, metrics
from recipe_zoo.core.api import AnyInt, Count, NonNegativeInt, Range
from recipe_zoo.core.artifact import PredictOptions, Predictions
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm import prompt_response, textfiles, tokenization


@dataclass
class LMPredictOptions(PredictOptions):
    """data=TEXT (a file, a folder of .txt/.md files or a dataset name) is scored in bits per byte; prompt= or
    prompts= generate text instead; neither: the run's own test split, scored as the run scored it."""

    prompt: str = ""  # text to continue (generates instead of scoring)
    prompts: str = ""  # a UTF-8 file of prompts to continue, one per line (blank lines skipped)
    n: Count = 1  # samples per prompt
    max_tokens: NonNegativeInt = 0  # tokens per sample; 0 = the recipe's (gpt: the run's sample_tokens; lora: 160)
    temperature: Annotated[float, Range(-1)] = -1.0  # 0 = greedy; -1 = the recipe's (gpt: the run's; lora: 0.8)
    top_k: NonNegativeInt = 0  # sample from the k likeliest tokens only (0 = all of them)
    seed: AnyInt = -1  # the sampler's seed (each prompt starts from it); -1 = the run's seed


def prompts_of(opts: LMPredictOptions) -> list[str]:
    """The prompts to continue: ``prompt=``, then the lines of ``prompts=``; none means score text instead."""
    found = [opts.prompt] if opts.prompt else []
    if opts.prompts:
        path = Path(opts.prompts).expanduser()
        if not path.is_file():
            raise ZooError(f"prompts={opts.prompts}: no such file (one prompt per line)")
        found += [line for line in textfiles.read_text(path).splitlines() if line.strip()]
        if len(found) == bool(opts.prompt):
            raise ZooError(f"{path}: no prompts (only blank lines)")
    if found and opts.data:
        raise ZooError(f"data={opts.data} and prompt(s)=: give text to score or prompts to continue, not both")
    return found


def read_documents(name: str) -> tuple[str, list[str]]:
    """Text to score: one file (one document), a folder's .txt/.md files in sorted order (a document each), or
    a registered dataset's text; UTF-8, one line naming the file otherwise."""
    path = datasets.locate(name) if datasets.is_dataset(name) and not Path(name).exists() else Path(name).expanduser()
    if not path.exists():
        raise ZooError(f"data={name}: no such file or folder (give a UTF-8 text file to score)")
    if path.is_file():
        return str(path), [textfiles.read_text(path)]
    files = textfiles.text_files(path)
    if not files:
        raise ZooError(f"{path}: no .txt or .md files to score")
    return str(path), [textfiles.read_text(p) for p in files]


def jsonl_examples(name: str, tokenizer) -> list[prompt_response.Example]:
    """Every prompt/response example of the .jsonl file ``name``, whole (scored in windows that fit the context)."""
    path = Path(name).expanduser()
    if not path.is_file():
        raise ZooError(f"data={name}: no such file (a .jsonl of {{'prompt', 'response'}} lines)")
    return prompt_response.load_jsonl(path, tokenizer)


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _bpb(nats: float, n_bytes: float) -> float:
    return metrics.bits_per_byte(float(nats), float(n_bytes)) if n_bytes > 0 else float("nan")


def window_rows(nats: np.ndarray, n_bytes: np.ndarray, seq_len: int, n_targets: int, text: str) -> list[dict]:
    """A row per scored window: where its targets start in the text's bytes, how many bytes and tokens (windows
    are full but the last), its nats and bits per byte, and the text its targets spell (cut at bytes: a split
    character shows as U+FFFD)."""
    raw = text.encode()
    rows, at = [], 0.0
    for i, (nat, size) in enumerate(zip(nats, n_bytes)):
        a, b = round(at), round(at + size)
        rows.append({"window": i, "start_byte": a, "bytes": _number(size),
                     "tokens": min(seq_len, n_targets - i * seq_len), "nats": float(nat), "bpb": _bpb(nat, size),
                     "text": raw[a:b].decode("utf-8", errors="replace")})
        at += size
    return rows


def example_rows(examples: list, nats: np.ndarray, n_bytes: np.ndarray) -> list[dict]:
    """A row per scored prompt/response example: its line in the file, response bytes, nats and bits per byte."""
    return [{"line": e.line, "bytes": _number(size), "nats": float(nat), "bpb": _bpb(nat, size)}
            for e, nat, size in zip(examples, nats, n_bytes)]


def generations(prompts: list[str], completions: list[list[str]]) -> Predictions:
    """A row per sample (prompt, sample number, the generated continuation), and the samples as text for
    ``zoo predict`` to print."""
    rows = [{"prompt": prompt, "sample": k, "completion": text}
            for prompt, texts in zip(prompts, completions) for k, text in enumerate(texts, 1)]
    text = "".join(f"--- prompt {r['prompt']!r}, sample {r['sample']}:\n{r['prompt']}{r['completion']}\n"
                   for r in rows)
    return Predictions(rows=rows, text=text, arrays={"completions": completions})


def write_samples(model, tok, cfg, run) -> None:
    """``cfg.samples`` continuations of ``cfg.prompt`` (from the start of a document), drawn with the run's seed:
    samples.txt and the log."""
    if cfg.samples <= 0:
        return
    model.eval()
    prompt = [tok.token_to_id(tokenization.BOS)] + tok.encode(cfg.prompt, add_special_tokens=False).ids
    g = torch.Generator().manual_seed(run.seed)
    texts = [cfg.prompt + tok.decode(model.generate(prompt, cfg.sample_tokens, cfg.temperature, g))
             for _ in range(cfg.samples)]
    (run.dir / "samples.txt").write_text("\n\n----------\n\n".join(texts) + "\n")
    for i, text in enumerate(texts):
        run.log(f"sample {i + 1}:\n{text}")
