"""``zoo sweep NAME key=v1,v2,...``: one variable at a time at a fixed budget, each trial a normal run.

Swept keys go in the order of their impact (learning rate, then batch size, weight decay, warmup, then the
rest as given); each value is run for K seeds and its validation value (never the test value) compared with
the best so far: ``keep`` when better by
more than the seed spread, ``within noise`` when inside it (the current best stays: no evidence), else
``discard``. The best config is written as a config file for ``zoo run --config``, and the trials as TSV in
the ``commit metric memory_gb status description`` form. A change of the batch size moves the LRs by the
square-root rule (unless ``--no-lr-rule``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from recipe_zoo import config, execution, runs
from recipe_zoo.core.errors import ZooError

BATCH_KEYS = ("batch_size", "batch_tokens")


def batch_field(config_cls) -> str | None:
    names = {f.name for f in dataclasses.fields(config_cls)}
    declared = getattr(config_cls, "BATCH_FIELD", None)
    return declared or next((k for k in BATCH_KEYS if k in names), None)


def impact(key: str, config_cls) -> int:
    """0 = learning rates, 1 = batch size, 2 = weight decay, 3 = warmup, 4 = the rest."""
    from recipe_zoo.doctor import lr_fields

    if any(key in v for v in lr_fields(config_cls).values()) or key == "lr" or key.endswith("_lr"):
        return 0
    if key == batch_field(config_cls):
        return 1
    if "weight_decay" in key:
        return 2
    if "warmup" in key:
        return 3
    return 4


def split_overrides(items: list[str], config_cls) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """Fixed ``key=value`` pairs and swept ``key=v1,v2,...`` ones (swept keys in order of impact)."""
    fixed, swept = {}, []
    for key, value in config.parse_overrides(items).items():
        if "," in value:
            values = [v.strip() for v in value.split(",") if v.strip()]
            if len(values) < 2:
                raise ZooError(f"override {key}={value}: give two or more values to sweep")
            swept.append((key, values))
        else:
            fixed[key] = value
    if not swept:
        order = sorted((f.name for f in dataclasses.fields(config_cls) if impact(f.name, config_cls) < 4),
                       key=lambda k: impact(k, config_cls))
        raise ZooError("zoo sweep needs a key=v1,v2,... to sweep; in order of impact: " + ", ".join(order))
    swept.sort(key=lambda kv: impact(kv[0], config_cls))
    return fixed, swept


@dataclass
class Trial:
    overrides: dict[str, str]
    values: list[float] = field(default_factory=list)
    memory_gb: float | None = None
    status: str = "ok"  # ok | crash | diverged | interrupted
    verdict: str = ""  # keep | discard | within noise | baseline | crash
    note: str = ""
    run_dirs: list[str] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else float("nan")

    @property
    def std(self) -> float:
        """The seed spread (sample std); NaN from one seed: no estimate of the noise."""
        return statistics.stdev(self.values) if len(self.values) > 1 else float("nan")


def describe(name: str, overrides: dict[str, str]) -> str:
    return " ".join([name, *(f"{k}={v}" for k, v in overrides.items())])


def verdict(trial: Trial, best: Trial, higher: bool) -> str:
    if trial.status != "ok":
        return "crash"
    gain = (trial.mean - best.mean) * (1 if higher else -1)
    noise = max((s for s in (trial.std, best.std) if math.isfinite(s)), default=float("nan"))
    if math.isfinite(noise) and abs(gain) <= noise:
        return "within noise"
    return "keep" if gain > 0 else "discard"


def lr_rule(cfg, key: str, value: str, config_cls) -> tuple[dict[str, str], str]:
    """LR fields x sqrt(new batch / old batch) for a batch-size change; auto (0) LRs are left to the recipe."""
    from recipe_zoo.doctor import lr_fields

    if key != batch_field(config_cls):
        return {}, ""
    # a batch sized by the device (0) is measured against the batch the recipe's LRs were tuned at
    old, new = float(getattr(cfg, key) or getattr(config_cls, "TUNED_BATCH", 0)), float(value)
    if old <= 0 or new <= 0:
        return {}, ""
    factor = math.sqrt(new / old)
    moved, auto = {}, []
    for name in dict.fromkeys(f for v in lr_fields(config_cls).values() for f in v):
        lr = float(getattr(cfg, name))
        if lr > 0:
            moved[name] = f"{lr * factor:.4g}"
        else:
            auto.append(name)
    note = f"LR x{factor:.3f} (sqrt rule)" if moved else ""
    if auto:
        note += ("; " if note else "") + f"{', '.join(auto)}=0: the recipe's own batch rule applies"
    return moved, note


def sweep(spec, overrides: list[str], *, seeds: int, budget_text: str | None, out_root: Path,
          config_file: str | None = None, use_lr_rule: bool = True, recipe_file: str | None = None, log=print) -> int:
    if seeds < 1:
        raise ZooError("--seeds must be at least 1")
    fixed, swept = split_overrides(overrides, spec.config)
    for key, values in swept:  # every value is checked before the first trial starts
        for v in values:
            config.build(spec.config, spec.defaults, config_file, [f"{k}={x}" for k, x in {**fixed, key: v}.items()],
                         spec.name)
    budget = runs.parse_budget_arg(budget_text or spec.budget)
    out_dir = out_root / "sweeps" / spec.name / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"sweep {spec.name}: {', '.join(f'{k} over {len(v)} values' for k, v in swept)}; {seeds} seed(s) each at "
        f"{budget} -> {out_dir}")
    trials: list[Trial] = []
    higher = spec.higher_is_better
    commit = ""

    def run_trial(over: dict[str, str]) -> Trial:
        nonlocal higher, commit
        trial = Trial(dict(over))
        cfg = config.build(spec.config, spec.defaults, config_file, [f"{k}={v}" for k, v in over.items()], spec.name)
        for seed in range(seeds):
            outcome = execution.execute(spec, cfg, budget=budget, seed=seed, out_root=out_root,
                                   description=describe(spec.name, over), recipe_file=recipe_file)
            trial.run_dirs.append(str(outcome.run_dir))
            if outcome.code != execution.EXIT_OK:
                trial.status = outcome.summary.get("status", "crash")
                break
            higher = outcome.summary["higher_is_better"]
            trial.values.append(validation_value(outcome.run_dir, outcome.summary["metric"]))
            mem = outcome.summary.get("peak_mem_mb")
            trial.memory_gb = max(trial.memory_gb or 0.0, mem / 1024) if mem else trial.memory_gb
            if not commit:
                env = json.loads((outcome.run_dir / "env.json").read_text())
                commit = env["commit"] + ("-dirty" if env["dirty"] else "")
        trials.append(trial)
        return trial

    best = run_trial(fixed)
    best.verdict = "baseline"
    if best.status != "ok":
        log(f"the baseline ({describe(spec.name, fixed)}) ended {best.status}: sweep stopped")
        _write(out_dir, spec, trials, best, higher, commit, log)
        return 1
    for key, values in swept:
        base_cfg = config.build(spec.config, spec.defaults, config_file,
                                [f"{k}={v}" for k, v in best.overrides.items()], spec.name)
        current = str(getattr(base_cfg, key))
        for value in values:
            if _same(current, value):
                continue  # the current best already holds this value
            over = {**best.overrides, key: value}
            moved, note = lr_rule(base_cfg, key, value, spec.config) if use_lr_rule else ({}, "")
            over.update(moved)
            trial = run_trial(over)
            trial.note = note
            trial.verdict = verdict(trial, best, higher)
            log(f"{describe(spec.name, over)}: {_mean_std(trial)} -> {trial.verdict} (best {_mean_std(best)})")
            if trial.verdict == "keep":
                best = trial
    _write(out_dir, spec, trials, best, higher, commit, log)
    return 0


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() == b.lower()


def validation_value(run_dir: Path, metric: str) -> float:
    """What a sweep keeps or discards on: the run's validation value of its metric, never the test value."""
    from recipe_zoo.board import metric_base

    key = metric if metric.startswith("val_") else "val_" + metric_base(metric)
    measured = json.loads((run_dir / "summary.json").read_text())["metrics"]
    if key not in measured:
        raise ZooError(f"{run_dir}: the run reports no {key}: a sweep selects on validation, never on {metric}; "
                       f"return {key} from the recipe's train")
    return measured[key]


def _mean_std(t: Trial) -> str:
    if t.status != "ok":
        return t.status
    return f"{t.mean:.4f}" + (f" ± {t.std:.4f}" if math.isfinite(t.std) else "")


def _write(out_dir: Path, spec, trials: list[Trial], best: Trial, higher: bool, commit: str, log) -> None:
    status = {"keep": "keep", "baseline": "keep", "crash": "crash"}
    tsv = ["commit\tmetric\tmemory_gb\tstatus\tdescription"]
    for t in trials:
        mem = "" if t.memory_gb is None else f"{t.memory_gb:.3f}"
        metric = "" if not t.values or t.status != "ok" else f"{t.mean:.6g}"
        kept = status.get(t.verdict, "discard") if t.status == "ok" else "crash"
        tsv.append(f"{commit}\t{metric}\t{mem}\t{kept}\t{describe(spec.name, t.overrides)}")
    (out_dir / "results.tsv").write_text("\n".join(tsv) + "\n")
    table = [f"# zoo sweep {spec.name}", "", f"on the validation value of {spec.metric} ({'higher' if higher else 'lower'} "
             "is better; the test value is never read); verdicts against the best so far; within noise = the "
             "difference is inside the larger seed std (the current best stays)", "",
             "| trial | mean ± std | seeds | verdict | note |", "|---|---|---|---|---|"]
    table += [f"| {describe(spec.name, t.overrides)} | {_mean_std(t)} | {len(t.values)} | {t.verdict} | {t.note} |"
              for t in trials]
    (out_dir / "sweep.md").write_text("\n".join(table) + "\n")
    (out_dir / "best.json").write_text(json.dumps({"config": best.overrides, "recipe": spec.name,
                                                   "mean": best.mean, "std": best.std}, indent=2) + "\n")
    log("\n".join(["", *table[4:]]))
    log(f"\nbest: {describe(spec.name, best.overrides)} {_mean_std(best)}\n"
        f"config: {out_dir / 'best.json'}  (zoo run {spec.name} --config {out_dir / 'best.json'})\n"
        f"tsv: {out_dir / 'results.tsv'}")
