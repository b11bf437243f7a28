"""Using a trained run: ``zoo predict RUN_DIR [data=NEW] [key=value ...] [--out FILE]``, ``zoo export RUN_DIR
--format F`` and the Python API ``recipe_zoo.load(RUN_DIR).predict(...)``.

The run's ``model.json`` (``recipe_zoo.core.artifact``) says what the model is; the recipe's predict hook, found
through the registry (or the run's own recipe file), does the domain's work. With no ``data=``, predict scores the
run's own test split again: the metric it prints is the run's, recomputed from the saved model.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

from recipe_zoo.core import artifact, owned
from recipe_zoo.core.errors import ZooError


@dataclasses.dataclass
class Model:
    """A finished run, loaded for use: ``.predict(data=..., **options)`` and ``.export(format, out)``."""

    dir: Path
    spec: object  # the recipe's RecipeSpec
    cfg: object  # the run's config, typed
    card: dict  # its model.json
    seed: int = 0  # the run's seed (a generator's default)
    device: str = "auto"

    def options(self, values: dict, source: str = "predict option"):
        from recipe_zoo import config as config_mod

        cls = self.spec.predict_options or artifact.PredictOptions
        return config_mod.apply(cls(), values, source)

    def predict(self, out: str | Path | None = None, *, log=None, options=None, **values) -> artifact.Predictions:
        """Predictions on ``data=`` (default: the run's own test split), options as keywords (``tta=0``) or a typed
        ``options``; the rows are also written to ``out`` when given (other files go beside it)."""
        opts = options if options is not None else self.options(values)
        out_path = Path(out) if out is not None else self.dir / "predict" / f"{_stem(opts, self.card)}.csv"
        run = self.open(out_path, log)
        from recipe_zoo.core.precision import choose_device, speed_switches, torch_state_kept

        with torch_state_kept():  # predict computes with the switches its run set; the caller's come back
            if hasattr(self.cfg, "tf32"):  # its matmul precision (on a CPU, oneDNN's reduced fp32) and denormals
                speed_switches(choose_device(self.device), tf32=self.cfg.tf32)
            result = self.spec.predict(self.cfg, opts, run)
        if getattr(opts, "data", "") and result.metrics:  # new data's scores are never named as the run's test
            plain = {k.removeprefix("test_"): v for k, v in result.metrics.items()}
            result = dataclasses.replace(result, metrics=plain)
        if out is not None:
            artifact.write_rows(out_path, result.rows)
        return result

    def export(self, fmt: str, out: str | Path) -> list[Path]:
        """The model in format ``fmt`` (safetensors, or the recipe's own: ``zoo show``) written into folder ``out``."""
        return export(self, fmt, Path(out))

    def open(self, out: Path, log=None) -> artifact.PredictRun:
        from recipe_zoo import data

        data.load_all()  # data= may name any domain's dataset
        run = artifact.PredictRun(dir=self.dir, card=self.card, out=out, device=self.device, seed=self.seed,
                                  spec=self.spec)
        if log is not None:
            run.log = log
        self._say_precision(run)
        return run

    def _say_precision(self, run: artifact.PredictRun) -> None:
        """A run that computed in bf16 predicts in bf16 (its config.json says so); on a CPU that emulates bf16 that
        is slower, and the line says so. Its 1e-6 agreement with the run's metrics holds on the machine that
        trained it."""
        from recipe_zoo.core.precision import choose_device, cpu_computes_bf16

        precision = getattr(self.cfg, "precision", None)
        if precision not in ("bf16", "fp16") or choose_device(self.device).type != "cpu":
            return
        if precision == "fp16" or not cpu_computes_bf16():
            run.log(f"the run computed in {precision}; this CPU has no {precision} units, so predicting emulates it "
                    "(slower, the same arithmetic)")


def _stem(opts, card: dict) -> str:
    """The default output's name: the data's (or a prompts file's), ``prompt``, ``samples`` (a generator's), else
    ``test`` (the run's own split)."""
    if card.get("task") == "generation":
        return "samples"
    if opts.data:
        return Path(opts.data.rstrip("/")).stem or "data"
    prompts = getattr(opts, "prompts", "")
    return Path(prompts).stem if prompts else "prompt" if getattr(opts, "prompt", "") else "test"


def load(run_dir: str | Path, device: str = "auto", recipe_file: str | Path | None = None) -> Model:
    """Open a finished run for prediction: its card (format checked), recipe (through the registry, or for a run of
    a recipe file, the file named here, checked against the run's sha256: a run folder runs no code of its own) and
    config."""
    from recipe_zoo import config as config_mod
    from recipe_zoo import runs
    from recipe_zoo.catalog import run_spec

    run_dir = Path(run_dir)
    card = artifact.read_card(run_dir)
    saved = runs.load_run_config(run_dir)
    spec = run_spec(run_dir, saved, recipe_file)
    if spec.predict is None:
        raise ZooError(f"{spec.name}: this recipe registers no predict hook (@recipe(..., predict=...))")
    from recipe_zoo import extras

    extras.require(spec.name)
    cfg = config_mod.apply(spec.config(), saved["config"], str(run_dir / "config.json"))
    return Model(dir=run_dir, spec=spec, cfg=cfg, card=card, seed=int(saved.get("seed", 0)), device=device)


# =============================================================================================
# The commands
# =============================================================================================

def cmd_predict(args) -> int:
    from recipe_zoo import config as config_mod

    start = time.perf_counter()
    model = load(args.run_dir, device=args.device, recipe_file=args.recipe_file)
    opts = model.options(config_mod.parse_overrides(args.overrides))
    out = Path(args.out) if args.out else args.run_dir / "predict" / f"{_stem(opts, model.card)}.csv"
    in_run = out.resolve().is_relative_to(Path(args.run_dir).resolve())
    owned.check_file(out, "--out", owned=in_run)
    result = model.predict(out, options=opts)
    if not in_run and out.is_file():
        owned.mark_file(out)
    seconds = time.perf_counter() - start
    if result.text:
        print(result.text, end="" if result.text.endswith("\n") else "\n", flush=True)
    where = f" and {len(result.files)} files in {out.with_suffix('')}/" if result.files else ""
    dropped = f"; {result.dropped} could not be predicted (blank rows)" if result.dropped else ""
    print(f"{len(result.rows)} predictions -> {out}{where}{dropped} ({seconds:.1f}s)")
    if result.metrics:
        run_metrics = _run_metrics(args.run_dir)
        for key, value in result.metrics.items():
            same = f"   (the run's: {run_metrics[key]:.6g})" if key in run_metrics else ""
            print(f"{key}: {value:.6g}{same}")
    return 0


def _run_metrics(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()).get("metrics", {}) if path.is_file() else {}


def export_formats(spec) -> list[str]:
    return ["safetensors", *spec.exports]


def export(model: Model, fmt: str, out: Path) -> list[Path]:
    """``safetensors``: the card, the config and the weights files into ``out``; other formats: the recipe's."""
    formats = export_formats(model.spec)
    if fmt not in formats:
        raise ZooError(f"--format {fmt}: {model.spec.name} exports {', '.join(formats)}")
    if fmt == "safetensors":
        out.mkdir(parents=True, exist_ok=True)
        written = []
        card = model.dir / artifact.CARD
        for name in [artifact.CARD, "config.json", *model.card["weights"], *model.card.get("files", [])]:
            src = owned.inside(model.dir, name, str(card))  # a card's names stay inside the run
            for item in [src, *(src.rglob("*") if src.is_dir() else ())]:
                owned.inside(model.dir, item.relative_to(model.dir).as_posix(), str(card))
            dest = out / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest)
            written.append(dest)
        return written
    from recipe_zoo import extras

    extras.require_format(fmt)
    run = model.open(out / "export.csv")
    return list(model.spec.exports[fmt](model.cfg, run, out))


def cmd_export(args) -> int:
    model = load(args.run_dir, device="cpu", recipe_file=args.recipe_file)
    out = Path(args.out) if args.out else args.run_dir / "export" / args.format
    owned.check_folder(out, "--out", owned=not args.out)
    written = export(model, args.format, out)
    if args.out:  # a folder outside the run: marked as the zoo's, so a later export may replace it
        owned.mark_folder(out, run=str(args.run_dir), format=args.format, by="zoo export")
    print(f"{args.format}: {len(written)} files -> {out}/")
    for path in written:
        print(f"  {path}")
    return 0
