"""``zoo doctor NAME``: the debugging checklist run on the user's own config and data.

The recipe runs as usual until it has its data (``run.inspect``) and its model, optimizer and batches
(the call to ``recipe_zoo.core.loop.fit``, which hands them to the run's ``fit_handler``); the doctor takes them
there instead of training, runs the checks of ``recipe_zoo.core.diagnose`` (data checks in doctor_data.py, training
checks in doctor_training.py) and writes ``report.md``, plots and ``suggested.json`` into its own directory.
Every finding is one line: a severity, the check, what was seen, and the fix from the checklist.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from recipe_zoo.core.errors import ZooError
from recipe_zoo.doctor_data import DataChecks
from recipe_zoo.doctor_report import SEVERITIES, Done
from recipe_zoo.doctor_training import TrainingChecks


class Doctor(DataChecks, TrainingChecks):
    """The checklist on one recipe: data checks when it shows its data, training checks when it calls ``fit``."""

    def __init__(self, spec, cfg, out_dir: Path, steps: int, log=print):
        super().__init__(out_dir, log)
        self.spec, self.cfg, self.steps = spec, cfg, steps
        self.data_seen = self.loop_seen = False
        self.fine_tune = False
        self.task = ""
        self.suggestion: dict = {}  # group kind -> LR multiplier
        self.main_lr: dict = {}  # group kind -> the configured LR of its largest group

    def suggested_config(self) -> dict:
        """The LR fields scaled by the range test's suggestion for their group kind."""
        if not self.suggestion:
            return {}
        fields = lr_fields(type(self.cfg))
        out = {}
        for kind, mult in self.suggestion.items():
            names = [f for v in fields.values() for f in v] if kind == "all" else fields.get(kind, ())
            for name in names:
                value = getattr(self.cfg, name)
                if value <= 0:  # 0 = the recipe picks its default: scale the LR it picked
                    value = self.main_lr.get(kind, 0.0)
                if value > 0:
                    out[name] = float(f"{value * mult:.3g}")
        return out


def lr_fields(config_cls) -> dict[str, tuple[str, ...]]:
    """Which config fields set the LR of each group kind: ``LR_FIELDS`` on the config class, else ``lr``."""
    declared = getattr(config_cls, "LR_FIELDS", None)
    if declared:
        return dict(declared)
    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"all": ("lr",)} if "lr" in names else {}


def doctor(spec, cfg, *, out_root: Path, seed: int, device: str, steps: int, budget, overrides: list[str]) -> int:
    from recipe_zoo import extras, runs

    extras.require(spec.name)
    if steps < 10:
        raise ZooError(f"--steps {steps}: the checks need at least 10 steps")
    out_dir = runs.new_run_dir(out_root / "doctor", spec.name)
    logger = runs.make_logger(out_dir)  # the terminal and log.txt, as a run's
    try:
        return _examine(spec, cfg, out_dir, logger, seed=seed, device=device, steps=steps, budget=budget,
                        overrides=overrides)
    finally:
        for handler in logger.handlers:
            handler.close()
        logger.handlers.clear()


def _examine(spec, cfg, out_dir: Path, logger, *, seed, device, steps, budget, overrides) -> int:
    from recipe_zoo.core.precision import seed_everything
    from recipe_zoo import runs

    doc = Doctor(spec, cfg, out_dir, steps, log=logger.info)
    run = runs.Run(spec=spec, cfg=cfg, budget=budget, seed=seed, dir=out_dir, device=device, logger=logger,
                   inspector=doc.check_data, fit_handler=doc.check_training)
    logger.info(f"zoo doctor {spec.name} on {run.benchmark} ({steps} steps per check) -> {out_dir}")
    seed_everything(seed)
    t0 = time.time()
    try:
        spec.train(cfg, run)
    except Done:
        pass
    if not doc.data_seen:
        doc.add("info", "data", f"{spec.name} does not show its data to the doctor (run.inspect): data checks skipped")
    if not doc.loop_seen and not any(f.check == "training" for f in doc.findings):
        doc.add("warn", "training", f"{spec.name} finished without calling recipe_zoo.core.loop.fit: training checks skipped")
    suggested = doc.suggested_config()
    header = [f"# zoo doctor: {spec.name} on {run.benchmark}", "",
              f"- command: `zoo doctor {' '.join([spec.name, *overrides])}`",
              f"- seed {seed}, {steps} steps per check, {time.time() - t0:.0f}s, {time.strftime('%Y-%m-%d %H:%M')}"]
    if suggested:
        (out_dir / "suggested.json").write_text(json.dumps({"config": suggested}, indent=2) + "\n")
        header.append(f"- suggested LR config: `{json.dumps(suggested)}`; try it: "
                      f"`zoo run {spec.name} --config {out_dir / 'suggested.json'}` "
                      "or sweep around it with `zoo sweep`")
    report = doc.write(header)
    counts = {s: sum(f.severity == s for f in doc.findings) for s in SEVERITIES}
    logger.info(f"report: {report}  ({counts['error']} error, {counts['warn']} warn, {counts['info']} info, "
                f"{counts['ok']} ok)")
    if suggested:
        logger.info(f"suggested LR config: {out_dir / 'suggested.json'} {json.dumps(suggested)}")
    return 1 if counts["error"] else 0
