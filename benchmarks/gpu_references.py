"""The reference runs on a lent GPU machine: rows for the reference tables (quality) from its GPU and from its
host CPU (another CPU kind than the board's), and the speed view, all inside one deadline (a lease is 15 minutes,
the machine's start included).

    there:  bash benchmarks/gpu_run.sh reference       (after benchmarks/gpu_kit.sh reference here)
    here:   python benchmarks/gpu_references.py --check   (each phase's code path on this CPU: 10 steps, no rows)

``--mode gpu`` (the default), phases in this order, each started only while the deadline leaves room:

1. quality: ``zoo bench RECIPE --reference BENCH --seeds 3`` for every reference that trains a torch model (those
   that pin a precision), ``--jobs`` at a time, longest first: a small model leaves an H200 idle between its
   kernels, so several processes fill it. Each job writes its own board folder; its quality and per-item rows are
   kept with ``train_seconds`` blanked, and its speed row is dropped: both were timed beside other jobs.
2. host CPU: the references that train no torch model (the trees, the closed form), GPUs hidden: each seed of
   each is ``zoo run RECIPE --reference BENCH --seed K`` on 2 threads, several side by side, and the seeds of a
   reference make its row, as ``zoo bench`` would (``train_seconds`` blanked likewise).
3. speed: ``zoo bench RECIPE --reference BENCH --speed`` (one seed), one job at a time, alone on the machine,
   the quickest first, each while its quality job's time per seed still fits.

``--mode cpu``: phase 2 for every reference, the cheapest first, and beside it, one job at a time on the GPU,
phase 1 for the references the board has no GPU row of.

What comes back lies in ``--out`` ($OUT): results.jsonl, items.jsonl and speed.jsonl (the new lines only),
log.txt (every job's output), runs.tar.gz (each run's config, summary and log). References whose extras are
missing there (RDKit, 32 MB: carried only when the rest leaves room) are named and skipped.

    here:   python benchmarks/gpu_references.py --import DIR     (DIR: the files that came back)

appends those lines to this checkout's board, and records each new reference row of 3 or more seeds as a
verification of every row of the same reference measured on other hardware with 3 or more seeds (``zoo verify``'s
rule and record: the same command's seeds at the same work, run elsewhere), then renders the board.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from zoo import checkout  # noqa: E402

checkout.install()
from recipe_zoo import board, references, verify  # noqa: E402

# A reference's wall seconds for 3 seeds on one H200, 5 jobs at a time (cbc99d4eb, torch 2.11), to start the
# longest first; dmpnn's is a guess (RDKit was not carried).
WEIGHT = {"medical/unet": 437, "protein/esm-embed": 218, "diffusion/flow": 135, "tabular/mlp": 119,
          "molecules/dmpnn": 100, "vision/resnet": 75, "contrastive/simclr": 75, "llm/gpt": 49}


def trains_torch(ref) -> bool:
    return references.pinned_precision(ref) is not None


def available(ref, log) -> bool:
    from recipe_zoo import extras

    missing = [m for m in extras.MODULES.get(ref.recipe.split("/")[0], ()) if not extras.installed(m)]
    if missing:
        log(f"skipped {ref.recipe} on {ref.benchmark}: {', '.join(missing)} not installed here")
    return not missing


class Jobs:
    """Subprocesses of ``python -m zoo``, each with its own board folder and log, under one deadline."""

    def __init__(self, work: Path, deadline: float, log):
        self.work, self.deadline, self.log, self.count = work, deadline, log, 0
        self.lock = threading.Lock()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def start(self, args: list[str], env: dict | None = None) -> tuple:
        with self.lock:  # the GPU's jobs and the host CPU's lanes start from two threads
            self.count += 1
            folder = self.work / f"job{self.count:02d}"
        (folder / "board" / "benchmarks").mkdir(parents=True)  # ZOO_BOARD_DIR's layout: a checkout's
        environ = {**os.environ, "ZOO_BOARD_DIR": str(folder / "board"), "PYTHONUNBUFFERED": "1", **(env or {})}
        command = [sys.executable, "-m", "zoo", *args, "--out", str(folder / "runs")]
        self.log(f"[{time.strftime('%H:%M:%S')}] {folder.name}: zoo {' '.join(args)}")
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


def quality(refs: list, jobs: Jobs, width: int, check: bool, cores: int | None = None) -> dict:
    """Phase 1: the references ``width`` at a time (on ``cores`` CPU cores; default all); reference -> folder of
    each job that ended 0."""
    queue = sorted(refs, key=lambda r: -WEIGHT.get(r.recipe, 1))
    running, done = [], {}
    while queue or running:
        while queue and len(running) < width and jobs.left() > 30:
            ref = queue.pop(0)
            running.append((ref, jobs.start(bench_args(ref, check, speed=False), threads(width, cores))))
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


def host_cpu(refs: list, jobs: Jobs, check: bool, lanes: int, cost: dict) -> Path | None:
    """Every seed of each reference on this machine's CPU (GPUs hidden: another CPU kind than the board's), each
    seed its own process of 2 threads, ``lanes`` at a time, the cheapest reference first, a seed started only while
    its predicted time fits (``cost``: seconds per seed where the board has them, times the slowest ratio seen
    here). Returns a folder laid out like a job's, holding one row per reference whose seeds all finished (their
    ``train_seconds`` blanked: each was timed beside the other lanes), or None when none did."""
    from recipe_zoo import bench, execution, paired, runs

    def order(ref):  # the cheapest reference of each table first (a table: a benchmark and a domain), then the rest
        cheapest = min((r for r in refs if table(r) == table(ref)), key=lambda r: cost.get(r, 300))
        return ref != cheapest, cost.get(ref, 300)

    queue = [(ref, seed) for ref in sorted(refs, key=order) for seed in range(verify.CROSS_SEEDS)]
    running, finished, ratio = [], {}, 1.0
    while queue or running:
        while queue and len(running) < lanes:
            ref, seed = queue[0]
            need = cost.get(ref, 300) * ratio + 30  # + the process's start, data and evaluation
            if jobs.left() < need:
                jobs.log(f"host CPU: {ref.recipe} on {ref.benchmark} seed {seed} not started ({jobs.left():.0f} s "
                         f"left, ~{need:.0f} needed)")
                queue = [q for q in queue if q[0] != ref]
                continue
            queue.pop(0)
            args = (["run", ref.recipe, "--budget", "10steps", *ref.settings] if check else
                    ["run", ref.recipe, "--reference", ref.benchmark])
            running.append((ref, seed, jobs.start([*args, "--seed", str(seed), "--device", "cpu"],
                                                  {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"})))
        time.sleep(1)
        for item in [r for r in running if r[2][0].poll() is not None or jobs.left() <= 0]:
            running.remove(item)
            ref, seed, (proc, folder, began) = item
            if jobs.finish(proc, folder, began) == 0:
                finished.setdefault(ref, []).append((seed, next((folder / "runs").rglob("summary.json")).parent))
                if cost.get(ref, 300) >= 60:  # long enough that the ratio is the machine's, not the start's
                    ratio = max(ratio, (time.monotonic() - began - 30) / cost.get(ref, 300))
    lines = {"results.jsonl": [], "items.jsonl": []}
    for ref, done in finished.items():
        dirs = [d for _, d in sorted(done)]  # seeds 0..n-1, in order
        if len(dirs) < verify.CROSS_SEEDS:
            jobs.log(f"host CPU: {ref.recipe} on {ref.benchmark}: {len(dirs)} of {verify.CROSS_SEEDS} seeds finished, "
                     "no row")
            continue
        outcomes = [execution.Outcome(0, d, json.loads((d / "summary.json").read_text())) for d in dirs]
        row = bench.make_row(ref.recipe, outcomes, budget=runs.parse_budget_arg("10steps" if check else ref.work),
                             overrides=ref.overrides, command=f"{ref.command('bench')} --seeds {verify.CROSS_SEEDS}")
        line = paired.items_line(dirs)
        if line is not None:
            row["items"] = line["id"]
            lines["items.jsonl"].append(json.dumps(line))
        lines["results.jsonl"].append(json.dumps(row))
        jobs.log(f"host CPU: {ref.recipe} on {ref.benchmark}: {row['mean']:.4f} ± {row['std']:.4f} on "
                 f"{row['hardware']}")
    if not lines["results.jsonl"]:
        return None
    folder = jobs.work / "host-cpu"
    (folder / "board" / "benchmarks").mkdir(parents=True)
    for name, text in lines.items():
        (folder / "board" / "benchmarks" / name).write_text("".join(t + "\n" for t in text))
    return folder


def table(ref) -> tuple:
    return ref.benchmark, ref.recipe.split("/")[0]


def bench_args(ref, check: bool, speed: bool) -> list[str]:
    if check:  # the same recipe, data and pinned settings for 10 steps: the code path, not the reference's work
        return ["bench", ref.recipe, "--seeds", "1", "--budget", "10steps", "--allow-dirty", *ref.settings]
    seeds = ["--speed"] if speed else ["--seeds", str(verify.CROSS_SEEDS)]  # what checks another machine's rows
    return ["bench", ref.recipe, "--reference", ref.benchmark, *seeds]


def threads(width: int, cores: int | None = None) -> dict:
    """Each of ``width`` jobs its share of the CPU cores (the data pipelines and the Python that feeds the GPU)."""
    return {"OMP_NUM_THREADS": str(max(1, (cores or os.cpu_count() or 2) // width))}


def collect(out: Path, work: Path, shared: list[Path], alone: list[Path]) -> dict:
    """The new lines of every kept job into ``out``; returns the count per file."""
    counts = {}
    for name, folders in (("results.jsonl", shared), ("items.jsonl", shared), ("speed.jsonl", alone)):
        lines = []
        for folder in folders:
            path = folder / "board" / "benchmarks" / name
            for line in (path.read_text().splitlines() if path.exists() else []):
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
        for path in sorted(work.glob("job*/runs/**/*")):
            if path.is_file() and path.suffix in (".json", ".txt", ".log"):  # not the weights
                tar.add(path, arcname=str(path.relative_to(work)))
    return counts


def import_rows(folder: Path) -> int:
    from recipe_zoo import board_render

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
    parser.add_argument("--mode", choices=("gpu", "cpu"), default="gpu",
                        help="gpu: the phases above; cpu: every reference on the host CPU, and beside it, on the "
                             "GPU, the references it has no row of (default gpu)")
    parser.add_argument("--jobs", type=int, default=5, help="quality jobs at a time (default 5)")
    parser.add_argument("--lanes", type=int, help="host CPU processes at a time (default: (cores - 2) / 2)")
    parser.add_argument("--deadline", type=float, default=480, help="seconds for all three phases (default 480)")
    parser.add_argument("--only", nargs="*", default=None, metavar="RECIPE", help="these recipes' references only")
    parser.add_argument("--check", action="store_true", help="10 steps, one seed, no rows kept: a check of the code")
    parser.add_argument("--import", dest="folder", type=Path, help="here: append the files that came back (above)")
    parser.add_argument("--copy-data", type=Path, metavar="DIR", help="here: copy the chosen references' data to DIR")
    args = parser.parse_args()
    if args.folder:
        return import_rows(args.folder)
    chosen = [r for r in references.REFERENCES if args.only is None or r.recipe in args.only]
    if args.copy_data:
        from recipe_zoo import suite

        suite.copy_data(sorted({r.dataset for r in chosen}), args.copy_data)
        return 0
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu-references-{os.getpid()}"
    logfile = open(args.out / "log.txt", "w")

    def log(text: str) -> None:
        print(text, flush=True)
        logfile.write(text + "\n")
        logfile.flush()

    jobs = Jobs(work, start + args.deadline, log)
    usable = [r for r in chosen if available(r, log)]
    torch_refs = [r for r in usable if trains_torch(r)]
    cores = len(os.sched_getaffinity(0))
    lanes = args.lanes or max(1, (cores - 2) // 2)  # 2 threads each, 2 cores left to the GPU's jobs
    log(f"{cores} cores here (os.cpu_count {os.cpu_count()})")
    if args.mode == "cpu":  # every reference on the host CPU; beside it, on the GPU, those it has no row of
        gpu_refs = [r for r in torch_refs if r not in measured_on_gpu()]
        log(f"host CPU: {lanes} lanes; GPU: {', '.join(f'{r.recipe} on {r.benchmark}' for r in gpu_refs) or '-'}")
        result = {}
        beside = threading.Thread(target=lambda: result.update(quality(gpu_refs, jobs, 1, args.check, cores=2)))
        beside.start()
        cpu = host_cpu(usable, jobs, args.check, lanes, seconds_per_seed(usable))
        beside.join()
        shared, alone, wanted = result, [], len(gpu_refs)
    else:
        shared, wanted = quality(torch_refs, jobs, args.jobs, args.check), len(torch_refs)
        cost = {}  # a reference's wall seconds per seed in phase 1, beside other jobs: at most its speed run's
        for ref, folder in shared.items():
            row = json.loads((folder / "board" / "benchmarks" / "results.jsonl").read_text().splitlines()[-1])
            cost[ref] = row["train_seconds"] * 1.5 + 20
        trees = [r for r in usable if not trains_torch(r)]
        cpu = host_cpu(trees, jobs, args.check, lanes, seconds_per_seed(trees)) if jobs.left() > 120 else None
        alone = speed(list(cost), jobs, args.check, cost)
    counts = collect(args.out, work, [*shared.values(), *([cpu] if cpu else [])], alone)
    log(f"gpu_references: {time.monotonic() - start:.0f} s; kept {counts} in {args.out}")
    logfile.close()
    if not args.check:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if len(shared) == wanted and cpu is not None else 1


def measured_on_gpu() -> set:
    """The references with a row from a GPU on this checkout's board."""
    return {references.of_row(r) for r in board.load_rows() if r["hardware"].startswith("NVIDIA")}


def seconds_per_seed(refs: list) -> dict:
    """A reference's training seconds per seed in its quickest row on the board (a 2-core CPU's, mostly)."""
    seconds = {}
    for row in board.load_rows():
        ref = references.of_row(row)
        if ref in refs and row.get("train_seconds"):
            seconds[ref] = min(seconds.get(ref, math.inf), row["train_seconds"])
    return seconds


if __name__ == "__main__":
    raise SystemExit(main())
