"""The leaderboard rendered: ``leaderboard.md`` (the reference tables at fixed work with their speed per machine,
then the time-budget tables of one machine each; the rows ranked within each table, results reported elsewhere
beside them), ``leaderboard-protocol1.md`` (the archive) and a chart per table, each rewritten whole under the
board's lock (``board.rendering``)."""
from __future__ import annotations

import functools
import os
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from recipe_zoo.board import (EVERY_MACHINE, KINDS, PROTOCOL, REFERENCE, all_rows, board_dir, fixed_work, group, label,
                              machine_free, metric_base, number_text, precision_text, protocol, ranked, ranks,
                              rendering, row_id, row_name, stale, value_text)
from recipe_zoo.core.errors import ResourceError


HEAD = ("Rendered by `zoo board --write` from `benchmarks/results.jsonl`, `speed.jsonl` and `transfer.jsonl`; do "
        "not edit by hand. The value is the test metric, mean ± std over n seeds (one seed shows no ±); *test 95%* is "
        "the bootstrap interval over the test items (the test set's own noise, averaged over seeds). A row's rank is "
        "1 + the number of rows with a better mean that the data tells apart from it, so rows not told apart share a "
        "rank (written =k) and a rank is a test, not a position: told apart when the 95% interval of the two rows' "
        "difference (*vs best, paired 95%*: a bootstrap that resamples both rows' seeds and, the same draw for both, "
        "the test items they were scored on, in blocks where neighbours go together) excludes zero. Rows without "
        "per-item scores (measured before they were kept), or not scored on the same items, show *unpaired*: "
        "Welch's t-test on their seeds at 95%, or, with one seed on a side, their test intervals overlap. "
        "*validation* is what selection read. A *stale* row was "
        "measured by a recipe whose behaviour has changed since (its fingerprint, `benchmarks/fingerprint.py`, "
        "differs at the latest fingerprinted commit): shown, not ranked.")
METRIC_NOTES = {"fid_zoo": "`fid_zoo` is the Fréchet distance in the zoo's own feature network (a small classifier "
                           "trained on the benchmark's training split: `diffusion/models.py`'s FeatureNet), "
                           "comparable only with other `fid_zoo` values, never with published Inception FIDs."}


def render(rows: list[dict], reported: list[dict], checks: list[dict] = (), speed: list[dict] = (),
           prints: list[dict] = (), items: list[dict] = (), transfer: list[dict] = ()) -> str:
    """Markdown, deterministic for the same rows (no clock, no machine state): the reference tables (fixed work,
    every machine, each with its speed per device), then the time-budget tables (one machine each), then the
    transfer tables. Protocol-1 rows are the archive's (``render_archive``)."""
    from recipe_zoo import references

    out = ["# Leaderboard", "", HEAD, "",
           "Tables of results measured before the train / validation / test protocol are kept apart, in "
           "[the archive](leaderboard-protocol1.md).", ""]
    tables = group([r for r in rows if protocol(r) >= PROTOCOL])
    known = {line["id"]: line for line in items}  # each row's per-item test scores (paired ranks)
    reported_by_bench = defaultdict(list)
    for r in reported:
        reported_by_bench[(r["benchmark"], metric_base(r["metric"]))].append(r)
    fixed = {key: t for key, t in tables.items() if machine_free(key[4])}
    out += ["# Reference tables: fixed work, every machine", "",
            "Each benchmark's reference runs train a fixed amount of work (optimizer steps at a fixed batch; boosting "
            "rounds for trees) with everything a device would choose pinned (`zoo show RECIPE` lists them), so rows "
            "measured on any machine are ranked together; each row names the hardware its seeds ran on, and the "
            "speed of the work on each machine measured follows the table. `zoo run RECIPE --reference "
            "[BENCHMARK]` reproduces a reference and ranks it here; `zoo bench RECIPE --reference --speed` adds a "
            "machine's speed.", ""]
    for bench in dict.fromkeys(r.benchmark for r in references.REFERENCES):
        refs = references.on_benchmark(bench)
        keys = [k for k in fixed if (k[1], k[4]) == (bench, REFERENCE)]
        measured = {r["recipe"] for k in keys for r in fixed[k]}
        missing = [r for r in refs if r.recipe not in measured]
        stub = ["Not measured yet: " + ", ".join(f"`{r.command('bench')}`" for r in missing) + " (3 seeds).", ""]
        if not keys:
            out += [f"## {bench} · reference runs · {EVERY_MACHINE}", "", *_reference_lines(refs), *stub]
        for key in keys:
            out += _table(key, fixed.pop(key), checks, refs, speed, prints, known)[:-1] + (stub if missing else []) + [""]
            out += _reported_table(reported_by_bench.pop((bench, metric_base(key[3])), []))
    for key, table in fixed.items():  # other work budgets: every machine, one table per work and precision
        out += _table(key, table, checks, [], speed, prints, known)
    timed = {key: t for key, t in tables.items() if not machine_free(key[4])}
    if timed:
        out += ["# Time budgets: quality in a time on one machine", "",
                "A time budget buys another amount of work on each machine, so each of these tables is one "
                "hardware string's: time-to-quality on a named machine.", ""]
    for key, table in timed.items():
        out += _table(key, table, checks, [], (), prints, known)
        out += _reported_table(reported_by_bench.pop((key[1], metric_base(key[3])), []))
    out += _transfer_tables(transfer)
    for (bench, metric), elsewhere in sorted(reported_by_bench.items()):
        out += [f"## {bench} · {metric} (reported elsewhere only)", ""] + _reported_table(elsewhere)
    if not rows:
        out.append("No measured rows yet.")
    return "\n".join(out).rstrip() + "\n"


def render_archive(rows: list[dict]) -> str:
    """The protocol-1 tables: measured before selection was confined to a validation split, never ranked against
    the board's."""
    out = ["# Leaderboard archive: protocol 1", "",
           "Rendered by `zoo board --write`; do not edit by hand. These rows were measured before train / validation "
           "/ test (some defaults were chosen on the split reported here): shown apart, never ranked against "
           "[the leaderboard](leaderboard.md)'s tables.", ""]
    for key, table in group([r for r in rows if protocol(r) < PROTOCOL]).items():
        out += _table(key, table, (), [], ())
    if len(out) == 4:
        out.append("No protocol-1 rows.")
    return "\n".join(out).rstrip() + "\n"


def render_tables(rows: list[dict]) -> str:
    """Rows' tables alone, without the board's sections and reference stubs (``zoo board --data``'s own runs)."""
    return "\n".join(line for key, table in group(rows).items() for line in _table(key, table, (), [], ())).rstrip()


def _reference_lines(refs) -> list[str]:
    from recipe_zoo import references

    return [f"Reference: `{r.command()}` = `{r.expanded()}` (config {references.config_hash(r)})" + (
        f"; {r.why}" if r.why else "") + "." for r in refs] + ([""] if refs else [])


def _table(key: tuple, table: list[dict], checks, refs, speed, prints=(), known=None) -> list[str]:
    proto, bench, split, metric, budget, where = key
    higher = table[0]["higher_is_better"]
    reference, work = budget == REFERENCE, fixed_work(budget)
    title = (f"## {bench} · {metric} · reference runs · {where}" if reference else
             f"## {bench} · {metric} · {budget}" + (f" of work · {where}" if work else f" · {where}"))
    scope = ("Budget: each recipe's reference work (the *work* column) in its pinned precision: every machine's rows "
             "together." if reference else f"Budget: {budget} of work per run, precision {where}: every machine's "
             "rows together." if work else f"Budget: {budget} of training time per run, on this hardware only.")
    out = [title + (f" · protocol {proto}" if proto < PROTOCOL else ""), "",
           f"Metric: **{metric}** on split `{split}` ({'higher' if higher else 'lower'} is better). {scope}", ""]
    out += [note + "\n" for kind, note in METRIC_NOTES.items() if kind in metric_base(metric)]
    out += _reference_lines(refs)
    current = proto >= PROTOCOL
    if current:
        out += ["| rank | recipe | " + ("work | " if reference else "") + "value | test 95% | vs best, paired 95% | "
                "validation | n | hardware | train s | params (M) | peak mem (MB) | commit | date | verified | command |",
                "|---:|---|" + ("---|" if reference else "") + "---|---|---|---|---:|---|---:|---:|---:|---|---|---|---|"]
    else:
        out += ["| rank | recipe | value | n | train s | params (M) | peak mem (MB) | commit | date | command |",
                "|---:|---|---|---:|---:|---:|---:|---|---|---|"]
    why = {row_id(r): w for r in table if (w := stale(r, prints))}
    fresh, old = [r for r in table if row_id(r) not in why], [r for r in table if row_id(r) in why]
    known = {} if known is None else known
    order = (list(zip(ranks(fresh, known), ranked(fresh))) if fresh else []) + [("stale", r) for r in old]
    for rank, r in order:
        if current:
            ci = f"{number_text(r.get('ci_low'))}..{number_text(r.get('ci_high'))}" if r.get("ci_low") is not None \
                else "-"
            work_cell = f" {r['budget']}, {precision_text(r.get('precision'))} |" if reference else ""
            mark = " †" if chosen_on_test(r["recipe"]) else ""
            cells = (f"| {rank} | {row_name(r)}{mark} |{work_cell} {value_text(r)} | {ci} | "
                     f"{versus_best(r, order[0][1], known) if rank != 'stale' else '-'} | "
                     f"{number_text(r.get('val_mean'))} | {r['n']} | {r['hardware']} |")
            tail = f" {verified(r, checks)} |"
        else:
            cells, tail = f"| {rank} | {label(r)} | {value_text(r)} | {r['n']} |", ""
        out.append(f"{cells} {number_text(r.get('train_seconds'), 1)} | {number_text(r.get('params_M'), 2)} | "
                   f"{number_text(r.get('peak_mem_mb'), 0)} | {r.get('commit', '-')} | {r.get('date', '-')} |{tail} "
                   f"`{r.get('command', '')}` |")
    out.append("")
    out += [f"stale: `{r.get('command', row_name(r))}` @ {r.get('commit', '?')}: {why[row_id(r)]} (its fingerprint); "
            "not ranked until measured again." for r in old] + ([""] if old else [])
    chosen = {r["recipe"]: note for r in table if (note := chosen_on_test(r["recipe"]))}
    out += [f"† {recipe}: defaults chosen on test (protocol 1), kept until re-chosen on validation: {note}."
            for recipe, note in sorted(chosen.items())] + ([""] if chosen else [])
    if reference or work:
        out += _speed_table(key, speed)
    return out


def _transfer_tables(rows) -> list[str]:
    """A recipe fine-tuned from one of its own runs on other data, against from scratch on the same split at the
    same fine-tune budget and at the same total compute (``benchmarks/transfer.py``): one table per target
    benchmark, never ranked with the from-scratch tables."""
    if not rows:
        return []
    out = ["# Transfer: fine-tuned from a zoo run, against from scratch", "",
           "`benchmarks/transfer.py --record` adds a row: a source run (seed 0) of the recipe on the *pretrained on* "
           "data, then per seed three runs on the target: from scratch and fine-tuned (`weights=SOURCE_RUN`) at the "
           "fine-tune budget, and from scratch at the same total compute (the fine-tune budget plus the source's "
           "training). Each cell is validation / test, means over the seeds; *gain* is the fine-tune's paired "
           "validation difference (positive: the fine-tune is better) and how many seeds it held on. Selection "
           "reads validation; test is reported. Time budgets: one machine's (the *hardware* column). A command "
           "recorded again shows its newest row (`transfer.jsonl` keeps every one).", ""]
    newest = {r.get("command") or id(r): r for r in rows}  # the same command recorded again: its newer row
    by_target = defaultdict(list)
    for r in newest.values():
        by_target[(r["benchmark"], r["metric"])].append(r)
    for (bench, metric), table in sorted(by_target.items()):
        better = "higher" if table[0]["higher_is_better"] else "lower"
        out += [f"## {bench} · {metric} · transfer", "", f"Metric: **{metric}** ({better} is better).", "",
                "| recipe | pretrained on | fine-tune (budget, settings) | from scratch | fine-tuned | gain | from scratch, same "
                "total compute | gain | n | hardware | commit | date | command |",
                "|---|---|---|---|---|---|---|---|---:|---|---|---|---|"]
        for r in sorted(table, key=lambda r: (r["recipe"], r["source"], r["budget"])):
            arms = r["arms"]
            tune = ", ".join([r["budget"], *r.get("finetune", [])])
            source = " ".join([*([r["source_recipe"] + ":"] if r.get("source_recipe") else []), *r["source"]])
            out.append(f"| {r['recipe']} | {source} @ {r['source_budget']} | {tune} | "
                       f"{_arm_text(arms.get('scratch'))} | {_arm_text(arms.get('fine-tuned'))} | "
                       f"{_gain_text(r.get('val_gain_over_scratch'))} | "
                       f"{_arm_text(arms.get('scratch, same total compute'))} @ {r['total_budget']} | "
                       f"{_gain_text(r.get('val_gain_over_scratch_same_total_compute'))} | {r['n']} | "
                       f"{r['hardware']} | {r.get('commit', '-')} | {r.get('date', '-')} | `{r.get('command', '')}` |")
        out.append("")
    return out


def _arm_text(arm) -> str:
    if not arm:
        return "-"
    return " / ".join(f"{v:,.0f}" if v is not None and abs(v) >= 1000 else number_text(v)
                      for v in (arm.get("val_mean"), arm.get("test_mean")))


def _gain_text(gain) -> str:
    if not gain:
        return "-"
    held = sum(g > 0 for g in gain["by_seed"])
    return f"{gain['mean']:+.4g} ({held} of {len(gain['by_seed'])})"


def versus_best(row: dict, best: dict, known: dict) -> str:
    """The row's metric minus the best row's, the 95% interval of the paired bootstrap (``paired``): ``unpaired``
    where the two cannot be paired (a row without per-item scores, other test items)."""
    from recipe_zoo import paired

    if row is best:
        return "-"
    difference = paired.difference(row, best, known)
    return "unpaired" if difference is None else f"{difference[0]:+.4g}..{difference[1]:+.4g}"


@functools.lru_cache(maxsize=None)
def chosen_on_test(recipe: str) -> str:
    """What of a recipe's defaults was read off a test split (its config's ``CHOSEN_ON_TEST``), or '' (also for a
    row of a recipe no longer registered, or an own-data run's label). Once per recipe and process: a board of many
    rows imports each recipe's module once."""
    from recipe_zoo import registry

    if recipe not in {row["name"] for row in registry.static_list()}:
        return ""
    return getattr(registry.get(recipe).config, "CHOSEN_ON_TEST", "")


def _speed_table(key: tuple, speed) -> list[str]:
    """The speed view of one machine-free table: its rows' work on each machine measured, the latest row per
    (recipe, work, machine)."""
    latest = {}
    for r in speed:
        if (r["benchmark"], board_table_slot(r)) == (key[1], key[4:]):
            latest[(label(r), r["budget"], r["hardware"])] = r
    if not latest:
        return []
    out = ["Speed of the work per machine (`zoo bench RECIPE --reference --speed` adds one; never a quality row):",
           "", "| recipe | work | hardware | runs | train s (median) | throughput | MFU | commit | date |",
           "|---|---|---|---:|---:|---|---|---|---|"]
    for (name, work, hardware), r in sorted(latest.items(), key=lambda kv: (kv[0][:2], kv[1]["train_seconds"])):
        rate = f"{r['throughput']:,.0f} {r.get('unit', '')}".strip() if r.get("throughput") is not None else (
            _steps_rate(r))
        mfu = f"{r['mfu_percent']:.1f}% of {r['mfu_of']}" if r.get("mfu_percent") is not None and r.get("mfu_of") \
            else number_text(r.get("mfu_percent"), 1)
        out.append(f"| {row_name(r)} | {work}, {precision_text(r.get('precision'))} | {hardware} | {r['n']} | "
                   f"{number_text(r['train_seconds'], 1)} | {rate} | {mfu} | {r.get('commit', '-')} | "
                   f"{r.get('date', '-')} |")
    return out + [""]


def _steps_rate(row: dict) -> str:
    """Where a torch recipe reports no samples or tokens a second: its steps over its median training seconds (not
    for trees and closed forms, which have no precision: their ``Nsteps`` is a cap on rounds, or unread)."""
    from recipe_zoo.core.budget import parse_budget

    work = parse_budget(row["budget"])
    if work.kind != "steps" or not row["train_seconds"] or not row.get("precision"):
        return "-"
    return f"{work.amount / row['train_seconds']:,.1f} steps/s"


def board_table_slot(row: dict) -> tuple:
    """(budget slot, place) of the table a speed row's work belongs to (``board.table_key``'s last two)."""
    from recipe_zoo.board import table_key

    return table_key({**row, "metric": "", "protocol": PROTOCOL})[4:]


def _reported_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    out = ["Reported elsewhere or run with other tools, **not measured by `zoo bench`** (context only):", "",
           "| model | value | split | the same split as ours? | source |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['value']} | {r.get('split', 'not stated')} | {r.get('same_split', '?')} | "
                   f"{r['source']} |")
    return out + [""]


def verified(row: dict, checks: list[dict]) -> str:
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


def write_board() -> Path:
    """leaderboard.md and the protocol-1 archive rendered again, each replaced whole; refused (``DamagedRow``)
    while a row cannot be read."""
    with rendering(), _not_written("board"):
        kinds = [all_rows(kind, strict=True) for kind in KINDS]
        _write_text(board_dir() / "leaderboard-protocol1.md", render_archive(kinds[0]))
        return _write_text(board_dir() / "leaderboard.md", render(*kinds))


@contextmanager
def _not_written(what: str):
    """A page or chart that cannot be written (a full or failing disk) is one line: the rows stay in the JSONL
    files, each page is whole (the old one or the new), and ``zoo board --write`` renders them again."""
    try:
        yield
    except OSError as exc:
        raise ResourceError(f"{exc.filename or board_dir()}: {exc.strerror or exc}; the {what} was not rendered "
                            "(the rows are kept, each page is as it was or whole): free some space or check its "
                            "permissions, then zoo board --write --plot") from None


def _write_text(board: Path, text: str) -> Path:
    board.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=board.parent, prefix=f".{board.stem}.", suffix=".tmp")  # one per writer
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, board)  # atomic: readers never see half a page, writers never share a temp file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return board


def write_charts() -> list[Path]:
    """Every table's chart, drawn again (charts of tables that no longer exist are removed)."""
    from recipe_zoo.plots import plot_board

    folder = board_dir() / "benchmarks" / "plots"
    with rendering(), _not_written("charts"):
        paths = plot_board(all_rows(strict=True), folder)  # each chart replaced whole
        for old in set(folder.glob("*.png")) - set(paths):  # then the charts of tables gone
            old.unlink()
        return paths
