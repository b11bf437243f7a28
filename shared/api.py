"""The recipe API: how a recipe registers itself (``@recipe``) and what its ``train(cfg, run)`` is handed (``Run``).

A recipe module imports this and the rest of the core, never the application: ``zoo run`` hands ``train`` the
application's run (``recipe_zoo.runs.Run``), ``zoo doctor`` one that takes the model, optimizer and batches at the
call to ``fit``, and a test or a notebook can pass a ``SimpleRun``. All three have what ``Run`` lists.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from recipe_zoo.core.budget import Budget


@dataclass(frozen=True)
class Range:
    """The values a numeric config field accepts, checked on every value given (``lr: Positive = 1e-3``)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself excluded
    high_open: bool = False

    def admits(self, value: float) -> bool:
        return ((self.low is None or value > self.low or (value == self.low and not self.low_open))
                and (self.high is None or value < self.high or (value == self.high and not self.high_open)))

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"{'<' if self.high_open else '<='} {self.high:g}" if self.high is not None else "any number"


# The ranges most fields have; a field with another declares its own Annotated[int | float, Range(...)]
Positive = Annotated[float, Range(0, low_open=True)]  # > 0: a learning rate, a temperature
NonNegative = Annotated[float, Range(0)]  # >= 0, where 0 usually means off
Fraction = Annotated[float, Range(0, 1, high_open=True)]  # [0, 1): dropout, momentum, EMA decay
Unit = Annotated[float, Range(0, 1)]  # [0, 1]: a share of the budget or of the data
Share = Annotated[float, Range(0, 1, low_open=True, high_open=True)]  # (0, 1): a held-out part, neither none nor all
Auto = Annotated[float, Range(-1)]  # >= -1, where -1 is the recipe's own choice (the field's comment says which)
Count = Annotated[int, Range(1)]  # >= 1: a width, a batch, a number of layers
NonNegativeInt = Annotated[int, Range(0)]  # >= 0, where 0 usually means auto or off
AnyInt = Annotated[int, Range()]  # any whole number (an offset, -1 for the last)


def former_fields(config: type, former: tuple, why: str, **instead: str) -> dict[str, str]:
    """A config's ``REPLACED``: the fields of ``former`` (configs, or field names) that ``config`` lacks, which a
    config file, a sweep's best.json or a saved run from before the split may still name -> what replaced each
    (``instead``), else ``why``."""
    gone = {n for c in former for n in ([c] if isinstance(c, str) else [f.name for f in dataclasses.fields(c)])}
    return {name: instead.get(name, why) for name in sorted(gone - {f.name for f in dataclasses.fields(config)})}


@dataclass(frozen=True)
class RecipeSpec:
    name: str  # domain/variant
    train: Callable  # train(cfg, run) -> dict[str, float]
    config: type  # the @dataclass of the recipe
    benchmark: str  # dataset it is measured on by default (zoo bench)
    metric: str  # primary metric key in the returned dict
    higher_is_better: bool = True
    budget: str = "60s"  # default training budget
    summary: str = ""
    defaults: dict = field(default_factory=dict)  # the variant's config values
    source: str = ""  # file that registered it
    scale_out: str = "torchrun: DDP"  # how it uses more devices; "single process: <why, and what to use>" if not
    hooks: dict = field(default_factory=dict)  # more entry points beside train, by name (e.g. "shape" for zoo plan)
    predict: Callable | None = None  # predict(cfg, options, run: artifact.PredictRun) -> artifact.Predictions
    predict_options: type | None = None  # the @dataclass of predict's options (artifact.PredictOptions or a subclass)
    exports: dict = field(default_factory=dict)  # zoo export formats beyond safetensors: name -> fn(cfg, run, out)
    # precision=auto on a CPU with bf16 units: "bf16" where the recipe's step was measured >= 1.3x faster in bf16
    # and its validation no worse (benchmarks/cpu_precision.py), else "fp32"; the registration's comment links them
    cpu_precision: str = "fp32"

    @property
    def distributed(self) -> bool:
        return not self.scale_out.startswith("single process")


REGISTRY: dict[str, RecipeSpec] = {}


def recipe(name: str, *, config: type, benchmark: str, metric: str, higher_is_better: bool = True,
           budget: str = "60s", summary: str = "", defaults: dict | None = None, scale_out: str = "torchrun: DDP",
           hooks: dict | None = None, predict: Callable | None = None, predict_options: type | None = None,
           exports: dict | None = None, cpu_precision: str = "fp32"):
    """Register ``train`` under ``name`` (domain/variant; a user's own file may use a plain name);
    stack several decorators for variants. ``predict``: the hook ``zoo predict`` calls on a finished run
    (``recipe_zoo.core.artifact`` says what it is handed); ``exports``: ``zoo export`` formats beyond safetensors."""

    def register(train: Callable) -> Callable:
        source = sys.modules[train.__module__].__file__ if train.__module__ in sys.modules else ""
        REGISTRY[name] = RecipeSpec(name=name, train=train, config=config, benchmark=benchmark, metric=metric,
                                    higher_is_better=higher_is_better, budget=budget, summary=summary,
                                    defaults=dict(defaults or {}), source=str(source), scale_out=scale_out,
                                    hooks=dict(hooks or {}), predict=predict, predict_options=predict_options,
                                    exports=dict(exports or {}), cpu_precision=cpu_precision)
        return train

    return register


class Run(Protocol):
    """What a recipe may use of the run it trains in (everything recipes call today, and nothing else)."""

    spec: RecipeSpec  # the recipe being run (its name goes into exported weights' metadata)
    budget: Budget  # seconds, steps or epochs: ``fit`` spends it
    seed: int
    dir: Path  # the run directory: side files (weights, samples, importances) go here
    device: str  # auto | cpu | cuda | cuda:N | mps, as asked; ``precision.choose_device`` resolves it
    # ``zoo doctor``: takes the parts ``fit`` is given (model, optimizer, batches, ...) instead of training
    fit_handler: Callable | None

    @property
    def checkpoint_path(self) -> Path | None:
        """Where ``fit`` writes its checkpoint (None: no checkpoint, as in an inner fit)."""

    @property
    def resume_from(self) -> Path | None:
        """The checkpoint to resume from, when the run is a resume."""

    @property
    def inspecting(self) -> bool:
        """True under ``zoo doctor``: a recipe can skip building a costly data view otherwise."""

    def log(self, message: str) -> None:
        """A line in the run's log (and on the terminal); only the main process writes."""

    def report(self, key: str, value: Any) -> None:
        """An extra line of the summary block (e.g. ``tokens_per_s``)."""

    def record_eval(self, row: dict) -> None:
        """One evaluation: a row of ``metrics.csv``."""

    def record_train(self, row: dict) -> None:
        """The training loss every 1% of the budget: a row of ``train.csv``."""

    def set_metric(self, name: str, higher_is_better: bool) -> None:
        """The primary metric follows the data (RMSE for a regression target, ROC-AUC for classes)."""

    def record_split(self, parts: dict[str, Iterable]) -> None:
        """Who went where: each split's item keys (paths, row names), written to the run's ``split.csv``."""

    def inspect(self, *, train: tuple, val: tuple | None = None, task: str, num_classes: int | None = None,
                fine_tune: bool | tuple[str, ...] = False, loop: bool = True) -> None:
        """Show the data to ``zoo doctor`` (nothing happens otherwise). ``task``: classification | regression |
        segmentation | tokens | unlabelled; ``fine_tune``: pretrained weights (a tuple names the new tensors);
        ``loop=False``: the recipe trains without ``fit``."""

    def part(self, budget: Budget, *, main: bool) -> Run:
        """One of several fits inside this run (a fold, an ensemble member, a bagged model) with its own budget.
        The main part writes the run's checkpoint and rows; the others only a checkpoint of their own, so a resume
        goes on in the part it was in."""


@dataclass
class SimpleRun:
    """A ``Run`` outside the zoo command (tests, notebooks): rows and reports kept in memory, log to print."""

    budget: Budget
    seed: int = 0
    dir: Path = Path(".")
    device: str = "auto"
    spec: RecipeSpec | None = None
    checkpoint_path: Path | None = None
    resume_from: Path | None = None
    fit_handler: Callable | None = None
    eval_rows: list[dict] = field(default_factory=list)
    train_rows: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    splits: dict = field(default_factory=dict)
    metric: str = ""
    higher_is_better: bool = True
    log: Callable[[str], None] = print

    inspecting = False

    def report(self, key: str, value: Any) -> None:
        self.extra[key] = value

    def record_eval(self, row: dict) -> None:
        self.eval_rows.append(row)

    def record_train(self, row: dict) -> None:
        self.train_rows.append(row)

    def set_metric(self, name: str, higher_is_better: bool) -> None:
        self.metric, self.higher_is_better = name, higher_is_better

    def record_split(self, parts: dict[str, Iterable]) -> None:
        self.splits = {name: list(keys) for name, keys in parts.items()}

    def inspect(self, **parts) -> None:
        pass

    def part(self, budget: Budget, *, main: bool) -> SimpleRun:
        if main:
            return dataclasses.replace(self, budget=budget)  # the same rows and reports
        return SimpleRun(budget=budget, seed=self.seed, dir=self.dir, device=self.device, spec=self.spec,
                         fit_handler=self.fit_handler, log=self.log)
