"""One module per domain. Each registers its recipes with ``@recipe(...)`` from ``zoo.registry``."""
