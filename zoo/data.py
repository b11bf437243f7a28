"""The application's view of the datasets: every declared dataset (each domain declares its own, through the core's
dataset API, ``recipe_zoo.core.datasets``), and the ``zoo data list | fetch | prepare`` commands. Downloading and
the cache are the core's (``recipe_zoo.core.downloads``)."""
from __future__ import annotations

import importlib
from pathlib import Path

from recipe_zoo.core import datasets, prepared
from recipe_zoo.core.datasets import DATASETS
from recipe_zoo.core.errors import ZooError

RECIPES_PACKAGE = "recipe_zoo.recipes"


def dataset_modules() -> list[str]:
    """The modules that declare datasets: ``recipes/image_datasets.py`` (shared by the image domains) and each
    domain's ``datasets.py``, found by their names (a new domain's are found as its recipes are)."""
    spec = importlib.util.find_spec(RECIPES_PACKAGE)
    root = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(root.glob("*datasets.py")) + sorted(root.glob("*/datasets.py"))
    return [f"{RECIPES_PACKAGE}." + ".".join(p.relative_to(root).with_suffix("").parts) for p in files]


def load_all() -> dict:
    """Every dataset the zoo's domains declare (importing their datasets modules: no torch, no recipe)."""
    for module in dataset_modules():
        importlib.import_module(module)
    return DATASETS


def load_file(path: str | Path) -> list:
    """The datasets a recipe file of the user's declares (importing it runs it: by design, as ``zoo run FILE``)."""
    from recipe_zoo import registry

    before = set(DATASETS)
    registry.load_file(path)
    return [DATASETS[name] for name in DATASETS if name not in before]


def locate(name: str) -> Path:
    """A declared dataset's place in the cache, any domain's."""
    load_all()
    return datasets.locate(name)


def benchmark_key(data: str) -> str:
    """The benchmark key of ``data`` (``core.prepared.benchmark_key``) against every domain's datasets."""
    load_all()
    return prepared.benchmark_key(data)


# ---------------------------------------------------------------------------------------------
# zoo data list | fetch | prepare
# ---------------------------------------------------------------------------------------------

def prepare_run(log=None):
    """What a recipe's prepare hook is handed here (every domain's datasets declared first)."""
    load_all()
    run = prepared.PrepareRun()
    if log is not None:
        run.log = log
    return run


def command(args) -> int:
    load_all()
    mine = load_file(args.recipe_file) if getattr(args, "recipe_file", None) else []
    if args.data_command == "fetch":
        from recipe_zoo.core.downloads import fetch

        path = fetch(args.name)
        print(f"{args.name}: {path}")
        return 0
    if args.data_command == "prepare":
        return prepare_command(args)
    print(f"cache: {datasets.cache_root()}")
    print(f"{'dataset':<18} {'domain':<10} {'source':<12} {'here':<5} description")
    for info in DATASETS.values():
        here = "yes" if datasets.is_present(info) else "no"
        print(f"{info.name:<18} {info.domain:<10} {info.source:<12} {here:<5} {info.description}"
              + (f" (declared in {args.recipe_file})" if info in mine else ""))
    return 0


def prepare_command(args) -> int:
    """``zoo data prepare RECIPE data=SOURCE [key=value ...]``: the recipe's prepare hook, under its config."""
    from recipe_zoo import config as config_mod
    from recipe_zoo import registry

    spec = registry.load_file(args.recipe)[0] if args.recipe.endswith(".py") else registry.get(args.recipe)
    hook = spec.hooks.get("prepare")
    if hook is None:
        raise ZooError(f"{spec.name} prepares no data: it reads its data as given (zoo show {spec.name}); llm/gpt "
                       "and vision/resnet prepare")
    cfg = config_mod.build(spec.config, spec.defaults, None, args.overrides, spec.name)
    folder = hook(cfg, prepare_run(), out=args.out, force=args.force)
    print(f"{folder}\ntrain on it: zoo run {spec.name} data={folder}")
    return 0

