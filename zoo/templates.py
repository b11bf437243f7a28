"""``zoo new NAME --from RECIPE [--vendor]``: a copy of a recipe's own file that the user owns and edits.

The copy is the recipe's file (config, data, model, optimizer, loop, evaluation, top to bottom) registering
``NAME`` with the variant's defaults, so it starts out identical to ``zoo run RECIPE``. It imports the zoo's
core and its domain's ``data``/``models`` helpers; ``--vendor`` also copies every recipe module it imports into a
``<name>_parts/`` package beside it, with the imports rewritten, for a user who wants to own all of it.
"""
from __future__ import annotations

import ast
import re
import time
from pathlib import Path

from recipe_zoo.core.errors import ZooError
from recipe_zoo.registry import HOOK_KEYWORDS

RECIPES = "recipe_zoo.recipes"


def _is_recipe_decorator(d: ast.expr) -> bool:
    return isinstance(d, ast.Call) and getattr(d.func, "id", None) == "recipe"


def _recipe_decorators(tree: ast.Module, name: str) -> tuple[ast.FunctionDef, list[ast.Call]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            decos = [d for d in node.decorator_list if _is_recipe_decorator(d)]
            if any(isinstance(d.args[0], ast.Constant) and d.args[0].value == name for d in decos if d.args):
                return node, decos
    raise ZooError(f"cannot find the @recipe({name!r}) decorator in its source")


def _runtime_imports(tree: ast.AST):
    """The import statements that run: every one in the tree but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for branch in node.orelse for n in _runtime_imports(ast.Module([branch], [])))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def imported_modules(source: str) -> list[str]:
    """The ``recipe_zoo`` modules a source imports when it runs (``from recipe_zoo.core import optim`` counts as
    ``recipe_zoo.core.optim`` when optim is a module: names under a package are listed as its submodules)."""
    found = set()
    for node in _runtime_imports(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("recipe_zoo"):
            for alias in node.names:
                found.add(_module_of(node.module, alias.name))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("recipe_zoo"))
    return sorted(found)


def _module_of(package: str, name: str) -> str:
    """``from package import name``: the module ``package.name`` if there is one, else ``package``. Looked up
    in the package's folders, so nothing heavy (torch, a recipe) is imported."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / f"{name}.py").is_file() or (Path(folder) / name / "__init__.py").is_file():
            return f"{package}.{name}"
    return package


def render_template(spec, new_name: str, commit: str, vendor_package: str | None = None) -> str:
    """The recipe's file with its decorators replaced by one registering ``new_name``; with ``vendor_package``
    its imports of recipe modules point into that package instead of the zoo."""
    path = Path(spec.source)
    source = path.read_text()
    tree = ast.parse(source)
    func, decos = _recipe_decorators(tree, spec.name)
    lines = source.splitlines(keepends=True)
    # Other recipes in the same file stay as plain functions: the copy registers only new_name.
    for other in (d for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node is not func
                  for d in node.decorator_list if _is_recipe_decorator(d)):
        for i in range(other.lineno - 1, other.end_lineno):
            lines[i] = ""
    start, end = min(d.lineno for d in decos) - 1, max(d.end_lineno for d in decos)
    own = next(d for d in decos if d.args and isinstance(d.args[0], ast.Constant) and d.args[0].value == spec.name)
    # the keywords that name code (hooks, predict, predict_options, exports, **spread): carried over as written
    code = "".join(f",\n        {kw.arg + '=' if kw.arg else '**'}{ast.unparse(kw.value)}" for kw in own.keywords
                   if kw.arg is None or kw.arg in HOOK_KEYWORDS)
    decorator = (f"@recipe({new_name!r}, config={spec.config.__name__}, benchmark={spec.benchmark!r}, "
                 f"metric={spec.metric!r},\n        higher_is_better={spec.higher_is_better!r}, "
                 f"budget={spec.budget!r},\n        summary={('copy of ' + spec.name + ': ' + spec.summary)!r},\n"
                 f"        defaults={spec.defaults!r}"
                 + (f",\n        scale_out={spec.scale_out!r}" if spec.scale_out != "torchrun: DDP" else "")
                 + code + ")\n")
    body = "".join(lines[:start]) + decorator + "".join(lines[end:])
    if vendor_package:
        body = rewrite_imports(body, vendor_package)
    where = _relative_source(path)
    uses = ", ".join(imported_modules(body)) or "nothing from the zoo"
    header = (f"# {new_name}: copied from {spec.name} ({where}) by `zoo new` on {time.strftime('%Y-%m-%d')} "
              f"(zoo commit {commit}).\n"
              f"# This file is yours: edit any section, then `zoo run {new_name_to_file(new_name)}`.\n"
              + _wrap(f"It imports: {uses}.")
              + (_wrap(f"The recipe modules it uses were copied into {vendor_package}/ beside it; only the core "
                       "(recipe_zoo.core) still comes from the zoo.") if vendor_package else
                 _wrap("`zoo new ... --vendor` would copy the recipe modules into a folder beside it as well.")
                 if any(m.startswith(RECIPES + ".") for m in imported_modules(body)) else "")
              + (_wrap(f"To fine-tune: `zoo run {new_name_to_file(new_name)} weights=RUN_DIR` starts from a finished "
                       f"{spec.name} run (its card says what is kept; see the README's fine-tuning section).")
                 if "weights" in getattr(spec.config, "__dataclass_fields__", {}) else ""))
    return header + body


def _wrap(text: str, width: int = 116) -> str:
    out, line = [], "#"
    for word in text.split():
        if len(line) + 1 + len(word) > width:
            out.append(line)
            line = "#"
        line += " " + word
    return "\n".join(out + [line]) + "\n"


def _relative_source(path: Path) -> str:
    parts = path.resolve().parts
    return "/".join(parts[parts.index("recipes"):]) if "recipes" in parts else path.name


def _flat_name(module: str) -> str:
    """``recipe_zoo.recipes.vision.data`` -> ``vision_data`` (the vendored module's name)."""
    return module.removeprefix(RECIPES + ".").replace(".", "_")


def declares_datasets(module: str) -> bool:
    """A domain's ``datasets`` module stays the zoo's: a vendored copy would declare its datasets a second time."""
    return module.rsplit(".", 1)[-1].endswith("datasets")


def rewrite_imports(source: str, package: str) -> str:
    """Imports of ``recipe_zoo.recipes`` modules rewritten to the vendored copies in ``package`` (dataset
    declarations excepted)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []
    for node in _runtime_imports(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(RECIPES)):
            continue
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        statements = []
        for alias in node.names:
            module = _module_of(node.module, alias.name)
            asname = f" as {alias.asname}" if alias.asname else ""
            if declares_datasets(module):
                statements.append(f"from {node.module} import {alias.name}{asname}")
            elif module != node.module:  # from recipe_zoo.recipes.vision import data
                statements.append(f"from {package} import {_flat_name(module)} as {alias.asname or alias.name}")
            else:  # from recipe_zoo.recipes.image_splits import ImageSplits
                statements.append(f"from {package}.{_flat_name(module)} import {alias.name}{asname}")
        edits.append((node.lineno - 1, node.end_lineno, "".join(f"{indent}{s}\n" for s in statements)))
    for first, last, text in sorted(edits, reverse=True):
        lines[first:last] = [text]
    return "".join(lines)


def vendored_modules(source: str) -> list[str]:
    """Every ``recipe_zoo.recipes`` module the source needs, following their own imports (its datasets modules
    excepted)."""
    import importlib.util

    todo, seen = [m for m in imported_modules(source) if m.startswith(RECIPES + ".")], set()
    while todo:
        module = todo.pop()
        if module in seen or declares_datasets(module):
            continue
        seen.add(module)
        text = Path(importlib.util.find_spec(module).origin).read_text()
        todo += [m for m in imported_modules(text) if m.startswith(RECIPES + ".") and m not in seen]
    return sorted(seen)


def new_name_to_file(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name.split("/")[-1]) + ".py"


def write_template(spec, new_name: str, dest: Path | None, commit: str, vendor: bool = False) -> list[Path]:
    """Write the copy (and with ``vendor`` its ``<stem>_parts/`` package); returns the files written."""
    import importlib.util

    if not re.fullmatch(r"[A-Za-z][\w-]*(/[A-Za-z][\w-]*)?", new_name):
        raise ZooError(f"recipe name {new_name!r}: use letters, digits, - and _ (optionally domain/variant)")
    dest = dest or Path(new_name_to_file(new_name))
    modules = vendored_modules(Path(spec.source).read_text()) if vendor else []
    package = re.sub(r"\W", "_", dest.stem) + "_parts" if modules else None
    parts_dir = dest.parent / package if package else None
    for path in (dest, parts_dir):
        if path is not None and path.exists():
            raise ZooError(f"{path} already exists; refusing to overwrite (choose another name or --out)")
    text = render_template(spec, new_name, commit, package)
    files = {dest: text}
    if parts_dir is not None:
        files[parts_dir / "__init__.py"] = f'"""Recipe modules copied from the zoo for {dest.name} by `zoo new --vendor`."""\n'
        for module in modules:
            source = Path(importlib.util.find_spec(module).origin).read_text()
            files[parts_dir / f"{_flat_name(module)}.py"] = (f"# copied from {module} by `zoo new --vendor` "
                                                             f"(zoo commit {commit})\n"
                                                             + rewrite_imports(source, package))
    for path, content in files.items():
        compile(content, str(path), "exec")  # a broken template must never be written
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return list(files)
