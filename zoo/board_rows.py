"""A quality table's rows as the board shows them, for the Markdown page (``board_render``) and the HTML one
(``board_html``) alike: the order and ranks, the short cells of the table, one details line per row (command,
commit, full hardware, cost, verification), and how each row was chosen (the variants of its recipe benched on the
same key before it)."""
from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass

from recipe_zoo.board import (PROTOCOL, REFERENCE, fixed_work, label, number_text, precision_text, protocol, ranked,
                              ranks, row_id, row_name, stale, table_key, value_text)

_CPU = re.compile(r"\s*\[family (\d+) model (\d+) stepping \d+(?:, ([^\]]+))?\]")


def short_hardware(hardware: str) -> str:
    """A hardware string short enough for a cell: ``AMD EPYC [family 25 model 1 stepping 1, AVX2] (2 threads)`` is
    ``AMD EPYC 25/1, AVX2 (2 threads)`` (CPU family/model, its widest vector units); GPUs are short already."""
    text = re.sub(r"\((?:R|TM)\)|\s+(?:Processor|CPU)\b", "", hardware)
    text = _CPU.sub(lambda m: f" {m[1]}/{m[2]}" + (f", {m[3]}" if m[3] else ""), text)
    return re.sub(r"\s+", " ", text).strip()


def same_setting(earlier: dict, row: dict) -> bool:
    """Two rows measure one setting of a recipe: the same label (recipe and overrides) and, where both were measured
    on one machine, the same resolved configuration's hash (else a default changed in the code between them); on
    two machines a hash also holds each one's device choices, so there the label alone tells."""
    if label(earlier) != label(row):
        return False
    hashes = earlier.get("config_hash"), row.get("config_hash")
    return earlier["hardware"] != row["hardware"] or None in hashes or hashes[0] == hashes[1]


def lineage(row: dict) -> tuple:
    """The key variants of a recipe are chosen on: protocol, benchmark, metric, the table's budget slot (the
    reference, a work budget or a time) and the recipe; not the machine nor the precision, which are settings too."""
    return protocol(row), row["benchmark"], row["metric"], table_key(row)[4], row["recipe"]


def chosen(history: list[dict]) -> dict[int, str]:
    """How each row (by ``id``) was chosen, from the rows in the order they were benched (the files' order): ``1st``
    when no other variant of its recipe (``same_setting``) was benched on its key before it; ``best of N`` when it is at
    least as good as each of the N - 1 variants benched before it (a row picked among several: N test figures were
    seen); ``after N`` when N variants came before it and one of them is better."""
    seen: dict[tuple, list[dict]] = defaultdict(list)
    out = {}
    for row in history:
        key = lineage(row)
        before = [p for p in seen[key] if not same_setting(p, row)]
        others = {(label(p), p.get("config_hash") if p["hardware"] == row["hardware"] else None) for p in before}
        sign = 1 if row["higher_is_better"] else -1
        if not others:
            out[id(row)] = "1st"
        elif all(sign * (row["mean"] - p["mean"]) >= 0 for p in before):
            out[id(row)] = f"best of {len(others) + 1}"
        else:
            out[id(row)] = f"after {len(others)}"
        seen[key].append(row)
    return out


def title(key: tuple) -> str:
    """A table's heading (without ``## ``), as other pages link to it."""
    proto, bench, _, metric, budget, where = key
    if budget == REFERENCE:
        text = f"{bench} · {metric} · reference runs · {where}"
    else:
        text = f"{bench} · {metric} · {budget}" + (f" of work · {where}" if fixed_work(budget) else f" · {where}")
    return text + (f" · protocol {proto}" if proto < PROTOCOL else "")


@dataclass
class Shown:
    """One row of a quality table: its rank (``stale`` for a row not ranked), its name in the table (``r3``) and
    why it is stale ('' when it is not)."""
    rank: str
    ref: str
    row: dict
    why: str = ""


def shown(table: list[dict], prints=(), known=None) -> list[Shown]:
    """The rows in the board's order: the current ones ranked, best first, then the stale ones."""
    why = {row_id(r): w for r in table if (w := stale(r, prints))}
    fresh, old = [r for r in table if row_id(r) not in why], [r for r in table if row_id(r) in why]
    order = (list(zip(ranks(fresh, known or {}), ranked(fresh))) if fresh else []) + [("stale", r) for r in old]
    return [Shown(rank, f"r{i}", r, why.get(row_id(r), "")) for i, (rank, r) in enumerate(order, 1)]


HEADER = ("| rank | recipe | {work}value | test 95% | vs best, paired 95% | validation | chosen | n | hardware | row |",
          "|---:|---|{work}---|---|---|---|---|---:|---|---|")


def header(reference: bool) -> list[str]:
    return [line.format(work=("work | " if reference else "")) if "rank" in line else
            line.format(work=("---|" if reference else "")) for line in HEADER]


def cells(line: Shown, best: dict, known, how: str, reference: bool) -> list[str]:
    """The table's cells of one row, each short: the long parts are its details line."""
    r = line.row
    ci = f"{number_text(r.get('ci_low'))}..{number_text(r.get('ci_high'))}" if r.get("ci_low") is not None else "-"
    mark = " †" if chosen_on_test(r["recipe"]) else ""
    work = [f"{r['budget']}, {precision_text(r.get('precision'))}"] if reference else []
    versus = versus_best(r, best, known) if line.rank != "stale" else "-"
    return [line.rank, name(r) + mark, *work, value_text(r), ci, versus, number_text(r.get("val_mean")), how,
            str(r["n"]), short_hardware(r["hardware"]), line.ref]


def name(row: dict) -> str:
    """The row's name in its table: ``board.row_name`` less ``data=BENCHMARK``, which the table's heading says."""
    return " ".join(word for word in row_name(row).split(" ") if word != f"data={row['benchmark']}")


def details(line: Shown, checks) -> str:
    """``- r3: `command` at commit, date; full hardware; config; cost; verified: ...``."""
    r = line.row
    cost = "; ".join(part for part in (
        f"train {number_text(r.get('train_seconds'), 1)} s" if r.get("train_seconds") is not None else "",
        f"{number_text(r.get('params_M'), 2)} M params" if r.get("params_M") is not None else "",
        f"peak {number_text(r.get('peak_mem_mb'), 0)} MB" if r.get("peak_mem_mb") is not None else "") if part)
    config = f"config {r['config_hash']}" if r.get("config_hash") else "configuration not recorded"
    return (f"- {line.ref}: `{r.get('command', '')}` at {r.get('commit', '-')}, {r.get('date', '-')}; "
            f"{r['hardware']}; {config}" + (f"; {cost}" if cost else "") + f"; verified: {verified(r, checks)}")


def versus_best(row: dict, best: dict, known: dict) -> str:
    """The row's metric minus the best row's, the 95% interval of the paired bootstrap (``paired``): ``unpaired``
    where the two cannot be paired (a row without per-item scores, other test items)."""
    from recipe_zoo import paired

    if row is best:
        return "-"
    difference = paired.difference(row, best, known)
    return "unpaired" if difference is None else f"{difference[0]:+.4g}..{difference[1]:+.4g}"


def verified(row: dict, checks) -> str:
    """The latest ``zoo verify`` of this row on each machine it was re-run on: ``ok 2026-12-01 on HARDWARE @
    commit`` (``-dirty`` when the tree was not clean) or ``FAILED ...``; ``-`` if never."""
    latest = {}
    for c in checks:
        if c["row"] == row_id(row):
            latest[c.get("hardware", row["hardware"])] = c
    if not latest:
        return "-"
    return "; ".join(f"{'ok' if c['passed'] else '**FAILED**'} {c['date']} (n={c['n']}: {number_text(c['mean'])})"
                     + ("" if hardware == row["hardware"] else f" on {hardware}")
                     + (f" @ {c['commit']}" if c.get("commit") else "")
                     + (" (uncommitted changes)" if c.get("dirty") or str(c.get("commit", "")).endswith("-dirty")
                        else "") for hardware, c in latest.items())


@functools.lru_cache(maxsize=None)
def chosen_on_test(recipe: str) -> str:
    """What of a recipe's defaults was read off a test split (its config's ``CHOSEN_ON_TEST``), or '' (also for a
    row of a recipe no longer registered, or an own-data run's label). Once per recipe and process: a board of many
    rows imports each recipe's module once."""
    from recipe_zoo import registry

    if recipe not in {row["name"] for row in registry.static_list()}:
        return ""
    return getattr(registry.get(recipe).config, "CHOSEN_ON_TEST", "")
