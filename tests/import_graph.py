"""The import graph between the project's layers, from the sources alone (nothing is imported).

    python tests/import_graph.py [--root CHECKOUT]

Every ``import`` and ``from ... import`` in ``zoo/``, ``shared/`` and ``recipes/`` is mapped to the file it names
through the package roots that pyproject.toml declares (``package-dir``; without one, each top-level package is
its own folder), then to a unit: ``core`` (shared/), ``app`` (zoo/), ``recipes/<domain>`` for a domain (a package,
or a module that registers recipes) and ``recipes/<module>`` for a domain-neutral module of recipes/. The rule:

- core imports only core;
- a domain imports core, itself and domain-neutral recipe modules, never the application or another domain;
- a domain-neutral recipe module imports only core and other domain-neutral modules;
- the application imports core and itself: it reaches recipes only through the registry, at run time.

It prints the edges between units with their counts, then every import that breaks the rule (file:line).
``tests/test_layout.py`` fails on any.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

FOLDERS = {"shared": "core", "zoo": "app", "recipes": "recipes"}


def package_roots(root: Path) -> dict[str, Path]:
    """Import name -> folder, from pyproject.toml's setuptools package-dir (or top-level packages by name)."""
    config = tomllib.loads((root / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {})
    mapping = config.get("package-dir")
    if mapping:
        return {name: root / folder for name, folder in mapping.items() if name}
    return {p.name: p for p in (root / f for f in FOLDERS) if (p / "__init__.py").is_file()}


def module_file(name: str, roots: dict[str, Path]) -> Path | None:
    """The file an import name refers to (a module, or a package's __init__), by the longest package root."""
    best = max((r for r in roots if name == r or name.startswith(r + ".")), key=len, default=None)
    if best is None:
        return None
    path = roots[best].joinpath(*name[len(best):].lstrip(".").split(".")) if name != best else roots[best]
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path, roots: dict[str, Path]) -> str:
    for name, folder in sorted(roots.items(), key=lambda kv: -len(kv[1].parts)):
        if folder in path.parents:
            rel = path.relative_to(folder).with_suffix("").parts
            return ".".join([name, *rel]).removesuffix(".__init__")
    raise ValueError(f"{path} is under no package root")


def imports(path: Path, roots: dict[str, Path]) -> list[tuple[int, Path]]:
    """(line, file) for every import of the project's own modules in ``path`` (inside functions too)."""
    this = module_name(path, roots)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]  # a submodule, or a name in base
            names = [n if module_file(n, roots) else base for n in names]
        else:
            continue
        out += [(node.lineno, f) for f in dict.fromkeys(module_file(n, roots) for n in names) if f is not None]
    return out


def registers_recipes(path: Path) -> bool:
    return re.search(r"^\s*@recipe\(", path.read_text(), re.M) is not None


def unit(path: Path, root: Path) -> str:
    rel = path.relative_to(root).parts
    layer = FOLDERS[rel[0]]
    if layer != "recipes" or len(rel) == 2 and rel[1] == "__init__.py":
        return layer
    if len(rel) > 2:  # a domain package
        return f"recipes/{rel[1]}"
    name = Path(rel[1]).stem
    return f"recipes/{name}" if registers_recipes(path) else f"recipes/{name} (neutral)"


def allowed(src: str, dst: str) -> bool:
    if dst == src or dst == "core":
        return True
    if src.startswith("recipes/") and not src.endswith("(neutral)"):
        return dst.endswith("(neutral)") or dst == "recipes"
    if src.endswith("(neutral)"):
        return dst.endswith("(neutral)")
    return False  # core imports only core; the application no recipe module


def graph(root: Path) -> dict[tuple[str, str], list[tuple[Path, int]]]:
    roots = package_roots(root)
    edges = defaultdict(list)
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            src = unit(path, root)
            for line, target in imports(path, roots):
                edges[(src, unit(target, root))].append((path.relative_to(root), line))
    return dict(edges)


def violations(edges: dict) -> list[str]:
    return [f"{path}:{line}: {src} imports {dst}" for (src, dst), sites in sorted(edges.items())
            if not allowed(src, dst) for path, line in sites]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="a checkout")
    args = p.parse_args(argv)
    edges = graph(args.root.resolve())
    print("imports between units (count of import sites; a unit's imports of itself not shown):")
    for src in sorted({s for s, _ in edges}):
        out = [f"{dst} {len(sites)}" for (s, dst), sites in sorted(edges.items()) if s == src and dst != src]
        print(f"  {src:<32} -> {', '.join(out) or '-'}")
    bad = violations(edges)
    print(f"\nimports against the layering rule: {len(bad)}")
    for line in bad:
        print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
