"""The reference runs on a lent GPU machine: rows for the reference tables (quality), the speed view, and a check of
the tree references on a second CPU, all inside one deadline (a lease is 15 minutes, the machine's start included).

    there:  bash benchmarks/gpu_run.sh reference       (after benchmarks/gpu_kit.sh reference here)
    here:   python benchmarks/gpu_references.py --check   (each phase's code path on this CPU: 10 steps, no rows)

Phases, in this order, each started only while the deadline leaves room:

1. quality: ``zoo bench RECIPE --reference BENCH --seeds 3`` for every reference that trains a torch model (those
   that pin a precision), ``--jobs`` at a time, longest first: a small model leaves an H200 idle between its
   kernels, so several processes fill it. Each job writes its own board folder; its quality and per-item rows are
   kept with ``train_seconds`` blanked, and its speed row is dropped: both were timed beside other jobs.
2. a second CPU: ``zoo verify`` of the latest row of each reference that trains no torch model (the trees, the
   closed form), GPUs hidden, so the check runs on this machine's CPU: another CPU kind than the rows'.
3. speed: ``zoo bench RECIPE --reference BENCH --speed`` (one seed), one job at a time, alone on the machine,
   the quickest first, each while its quality job's time per seed still fits.

What comes back lies in ``--out`` ($OUT): results.jsonl, items.jsonl, speed.jsonl and verify.jsonl (the new lines
only), log.txt (every job's output), runs.tar.gz (each run's config, summary and log). References whose extras are
missing there (RDKit, not carried: too large for one call) are named and skipped.

    here:   python benchmarks/gpu_references.py --import DIR     (DIR: the files that came back)

appends those lines to this checkout's board, and records each new reference row of 3 or more seeds as a
verification of every row of the same reference measured on other hardware with 3 or more seeds (``zoo verify``'s
rule and record: the same command's seeds at the same work, run elsewhere), then renders the board.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from zoo import checkout  # noqa: E402

checkout.install()
from recipe_zoo import board, references  # noqa: E402

# A reference's wall seconds for 3 seeds on one H200, 5 jobs at a time (cbc99d4eb, torch 2.11), to start the
# longest first; dmpnn's is a guess (RDKit was not carried).
WEIGHT = {"medical/unet": 437, "protein/esm-embed": 218, "diffusion/flow": 135, "tabular/mlp": 119,
          "molecules/dmpnn": 100, "vision/resnet": 75, "contrastive/simclr": 75, "llm/gpt": 49}
NEEDS = {"molecules/dmpnn": "rdkit", "molecules/fp-xgb": "rdkit", "tabular/xgb": "xgboost"}


def trains_torch(ref) -> bool:
    return references.pinned_precision(ref) is not None


def available(ref, log) -> bool:
    import importlib.util

    module = NEEDS.get(ref.recipe)
    if module and importlib.util.find_spec(module) is None:
        log(f"skipped {ref.recipe} on {ref.benchmark}: {module} is not installed here")
        return False
    return True


class Jobs:
    """Subprocesses of ``python -m zoo``, each with its own board folder and log, under one deadline."""

    def __init__(self, work: Path, deadline: float, log):
        self.work, self.deadline, self.log, self.count = work, deadline, log, 0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def start(self, args: list[str], env: dict | None = None, board_files: list[Path] = ()) -> tuple:
        self.count += 1
        folder = self.work / f"job{self.count:02d}"
        (folder / "board" / "benchmarks").mkdir(parents=True)  # ZOO_BOARD_DIR's layout: a checkout's
        for path in board_files:
            shutil.copy(path, folder / "board" / "benchmarks" / path.name)
        counts = {p.name: len(p.read_text().splitlines()) for p in board_files}  # what follows them is the job's
        (folder / "copied.json").write_text(json.dumps(counts))
        environ = {**os.environ, "ZOO_BOARD_DIR": str(folder / "board"), "PYTHONUNBUFFERED": "1", **(env or {})}
        command = [sys.executable, "-m", "zoo", *args, "--out", str(self.work / "runs")]
        self.log(f"[{time.strftime('%H:%M:%S')}] job{self.count:02d}: zoo {' '.join(args)}")
        with open(folder / "log.txt", "w") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return proc, folder, time.monotonic()

    def finish(self, proc: subprocess.Popen, folder: Path, began: float) -> int:
        try:
            code = proc.wait(timeout=max(1.0, self.left()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            code = proc.wait()
            self.log(f"{folder.name}: stopped at the deadline")
        self.log(f"{folder.name}: exit {code} after {time.monotonic() - began:.0f} s")
        return code


def quality(refs: list, jobs: Jobs, width: int, check: bool) -> dict:
    """Phase 1: the references ``width`` at a time; reference -> folder of each job that ended 0."""
    queue = sorted(refs, key=lambda r: -WEIGHT.get(r.recipe, 1))
    running, done = [], {}
    while queue or running:
        while queue and len(running) < width and jobs.left() > 30:
            ref = queue.pop(0)
            running.append((ref, jobs.start(bench_args(ref, check, speed=False), threads(width))))
        if not running:
            break
        time.sleep(1)
        for ref, item in [r for r in running if r[1][0].poll() is not None or jobs.left() <= 0]:
            running.remove((ref, item))
            if jobs.finish(*item) == 0:
                done[ref] = item[1]
    for ref in queue:
        jobs.log(f"not started (deadline): {ref.recipe} on {ref.benchmark}")
    return done


def speed(refs: list, jobs: Jobs, check: bool, cost: dict) -> list[Path]:
    """Phase 3: one seed of each reference alone, while its quality job's wall time per seed fits."""
    done = []
    for ref in sorted(refs, key=lambda r: cost.get(r, 0)):
        need = cost.get(ref, 60)
        if jobs.left() < need + 10:
            jobs.log(f"speed of {ref.recipe} on {ref.benchmark}: not started ({jobs.left():.0f} s left, ~{need:.0f} "
                     "needed)")
            continue
        item = jobs.start(bench_args(ref, check, speed=True))
        if jobs.finish(*item) == 0:
            done.append(item[1])
    return done


def second_cpu(refs: list, jobs: Jobs, check: bool) -> list[Path]:
    """Phase 2: ``zoo verify`` of each tree or closed-form reference's latest row, on this machine's CPU."""
    rows = board.load_rows()
    numbers = []
    for ref in refs:
        mine = [i for i, r in enumerate(rows, 1) if references.of_row(r) == ref and board.protocol(r) == board.PROTOCOL]
        if mine:
            numbers.append(str(mine[-1]))
    if not numbers or jobs.left() < 180:  # 3 seeds of the trees on 16 cores of a Xeon outlasted 90 s there
        jobs.log(f"second CPU: nothing verified ({len(numbers)} rows, {jobs.left():.0f} s left)")
        return []
    files = sorted(board.rows_file().parent.glob("*.jsonl"))  # verify reads the whole board
    item = jobs.start(["verify", *numbers, "--seeds", "1" if check else "3", *(["--allow-dirty"] if check else [])],
                      {"CUDA_VISIBLE_DEVICES": ""}, files)
    jobs.finish(*item)
    return [item[1]]


def bench_args(ref, check: bool, speed: bool) -> list[str]:
    if check:  # the same recipe, data and pinned settings for 10 steps: the code path, not the reference's work
        return ["bench", ref.recipe, "--seeds", "1", "--budget", "10steps", "--allow-dirty", *ref.settings]
    return ["bench", ref.recipe, "--reference", ref.benchmark, *(["--speed"] if speed else ["--seeds", "3"])]


def threads(width: int) -> dict:
    """Each of ``width`` jobs its share of the CPU cores (the data pipelines and the Python that feeds the GPU)."""
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // width))}


def collect(out: Path, work: Path, shared: list[Path], alone: list[Path], verified: list[Path]) -> dict:
    """The new lines of every kept job into ``out``; returns the count per file."""
    counts = {}
    for name, folders in (("results.jsonl", shared), ("items.jsonl", shared), ("speed.jsonl", alone),
                          ("verify.jsonl", verified)):
        lines = []
        for folder in folders:
            path = folder / "board" / "benchmarks" / name
            skip = json.loads((folder / "copied.json").read_text()).get(name, 0)  # a verify job's copied board
            for line in (path.read_text().splitlines()[skip:] if path.exists() else []):
                row = json.loads(line)
                if name == "results.jsonl":
                    row["train_seconds"] = None  # timed beside other jobs: the speed view has this machine's speed
                lines.append(json.dumps(row))
        (out / name).write_text("".join(line + "\n" for line in lines))
        counts[name] = len(lines)
    with open(out / "log.txt", "a") as log:
        for folder in sorted(work.glob("job*")):
            log.write(f"\n===== {folder.name} =====\n{(folder / 'log.txt').read_text()}")
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for path in sorted((work / "runs").rglob("*")):
            if path.is_file() and path.suffix in (".json", ".txt", ".log"):  # not the weights
                tar.add(path, arcname=str(path.relative_to(work)))
    return counts


def import_rows(folder: Path) -> int:
    from recipe_zoo import board_render, verify

    old = board.load_rows()
    new = {name: [json.loads(line) for line in (folder / name).read_text().splitlines()] if (folder / name).exists()
           else [] for name in ("results.jsonl", "items.jsonl", "speed.jsonl", "verify.jsonl")}
    checks = []
    for row in new["results.jsonl"]:
        ref = references.of_row(row)
        if ref is None or row["n"] < verify.CROSS_SEEDS:
            continue
        for number, earlier in enumerate(old, 1):
            if (references.of_row(earlier) == ref and earlier["hardware"] != row["hardware"]
                    and earlier["n"] >= verify.CROSS_SEEDS and board.protocol(earlier) == board.PROTOCOL):
                checks.append(verify.check(earlier, number, row))
    for name, path in (("items.jsonl", board.items_file()), ("results.jsonl", board.rows_file()),
                       ("speed.jsonl", board.speed_file()), ("verify.jsonl", board.checks_file())):
        if new[name]:
            board.append_rows(new[name], path)
    if checks:
        board.append_rows(checks, board.checks_file())
    for c in checks:
        print(f"row {c['number']}: {'holds' if c['passed'] else 'FAILS'} on {c['hardware']}: {c['mean']:.4f} "
              f"(n={c['n']}) against {c['old_mean']:.4f}, tolerance {c['tolerance']:.4f}")
    board_render.write_board()
    print(f"imported {', '.join(f'{len(v)} {k}' for k, v in new.items())}; {len(checks)} checks recorded")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpu-references")))
    parser.add_argument("--jobs", type=int, default=5, help="quality jobs at a time (default 5)")
    parser.add_argument("--deadline", type=float, default=480, help="seconds for all three phases (default 480)")
    parser.add_argument("--only", nargs="*", default=None, metavar="RECIPE", help="these recipes' references only")
    parser.add_argument("--check", action="store_true", help="10 steps, one seed, no rows kept: a check of the code")
    parser.add_argument("--import", dest="folder", type=Path, help="here: append the files that came back (above)")
    args = parser.parse_args()
    if args.folder:
        return import_rows(args.folder)
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu-references-{os.getpid()}"
    logfile = open(args.out / "log.txt", "w")

    def log(text: str) -> None:
        print(text, flush=True)
        logfile.write(text + "\n")
        logfile.flush()

    jobs = Jobs(work, start + args.deadline, log)
    chosen = [r for r in references.REFERENCES if args.only is None or r.recipe in args.only]
    usable = [r for r in chosen if available(r, log)]
    torch_refs = [r for r in usable if trains_torch(r)]
    shared = quality(torch_refs, jobs, args.jobs, args.check)
    cost = {}  # a reference's wall seconds per seed in phase 1, beside other jobs: what its speed run needs at most
    for ref, folder in shared.items():
        row = json.loads((folder / "board" / "benchmarks" / "results.jsonl").read_text().splitlines()[-1])
        cost[ref] = row["train_seconds"] * 1.5 + 20
    verified = second_cpu([r for r in usable if not trains_torch(r)], jobs, args.check)
    alone = speed(list(cost), jobs, args.check, cost)
    counts = collect(args.out, work, list(shared.values()), alone, verified)
    log(f"gpu_references: {time.monotonic() - start:.0f} s; kept {counts} in {args.out}")
    logfile.close()
    if not args.check:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if len(shared) == len(torch_refs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
