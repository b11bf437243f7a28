"""The recipes (``recipe_zoo.recipes``): one package per domain, each with ``data.py``, ``models.py`` and one file per
train function registering its recipes with ``@recipe(...)`` from ``recipe_zoo.core.api``; ``images.py`` holds the
image loading and backbones that vision, contrastive and diffusion share. A recipe imports the core, its own
domain and ``images``; never another domain, never the application (``tests/import_graph.py`` checks it)."""
