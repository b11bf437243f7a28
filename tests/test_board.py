"""Leaderboard rows, rendering, ranking, own-data boards, bench, compare and templates."""
import multiprocessing
import shutil

import numpy as np
import pytest

from conftest import summary_block, zoo_in_process
from recipe_zoo import board, board_render, catalog, paired, ranking, registry
from recipe_zoo.core import items
from recipe_zoo.core.datasets import own_data_key

CPU = "AMD EPYC (2 threads)"


def row(recipe, mean, std=0.01, n=3, budget="5m", hardware=CPU, benchmark="cifar10-subset", **kw):
    return {"protocol": 2, "benchmark": benchmark, "split": "test/", "metric": "accuracy", "higher_is_better": True,
            "recipe": recipe, "mean": mean, "std": std, "n": n, "budget": budget, "hardware": hardware,
            "train_seconds": 300.0, "params_M": 0.3, "peak_mem_mb": 900.0, "commit": "abc1234",
            "date": "2026-11-29", "command": f"zoo bench {recipe} --seeds 3 --budget {budget}", **kw}


def test_render_is_deterministic_and_separates_tables():
    rows = [row("a", 0.70), row("b", 0.80), row("c", 0.90, hardware="NVIDIA H100 x1"), row("d", 0.5, budget="1m")]
    reported = [{"benchmark": "cifar10-subset", "metric": "accuracy", "model": "ResNet18 (full CIFAR-10)",
                 "value": "93.02%", "source": "kuangliu/pytorch-cifar README"}]
    text = board_render.render(rows, reported)
    assert text == board_render.render(list(rows), list(reported))
    assert text.count("## cifar10-subset · accuracy") == 3  # 5m on CPU, 5m on GPU, 1m on CPU: never ranked together
    cpu_table = text.split("## cifar10-subset · accuracy · 5m · AMD EPYC")[1].split("##")[0]
    assert cpu_table.index("| 1 | b |") < cpu_table.index("| 2 | a |")
    assert "not measured by `zoo bench`" in text and "0.8000 ± 0.0100" in text
    assert "higher is better" in text


def test_transfer_rows_render_in_their_own_table_never_ranked():
    """A transfer row (``benchmarks/transfer.py --record``): its own table per target benchmark after the ranked
    ones, validation / test of each arm and the fine-tune's paired validation gain with the seeds it held on (sign
    turned so positive is better: here RMSE, lower is better)."""
    arm = lambda val, test: {"val": [val] * 3, "test": [test] * 3, "val_mean": val, "test_mean": test}  # noqa: E731
    moved = {"recipe": "molecules/dmpnn", "source": ["data=lipophilicity", "exclude=esol"], "source_budget": "1m",
             "benchmark": "esol", "metric": "test_rmse", "higher_is_better": False, "budget": "30s",
             "total_budget": "90s", "hardware": CPU, "n": 3, "commit": "abc1234", "date": "2026-12-04",
             "finetune": ["head_fraction=0.25"],
             "command": "python benchmarks/transfer.py ...",
             "arms": {"scratch": arm(0.52, 0.50), "fine-tuned": arm(0.48, 0.47),
                      "scratch, same total compute": arm(0.50, 0.49)},
             "val_gain_over_scratch": {"mean": 0.04, "by_seed": [0.05, 0.04, 0.03]},
             "val_gain_over_scratch_same_total_compute": {"mean": 0.02, "by_seed": [0.03, -0.01, 0.04]}}
    text = board_render.render([row("a", 0.7, benchmark="esol")], [], transfer=[moved])
    table = text.split("## esol · test_rmse · transfer")[1]
    assert text.index("## esol · accuracy · 5m") < text.index("# Transfer")
    assert ("| molecules/dmpnn | data=lipophilicity exclude=esol @ 1m | 30s, head_fraction=0.25 | 0.5200 / 0.5000 | "
            "0.4800 / 0.4700 | "
            "+0.04 (3 of 3) | 0.5000 / 0.4900 @ 90s | +0.02 (2 of 3) | 3 |") in table
    assert "lower is better" in table and "rank" not in table.split("\n\n")[2]
    assert "# Transfer" not in board_render.render([row("a", 0.7)], [])
    other = {**moved, "recipe": "vision/resnet", "source_recipe": "contrastive/simclr",
             "source": ["data=cifar10-subset"]}
    text = board_render.render([], [], transfer=[other])  # a source run of another recipe names it
    assert "| vision/resnet | contrastive/simclr: data=cifar10-subset @ 1m | 30s" in text
    again = {**other, "commit": "def5678", "arms": {**other["arms"], "fine-tuned": arm(0.46, 0.45)}}
    text = board_render.render([], [], transfer=[other, again])  # the same command again: only the newer row
    assert "def5678" in text and "abc1234" not in text and "0.4600 / 0.4500" in text


def test_rank_line_and_noise():
    rows = [row("a", 0.70, 0.02), row("b", 0.80, 0.02)]
    kw = dict(benchmark="cifar10-subset", budget="5m", hardware=CPU, metric="accuracy", higher=True, rows=rows)
    assert ranking.rank_line(0.81, **kw).startswith("1 of 3")
    assert "within the best row's interval" in ranking.rank_line(0.79, **kw)  # 0.80 ± 2 x 0.02 / sqrt 3
    line = ranking.rank_line(0.75, **kw)
    assert line.startswith("2 of 3") and "delta -0.0500" in line and "outside" in line
    assert ranking.rank_line(0.5, **{**kw, "rows": [dict(r, protocol=1) for r in rows]}).startswith("unranked")
    assert ranking.rank_line(0.95, **kw).endswith("better than the best row)")
    assert ranking.rank_line(0.5, **{**kw, "hardware": "other"}).startswith("unranked")
    lower = [dict(row("a", 0.5), higher_is_better=False), dict(row("b", 0.6), higher_is_better=False)]
    assert ranking.rank_line(0.55, **{**kw, "higher": False, "rows": lower}).startswith("2 of 3")


def _append_many(args):
    path, worker = args
    for i in range(20):
        board.append_rows([row(f"w{worker}", i / 20)], path)


def test_concurrent_bench_writers_lose_no_row(tmp_path):
    path = tmp_path / "results.jsonl"
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        pool.map(_append_many, [(path, w) for w in range(6)])
    rows = board.load_rows(path)
    assert len(rows) == 120 and {r["recipe"] for r in rows} == {f"w{w}" for w in range(6)}


def test_data_fingerprint_stable_across_order_and_changes_with_content(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, order in ((a, ["x", "y", "z"]), (b, ["z", "y", "x"])):
        for name in order:  # created in a different order
            (folder / "cls").mkdir(parents=True, exist_ok=True)
            (folder / "cls" / f"{name}.png").write_bytes(name.encode() * 10)
    assert own_data_key(a) == own_data_key(b)
    (b / "cls" / "x.png").write_bytes(b"changed")
    assert own_data_key(a) != own_data_key(b)
    assert own_data_key(a).startswith("own:")


def test_bench_appends_rows_and_renders(tmp_path, capsys):
    from recipe_zoo.cli import main

    def zoo_here(*args) -> str:  # in-process: a subprocess spends seconds importing torch
        code = main([*map(str, args)])
        out = capsys.readouterr().out
        assert code == 0, out[-2000:]
        return out

    from recipe_zoo import runs

    out = tmp_path / "runs"
    commit, dirty = runs.code_state()  # the tree as the bench finds it (uncommitted edits or none)
    proc = zoo_in_process("bench", "vision/resnet", "--seeds", "2", "--budget", "4steps", "width=8", "data=digits",
                          "eval_every=0", "--out", out, "--allow-dirty")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (r,) = board.load_rows()
    assert r["n"] == 2 and r["benchmark"] == "digits" and r["seeds"] == [0, 1]
    assert r["overrides"] == {"width": "8", "data": "digits", "eval_every": "0"}
    assert r["command"] == "zoo bench vision/resnet --seeds 2 --budget 4steps width=8 data=digits eval_every=0"
    assert r["protocol"] == 2 and r["ci_low"] <= r["mean"] <= r["ci_high"] and r["val_mean"] is not None
    assert "validation" in r["split"]
    assert r["dirty"] is dirty and r["commit"] == commit + ("-dirty" if dirty else "")  # --allow-dirty records it
    assert r["mean"] == pytest.approx(sum(r["values"]) / 2)
    (line,) = board.load_rows(board.items_file())  # each seed's per-item test hits, named by the row
    assert r["items"] == line["id"] and len(line["seeds"]) == 2 and line["seeds"][0]["split"]
    for seed, value in zip(line["seeds"], r["values"]):
        scores = items.ItemScores.from_json(seed)
        assert scores.kind == "mean" and scores.statistic(np.arange(len(scores))) == pytest.approx(value, rel=1e-6)
    text = (board.board_dir() / "leaderboard.md").read_text()
    assert "## digits · test_accuracy · 4steps" in text and "vision/resnet data=digits eval_every=0 width=8" in text
    # a later run on the same benchmark, budget and hardware gets a rank line against the row
    proc = zoo_in_process("run", "vision/resnet", "width=8", "eval_every=0", "--budget", "4steps", "--out", out)
    rank = summary_block(proc.stdout)["rank"]
    assert rank.split(" of ")[1].startswith("2 on digits @ 4steps")
    assert "paired with the best row, 95% " in rank  # its test hits against the row's, item by item
    run_dirs = sorted((out / "vision" / "resnet").iterdir())
    cmp = zoo_here("compare", *run_dirs[:2])
    assert cmp.count(" of 2 on digits @ 4steps") == 2
    assert "digits · test_accuracy · 4steps" in cmp and "  1. " in cmp and "  2. " in cmp
    zoo_here("board", "--plot")
    assert list((board.board_dir() / "benchmarks" / "plots").glob("digits-4steps*.png"))
    shown = zoo_here("show", "vision/resnet")
    assert "leaderboard: no measured rows yet" in shown  # the bench row carries overrides


@pytest.mark.slow
def test_board_for_own_data(tmp_path):
    import numpy as np
    from PIL import Image

    data = tmp_path / "shapes"
    rng = np.random.default_rng(0)
    for cls, color in (("r", (200, 0, 0)), ("g", (0, 200, 0))):
        (data / cls).mkdir(parents=True)
        for i in range(5):
            pixels = np.clip(rng.normal(color, 40, (8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(data / cls / f"{i}.png")
    out = tmp_path / "runs"
    for width in (4, 8):
        proc = zoo_in_process("run", "vision/resnet", f"data={data}", f"width={width}", "image_size=8", "eval_every=0",
                              "--budget", "3steps", "--out", out)
        assert proc.returncode == 0, proc.stderr
    assert summary_block(proc.stdout)["rank"].endswith(")") and "of 2 on own:" in summary_block(proc.stdout)["rank"]
    moved = tmp_path / "renamed"
    shutil.copytree(data, moved)
    listing = zoo_in_process("board", "--data", moved, "--out", out)
    assert listing.returncode == 0
    assert "width=4" in listing.stdout and "width=8" in listing.stdout
    assert zoo_in_process("board", "--data", tmp_path / "nope").returncode == 2


def test_one_seed_shows_no_spread_and_overlapping_rows_share_rank_one():
    """n=1 is printed as n=1 (no ± 0.0000); rows whose test interval overlaps the best row's are ranked =1, the
    rest by mean; a protocol-1 row is shown apart and never ranked against them."""
    rows = [row("a", 0.80, n=1, std=0.0, ci_low=0.79, ci_high=0.81), row("b", 0.805, ci_low=0.795, ci_high=0.815),
            row("c", 0.70, ci_low=0.69, ci_high=0.71), row("old", 0.99, protocol=1)]
    current, old = board_render.render(rows, []), board_render.render_archive(rows)
    assert "| =1 | b | 0.8050 ± 0.0100 | 0.7950..0.8150 |" in current
    assert "| =1 | a | 0.8000 (n=1) |" in current and "± 0.0000" not in current
    assert "| 3 | c |" in current and "| old |" not in current and "(leaderboard-protocol1.md)" in current
    assert "| 1 | old |" in old and "never ranked against" in old and "| a |" not in old
    assert board.ranks([row("x", 0.9, ci_low=0.89, ci_high=0.91), row("y", 0.5, ci_low=0.49, ci_high=0.51)]) == ["1", "2"]


def test_context_rows_say_their_split():
    reported = [{"benchmark": "cifar10-subset", "metric": "accuracy", "model": "ResNet18 (full CIFAR-10)",
                 "value": "93.02%", "source": "README", "split": "CIFAR-10's own 50k / 10k", "same_split": "no"}]
    text = board_render.render([row("a", 0.8, metric="test_accuracy")], reported)
    assert "| ResNet18 (full CIFAR-10) | 93.02% | CIFAR-10's own 50k / 10k | no | README |" in text


def test_bench_refuses_an_uncommitted_checkout(tmp_path, monkeypatch):
    from conftest import git_repo
    from recipe_zoo import bench, runs
    from recipe_zoo.core.errors import ZooError

    # every kind of row the zoo writes (reported.jsonl is written by hand: a change to it is a change to commit)
    results = ["leaderboard.md", "leaderboard.html",
               *(f"benchmarks/{kind}" for kind in board.KINDS if kind != "reported.jsonl")]
    git_repo(tmp_path, {"code.py": "x = 1\n", **{name: "" for name in results}})
    monkeypatch.setattr(runs, "CODE_DIR", tmp_path)
    bench.check_provenance(allow_dirty=False)  # clean: fine
    for name in results:  # what a bench writes (every kind of result row, the board) is not code: the next bench
        (tmp_path / name).write_text("{}\n")  # names the same commit
    bench.check_provenance(allow_dirty=False)
    (tmp_path / "code.py").write_text("x = 2\n")
    with pytest.raises(ZooError, match="uncommitted changes.*--allow-dirty"):
        bench.check_provenance(allow_dirty=False)
    bench.check_provenance(allow_dirty=True)
    monkeypatch.setattr(runs, "CODE_DIR", tmp_path.parent / "not-a-checkout-anywhere")
    with pytest.raises(ZooError, match="not a git checkout"):
        bench.check_provenance(allow_dirty=False)
    monkeypatch.setenv("ZOO_COMMIT", "e59a2b1dc")  # a copy sent without its git folder names its commit
    assert runs.code_state() == ("e59a2b1dc-copy", False)
    bench.check_provenance(allow_dirty=False)
    monkeypatch.setenv("ZOO_COMMIT", "main")
    with pytest.raises(ZooError, match="ZOO_COMMIT='main': give the commit"):
        bench.check_provenance(allow_dirty=False)


def test_verify_tolerance_and_floors():
    from recipe_zoo import verify

    three = row("a", 0.80, std=0.01, n=3)
    assert verify.tolerance(three, dict(three)) == pytest.approx(2 * (2 * 0.01 ** 2 / 3) ** 0.5)
    one = row("a", 0.80, std=0.0, n=1)
    assert verify.tolerance(one, dict(one)) == pytest.approx(2 * (2 * 0.005 ** 2) ** 0.5)  # [0, 1] metric floor
    rmse = row("a", 40000.0, std=0.0, n=1, metric="test_rmse")
    assert verify.spread(rmse) == pytest.approx(400.0)  # 1% of the value for a metric with a scale
    saturated = row("a", 1.0, std=0.0, n=3)  # three seeds at 1.0000: no spread of their own, the floor stands in
    assert verify.spread(saturated) == 0.005
    xeon = row("a", 0.9963, std=0.0016, n=3, values=[0.9944, 0.9972, 0.9972], dirty=False)
    assert verify.check(saturated, 1, xeon)["passed"]  # about one image in 360 holds
    assert not verify.check(saturated, 1, {**xeon, "mean": 0.99})["passed"]


@pytest.mark.slow
def test_verify_reruns_a_row_and_flags_one_that_does_not_hold(tmp_path):
    """The rank-1 row is re-run by its command: an honest row holds; a row whose value was written wrong fails,
    stays on the board, and is flagged there."""
    from recipe_zoo.core.envinfo import hardware

    out = tmp_path / "runs"
    proc = zoo_in_process("bench", "vision/resnet", "--seeds", "1", "--budget", "3steps", "width=8", "eval_every=0",
                          "data=digits", "--out", out, "--allow-dirty")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (honest,) = board.load_rows()
    forged = dict(honest, mean=honest["mean"] - 0.2, recipe="vision/resnet", date="2026-01-01")
    board.append_rows([forged])
    listing = zoo_in_process("verify", "--list")
    assert listing.returncode == 0 and "  1  digits" in listing.stdout and "  2  digits" in listing.stdout
    proc = zoo_in_process("verify", "1", "2", "--out", out, "--allow-dirty")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "row 1: holds" in proc.stdout and "row 2: FAILS" in proc.stdout
    checks = board.load_rows(board.checks_file())
    assert [c["passed"] for c in checks] == [True, False] and checks[0]["hardware"] == hardware()
    text = (board.board_dir() / "leaderboard.md").read_text()
    assert text.count("**FAILED**") == 1 and "ok 20" in text
    assert zoo_in_process("verify", "7").returncode == 2  # no such row


def test_a_rank_is_one_plus_the_better_rows_told_apart():
    """Rank = 1 + the rows with a better mean told apart from the row: identical rows share a rank; a row of many
    seeds with a wide spread, not told apart from the best, is =1 below a row ranked 2; rows without per-item
    scores are told apart by Welch's t-test on their seeds (here 20 seed errors apart, though their test intervals
    overlap), with one seed on a side by their test intervals."""
    rows = [row("best", 0.90, std=0.002, ci_low=0.85, ci_high=0.95), row("twin", 0.90, std=0.002, ci_low=0.85,
                                                                        ci_high=0.95),
            row("close", 0.86, std=0.002, ci_low=0.82, ci_high=0.90), row("spread", 0.84, std=0.2, n=5),
            row("far", 0.70, std=0.002), row("one", 0.88, std=0.0, n=1, ci_low=0.80, ci_high=0.96)]
    order = [r["recipe"] for r in board.ranked(rows)]
    assert order == ["best", "twin", "one", "close", "spread", "far"]
    assert board.ranks(rows) == ["=1", "=1", "=1", "3", "=1", "5"]  # "one" (1 seed) is not told from "close"
    assert not paired.welch_together(rows[0], rows[2]) and paired.welch_together(rows[0], rows[3])
    text = board_render.render(rows, [])
    assert "A row's rank is 1 + the number of rows with a better mean that the data tells apart from it" in text


def scored(recipe: str, hits: list, split="t", **kw) -> tuple[dict, dict]:
    """A row of accuracy whose seeds kept their per-item hits (``items.jsonl``'s line beside it)."""
    from recipe_zoo.core import items

    seeds = [items.mean_of(h) for h in hits]
    line = {"id": f"{recipe}-items", "seeds": [{"split": split if isinstance(split, str) else split[k],
                                                **x.to_json()} for k, x in enumerate(seeds)]}
    values = [float(np.mean(h)) for h in hits]
    spans = [x.interval() for x in seeds]
    return row(recipe, float(np.mean(values)), float(np.std(values, ddof=1)), n=len(hits), items=line["id"],
               ci_low=float(np.mean([lo for lo, _ in spans])), ci_high=float(np.mean([hi for _, hi in spans])),
               **kw), line


def test_paired_ranks_split_a_consistent_difference_and_keep_noise_tied():
    """Three rows scored on the same 400 test items: "worse" misses 12 items the best row gets right, on every
    seed; "noisy" misses 12 others and gets 10 of the best row's misses right. Side by side their intervals all
    overlap; paired, the consistent difference is told apart and the noise is not."""
    rng = np.random.default_rng(0)
    base = rng.random(400) < 0.8
    right, wrong = np.flatnonzero(base), np.flatnonzero(~base)
    best, worse, noisy = [], [], []
    for seed in range(3):
        hits = base.copy()
        hits[rng.choice(400, 6, replace=False)] ^= True  # each seed's own few
        best.append(hits)
        worse.append(np.where(np.isin(np.arange(400), right[:12]), False, hits))
        moved = hits.copy()
        moved[right[12:24]], moved[wrong[:10]] = False, True
        noisy.append(moved)
    (a, la), (b, lb), (c, lc) = scored("best", best), scored("noisy", noisy), scored("worse", worse)
    known = {line["id"]: line for line in (la, lb, lc)}
    rows = [c, b, a]
    assert [r["recipe"] for r in board.ranked(rows)] == ["best", "noisy", "worse"]
    unpaired = [{k: v for k, v in r.items() if k != "items"} for r in rows]
    # unpaired, Welch on the seeds: "worse" misses the same 12 items on every seed, so its seeds agree closely
    assert board.ranks(unpaired) == ["=1", "=1", "3"]
    assert board.ranks(rows, known) == ["=1", "=1", "2"]  # told apart from the best row only
    lo, hi = paired.difference(c, a, known)
    assert -0.07 < lo < hi < 0 and paired.difference(b, a, known)[0] < 0 < paired.difference(b, a, known)[1]
    text = board_render.render(rows + [row("old", 0.5, ci_low=0.45, ci_high=0.55)], [], items=[la, lb, lc])
    assert f"| 2 | worse | {board.value_text(c)} | {c['ci_low']:.4f}..{c['ci_high']:.4f} | {lo:+.4g}..{hi:+.4g} |" \
        in text
    assert "| 1 | best |" not in text and "| 4 | old |" in text and "| unpaired |" in text  # no scores: unpaired
    assert "the same draw for both" in text  # the board says what =1 means
    # scored on other items (another split) or another number of items: not paired, the unpaired rule decides
    other, lo_ = scored("other", worse, split="u")
    assert paired.difference(other, a, {**known, lo_["id"]: lo_}) is None
    # a split per seed (molecules' scaffolds): seed k of both rows on the same items, paired seed by seed
    (a2, la2), (c2, lc2) = scored("best", best, split=["s0", "s1", "s2"]), scored("worse", worse, split=["s0", "s1", "s2"])
    a2["items"], c2["items"] = "a2", "c2"
    la2["id"], lc2["id"] = "a2", "c2"
    assert paired.difference(c2, a2, {"a2": la2, "c2": lc2})[1] < 0


def test_cross_validated_runs_pair_when_every_item_is_tested_in_the_same_fold(tmp_path):
    """A run's test items are named by a digest of its split: the ``test`` part in order, or, cross-validated (no
    test part: each item tested once, in the fold its ``split.csv`` names), every item and its fold."""
    from recipe_zoo.core.splits import record_split

    def digest(name, parts):
        (tmp_path / name).mkdir()
        record_split(tmp_path / name / "split.csv", parts)
        return paired.split_digest(tmp_path / name)

    folds = {"fold0": ["a", "b"], "fold1": ["c", "d"], "fold2": ["e", "f"]}
    assert digest("one", folds) == digest("same", dict(folds)) != ""
    assert digest("moved", {"fold0": ["a", "c"], "fold1": ["b", "d"], "fold2": ["e", "f"]}) != digest("x", folds)
    assert digest("medical", {"test fold 0": ["a"], "test fold 1": ["b"]}) != ""
    single = digest("single", {"train": ["a", "b"], "validation": ["c"], "test": ["d", "e"]})
    assert single == digest("other-train", {"train": ["b", "a", "c"], "test": ["d", "e"]})  # only the test part
    assert digest("none", {"train": ["a"]}) == ""


def test_a_run_is_paired_with_the_best_row_in_its_rank_line(monkeypatch):
    """`zoo run`'s rank line pairs the run's own per-item scores with the best row's, as the board pairs rows: a
    run that misses 12 of the best row's hits is worse than it although its value lies within the best row's
    interval; one that differs by noise is not told apart; a run on other items falls back to the interval."""
    rng = np.random.default_rng(0)
    base = rng.random(400) < 0.8
    right = np.flatnonzero(base)
    best = []
    for _ in range(3):
        hits = base.copy()
        hits[rng.choice(400, 6, replace=False)] ^= True
        best.append(hits)
    a, la = scored("best", best)
    monkeypatch.setattr(paired, "lines", lambda: {la["id"]: la})
    kw = dict(benchmark="cifar10-subset", budget="5m", hardware=CPU, metric="accuracy", higher=True, rows=[a])
    worse = np.where(np.isin(np.arange(400), right[:12]), False, best[0])
    _, run_items = scored("run", [worse])
    value = float(worse.mean())
    assert "within the best row's interval" in ranking.rank_line(value, **kw)  # unpaired: inside its interval
    line = ranking.rank_line(value, **kw, run_items=run_items)
    assert "paired with the best row, 95% -0.0" in line and line.endswith(": worse than it)")
    same = best[1].copy()
    same[rng.choice(400, 4, replace=False)] ^= True
    _, run_items = scored("run2", [same])
    assert ranking.rank_line(float(same.mean()), **kw, run_items=run_items).endswith(": not told apart from it)")
    _, elsewhere = scored("run3", [worse], split="u")  # other test items: the unpaired rule
    assert "within the best row's interval" in ranking.rank_line(value, **kw, run_items=elsewhere)
    perfect, lp = scored("perfect", [np.ones(400, bool)] * 3)  # every item right on both sides: no sign of zero
    monkeypatch.setattr(paired, "lines", lambda: {lp["id"]: lp})
    _, run_items = scored("run4", [np.ones(400, bool)])
    line = ranking.rank_line(1.0, **{**kw, "rows": [perfect]}, run_items=run_items)
    assert "95% +0.0000..+0.0000: not told apart from it" in line, line


def test_a_fid_zoo_table_says_what_fid_zoo_is():
    text = board_render.render([row("diffusion/flow", 6.3, metric="test_fid_zoo", higher_is_better=False)], [])
    assert "comparable only with other `fid_zoo` values" in text
    assert "comparable only with other" not in board_render.render([row("a", 0.8)], [])


def test_rows_of_defaults_chosen_on_test_say_so():
    """A recipe whose defaults were read off a test split (its config's CHOSEN_ON_TEST) is marked on the board."""
    text = board_render.render([row("contrastive/simclr", 0.55), row("tabular/mlp", 0.5)], [])
    assert "| contrastive/simclr † |" in text and "| tabular/mlp |" in text
    assert "† contrastive/simclr: defaults chosen on test (protocol 1), kept until re-chosen on validation: " \
           "batch_size=128, read off kNN accuracy on the test queries." in text


def test_a_row_whose_recipe_changed_since_is_stale_and_not_ranked(tmp_path, monkeypatch, capsys):
    """Fingerprints at the rows' commits and at a later one: the recipe whose cases changed has its old row marked
    stale (shown, a line says why, never ranked: neither on the board nor in a run's rank line); a recipe whose only
    difference is a case that failed then (an option it did not have) stays ranked, as do rows at commits never
    fingerprinted and rows of a dirty tree."""
    def prints(commit, committed, xgb, mlp):
        return {"commit": commit, "committed": committed, "hardware": CPU,
                "recipes": {"tabular/xgb": {"xgb-wine": xgb}, "tabular/mlp": {"mlp-wine": "m1", "mlp-new": mlp}}}

    records = [prints("aaaa11111", 100, "x1", "FAILED"), prints("cccc33333", 300, "x2", "m9")]
    old_xgb = row("tabular/xgb", 0.95, commit="aaaa11111")
    rows = [old_xgb, row("tabular/xgb", 0.80, commit="cccc33333"), row("tabular/mlp", 0.90, commit="aaaa11111"),
            row("tabular/mlp", 0.85, commit="bbbb22222"), row("tabular/xgb", 0.99, commit="aaaa11111-dirty")]
    assert board.stale(old_xgb, records) == "tabular/xgb behaves differently at cccc33333 (xgb-wine changed)"
    assert board.stale({**old_xgb, "commit": "aaaa11111-copy"}, records)  # a lent machine's copy of the commit
    assert [bool(board.stale(r, records)) for r in rows] == [True, False, False, False, False]
    assert board.stale(old_xgb, records[:1]) == "" and board.stale(old_xgb, []) == ""  # nothing later to compare
    text = board_render.render(rows, [], prints=records)
    table = text.split("## cifar10-subset · accuracy · 5m")[1]
    ranks = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "tabular" in line]
    assert ranks == ["1", "2", "3", "4", "stale"], table
    assert "stale: `zoo bench tabular/xgb --seeds 3 --budget 5m` @ aaaa11111: tabular/xgb behaves differently at " \
           "cccc33333 (xgb-wine changed) (its fingerprint); not ranked until measured again." in table
    monkeypatch.setenv("ZOO_BOARD_DIR", str(tmp_path))
    board.append_rows(rows)
    board.append_rows(records, board.fingerprints_file())
    summary = {"benchmark": "cifar10-subset", "budget": "5m", "metric": "accuracy", "value": 0.97, "recipe": "r"}
    line = ranking.standing(summary, CPU, True, tmp_path / "index.sqlite")
    assert line.startswith("2 of 5 ") and "@ aaaa11111-dirty" in line  # the stale 0.95 is out: 4 rows and this run
    # a table whose only row is stale is not called empty: the line counts what the board shows there
    board.append_rows([row("tabular/xgb", 0.95, commit="aaaa11111", budget="1m")])
    line = ranking.standing({**summary, "budget": "1m"}, CPU, True, tmp_path / "index.sqlite")
    assert line.startswith("unranked: no current leaderboard rows for cifar10-subset @ 1m, AMD EPYC (2 threads) (1 "
                           "stale: measured by an earlier version of the recipe, shown on the board, not ranked)"), line
    line = ranking.standing({**summary, "budget": "2m"}, CPU, True, tmp_path / "index.sqlite")
    assert line.startswith("unranked: no leaderboard rows for cifar10-subset @ 2m, AMD EPYC (2 threads)"), line
    # zoo verify picks the best row that is ranked, never the stale 0.95 (nor the 1m table's only, stale, row)
    from recipe_zoo import verify

    every = board.load_rows()
    assert [every[n - 1]["mean"] for n in verify.select(every, [], CPU)] == [0.99]
    assert [every[n - 1]["mean"] for n in verify.select(every, ["cifar10-subset"], CPU)] == [0.99]
    assert verify.select(every, ["1"], CPU) == [1]  # named by its number: re-run as asked
    # zoo show lists the stale row with its reason, and ranks the others among the current rows only
    catalog._show_standing(registry.get("tabular/xgb"))
    shown = capsys.readouterr().out
    assert "0.9500 ± 0.0100 accuracy (n=3) on cifar10-subset @ 5m, AMD EPYC (2 threads): stale (tabular/xgb behaves " \
           "differently at cccc33333 (xgb-wine changed))" in shown, shown
    assert "0.8000 ± 0.0100 accuracy (n=3) on cifar10-subset @ 5m, AMD EPYC (2 threads): rank 4 of 4" in shown, shown


def test_the_behaviour_digest_ignores_names_and_added_metrics_and_sees_a_changed_weight(tmp_path):
    """What ``benchmarks/fingerprint.py --record`` stores for the stale check: a refactor that renames a parameter,
    reports one more metric or writes its predictions another way is the same behaviour; a changed weight or value
    is not."""
    import importlib.util
    import json
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "fingerprint.py"
    spec = importlib.util.spec_from_file_location("fingerprint", path)
    fingerprint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fingerprint)

    def run(name, weights, metrics, value=0.5, preds="row,predicted\n1,0.5\n"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps({"value": value, "status": "ok", "metrics": metrics}))
        save_file(weights, str(folder / "model.safetensors"))
        (folder / "predictions.csv").write_text(preds)
        return fingerprint.behaviour(folder)

    w, b = torch.arange(6.0).reshape(2, 3), torch.ones(3)
    base = run("base", {"w": w, "b": b}, {"test_acc": 0.5})
    assert run("renamed", {"layer.w": w, "layer.b": b}, {"test_acc": 0.5, "steps": 8},
               preds="row,predicted,prob\n1,0.5,0.9\n") == base
    assert run("weight", {"w": w + 1e-6, "b": b}, {"test_acc": 0.5}) != base
    assert run("value", {"w": w, "b": b}, {"test_acc": 0.5}, value=0.5000001) != base
