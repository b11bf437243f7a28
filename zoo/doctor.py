"""``zoo doctor NAME``: the debugging checklist run on the user's own config and data.

The recipe runs as usual until it has its data (``run.inspect``) and its model, optimizer and batches
(the call to ``recipe_zoo.core.loop.fit``, which hands them to the run's ``fit_handler``); the doctor takes them
there instead of training, runs the checks of
``recipe_zoo.core.diagnose`` and writes ``report.md``, plots and ``suggested.json`` into its own directory.
Every finding is one line: a severity, the check, what was seen, and the fix from the checklist.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recipe_zoo.core.errors import ZooError

SEVERITIES = ("error", "warn", "info", "ok")
NOISY = 1e-4  # relative spread of repeated losses on one batch above which the loss is random itself
TASKS = ("classification", "regression", "segmentation", "tokens", "unlabelled")


@dataclass
class Finding:
    severity: str  # error | warn | info | ok
    check: str
    message: str
    fix: str = ""

    def line(self) -> str:
        return f"[{self.severity}] {self.check}: {self.message}" + (f" -> {self.fix}" if self.fix else "")


class _Done(BaseException):
    """Stops the recipe once the doctor has what it needs (a BaseException: recipes' handlers let it pass)."""


def _fmt(x: float) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.4g}"


class Doctor:
    def __init__(self, spec, cfg, out_dir: Path, steps: int, log=print):
        self.spec, self.cfg, self.dir, self.steps, self.log = spec, cfg, out_dir, steps, log
        self.findings: list[Finding] = []
        self.sections: list[str] = []
        self.data_seen = self.loop_seen = False
        self.fine_tune = False
        self.task = ""
        self.suggestion: dict = {}  # group kind -> LR multiplier
        self.main_lr: dict = {}  # group kind -> the configured LR of its largest group

    def add(self, severity: str, check: str, message: str, fix: str = "") -> None:
        finding = Finding(severity, check, message, fix)
        self.findings.append(finding)
        self.log(finding.line())

    # ---- data ---------------------------------------------------------------------------------------
    def check_data(self, *, train, val, task, num_classes, fine_tune, loop) -> None:
        from recipe_zoo.core import diagnose

        if task not in TASKS:
            raise ValueError(f"run.inspect(task={task!r}): choose one of {TASKS}")
        self.data_seen, self.fine_tune, self.task = True, fine_tune, task
        lines = ["## Data", ""]
        splits = {"train": train, **({"validation": val} if val is not None else {})}
        for name, part in splits.items():
            x = part[0]
            lines.append(f"- {name}: {len(x)} {'tokens' if task == 'tokens' else 'rows'}"
                         + (f", inputs of shape {tuple(np.shape(x))}" if hasattr(x, "shape") else ""))
            for role, arr in (("inputs", x), ("targets", part[1] if len(part) > 1 else None)):
                if arr is None:
                    continue
                bad = diagnose.nonfinite_rows(arr)
                if len(bad):
                    self.add("error", "data/nonfinite", f"{len(bad)} of {len(arr)} {name} {role} rows hold NaN or "
                             f"inf (rows {', '.join(map(str, bad[:5]))}{', ...' if len(bad) > 5 else ''})",
                             "drop or impute them: one such row turns the loss NaN")
        if task in ("classification", "segmentation") and len(train) > 1:
            self._balance(np.asarray(diagnose.as_numpy(train[1])), num_classes, task, lines)
        if task == "regression" and len(train) > 1:
            self._target(np.asarray(diagnose.as_numpy(train[1]), dtype=float), lines)
        if val is not None:
            self._leakage(train[0], val[0], task, lines)
        if task != "tokens":
            self._inputs(train[0], lines)
        self.sections.append("\n".join(lines))
        if not loop:
            self.add("info", "training", f"{self.spec.name} trains without the core loop (trees, ridge or inference): "
                     "overfit, LR range and health checks do not apply")
            raise _Done

    def _balance(self, y: np.ndarray, num_classes, task: str, lines: list[str]) -> None:
        if y.size == 0:
            return
        if not np.issubdtype(y.dtype, np.integer) and not np.all(np.mod(y, 1) == 0):
            self.add("error", "data/labels", "class labels are not whole numbers",
                     "classification needs integer labels 0..C-1 (regression targets want task=regression)")
            return
        y = y.astype(np.int64).ravel()
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or (num_classes is not None and hi >= num_classes):
            self.add("error", "data/labels", f"labels span {lo}..{hi} but the model has {num_classes} outputs",
                     "remap labels to 0..C-1 or give the model as many outputs as classes")
            return
        counts = np.bincount(y, minlength=num_classes or hi + 1)
        share = counts / counts.sum()
        what = "pixels" if task == "segmentation" else "rows"
        lines.append(f"- classes: {len(counts)}; {what} per class " + ", ".join(f"{i}: {c}" for i, c in enumerate(counts[:20]))
                     + (" ..." if len(counts) > 20 else ""))
        empty = np.flatnonzero(counts == 0)
        if task == "classification" and len(empty):
            self.add("warn", "data/balance", f"{len(empty)} class(es) have no training rows "
                     f"({', '.join(map(str, empty[:5]))})", "check the label mapping, or drop the classes from the head")
        present = counts[counts > 0]
        ratio = present.max() / present.min()
        fix = ("a weighted loss (class weights ~ 1/frequency), focal loss or a weighted sampler; "
               "report macro-F1 rather than accuracy")
        if task == "segmentation":
            if share[1:].sum() < 0.01:
                self.add("warn", "data/balance", f"foreground is {100 * share[1:].sum():.2f}% of the pixels",
                         "Dice (or DiceCE) loss, foreground-weighted patch sampling")
            else:
                self.add("ok", "data/balance", f"foreground is {100 * share[1:].sum():.1f}% of the pixels")
        elif ratio >= 10:
            self.add("warn", "data/balance", f"imbalanced: the largest class has {ratio:.1f}x the rows of the smallest",
                     fix)
        elif ratio >= 3:
            self.add("info", "data/balance", f"mildly imbalanced: largest/smallest class {ratio:.1f}x", fix)
        else:
            self.add("ok", "data/balance", f"{len(present)} classes, largest/smallest {ratio:.2f}x")

    def _target(self, y: np.ndarray, lines: list[str]) -> None:
        y = y[np.isfinite(y)]
        if y.size == 0:
            return
        lines.append(f"- target: mean {_fmt(y.mean())}, std {_fmt(y.std())}, min {_fmt(y.min())}, "
                     f"max {_fmt(y.max())}")
        med = float(np.median(y))
        if y.min() > 0 and med > 0 and y.max() / med > 50:
            self.add("info", "data/target", f"skewed positive target (max {y.max() / med:.0f}x the median)",
                     "fit the log of the target and report RMSE on the original scale")
        else:
            self.add("ok", "data/target", f"target std {_fmt(y.std())}, range {_fmt(y.min())}..{_fmt(y.max())}")

    def _leakage(self, train_x, val_x, task: str, lines: list[str]) -> None:
        from recipe_zoo.core import diagnose

        if task == "tokens":
            found, total = _shared_windows(np.asarray(diagnose.as_numpy(train_x)), np.asarray(diagnose.as_numpy(val_x)))
            what = f"{found} of {total} validation windows of {WINDOW} tokens also occur verbatim in train"
            lines.append(f"- leakage: {what}")
            if total and found / total > 0.01:
                self.add("warn", "data/leakage", what, "deduplicate across splits (documents, not lines)")
            else:
                self.add("ok", "data/leakage", what)
            return
        train_h, val_h = diagnose.row_hashes(train_x), diagnose.row_hashes(val_x)
        first: dict[str, int] = {}
        for i, h in enumerate(train_h):
            first.setdefault(h, i)
        pairs = [(j, first[h]) for j, h in enumerate(val_h) if h in first]
        within = len(train_h) - len(first)
        lines.append(f"- exact duplicates: {len(pairs)} validation rows also in train; {within} repeated rows within train")
        if pairs:
            shown = ", ".join(f"val {j} = train {i}" for j, i in pairs[:3])
            self.add("error" if len(pairs) / len(val_h) >= 0.01 else "warn", "data/leakage",
                     f"{len(pairs)} of {len(val_h)} validation rows are exact copies of training rows ({shown})",
                     "deduplicate before splitting (by content hash; for molecules by canonical SMILES, for "
                     "patients by patient): the validation score is inflated")
        else:
            self.add("ok", "data/leakage", f"no validation row is an exact copy of a training row ({len(val_h)} checked)")
        if within:
            self.add("info", "data/duplicates", f"{within} training rows repeat an earlier training row",
                     "harmless for training unless they also straddle a split")

    def _inputs(self, x, lines: list[str]) -> None:
        from recipe_zoo.core import diagnose

        stats = diagnose.feature_stats(x)
        if not stats:
            return
        lines += ["", "| feature / channel (over up to 4096 rows) | mean | std | min | max |", "|---|---|---|---|---|"]
        lines += [f"| {s['feature']} | {_fmt(s['mean'])} | {_fmt(s['std'])} | {_fmt(s['min'])} | {_fmt(s['max'])} |"
                  for s in stats[:32]]
        constant = [s["feature"] for s in stats if s["std"] == 0]
        if constant and len(constant) < len(stats):
            self.add("info", "data/inputs", f"{len(constant)} constant input feature(s)/channel(s) "
                     f"({', '.join(constant[:5])})", "they carry no information; drop them")

    # ---- training -----------------------------------------------------------------------------------
    def check_training(self, *, model, optimizer, batches, loss_fn, update_hparams, settings, device, on_step):
        from recipe_zoo.core import diagnose

        self.loop_seen = True
        parts = diagnose.Parts(model=model, optimizer=optimizer, batches=batches, loss_fn=loss_fn,
                               update_hparams=update_hparams, settings=settings, device=device, on_step=on_step)
        t0 = time.time()
        self._overfit(parts)
        self._lr_range(parts)
        self._health(parts)
        self.log(f"training checks took {time.time() - t0:.0f}s")
        raise _Done

    def _overfit(self, parts) -> None:
        from recipe_zoo.core import diagnose

        probe = parts.batches.next_batch()
        noise = diagnose.loss_noise(parts, probe)
        out = diagnose.overfit_batch(parts, self.steps)
        self.overfit = out
        start, final = out["train"][0], out["final"]
        held0, held_min = out["held_out"][0], min(out["held_out"])
        lines = ["## Overfit one batch", "",
                 f"- {len(out['train'])} steps on one batch of {parts.batches.batch_size} at the configured LR: "
                 f"loss {_fmt(start)} -> {_fmt(final)}",
                 f"- an unseen batch meanwhile: {_fmt(held0)} -> lowest {_fmt(held_min)} -> {_fmt(out['held_out'][-1])}",
                 f"- loss spread over three evaluations of one batch: {100 * noise:.2g}% "
                 + ("(random inside the loss: noise levels, views or dropout)" if noise > NOISY else "")]
        self.sections.append("\n".join(lines))
        causes = ("if impossible there is a bug: labels not matching inputs, a loss that does not fit the output "
                  "layer (softmax twice, logits vs probabilities), an LR far off (see the range test), a model too small")
        if not math.isfinite(final):
            self.add("error", "overfit/one-batch", f"the loss became non-finite within {len(out['train'])} steps",
                     "lower the LR 3-10x; check inputs for inf/NaN; clip gradients at 1.0")
        elif final <= 0.1 * start or final < 0.02:
            self.add("ok", "overfit/one-batch", f"memorised one batch: loss {_fmt(start)} -> {_fmt(final)}")
        elif final <= 0.5 * start and (noise > NOISY or _plateaued(out["train"])):
            why = ("noise drawn inside the loss" if noise > NOISY
                   else "a floor of the loss itself (label smoothing, mixing, contrastive negatives)")
            self.add("ok", "overfit/one-batch", f"the loss fell {100 * (1 - final / start):.0f}% on one batch and "
                     f"levelled off at {_fmt(final)} ({why} keeps it above zero)")
        elif final <= 0.5 * start:
            self.add("warn", "overfit/one-batch", f"not memorised yet: loss {_fmt(start)} -> {_fmt(final)} in "
                     f"{len(out['train'])} steps and still falling", "give it more steps (--steps) or a higher LR "
                     "(see the range test); a bug if it stalls far above zero")
        else:
            self.add("error", "overfit/one-batch", f"could not memorise one batch: loss {_fmt(start)} -> {_fmt(final)} "
                     f"in {len(out['train'])} steps", causes)
        if self.task == "unlabelled" and math.isfinite(held0):  # no labels to misalign: informative only
            self.add("info", "overfit/transfer", f"an unseen batch's loss while memorising one: {_fmt(held0)} -> lowest "
                     f"{_fmt(held_min)} (self-supervised: one batch's views teach little about others)")
        elif math.isfinite(held0) and held_min > 0.95 * held0:
            self.add("error", "overfit/transfer", f"learning one batch never lowered an unseen batch's loss "
                     f"({_fmt(held0)} -> lowest {_fmt(held_min)}): the targets look unrelated to the inputs",
                     "check that labels stay aligned with inputs (a shuffle applied to one but not the other, a "
                     "wrong join or sort order); look at a few inputs with their labels")
        elif math.isfinite(held0):
            self.add("ok", "overfit/transfer", f"what one batch taught carried over: an unseen batch's loss fell "
                     f"{_fmt(held0)} -> {_fmt(held_min)}")

    def _lr_range(self, parts) -> None:
        from recipe_zoo.core import diagnose

        kinds = diagnose.group_kinds(parts.optimizer)
        wanted = sorted(set(kinds)) if len(set(kinds)) > 1 else [None]
        self.ranges = [diagnose.lr_range(parts, self.steps, kind=k) for k in wanted]
        lines = ["## LR range test", "", "LR multipliers from x1e-4 to x100 the configured LR over one run; suggested = "
                 "the geometric mean of the steepest descent and a tenth of the lowest point; per group kind (the other "
                 "kinds training at their own LR), a tenth of the lowest point", "",
                 "| groups | configured LR | steps | loss lowest at | steepest at | a tenth of lowest | suggested |",
                 "|---|---|---|---|---|---|---|"]
        for r in self.ranges:
            idx = [i for i, k in enumerate(kinds) if r["kind"] in ("all", k)]
            lrs = sorted({parts.base_lrs[i] for i in idx})
            shown = "/".join(_fmt(v) for v in lrs[:3]) + (" ..." if len(lrs) > 3 else "")
            m = r["suggested_mult"]
            lines.append(f"| {r['kind']} | {shown} | {len(r['losses'])} | x{_fmt(r['min_mult'])} | "
                         f"x{_fmt(r['steepest_mult'])} | x{_fmt(r.get('tenth_of_min_mult', float('nan')))} | x{_fmt(m)} |")
            label = "" if r["kind"] == "all" else f" ({r['kind']} groups)"
            if not math.isfinite(m) or not r.get("fell", False):
                self.add("warn", "lr/range", f"the loss never fell by 10% in the range test{label} "
                         f"(x{low_high(r)} the configured LR over {len(r['losses'])} steps)",
                         "with few steps give it more (--steps 100); else look at the data and the overfit check "
                         "first: no LR helps a model that cannot learn")
                continue
            self.suggestion[r["kind"]] = m
            biggest = max(idx, key=lambda i: sum(p.numel() for p in parts.optimizer.param_groups[i]["params"]))
            self.main_lr[r["kind"]] = parts.base_lrs[biggest]
            if r["min_mult"] < 1:
                self.add("warn", "lr/range", f"the configured LR{label} is past the loss minimum of the range test "
                         f"(lowest at x{_fmt(r['min_mult'])}); suggested x{_fmt(m)}",
                         "lower the LR (suggested.json); raise warmup if the loss spikes early")
            elif m > 3 or m < 1 / 3:
                self.add("info", "lr/range", f"suggested LR{label} is x{_fmt(m)} the configured one (the loss was "
                         f"lowest at x{_fmt(r['min_mult'])}, fell fastest at x{_fmt(r['steepest_mult'])})",
                         "try it with zoo sweep: the range test is a starting point, the sweep decides")
            else:
                self.add("ok", "lr/range", f"configured LR{label} within 3x of the suggestion (x{_fmt(m)})")
        self.sections.append("\n".join(lines))

    def _health(self, parts) -> None:
        from recipe_zoo.core import diagnose

        h = diagnose.health_run(parts, self.steps)
        self.health = h
        n = len(h["loss"])
        lines = ["## Training health", "", f"- {n} steps under the recipe's own schedule (progress = step / {self.steps})"]
        # the LR each optimizer step used, against the schedule
        worst, where = 0.0, None
        for i, (exp, app) in enumerate(zip(h["expected_lr"], h["applied_lr"])):
            for j, (e, a) in enumerate(zip(exp, app)):
                if math.isfinite(e) and e > 0:
                    gap = abs(a / e - 1)
                    if gap > worst:
                        worst, where = gap, (i, j, e, a)
        if any(m is None for m in h["multiplier"]):
            self.add("warn", "health/schedule", "update_hparams returns no LR multiplier: the applied LR cannot be "
                     "compared with the schedule", "return the multiplier (recipe_zoo.core.schedule.apply_schedules does)")
        elif worst > 0.01:
            i, j, e, a = where
            self.add("error", "health/schedule", f"the schedule is not applied: at step {i} group {j} stepped with "
                     f"lr {_fmt(a)} where the schedule says {_fmt(e)}",
                     "set each group's lr every step (recipe_zoo.core.schedule.apply_schedules) and print the LR each step")
        else:
            mults = [m for m in h["multiplier"] if m is not None]
            self.add("ok", "health/schedule", f"every step used the scheduled LR (multiplier {_fmt(min(mults))}.."
                     f"{_fmt(max(mults))})" if mults else "no steps")
        losses = [x for x in h["loss"] if math.isfinite(x)]
        if len(losses) < n or n == 0:
            self.add("error", "health/loss", f"the loss became non-finite at step {len(losses)}",
                     "lower the LR 3-10x; clip gradients at 1.0; check inputs for inf/NaN")
        elif n >= 10:
            k = max(2, n // 5)
            first, last = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
            lines.append(f"- training loss: first {k} steps {_fmt(first)}, last {k} steps {_fmt(last)}")
            if last > 0.98 * first:
                self.add("warn", "health/loss", f"the training loss did not fall in {n} steps ({_fmt(first)} -> "
                         f"{_fmt(last)})", "the model, the data or the LR, not regularisation: see the overfit and "
                         "range checks; LR too low (try 2-5x), warmup too long, the schedule not applied")
            else:
                self.add("ok", "health/loss", f"training loss {_fmt(first)} -> {_fmt(last)} over {n} steps")
        # gradient norms: spikes, non-finite, tensors that never get one
        g = [x for x in h["grad_norm"] if math.isfinite(x)]
        spikes = [i for i in range(5, len(g)) if g[i] > 10 * float(np.median(g[max(0, i - 10):i]))]
        if h["nonfinite_grads"]:
            name = next(iter(h["nonfinite_grads"]))
            self.add("error", "health/grad-norm", f"non-finite gradients in {len(h['nonfinite_grads'])} tensors "
                     f"(first {name})", "lower the LR; clip at 1.0; check for log(0), division by zero, fp16 overflow")
        elif spikes:
            i = spikes[0]
            self.add("warn", "health/grad-norm", f"gradient norm spiked at step {i}: {_fmt(g[i])}, over 10x the median "
                     "of the 10 steps before", "clip gradients at 1.0, lower the LR or lengthen warmup; "
                     "spikes come before loss spikes")
        elif g:
            self.add("ok", "health/grad-norm", f"gradient norm {_fmt(min(g))}..{_fmt(max(g))}, no spikes")
        if h["no_grad"]:
            self.add("warn", "health/no-grad", f"{len(h['no_grad'])} trainable tensor(s) never got a gradient "
                     f"({', '.join(h['no_grad'][:3])})", "unused in the forward pass or detached from the loss; "
                     "if on purpose, freeze them (requires_grad=False)")
        means = {k: float(np.mean(v)) for k, v in h["layer_grads"].items() if v}
        top = sorted(means, key=means.get, reverse=True)[:8]
        if top:
            lines += ["", "| tensor (largest mean gradient norms) | mean | max |", "|---|---|---|"]
            lines += [f"| {k} | {_fmt(means[k])} | {_fmt(max(h['layer_grads'][k]))} |" for k in top]
        self._activations(h, lines)
        self._weights(h, lines)
        self.sections.append("\n".join(lines))

    def _activations(self, h: dict, lines: list[str]) -> None:
        last = h["activations"].get("last", {})
        if not last:
            return
        bad = [k for k, v in last.items() if not v["finite"]]
        if bad:
            self.add("error", "health/activations", f"non-finite activations in {len(bad)} layer(s) (first {bad[0]})",
                     "lower the LR; check inputs and normalisation")
        big = [k for k, v in last.items() if v["finite"] and v["std"] > 1e3]
        if big:
            self.add("warn", "health/activations", f"activations with std above 1e3 in {len(big)} layer(s) "
                     f"(first {big[0]}: {_fmt(last[big[0]]['std'])})", "normalise inputs; add or fix normalisation "
                     "layers; lower the LR")
        elif not bad:
            self.add("ok", "health/activations", f"{len(last)} layers' outputs finite and bounded")
        dead = {k: v["dead"] for k, v in last.items() if "dead" in v}
        if dead:
            worst = max(dead, key=dead.get)
            lines.append(f"- dead ReLU units (never positive in the last batch): worst {worst} "
                         f"{100 * dead[worst]:.0f}% over {len(dead)} ReLU layers")
            over = [k for k, v in dead.items() if v > 0.5]
            if over:
                self.add("warn", "health/dead-relu", f"{len(over)} ReLU layer(s) have over half their units dead "
                         f"({worst}: {100 * dead[worst]:.0f}%)", "lower the LR; LeakyReLU/GELU; check the "
                         "initialisation and that a normalisation layer comes before the ReLU")
            else:
                self.add("ok", "health/dead-relu", f"worst ReLU layer {100 * dead[worst]:.0f}% dead units")
        lines += ["", "| layer | kind | mean | std | dead |", "|---|---|---|---|---|"]
        shown = sorted(last, key=lambda k: -last[k]["std"])[:12]
        lines += [f"| {k} | {h['kinds'].get(k, '')} | {_fmt(last[k]['mean'])} | {_fmt(last[k]['std'])} | "
                  f"{_percent(last[k].get('dead'))} |" for k in shown]

    def _weights(self, h: dict, lines: list[str]) -> None:
        change = h["weight_change"]
        if not change:
            return
        top = sorted(change, key=change.get, reverse=True)[:8]
        lines += ["", f"| tensor (largest relative weight change over {len(h['loss'])} steps) | change |", "|---|---|"]
        lines += [f"| {k} | {100 * change[k]:.2f}% |" for k in top]
        if not self.fine_tune:
            return
        new = self.fine_tune if isinstance(self.fine_tune, (tuple, list)) else ()
        moved = [k for k in sorted(change, key=change.get, reverse=True)
                 if change[k] > 0.10 and not any(s in k for s in new)]
        if moved:
            self.add("warn", "health/weight-change", f"{len(moved)} pretrained tensor(s) moved over 10% in "
                     f"{len(h['loss'])} steps ({moved[0]}: {100 * change[moved[0]]:.0f}%)",
                     "the LR is too high for transfer: lower the backbone LR (1e-4 to 1e-5), layer-wise LR decay, "
                     "freeze batch-norm statistics")
        else:
            self.add("ok", "health/weight-change", "no pretrained tensor moved over 10%")

    # ---- report -------------------------------------------------------------------------------------
    def write(self, header: list[str]) -> Path:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        findings = sorted(self.findings, key=lambda f: order[f.severity])
        table = ["## Findings", "", "| severity | check | finding | fix |", "|---|---|---|---|"]
        table += [f"| {f.severity} | {f.check} | {f.message} | {f.fix} |" for f in findings]
        plots = self._plots()
        body = header + [""] + table + [""] + [s + "\n" for s in self.sections]
        body += [f"![{p.stem}]({p.name})" for p in plots]
        path = self.dir / "report.md"
        path.write_text("\n".join(body) + "\n")
        (self.dir / "findings.json").write_text(json.dumps([dataclasses.asdict(f) for f in findings], indent=2) + "\n")
        return path

    def _plots(self) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out = []
        if getattr(self, "overfit", None):
            fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
            ax.plot(self.overfit["train"], label="the batch trained on")
            ax.plot(self.overfit["held_out"], label="an unseen batch")
            ax.set(xlabel="step", ylabel="loss", yscale="log", title="overfit one batch")
            ax.legend()
            out.append(self._save(fig, "overfit.png", plt))
        if getattr(self, "ranges", None):
            fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
            for r in self.ranges:
                ax.plot(r["mults"][:len(r["smoothed"])], r["smoothed"], label=f"{r['kind']} groups")
                if math.isfinite(r["suggested_mult"]):
                    ax.axvline(r["suggested_mult"], ls="--", lw=1, color=ax.lines[-1].get_color())
            ax.set(xscale="log", xlabel="LR multiplier (x configured)", ylabel="smoothed loss",
                   title="LR range test (dashed: suggested)")
            ax.legend()
            out.append(self._save(fig, "lr_range.png", plt))
        if getattr(self, "health", None):
            h = self.health
            fig, axes = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
            axes[0].plot(h["loss"])
            axes[0].set(xlabel="step", ylabel="training loss", title="loss")
            means = {k: np.mean(v) for k, v in h["layer_grads"].items() if v}
            for k in sorted(means, key=means.get, reverse=True)[:8]:
                axes[1].plot(h["layer_grads"][k], label=k[-30:], lw=1)
            axes[1].plot(h["grad_norm"], label="global (after clipping check)", color="black")
            axes[1].set(xlabel="step", ylabel="gradient norm", yscale="log", title="gradient norms")
            axes[1].legend(fontsize=6)
            if h["applied_lr"]:
                axes[2].plot([a[0] for a in h["applied_lr"]], label="applied (group 0)")
                axes[2].plot([e[0] for e in h["expected_lr"]], ls="--", label="schedule (group 0)")
            axes[2].set(xlabel="step", ylabel="LR", title="LR applied vs schedule")
            axes[2].legend()
            out.append(self._save(fig, "health.png", plt))
        return out

    def _save(self, fig, name: str, plt) -> Path:
        path = self.dir / name
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path

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

WINDOW = 64


def _shared_windows(train: np.ndarray, val: np.ndarray) -> tuple[int, int]:
    """Validation windows of WINDOW tokens (stride WINDOW) that occur anywhere in train."""
    from numpy.lib.stride_tricks import sliding_window_view

    train, val = np.ascontiguousarray(train.ravel()), np.ascontiguousarray(val.ravel())
    if len(train) < WINDOW or len(val) < WINDOW:
        return 0, 0
    def keys(a: np.ndarray, step: int) -> np.ndarray:  # noqa: E306
        w = sliding_window_view(a.astype(np.int64), WINDOW)[::step]
        h = np.zeros(len(w), dtype=np.uint64)
        for c in range(WINDOW):  # a polynomial hash per window, vectorised over windows
            h = h * np.uint64(1_000_003) + w[:, c].astype(np.uint64)
        return h
    val_keys = keys(val, WINDOW)
    return int(np.isin(val_keys, keys(train, 1)).sum()), len(val_keys)


def _plateaued(losses: list[float]) -> bool:
    """The last tenth of the steps within 5% of the tenth before: the loss has (about) stopped falling."""
    k = max(2, len(losses) // 10)
    if len(losses) < 2 * k:
        return False
    last, before = float(np.mean(losses[-k:])), float(np.mean(losses[-2 * k:-k]))
    return abs(before - last) <= 0.05 * abs(before)


def _percent(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def low_high(r: dict) -> str:
    return f"{_fmt(r['mults'][0])}..{_fmt(r['mults'][-1])}" if r["mults"] else "?"


def lr_fields(config_cls) -> dict[str, tuple[str, ...]]:
    """Which config fields set the LR of each group kind: ``LR_FIELDS`` on the config class, else ``lr``."""
    declared = getattr(config_cls, "LR_FIELDS", None)
    if declared:
        return dict(declared)
    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"all": ("lr",)} if "lr" in names else {}


def doctor(spec, cfg, *, out_root: Path, seed: int, device: str, steps: int, budget, overrides: list[str]) -> int:
    from recipe_zoo import runs

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
    except _Done:
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
