"""``python -m recipe_zoo`` once installed; from a checkout without installing, ``PYTHONPATH=CHECKOUT python -m zoo``."""
if __package__ == "zoo":  # started by the folder's name: map the import root onto the checkout first
    from zoo import checkout

    checkout.install()

from recipe_zoo.cli import main  # noqa: E402

raise SystemExit(main())
