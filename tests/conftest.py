import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch):
    """Runs, the results index and caches go to a temp folder; nothing touches the network."""
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("ZOO_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ZOO_BOARD_DIR", str(tmp_path / "board"))  # never the committed leaderboard


def zoo(*args, cwd=None, env=None, timeout=300):
    """Run the real ``zoo`` command in a subprocess; returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "zoo", *map(str, args)], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def summary_block(stdout: str) -> dict:
    """The key: value lines after the final ``---``."""
    block = stdout.rsplit("---\n", 1)[1]
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in block.strip().splitlines())}
