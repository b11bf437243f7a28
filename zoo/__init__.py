"""recipe zoo. One import root over three folders of the repository:

- ``recipe_zoo``          is ``zoo/``: the application (CLI, recipe discovery, runs, results index, leaderboard,
                          bench, doctor, sweep, plan, data cache, templates);
- ``recipe_zoo.core``     is ``shared/``: the common core and the recipe API every recipe stands on;
- ``recipe_zoo.recipes``  is ``recipes/``: one package per domain.

Each layer imports only downward: recipes import the core, the application reaches recipes through the registry.
"""


def load(run_dir, device: str = "auto", recipe_file=None):
    """A finished run, opened for use: ``recipe_zoo.load("runs/vision/resnet/...").predict(data="photos/")``; a run
    of a recipe file of yours needs that file: ``recipe_file="mytask.py"`` (the run folder's own is never imported)."""
    from recipe_zoo.predict import load as _load

    return _load(run_dir, device, recipe_file)
