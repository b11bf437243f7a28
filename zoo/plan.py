"""``zoo plan``: which recipe for this data, and what a model of N parameters costs to train.

``--data PATH`` / ``--kind K --rows N``: the architecture table by data type and size, mapped to the zoo's recipes
with a starting config and the reason (``plan_advice``). ``--params 125M`` / ``--recipe llm/gpt depth=12``: tokens,
training FLOPs, memory and time here and on named GPUs (``plan_cost``). ``--recipe NAME --budget B``: what the
recipe's own sizing hook would choose on a device (``plan_sizing``). This module checks which options go together
and hands each part its own.
"""
from __future__ import annotations

from recipe_zoo.core.errors import ZooError
from recipe_zoo.plan_advice import advise
from recipe_zoo.plan_cost import estimate
from recipe_zoo.plan_sizing import size_for_budget


def command(args) -> int:
    """``zoo plan``'s arguments (``zoo/parser.py`` declares them): the architecture table for ``--data``/``--kind``,
    the compute of ``--params``/``--recipe``, and with ``--budget`` the recipe's own sizing on one device."""
    sizing = args.params or args.recipe
    if not sizing and not args.data and not args.kind:
        raise ZooError("zoo plan needs --data PATH, --kind KIND --rows N, --params N or --recipe NAME [--budget B]")
    if args.overrides and not args.recipe:
        raise ZooError(f"key=value pairs ({' '.join(args.overrides)}) go with --recipe")
    if args.budget and not args.recipe:
        raise ZooError("--budget goes with --recipe NAME: what the recipe would choose for that budget")
    if args.device and not args.budget:
        raise ZooError("--device goes with --recipe NAME --budget B")
    if args.data or args.kind:
        advise(args.data, args.kind, args.rows)
        if sizing:
            print()
    if args.recipe and args.budget:
        return size_for_budget(args)
    if sizing:
        estimate(args)
    return 0
