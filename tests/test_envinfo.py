import subprocess

from recipe_zoo.core.envinfo import fingerprint, git_state


def test_git_state_ignores_the_zoos_own_result_files(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "leaderboard.md").write_text("# board\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    assert git_state(tmp_path)[1] is False
    (tmp_path / "leaderboard.md").write_text("# board\nrow\n")
    assert git_state(tmp_path)[1] is True
    assert git_state(tmp_path, ignore=("leaderboard.md",))[1] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path, ignore=("leaderboard.md",))[1] is True
    assert git_state(tmp_path.parent / "not-a-repo-anywhere") == ("unknown", False)


def test_fingerprint_names_hardware_and_versions(tmp_path):
    info = fingerprint(tmp_path)
    assert "threads" in info["hardware"] or "x" in info["hardware"]
    assert info["torch"] and info["python"] and "numpy" in {k.lower() for k in info["packages"]}


def test_the_cpu_signature_separates_generations_that_share_a_name():
    """Two VMs both called "AMD EPYC" (Rome and Genoa) get different hardware keys; a CPU that reports no
    family (an ARM board) still gets its vector unit."""
    from recipe_zoo.core.envinfo import cpu_signature

    rome = "vendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\nmodel name\t: AMD EPYC\nstepping\t: 0\n" \
           "flags\t\t: fpu sse2 avx avx2\n\nprocessor\t: 1\n"
    genoa = rome.replace("23", "25").replace(": 49", ": 17").replace("avx2", "avx2 avx512f avx512_bf16")
    assert cpu_signature(rome) == "family 23 model 49 stepping 0, AVX2"
    assert cpu_signature(genoa) == "family 25 model 17 stepping 0, AVX-512 BF16"
    assert cpu_signature("processor\t: 0\nFeatures\t: fp asimd evtstrm\nCPU part\t: 0xd0c\n") == "NEON"
    assert cpu_signature("") == ""


def test_a_cpu_peak_measured_under_load_is_measured_again(tmp_path):
    """The cached fp32 peak sizes llm depth, the medical batch and the diffusion width: one measured while the CPU
    was busy (far below what a quick product reaches now) is replaced; a plausible one is kept as it is."""
    import json

    import torch

    from recipe_zoo.core import flops
    from recipe_zoo.core.envinfo import cpu_model

    key = f"{cpu_model()}|{torch.get_num_threads()} threads|fp32 matmul 2048"
    cache = tmp_path / "cpu_peak.json"
    cache.write_text(json.dumps({key: 1e9}))  # 1 GFLOP/s: a figure no CPU that runs the suite measures quietly
    healed = flops.cpu_peak_flops(tmp_path)
    assert healed > 1.2e9 and json.loads(cache.read_text())[key] == healed
    cache.write_text(json.dumps({key: 1e15}))  # above anything measurable here: kept, not measured again
    assert flops.cpu_peak_flops(tmp_path) == 1e15
