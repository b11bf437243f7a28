"""The recipe registry: ``@recipe(...)`` records a small frozen spec per named variant.

``zoo list`` must stay fast, so it reads the ``@recipe(...)`` decorators from the recipe sources
with ``ast`` instead of importing them (importing torch alone takes seconds); running a recipe
imports its module for real. A test checks that both views agree.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recipe_zoo.errors import ZooError

RECIPES_PACKAGE = "recipe_zoo.recipes"


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

    @property
    def distributed(self) -> bool:
        return not self.scale_out.startswith("single process")


REGISTRY: dict[str, RecipeSpec] = {}


def recipe(name: str, *, config: type, benchmark: str, metric: str, higher_is_better: bool = True,
           budget: str = "60s", summary: str = "", defaults: dict | None = None, scale_out: str = "torchrun: DDP"):
    """Register ``train`` under ``name`` (domain/variant; a user's own file may use a plain name);
    stack several decorators for variants."""

    def register(train: Callable) -> Callable:
        source = sys.modules[train.__module__].__file__ if train.__module__ in sys.modules else ""
        REGISTRY[name] = RecipeSpec(name=name, train=train, config=config, benchmark=benchmark, metric=metric,
                                    higher_is_better=higher_is_better, budget=budget, summary=summary,
                                    defaults=dict(defaults or {}), source=str(source), scale_out=scale_out)
        return train

    return register


def _package_dir() -> Path:
    spec = importlib.util.find_spec(RECIPES_PACKAGE)
    return Path(next(iter(spec.submodule_search_locations)))


def recipe_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(_package_dir())]))


def load_all() -> dict[str, RecipeSpec]:
    for module in recipe_modules():
        importlib.import_module(f"{RECIPES_PACKAGE}.{module}")
    return REGISTRY


def get(name: str) -> RecipeSpec:
    """A registered recipe by name, importing only its domain's module."""
    domain = name.split("/", 1)[0]
    if domain in recipe_modules():
        importlib.import_module(f"{RECIPES_PACKAGE}.{domain}")
    if name not in REGISTRY:
        known = [r["name"] for r in static_list()]
        import difflib

        near = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; see `zoo list` ({len(known)} recipes)"
        raise ZooError(f"unknown recipe {name!r}{hint}")
    return REGISTRY[name]


def load_file(path: str | Path) -> list[RecipeSpec]:
    """Import a user's recipe file (it runs their code, by design) and return what it registered."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ZooError(f"{path}: recipe file not found")
    module_name = f"zoo_user_recipe_{path.stem}_{abs(hash(str(path))) % 10**8}"
    before = dict(REGISTRY)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    new = [s for k, s in REGISTRY.items() if before.get(k) is not s]
    if not new:
        raise ZooError(f"{path}: registers no recipe (decorate its train function with @recipe(...))")
    return new


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def static_list() -> list[dict]:
    """Recipes as declared in the sources, without importing them (for ``zoo list``)."""
    rows = []
    for module in recipe_modules():
        base = _package_dir() / module
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "recipe" and deco.args:
                    row = {"name": _literal(deco.args[0]), "module": module}
                    row.update({kw.arg: _literal(kw.value) for kw in deco.keywords if kw.arg != "config"})
                    rows.append(row)
    return sorted(rows, key=lambda r: r["name"])
