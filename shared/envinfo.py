"""What a result was measured on: hardware, versions, code commit. Saved with every run."""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


ISA_LEVELS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"),
              ("avx", "AVX"), ("asimd", "NEON"))  # the best vector unit a CPU reports, best first


def _first_processor(cpuinfo: str | None) -> dict[str, str]:
    """The fields /proc/cpuinfo (or ``cpuinfo``) gives its first processor; empty where there is none (macOS)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (x86 ``flags``, ARM ``Features``); empty where the system does not list them."""
    fields = _first_processor(cpuinfo)
    return set((fields.get("flags") or fields.get("Features") or "").split())


def cpu_signature(cpuinfo: str | None = None) -> str:
    """``family 6 model 167 stepping 1, AMX``: what separates CPU generations that share a model name (a cloud
    VM's "AMD EPYC" or "Intel(R) Xeon(R) Processor" is any of several). Empty where /proc/cpuinfo says nothing."""
    fields = _first_processor(cpuinfo)
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    isa = next((name for flag, name in ISA_LEVELS if flag in flags), "")
    parts = [f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if fields.get(k)]
    text = " ".join(p.replace("cpu family", "family") for p in parts)
    return ", ".join(x for x in (text, isa) if x)


def hardware() -> str:
    """``NVIDIA H100 80GB HBM3 x8`` or ``AMD EPYC [family 23 model 49 stepping 0, AVX2] (2 threads)``: the string
    leaderboards show and rank within. Rows from before the CPU signature (``AMD EPYC (2 threads)``) keep their
    key, so they stay apart from rows measured since.

    Under torchrun: the GPUs the job uses (all nodes), or ``... (1 threads) x 2 processes``."""
    import torch

    from recipe_zoo.core import distributed

    world = distributed.world_size()
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} x{world if world > 1 else torch.cuda.device_count()}"
    return cpu_identity() + (f" x {world} processes" if world > 1 else "")


def cpu_identity() -> str:
    """``AMD EPYC [family 25 model 1 stepping 1, AVX2] (2 threads)``: this CPU as the board names it (vendor's model
    name, family, model, stepping, best vector unit, this process's threads); what its cached peaks are keyed by."""
    import torch

    signature = cpu_signature()
    return f"{cpu_model()}{f' [{signature}]' if signature else ''} ({torch.get_num_threads()} threads)"


def git_state(path: Path, ignore: tuple[str, ...] = ()) -> tuple[str, bool]:
    """(commit, dirty) of the git checkout holding ``path``; ("unknown", False) outside git.

    ``ignore``: paths (from the checkout's root) whose changes do not make the code dirty, such as
    result files the tool itself writes.
    """
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=9", "HEAD"], cwd=path, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        excluded = [f":(top,exclude){p}" for p in ignore]
        # --no-optional-locks: status never takes .git/index.lock to refresh the index, so a run killed while it
        # looks (a SIGKILL, a timeout) cannot leave a lock that stops the user's next git command
        dirty = bool(subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no",
                                     "--", ":(top)", *excluded],
                                    cwd=path, capture_output=True, text=True, timeout=10).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


def fingerprint(code_dir: Path, ignore: tuple[str, ...] = ()) -> dict:
    import torch

    commit, dirty = git_state(code_dir, ignore)
    info = {
        "hardware": hardware(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": commit,
        "dirty": dirty,
        "packages": installed_packages(),
    }
    return info


def installed_packages() -> dict[str, str]:
    """Every installed distribution's name and version. Reading their metadata takes ~0.2 s (150 packages), so it is
    read again only when a folder on the import path that holds distributions changed (a package installed or
    removed changes its folder); a folder of scripts put on the path (a recipe file's) changes nothing."""
    folders = tuple((p, m) for p in sys.path if p and os.path.isdir(p)
                    for m in [os.stat(p).st_mtime_ns] if _holds_distributions(p, m))
    return dict(_read_packages(folders))


@functools.lru_cache(maxsize=256)
def _holds_distributions(folder: str, mtime: int) -> bool:
    with os.scandir(folder) as entries:
        return any(e.name.endswith((".dist-info", ".egg-info")) for e in entries)


@functools.lru_cache(maxsize=4)
def _read_packages(folders: tuple) -> tuple:
    return tuple(sorted((d.metadata["Name"] or "?", d.version) for d in metadata.distributions()))
