"""Reference runs at fixed work: each pins what a device would choose, plans the same on a 2-core CPU and an H200,
is ranked with every machine's rows, has a speed view, verifies across machines, and tells a newcomer how to rank."""
import dataclasses
import json

import pytest

from conftest import summary_block, zoo_in_process
from recipe_zoo import board, board_render, board_rows, config, ranking, references, registry, runs
from recipe_zoo.core import devices
from recipe_zoo.core.budget import parse_budget

AMD = "AMD EPYC [family 25 model 17 stepping 1, AVX-512 BF16] (2 threads)"
INTEL = "Intel(R) Xeon(R) Processor [family 6 model 167 stepping 1, AMX] (2 threads)"
H200 = "NVIDIA H200 x1"


def resolved(ref):
    spec = registry.get(ref.recipe)
    return spec, config.build(spec.config, spec.defaults, None, ref.overrides, spec.name)


@pytest.mark.parametrize("ref", references.REFERENCES, ids=lambda r: f"{r.recipe}@{r.benchmark}")
def test_a_reference_pins_every_device_choice_and_names_its_benchmark(ref):
    from recipe_zoo.data import benchmark_key

    spec, cfg = resolved(ref)
    assert parse_budget(ref.work).kind in ("steps", "epochs") and board.fixed_work(ref.work)
    pinned = config.parse_overrides(ref.overrides)
    assert set(getattr(spec.config, "DEVICE_FIELDS", ())) <= set(pinned), "a device would choose the rest"
    assert "data" in pinned and benchmark_key(cfg.data) + runs.key_suffix(cfg) == ref.benchmark
    if hasattr(cfg, "precision"):  # fp32 with TF32 off: the same arithmetic on every machine (bf16 is emulated on
        assert (pinned.get("precision"), cfg.tf32) == ("fp32", False)  # most CPUs, 10.7x slower on a Zen 3)
    if getattr(config.build(spec.config, spec.defaults, None, [], spec.name), "compile", False):
        assert "compile" in pinned  # a recipe that compiles by default (its rows may predate the default)
    assert references.find(ref.recipe, ref.benchmark) is ref
    assert references.config_hash(ref) == references.config_hash(dataclasses.replace(ref))  # no clock, no machine


def test_each_board_benchmark_and_digits_has_a_reference():
    assert {"digits", "cifar10-subset", "tinyshakespeare", "isbi2012-membrane", "mnist"} <= {
        r.benchmark for r in references.REFERENCES}
    assert len({(r.recipe, r.benchmark) for r in references.REFERENCES}) == len(references.REFERENCES)


def test_the_sizing_rules_choose_the_same_on_a_2_core_cpu_and_an_h200():
    """What the device-reading rules return for the pinned settings: the same on both profiles (a time budget
    would give the H200 a wider net, another batch, another patch)."""
    from recipe_zoo.recipes.diffusion.models import choose_width
    from recipe_zoo.recipes.llm import gpt, sizing
    from recipe_zoo.recipes.medical import plan as medical_plan
    from recipe_zoo.recipes.medical.unet import plan_settings

    cpu, h200 = devices.cpu(peak=180e9, memory=20e9), devices.gpu("H200")
    _, llm = resolved(references.find("llm/gpt", "tinyshakespeare"))
    shape = gpt.shape_at(llm, llm.depth, 1024)
    work = parse_budget(references.find("llm/gpt").work)
    choices = [sizing.batch_sizes(shape, work, p, 361_533, batch_tokens=llm.batch_tokens, micro_batch=llm.micro_batch,
                                  epoch_cap=llm.epoch_cap, log=lambda line: None) for p in (cpu, h200)]
    assert choices[0] == choices[1] == (4096, 16)
    assert sizing.batch_sizes(shape, parse_budget("5m"), h200, 361_533, batch_tokens=0, micro_batch=0,
                              epoch_cap=llm.epoch_cap, log=lambda line: None) != choices[0]  # unpinned: it differs

    ref = references.find("diffusion/flow", "mnist")
    _, flow = resolved(ref)
    widths = {choose_width(flow, parse_budget(ref.work), 1, 28, 10, p, lambda *a, **k: None)[0] for p in (cpu, h200)}
    assert widths == {16}

    ref = references.find("medical/unet", "isbi2012-membrane")
    _, unet = resolved(ref)
    fp = {"cases": 20, "channels": 1, "spatial_dims": 2, "median_shape": [512, 512], "min_shape": [512, 512],
          "max_shape": [512, 512], "total_voxels": 20 * 512 * 512, "median_spacing": [1.0, 1.0], "anisotropy": 1.0,
          "intensity_fg": {"mean": 0.0, "std": 1.0, "p00_5": -2.0, "p99_5": 2.0},
          "class_fraction": {"background": 0.8, "membrane": 0.2}, "modality": "EM"}
    keys = ("dims", "width", "levels", "patch", "batch_size", "normalize", "spacing")
    plans = [medical_plan.make_plan(fp, plan_settings(unet), p, parse_budget(ref.work), lambda d, l, w: (1e4, 100.0))
             for p in (cpu, h200)]
    assert {k: plans[0][k] for k in keys} == {k: plans[1][k] for k in keys}
    assert plans[0]["patch"] == [128, 256] and plans[0]["batch_size"] == 3 and plans[0]["width"] == 16


def fixed(recipe, mean, hardware, precision="fp32", budget="1500steps", **kw):
    return {"protocol": 2, "benchmark": "cifar10-subset", "split": "test/", "metric": "test_accuracy",
            "higher_is_better": True, "recipe": recipe, "mean": mean, "std": 0.003, "n": 3, "budget": budget,
            "hardware": hardware, "precision": precision, "train_seconds": 300.0, "commit": "abc1234",
            "date": "2026-12-03", "command": f"zoo bench {recipe} --reference --seeds 3", **kw}


def test_a_reference_table_admits_only_rows_that_trained_the_reference_s_configuration():
    """The row's resolved configuration (what its runs' config.json held) must agree with the reference's on every
    field both have: a pinned setting (tf32, compile) or a default changed since (the head's dropout) puts the row
    in the table of its work instead; a row whose configuration is not known is named so and never admitted; a
    field only one side has (added or removed since) does not count."""
    ref = references.find("protein/esm-embed", "tem1-esm2-8m:split=positions")
    same = references.resolved_config(ref)
    row = fixed(ref.recipe, 0.40, AMD, budget=ref.work, benchmark=ref.benchmark,
                overrides=config.parse_overrides(ref.overrides), config=same)
    assert references.in_table(row) and references.of_row(row) == ref and board.row_name(row) == \
        "protein/esm-embed (reference)"
    older = {k: v for k, v in same.items() if k != "esm_sha256"}  # a field added since: still the reference
    assert references.in_table({**row, "config": {**older, "retired_field": 1}})
    for key, value in (("dropout", 0.1), ("tf32", True), ("lr", 0.01)):
        other = {**row, "config": {**same, key: value}}
        assert not references.in_table(other) and references.of_row(other) is None, key
        assert references.disagreement(other, ref) == f"{key}={value!r} (the reference's {same[key]!r})"
        assert board.table_key(other)[4:] == (ref.work, "fp32")  # its work's table, every machine
    unet = references.find("medical/unet", "isbi2012-membrane")
    planned = fixed(unet.recipe, 0.81, AMD, budget=unet.work, benchmark=unet.benchmark,
                    config={**references.resolved_config(unet), "min_steps": 600})  # a sizing input: width etc. pinned
    assert references.in_table(planned) and not references.in_table({**planned, "config": {
        **planned["config"], "width": 32}})
    unknown = {k: v for k, v in row.items() if k != "config"}
    assert not references.in_table(unknown) and board.row_name(unknown).endswith(" (configuration unknown)")
    assert references.hash_config(ref.recipe, ref.work, same) == references.config_hash(ref)


def test_reference_rows_of_every_machine_share_their_benchmark_table():
    """A row that trained its recipe's reference is in the benchmark's reference table whatever machine measured
    it; a variant at that work gets the table of its work and precision (every machine), as other work budgets
    do; a time budget stays on its hardware."""
    ref = references.find("vision/resnet", "cifar10-subset")
    pinned, same = config.parse_overrides(ref.overrides), references.resolved_config(ref)
    rows = [fixed("vision/resnet", 0.826, AMD, overrides=pinned, config=same),
            fixed("vision/resnet", 0.829, INTEL, overrides=pinned, config=same),
            fixed("vision/resnet", 0.80, H200, overrides={**pinned, "lr": "0.1"}, config={**same, "lr": 0.1}),
            fixed("x", 0.81, AMD), fixed("vision/resnet", 0.70, AMD, precision="bf16"),
            fixed("z", 0.75, AMD, budget="5m")]
    tables = board.group(rows)
    assert [(k[4], k[5], len(t)) for k, t in tables.items()] == [
        ("1500steps", "bf16", 1), ("1500steps", "fp32", 2), ("reference", "every machine", 2), ("5m", AMD, 1)]
    kw = dict(benchmark="cifar10-subset", budget="1500steps", metric="test_accuracy", higher=True, rows=rows)
    line = ranking.rank_line(0.827, hardware="a laptop nobody measured (8 threads)", precision="fp32",
                             recipe="vision/resnet", config=same, **kw)
    assert line.startswith("2 of 3 on cifar10-subset @ 1500steps (the reference table, fp32), every machine")
    assert ranking.rank_line(0.71, hardware="any", precision="bf16", recipe="vision/resnet", **kw).startswith("1 of 2")
    assert ranking.rank_line(0.9, hardware="any", precision="fp32", recipe="x", **kw).startswith(
        "1 of 3 on cifar10-subset @ 1500steps (fp32), every machine")
    assert ranking.rank_line(0.7, hardware="any", precision="fp16", recipe="y", **kw).startswith("unranked")

    speed = [{"benchmark": "cifar10-subset", "budget": "1500steps", "precision": "fp32", "recipe": "vision/resnet",
              "overrides": pinned, "config": same, "hardware": hw, "n": 3, "train_seconds": s,
              "throughput": 256 * 1500 / s, "unit": "samples/s", "mfu_percent": 60.0, "mfu_of": "a fp32 matmul",
              "commit": "abc1234", "date": "2026-12-03"} for hw, s in ((AMD, 312.0), (H200, 4.0))]
    text = board_render.render(rows, [], [], speed)
    table = text.split("## cifar10-subset · test_accuracy · reference runs · every machine")[1].split("\n## ")[0]
    short = board_rows.short_hardware
    assert f"| {short(AMD)} |" in table and f"| {short(INTEL)} |" in table  # the cell short, the details line whole
    assert short(AMD) == "AMD EPYC 25/17, AVX-512 BF16 (2 threads)" and f"; {AMD}; " in table
    assert "| =1 | vision/resnet (reference) † | 1500steps, fp32 | 0.8290 ± 0.0030 |" in table
    assert "Speed of the work per machine" in table
    assert f"| vision/resnet (reference) | 1500steps, fp32 | {short(AMD)} | 3 | 312.0 | 1,231 samples/s | " \
           "60.0% of a fp32 matmul |" in table
    assert "Reference: `zoo run vision/resnet --reference`" in table
    assert "Not measured yet: `zoo bench contrastive/simclr --reference`" in table
    assert text.index("# Reference tables") < text.index("reference runs · every machine") < text.index(
        "## cifar10-subset · test_accuracy · 1500steps of work · fp32") < text.index("# Time budgets")
    assert "## tinyshakespeare · reference runs · every machine" in text
    assert "Not measured yet: `zoo bench llm/gpt --reference`" in text


def test_a_time_budget_run_with_no_table_here_is_told_its_work_and_the_reference_that_ranks_it():
    summary = {"benchmark": "cifar10-subset", "recipe": "vision/resnet", "budget": "5m", "train_seconds": 300.0,
               "metrics": {"steps": 1200}, "extra": {"precision": "bf16"}}
    hint = ranking.reference_hint(summary, "a machine with no rows")
    assert hint == ("; this run did 1,200 steps in 300 s; to rank on every machine: zoo run vision/resnet --reference "
                    "(1500steps) (about 6.2 min of training here, from this run's step rate in bf16; the reference "
                    "trains in fp32)")
    assert ranking.reference_hint(dict(summary, recipe="vision/convnext"), "x") == "; this run did 1,200 steps in 300 s"
    llm = dict(summary, recipe="llm/gpt", benchmark="tinyshakespeare", metrics={"steps": 150, "tokens": 614_400})
    assert ranking.reference_hint(llm, "x").startswith("; this run did 150 steps (614,400 tokens) in 300 s; to rank on "
                                                        "every machine: zoo run llm/gpt --reference (300steps)")
    # llm/gpt's reference pins fp32: a bf16 run's step rate is named as such, not passed off as the reference's
    assert ranking.reference_hint(llm, "x").endswith("(about 10.0 min of training here, from this run's step rate in "
                                                     "bf16; the reference trains in fp32)")


def test_reference_flags_refuse_what_does_not_go_together():
    for args, needle in ((["run", "vision/resnet", "--reference", "--budget", "5m"], "a reference run's work is fixed"),
                         (["run", "vision/resnet", "--reference", "mnist"], "has references on digits, cifar10-subset"),
                         (["run", "llm/lora", "--reference"], "llm/lora has no reference run"),
                         (["bench", "vision/resnet", "--speed"], "--speed measures a reference run"),
                         (["bench", "--reference", "nowhere"], "--reference nowhere: no reference runs on it")):
        proc = zoo_in_process(*args)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)


@pytest.mark.slow
def test_a_reference_row_ranks_on_any_machine_its_speed_is_added_and_it_verifies_across_machines(tmp_path,
                                                                                                monkeypatch):
    """A tiny reference (a narrow vision/resnet on digits, 10 steps): `zoo bench --reference` writes the quality row
    and its speed row; `--speed` adds a speed row only; a run of the reference on this machine is ranked in the
    same table as a row measured on another; `zoo verify` re-runs that row with 3 seeds (a row of one seed from
    another machine is not re-run)."""
    key = "digits"
    ref = references.Reference(key, "vision/resnet", "10steps", ("data=digits", "width=8", "eval_every=0",
                                                                 "precision=fp32", "tf32=false"))
    monkeypatch.setattr(references, "REFERENCES", (ref,))
    out = tmp_path / "runs"
    proc = zoo_in_process("bench", "vision/resnet", "--reference", key, "--seeds", "1", "--out", out, "--allow-dirty")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = board.load_rows()
    (speed,) = board.load_rows(board.speed_file())
    assert row["budget"] == speed["budget"] == "10steps" and row["precision"] == speed["precision"] == "fp32"
    assert speed["hardware"] == row["hardware"] and speed["train_seconds"] > 0 and speed["unit"] == "samples/s"
    assert row["command"] == f"zoo bench vision/resnet --reference {key} --seeds 1" and references.of_row(row) == ref
    assert row["config_hash"] == speed["config_hash"] == references.config_hash(ref)  # as its runs' config.json
    assert zoo_in_process("bench", "vision/resnet", "--reference", key, "--speed", "--out", out,
                          "--allow-dirty").returncode == 0
    assert len(board.load_rows()) == 1 and len(board.load_rows(board.speed_file())) == 2  # never a quality row
    text = (board.board_dir() / "leaderboard.md").read_text()
    assert f"## {key} · test_accuracy · reference runs · every machine" in text
    assert "Speed of the work per machine" in text and "| vision/resnet (reference) | 10steps, fp32 |" in text

    elsewhere = dict(row, hardware=INTEL, date="2026-01-01", n=3, std=0.01)  # as if measured on another CPU
    board.append_rows([elsewhere, dict(elsewhere, date="2026-01-02", n=1)])
    proc = zoo_in_process("run", "vision/resnet", "--reference", key, "--out", out, "--seed", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"of 4 on {key} @ 10steps (the reference table, fp32), every machine" in summary_block(proc.stdout)["rank"]
    proc = zoo_in_process("verify", "3", "--out", out, "--allow-dirty")
    assert proc.returncode == 0 and f"measured on {INTEL} with 1 seed(s)" in proc.stdout and "not re-run" in proc.stdout
    proc = zoo_in_process("verify", "2", "--out", out, "--allow-dirty")  # --seeds 1 asked: 3 run, as for any machine
    assert f"running 3 seed(s) (measured on {INTEL})" in proc.stdout, proc.stdout[-2000:]
    assert "row 2: holds" in proc.stdout or "row 2: FAILS" in proc.stdout, proc.stdout[-2000:]
    (check,) = board.load_rows(board.checks_file())
    assert check["hardware"] != INTEL and check["n"] == 3 and "dirty" in check
    assert f"on {check['hardware']} @ {check['commit']}" in (board.board_dir() / "leaderboard.md").read_text()


def test_own_data_board_groups_runs_by_their_key_fields(tmp_path):
    """`zoo board --data FILE` lists runs keyed own:HASH:target=NAME (a named target) rather than missing them."""
    import numpy as np

    rng = np.random.default_rng(0)
    table = tmp_path / "t.csv"
    x = rng.normal(size=(200, 2))
    table.write_text("a,b,y,z\n" + "".join(f"{a:.4f},{b:.4f},{a + b:.4f},{a - b:.4f}\n" for a, b in x))
    out = tmp_path / "runs"
    for target in ("y", "z"):
        proc = zoo_in_process("run", "tabular/mlp", f"data={table}", f"target={target}", "--budget", "5steps",
                              "--out", out)
        assert proc.returncode == 0, proc.stderr[-2000:]
    listing = zoo_in_process("board", "--data", table, "--out", out)
    assert listing.returncode == 0, listing.stderr
    from recipe_zoo.core.datasets import own_data_key

    key = own_data_key(table)
    assert f"## {key}:target=z · test_rmse · 5steps" in listing.stdout
    assert "no finished runs" not in listing.stdout and listing.stdout.count("| 1 | tabular/mlp") == 2


def test_make_demo_runs_the_digits_reference_and_is_ranked_on_a_machine_with_no_row():
    """The Makefile's demo is the digits reference; on a machine on no row it still gets `k of n on digits`."""
    assert "zoo run vision/resnet --reference digits" in (runs.CODE_DIR / "Makefile").read_text()
    ref = references.find("vision/resnet", "digits")
    same = references.resolved_config(ref)
    rows = [dict(fixed("vision/resnet", 0.99, INTEL, budget=ref.work, config=same), benchmark="digits")]
    line = ranking.rank_line(0.995, benchmark="digits", budget=ref.work, hardware="a machine on no row",
                             metric="test_accuracy", higher=True, rows=rows, precision="fp32", recipe="vision/resnet",
                             config=same)
    assert line.startswith(f"1 of 2 on digits @ {ref.work} (the reference table, fp32), every machine")


def test_a_reference_run_says_what_it_expands_to_and_why_every_machine_joins_its_table(capsys):
    from recipe_zoo.train_commands import with_reference

    overrides, work = with_reference(registry.get("vision/resnet"), "digits", ["width=8"], None)
    assert (overrides, work) == (["data=digits", "precision=fp32", "tf32=false", "width=8"], "2000steps")
    assert capsys.readouterr().out == (
        "reference: zoo run vision/resnet --budget 2000steps data=digits precision=fp32 tf32=false (fp32 with TF32 "
        "off on every machine: the same arithmetic everywhere, so this run joins the digits reference table whatever "
        "this machine is)\n")


def test_rows_from_a_lent_gpu_are_imported_and_recorded_as_cross_hardware_checks(tmp_path):
    """benchmarks/gpu_references.py --import: the rows that came back are appended, and a new reference row of 3
    seeds verifies each row of the same reference from other hardware with 3 seeds (zoo verify's rule), and only
    those."""
    import subprocess
    import sys

    ref = references.find("vision/resnet", "cifar10-subset")
    pinned = config.parse_overrides(ref.overrides)
    same = references.resolved_config(ref)
    cpu = fixed("vision/resnet", 0.8275, AMD, overrides=pinned, values=[0.826, 0.827, 0.8295], config=same)
    board.append_rows([cpu, dict(cpu, n=1, date="2026-12-01"),
                       dict(cpu, overrides={**pinned, "lr": "0.1"}, config={**same, "lr": 0.1})])
    back = tmp_path / "back"
    back.mkdir()
    gpu = dict(cpu, hardware=H200, mean=0.8253, std=0.0011, values=[0.824, 0.8255, 0.8264], dirty=False,
               commit="cbc99d4eb-copy", train_seconds=None, date="2026-12-04")
    far = dict(gpu, mean=0.70, values=[0.70, 0.70, 0.70], std=0.0, recipe="vision/resnet", budget="2000steps")
    (back / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (gpu, far)))
    script = board.CODE_DIR / "benchmarks" / "gpu_references.py"
    proc = subprocess.run([sys.executable, str(script), "--import", str(back)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(board.load_rows()) == 5
    (check,) = board.load_rows(board.checks_file())  # the 1-seed row and the variant are not checked
    assert check["number"] == 1 and check["hardware"] == H200 and check["passed"] and check["n"] == 3
    assert check["tolerance"] == pytest.approx(2 * (0.003 ** 2 / 3 + 0.0011 ** 2 / 3) ** 0.5)
    assert "row 1: holds on NVIDIA H200 x1: 0.8253 (n=3) against 0.8275" in proc.stdout
    assert "; verified: ok " in (board.board_dir() / "leaderboard.md").read_text()  # in row 1's details line
