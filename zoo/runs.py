"""A run's handle (``Run``): its directory, log, metrics, checkpoint and parts; the code state its rows record.
Running one from start to its summary block is ``execution``."""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recipe_zoo.core.budget import Budget, parse_budget
from recipe_zoo import board
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.api import RecipeSpec
from recipe_zoo.core.datasets import sha256_file
from recipe_zoo.data import benchmark_key

CODE_DIR = Path(__file__).resolve().parent.parent
# Files the zoo writes itself: rewriting them while benchmarking does not make the code "dirty".
RESULT_FILES = ("leaderboard.md", "leaderboard-protocol1.md", "leaderboard.html", "benchmarks/results.jsonl",
                "benchmarks/verify.jsonl", "benchmarks/speed.jsonl", "benchmarks/fingerprints.jsonl",
                "benchmarks/items.jsonl", "benchmarks/transfer.jsonl", "benchmarks/plots")


def code_state() -> tuple[str, bool]:
    """(commit, dirty) of the code that runs: the checkout's git state, or an installed package's version. A copy
    of a checkout without its git folder (as sent to a lent GPU machine) names the commit it was copied from in
    ``ZOO_COMMIT``; its rows record it as ``COMMIT-copy``."""
    from recipe_zoo.core.envinfo import git_state

    if board.in_checkout():
        commit, dirty = git_state(CODE_DIR, ignore=RESULT_FILES)
        copied = os.environ.get("ZOO_COMMIT", "")
        if commit == "unknown" and copied:
            if not (7 <= len(copied) <= 40 and all(c in "0123456789abcdef" for c in copied)):
                raise ZooError(f"ZOO_COMMIT={copied!r}: give the commit the copy was made from (7-40 hex digits)")
            return copied + "-copy", False
        return commit, dirty
    from importlib import metadata

    return f"recipe-zoo=={metadata.version('recipe-zoo')}", False


def fingerprint() -> dict:
    from recipe_zoo.core import envinfo

    env = envinfo.fingerprint(CODE_DIR, ignore=RESULT_FILES)  # a checkout's git state
    if not board.in_checkout() or env["commit"] == "unknown":  # an installed package's version, or a copy's commit
        env["commit"], env["dirty"] = code_state()
    return env


def default_out() -> Path:
    return Path(os.environ.get("ZOO_RUNS", "runs"))


def index_path(out_root: Path) -> Path:
    return out_root / "index.sqlite"


def runs_root(run_dir: Path, recipe: str) -> Path:
    """The runs root a run directory ``<root>/<recipe>/<time>-<id>`` lives under."""
    return run_dir.parents[len(Path(recipe).parts)]


@dataclass
class Run:
    """The handle a recipe's ``train(cfg, run)`` receives: the core's ``Run`` protocol (``recipe_zoo.core.api``)."""

    spec: RecipeSpec
    cfg: object
    budget: Budget
    seed: int
    dir: Path
    device: str = "auto"
    resuming: bool = False
    eval_rows: list[dict] = field(default_factory=list)
    train_rows: list[dict] = field(default_factory=list)
    logger: logging.Logger | None = None
    trackers: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # recipe-specific summary lines, printed after mfu_percent
    metric: str = ""  # the primary metric: the recipe's own unless set_metric chose one for this data
    higher_is_better: bool | None = None
    home: Path | None = None  # under torchrun, ranks > 0 write side files to a scratch ``dir``; this is rank 0's
    inspector: object = None  # set by ``zoo doctor``: receives what ``inspect`` is given
    fit_handler: Callable | None = None  # set by ``zoo doctor``: takes what ``fit`` is given instead of training
    parts_made: int = 0  # the fits made with ``part`` so far: each part's checkpoint is numbered by its turn

    @property
    def inspecting(self) -> bool:
        """True under ``zoo doctor``: a recipe can skip building a costly data view otherwise."""
        return self.inspector is not None

    def inspect(self, *, train: tuple, val: tuple | None = None, task: str, num_classes: int | None = None,
                fine_tune: bool | tuple[str, ...] = False, loop: bool = True) -> None:
        """Show the data to ``zoo doctor`` (nothing happens in a normal run).

        ``train`` / ``val``: (inputs, targets) as tensors, arrays, frames or lists of strings; (tokens,) for
        ``task="tokens"``. ``task``: classification | regression | segmentation | tokens | unlabelled.
        ``fine_tune``: the model starts from pretrained weights, so the relative weight change is checked; a
        tuple names the new tensors (substrings of their names: a new head, LoRA adapters) left out of it.
        ``loop=False``: the recipe trains without ``recipe_zoo.core.loop.fit`` (trees, ridge, inference only), so the
        doctor stops after the data checks.
        """
        if self.inspector is not None:
            self.inspector(train=train, val=val, task=task, num_classes=num_classes, fine_tune=fine_tune, loop=loop)

    @property
    def main(self) -> bool:
        """Rank 0 (or the only process): the one that writes the run directory, index and summary."""
        return self.home is None

    def __post_init__(self):
        self.metric = self.metric or self.spec.metric
        if self.higher_is_better is None:
            self.higher_is_better = self.spec.higher_is_better

    def set_metric(self, name: str, higher_is_better: bool) -> None:
        """For recipes whose metric follows the data (RMSE for a regression target, ROC-AUC for a class)."""
        self.metric, self.higher_is_better = name, higher_is_better

    @property
    def checkpoint_path(self) -> Path:
        """Rank 0's checkpoint: written by rank 0, read back by every rank on resume."""
        return (self.home or self.dir) / "checkpoint.pt"

    @property
    def resume_from(self) -> Path | None:
        return self.checkpoint_path if self.resuming else None

    @functools.cached_property
    def benchmark(self) -> str:
        """The dataset name, or ``own:<content hash>`` for a user's file or folder."""
        data = str(getattr(self.cfg, "data", self.spec.benchmark))
        return benchmark_key(data) + key_suffix(self.cfg)

    def part(self, budget: Budget, *, main: bool) -> Run | PartRun:
        if main and budget == self.budget:
            return self
        self.parts_made += 1  # parts are made in the same order on a resume: the number names the same fit
        return PartRun(self, budget, main, self.parts_made - 1)

    def log(self, message: str) -> None:
        if self.main:
            self.logger.info(message)

    def report(self, key: str, value) -> None:
        """An extra line of the summary block (e.g. ``tokens_per_s``); the fixed keys stay as they are."""
        self.extra[key] = value

    def record_eval(self, row: dict) -> None:
        """One evaluation: a row of ``metrics.csv`` and a log line."""
        if not self.main:
            return
        self.eval_rows.append(row)
        _write_csv(self.dir / "metrics.csv", self.eval_rows)
        for tracker in self.trackers:  # the training columns reach trackers from record_train
            tracker.log_metrics({k: v for k, v in row.items() if k not in ("train_loss", "lr", "grad_norm")})
        shown = {k: v for k, v in row.items() if k not in ("epoch", "progress", "lr", "grad_norm")}
        self.log("eval " + " ".join(f"{k}={_fmt(v)}" for k, v in shown.items()))

    def record_split(self, parts: dict) -> None:
        """Who went where, in ``split.csv`` (the main process writes it)."""
        if self.main:
            from recipe_zoo.core.splits import record_split

            record_split(self.dir / "split.csv", parts)

    def record_train(self, row: dict) -> None:
        """The training loss every 1% of the budget: a row of ``train.csv``."""
        if not self.main:
            return
        self.train_rows.append(row)
        _write_csv(self.dir / "train.csv", self.train_rows)
        for tracker in self.trackers:
            tracker.log_metrics(row)


INPUT_FIELDS = ("weights", "esm_weights", "inception_weights", "model", "tokenizer")  # fields that may name files


def input_files(cfg) -> dict[str, dict]:
    """The pretrained weights and other files a config names, by sha256 (a folder: over its files' hashes and
    names), so a row that started from a file says which file. ``weights=hub`` records where they came from."""
    found = {}
    for name in INPUT_FIELDS:
        value = str(getattr(cfg, name, "") or "")
        path = Path(value).expanduser()
        if value == "hub":
            found[name] = {"origin": "the timm hub (pretrained weights of the named model)", "sha256": None}
        elif value and path.is_file():
            found[name] = {"origin": str(path.resolve()), "sha256": sha256_file(path)}
        elif value and path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())
            digest = hashlib.sha256("".join(f"{p.relative_to(path)}\0{sha256_file(p)}\n" for p in files).encode())
            found[name] = {"origin": str(path.resolve()), "sha256": digest.hexdigest(), "files": len(files)}
    return found


def key_suffix(cfg) -> str:
    """``:field=value`` for each of the config's ``KEY_FIELDS`` (what changes the split, target, metric or
    evaluation) that is off its default: a run measured another way is another benchmark, never ranked with it.
    ``:fine-tuned`` for a run started from trained weights (``weights=``)."""
    if not dataclasses.is_dataclass(cfg):
        return ""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    suffix = "".join(f":{name}={getattr(cfg, name)}" for name in getattr(type(cfg), "KEY_FIELDS", ())
                     if getattr(cfg, name) != defaults[name])
    return suffix + (":fine-tuned" if getattr(cfg, "weights", "") else "")  # never ranked as trained from scratch


class PartRun:
    """One of several fits inside a run (a fold, an ensemble member, a bagged model), with its own budget. The
    main part writes the run's checkpoint and rows; the others write only a checkpoint of their own
    (``checkpoint-partN.pt``, N their turn), so a resume reads a finished part back and goes on in the one it was in."""

    def __init__(self, run: Run, budget: Budget, main: bool, index: int = 0):
        self.run, self.budget, self.main_part, self.index = run, budget, main, index

    @property
    def checkpoint_path(self) -> Path | None:
        if self.main_part or self.run.checkpoint_path is None:
            return self.run.checkpoint_path
        return self.run.checkpoint_path.with_name(f"checkpoint-part{self.index}.pt")

    @property
    def resume_from(self) -> Path | None:
        if self.main_part or self.checkpoint_path is None:
            return self.run.resume_from
        from recipe_zoo.core.checkpoint import previous_path

        path = self.checkpoint_path
        return path if self.run.resuming and (path.exists() or previous_path(path).exists()) else None

    def record_eval(self, row: dict) -> None:
        if self.main_part:
            self.run.record_eval(row)

    def record_train(self, row: dict) -> None:
        if self.main_part:
            self.run.record_train(row)

    def record_split(self, parts: dict) -> None:
        if self.main_part:
            self.run.record_split(parts)

    def part(self, budget: Budget, *, main: bool) -> PartRun:
        return self.run.part(budget, main=main and self.main_part)

    def __getattr__(self, name: str):
        return getattr(self.run, name)


def _write_csv(path: Path, rows: list[dict]) -> None:
    """Rewritten whole (rows are few) through ``checkpoint.replaced``, so a new column fits, a reader never sees
    half a file and a failed write leaves the previous one (and no temp file)."""
    from recipe_zoo.core.checkpoint import replaced

    keys = list(dict.fromkeys(k for r in rows for k in r))
    with replaced(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    """A run's train.csv or metrics.csv as ``_write_csv`` wrote it: numbers as int or float, other cells as text."""
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _number(text: str):
    try:
        value = float(text)
        return int(value) if value.is_integer() and "." not in text and "e" not in text else value
    except ValueError:
        return text


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def new_run_dir(out_root: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = out_root / name / f"{stamp}-{secrets.token_hex(3)}"
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise ZooError(f"{out_root}: cannot create the run directory: {exc.strerror}") from None
    return path


class _QuietFileHandler(logging.FileHandler):
    """On a full disk the log file stops; the console keeps every line (no logging traceback per line)."""

    def handleError(self, record) -> None:
        pass


def lock_run(run_dir: Path) -> int | None:
    """An exclusive lock on the run's ``log.txt`` (a POSIX record lock: this process's own, not its forked data
    workers', and gone with it on a SIGKILL) while it writes the folder: a second ``zoo run --resume`` of a run
    still going is one line. The file descriptor to close at the end; None where fcntl is not available."""
    try:
        import fcntl
    except ImportError:
        return None
    fd = os.open(run_dir / "log.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ZooError(f"{run_dir}: another zoo process is writing this run now; let it finish (or stop it) before "
                       "resuming it") from None
    return fd


def make_logger(run_dir: Path) -> logging.Logger:
    logger = logging.getLogger(f"zoo.run.{run_dir}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    for handler in (logging.StreamHandler(sys.stdout), _QuietFileHandler(run_dir / "log.txt")):
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    return logger


def load_run_config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    if not path.is_file():
        raise ZooError(f"{run_dir}: not a run directory (no config.json)")
    saved = read_json(path)
    for key in ("recipe", "config"):
        if key not in saved:
            raise ZooError(f"{path}: no {key!r} entry (not a run's config.json)")
    return saved


def read_json(path: Path) -> dict:
    """A JSON object a run wrote; missing, damaged or of another shape is one line naming the file."""
    if not path.is_file():
        raise ZooError(f"{path}: not found (not a finished run directory)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZooError(f"{path}: damaged, not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ZooError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def parse_budget_arg(text: str) -> Budget:
    try:
        return parse_budget(text)
    except ValueError as exc:
        raise ZooError(str(exc)) from None
