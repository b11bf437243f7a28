"""The zoo from a checkout, without installing it: ``PYTHONPATH=/path/to/checkout python -m zoo ...``.

The import root ``recipe_zoo`` spans three folders: ``zoo/`` (the application, ``recipe_zoo``), ``shared/`` (the
core, ``recipe_zoo.core``) and ``recipes/`` (``recipe_zoo.recipes``). An install maps them (``package-dir`` in
pyproject.toml). Without one, ``install()`` puts a finder first on ``sys.meta_path`` that maps the same three
names onto the folders of this checkout, and notes the checkout in ``ZOO_CHECKOUT`` so that the processes
``zoo run --nproc N`` starts under torchrun are started the same way.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"recipe_zoo": "zoo", "recipe_zoo.core": "shared", "recipe_zoo.recipes": "recipes"}


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        folder = FOLDERS.get(name)
        if folder is None:
            return None  # submodules are found through their package's __path__, which points into the checkout
        init = ROOT / folder / "__init__.py"
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])


def install() -> None:
    if not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder())
    os.environ["ZOO_CHECKOUT"] = str(ROOT)
