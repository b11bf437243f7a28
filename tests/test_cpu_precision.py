"""precision=auto on CPUs: bf16 for the recipes measured to gain from it, on CPUs measured to compute bf16 natively;
the precision a run resolved to is recorded (config.json, the card, the checkpoint) and MFU is a share of the peak
of the dtype it computes in. The CPU's figures are faked here: no verdict depends on this machine's speed."""
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conftest import roundtrip, summary_block
from recipe_zoo.cli import main
from recipe_zoo.core import api, flops
from recipe_zoo.core.envinfo import cpu_flags as real_cpu_flags
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.precision import resolve_precision


def fake_cpu(monkeypatch, fp32: float, bf16: float) -> None:
    """This CPU's matmul peaks, as the device profile would have measured and cached them."""
    monkeypatch.setattr(flops, "cpu_peak_flops", lambda cache_dir=None, dtype="fp32": {"fp32": fp32, "bf16": bf16}[dtype])
    monkeypatch.setattr(flops, "cpu_bf16_speedup", lambda cache_dir=None: bf16 / fp32)


ZEN3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu sse2 avx fma avx2\n"
GENOA = ZEN3.replace(": 1\n", ": 17\n").replace("avx2", "avx2 avx512f avx512_bf16")


def counted_cpu(monkeypatch, cpuinfo: str, bf16: float, fp32: float = 1.5e11) -> list:
    """A CPU of these flags whose matmuls measure ``fp32`` / ``bf16`` FLOP/s, in a cache of its own; the list
    of (size, dtype) each measurement took, filled as they are made: nothing is timed on this machine."""
    from recipe_zoo.core import envinfo

    made = []
    monkeypatch.setattr(envinfo, "cpu_flags", lambda _=None: real_cpu_flags(cpuinfo))
    monkeypatch.setattr(flops, "_measure_matmul_flops",
                        lambda n=2048, trials=4, dtype="fp32": made.append((n, dtype)) or (bf16 if dtype == "bf16"
                                                                                            else fp32))
    return made


@pytest.mark.own_cache
def test_a_cpu_without_bf16_units_resolves_auto_to_fp32_from_its_flags_without_a_measure(monkeypatch):
    """The flags of a Zen 3 (AVX2, no AVX-512 BF16 or AMX) settle it: nothing is measured. Flags that claim bf16
    units are confirmed by a bounded measure: a slow 256x256 bf16 product (kernels capped below the units, as
    ONEDNN_MAX_CPU_ISA=AVX2 does) ends it there; a fast one is checked at 1024. Each verdict is cached."""
    cpu = torch.device("cpu")
    made = counted_cpu(monkeypatch, ZEN3, bf16=1.3e9)
    assert flops.cpu_has_bf16_units() is False and flops.cpu_bf16_speedup() is None and flops.cpu_emulates_bf16()
    assert resolve_precision(cpu, "auto", "bf16") == "fp32" and made == []
    made = counted_cpu(monkeypatch, GENOA, bf16=1.3e9)
    assert resolve_precision(cpu, "auto", "bf16") == "fp32" and made == [(256, "bf16"), (256, "fp32")]
    assert resolve_precision(cpu, "auto", "bf16") == "fp32" and len(made) == 2  # cached
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")  # another kernel cap: another key, measured again
    made = counted_cpu(monkeypatch, GENOA, bf16=4e11)
    assert resolve_precision(cpu, "auto", "bf16") == "bf16"
    assert made == [(256, "bf16"), (256, "fp32"), (1024, "bf16"), (1024, "fp32")]
    assert all(n <= 1024 for n, _ in made)  # never a full-size product to decide


@pytest.mark.own_cache
def test_a_bf16_run_on_a_cpu_that_emulates_it_is_measured_against_fp32s_peak(monkeypatch):
    """precision=bf16 asked for on a CPU without bf16 units: its MFU is a share of the fp32 matmul peak, labelled
    emulated; no bf16 product larger than 256x256 is measured (a 2048 one took about a minute a trial)."""
    made = counted_cpu(monkeypatch, ZEN3, bf16=1.3e9)
    result, run = tiny_fit("bf16", 6)
    assert result.mfu_percent == pytest.approx(100 * result.flops_per_step * result.samples_per_s / 16 / 1.5e11,
                                               rel=1e-6)
    assert run.extra["mfu_of"].startswith("150 GFLOP/s, an fp32 2048x2048 matmul") and "emulated bf16" in \
        run.extra["mfu_of"]
    assert all(dtype == "fp32" for _, dtype in made)
    from recipe_zoo.core import devices

    assert devices.cpu(memory=1e10, precision="bf16").peak == 1.3e9  # sizing a bf16 run reads the bounded product
    assert made[-2:] == [(256, "bf16"), (256, "bf16")]  # a 256 probe and the 256 measure


@pytest.mark.own_cache
def test_a_measure_that_takes_more_than_two_seconds_says_so_first(monkeypatch, capsys):
    counted_cpu(monkeypatch, ZEN3, bf16=1.3e9, fp32=2e9)  # a slow fp32: 5 products of 2048 take 43 s
    assert flops.cpu_peak_flops() == 2e9
    err = capsys.readouterr().err
    assert "zoo: measuring this CPU's fp32 matmul peak (2048x2048, about 43 s; once per CPU, cached in" in err
    counted_cpu(monkeypatch, ZEN3, bf16=1.3e9)
    monkeypatch.setattr(flops, "_CHECKED", set())  # a new process: the cached figure is checked again
    assert flops.cpu_peak_flops() == 1.5e11  # measured again (the quick check beats the cache) and quickly: silent
    assert capsys.readouterr().err == ""


@pytest.mark.own_cache
def test_a_resnet_run_on_a_cpu_without_bf16_units_starts_in_fp32_after_one_fp32_measure(tmp_path, monkeypatch,
                                                                                          capsys):
    """vision/resnet's CPU choice is bf16; on a CPU whose flags show no bf16 units, precision=auto trains in fp32
    and its first step follows one fp32 peak measure (its MFU's), not a bf16 one (counted, not timed)."""
    made = counted_cpu(monkeypatch, ZEN3, bf16=1.3e9)
    code = main(["run", "vision/resnet", "data=digits", "width=8", "--budget", "2steps", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, out[-2000:] + err[-2000:]
    assert summary_block(out)["precision"] == "fp32" and made == [(512, "fp32"), (2048, "fp32")]


def tiny_fit(precision: str, steps: int, **run_options):
    """A few steps of a small classifier in the core loop at ``precision``; (the fit's result, its run)."""
    from recipe_zoo.core.batches import TensorBatches
    from recipe_zoo.core.budget import Budget
    from recipe_zoo.core.loop import LoopSettings, fit
    from recipe_zoo.core.schedule import apply_schedules, make_schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
    run = api.SimpleRun(Budget("steps", steps), log=lambda s: None, **run_options)
    result = fit(model, torch.optim.SGD(model.parameters(), lr=0.1), TensorBatches((x, y), 16, seed=0),
                 lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), run, device=torch.device("cpu"),
                 evaluate=lambda m: {}, settings=LoopSettings(precision=precision, eval_every=0, log_every=1e9),
                 update_hparams=lambda o, p, s: apply_schedules(o, p, s, lr=make_schedule("constant")))
    return result, run


@pytest.mark.parametrize("device, choice, peaks, expected", [
    ("cpu", "bf16", (1e11, 3e11), "bf16"),  # bf16 units (3x its fp32 matmul), a recipe measured to gain
    ("cpu", "bf16", (1e11, 1.2e11), "fp32"),  # bf16 barely faster here: under the 1.3x the rule asks
    ("cpu", "bf16", (1e11, 0.3e11), "fp32"),  # bf16 emulated (slower than fp32)
    ("cpu", "fp32", (1e11, 3e11), "fp32"),  # a recipe bf16 did not pay for
    ("cuda", "fp32", (1e11, 3e11), "bf16"),  # GPUs: bf16 whatever the recipe's CPU choice
])
def test_auto_resolves_to_each_choice_on_a_faked_profile(monkeypatch, device, choice, peaks, expected):
    fake_cpu(monkeypatch, *peaks)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision(torch.device(device), "auto", choice) == expected
    assert resolve_precision(torch.device(device), "fp32", choice) == "fp32"  # an explicit choice is kept
    assert resolve_precision(torch.device(device), "bf16", "fp32") == "bf16"


def test_an_older_gpu_gets_fp16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision(torch.device("cuda"), "auto", "bf16") == "fp16"


def test_mfu_is_a_share_of_the_peak_of_the_dtype_it_computes_in(monkeypatch):
    fake_cpu(monkeypatch, 1e11, 4e11)
    assert flops.peak_flops(torch.device("cpu"), "bf16") == 4e11 and flops.peak_flops(torch.device("cpu")) == 1e11
    assert flops.peak_label(torch.device("cpu"), 4e11, "bf16").startswith("400 GFLOP/s, a bf16 2048x2048 matmul")
    for precision, peak in (("fp32", 1e11), ("bf16", 4e11)):
        result, run = tiny_fit(precision, 6)
        assert result.mfu_percent == pytest.approx(100 * result.flops_per_step * result.samples_per_s / 16 / peak,
                                                   rel=1e-6)
        assert f"{'a bf16' if precision == 'bf16' else 'an fp32'} 2048x2048 matmul" in run.extra["mfu_of"]


def test_a_gpu_run_is_measured_against_the_datasheet_figure_of_what_its_matmuls_compute_in(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    gpu = torch.device("cuda")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")  # tf32=false
        assert flops.peak_flops(gpu, "fp32") == 67e12 and "plain fp32 (TF32 off)" in flops.peak_label(gpu, 67e12)
        torch.set_float32_matmul_precision("high")  # tf32=true: the tensor cores at half the bf16 rate
        assert flops.peak_flops(gpu, "fp32") == pytest.approx(989.5e12 / 2)
        assert "dense TF32" in flops.peak_label(gpu, 4.9e14, "fp32")
    finally:
        torch.set_float32_matmul_precision(before)
    assert flops.peak_flops(gpu, "bf16") == 989.5e12 and "dense bf16" in flops.peak_label(gpu, 9.9e14, "bf16")
    assert flops.gpu_peak_flops("NVIDIA H100 PCIe", "fp32") == 51e12 and flops.gpu_peak_flops("Unknown") is None


def test_a_checkpoint_resumes_only_in_the_precision_it_was_trained_in(tmp_path):
    ckpt = tmp_path / "c.pt"
    tiny_fit("bf16", 2, checkpoint_path=ckpt)
    with pytest.raises(ZooError, match=r"c\.pt: trained in bf16, resumed in fp32; resume with precision=bf16"):
        tiny_fit("fp32", 4, checkpoint_path=ckpt, resume_from=ckpt)
    assert tiny_fit("bf16", 4, checkpoint_path=ckpt, resume_from=ckpt)[0].steps == 4


@pytest.mark.parametrize("peaks, expected", [((1e11, 3e11), "bf16"), ((1e11, 0.5e11), "fp32")])
def test_the_run_records_what_auto_resolved_to_and_predict_computes_in_it(tmp_path, monkeypatch, capsys, peaks,
                                                                          expected):
    """tabular/mlp registered as if bf16 had been measured to pay for it: on a CPU with bf16 units the run computes
    in bf16 and says so in config.json, the card, the summary and the checkpoint; `zoo predict` reproduces its
    metrics in bf16. On a CPU that emulates bf16 the same recipe runs in fp32."""
    fake_cpu(monkeypatch, *peaks)
    from recipe_zoo import registry

    spec = dataclasses.replace(registry.get("tabular/mlp"), cpu_precision="bf16")
    monkeypatch.setitem(api.REGISTRY, "tabular/mlp", spec)
    code = main(["run", "tabular/mlp", "data=wine", "hidden=16", "--budget", "4steps",
                 "--out", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 0, out[-2000:] + err[-2000:]
    run_dir = Path(summary_block(out)["run_dir"])
    assert summary_block(out)["precision"] == expected
    assert json.loads((run_dir / "config.json").read_text())["config"]["precision"] == expected
    assert json.loads((run_dir / "model.json").read_text())["precision"] == expected
    assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["precision"] == expected
    roundtrip(run_dir)


def test_the_recipes_measured_to_gain_from_bf16_are_the_ones_registered_for_it(capsys):
    """precision=auto picks bf16 on a CPU only for the recipes benchmarks/cpu_precision.py measured >= 1.3x faster
    with validation no worse (their registrations give the figures); `zoo show` says which."""
    from recipe_zoo import registry

    chosen = {name for name, spec in registry.load_all().items() if spec.cpu_precision == "bf16"}
    assert chosen == {"vision/resnet", "contrastive/simclr", "contrastive/byol", "llm/gpt"}
    assert main(["show", "contrastive/simclr"]) == 0
    assert "on a CPU bf16 where its bf16 matmul" in capsys.readouterr().out


@pytest.mark.parametrize("recipe, args", [
    ("contrastive/simclr", ["width=8", "proj_hidden=32"]),
    ("contrastive/byol", ["width=8", "proj_hidden=32", "batch_size=16"]),
    ("vision/resnet", ["width=8"]),
    ("llm/gpt", ["depth=1", "aspect=32", "head_dim=16", "seq_len=32", "micro_batch=4", "batch_tokens=128",
                 "eval_bytes=1500", "vocab_size=300", "compile=false", "samples=0"])])
def test_a_bf16_run_of_the_recipes_auto_gives_bf16_predicts_its_test_split_again(tmp_path, recipe, args):
    """The recipes that precision=auto runs in bf16 on a CPU, run in bf16: `zoo predict` on the machine that
    trained them recomputes their test metrics to 1e-6 (the same precision and batching as the run's evaluation)
    and their predictions.csv rows."""
    from conftest import run_ok

    if recipe == "llm/gpt":  # a small text file of its own (the bundled corpus is long to tokenize)
        text = tmp_path / "text.txt"
        text.write_text(("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak.\n\n") * 250)
        args = [*args, f"data={text}"]
    summary, _ = run_ok(recipe, *args, "precision=bf16", "--out", tmp_path / "runs", budget="3steps")
    assert summary["precision"] == "bf16"
    roundtrip(Path(summary["run_dir"]))


def test_cpu_precision_measures_each_recipe_on_its_benchmark_not_its_default_data():
    """medical's default data is synthetic-2d and diffusion's digits: benchmarks/cpu_precision.py runs a recipe on
    its benchmark unless --set names data= (a measurement once ran on synthetic-2d by mistake)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import cpu_precision

    assert cpu_precision.benchmark_data("medical/swinunetr") == ["data=isbi2012-membrane"]
    assert cpu_precision.benchmark_data("diffusion/flow") == ["data=mnist"]
