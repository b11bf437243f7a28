"""The reference runs: for each benchmark on the board (and digits, the demo's), the run of each recipe that competes
there at a fixed amount of work, with every setting a device would otherwise choose pinned, so that a 2-core CPU
and an H200 train the same configuration and their numbers land in one table.

Work is counted in units no machine changes: optimizer steps at a fixed global batch, boosting rounds (``Nsteps``
caps them for the tree recipes). What a device would choose and is pinned here: model shape (llm depth, diffusion
width, medical width, levels, patch and batch), global and micro batch, precision, TF32 (``tf32=false``: full fp32
matmuls on GPUs, and on CPUs whose oneDNN would otherwise use its reduced fp32 math) and ``compile``. Under a
budget of work nothing reads the clock: evaluation cadence follows steps, the protein head grid is whole, no time
share cuts the trees. What still differs between machines is floating-point order and, in some recipes, where
random numbers are drawn: vision's augmentations come from a CPU generator seeded by the batch's position on every
device, but diffusion's noise, contrastive's kornia views and dropout draw on the device's own generator, so a GPU
seed is another draw of the same distribution (like another seed). Hence rows are means over 3 seeds and
``zoo verify`` checks a row on another machine with 3 seeds on both sides.

The work was chosen near what 5 minutes buys on 2 CPU cores (a minute for the 1-minute and 30-second benchmarks,
about a minute for digits), so that a newcomer reproduces a row in minutes: ``zoo run RECIPE --reference [BENCH]``
runs one, ``zoo bench RECIPE --reference [BENCH]`` measures a row (3 seeds), ``zoo bench RECIPE --reference --speed``
adds this machine to the table's speed view.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass

from recipe_zoo.core.errors import ZooError


@dataclass(frozen=True)
class Reference:
    benchmark: str  # the board's benchmark key: a dataset name, with :field=value for a non-default split
    recipe: str
    work: str  # a budget in machine-free units: 1500steps, 3epochs
    settings: tuple[str, ...]  # key=value overrides: data= and everything a device would otherwise choose
    why: str = ""  # how the work was chosen

    @property
    def overrides(self) -> list[str]:
        return list(self.settings)

    @property
    def dataset(self) -> str:
        """The dataset the run reads (its ``data=``; every reference names one)."""
        return next(s.split("=", 1)[1] for s in self.settings if s.startswith("data="))

    def command(self, verb: str = "run") -> str:
        """``zoo run vision/resnet --reference digits``: the short form that expands to this reference."""
        own = registered_benchmark(self.recipe)
        return f"zoo {verb} {self.recipe} --reference" + ("" if self.benchmark == own else f" {self.benchmark}")

    def expanded(self) -> str:
        """The same run with every setting written out: what ``--reference`` expands to."""
        return " ".join(["zoo run", self.recipe, "--budget", self.work, *self.settings])


# Every reference that trains in the core loop pins fp32 with TF32 off: the same arithmetic on every machine, at
# full speed on every CPU. bf16 is native only on some CPUs (AVX-512 BF16, AMX) and emulated on most (a digits
# reference pinned to bf16 trained 10.7x slower on a Zen 3 than on a Zen 4), so a bf16 reference would rank the
# machines that have the units and make the others wait.
FP32 = ("precision=fp32", "tf32=false")
# The order is the board's. Work: near what a 5-minute run (1 minute for the 1-minute and 30-second benchmarks, a
# minute for digits) trained on 2 cores of an AMD EPYC family 25 model 17 at its time budget.
REFERENCES: tuple[Reference, ...] = (
    Reference("digits", "vision/resnet", "2000steps", ("data=digits", *FP32),
              "the demo: 2,000 steps keep it near 1.5 minutes in fp32 on 2 cores of CPUs with or without bf16 units"),
    Reference("cifar10-subset", "vision/resnet", "1500steps", ("data=cifar10-subset", *FP32),
              "1,442 steps at 5m in bf16, batch 256 (its rows were bf16 until the references became fp32 on every CPU)"),
    Reference("cifar10-subset", "contrastive/simclr", "280steps", ("data=cifar10-subset", *FP32),
              "54 steps in 60 s measured beside another job, 2 x 128 views of 32 px a step: near 5 minutes idle"),
    Reference("tinyshakespeare", "llm/gpt", "300steps",
              ("data=tinyshakespeare", "depth=4", "batch_tokens=4096", "micro_batch=16", "compile=true", *FP32),
              "sizing's fp32 choice at 5m when pinned (depth 4, 4,096 tokens a step, 282 steps predicted; in bf16 "
              "since issue 48 it takes depth 5)"),
    Reference("isbi2012-membrane", "medical/unet", "3000steps",
              ("data=isbi2012-membrane", "width=16", "levels=5", "patch=128,256", "batch_size=3", "compile=false",
               *FP32),
              "the planner's 5m choice (5 folds of 1m: 636 steps each predicted at the conv share of then, 40%; "
              "254 at the 16% measured since); 600 steps a fold"),
    Reference("mnist", "diffusion/flow", "800steps", ("data=mnist", "width=16", "flow_time=uniform", *FP32),
              "sizing's 5m choice (width 16, 787 steps predicted at the conv share of then, 40%; 394 at the 20% "
              "measured since; 64 images a step); uniform times, as its rows were measured before logit-normal "
              "became the default"),
    Reference("lipophilicity", "molecules/dmpnn", "3800steps", ("data=lipophilicity", *FP32),
              "767 steps a minute at the defaults: 5 minutes' worth"),
    Reference("esol", "molecules/dmpnn", "400steps", ("data=esol", *FP32), "411 steps at its 30s budget"),
    Reference("esol", "molecules/fp-xgb", "3000steps", ("data=esol",),
              "its rounds cap (n_estimators): early stopping on validation ends it (608 rounds, 4.5 s)"),
    Reference("bbbp:split=scaffold", "molecules/dmpnn", "550steps", ("data=bbbp", "split=scaffold", *FP32),
              "561 steps at its 30s budget"),
    Reference("bbbp:split=scaffold", "molecules/fp-xgb", "3000steps", ("data=bbbp", "split=scaffold"),
              "its rounds cap: early stopping on validation ends it"),
    Reference("california-housing", "tabular/xgb", "5000steps", ("data=california-housing",),
              "a rounds cap above what early stopping keeps (5 bagged models of 548-976 rounds, 40 s)"),
    Reference("california-housing", "tabular/mlp", "9000steps", ("data=california-housing", *FP32),
              "8,950 steps at its 1m budget"),
    Reference("adult", "tabular/xgb", "5000steps", ("data=adult",),
              "a rounds cap above what early stopping keeps (5 bagged models of 262-392 rounds, 10 s)"),
    Reference("tem1-esm2-8m", "protein/esm-embed", "30000steps", ("data=tem1-esm2-8m", *FP32),
              "the MLP head's 33,000 steps at its 1m budget; under steps the ridge and kernel-ridge grid is whole"),
    Reference("tem1-esm2-8m", "protein/position-mean", "30000steps", ("data=tem1-esm2-8m",),
              "a closed form: it reads no budget, so its work is its esm-embed neighbour's"),
    Reference("tem1-esm2-8m:split=positions", "protein/esm-embed", "30000steps",
              ("data=tem1-esm2-8m", "split=positions", "target_scale=standard", *FP32),
              "as on the random split; standardised targets, as its rows were measured before target_scale=auto chose "
              "ranks here"),
    Reference("tem1-esm2-8m:split=positions", "protein/position-mean", "30000steps",
              ("data=tem1-esm2-8m", "split=positions"), "a closed form: it reads no budget"),
)


@functools.lru_cache(maxsize=None)  # the board asks for each reference on every render
def registered_benchmark(recipe: str) -> str:
    from recipe_zoo import registry

    return registry.get(recipe).benchmark


def for_recipe(recipe: str) -> list[Reference]:
    return [r for r in REFERENCES if r.recipe == recipe]


def find(recipe: str, benchmark: str | None = None) -> Reference:
    """The reference of ``recipe`` on ``benchmark`` (default: the recipe's own benchmark); one line naming what
    exists when there is none."""
    mine = for_recipe(recipe)
    if not mine:
        raise ZooError(f"--reference: {recipe} has no reference run (zoo board lists the reference tables)")
    if not benchmark:
        own = registered_benchmark(recipe)
        benchmark = own if any(r.benchmark == own for r in mine) else mine[0].benchmark
    for r in mine:
        if r.benchmark == benchmark:
            return r
    raise ZooError(f"--reference {benchmark}: {recipe} has references on {', '.join(r.benchmark for r in mine)}")


def matching(recipe: str, benchmark: str, budget: str) -> Reference | None:
    return next((r for r in REFERENCES if (r.recipe, r.benchmark, r.work) == (recipe, benchmark, budget)), None)


def pinned_precision(reference: Reference) -> str | None:
    from recipe_zoo import config

    return config.parse_overrides(reference.overrides).get("precision")


def in_table(row: dict) -> bool:
    """Whether a row belongs in its benchmark's reference table: its recipe's reference work there, in the
    reference's precision, and the reference's configuration (``disagreement``: every setting, tf32 and compile
    included). A variant at that work, or a row whose configuration is not known, goes to the table of its work."""
    ref = matching(row["recipe"], row["benchmark"], row["budget"])
    return ref is not None and pinned_precision(ref) == row.get("precision") and not disagreement(row, ref)


def disagreement(row: dict, ref: Reference) -> str:
    """Why ``row`` did not train ``ref``'s configuration ('' when it did): its resolved configuration (``config``,
    what its run's config.json holds, recorded by ``zoo bench`` or recomputed at the row's commit) is unknown, or a
    field both configurations have differs. A field only one side has (added or removed since) does not count: a
    new field's default keeps the old behaviour, and what behaves differently is the fingerprint's to tell
    (``board.stale``); nor do a config's ``SIZING_INPUTS``, read only to choose what a reference pins (its
    ``DEVICE_FIELDS``: llm depth, diffusion width, medical batch and patch), which compare instead."""
    from recipe_zoo import registry

    mine = row.get("config")
    if not isinstance(mine, dict):
        return "configuration unknown"
    theirs = resolved_config(ref)
    sizing = set(getattr(registry.get(ref.recipe).config, "SIZING_INPUTS", ()))
    differ = sorted(k for k in (mine.keys() & theirs.keys()) - sizing if _same_json(mine[k]) != _same_json(theirs[k]))
    return ", ".join(f"{k}={mine[k]!r} (the reference's {theirs[k]!r})" for k in differ)


def _same_json(value):
    return json.loads(json.dumps(value, default=str))


def of_row(row: dict) -> Reference | None:
    """The reference a leaderboard row measured: its recipe's reference on its benchmark, at that work, in that
    precision and configuration (``in_table``)."""
    return matching(row["recipe"], row["benchmark"], row["budget"]) if in_table(row) else None


def on_benchmark(benchmark: str) -> list[Reference]:
    return [r for r in REFERENCES if r.benchmark == benchmark]


@functools.lru_cache(maxsize=None)
def _resolved(reference: Reference) -> str:
    from recipe_zoo import config, registry

    spec = registry.get(reference.recipe)
    cfg = config.build(spec.config, spec.defaults, None, reference.overrides, spec.name)
    return json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str)


def resolved_config(reference: Reference) -> dict:
    """Every field of the configuration a reference trains, defaults included (nothing in it is left for a device
    to choose), as a run's config.json holds it."""
    return json.loads(_resolved(reference))


def config_hash(reference: Reference) -> str:
    """The reference's resolved configuration and work, hashed: the same on every machine."""
    return hash_config(reference.recipe, reference.work, resolved_config(reference))


def hash_config(recipe: str, work: str, config: dict) -> str:
    """A row's configuration hash: its recipe, budget and resolved configuration (a run's config.json)."""
    text = json.dumps({"recipe": recipe, "work": work, "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
