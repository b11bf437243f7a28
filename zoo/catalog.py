"""The recipes as the commands name them: one found by name or by file (``resolve_spec``), ``zoo list`` (every recipe
in a line, read without importing any) and ``zoo show`` (one recipe in full: its config with each field's comment,
how to tune it, what a finished run can do, and its leaderboard rows); ``run_spec``: the recipe a finished run was
trained with, which for a run of a user's recipe file is the file the user names, never one the run folder names."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from recipe_zoo.core.errors import ZooError


def resolve_spec(target: str):
    """The recipe a command names: a registered name, or a ``.py`` file that registers exactly one."""
    from recipe_zoo import registry

    if target.endswith(".py"):
        specs = registry.load_file(target)
        if len(specs) > 1:
            names = ", ".join(s.name for s in specs)
            raise ZooError(f"{target}: registers several recipes ({names}); run one by name after importing")
        return specs[0]
    return registry.get(target)


def run_spec(run_dir: Path, saved: dict, named: str | Path | None = None, how: str = "--from FILE.py"):
    """The recipe of a run (``saved``: its config.json). A zoo recipe comes from the registry. A run folder imports
    no code of its own: for a run of a recipe file, the user names the file (``--from FILE.py``), and it must be the
    one the run trained from (the sha256 config.json recorded), checked before it is imported. ``how``: how the
    command names it."""
    from recipe_zoo import registry
    from recipe_zoo.core.datasets import sha256_file

    trained_from = saved.get("recipe_file") or ""
    if not trained_from:
        if named:
            raise ZooError(f"{run_dir}: trained with the zoo's own {saved['recipe']}, not from a recipe file: "
                           "drop the recipe file")
        return registry.get(saved["recipe"])
    if not named:
        raise ZooError(f"{run_dir}: trained from a recipe file ({Path(trained_from).name}); a run folder runs no code "
                       f"of its own: name the file you trust with {how}")
    path = Path(named)
    if not path.is_file():
        raise ZooError(f"{path}: recipe file not found")
    recorded, digest = saved.get("recipe_sha256") or "", sha256_file(path)
    if recorded and digest != recorded:
        raise ZooError(f"{path}: not the file {run_dir} was trained from (sha256 {digest[:12]}, the run recorded "
                       f"{recorded[:12]})")
    specs = [s for s in registry.load_file(path) if s.name == saved["recipe"]]
    if not specs:
        raise ZooError(f"{path}: registers no {saved['recipe']}, the recipe {run_dir} was trained with")
    return specs[0]


def cmd_list(args) -> int:
    from recipe_zoo.registry import static_list

    from recipe_zoo.references import for_recipe

    rows = static_list()
    width = max((len(r["name"]) for r in rows), default=10)
    bench = max((len(r.get("benchmark", "")) for r in rows), default=9)
    print(f"{'recipe':<{width}}  {'benchmark':<{bench}} {'metric':<13} {'budget':<7} {'reference':<10} "
          f"{'devices':<9} summary")
    for r in rows:
        ref = next((x.work for x in for_recipe(r["name"]) if x.benchmark == r.get("benchmark")), "-")
        print(f"{r['name']:<{width}}  {r.get('benchmark', ''):<{bench}} {r.get('metric', ''):<13} "
              f"{r.get('budget', '60s'):<7} {ref:<10} {_scale_label(r.get('scale_out') or 'torchrun: DDP'):<9} "
              f"{r.get('summary', '')}")
    return 0


def _scale_label(scale_out: str) -> str:
    """``zoo list``'s devices column: how a recipe scales out (``zoo show`` gives the sentence)."""
    if scale_out.startswith("single process"):
        return "1 process"
    return "DDP/FSDP" if "FSDP" in scale_out else "DDP"


def cmd_show(args) -> int:
    spec = resolve_spec(args.recipe)
    print(settings_text(spec, args.recipe if args.recipe.endswith(".py") else None), end="")
    _show_rows(spec)
    return 0


def settings_text(spec, recipe_file: str | None = None) -> str:
    """What ``zoo show`` prints of a recipe before its leaderboard rows: the header, the config, predict and export,
    and the reference runs. All of it follows from the code, so docs/<domain>.md quotes it
    (recipe_zoo.docs_settings)."""
    import contextlib
    import io

    from recipe_zoo import config as config_mod

    cfg = config_mod.build(spec.config, spec.defaults, None, [], spec.name)  # a bad default fails before any line
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        _show_header(spec)
        _show_fields(spec, cfg)
        if "prepare" in spec.hooks:
            print(f"data at scale: stream=true reads the data as it trains; zoo data prepare {spec.name} "
                  "data=SOURCE writes it once in the streamed form (then data=FOLDER)\n")
        _show_use(spec, recipe_file)
        _show_references(spec)
    return text.getvalue()


def _show_header(spec) -> None:
    """What the recipe is, what it is measured on, how it scales out and how to tune it."""
    print(f"{spec.name}: {spec.summary}")
    print(f"benchmark: {spec.benchmark}   metric: {spec.metric} "
          f"({'higher' if spec.higher_is_better else 'lower'} is better)   default budget: {spec.budget}")
    print(f"scale-out: {spec.scale_out}")
    if any(f.name == "precision" for f in dataclasses.fields(spec.config)):
        print(f"precision=auto: bf16 on GPUs (fp16 on older ones); on a CPU {spec.cpu_precision}"
              + (" where its bf16 matmul is >= 1.3x its fp32 one (bf16 units in its flags: AVX-512 BF16, AMX, "
                 "ARM BF16), else fp32 (Zen 2/3, most client CPUs)" if spec.cpu_precision ==
                 "bf16" else " (bf16 was not measured to pay for this recipe)"))
    from recipe_zoo.doctor import lr_fields
    from recipe_zoo.sweep import batch_field

    lrs = ", ".join(f"{k}: {'/'.join(v)}" if k != "all" else "/".join(v) for k, v in lr_fields(spec.config).items())
    from recipe_zoo.core.loop import LoopSettings

    checks = "checklist, LR range test" if issubclass(spec.config, LoopSettings) else "the data checks"
    print(f"tuning: zoo doctor {spec.name} ({checks}) and zoo sweep {spec.name} KEY=a,b,... ; "
          f"LR fields {lrs or 'none'}; batch field {batch_field(spec.config) or 'none'}")
    keys = getattr(spec.config, "KEY_FIELDS", ())
    print("benchmark key: the data's name" + (f", plus :field=value for any of {', '.join(keys)} off its default "
                                               "(another split, target, metric or evaluation)" if keys else ""))
    print(f"source: {spec.source}\n")


def _show_fields(spec, cfg) -> None:
    """The resolved config, the recipe's own fields before the loop's, each with its comment and valid range."""
    from recipe_zoo import config as config_mod
    from recipe_zoo.core.loop import LoopSettings

    comments = config_mod.field_comments(spec.config)
    values = dataclasses.asdict(cfg)
    loop = {f.name for f in dataclasses.fields(LoopSettings)}
    types_ = config_mod.field_types(spec.config)
    width = max(len(k) for k in values)
    for key in [k for k in values if k not in loop] + [k for k in values if k in loop]:  # the loop's last
        mark = "*" if key in spec.defaults else " "
        valid = config_mod.field_range(types_[key])
        bounds = f" [{valid}]" if valid and (valid.low, valid.high) != (None, None) else ""
        print(f"{mark} {key:<{width}} = {values[key]!r:<14} # {comments.get(key, '')}{bounds}")
    print("\n* set by this variant; override any field with key=value\n")


def _show_use(spec, recipe_file: str | None = None) -> None:
    """What a finished run of the recipe can do: zoo predict's options and zoo export's formats (a recipe file's
    run: with ``--from FILE.py``, as a run folder runs no code of its own)."""
    from recipe_zoo import config as config_mod

    if spec.predict is None:
        print("predict: none registered (the recipe's @recipe(..., predict=...))\n")
        return
    from recipe_zoo.core.artifact import PredictOptions

    options = spec.predict_options or PredictOptions
    comments = config_mod.field_comments(options)
    values = dataclasses.asdict(options())
    width = max(len(k) for k in values)
    named = f" --from {recipe_file}" if recipe_file else ""
    print(f"predict: zoo predict RUN_DIR{named} [key=value ...] [--out FILE]; options:")
    for key, value in values.items():
        print(f"    {key:<{width}} = {value!r:<14} # {comments.get(key, '')}")
    print(f"export:  zoo export RUN_DIR{named} --format {'|'.join(['safetensors', *spec.exports])}\n")


def _show_references(spec) -> None:
    """The settings a device would choose, and the recipe's reference runs (fixed work, every machine)."""
    from recipe_zoo import references

    chosen = getattr(spec.config, "DEVICE_FIELDS", ())
    if chosen:
        print(f"chosen by the device when left at their defaults: {', '.join(chosen)} (a reference run pins each)")
    for ref in references.for_recipe(spec.name):
        print(f"reference: {ref.benchmark} @ {ref.work}: {ref.command()} = {ref.expanded()} "
              f"(config {references.config_hash(ref)}; {ref.why})")


def _show_standing(spec) -> None:
    """The recipe's reference runs, then its leaderboard rows, each with its rank in its table."""
    _show_references(spec)
    _show_rows(spec)


def _show_rows(spec) -> None:
    """The recipe's leaderboard rows at its defaults or a reference's settings, each with its rank in its table."""
    from recipe_zoo import board, references

    all_rows, prints = board.load_rows(), board.all_rows("fingerprints.jsonl")
    rows = [r for r in all_rows if r["recipe"] == spec.name and (not r.get("overrides") or references.of_row(r))]
    if not rows:
        print(f"leaderboard: no measured rows yet (zoo bench {spec.name} --reference)")
    current = board.live(all_rows, prints)  # a stale row is listed, as the board shows it, and ranked against nothing
    for r in rows:
        why = board.stale(r, prints)
        table = [t for t in current if board.table_key(t) == board.table_key(r)]
        standing = f"stale ({why})" if why else \
            f"rank {next(k for t, k in zip(board.ranked(table), board.ranks(table)) if t is r)} of {len(table)}"
        old = "" if board.protocol(r) == board.PROTOCOL else f", protocol {board.protocol(r)}"
        where = (f"{board.precision_text(r.get('precision'))}, every machine (this row: {r['hardware']})"
                 if board.fixed_work(r["budget"]) else r["hardware"])
        print(f"leaderboard: {board.value_text(r)} {r['metric']} (n={r['n']}) on {r['benchmark']} @ "
              f"{r['budget']}, {where}{old}: {standing}")