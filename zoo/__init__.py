"""recipe zoo: the CLI, recipe registry, config overrides, runs, results index and datasets."""
