from conftest import git_repo
from recipe_zoo.core.envinfo import fingerprint, git_state


def test_git_state_ignores_the_zoos_own_result_files(tmp_path):
    git_repo(tmp_path, {"code.py": "x = 1\n", "leaderboard.md": "# board\n"})
    assert git_state(tmp_path)[1] is False
    (tmp_path / "leaderboard.md").write_text("# board\nrow\n")
    assert git_state(tmp_path)[1] is True
    assert git_state(tmp_path, ignore=("leaderboard.md",))[1] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path, ignore=("leaderboard.md",))[1] is True
    assert git_state(tmp_path.parent / "not-a-repo-anywhere") == ("unknown", False)


def test_git_state_never_writes_the_index(tmp_path):
    """Looking takes no lock: with a tracked file touched (its stat data stale in the index) a plain `git status`
    rewrites .git/index under index.lock, which a run killed at that moment leaves behind for the user's next git
    command to trip on (seen in a test session); git_state leaves the index as it was."""
    import os

    git = git_repo(tmp_path, {"code.py": "x = 1\n"})
    index = tmp_path / ".git" / "index"
    os.utime(index, ns=(1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "code.py", ns=(2_000_000_000, 2_000_000_000))  # same content, newer stat data
    assert git_state(tmp_path)[1] is False
    assert index.stat().st_mtime_ns == 1_000_000_000
    git("status", "--porcelain")  # the check can fail: plain status refreshes (rewrites) the index
    assert index.stat().st_mtime_ns != 1_000_000_000


def test_fingerprint_names_hardware_and_versions(tmp_path, monkeypatch):
    """The hardware key names the CPU, its signature and threads (a GPU: its name and count), and the versions
    are the running interpreter's and packages'."""
    import platform

    import numpy
    import torch

    from recipe_zoo.core import envinfo

    monkeypatch.setattr(envinfo, "cpu_model", lambda: "Test CPU 9000")
    monkeypatch.setattr(envinfo, "cpu_signature", lambda cpuinfo=None: "family 25 model 17 stepping 1, AVX-512")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    threads = torch.get_num_threads()
    info = fingerprint(tmp_path)
    assert info["hardware"] == f"Test CPU 9000 [family 25 model 17 stepping 1, AVX-512] ({threads} threads)"
    assert info["cpu"] == "Test CPU 9000" and info["torch_threads"] == threads and info["gpu"] == []
    assert info["torch"] == torch.__version__ and info["python"] == platform.python_version()
    assert {k.lower(): v for k, v in info["packages"].items()}["numpy"] == numpy.__version__
    assert info["commit"] == "unknown"  # tmp_path is no git checkout
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    assert envinfo.hardware() == "NVIDIA H200 x8"


def test_packages_installed_after_a_run_show_in_the_next_fingerprint(tmp_path, monkeypatch):
    """The package list is read once per state of the import path's folders: a package installed (or removed)
    between two runs in one process is in (or out of) the next run's fingerprint. (The folder's time is moved a
    second on by hand: Linux stamps a change with a clock that ticks every few milliseconds, and this test is faster
    than that.)"""
    import sys

    from recipe_zoo.core import envinfo

    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    before = envinfo.installed_packages()
    assert "zoo-made-up-package" not in before and envinfo.installed_packages() == before
    info = tmp_path / "zoo_made_up_package-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zoo-made-up-package\nVersion: 1.2.3\n")
    later(tmp_path)
    assert envinfo.installed_packages() == {**before, "zoo-made-up-package": "1.2.3"}
    for f in info.iterdir():
        f.unlink()
    info.rmdir()
    later(tmp_path)
    assert envinfo.installed_packages() == before


def later(folder):
    """The folder's modification time a second after its last one, as an install a second later leaves it."""
    import os

    st = os.stat(folder)
    os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


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


def test_bf16_units_are_read_from_the_flags_on_x86_and_arm():
    """AVX-512 BF16 or AMX on x86, FEAT_BF16 or SME on ARM: units; flags without them: none (bf16 emulated, never
    measured); no flags listed at all (macOS): unknown, so a bounded measure decides."""
    from recipe_zoo.core.flops import cpu_has_bf16_units

    zen3 = "cpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu sse2 avx fma avx2\n"
    assert cpu_has_bf16_units(zen3) is False
    assert cpu_has_bf16_units(zen3.replace("avx2", "avx2 avx512f avx512_bf16")) is True
    assert cpu_has_bf16_units(zen3.replace("avx2", "avx2 amx_bf16 amx_tile")) is True
    assert cpu_has_bf16_units("processor\t: 0\nFeatures\t: fp asimd evtstrm bf16 i8mm\n") is True  # Graviton 3
    assert cpu_has_bf16_units("processor\t: 0\nFeatures\t: fp asimd evtstrm\n") is False  # Graviton 2
    assert cpu_has_bf16_units("") is None


def test_a_cpu_peak_measured_under_load_is_measured_again(tmp_path, monkeypatch):
    """The cached fp32 peak sizes llm depth, the medical batch and the diffusion width: one measured while the CPU
    was busy (far below what a quick product reaches now) is replaced; a plausible one is kept as it is. The
    measurements are given (a quick product at 50 GFLOP/s, the full one at 60), not timed on this CPU."""
    import json

    import torch

    from recipe_zoo.core import flops
    from recipe_zoo.core.envinfo import cpu_model

    measured = []
    monkeypatch.setattr(flops, "_measure_matmul_flops",
                        lambda n=2048, trials=4, dtype="fp32": measured.append(n) or (5e10 if n == 1024 else 6e10))
    key = flops.peak_key("fp32 matmul 2048")
    assert key.startswith(f"{cpu_model()} [") and f"({torch.get_num_threads()} threads)|" in key  # family, model...
    cache = tmp_path / "cpu_peak.json"
    cache.write_text(json.dumps({key: 1e9}))  # 1 GFLOP/s: a quick product beats it by far, so measured again
    assert flops.cpu_peak_flops(tmp_path) == 6e10 and json.loads(cache.read_text())[key] == 6e10
    assert measured == [1024, 2048]
    cache.write_text(json.dumps({key: 1e11}))  # the quick product not 20% above it: kept, not measured again
    assert flops.cpu_peak_flops(tmp_path) == 1e11 and measured == [1024, 2048, 1024]
