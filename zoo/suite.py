"""``zoo bench --suite gpu``: every torch recipe briefly, one after another, in one process, for whenever a GPU is
at hand (often 15 minutes at a time, start-up included: the suite is sized to leave room for a rerun).

Each entry is one seed of a recipe on its benchmark at a short time budget. The suite prints one line per recipe
(value, steps, samples/s, MFU, its own wall time) and the total wall time, and appends a leaderboard row per
recipe, in the run's own hardware table. ``--scale F`` (F < 1) multiplies every budget by F and swaps in each
entry's ``small`` settings, so the same code paths run on a CPU in about two minutes: a check that the suite
works, not a measurement, so no rows are written. ``--copy-data DIR`` copies the data the suite reads (66 MB,
40 of them linux-python-docs' text) from the data cache into DIR, to carry to a machine that cannot download it
(then ``ZOO_DATA=DIR``).
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from recipe_zoo import bench, board, board_render, runs
from recipe_zoo.core.errors import ZooError


@dataclass(frozen=True)
class Entry:
    recipe: str
    budget: str  # seconds of training on the GPU
    settings: tuple[str, ...] = ()  # key=value overrides of the recipe's defaults
    small: tuple[str, ...] = ()  # with --scale < 1: overrides that make the run a CPU-sized check
    why: str = ""


SMALL_IMAGES = ("width=8",)
SMALL_DIFFUSION = ("width=8", "n_samples=20", "n_real=20", "sample_steps=2", "grid=4")
SMALL_MEDICAL = ("width=8", "levels=3", "tta=false", "batch_size=2")
SMALL_TEXT = ("seq_len=64", "batch_tokens=256", "micro_batch=4", "vocab_size=300", "eval_bytes=2000", "samples=0",
              "compile=false")
GPT2_SMALL = ("data=linux-python-docs", "depth=12", "aspect=64", "head_dim=64", "seq_len=1024", "batch_tokens=131072",
              "micro_batch=32", "samples=0", "profile=5")

# Budgets sum to 190 s of training; compiling, data loading and evaluation take the rest of the 420 s it aims at
# on one H200 (each entry's wall time is printed, to re-size the budgets from).
SUITES: dict[str, tuple[Entry, ...]] = {"gpu": (
    Entry("llm/gpt", "20s", small=SMALL_TEXT, why="the depth the device profile chooses for 20 s"),
    Entry("llm/gpt", "30s", GPT2_SMALL, ("depth=1", *SMALL_TEXT),
          why="GPT-2-small shape (768 wide, 12 blocks, 1024 context) on 15 M training tokens: MFU, and 5 steps "
              "traced (profile.txt)"),
    Entry("vision/resnet", "15s", small=SMALL_IMAGES + ("tta=0",)),
    Entry("contrastive/simclr", "15s", small=SMALL_IMAGES + ("proj_hidden=32",)),
    Entry("contrastive/byol", "10s", small=SMALL_IMAGES + ("proj_hidden=32",)),
    Entry("diffusion/flow", "15s", small=SMALL_DIFFUSION),
    Entry("diffusion/flow-cfg", "10s", small=SMALL_DIFFUSION),
    Entry("diffusion/ddpm", "10s", small=SMALL_DIFFUSION),
    Entry("diffusion/ddpm-cfg", "10s", small=SMALL_DIFFUSION),
    Entry("medical/unet", "15s", small=SMALL_MEDICAL + ("patch=32,32",)),
    Entry("medical/swinunetr", "10s", small=SMALL_MEDICAL + ("patch=64,64",)),
    Entry("tabular/mlp", "10s", small=("hidden=16", "neighbours=0")),
    Entry("molecules/dmpnn", "10s", small=("hidden=16", "ffn_hidden=16")),
    Entry("protein/esm-finetune", "10s", ("esm_model=scratch",), ("hidden=16", "batch_size=8"),
          why="a randomly initialised ESM-2: no weights can be downloaded on the lent machines"),
)}
LEFT_OUT = {"llm/lora": "needs a pretrained causal LM folder", "vision/finetune": "needs pretrained weights",
            "protein/esm-embed": "needs ESM-2 weights (or embeddings) and trains no torch model by default",
            "protein/esm-zeroshot": "needs ESM-2 weights"}


def entries(name: str) -> tuple[Entry, ...]:
    if name not in SUITES:
        raise ZooError(f"--suite {name}: no such suite (have: {', '.join(SUITES)})")
    return SUITES[name]


def scaled_budget(text: str, scale: float) -> str:
    budget = runs.parse_budget_arg(text)
    if budget.kind != "seconds":
        raise ZooError(f"suite budget {text}: give a time (the suite is sized in seconds)")
    return f"{max(1, math.ceil(budget.amount * scale))}s"


def settings_of(entry: Entry, scale: float) -> list[str]:
    """The entry's settings; below scale 1 its small ones replace those of the same key."""
    merged = dict(s.split("=", 1) for s in entry.settings)
    merged |= dict(s.split("=", 1) for s in entry.small) if scale < 1 else {}
    return [f"{k}={v}" for k, v in merged.items()]


def datasets(name: str) -> list[str]:
    """The datasets the suite reads: each entry's ``data=`` or its recipe's benchmark."""
    from recipe_zoo import registry

    names = []
    for entry in entries(name):
        given = [s.split("=", 1)[1] for s in entry.settings if s.startswith("data=")]
        names.append(given[0] if given else registry.get(entry.recipe).benchmark)
    return list(dict.fromkeys(names))


def copy_data(names: list[str], dest: Path) -> int:
    """Copies the named datasets (a suite's, or reference runs') from the data cache into ``dest`` (the same layout);
    returns the bytes copied."""
    from recipe_zoo.data import load_all, locate

    total = 0
    for dataset in dict.fromkeys(names):
        info = load_all().get(dataset)
        if info is None or info.source != "cache":
            continue  # bundled with a dependency, or an own file the entry names
        source = locate(dataset)
        target = dest / info.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
            size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
        else:
            shutil.copy2(source, target)
            size = target.stat().st_size
        print(f"{dataset}: {info.path} ({size / 1e6:.1f} MB)")
        total += size
    print(f"copied {total / 1e6:.1f} MB into {dest}: run there with ZOO_DATA={dest}")
    return total


def run_suite(name: str, *, scale: float, out_root: Path, allow_dirty: bool, device: str = "auto") -> int:
    """Runs the suite; returns 0 when every entry finished ``ok``."""
    from recipe_zoo import registry

    if not 0 < scale <= 1:
        raise ZooError(f"--scale {scale}: give a factor in (0, 1]")
    plan = [(e, registry.get(e.recipe), scaled_budget(e.budget, scale), settings_of(e, scale)) for e in entries(name)]
    checking = scale < 1
    if not checking:
        bench.check_provenance(allow_dirty)
        board.check_whole()  # the rows are appended and the board rendered at the end: refuse now, not after
    lines, written, start = [], [], time.perf_counter()
    for entry, spec, budget, settings in plan:
        began, failure, parsed = time.perf_counter(), "see its run log", runs.parse_budget_arg(budget)
        try:
            outcomes = bench.run_seeds(spec, seeds=1, budget=parsed, overrides=settings,
                                       out_root=out_root, device=device)
        except ZooError as exc:  # bad input in one entry (its data missing, say): the others still run
            outcomes, failure = None, str(exc)
        wall = time.perf_counter() - began
        summary = json.loads((outcomes[0].run_dir / "summary.json").read_text()) if outcomes else None
        line = _line(entry.recipe, settings, budget, summary, wall, failure)
        traced = outcomes[0].run_dir / "profile.txt" if outcomes else None
        if traced is not None and traced.exists():
            print(f"suite {name}: {entry.recipe}'s traced steps: {traced}", flush=True)
        print(f"suite {name}: {line}", flush=True)
        lines.append(line)
        if outcomes and not checking:
            command = " ".join(["zoo bench", entry.recipe, "--seeds 1", f"--budget {budget}", *settings])
            written.append(bench.make_row(entry.recipe, outcomes, budget=parsed, overrides=settings, command=command))
    total = time.perf_counter() - start
    if written:
        board.append_rows(written)
        board_render.write_board()
    print(f"\nsuite {name}{f' at scale {scale:g} (small settings; no rows written)' if checking else ''}: "
          f"{len(plan)} recipes in {total:.0f} s wall")
    for line in lines:
        print("  " + line)
    if written:
        print(f"{len(written)} rows appended to {board.rows_file()}")
    print("left out: " + "; ".join(f"{k} ({v})" for k, v in LEFT_OUT.items()))
    return 0 if all(line.endswith("ok") for line in lines) else 1


def _line(recipe: str, settings: list[str], budget: str, summary: dict | None, wall: float, failure: str) -> str:
    label = " ".join([recipe, *settings])
    if summary is None:
        return f"{label:<60} {budget:>4}  {wall:6.1f} s wall  failed: {failure}"
    m = summary.get("metrics", {})
    rate = m.get("tokens_per_s") or m.get("samples_per_s")
    unit = "tok/s" if m.get("tokens_per_s") else "samples/s"
    mfu = summary.get("mfu_percent")
    steps = f"{m['steps']:,}" if "steps" in m else "-"  # a recipe that reports no steps or rate shows "-", not 0
    return (f"{label:<60} {budget:>4}  {wall:6.1f} s wall  {summary['metric']} {summary['value']:.4f}  "
            f"{steps} steps  {f'{rate:,.0f}' if rate else '-'} {unit}  "
            f"MFU {mfu if mfu is not None else float('nan'):.1f}%  ok")
