"""The recipes (``recipe_zoo.recipes``): one package per domain, each with its ``datasets.py`` (the datasets its
recipes read, declared beside them), its helpers by job (data, models, splits, scoring, inference, ...) and one file
per train function registering its recipes with ``@recipe(...)`` from ``recipe_zoo.core.api``. The image modules
at this level are shared by vision, contrastive and diffusion: ``image_datasets`` (the image sets), ``images``
(loading), ``image_decoding``, ``image_splits``, ``image_streams``, ``image_files`` and ``backbones``. A recipe
imports the core, its own domain and those; never another domain, never the application
(``tests/import_graph.py`` checks it)."""
