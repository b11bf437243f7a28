"""Paired ranks: two rows of one table are scored on the same test items, so whether they differ is asked of the
difference between them, item for item, not of their intervals side by side. A hierarchical bootstrap resamples
both levels of noise together: each row's seeds (its training noise) and the test items (the test set's noise,
the same draw for both rows, in blocks where neighbours go together). Two rows whose 95% interval of the difference
excludes zero are told apart, however much their intervals overlap.

A row keeps its seeds' per-item scores in ``benchmarks/items.jsonl`` (``zoo bench``: one line per row, named by
the row's ``items``); a row without them (measured before they were kept), or two rows not scored on the same items
(another split, another window length), are compared by the unpaired rule (``welch_together``, ``board.together``)."""
from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path

import numpy as np

from recipe_zoo.core import items, metrics

ROUNDS = 1000
LEVEL = 0.95


def split_digest(run_dir: Path) -> str:
    """The run's test items in the order its ``split.csv`` lists them, as a digest: two runs with the same one
    scored the same items (the order too: item scores are paired by position). A cross-validated run tests every
    item once, pooled over its folds in the order its folds are listed: its digest is of the whole file (each
    item and the fold that tests it), so two runs pair when they assigned every item to the same fold."""
    import csv

    path = run_dir / "split.csv"
    if not path.exists():
        return ""
    with open(path, newline="") as f:
        rows = [(r["item"], r.get("split") or "") for r in csv.DictReader(f)]
    keys = [item for item, part in rows if part == "test"]
    if not keys and any(part.startswith(("fold", "test fold")) for _, part in rows):
        keys = [f"{part}\t{item}" for item, part in rows]
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16] if keys else ""


def items_line(run_dirs: list[Path]) -> dict | None:
    """One row's line of ``items.jsonl``: each seed's test items (digest) and per-item scores; None when a seed
    kept none (a recipe without them, a metric that is not a mean of items: FID)."""
    seeds = []
    for run_dir in run_dirs:
        scores = items.load(run_dir)
        if scores is None:
            return None
        seeds.append({"split": split_digest(run_dir), **scores.to_json()})
    line = {"seeds": seeds}
    return {"id": hashlib.sha256(json.dumps(line, sort_keys=True).encode()).hexdigest()[:16], **line}


def lines() -> dict[str, dict]:
    """Every row's item scores on the board, by id (read again only when a file changed)."""
    from recipe_zoo import board

    files = board._files("items.jsonl")
    return _lines(tuple((str(p), *((p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else ())) for p in files))


@functools.lru_cache(maxsize=4)
def _lines(state: tuple) -> dict[str, dict]:
    from recipe_zoo import board

    return {line["id"]: line for line in board.all_rows("items.jsonl")}


_SEEDS: dict[str, tuple] = {}  # id -> its seeds' (test digest, scores): an id is a hash of its line, never reused


def difference(a: dict, b: dict, known: dict[str, dict] | None = None) -> tuple[float, float] | None:
    """The 95% interval of row ``a``'s metric minus row ``b``'s, paired; None when they cannot be paired.
    ``known``: the item lines by id (the board's, by default)."""
    known = lines() if known is None else known
    if a.get("items") not in known or b.get("items") not in known:
        return None
    for ident in (a["items"], b["items"]):
        if ident not in _SEEDS:
            _SEEDS[ident] = tuple((s["split"], items.ItemScores.from_json(s)) for s in known[ident]["seeds"])
    if a["items"] <= b["items"]:  # one bootstrap per pair, whichever row is asked first: b - a is -(a - b)
        return _difference(a["items"], b["items"])
    flipped = _difference(b["items"], a["items"])
    return None if flipped is None else (0.0 - flipped[1], 0.0 - flipped[0])  # 0.0 - x: a zero bound stays +0


VERSION = 1  # of the bootstrap below: part of its results' cache key


@functools.lru_cache(maxsize=1024)
def _difference(a_id: str, b_id: str) -> tuple[float, float] | None:
    """``_bootstrap`` of the pair, kept in the zoo's cache (ids hash their lines, so a result never goes stale): a
    board of many pairs is rendered again at once, in any process."""
    import os
    import tempfile

    from recipe_zoo.core.flops import computed_cache_root

    path = computed_cache_root() / "paired" / f"{a_id}-{b_id}-v{VERSION}-r{ROUNDS}-l{LEVEL}.json"
    try:
        found = json.loads(path.read_text())
        return None if found is None else tuple(found)
    except (OSError, ValueError):
        pass
    result = _bootstrap(a_id, b_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(result, f)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: computed again next time
        pass
    return result


def _bootstrap(a_id: str, b_id: str) -> tuple[float, float] | None:
    a, b = _SEEDS[a_id], _SEEDS[b_id]
    scores = [x for _, x in a + b]
    if len({(x.kind, x.block) for x in scores}) != 1 or "" in {s for s, _ in a + b}:
        return None
    if len({s for s, _ in a + b}) == 1 and len({len(x) for x in scores}) == 1:
        return _interval(shared_items(a, b))
    if len(a) == len(b) and all(sa == sb and len(xa) == len(xb) for (sa, xa), (sb, xb) in zip(a, b)):
        return _interval(paired_seeds(a, b))
    return None  # other items (another split, another window length): nothing to pair


def shared_items(a, b) -> np.ndarray:
    """Every seed of both rows scored the same items: each round draws the items once for both rows and each row's
    seeds with replacement, and takes the difference of the rows' means over their drawn seeds."""
    rng = np.random.default_rng(0)
    first = a[0][1]
    out = np.empty(ROUNDS)
    for r in range(ROUNDS):
        idx = items.draw(rng, len(first), first.block)
        va = np.array([x.statistic(idx) for _, x in a])
        vb = np.array([x.statistic(idx) for _, x in b])
        out[r] = va[rng.integers(0, len(a), len(a))].mean() - vb[rng.integers(0, len(b), len(b))].mean()
    return out


def paired_seeds(a, b) -> np.ndarray:
    """Each seed has its own split (molecules' scaffold splits): seed k of both rows scored the same items, so each
    round draws seeds with replacement for both rows alike and, within each, the items once for both."""
    rng = np.random.default_rng(0)
    out = np.empty(ROUNDS)
    for r in range(ROUNDS):
        total = 0.0
        for k in rng.integers(0, len(a), len(a)):
            xa, xb = a[k][1], b[k][1]
            idx = items.draw(rng, len(xa), xa.block)
            total += xa.statistic(idx) - xb.statistic(idx)
        out[r] = total / len(a)
    return out


def _interval(values: np.ndarray) -> tuple[float, float] | None:
    """The differences' 95% interval; None when most resamples left the metric undefined (one class drawn)."""
    values = values[np.isfinite(values)]
    return metrics.percentile_interval(values, LEVEL) if len(values) >= ROUNDS // 2 else None


def welch_together(a: dict, b: dict, level: float = 0.95) -> bool:
    """Welch's two-sided t-test of two rows' seed means does not reject equal means at ``level``."""
    from scipy import stats

    va, vb = a["std"] ** 2 / a["n"], b["std"] ** 2 / b["n"]
    d = abs(a["mean"] - b["mean"])
    if va + vb == 0:  # seeds that all scored alike on both sides: equal or told apart by their means alone
        return d == 0
    df = (va + vb) ** 2 / (va ** 2 / (a["n"] - 1) + vb ** 2 / (b["n"] - 1))
    return d <= stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
