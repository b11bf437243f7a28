"""The common core every recipe uses: optimizers, schedules, precision, the training loop,
checkpoints, metrics and diagnostics. It knows nothing of domains or of the CLI."""
