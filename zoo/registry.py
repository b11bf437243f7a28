"""Discovery of recipes: the registry the core's ``@recipe(...)`` fills, and which module registers which name.

``zoo list`` must stay fast, so it reads the ``@recipe(...)`` decorators from the recipe sources
with ``ast`` instead of importing them (importing torch alone takes seconds); running a recipe
imports its module for real. A test checks that both views agree.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

from recipe_zoo.core import api
from recipe_zoo.core.api import RecipeSpec
from recipe_zoo.core.errors import ZooError

RECIPES_PACKAGE = "recipe_zoo.recipes"
HOOK_KEYWORDS = ("hooks", "predict", "predict_options", "exports")  # @recipe keywords naming code beside train
NOT_LITERAL = ("config", *HOOK_KEYWORDS)
EARLIER_ROOTS = ("zoo", "shared", "recipes")  # import roots before recipe_zoo: a template written then names them


def _package_dir() -> Path:
    spec = importlib.util.find_spec(RECIPES_PACKAGE)
    return Path(next(iter(spec.submodule_search_locations)))


def recipe_files() -> list[tuple[str, Path]]:
    """(module name under the recipes package, file) for every module of every domain package, and any
    single-module domain: each is scanned for ``@recipe(...)`` decorators."""
    root = _package_dir()
    files = [p for p in root.glob("*.py") if p.name != "__init__.py"] + list(root.glob("*/*.py"))
    return sorted((".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"), p) for p in files)


def load_all() -> dict[str, RecipeSpec]:
    for module in sorted({row["module"] for row in static_list()}):
        importlib.import_module(f"{RECIPES_PACKAGE}.{module}")
    return api.REGISTRY


def get(name: str) -> RecipeSpec:
    """A registered recipe by name, importing only the module that registers it."""
    rows = static_list()
    module = next((r["module"] for r in rows if r["name"] == name), None)
    if module is not None:
        importlib.import_module(f"{RECIPES_PACKAGE}.{module}")
    if name not in api.REGISTRY:
        known = [r["name"] for r in rows]
        import difflib

        near = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; see `zoo list` ({len(known)} recipes)"
        raise ZooError(f"unknown recipe {name!r}{hint}")
    return api.REGISTRY[name]


def load_file(path: str | Path) -> list[RecipeSpec]:
    """Import a user's recipe file (it runs their code, by design) and return what it registered."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ZooError(f"{path}: recipe file not found")
    module_name = f"zoo_user_recipe_{path.stem}_{abs(hash(str(path))) % 10**8}"
    before = dict(api.REGISTRY)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    if str(path.parent) not in sys.path:  # as `python FILE` would: what lies beside it (zoo new --vendor's parts)
        sys.path.append(str(path.parent))
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in EARLIER_ROOTS:
            raise
        raise ZooError(f"{path}: written by an earlier zoo: it imports {exc.name!r}, and the zoo's import root is now "
                       "recipe_zoo (shared -> recipe_zoo.core; zoo.registry, zoo.errors -> recipe_zoo.core.api, "
                       "recipe_zoo.core.errors; zoo.data's column_list, not_utf8 -> recipe_zoo.core.datafiles; "
                       "recipes -> recipe_zoo.recipes; fit(...) takes the run in place of the budget); change the "
                       "imports, or copy the recipe again with zoo new NAME --from RECIPE") from None
    new = [s for k, s in api.REGISTRY.items() if before.get(k) is not s]
    if not new:
        raise ZooError(f"{path}: registers no recipe (decorate its train function with @recipe(...))")
    return new


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


_PARSED: dict[Path, tuple[float, list[dict]]] = {}  # file -> (its mtime, its rows): parsed again when it changes


def static_list() -> list[dict]:
    """Recipes as declared in the sources, without importing them (for ``zoo list``)."""
    rows = []
    for module, path in recipe_files():
        mtime = path.stat().st_mtime
        if _PARSED.get(path, (None,))[0] != mtime:
            _PARSED[path] = (mtime, _declared(module, path))
        rows += [dict(row) for row in _PARSED[path][1]]  # copies: a caller may add to its rows
    return sorted(rows, key=lambda r: r["name"])


def _declared(module: str, path: Path) -> list[dict]:
    rows = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "recipe" and deco.args:
                row = {"name": _literal(deco.args[0]), "module": module}
                row.update({kw.arg: _literal(kw.value) for kw in deco.keywords if kw.arg not in NOT_LITERAL})
                rows.append(row)
    return rows
