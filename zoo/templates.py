"""``zoo new NAME --from RECIPE``: a standalone copy of a recipe that the user owns and edits."""
from __future__ import annotations

import ast
import re
import time
from pathlib import Path

from recipe_zoo.core.errors import ZooError


def _recipe_decorators(tree: ast.Module, name: str) -> tuple[ast.FunctionDef, list[ast.Call]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            decos = [d for d in node.decorator_list
                     if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "recipe"]
            if any(isinstance(d.args[0], ast.Constant) and d.args[0].value == name for d in decos if d.args):
                return node, decos
    raise ZooError(f"cannot find the @recipe({name!r}) decorator in its source")


def render_template(spec, new_name: str, commit: str) -> str:
    """The recipe's module with its decorators replaced by one registering ``new_name``.

    The chosen variant's defaults are kept as ``defaults={...}``, so the copy starts out identical
    to ``zoo run RECIPE`` and every later change is the user's.
    """
    source = Path(spec.source).read_text()
    tree = ast.parse(source)
    func, decos = _recipe_decorators(tree, spec.name)
    lines = source.splitlines(keepends=True)
    # Other recipes in the same module stay as plain functions: the copy registers only new_name.
    for other in (d for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node is not func
                  for d in node.decorator_list
                  if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "recipe"):
        for i in range(other.lineno - 1, other.end_lineno):
            lines[i] = ""
    start, end = min(d.lineno for d in decos) - 1, max(d.end_lineno for d in decos)
    decorator = (f"@recipe({new_name!r}, config={spec.config.__name__}, benchmark={spec.benchmark!r}, "
                 f"metric={spec.metric!r},\n        higher_is_better={spec.higher_is_better!r}, "
                 f"budget={spec.budget!r},\n        summary={('copy of ' + spec.name + ': ' + spec.summary)!r},\n"
                 f"        defaults={spec.defaults!r}"
                 + (f",\n        scale_out={spec.scale_out!r}" if spec.scale_out != "torchrun: DDP" else "") + ")\n")
    header = (f"# {new_name}: copied from {spec.name} by `zoo new` on {time.strftime('%Y-%m-%d')} "
              f"(zoo commit {commit}).\n"
              f"# This file is yours: edit any section, then `zoo run {new_name_to_file(new_name)}`.\n"
              f"# It imports only the zoo's shared core, so it keeps working wherever you move it.\n")
    return header + "".join(lines[:start]) + decorator + "".join(lines[end:])


def new_name_to_file(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name.split("/")[-1]) + ".py"


def write_template(spec, new_name: str, dest: Path | None, commit: str) -> Path:
    if not re.fullmatch(r"[A-Za-z][\w-]*(/[A-Za-z][\w-]*)?", new_name):
        raise ZooError(f"recipe name {new_name!r}: use letters, digits, - and _ (optionally domain/variant)")
    dest = dest or Path(new_name_to_file(new_name))
    if dest.exists():
        raise ZooError(f"{dest} already exists; refusing to overwrite (choose another name or --out)")
    text = render_template(spec, new_name, commit)
    compile(text, str(dest), "exec")  # a broken template must never be written
    dest.write_text(text)
    return dest
