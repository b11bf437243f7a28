"""The ``zoo`` command's arguments: one parser, and a function per subcommand that adds it and its options
(``recipe_zoo.cli`` runs them)."""
from __future__ import annotations

import argparse
from pathlib import Path


def build() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zoo", description="Training recipes with honest numbers.")
    p.add_argument("--debug", action="store_true", help="show tracebacks for input errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_list, _add_show, _add_run, _add_doctor, _add_sweep, _add_plan, _add_runs, _add_bench,
                _add_verify, _add_board, _add_compare, _add_new, _add_predict, _add_export, _add_data):  # help's order
        add(sub)
    return p


def _add_list(sub) -> None:
    sub.add_parser("list", help="list recipes: name, default benchmark, metric, one line")


def _add_show(sub) -> None:
    show = sub.add_parser("show", help="a recipe's resolved config with each field's comment")
    show.add_argument("recipe")


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="run a recipe: zoo run NAME|PATH.py [key=value ...]",
                         description="Run a recipe by name or from a recipe file. key=value pairs override "
                                     "config fields (see `zoo show NAME`).")
    run.add_argument("target", nargs="?", help="recipe name (vision/resnet) or path to a recipe .py file (with "
                                               "--resume: the file a run of yours was trained from)")
    run.add_argument("overrides", nargs="*", help="key=value config overrides")
    run.add_argument("--budget", help="training budget: 90s, 5m, 1h, 300steps, 3epochs (default: the recipe's)")
    run.add_argument("--reference", nargs="?", const="", metavar="BENCHMARK",
                     help="the recipe's reference run on BENCHMARK (default: its own): fixed work with every device "
                          "choice pinned, ranked against every machine's rows (key=value still overrides)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    run.add_argument("--config", help="JSON or TOML file of config values, applied before key=value overrides")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run from its checkpoint")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    run.add_argument("--nproc", type=int, default=None, metavar="N",
                     help="train on N processes of this machine under torchrun (DDP; one GPU each, or gloo on CPU)")
    run.add_argument("--track", action="append", default=[], choices=["tensorboard", "mlflow"],
                     help="also log to TensorBoard (event files in the run dir) or MLflow (MLFLOW_TRACKING_URI)")


def _add_doctor(sub) -> None:
    doctor = sub.add_parser("doctor", help="the debugging checklist on your config and data: report.md + plots",
                            description="Data checks, overfit one batch, LR range test and a short health run on "
                                        "the recipe's own model, optimizer and data; writes report.md, plots and "
                                        "suggested.json under RUNS/doctor/. Exit 1 when a check finds an error.")
    doctor.add_argument("target", help="recipe name or path to a recipe .py file")
    doctor.add_argument("overrides", nargs="*", help="key=value config overrides")
    doctor.add_argument("--steps", type=int, default=100, help="steps per training check (default 100)")
    doctor.add_argument("--budget", help="the training budget the recipe sizes itself for (default: the recipe's)")
    doctor.add_argument("--seed", type=int, default=0)
    doctor.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    doctor.add_argument("--config", help="JSON or TOML file of config values, applied before key=value overrides")
    doctor.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")


def _add_sweep(sub) -> None:
    sweep = sub.add_parser("sweep", help="one variable at a time: zoo sweep NAME key=v1,v2,... [--seeds K]",
                           description="Each value of each swept key is a normal run (K seeds) at a fixed budget, "
                                       "kept or discarded against the best so far (within noise: inside the seed "
                                       "spread). Swept keys go in order of impact: LR, batch size, weight decay, "
                                       "warmup. Writes sweep.md, best.json and results.tsv under RUNS/sweeps/.")
    sweep.add_argument("target", help="recipe name or path to a recipe .py file")
    sweep.add_argument("overrides", nargs="*", help="key=v1,v2,... to sweep; key=value to fix")
    sweep.add_argument("--seeds", type=int, default=2, help="seeds per value (default 2: the spread is the noise)")
    sweep.add_argument("--budget", help="training budget per run (default: the recipe's)")
    sweep.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    sweep.add_argument("--config", help="JSON or TOML file of config values, applied before key=value overrides")
    sweep.add_argument("--no-lr-rule", action="store_true",
                       help="keep LRs as given when the batch size changes (default: LR x sqrt(batch ratio))")


def _add_plan(sub) -> None:
    plan = sub.add_parser("plan", help="which recipe for your data (--data/--kind), what N parameters cost (--params)",
                          description="--data PATH or --kind KIND --rows N: a recipe and starting config from the "
                                      "architecture table by data type and size. --params 125M or --recipe llm/gpt "
                                      "depth=N: Chinchilla tokens, 6ND FLOPs, memory and time here and on GPUs. "
                                      "--recipe NAME --budget B [--gpu H200 [--gpus N] | --device cpu]: the shape, "
                                      "batch, steps and throughput the recipe's sizing rule would choose there.")
    plan.add_argument("overrides", nargs="*", help="key=value for --recipe (e.g. depth=12)")
    plan.add_argument("--data", type=Path, help="your file or folder: its type and size are read from it")
    plan.add_argument("--kind", help="image, text, tabular, audio, molecules, protein or medical (with --rows)")
    plan.add_argument("--rows", type=int, help="number of samples (with --kind)")
    plan.add_argument("--params", help="model size: 125M, 1.3B, 7e9")
    plan.add_argument("--recipe", help="take the size from a recipe config (llm/gpt depth=N); with --budget, what "
                                       "the recipe's own sizing rule would choose on the device")
    plan.add_argument("--budget", help="with --recipe: the training budget to size for (30s, 5m, 1h)")
    plan.add_argument("--device", help="with --recipe and --budget: cpu (this machine; the default without --gpu)")
    plan.add_argument("--tokens", help="training tokens (default: 20 per parameter)")
    plan.add_argument("--gpu", action="append", default=[], help="GPU to time on (repeatable; default H100, A100, RTX 4090)")
    plan.add_argument("--gpus", type=int, default=1, help="number of GPUs (default 1)")
    plan.add_argument("--mfu", type=float, help="model FLOPs utilisation to assume, 0-1 (default: the device "
                                                "profile's share for a transformer)")


def _add_runs(sub) -> None:
    runs = sub.add_parser("runs", help="list local runs from the results index")
    runs.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    runs.add_argument("--tsv", action="store_true", help="export as TSV: commit metric memory_gb status description ...")


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="run recipes on their benchmark for n seeds; append leaderboard rows")
    bench.add_argument("targets", nargs="*", help="recipe names or files (default: every registered recipe)")
    bench.add_argument("--seeds", type=int, default=3)
    bench.add_argument("--budget", help="training budget per run (default: each recipe's)")
    bench.add_argument("--reference", nargs="?", const="", metavar="BENCHMARK",
                       help="the reference run of each recipe (on BENCHMARK; default: its own), or with no recipe "
                            "every reference (on BENCHMARK): fixed work, ranked with every machine's rows")
    bench.add_argument("--speed", action="store_true",
                       help="with --reference: add this machine to the speed view only (default 1 seed), never a "
                            "quality row")
    bench.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    bench.add_argument("--nproc", type=int, default=None, metavar="N", help="each run on N processes under torchrun")
    bench.add_argument("--allow-dirty", action="store_true",
                       help="bench from a checkout with uncommitted changes (the row records it)")
    bench.add_argument("--suite", metavar="NAME", help="run a named suite instead of targets: gpu (every torch "
                                                      "recipe briefly, one seed each; see zoo/suite.py)")
    bench.add_argument("--scale", type=float, default=1.0, metavar="F",
                       help="--suite: budgets x F with small settings (F < 1: a CPU check of the suite, no rows)")
    bench.add_argument("--copy-data", type=Path, metavar="DIR",
                       help="--suite or --reference: copy the data those runs read from the data cache into DIR, then "
                            "stop (to carry to a machine that cannot download it; ZOO_DATA=DIR there)")


def _add_verify(sub) -> None:
    verify = sub.add_parser("verify", help="re-run leaderboard rows by their command: do they hold?",
                            description="Re-runs rows (default: the rank-1 row of every table measured on this "
                                        "hardware) and passes a row when the new mean is within 2 sqrt(s_old^2/n_old"
                                        " + s_new^2/n_new) of the old (s: the seed std, or the metric's floor for one"
                                        " seed). Results go to benchmarks/verify.jsonl and the board. Exit 1 when a "
                                        "row fails.")
    verify.add_argument("rows", nargs="*", help="row numbers (see --list) or benchmark names (their rank-1 rows)")
    verify.add_argument("--seeds", type=int, default=1, help="seeds per re-run (default 1)")
    verify.add_argument("--list", action="store_true", help="number the board's rows and stop")
    verify.add_argument("--out", type=Path, default=None, help="runs root (default $ZOO_RUNS or ./runs)")
    verify.add_argument("--allow-dirty", action="store_true", help="verify from a checkout with uncommitted changes")


def _add_board(sub) -> None:
    board = sub.add_parser("board", help="the leaderboard: print, --write leaderboard.md, --plot, --data PATH")
    board.add_argument("--write", action="store_true", help="render leaderboard.md from benchmarks/results.jsonl")
    board.add_argument("--plot", action="store_true", help="a bar chart (mean ± std) per table, as PNG")
    board.add_argument("--data", type=Path, help="rank every recipe you ran on this file or folder (local runs)")
    board.add_argument("--out", type=Path, default=None, help="runs root for --data (default $ZOO_RUNS or ./runs)")


def _add_compare(sub) -> None:
    compare = sub.add_parser("compare", help="place runs against the leaderboard and against each other")
    compare.add_argument("run_dirs", nargs="+", type=Path)
    compare.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                         help="draw the runs' training loss (against step and time) and validation metric on one PNG")


def _add_new(sub) -> None:
    new = sub.add_parser("new", help="copy a recipe into a standalone file you own: zoo new NAME --from RECIPE")
    new.add_argument("name")
    new.add_argument("--from", dest="source", required=True, help="recipe to copy (see zoo list)")
    new.add_argument("--out", type=Path, default=None, help="file to write (default ./NAME.py)")
    new.add_argument("--vendor", action="store_true",
                     help="also copy the recipe modules it imports (its domain's data, models) into NAME_parts/ "
                          "beside it, imports rewritten: only the core still comes from the zoo")


def _add_predict(sub) -> None:
    predict = sub.add_parser("predict", help="apply a finished run to new data: zoo predict RUN_DIR [data=NEW] "
                                             "[key=value ...] [--out FILE]; no data= scores the run's test split again")
    predict.add_argument("run_dir", type=Path)
    predict.add_argument("overrides", nargs="*", metavar="key=value", help="data=PATH and the recipe's predict options "
                                                                          "(zoo show RECIPE lists them)")
    predict.add_argument("--out", type=Path, default=None,
                         help="the CSV to write (default RUN_DIR/predict/<data>.csv); other files go to a folder "
                              "beside it of the same name")
    predict.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    _add_recipe_file(predict)


def _add_recipe_file(parser) -> None:
    parser.add_argument("--from", dest="recipe_file", metavar="FILE.py",
                        help="for a run of your recipe file: that file (checked against the sha256 the run recorded; "
                             "a run folder's own recipe file is never imported)")


def _add_export(sub) -> None:
    export = sub.add_parser("export", help="write a finished run's model in a format: zoo export RUN_DIR --format F")
    export.add_argument("run_dir", type=Path)
    export.add_argument("--format", required=True, help="safetensors (every recipe), or the recipe's own: onnx, "
                                                        "timm, pretrained, xgboost-json (zoo show RECIPE)")
    export.add_argument("--out", type=Path, default=None, help="folder to write (default RUN_DIR/export/FORMAT)")
    _add_recipe_file(export)


def _add_data(sub) -> None:
    data = sub.add_parser("data", help="datasets: list, fetch, prepare")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    listing = data_sub.add_parser("list", help="declared datasets and whether they are in the cache")
    listing.add_argument("--from", dest="recipe_file", metavar="FILE.py",
                         help="also the datasets a recipe file of yours declares (zoo new's copies can)")
    fetch = data_sub.add_parser("fetch", help="download a dataset into the cache, verified by sha256")
    fetch.add_argument("name")
    fetch.add_argument("--from", dest="recipe_file", metavar="FILE.py", help="a recipe file that declares it")
    prepare = data_sub.add_parser("prepare", help="write a dataset once in the form a recipe streams from: "
                                  "zoo data prepare RECIPE data=SOURCE [key=value ...]")
    prepare.add_argument("recipe", help="the recipe that will train on it (its data settings are the prepared ones)")
    prepare.add_argument("overrides", nargs="*", help="data=SOURCE and the recipe's data settings, as for zoo run")
    prepare.add_argument("--out", type=Path, default=None, help="folder to write (default: the prepared-data cache, "
                         "$ZOO_PREPARED or ~/.cache/zoo/prepared)")
    prepare.add_argument("--force", action="store_true", help="prepare again even when the folder is up to date")
