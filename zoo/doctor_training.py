"""``zoo doctor``'s training checks, on the parts a recipe hands to ``fit``: overfit one batch, the LR range test
(per group kind), and a short health run under the recipe's own schedule; their plots."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from recipe_zoo.doctor_report import NOISY, Done, Report, fmt


class TrainingChecks(Report):
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
        raise Done

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
                 f"loss {fmt(start)} -> {fmt(final)}",
                 f"- an unseen batch meanwhile: {fmt(held0)} -> lowest {fmt(held_min)} -> {fmt(out['held_out'][-1])}",
                 f"- loss spread over three evaluations of one batch: {100 * noise:.2g}% "
                 + ("(random inside the loss: noise levels, views or dropout)" if noise > NOISY else "")]
        self.sections.append("\n".join(lines))
        causes = ("if impossible there is a bug: labels not matching inputs, a loss that does not fit the output "
                  "layer (softmax twice, logits vs probabilities), an LR far off (see the range test), a model too small")
        if not math.isfinite(final):
            self.add("error", "overfit/one-batch", f"the loss became non-finite within {len(out['train'])} steps",
                     "lower the LR 3-10x; check inputs for inf/NaN; clip gradients at 1.0")
        elif final <= 0.1 * start or final < 0.02:
            self.add("ok", "overfit/one-batch", f"memorised one batch: loss {fmt(start)} -> {fmt(final)}")
        elif final <= 0.5 * start and (noise > NOISY or _plateaued(out["train"])):
            why = ("noise drawn inside the loss" if noise > NOISY
                   else "a floor of the loss itself (label smoothing, mixing, contrastive negatives)")
            self.add("ok", "overfit/one-batch", f"the loss fell {100 * (1 - final / start):.0f}% on one batch and "
                     f"levelled off at {fmt(final)} ({why} keeps it above zero)")
        elif final <= 0.5 * start:
            self.add("warn", "overfit/one-batch", f"not memorised yet: loss {fmt(start)} -> {fmt(final)} in "
                     f"{len(out['train'])} steps and still falling", "give it more steps (--steps) or a higher LR "
                     "(see the range test); a bug if it stalls far above zero")
        else:
            self.add("error", "overfit/one-batch", f"could not memorise one batch: loss {fmt(start)} -> {fmt(final)} "
                     f"in {len(out['train'])} steps", causes)
        if self.task == "unlabelled" and math.isfinite(held0):  # no labels to misalign: informative only
            self.add("info", "overfit/transfer", f"an unseen batch's loss while memorising one: {fmt(held0)} -> lowest "
                     f"{fmt(held_min)} (self-supervised: one batch's views teach little about others)")
        elif math.isfinite(held0) and held_min > 0.95 * held0:
            self.add("error", "overfit/transfer", f"learning one batch never lowered an unseen batch's loss "
                     f"({fmt(held0)} -> lowest {fmt(held_min)}): the targets look unrelated to the inputs",
                     "check that labels stay aligned with inputs (a shuffle applied to one but not the other, a "
                     "wrong join or sort order); look at a few inputs with their labels")
        elif math.isfinite(held0):
            self.add("ok", "overfit/transfer", f"what one batch taught carried over: an unseen batch's loss fell "
                     f"{fmt(held0)} -> {fmt(held_min)}")

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
            shown = "/".join(fmt(v) for v in lrs[:3]) + (" ..." if len(lrs) > 3 else "")
            m = r["suggested_mult"]
            lines.append(f"| {r['kind']} | {shown} | {len(r['losses'])} | x{fmt(r['min_mult'])} | "
                         f"x{fmt(r['steepest_mult'])} | x{fmt(r.get('tenth_of_min_mult', float('nan')))} | x{fmt(m)} |")
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
                         f"(lowest at x{fmt(r['min_mult'])}); suggested x{fmt(m)}",
                         "lower the LR (suggested.json); raise warmup if the loss spikes early")
            elif m > 3 or m < 1 / 3:
                self.add("info", "lr/range", f"suggested LR{label} is x{fmt(m)} the configured one (the loss was "
                         f"lowest at x{fmt(r['min_mult'])}, fell fastest at x{fmt(r['steepest_mult'])})",
                         "try it with zoo sweep: the range test is a starting point, the sweep decides")
            else:
                self.add("ok", "lr/range", f"configured LR{label} within 3x of the suggestion (x{fmt(m)})")
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
                     f"lr {fmt(a)} where the schedule says {fmt(e)}",
                     "set each group's lr every step (recipe_zoo.core.schedule.apply_schedules) and print the LR each step")
        else:
            mults = [m for m in h["multiplier"] if m is not None]
            self.add("ok", "health/schedule", f"every step used the scheduled LR (multiplier {fmt(min(mults))}.."
                     f"{fmt(max(mults))})" if mults else "no steps")
        losses = [x for x in h["loss"] if math.isfinite(x)]
        if len(losses) < n or n == 0:
            self.add("error", "health/loss", f"the loss became non-finite at step {len(losses)}",
                     "lower the LR 3-10x; clip gradients at 1.0; check inputs for inf/NaN")
        elif n >= 10:
            k = max(2, n // 5)
            first, last = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
            lines.append(f"- training loss: first {k} steps {fmt(first)}, last {k} steps {fmt(last)}")
            if last > 0.98 * first:
                self.add("warn", "health/loss", f"the training loss did not fall in {n} steps ({fmt(first)} -> "
                         f"{fmt(last)})", "the model, the data or the LR, not regularisation: see the overfit and "
                         "range checks; LR too low (try 2-5x), warmup too long, the schedule not applied")
            else:
                self.add("ok", "health/loss", f"training loss {fmt(first)} -> {fmt(last)} over {n} steps")
        # gradient norms: spikes, non-finite, tensors that never get one
        g = [x for x in h["grad_norm"] if math.isfinite(x)]
        spikes = [i for i in range(5, len(g)) if g[i] > 10 * float(np.median(g[max(0, i - 10):i]))]
        if h["nonfinite_grads"]:
            name = next(iter(h["nonfinite_grads"]))
            self.add("error", "health/grad-norm", f"non-finite gradients in {len(h['nonfinite_grads'])} tensors "
                     f"(first {name})", "lower the LR; clip at 1.0; check for log(0), division by zero, fp16 overflow")
        elif spikes:
            i = spikes[0]
            self.add("warn", "health/grad-norm", f"gradient norm spiked at step {i}: {fmt(g[i])}, over 10x the median "
                     "of the 10 steps before", "clip gradients at 1.0, lower the LR or lengthen warmup; "
                     "spikes come before loss spikes")
        elif g:
            self.add("ok", "health/grad-norm", f"gradient norm {fmt(min(g))}..{fmt(max(g))}, no spikes")
        if h["no_grad"]:
            self.add("warn", "health/no-grad", f"{len(h['no_grad'])} trainable tensor(s) never got a gradient "
                     f"({', '.join(h['no_grad'][:3])})", "unused in the forward pass or detached from the loss; "
                     "if on purpose, freeze them (requires_grad=False)")
        means = {k: float(np.mean(v)) for k, v in h["layer_grads"].items() if v}
        top = sorted(means, key=means.get, reverse=True)[:8]
        if top:
            lines += ["", "| tensor (largest mean gradient norms) | mean | max |", "|---|---|---|"]
            lines += [f"| {k} | {fmt(means[k])} | {fmt(max(h['layer_grads'][k]))} |" for k in top]
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
                     f"(first {big[0]}: {fmt(last[big[0]]['std'])})", "normalise inputs; add or fix normalisation "
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
        lines += [f"| {k} | {h['kinds'].get(k, '')} | {fmt(last[k]['mean'])} | {fmt(last[k]['std'])} | "
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
    return f"{fmt(r['mults'][0])}..{fmt(r['mults'][-1])}" if r["mults"] else "?"


