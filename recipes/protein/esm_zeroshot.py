"""protein/esm-zeroshot: mutation effects without training. Each mutated site is masked in the wild type and
ESM-2's log-probability of the mutant letter minus the wild-type letter is read off (masked marginals, Meier et
al. 2021), summed over the sites of a multiple mutant; the scores are ranked against the measured effects
(Spearman). Nothing is trained or selected, so there is no split: every measured variant is a test item (the
figure ESM-1v's zero-shot Spearman, 0.725 on blat-ecolx-dms, is comparable to). A scores.csv of every variant is
written to the run."""
from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from typing import ClassVar, Literal
from pathlib import Path

import numpy as np

from recipe_zoo.core.api import AnyInt, Count, recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.core.metrics import bootstrap, score
from recipe_zoo.core.precision import choose_device, resolve_precision
from recipe_zoo.recipes.protein.config import ESMFields, ProteinConfig, replaced
from recipe_zoo.recipes.protein.data import (DATASETS, SCORING, check_sequence, metric_statistic, mutant_sequence,
                                             need_columns, parse_labels, parse_mutations, read_csv_rows,
                                             read_wild_type)
from recipe_zoo.recipes.protein.esm2 import load_esm, masked_marginals


@dataclass
class ZeroShotConfig(ProteinConfig, ESMFields):
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ProteinConfig.KEY_FIELDS + ("wt",)
    data: str = "blat-ecolx-dms"  # dataset name, or a CSV of mutations (mutant=, target=) with wt=
    wt: str = ""  # wild type: a FASTA file or the sequence itself ('' = the dataset's)
    offset: AnyInt = 1  # the number of the wild type's first residue in the mutation strings
    toks_per_batch: Count = 8192  # tokens per scoring forward pass
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on GPUs with it, else fp16; CPU fp32


ZeroShotConfig.REPLACED = replaced(ZeroShotConfig)


@recipe("protein/esm-zeroshot", config=ZeroShotConfig, benchmark="blat-ecolx-dms", metric="test_spearman",
        higher_is_better=True, budget="5m",
        summary="mutation effects without training: ESM-2 masked marginals (log p mutant - log p wild type, "
                "summed over sites); Spearman against measured effects",
        scale_out="single process: inference only (one forward per sequence); batch_size sets the speed")
def score_zeroshot(cfg: ZeroShotConfig, run) -> dict[str, float]:
    spec = DATASETS.get(cfg.data)
    if spec is not None and spec["kind"] != "mutations":
        raise ZooError(f"{cfg.data} is not a mutation table; protein/esm-zeroshot takes a CSV of mutations "
                       "(e.g. blat-ecolx-dms)")
    if cfg.esm_model == "scratch":
        raise ZooError("esm_model=scratch: zero-shot scores need a pretrained model")
    path = run.data_path(cfg.data) if spec else Path(cfg.data).expanduser()
    if not path.is_file():
        raise ZooError(f"{cfg.data}: no such CSV file, and not a dataset name (see `zoo data list`)")
    target = cfg.target or (spec["target"] if spec else "")
    wt = check_sequence(read_wild_type(cfg.wt) if cfg.wt else (spec or {}).get("wt", ""),
                        f"wild type ({cfg.wt or cfg.data})", cfg) if (cfg.wt or spec) else ""
    if not wt:
        raise ZooError("protein/esm-zeroshot needs the wild type: wt=WT.fasta (or the sequence itself)")
    offset = cfg.offset if (cfg.wt or not spec) else spec["offset"]
    columns, rows = read_csv_rows(path, str(path))
    need_columns(str(path), columns, [cfg.mutant] + ([target] if target else []), "set mutant= / target=")
    if not rows:
        raise ZooError(f"{path}: no rows")
    variants = [parse_mutations(r[cfg.mutant] or "", wt, offset, f"{path} row {i + 2}") for i, r in enumerate(rows)]
    if target:
        values = [(r[target] or "").strip() for r in rows]
        keep = [i for i, v in enumerate(values) if v.lower() not in ("", "nan", "na")]
        y, _, _ = parse_labels([values[i] for i in keep], [f"{path} row {i + 2}" for i in keep], "regression")
    mutants = [mutant_sequence(wt, variants[i]) for i in (keep if target else range(len(rows)))]
    if target:  # no training, nothing selected: every measured variant is a test item
        run.record_split({"test": [r[cfg.mutant] for r in (rows[i] for i in keep)]})
        run.report("split", f"none (zero-shot): all {len(keep)} measured variants are test items")
    run.inspect(train=(mutants, y) if target else (mutants,), task="regression", loop=False)
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    model, alphabet, what = load_esm(cfg, run)
    start = time.perf_counter()
    logp = masked_marginals(model, alphabet, wt, sorted({i for v in variants for i, _, _ in v}), device, precision,
                            cfg.toks_per_batch)
    scores = np.array([sum(float(logp[i][alphabet.get_idx(mt)] - logp[i][alphabet.get_idx(w)]) for i, w, mt in v)
                       for v in variants])
    seconds = time.perf_counter() - start
    out_rows = [{cfg.mutant: r[cfg.mutant], "score": f"{s:.6f}"} for r, s in zip(rows, scores)]
    with open(run.dir / "scores.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[cfg.mutant, "score"])
        writer.writeheader()
        writer.writerows(out_rows)
    run.report("model", f"{what}, masked marginals at {len(logp)} sites; scores.csv in the run")
    metrics = {"train_seconds": seconds, "variants": len(rows), "peak_mem_mb": peak_memory_mb(device)}
    if target:
        if len(keep) < len(rows):
            run.log(f"{len(rows) - len(keep)} variants without a measured {target!r}: scored, not in the Spearman")
            run.report("unmeasured_variants", len(rows) - len(keep))
        metrics.update({f"test_{k}": v for k, v in score(y, scores[keep], *SCORING["regression"]).items()})
        low, high = bootstrap(metric_statistic(y, scores[keep], "regression"), len(keep))
        metrics["test_spearman_ci_low"], metrics["test_spearman_ci_high"] = low, high
    else:
        run.log(f"no target= column: {len(rows)} variants scored, nothing to correlate with")
    return metrics
