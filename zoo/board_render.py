"""The leaderboard rendered: ``leaderboard.md`` (the reference tables at fixed work with their speed per machine,
then the time-budget tables of one machine each; the rows ranked within each table, results reported elsewhere
beside them), ``leaderboard-protocol1.md`` (the archive), ``leaderboard.html`` (the same, with charts:
``board_html``) and a chart per table, each rewritten whole under the board's lock (``board.rendering``)."""
from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from recipe_zoo import board_rows
from recipe_zoo.board import (EVERY_MACHINE, KINDS, PROTOCOL, REFERENCE, all_rows, board_dir, fixed_work, group, label,
                              machine_free, metric_base, number_text, precision_text, protocol, ranked, ranks,
                              rendering, row_name, value_text)
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
        "differs at the latest fingerprinted commit): shown, not ranked. *chosen* says how a row's setting came to "
        "be benched: *1st* when no other variant of its recipe (another command or configuration) had been benched "
        "on the same benchmark and budget before it, *best of N* when it is at least as good as each of the N - 1 "
        "variants benched there before it (picked among several whose test figures had been seen), *after N* when "
        "one of the N variants before it is better. *hardware* is short (a CPU's family/model and widest vector "
        "units, the threads used); each row's *row* name (r1, r2, ...) leads its line under the table: the "
        "command, commit, date, full hardware, configuration hash, cost and `zoo verify` checks.")
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
    how = board_rows.chosen([r for r in rows if protocol(r) >= PROTOCOL])  # in the files' order: as benched
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
            out += _table(key, fixed.pop(key), checks, refs, speed, prints, known, how)[:-1]
            out += (stub if missing else []) + [""]
            out += _reported_table(reported_by_bench.pop((bench, metric_base(key[3])), []))
    for key, table in fixed.items():  # other work budgets: every machine, one table per work and precision
        out += _table(key, table, checks, [], speed, prints, known, how)
    timed = {key: t for key, t in tables.items() if not machine_free(key[4])}
    if timed:
        out += ["# Time budgets: quality in a time on one machine", "",
                "A time budget buys another amount of work on each machine, so each of these tables is one "
                "hardware string's: time-to-quality on a named machine.", ""]
    for key, table in timed.items():
        out += _table(key, table, checks, [], (), prints, known, how)
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


def _table(key: tuple, table: list[dict], checks, refs, speed, prints=(), known=None, how=None) -> list[str]:
    """One table: its heading, metric and budget, references, rows, each row's details line and notes. ``how``:
    how each row was chosen (``board_rows.chosen`` over every row; by default over this table's)."""
    proto, bench, split, metric, budget, where = key
    higher = table[0]["higher_is_better"]
    reference, work = budget == REFERENCE, fixed_work(budget)
    scope = ("Budget: each recipe's reference work (the *work* column) in its pinned precision: every machine's rows "
             "together." if reference else f"Budget: {budget} of work per run, precision {where}: every machine's "
             "rows together." if work else f"Budget: {budget} of training time per run, on this hardware only.")
    out = ["## " + board_rows.title(key), "",
           f"Metric: **{metric}** on split `{split}` ({'higher' if higher else 'lower'} is better). {scope}", ""]
    out += [note + "\n" for kind, note in METRIC_NOTES.items() if kind in metric_base(metric)]
    out += _reference_lines(refs)
    if proto < PROTOCOL:
        return out + _archive_rows(table) + [""]
    lines = board_rows.shown(table, prints, known)
    how = board_rows.chosen(table) if how is None else how
    out += board_rows.header(reference)
    out += ["| " + " | ".join(board_rows.cells(line, lines[0].row, known or {}, how.get(id(line.row), "-"),
                                               reference)) + " |" for line in lines]
    out += ["", *(board_rows.details(line, checks) for line in lines), ""]
    old = [line for line in lines if line.why]
    out += [f"stale: `{line.row.get('command', row_name(line.row))}` @ {line.row.get('commit', '?')}: {line.why} "
            "(its fingerprint); not ranked until measured again." for line in old] + ([""] if old else [])
    chosen = {r["recipe"]: note for r in table if (note := board_rows.chosen_on_test(r["recipe"]))}
    out += [f"† {recipe}: defaults chosen on test (protocol 1), kept until re-chosen on validation: {note}."
            for recipe, note in sorted(chosen.items())] + ([""] if chosen else [])
    if reference or work:
        out += _speed_table(key, speed)
    return out


def _archive_rows(table: list[dict]) -> list[str]:
    """A protocol-1 table's rows: measured before validation splits, never ranked against the board's."""
    out = ["| rank | recipe | value | n | train s | params (M) | peak mem (MB) | commit | date | command |",
           "|---:|---|---|---:|---:|---:|---:|---|---|---|"]
    for rank, r in zip(ranks(table, {}), ranked(table)):
        out.append(f"| {rank} | {label(r)} | {value_text(r)} | {r['n']} | {number_text(r.get('train_seconds'), 1)} | "
                   f"{number_text(r.get('params_M'), 2)} | {number_text(r.get('peak_mem_mb'), 0)} | "
                   f"{r.get('commit', '-')} | {r.get('date', '-')} | `{r.get('command', '')}` |")
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


def latest_speed(key: tuple, speed) -> list[dict]:
    """The speed rows of one machine-free table: its rows' work on each machine measured, the latest row per
    (recipe, work, machine), by recipe and work, fastest first."""
    latest = {}
    for r in speed:
        if (r["benchmark"], board_table_slot(r)) == (key[1], key[4:]):
            latest[(label(r), r["budget"], r["hardware"])] = r
    return [r for _, r in sorted(latest.items(), key=lambda kv: (kv[0][:2], kv[1]["train_seconds"]))]


def _speed_table(key: tuple, speed) -> list[str]:
    """The speed view of one machine-free table; what each MFU is a share of, where long, follows it."""
    latest = latest_speed(key, speed)
    if not latest:
        return []
    out = ["Speed of the work per machine (`zoo bench RECIPE --reference --speed` adds one; never a quality row):",
           "", "| recipe | work | hardware | runs | train s (median) | throughput | MFU | commit | date |",
           "|---|---|---|---:|---:|---|---|---|---|"]
    notes = {}
    for r in latest:
        rate = f"{r['throughput']:,.0f} {r.get('unit', '')}".strip() if r.get("throughput") is not None else (
            _steps_rate(r))
        mfu = number_text(r.get("mfu_percent"), 1)
        if r.get("mfu_percent") is not None and r.get("mfu_of"):
            peak, _, more = r["mfu_of"].partition(", ")
            mfu = f"{r['mfu_percent']:.1f}% of {peak}"
            if more:
                notes.setdefault(more, []).append(board_rows.short_hardware(r["hardware"]))
        out.append(f"| {row_name(r)} | {r['budget']}, {precision_text(r.get('precision'))} | "
                   f"{board_rows.short_hardware(r['hardware'])} | {r['n']} | {number_text(r['train_seconds'], 1)} | "
                   f"{rate} | {mfu} | {r.get('commit', '-')} | {r.get('date', '-')} |")
    out += [""] + [f"MFU on {', '.join(dict.fromkeys(where))}: the peak is {more}." for more, where in notes.items()]
    return out + ([""] if notes else [])


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


def write_board() -> Path:
    """leaderboard.md, its page with charts (leaderboard.html, ``board_html``) and the protocol-1 archive rendered
    again, each replaced whole; refused (``DamagedRow``) while a row cannot be read."""
    from recipe_zoo.board_html import render_html

    with rendering(), _not_written("board"):
        kinds = [all_rows(kind, strict=True) for kind in KINDS]
        _write_text(board_dir() / "leaderboard-protocol1.md", render_archive(kinds[0]))
        text = render(*kinds)  # once, for both pages
        _write_text(board_dir() / "leaderboard.html", render_html(*kinds, text=text))
        return _write_text(board_dir() / "leaderboard.md", text)


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
