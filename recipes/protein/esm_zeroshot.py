"""protein/esm-zeroshot: mutation effects without training. Each mutated site is masked in the wild type and
ESM-2's log-probability of the mutant letter minus the wild-type letter is read off (masked marginals, Meier et
al. 2021), summed over the sites of a multiple mutant; the scores are ranked against the measured effects
(Spearman). Nothing is trained or selected, so there is no split: every measured variant is a test item (the
figure ESM-1v's zero-shot Spearman, 0.725 on blat-ecolx-dms, is comparable to). A scores.csv of every variant is
written to the run, and predictions.csv (each variant, its measured effect, its score); predict scores a new
variant list (a CSV of mutations, a text file of one per line, or a FASTA of variant sequences) against the run's
wild type with the run's ESM-2 (checked by a digest of its weights)."""
from __future__ import annotations

import csv
import dataclasses
import time
from dataclasses import dataclass
from typing import ClassVar, Literal
from pathlib import Path

import numpy as np

from recipe_zoo.core import artifact, datasets, items
from recipe_zoo.core.api import AnyInt, Count, NonNegativeInt, recipe
from recipe_zoo.core.errors import ZooError
from recipe_zoo.core.loop import peak_memory_mb
from recipe_zoo.core.metrics import score
from recipe_zoo.core.precision import choose_device, resolve_precision
from recipe_zoo.core.progress import Progress
from recipe_zoo.recipes.protein.config import ESMFields, ProteinConfig, replaced
from recipe_zoo.recipes.protein.esm2 import check_digest, load_esm, masked_marginals, weights_digest
from recipe_zoo.recipes.protein.inference import data_file
from recipe_zoo.recipes.protein.loading import dataset_info
from recipe_zoo.recipes.protein.mutations import mutant_sequence, parse_mutations, read_wild_type
from recipe_zoo.recipes.protein.readers import FASTA_SUFFIXES, need_columns, read_csv_rows, read_fasta
from recipe_zoo.recipes.protein.scoring import SCORING, item_scores
from recipe_zoo.recipes.protein.sequences import check_sequence, parse_labels


@dataclass
class ZeroShotConfig(ProteinConfig, ESMFields):
    KEY_FIELDS: ClassVar[tuple[str, ...]] = ProteinConfig.KEY_FIELDS + ("wt",)
    data: str = "blat-ecolx-dms"  # dataset name, or a CSV of mutations (mutant=, target=) with wt=
    wt: str = ""  # wild type: a FASTA file or the sequence itself ('' = the dataset's)
    offset: AnyInt = 1  # the number of the wild type's first residue in the mutation strings
    toks_per_batch: Count = 8192  # tokens per scoring forward pass
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on GPUs with it, else fp16; CPU fp32


ZeroShotConfig.REPLACED = replaced(ZeroShotConfig)


# =============================================================================================
# Variant tables, scores, metrics: shared by the run and predict
# =============================================================================================

@dataclass
class Variants:
    rows: list[dict]  # one per variant: the file's columns (a FASTA record: its header and mutations)
    variants: list[list[tuple[int, str, str]]]  # (index into the wild type, wild-type letter, mutant letter)
    keep: list[int]  # the variants with a measured effect
    y: np.ndarray | None  # their effects (None: no target column)


def read_table(path: Path, wt: str, offset: int, mutant: str, target: str, need_target: bool = True) -> Variants:
    """A CSV of mutations (H24C, H24C:A50G), each checked against the wild type; ``target``: the measured effects
    (blank / nan: unmeasured); ``need_target=False``: the column may be absent."""
    columns, rows = read_csv_rows(path, str(path))
    target = target if need_target or target in columns else ""
    need_columns(str(path), columns, [mutant] + ([target] if target else []), "set mutant= / target=")
    if not rows:
        raise ZooError(f"{path}: no rows")
    variants = [parse_mutations(r[mutant] or "", wt, offset, f"{path} row {i + 2}") for i, r in enumerate(rows)]
    if not target:
        return Variants([dict(r) for r in rows], variants, list(range(len(rows))), None)
    values = [(r[target] or "").strip() for r in rows]
    keep = [i for i, v in enumerate(values) if v.lower() not in ("", "nan", "na")]
    y, _, _ = parse_labels([values[i] for i in keep], [f"{path} row {i + 2}" for i in keep], "regression")
    return Variants([dict(r) for r in rows], variants, keep, y)


def read_new_variants(path: Path, cfg: ZeroShotConfig, wt: str, offset: int, mutant: str, target: str) -> Variants:
    """A CSV of mutations (its target column, when there, scored too), a text file of one mutation per line, or a
    FASTA of variant sequences of the wild type's length (their mutations read off against it)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_table(path, wt, offset, mutant, target, need_target=False)
    if suffix in FASTA_SUFFIXES:
        rows, variants = [], []
        for header, seq, line in read_fasta(path):
            where = f"{path} record {header.split()[0] if header else '?'!r} (line {line})"
            seq = check_sequence(seq, where, cfg)
            if len(seq) != len(wt):
                raise ZooError(f"{where}: {len(seq)} residues; the wild type has {len(wt)} (a variant sequence of "
                               "the wild type, or a CSV of mutations)")
            text = ":".join(f"{w}{i + offset}{m}" for i, (w, m) in enumerate(zip(wt, seq)) if w != m)
            variants.append(parse_mutations(text, wt, offset, where) if text else [])
            rows.append({"id": header, mutant: text})
        return Variants(rows, variants, list(range(len(rows))), None)
    try:
        lines = [(n, line.strip()) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)]
    except (OSError, UnicodeDecodeError) as exc:
        raise ZooError(f"{path}: cannot read as a UTF-8 list of mutations ({exc})") from None
    lines = [(n, text) for n, text in lines if text]
    if not lines:
        raise ZooError(f"{path}: no mutations (one per line, like H24C or H24C:A50G)")
    variants = [parse_mutations(text, wt, offset, f"{path} line {n}") for n, text in lines]
    return Variants([{mutant: text} for _, text in lines], variants, list(range(len(lines))), None)


def variant_scores(model, alphabet, wt: str, variants: list, device, precision: str, toks_per_batch: int,
                   progress=None) -> tuple[np.ndarray, int]:
    """(each variant's summed log p(mutant) - log p(wild type) at its masked sites, the sites scored)."""
    logp = masked_marginals(model, alphabet, wt, sorted({i for v in variants for i, _, _ in v}), device, precision,
                            toks_per_batch, progress)
    scores = np.array([sum(float(logp[i][alphabet.get_idx(mt)] - logp[i][alphabet.get_idx(w)]) for i, w, mt in v)
                       for v in variants])
    return scores, len(logp)


def zeroshot_metrics(y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    metrics = {f"test_{k}": v for k, v in score(y, scores, *SCORING["regression"]).items()}
    low, high = items.test_interval(item_scores(y, scores, "regression"))
    metrics["test_spearman_ci_low"], metrics["test_spearman_ci_high"] = low, high
    return metrics


def own_rows(table: Variants, mutant: str, scores: np.ndarray) -> list[dict]:
    """predictions.csv: every variant of the run's table, its measured effect (blank: unmeasured), its score."""
    measured = dict(zip(table.keep, table.y.tolist())) if table.y is not None else {}
    return [{"row": i, "mutant": r[mutant], "target": measured.get(i), "score": float(s)}
            for i, (r, s) in enumerate(zip(table.rows, scores))]


def run_table(cfg: ZeroShotConfig, run) -> tuple[Path, str, int, str]:
    """The run's own variant table: (its path, the wild type, the offset, the target column)."""
    spec = dataset_info(cfg.data)
    if spec is not None and spec["kind"] != "mutations":
        raise ZooError(f"{cfg.data} is not a mutation table; protein/esm-zeroshot takes a CSV of mutations "
                       "(e.g. blat-ecolx-dms)")
    if cfg.esm_model == "scratch":
        raise ZooError("esm_model=scratch: zero-shot scores need a pretrained model")
    path = datasets.locate(cfg.data) if spec else Path(cfg.data).expanduser()
    if not path.is_file():
        raise ZooError(f"{cfg.data}: no such CSV file, and not a dataset name (see `zoo data list`)")
    target = cfg.target or (spec["target"] if spec else "")
    wt = check_sequence(read_wild_type(cfg.wt) if cfg.wt else (spec or {}).get("wt", ""),
                        f"wild type ({cfg.wt or cfg.data})", cfg) if (cfg.wt or spec) else ""
    if not wt:
        raise ZooError("protein/esm-zeroshot needs the wild type: wt=WT.fasta (or the sequence itself)")
    return path, wt, cfg.offset if (cfg.wt or not spec) else spec["offset"], target


# =============================================================================================
# Predict: a variant list, or the run's own table again
# =============================================================================================

@dataclass
class ZeroShotOptions(artifact.PredictOptions):
    mutant: str = ""  # CSV column of the mutations ('' = the run's mutant=)
    esm_weights: str = ""  # the ESM-2 .pt file ('' = the run's); checked against the run's weights
    batch_size: NonNegativeInt = 0  # masked copies of the wild type per forward pass; 0 = the run's toks_per_batch


def predict_zeroshot(cfg: ZeroShotConfig, opts: ZeroShotOptions, run) -> artifact.Predictions:
    """Scores of new variants against the run's wild type (saved in model.json), or, with no data, the run's own
    table scored again (its Spearman)."""
    pre = run.card["preprocess"]
    wt, offset, mutant = pre["wt"], pre["offset"], opts.mutant or cfg.mutant
    if opts.data:
        table = read_new_variants(data_file(opts.data, "a CSV or text file of mutations, or a FASTA of variants"),
                                  cfg, wt, offset, mutant, pre["target"])
    else:  # the run's table, against the wild type it was scored with (saved: wt= may name a file since moved)
        declared = dataset_info(cfg.data) is not None
        path = datasets.locate(cfg.data) if declared else data_file(cfg.data, "the run's mutations")
        table = read_table(path, wt, offset, cfg.mutant, pre["target"])
    model, alphabet, what = load_esm(dataclasses.replace(cfg, esm_weights=opts.esm_weights or cfg.esm_weights), run)
    check_digest(model, pre["esm"], what)
    device = choose_device(run.device)
    toks = opts.batch_size * (len(wt) + 2) if opts.batch_size else cfg.toks_per_batch
    scores, _ = variant_scores(model, alphabet, wt, table.variants, device, resolve_precision(device, cfg.precision),
                               toks, lambda done, total: run.progress(done, total, "sites scored"))
    metrics = zeroshot_metrics(table.y, scores[table.keep]) if table.y is not None and len(table.keep) > 1 else {}
    if opts.data:  # another table's figures: not named as the run's test metrics
        metrics = {k.removeprefix("test_"): v for k, v in metrics.items()}
    rows = own_rows(table, mutant, scores) if not opts.data else [{**r, "score": float(s)}
                                                                   for r, s in zip(table.rows, scores)]
    return artifact.Predictions(rows=rows, metrics=metrics, arrays={"score": scores})


@recipe("protein/esm-zeroshot", config=ZeroShotConfig, benchmark="blat-ecolx-dms", metric="test_spearman",
        higher_is_better=True, budget="5m",
        summary="mutation effects without training: ESM-2 masked marginals (log p mutant - log p wild type, "
                "summed over sites); Spearman against measured effects",
        scale_out="single process: inference only (one forward per sequence); batch_size sets the speed",
        predict=predict_zeroshot, predict_options=ZeroShotOptions)
def score_zeroshot(cfg: ZeroShotConfig, run) -> dict[str, float]:
    path, wt, offset, target = run_table(cfg, run)
    table = read_table(path, wt, offset, cfg.mutant, target)
    rows, variants, keep, y = table.rows, table.variants, table.keep, table.y
    mutants = [mutant_sequence(wt, variants[i]) for i in keep]
    if target:  # no training, nothing selected: every measured variant is a test item
        run.record_split({"test": [r[cfg.mutant] for r in (rows[i] for i in keep)]})
        run.report("split", f"none (zero-shot): all {len(keep)} measured variants are test items")
    run.inspect(train=(mutants, y) if target else (mutants,), task="regression", loop=False)
    device = choose_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    model, alphabet, what = load_esm(cfg, run)
    start = time.perf_counter()
    lines = Progress(len({i for v in variants for i, _, _ in v}), "masked marginals", run.log, "sites")
    scores, sites = variant_scores(model, alphabet, wt, variants, device, precision, cfg.toks_per_batch,
                                   lambda done, total: lines.update(done - lines.count))
    seconds = time.perf_counter() - start
    out_rows = [{cfg.mutant: r[cfg.mutant], "score": f"{s:.6f}"} for r, s in zip(rows, scores)]
    with open(run.dir / "scores.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[cfg.mutant, "score"])
        writer.writeheader()
        writer.writerows(out_rows)
    run.report("model", f"{what}, masked marginals at {sites} sites; scores.csv in the run")
    metrics = {"train_seconds": seconds, "variants": len(rows), "peak_mem_mb": peak_memory_mb(device)}
    if target:
        if len(keep) < len(rows):
            run.log(f"{len(rows) - len(keep)} variants without a measured {target!r}: scored, not in the Spearman")
            run.report("unmeasured_variants", len(rows) - len(keep))
        metrics.update(zeroshot_metrics(y, scores[keep]))
    else:
        run.log(f"no target= column: {len(rows)} variants scored, nothing to correlate with")
    artifact.write_card(run.dir, recipe=artifact.recipe_name(run, "protein/esm-zeroshot"), task="zero-shot", weights=[],
                        selected="no training: ESM-2's masked marginals, summed over a variant's sites",
                        preprocess={"wt": wt, "offset": offset, "target": target,
                                    "esm": {"model": cfg.esm_model, "weights": cfg.esm_weights, "what": what,
                                            "digest": weights_digest(model)}})
    artifact.write_predictions(run.dir, own_rows(table, cfg.mutant, scores))
    return metrics
