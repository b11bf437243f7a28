"""Behaviour fingerprint: every recipe (and the main options of each) at a step budget on CPU.

Run it before and after a refactor that must not change behaviour; the two outputs must be equal line for line:

    python benchmarks/fingerprint.py --assets /tmp/fp-assets --out before.tsv [--zoo-data ../shared/data]
    ... change the code ...
    python benchmarks/fingerprint.py --assets /tmp/fp-assets --out after.tsv  [--zoo-data ../shared/data]
    diff before.tsv after.tsv

Each line is one case: its name and a sha256 over the run's metrics (summary.json without timings), the
metrics.csv and train.csv rows (without timings) and every tensor of model.safetensors. ``--assets`` holds the
tiny inputs (made on first use and reused, so both sides read the same bytes). It calls the ``zoo`` command
beside this Python, so it needs no import of the zoo itself. Cases on real data run when ``--zoo-data`` is given.

The board reads the same digests to tell which rows are stale: ``--record`` appends this checkout's digests (its
tree must be clean) to ``benchmarks/fingerprints.jsonl``, and ``--commit C`` fingerprints commit C instead, in a
temporary git worktree run as ``PYTHONPATH=WORKTREE python -m zoo``. A row is stale when its recipe's cases at the
row's commit differ from those at the latest fingerprinted commit (``zoo board``, ``recipe_zoo.board.stale``):

    python benchmarks/fingerprint.py --assets /tmp/fp-assets --zoo-data ../shared/data --record \
        --recipes tabular/xgb --commit 521b4dfc2
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path



def timing(key: str) -> bool:
    """Keys that measure time or memory: they differ from run to run."""
    return key.endswith(("seconds", "_per_s", "mfu_percent", "peak_mem_mb", "_mb")) or key == "run_dir"



def make_assets(root: Path) -> None:
    """Tiny inputs: text, a JSONL, a 2-layer Llama, a 2-layer ESM-2, SMILES, a FASTA, mutations, images, a CSV."""
    import argparse as ap

    import numpy as np
    import torch
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    text = "To be, or not to be, that is the question.\nWhether 'tis nobler in the mind to suffer.\n" * 120
    (root / "corpus.txt").write_text(text)
    (root / "pairs.jsonl").write_text("".join(
        json.dumps({"prompt": f"Q{i}: say {i}", "response": f" {i} is said." * (1 + i % 3)}) + "\n" for i in range(40)))
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|bos|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    llama.save_pretrained(root / "llama")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|bos|>",
                            pad_token="<|bos|>").save_pretrained(root / "llama")
    import esm

    torch.manual_seed(0)
    model = esm.model.esm2.ESM2(num_layers=2, embed_dim=32, attention_heads=4, alphabet="ESM-1b")
    cfg = ap.Namespace(encoder_layers=2, encoder_embed_dim=32, encoder_attention_heads=4, token_dropout=True)
    state = {f"encoder.sentence_encoder.{k}": v for k, v in model.state_dict().items()
             if not k.startswith("contact_head.regression")}
    torch.save({"cfg": {"model": cfg}, "model": state}, root / "esm2_tiny.pt")
    rng = np.random.default_rng(0)
    rings = ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCOC1", "c1ccoc1"]
    mols = [f"{'C' * (1 + i % 7)}{rings[i % 5]}{'O' if i % 2 else 'N'}" for i in range(60)]
    (root / "mols.csv").write_text("smiles,y,active\n" + "".join(
        f"{m},{len(m) * 0.3 + rng.normal():.4f},{i % 2}\n" for i, m in enumerate(mols)))
    (root / "prot.fasta").write_text("".join(
        f">v{i}|{i % 7 / 7:.3f}\nMKT{'AGLV'[i % 4]}YIA{'KRDE'[i // 4 % 4]}QR\n" for i in range(60)))
    (root / "muts.csv").write_text("mutant,y\nM1A,0.1\nK2A,0.5\nT3W,0.2\nM1C:K2D,0.9\nA4G,0.3\nY5F,0.7\n")
    for split, n in (("train", 12), ("val", 4)):
        for cls, color in (("red", (220, 20, 20)), ("blue", (20, 20, 220))):
            folder = root / "photos" / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = np.clip(rng.normal(color, 30, (12, 12, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    rows = ["city,rooms,area,kind,price"]
    for i in range(300):
        kind = ["flat", "house", "villa", ""][i % 4]
        area = "" if i % 17 == 0 else f"{40 + rng.integers(0, 200)}"
        rows.append(f"{['a', 'b', 'c'][i % 3]},{1 + i % 6},{area},{kind},{1000 + 37 * i + rng.normal() * 50:.1f}")
    (root / "houses.csv").write_text("\n".join(rows) + "\n")


def cases(a: Path, real: bool) -> list[tuple[str, list[str], str]]:
    """(case name, zoo run arguments, budget)."""
    llm = [f"data={a / 'corpus.txt'}", "seq_len=32", "micro_batch=4", "eval_bytes=800"]
    gpt = llm + ["depth=1", "aspect=32", "head_dim=16", "batch_tokens=128", "vocab_size=300", "samples=0",
                 "compile=false"]
    esm = f"esm_weights={a / 'esm2_tiny.pt'}"
    prot = [f"data={a / 'prot.fasta'}", "hidden=16", "batch_size=8"]
    mol = [f"data={a / 'mols.csv'}", "target=y"]
    dmpnn, fp = [*mol, "hidden=16", "ffn_hidden=16"], [*mol, "n_estimators=20", "bits=64"]
    tiny_vis = ["width=8", "eval_every=0.5"]
    out = [
        ("vision-resnet", ["vision/resnet", *tiny_vis], "6steps"),
        ("vision-resnet-muon-mixup", ["vision/resnet", *tiny_vis, "optimizer=muon", "mixup=0.2", "model=zoo-resnet",
                                      "tta=1"], "6steps"),
        ("vision-resnet-adamw-cutmix", ["vision/resnet", *tiny_vis, "optimizer=adamw", "cutmix=0.5",
                                        "schedule=cosine", "ema_decay=0.9", "lookahead=0"], "6steps"),
        ("vision-own-folder", ["vision/resnet", f"data={a / 'photos'}", *tiny_vis, "randaugment=1"], "4steps"),
        ("vision-finetune", ["vision/finetune", *tiny_vis, "model=test_resnet", "image_size=16",
                             f"weights={a / 'vision-resnet-timm.safetensors'}", "layer_decay=0.65", "unfreeze_top=1",
                             "freeze_bn=true"], "6steps"),
        ("llm-gpt", ["llm/gpt", *gpt], "8steps"),
        ("llm-gpt-swiglu-bytes", ["llm/gpt", *gpt, "mlp=swiglu", "tokenizer=bytes", "kv_heads=1", "samples=2"],
         "6steps"),
        ("llm-lora", ["llm/lora", *llm, f"model={a / 'llama'}"], "6steps"),
        ("llm-lora-jsonl", ["llm/lora", f"data={a / 'pairs.jsonl'}", "seq_len=32", "micro_batch=4",
                            f"model={a / 'llama'}"], "6steps"),
        ("molecules-dmpnn", ["molecules/dmpnn", *dmpnn], "8steps"),
        ("molecules-dmpnn-scaffold-folds", ["molecules/dmpnn", *dmpnn, "split=scaffold", "folds=3", "ensemble=2"],
         "8steps"),
        ("molecules-dmpnn-class", ["molecules/dmpnn", *mol[:1], "target=active", "hidden=16", "ffn_hidden=16"],
         "8steps"),
        ("molecules-fp-xgb", ["molecules/fp-xgb", *fp], "8steps"),
        ("molecules-fp-xgb-folds", ["molecules/fp-xgb", *fp, "folds=3", "descriptors=false"], "8steps"),
        ("tabular-xgb-wine", ["tabular/xgb", "data=wine", "bagging=1", "n_estimators=50"], "8steps"),
        ("tabular-xgb-own", ["tabular/xgb", f"data={a / 'houses.csv'}", "target=price", "bagging=2",
                             "n_estimators=50"], "8steps"),
        ("tabular-xgb-folds", ["tabular/xgb", "data=diabetes", "folds=3", "bagging=1", "n_estimators=50"], "8steps"),
        ("tabular-mlp", ["tabular/mlp", "data=wine", "hidden=16"], "8steps"),
        ("tabular-mlp-own-ft", ["tabular/mlp", f"data={a / 'houses.csv'}", "target=price", "model=ft-transformer",
                                "hidden=16", "quantile=true"], "8steps"),
        ("tabular-mlp-folds", ["tabular/mlp", "data=diabetes", "hidden=16", "folds=2"], "8steps"),
        ("protein-onehot-auto", ["protein/onehot", *prot], "8steps"),
        ("protein-onehot-krr-blosum", ["protein/onehot", *prot, "head=krr", "encoding=blosum"], "8steps"),
        ("protein-esm-embed", ["protein/esm-embed", *prot, esm, "head=auto"], "8steps"),
        ("protein-esm-finetune-lora", ["protein/esm-finetune", *prot, esm], "6steps"),
        ("protein-esm-finetune-full", ["protein/esm-finetune", *prot, esm, "finetune=full", "layer_decay=0.8"],
         "6steps"),
        ("protein-esm-scratch", ["protein/esm-finetune", *prot[:1], "esm_model=scratch", "hidden=16",
                                 "batch_size=8", "scratch_dim=32"], "6steps"),
        ("protein-esm-zeroshot", ["protein/esm-zeroshot", f"data={a / 'muts.csv'}", "target=y", "wt=MKTAYIAKQR",
                                  esm], "6steps"),
        # compile=true: the path these cases digested while it was medical/unet's default (now auto: eager under 5
        # minutes a fold), so the digests, and the stale flags the board reads from them, go on comparing it
        ("medical-unet-2d", ["medical/unet", "width=8", "levels=3", "tta=false", "patch=32,32", "compile=true"],
         "4steps"),
        ("medical-unet-3d-tta", ["medical/unet", "data=synthetic-3d", "width=8", "levels=2", "patch=16,16,16",
                                 "compile=true"], "3steps"),
        ("medical-swinunetr", ["medical/swinunetr", "width=8", "levels=3", "tta=false", "patch=64,64"], "3steps"),
    ]
    for name in ("ddpm", "flow", "ddpm-cfg", "flow-cfg"):
        out.append((f"diffusion-{name}", [f"diffusion/{name}", "width=8", "n_samples=20", "n_real=20",
                                          "sample_steps=2", "grid=4"], "4steps"))
    for name in ("simclr", "byol"):
        out.append((f"contrastive-{name}", [f"contrastive/{name}", "width=8", "proj_hidden=32"], "4steps"))
    if real:
        out += [
            ("real-vision-cifar", ["vision/resnet", "data=cifar10-subset", "width=16"], "10steps"),
            ("real-llm-gpt-shakespeare", ["llm/gpt", "depth=1", "compile=false", "samples=0",
                                          "eval_bytes=20000"], "10steps"),
            ("real-medical-isbi", ["medical/unet", "data=isbi2012-membrane", "width=8", "compile=true"], "4steps"),
            ("real-molecules-esol", ["molecules/dmpnn", "data=esol", "hidden=32", "ffn_hidden=32"], "10steps"),
            ("real-molecules-fp-xgb-esol", ["molecules/fp-xgb", "data=esol", "n_estimators=100"], "10steps"),
            ("real-tabular-xgb-california", ["tabular/xgb", "bagging=1", "n_estimators=100", "max_depth=6"],
             "10steps"),
            ("real-protein-esm-embed-tem1", ["protein/esm-embed", "head=ridge"], "10steps"),
            ("real-protein-esm-embed-tem1-positions", ["protein/esm-embed", "split=positions", "head=ridge"],
             "10steps"),
            ("real-diffusion-flow-mnist", ["diffusion/flow", "data=mnist", "width=8", "n_samples=50",
                                           "n_real=50", "sample_steps=2"], "4steps"),
            ("real-contrastive-cifar", ["contrastive/simclr", "data=cifar10-subset", "width=8",
                                        "proj_hidden=32"], "4steps"),
        ]
    return out


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if not timing(k)} for r in csv.DictReader(f)]


def digest(run_dir: Path) -> str:
    h = hashlib.sha256()
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = {k: v for k, v in summary["metrics"].items() if not timing(k)}
    h.update(json.dumps([summary["value"], summary["status"], metrics], sort_keys=True).encode())
    h.update(json.dumps([_rows(run_dir / "metrics.csv"), _rows(run_dir / "train.csv")]).encode())
    weights = run_dir / "model.safetensors"
    if weights.is_file():
        from safetensors.torch import load_file

        for key, value in sorted(load_file(str(weights)).items()):
            h.update(key.encode())
            h.update(value.contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def behaviour(run_dir: Path) -> str:
    """What the board compares across commits (``--record``): the run's value and status and the values of its
    weights (each tensor hashed, the hashes sorted: a renamed or reordered parameter is the same behaviour). Unlike
    ``digest``, what a run reports beside them (a metric added to the summary, a column added to its CSVs) is not
    a change of behaviour."""
    import torch

    summary = json.loads((run_dir / "summary.json").read_text())
    parts = [json.dumps([summary["value"], summary["status"]])]
    weights = run_dir / "model.safetensors"
    if weights.is_file():
        from safetensors.torch import load_file

        parts += sorted(hashlib.sha256(v.contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes()).hexdigest()
                        for v in load_file(str(weights)).values())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "benchmarks" / "fingerprints.jsonl"


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def run_cases(zoo: list[str], env: dict, chosen: list[tuple[str, list[str], str]], scratch: Path,
              cwd: Path | None = None) -> list[tuple]:
    """(case, recipe, ``behaviour`` digest or ``FAILED``, TSV line with the full ``digest``) for each chosen case,
    run by the ``zoo`` command ``zoo`` from ``cwd`` (``python -m zoo`` puts its folder first on the path, ahead of
    PYTHONPATH: it must be the checkout meant)."""
    done = []
    for name, argv, budget in chosen:
        out = scratch / name
        t0 = time.time()
        proc = subprocess.run([*zoo, "run", *argv, "--budget", budget, "--seed", "0", "--out", str(out)],
                              env=env, capture_output=True, text=True, cwd=cwd)
        run_dir = next(out.glob("*/*/*/summary.json"), None)
        if proc.returncode != 0 or run_dir is None:
            digest_text = "FAILED"
            line = f"{name}\tFAILED rc={proc.returncode}\t{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
        else:
            summary = json.loads(run_dir.read_text())
            line = f"{name}\t{digest(run_dir.parent)}\t{summary['value']!r}\t{summary['status']}"
            digest_text = behaviour(run_dir.parent)
        print(f"{line}\t({time.time() - t0:.0f}s)", flush=True)
        done.append((name, argv[0], digest_text, line))
    return done


def hardware(zoo_env: dict) -> str:
    """The zoo's own hardware string for this machine (what the board's rows name)."""
    code = "from recipe_zoo.core import envinfo; print(envinfo.hardware())"
    return subprocess.run([sys.executable, "-c", code], env=zoo_env, capture_output=True, text=True,
                          check=True).stdout.strip()


def record(commit: str, machine: str, done: list[tuple]) -> dict:
    """One line of ``benchmarks/fingerprints.jsonl``: a commit's digests on one machine, per recipe and case, with
    the commit's time (which fingerprint is the latest does not depend on the order they were taken in)."""
    recipes: dict[str, dict[str, str]] = {}
    for name, recipe, digest_text, _ in done:
        recipes.setdefault(recipe, {})[name] = digest_text
    return {"commit": git("rev-parse", "--short=9", commit), "committed": int(git("log", "-1", "--format=%ct", commit)),
            "date": time.strftime("%Y-%m-%d"), "hardware": machine, "recipes": recipes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--assets", type=Path, required=True, help="tiny inputs, made on first use and then reused")
    p.add_argument("--out", type=Path, help="TSV: case, digest, value, status")
    p.add_argument("--zoo-data", type=Path, help="the data cache (ZOO_DATA) for the real-data cases")
    p.add_argument("--only", default="", help="run only cases whose name contains this")
    p.add_argument("--recipes", default="", help="run only the cases of these recipes (comma-separated)")
    p.add_argument("--record", action="store_true", help=f"append the digests to {RECORDS.relative_to(ROOT)}")
    p.add_argument("--commit", action="append", default=[],
                   help="fingerprint this commit (a temporary worktree) instead of the checkout; repeatable")
    args = p.parse_args()
    if not args.out and not args.record:
        p.error("give --out, --record or both")
    if args.record and not args.commit and git("status", "--porcelain", "--untracked-files=no"):
        p.error("--record fingerprints the checkout's commit: commit or stash the changes first")
    if not (args.assets / "esm2_tiny.pt").is_file():
        make_assets(args.assets)
    timm_weights = args.assets / "vision-resnet-timm.safetensors"
    if not timm_weights.is_file():
        import timm
        import torch
        from safetensors.torch import save_file

        torch.manual_seed(0)
        save_file(timm.create_model("test_resnet").state_dict(), str(timm_weights))
    scratch = Path(tempfile.mkdtemp(prefix="zoo-fingerprint-"))
    env = {**os.environ, "ZOO_RUNS": str(scratch / "runs"), "XDG_CACHE_HOME": str(args.assets / "cache"),
           "TORCH_HOME": str(scratch / "torch"), "ZOO_BOARD_DIR": str(scratch / "board"), "OMP_NUM_THREADS": "2",
           "ZOO_DATA": str(args.zoo_data.resolve()) if args.zoo_data else str(scratch / "data")}
    wanted = {r for r in args.recipes.split(",") if r}
    chosen = [c for c in cases(args.assets.resolve(), real=args.zoo_data is not None)
              if args.only in c[0] and (not wanted or c[1][0] in wanted)]
    lines, machine = [], hardware(env) if args.record else ""
    try:
        if not args.commit:  # the `zoo` beside this Python: the installed zoo, or this checkout's
            zoo = [str(Path(sys.executable).with_name("zoo"))] if not args.record else [sys.executable, "-m", "zoo"]
            code_env = {**env, "PYTHONPATH": str(ROOT)} if args.record else env
            done = run_cases(zoo, code_env, chosen, scratch / "head", cwd=ROOT if args.record else None)
            lines += [d[3] for d in done]
            if args.record:
                _append(record("HEAD", machine, done))
        for commit in args.commit:
            tree = scratch / f"tree-{commit}"
            git("worktree", "add", "--detach", "--quiet", str(tree), commit)
            try:
                code_env = {**env, "PYTHONPATH": str(tree)}
                print(f"# {commit}", flush=True)
                done = run_cases([sys.executable, "-m", "zoo"], code_env, chosen, scratch / commit, cwd=tree)
                lines += [f"{commit}\t{d[3]}" for d in done]
                if args.record:
                    _append(record(commit, machine, done))
            finally:
                git("worktree", "remove", "--force", str(tree))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


def _append(line: dict) -> None:
    with open(RECORDS, "a") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
