"""A fine-tune's source: a finished zoo run named by ``weights=RUN_DIR``, read through its card and checked before
anything trains.

What a recipe must inherit from its source (the tokenizer, the shape) is taken from the card; a setting the user
gave that contradicts it is refused in one line naming both values, never silently overridden. What the run
records of its source (``provenance``): the source's folder, run id, recipe and a sha256 of its card and weights, so
a row can name what it started from and the board never ranks it as trained from scratch.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo.core import artifact, splits
from recipe_zoo.core.errors import ZooError


@dataclass(frozen=True)
class Source:
    folder: Path
    card: dict
    config: dict  # the source run's resolved config (config.json)

    def path(self, name: str) -> Path:
        return self.folder / name


def read_source(weights: str, recipes: tuple[str, ...]) -> Source:
    """The run folder ``weights`` names (or the folder of its ``model.safetensors``), trained by one of
    ``recipes``: one line naming the folder otherwise."""
    folder = Path(weights).expanduser()
    if folder.is_file() and folder.name == "model.safetensors":
        folder = folder.parent
    if not folder.is_dir():
        raise ZooError(f"weights={weights}: no such run folder (give the folder of a finished "
                       f"{' or '.join(recipes)} run)")
    card = artifact.read_card(folder)
    if card.get("recipe") not in recipes:
        raise ZooError(f"weights={weights}: a {card.get('recipe')} run; this recipe fine-tunes from "
                       f"{' or '.join(recipes)} runs")
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    return Source(folder.resolve(), card, config.get("config", config))


def inherit(cfg, source: Source, fields: dict[str, object], what: str, variant: dict | None = None):
    """``cfg`` with each of ``fields`` (name: the source's value) taken from the source. A field the user set off
    its default (the recipe variant's, ``variant``, where it has one) to another value than the source's is
    refused: ``what`` names what must match."""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)} | dict(variant or {})
    for name, theirs in fields.items():
        mine = getattr(cfg, name)
        if mine != defaults[name] and mine != theirs:
            raise ZooError(f"{name}={mine}: the source run {source.folder} was trained with {name}={theirs}, and a "
                           f"fine-tune keeps its {what}; leave {name} unset (or give {name}={theirs})")
    return dataclasses.replace(cfg, **fields)


def score_start(model, evaluate, device, precision: str) -> dict[str, float]:
    """``evaluate(model)`` before the first step, as the loop evaluates: in eval mode, without gradients, under the
    run's autocast; the model's training mode restored. What a fine-tune reports as ``val_..._start``."""
    import torch

    from recipe_zoo.core.precision import autocast

    was_training = model.training
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        scores = evaluate(model)
    model.train(was_training)
    return scores


def provenance(source: Source) -> dict:
    """What a fine-tuned run records of its source (in its card): folder, run id, recipe, and a sha256 over the
    source's card and weight files (the bytes it started from)."""
    h = hashlib.sha256(source.path(artifact.CARD).read_bytes())
    for name in source.card.get("weights", []):
        h.update(source.path(name).read_bytes())
    return {"folder": str(source.folder), "run_id": source.folder.name, "recipe": source.card.get("recipe"),
            "sha256": h.hexdigest()}


def seen_items(source: Source) -> set[str]:
    """The items the source trained or selected on and was not itself tested on: every item of its ``split.csv``
    outside its test split (after k folds, all of them: each was trained on in some fold). An item in both (a
    table that repeats a molecule in rows the split put on both sides) was already in the source's own score."""
    path = source.path("split.csv")
    if not path.is_file():
        return set()
    with open(path, newline="") as f:
        rows = [(row["item"], row["split"]) for row in csv.DictReader(f)]
    return {item for item, part in rows if part != "test"} - {item for item, part in rows if part == "test"}


def check_unseen(source: Source, test_items, what: str) -> None:
    """One line when any of this run's test items was in the source's training or validation data: a fine-tune
    is scored on items its source never saw (the items compared as both runs' ``split.csv`` names them)."""
    seen = seen_items(source)
    items = list(dict.fromkeys(splits.readable_key(item) for item in test_items))  # as split.csv names them
    leaked = [item for item in items if item in seen]
    if leaked:
        raise ZooError(f"weights={source.folder}: {len(leaked)} of this run's {len(items)} test {what} were in the "
                       f"source run's training or validation data (first: {leaked[0]!r}); a fine-tune must be scored "
                       f"on {what} its source never saw: pretrain without them, or fine-tune on other data")
