"""The shape of the house: layers import downward, one import root, files of a readable size, a checkout that runs
without an install."""
import ast
import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import import_graph
from conftest import ROOT

FOLDERS = ("zoo", "shared", "recipes")
MODULE_LINES, FUNCTION_LINES = 400, 100  # tests aside


def test_imports_follow_the_layers():
    bad = import_graph.violations(import_graph.graph(ROOT))
    assert not bad, "imports against the layering rule (python tests/import_graph.py):\n" + "\n".join(bad)


def _tree(root: Path, files: dict[str, str], package_dir: str) -> Path:
    (root / "pyproject.toml").write_text(f"[tool.setuptools]\npackage-dir = {package_dir}\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_graph_maps_imports_by_package_root_and_finds_each_kind_of_breach(tmp_path):
    """Another root name (``acme``) over the same folders: an upward, a sideways and an application-to-recipe
    import are found by where the names lead, and relative imports resolve; a neutral recipe module is allowed."""
    root = _tree(tmp_path, {
        "zoo/__init__.py": "", "zoo/cli.py": "from acme.recipes.a import train\n",
        "shared/__init__.py": "", "shared/loop.py": "from acme import cli\n",
        "recipes/__init__.py": "", "recipes/images.py": "from acme.core import loop\n",
        "recipes/a/__init__.py": "", "recipes/a/data.py": "from ..b import models\n",
        "recipes/a/train.py": "from acme.core.loop import x\nfrom acme.recipes import images\nfrom . import data\n"
                              "@recipe('a/x')\ndef train(cfg, run): ...\n",
        "recipes/b/__init__.py": "", "recipes/b/models.py": "import acme.recipes.images\n",
    }, '{"acme" = "zoo", "acme.core" = "shared", "acme.recipes" = "recipes"}')
    bad = import_graph.violations(import_graph.graph(root))
    assert bad == ["zoo/cli.py:1: app imports recipes/a", "shared/loop.py:1: core imports app",
                   "recipes/a/data.py:1: recipes/a imports recipes/b"], bad


def _sources():
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_modules_are_of_a_readable_size():
    """No module of the three folders over 400 lines (tests aside): a longer one holds more than one job."""
    too_long = [f"{path.relative_to(ROOT)}: {lines} lines" for path in _sources()
                if (lines := len(path.read_text().splitlines())) > MODULE_LINES]
    assert not too_long, f"over {MODULE_LINES} lines: {too_long}"


def test_functions_read_in_one_screen():
    """No function or method of the three folders over 100 lines, from its ``def`` to its last line: a longer one
    is steps that deserve names of their own."""
    too_long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} {lines} lines")
    assert not too_long, f"over {FUNCTION_LINES} lines: {too_long}"


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package_with_the_board(tmp_path):
    """`pip wheel` of the project holds recipe_zoo and its dist-info, every source file of the three folders and
    the board's rows; installed outside the checkout, `zoo board` and `zoo bench` work."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"recipe_zoo", wheel.name.split("-")[0] + "-" +
                                                wheel.name.split("-")[1] + ".dist-info"}
    roots = import_graph.package_roots(ROOT)
    expected = {"/".join(import_graph.module_name(p, roots).split(".")) + ("/__init__.py" if p.name == "__init__.py"
                                                                            else ".py")
                for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}
    assert expected <= set(names), sorted(expected - set(names))
    shipped = {f"recipe_zoo/benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.jsonl")}
    assert shipped and shipped <= set(names), sorted(shipped - set(names))  # the board's committed rows

    # Installed, outside the repository: `zoo board` shows the shipped rows; `zoo bench` appends to $ZOO_HOME,
    # naming the package version (no commit there), and the board then shows its row beside the shipped ones.
    target, home, work = tmp_path / "site", tmp_path / "home", tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    site = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]  # the dependencies, no .pth
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *site]), "ZOO_HOME": str(home)}
    env.pop("ZOO_BOARD_DIR", None)

    def zoo(*args):
        return subprocess.run([sys.executable, "-S", "-m", "recipe_zoo", *args], env=env, cwd=work,
                              capture_output=True, text=True, timeout=300)

    where = subprocess.run([sys.executable, "-S", "-c", "import recipe_zoo; print(recipe_zoo.__file__)"], env=env,
                           cwd=work, capture_output=True, text=True)
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr
    from recipe_zoo import board as checkout_board
    from recipe_zoo import board_render as checkout_render

    shown = zoo("board")
    assert shown.returncode == 0, shown.stderr[-2000:]
    expected_board = checkout_render.render(*(checkout_board.load_rows(ROOT / "benchmarks" / k) for k in
                                             checkout_board.KINDS))
    assert shown.stdout == expected_board
    bench = zoo("bench", "tabular/xgb", "data=wine", "bagging=1", "n_estimators=20", "--budget", "2steps",
                "--out", str(tmp_path / "runs"))
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    (row,) = [json.loads(line) for line in (home / "benchmarks" / "results.jsonl").read_text().splitlines()]
    version = f"recipe-zoo=={importlib.metadata.version('recipe-zoo')}"
    assert row["commit"] == version and row["dirty"] is False and row["benchmark"] == "wine"
    after = zoo("board").stdout
    assert "## wine" in after and version in after and after.count("\n## ") == \
        expected_board.count("\n## ") + 1
    assert (home / "leaderboard.md").read_text() == after
    assert not (target / "recipe_zoo" / "benchmarks" / "results.jsonl").read_text().count("wine")  # untouched


def test_a_checkout_runs_without_an_install(tmp_path):
    """`PYTHONPATH=CHECKOUT python -m zoo` (the device machines' way): with site-packages on the path but no .pth
    files read (``-S``), so the editable install is not seen, the zoo runs from the checkout's folders."""
    site = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]  # the venv's, without its .pth
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *site])}
    check = subprocess.run([sys.executable, "-S", "-c", "import importlib.util; print(importlib.util.find_spec("
                            "'recipe_zoo'))"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert check.stdout.strip() == "None", "recipe_zoo must not be importable here without the checkout's finder"
    proc = subprocess.run([sys.executable, "-S", "-m", "zoo", "run", "tabular/xgb", "data=wine", "bagging=1",
                           "n_estimators=20", "--budget", "2steps", "--out", str(tmp_path / "runs")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "status:          ok" in proc.stdout
