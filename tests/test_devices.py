"""The device profile sizing reads (``core.devices``), the llm depth rule on it, and ``zoo plan --recipe NAME
--budget B`` reaching a recipe's sizing rule through the registry."""
import functools
import json
import math

import pytest

from recipe_zoo.cli import main
from recipe_zoo.core import devices
from recipe_zoo.recipes.llm import gpt, sizing

SHAKESPEARE_TRAIN_TOKENS = 361_533  # tinyshakespeare's training part under the default BPE (test_llm.py)


def depth_choice(cfg: gpt.GPTConfig, train_tokens: int, seconds: float, profile) -> dict:
    """``sizing.depth_choice`` for an llm/gpt config at the default vocabulary (1,024 tokens)."""
    return sizing.depth_choice(functools.partial(gpt.shape_at, cfg, vocab=1024), train_tokens, seconds, profile,
                               **gpt.sizing_rules(cfg))


def test_a_share_is_interpolated_in_log_width_and_flat_past_the_ends():
    work = devices.Work(((768, 0.2), (2048, 0.4)), 0.04, "test")
    assert work.share(64) == 0.2 and work.share(8192) == 0.4 and work.share(None) == 0.2
    assert work.share(int(math.sqrt(768 * 2048))) == pytest.approx(0.3, abs=1e-3)
    assert devices.Work(((1, 0.5),), 0.0, "flat").share(4096) == 0.5


def test_a_cpu_step_is_its_flops_at_the_share_of_the_peak_and_processes_split_the_work():
    cpu = devices.cpu(peak=2e11, memory=8e9)
    assert cpu.latency("matmul") == 0 and not cpu.counts_optimizer("matmul")
    assert cpu.step_seconds(1e11, "matmul", 256) == pytest.approx(1e11 / (2e11 * 0.5))
    assert cpu.step_seconds(1e11, "matmul", 64) == pytest.approx(1e11 / (2e11 * 0.33))  # small matrices: less
    assert cpu.step_seconds(1e11, "conv") == pytest.approx(1e11 / (2e11 * 0.18))
    assert cpu.step_seconds(1e11, "diffusers_unet") == pytest.approx(1e11 / (2e11 * 0.24))
    two = devices.cpu(peak=2e11, processes=2, memory=8e9)
    assert two.steps(60, 1e11, "matmul") == pytest.approx(2 * cpu.steps(60, 1e11, "matmul"))


def test_a_bf16_run_on_a_cpu_is_sized_on_the_bf16_peak_and_its_shares(capsys, monkeypatch):
    """A run computing in bf16 on a CPU is sized against the bf16 matmul peak with shares scaled by the step
    speed-up measured at the same work: the predicted bf16 step rate is the fp32 one times that speed-up, whatever
    the peaks. `zoo plan` sizes for the precision the run would compute in (auto: the recipe's measured choice)."""
    import torch

    from recipe_zoo.core import flops

    monkeypatch.setattr(flops, "cpu_peak_flops", lambda *a, dtype="fp32", **k: 4e11 if dtype == "bf16" else 1.5e11)
    monkeypatch.setattr(flops, "cpu_emulates_bf16", lambda: False)  # a CPU with bf16 units, whatever this one is
    fp32, bf16 = devices.cpu(memory=1e10), devices.cpu(memory=1e10, precision="bf16")
    assert (fp32.peak, bf16.peak) == (1.5e11, 4e11) and "bf16 matmul" in bf16.peak_source
    for kind, (speedup, _) in devices.BF16_SPEEDUP.items():
        ratio = devices.BF16_SPEEDUP[kind][1]
        assert bf16.rate(kind) / fp32.rate(kind) == pytest.approx(speedup * (4e11 / 1.5e11) / ratio)
        assert devices.for_device(torch.device("cpu"), precision="bf16").share(kind) == bf16.share(kind)
    assert devices.cpu(memory=1e10, precision="fp16").work == fp32.work  # fp16 runs no faster than fp32 on a CPU
    for given, dtype in (["precision=bf16"], "bf16"), ([], "fp32"):
        assert main(["plan", "--recipe", "diffusion/flow", "data=digits", "--budget", "60s", "--device", "cpu",
                     *given]) == 0
        assert f"(measured: {dtype} matmul 2048)" in capsys.readouterr().out.splitlines()[0]
    monkeypatch.setattr(flops, "cpu_emulates_bf16", lambda: True)  # one without: the bounded product, named
    assert "bf16 matmul 256, emulated" in devices.cpu(memory=1e10, precision="bf16").peak_source


def test_the_h200_profile_reproduces_the_steps_it_was_calibrated_on():
    """Issue 24's H200 runs of llm/gpt (tokens/s measured): depth 6 at 4,096 tokens a step, depth 12 at 131,072
    (context 1024), depth 32 at 4,096; the profile predicts each step's time within 20%."""
    h200 = devices.gpu("NVIDIA H200")
    assert h200.peak == 989.5e12 and h200.peak_source.startswith("datasheet") and h200.counts_optimizer("matmul")
    for depth, seq_len, batch_tokens, tokens_per_s in ((6, 256, 4096, 101e3), (12, 1024, 131072, 270e3),
                                                       (32, 256, 4096, 11.6e3)):
        cfg = gpt.GPTConfig(depth=depth, seq_len=seq_len, batch_tokens=batch_tokens)
        steps_per_second = sizing.depth_row(gpt.shape_at(cfg, depth, 1024), 10**12, 1.0, h200,
                                            **gpt.sizing_rules(cfg))["steps"]  # data: no cap
        assert 1 / steps_per_second == pytest.approx(batch_tokens / tokens_per_s, rel=0.2), depth


def test_on_an_h200_30_s_of_tinyshakespeare_buys_a_small_model_with_200_steps():
    """The flat 50% guess sized a 1.61 B model that got 86 steps there; with the latency counted the depth rule
    stays at or under 50 M parameters and 200 steps."""
    c = depth_choice(gpt.GPTConfig(), SHAKESPEARE_TRAIN_TOKENS, 30, devices.gpu("H200"))
    assert c["params"] <= 50e6 and c["steps"] >= 200, c


def test_a_gpu_with_little_data_stops_at_the_epoch_cap_and_sizes_by_the_data_not_the_budget():
    """Without the cap an hour on an H200 chose 525 M parameters for ~290 passes over tinyshakespeare (and 86 M at
    5 min); with it the run ends after epoch_cap passes, and 5 min and 1 h choose the same model, which keeps the
    tokens-per-parameter floor on the capped tokens."""
    cfg, h200 = gpt.GPTConfig(), devices.gpu("H200")
    picks = [depth_choice(cfg, SHAKESPEARE_TRAIN_TOKENS, s, h200) for s in (300, 3600)]
    for c in picks:
        assert c["capped"] and c["tokens"] < cfg.epoch_cap * SHAKESPEARE_TRAIN_TOKENS + c["batch_tokens"], c
        assert c["tokens_per_param"] >= sizing.CAPPED_TOKENS_PER_PARAM and c["steps"] >= sizing.MIN_STEPS
        assert "epoch_cap=16" in c["reason"]
    assert picks[0]["depth"] == picks[1]["depth"] and picks[0]["params"] <= 50e6
    uncapped = depth_choice(gpt.GPTConfig(epoch_cap=0), SHAKESPEARE_TRAIN_TOKENS, 3600, h200)
    assert uncapped["params"] > 200e6 and uncapped["tokens"] > 100 * SHAKESPEARE_TRAIN_TOKENS


def test_on_a_2_core_cpu_in_bf16_tinyshakespeare_buys_depth_5_at_5_minutes_for_3_passes():
    """Issue 48's measurement (5 minutes, bf16, a 417 GFLOP/s AMD EPYC): depth 5 at ~3 passes beat depth 4 at ~6.4
    and depth 6 at ~1.9 on validation. The rule takes depth 5 there (nearest max_epochs=3 passes; the token floor
    of 0.1 a parameter lets it), depth 3 at 2 minutes and 2 at 60 s as before."""
    cpu = devices.cpu(peak=4.17e11, memory=16e9, precision="bf16", compiled=True)
    picks = {s: depth_choice(gpt.GPTConfig(), SHAKESPEARE_TRAIN_TOKENS, s, cpu) for s in (60, 120, 300)}
    assert [picks[s]["depth"] for s in (60, 120, 300)] == [2, 3, 5], picks
    five = picks[300]
    assert 2.5 <= five["tokens"] / SHAKESPEARE_TRAIN_TOKENS <= 3.5 and "nearest to 3 epochs" in five["reason"]
    assert sizing.MIN_TOKENS_PER_PARAM <= five["tokens_per_param"] < sizing.CAPPED_TOKENS_PER_PARAM
    old = depth_choice(gpt.GPTConfig(max_epochs=4), SHAKESPEARE_TRAIN_TOKENS, 300, cpu)
    assert old["depth"] == 4 and old["tokens"] / SHAKESPEARE_TRAIN_TOKENS > 4.5  # the 4-pass rule's pick


def test_an_hour_on_a_large_corpus_lands_at_10_to_40_tokens_per_parameter():
    for profile in (devices.gpu("H200"), devices.cpu(peak=2.36e11, memory=8e9)):
        c = depth_choice(gpt.GPTConfig(), 2_000_000_000, 3600, profile)
        assert 10 <= c["tokens_per_param"] <= 40 and c["steps"] >= 200, (profile.name, c)


def test_a_short_budget_on_little_data_keeps_the_step_floor():
    """15 s on 100k tokens (at the 40% share of old, 10 s: the rule then chose depth 2 with ~150 steps); the floor
    keeps 200."""
    c = depth_choice(gpt.GPTConfig(), 100_000, 15, devices.cpu(peak=1.56e11, memory=8e9))
    assert c["steps"] >= sizing.MIN_STEPS and c["tokens_per_param"] >= sizing.MIN_TOKENS_PER_PARAM


def test_the_batch_leaves_latency_a_small_share_of_a_step_and_keeps_the_step_floor():
    """batch_tokens=0: on a CPU (no fixed latency) 4,096, every CPU row's batch; on an H200 the GPT-2-small shape's
    smallest batch whose step is at most a quarter latency, or the largest keeping 200 steps in a short budget or
    under the epoch cap. micro_batch=0: the step in one pass when its activations fit in half the memory, else a
    power of two that does; the activation estimate matches issue 24's measured peaks (21.8 GB at 32 x 1,024)."""
    cpu, h200 = devices.cpu(peak=2.36e11, memory=16e9), devices.gpu("H200")
    gpt2 = gpt.shape_at(gpt.GPTConfig(seq_len=1024), 12, 1024)
    small = gpt.shape_at(gpt.GPTConfig(), 4, 1024)
    assert sizing.batch_choice(gpt2, 300, cpu)[0] == sizing.batch_choice(small, 30, cpu)[0] == 4096
    assert sizing.micro_batch_choice(small, 4096, cpu)[0] == 16  # the CPU's runs are as before
    batch, why = sizing.batch_choice(gpt2, 300, h200)
    t = sizing.step_seconds(gpt2, batch, h200)
    assert batch > 4096 and h200.latency("matmul") <= sizing.LATENCY_SHARE * t < 2 * h200.latency("matmul")
    assert 300 / t >= sizing.MIN_STEPS and "at most 25% fixed latency" in why
    short, why = sizing.batch_choice(gpt2, 30, h200)
    assert short < batch and 30 / sizing.step_seconds(gpt2, short, h200) >= sizing.MIN_STEPS > \
        30 / sizing.step_seconds(gpt2, 2 * short, h200) and "keeps 200 steps" in why
    capped = sizing.batch_choice(gpt2, 3600, h200, max_tokens=200 * 8192)[0]
    assert capped == 8192
    assert sizing.bytes_per_token(gpt2) == pytest.approx(21.8e9 / (32 * 1024), rel=0.1)
    micro, why = sizing.micro_batch_choice(gpt2, 131072, h200)
    fits = lambda m: m * 1024 * sizing.bytes_per_token(gpt2) <= sizing.MEMORY_SHARE * h200.memory  # noqa: E731
    assert micro < 128 and fits(micro) and not fits(2 * micro) and micro & (micro - 1) == 0
    assert sizing.micro_batch_choice(gpt2, 32768, h200) == (32, "the step's sequences in one pass")


def test_a_run_with_the_batch_left_to_the_device_says_what_it_chose_and_predicts_with_it(tmp_path, capfd):
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(600)))
    args = [f"data={text}", "depth=1", "aspect=32", "head_dim=16", "seq_len=32", "vocab_size=300", "eval_bytes=2000",
            "samples=0", "compile=false"]
    assert main(["run", "llm/gpt", *args, "--budget", "2steps", "--out", str(tmp_path / "runs")]) == 0
    out = capfd.readouterr().out
    assert "batch_tokens=0: 4,096 tokens a step" in out and "micro_batch=0: 128 sequences of 32 a pass" in out
    run_dir = next((tmp_path / "runs" / "llm" / "gpt").iterdir())
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    assert (metrics["batch_tokens"], metrics["micro_batch"], metrics["tokens"]) == (4096, 128, 2 * 4096)
    assert json.loads((run_dir / "config.json").read_text())["config"]["micro_batch"] == 0
    assert main(["predict", str(run_dir), "--out", str(tmp_path / "pred"), "--device", "cpu"]) == 0  # the card's


def test_zoo_plan_prints_what_llm_gpt_would_choose_on_a_gpu_and_here(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(3000)))
    assert main(["plan", "--recipe", "llm/gpt", f"data={text}", "vocab_size=300", "eval_bytes=10000", "--budget", "30s",
                 "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    assert "llm/gpt for 30s on H200" in out and "datasheet" in out
    for label in ("shape:", "batch:", "parameters:", "steps:", "throughput:", "per parameter:", "why:"):
        assert label in out, label
    steps = int(out.split("steps:")[1].split()[0].replace(",", ""))
    # 41,311 tokens: 16 passes (the cap, reached by every depth up to the one chosen) are 162 steps of 4,096
    assert steps == 162 and "epoch_cap=16" in out and "16.1 epochs" in out
    assert main(["plan", "--recipe", "llm/gpt", f"data={text}", "vocab_size=300", "eval_bytes=10000", "depth=2",
                 "--budget", "1m", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "depth 2," in out and "depth set by you" in out and "measured" in out


def plan_lines(capsys) -> dict:
    return {line.split(":")[0].strip(): line.split(":", 1)[1].strip()
            for line in capsys.readouterr().out.splitlines()[1:] if ":" in line}


def test_zoo_plan_prints_the_width_a_diffusion_run_would_choose(capsys, monkeypatch):
    """The hook's width is choose_width's on the same profile (the rule a run calls); an H200 buys a wider net
    than a 2-core CPU in the same 60 s. The CPU's peak is given (150 GFLOP/s, about this 2-core EPYC's), not
    measured: a busy or slower machine would measure less and choose another width."""
    import torch

    from recipe_zoo.core import flops
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.recipes.diffusion import ddpm, models

    monkeypatch.setattr(flops, "cpu_peak_flops", lambda *a, **k: 1.5e11)
    widths = {}
    for device in (["--device", "cpu"], ["--gpu", "H200"]):
        assert main(["plan", "--recipe", "diffusion/flow", "data=digits", "--budget", "60s", *device]) == 0
        lines = plan_lines(capsys)
        widths[device[-1]] = int(lines["shape"].split("(")[1].split(",")[0])
        assert lines["why"].startswith("the widest") and lines["why"].endswith("gets min_steps=300")
        assert "images a step" in lines["batch"] and "training images" in lines["data"]
        assert float(lines["steps"].split()[0].replace(",", "")) >= ddpm.DiffusionConfig().min_steps
    cfg = ddpm.DiffusionConfig(data="digits", method="flow")
    assert widths["cpu"] == models.choose_width(cfg, parse_budget("60s"), 1, 8, 10, torch.device("cpu"),
                                                lambda *a: None)[0]
    assert widths["H200"] > widths["cpu"]
    slow = devices.cpu(peak=1e9, memory=1e10)  # 1 GFLOP/s: no width gets min_steps in 60 s
    assert models.width_choice(cfg, 60.0, 1, 8, 10, slow)[::2] == (8, "the narrowest on offer: no width gets "
                                                                     "min_steps=300")
    fast = devices.cpu(peak=1e15, memory=1e10)
    assert models.width_choice(cfg, 60.0, 1, 8, 10, fast)[::2] == (128, "the widest on offer (128) gets "
                                                                      "min_steps=300")


def test_a_compiled_conv_run_is_sized_on_the_speed_up_compile_measured(capsys, monkeypatch):
    """medical/unet compiles by default: on a CPU its share (fp32's and bf16's) is the eager one times the measured
    speed-up (diffusion's is not scaled, llm/gpt's matmul share was measured compiled), and `zoo plan` says which
    share it sized with."""
    from recipe_zoo.core import flops

    eager, compiled = devices.cpu(peak=1.5e11, memory=1e10), devices.cpu(peak=1.5e11, memory=1e10, compiled=True)
    assert compiled.share("conv") == pytest.approx(eager.share("conv") * devices.COMPILE_SPEEDUP["conv"])
    assert devices.COMPILE_SPEEDUP["conv"] > 1.1
    assert compiled.work["matmul"] == eager.work["matmul"] and compiled.work["diffusers_unet"] == eager.work[
        "diffusers_unet"]
    bf16 = devices.cpu(peak=3e11, memory=1e10, precision="bf16")
    bf16_compiled = devices.cpu(peak=3e11, memory=1e10, precision="bf16", compiled=True)
    assert bf16_compiled.share("conv") == pytest.approx(bf16.share("conv") * devices.COMPILE_SPEEDUP["conv"])
    assert bf16_compiled.work["matmul"] == bf16.work["matmul"]
    monkeypatch.setattr(flops, "cpu_peak_flops", lambda *a, **k: 1.5e11)
    heads = {}
    for setting in ("compile=true", "compile=false"):
        assert main(["plan", "--recipe", "medical/unet", setting, "--budget", "60s", "--device", "cpu"]) == 0
        heads[setting] = capsys.readouterr().out.splitlines()[0]
    assert f"conv reaches {compiled.share('conv'):.0%}" in heads["compile=true"]
    assert f"conv reaches {eager.share('conv'):.0%}" in heads["compile=false"]


def test_zoo_plan_prints_the_medical_plan_fold_0_would_make(capsys, monkeypatch):
    from recipe_zoo.core import flops

    monkeypatch.setattr(flops, "cpu_peak_flops", lambda *a, **k: 1.5e11)  # given, as above: not this CPU's mood
    assert main(["plan", "--recipe", "medical/unet", "--budget", "60s", "--device", "cpu"]) == 0
    cpu = plan_lines(capsys)
    assert main(["plan", "--recipe", "medical/unet", "--budget", "60s", "--gpu", "H200"]) == 0
    gpu = plan_lines(capsys)
    assert "from width 16" in cpu["shape"] and "from width 32" in gpu["shape"]  # nnU-Net-style width per device
    assert "patches a step" in cpu["batch"] and "fold 0 trains on" in cpu["data"]
    assert main(["plan", "--recipe", "medical/swinunetr", "width=24", "--budget", "30s", "--device", "cpu"]) == 0
    assert "set by you: width" in plan_lines(capsys)["why"]


def test_the_summary_says_what_mfu_is_a_share_of():
    import torch

    from recipe_zoo.core.flops import peak_label

    label = peak_label(torch.device("cpu"), 1.8e11)
    assert label.startswith("180 GFLOP/s") and "matmul measured on this CPU" in label


@pytest.mark.parametrize("args, needle", [
    (["plan", "--recipe", "tabular/xgb", "--budget", "30s"], "no sizing rule"),
    (["plan", "--recipe", "llm/gpt", "--budget", "30s", "--device", "tpu"], "--device tpu"),
    (["plan", "--recipe", "llm/gpt", "--budget", "30s", "--gpu", "TPUv9"], "--gpu TPUv9"),
    (["plan", "--recipe", "llm/gpt", "--budget", "30s", "--gpu", "H200", "--device", "cpu"], "one device"),
    (["plan", "--params", "1B", "--budget", "30s"], "--budget goes with --recipe"),
    (["plan", "--recipe", "llm/gpt", "--budget", "300steps"], "time budget"),
    (["plan", "--recipe", "llm/gpt", "--budget", "soon"], "budget 'soon'"),
    (["plan", "--recipe", "tabular/xgb", "depth=3"], "no transformer shape"),
])
def test_plan_sizing_refuses_bad_input_in_one_line(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_a_gpu_batch_never_outgrows_a_small_training_split():
    """tinyshakespeare's 361,533 training tokens hold 1,411 windows of 256: an H200's chosen step (up to 524,288
    tokens) and micro-batch (2,048 sequences) would not fit one epoch, and the run would stop; both are capped."""
    from recipe_zoo.core.budget import parse_budget
    from recipe_zoo.recipes.llm import models, sizing

    shape = models.GPTShape.from_depth(4, 1024, aspect=64, head_dim=64, kv_heads=0, seq_len=256, mlp="relu2",
                                       softcap=15.0)
    h200, windows = devices.gpu("H200"), (361_533 - 1 - 256) // 256
    assert sizing.batch_choice(shape, None, h200)[0] == 524_288  # a step budget: no time or epoch cap on the batch
    batch, micro = sizing.batch_sizes(shape, parse_budget("300steps"), h200, 361_533, batch_tokens=0, micro_batch=0,
                                      epoch_cap=16.0, log=lambda line: None)
    assert (batch, micro) == (262_144, 1024) and batch // 256 <= windows
