"""Each leaderboard row's resolved configuration, recomputed at the commit that measured it, for the rows measured
before ``zoo bench`` recorded it (``config`` and ``config_hash`` in ``results.jsonl`` and ``speed.jsonl``).

For every commit that measured such rows, a temporary git worktree of that commit builds each row's configuration
from its recipe and recorded overrides with that commit's own defaults (``PYTHONPATH=WORKTREE``, the zoo as it was),
with ``precision=auto`` as the row says it resolved. A row whose commit is not one commit's tree (``-dirty``), or
is older than the one import root (no ``zoo/checkout.py``), keeps no configuration: the board shows it
"configuration unknown" and never admits it to a reference table (``references.in_table``).

    python benchmarks/row_configs.py            # what it would add, per row
    python benchmarks/row_configs.py --write    # rewrite the two files whole, rows in their order
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("results.jsonl", "speed.jsonl")

BUILD = r"""
import dataclasses, json, sys
from zoo import checkout
checkout.install()
from recipe_zoo import config, registry
out = []
for req in json.loads(sys.stdin.read()):
    try:
        spec = registry.get(req["recipe"])
        data = [f"data={spec.benchmark}"] if "data" in spec.config.__dataclass_fields__ else []
        cfg = config.build(spec.config, spec.defaults, None, data + req["overrides"], spec.name)
        if getattr(cfg, "precision", None) == "auto" and req["precision"]:
            cfg.precision = req["precision"]  # as the run resolved it (the row records it)
        out.append(json.loads(json.dumps(dataclasses.asdict(cfg), default=str)))
    except Exception as exc:
        out.append({"error": f"{type(exc).__name__}: {exc}"})
print(json.dumps(out))
"""


def commit_of(row: dict) -> str | None:
    """The commit whose tree measured the row (a lent machine's ``C-copy`` is C's clean tree), or None."""
    commit = str(row.get("commit", "")).removesuffix("-copy")
    return commit if len(commit) >= 7 and commit.isalnum() else None


def configs_at(commit: str, requests: list[dict]) -> list[dict]:
    """Each request's resolved configuration at ``commit`` (``{"error": ...}`` where it cannot be built)."""
    if subprocess.run(["git", "cat-file", "-e", f"{commit}:zoo/checkout.py"], cwd=ROOT,
                      capture_output=True).returncode:
        return [{"error": f"{commit} predates the one import root"}] * len(requests)
    with tempfile.TemporaryDirectory(prefix="zoo-row-configs-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            done = subprocess.run([sys.executable, "-c", BUILD], cwd=tmp, env={**os.environ, "PYTHONPATH": str(tree)},
                                  input=json.dumps(requests), capture_output=True, text=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True,
                           capture_output=True)
    if done.returncode:
        return [{"error": done.stderr.strip().splitlines()[-1][:200]}] * len(requests)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from zoo import checkout

    checkout.install()
    from recipe_zoo import references

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite results.jsonl and speed.jsonl with them")
    args = parser.parse_args()
    files = {name: [json.loads(line) for line in (ROOT / "benchmarks" / name).read_text().splitlines()]
             for name in FILES}
    wanted = defaultdict(list)  # commit: the rows without a configuration
    for rows in files.values():
        for row in rows:
            if "config" not in row and commit_of(row):
                wanted[commit_of(row)].append(row)
    added = unknown = 0
    for commit, rows in sorted(wanted.items()):
        requests = [{"recipe": r["recipe"], "precision": r.get("precision"),
                     "overrides": [f"{k}={v}" for k, v in r.get("overrides", {}).items()]} for r in rows]
        for row, cfg in zip(rows, configs_at(commit, requests)):
            if "error" in cfg:
                unknown += 1
                print(f"{commit} {row['recipe']} {row['benchmark']}: unknown ({cfg['error']})")
                continue
            row["config"], row["config_hash"] = cfg, references.hash_config(row["recipe"], row["budget"], cfg)
            row["config_from"] = f"recomputed at {commit} from the row's overrides (benchmarks/row_configs.py)"
            added += 1
            ref = references.matching(row["recipe"], row["benchmark"], row["budget"])
            why = references.disagreement(row, ref) if ref else ""
            print(f"{commit} {row['recipe']} {row['benchmark']} @ {row['budget']}: {row['config_hash']}"
                  + (f"; not the reference: {why}" if why else " (the reference)" if ref else ""))
    print(f"{added} rows given their configuration, {unknown} unknown")
    if args.write:
        from recipe_zoo.core.checkpoint import write_text

        for name, rows in files.items():
            write_text(ROOT / "benchmarks" / name, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
