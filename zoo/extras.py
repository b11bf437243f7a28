"""Which `pip install` extra a recipe's domain needs (pyproject.toml's optional dependencies), checked before a run.

The base install is the core, the command and the leaderboard; each domain's libraries come with its extra, so a
user who trains only vision does not install RDKit, MONAI or fair-esm. A recipe module imports its libraries inside
the functions that use them, so every recipe registers (``zoo list``, ``zoo show``) without its extra; running it
checks the extra first and says which command installs it. tests/test_install.py checks this map against
pyproject.toml.
"""
from __future__ import annotations

import importlib.util
import sys

from recipe_zoo.core.errors import ZooError

# domain (its extra's name) -> the modules its recipes import
MODULES = {
    "vision": ("timm",),
    "contrastive": ("timm", "kornia"),
    "diffusion": ("diffusers",),
    "llm": ("tokenizers", "transformers", "peft"),
    "protein": ("esm", "peft"),
    "molecules": ("rdkit", "xgboost"),
    "medical": ("monai", "nibabel"),
    "tabular": ("xgboost", "pandas"),
}


def installed(module: str) -> bool:
    if module in sys.modules:  # None there: a module known to be absent
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def require(recipe: str) -> None:
    """A one-line error naming the `pip install` when the recipe's domain extra is missing."""
    domain = recipe.split("/")[0]
    missing = [m for m in MODULES.get(domain, ()) if not installed(m)]
    if missing:
        raise ZooError(f"{recipe} needs the {domain} extra ({', '.join(missing)} not installed): "
                       f"pip install 'recipe-zoo[{domain}]'")



# zoo export formats that need the [export] extra -> its modules
FORMAT_MODULES = {"onnx": ("onnx", "onnxruntime", "onnxscript")}


def require_format(fmt: str) -> None:
    """A one-line error naming the `pip install` when an export format's libraries are missing."""
    missing = [m for m in FORMAT_MODULES.get(fmt, ()) if not installed(m)]
    if missing:
        raise ZooError(f"--format {fmt} needs the export extra ({', '.join(missing)} not installed): "
                       "pip install 'recipe-zoo[export]'")
