import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from recipe_zoo import config
from recipe_zoo.core.errors import ZooError


@dataclass
class Cfg:
    lr: float = 0.1  # peak LR
    steps: int = 10  # optimizer steps
    name: str = "x"  # a name
    flag: bool = False  # on or off
    mode: Literal["a", "b"] = "a"  # a mode
    maybe: int | None = None  # optional


def test_layering_order(tmp_path):
    f = tmp_path / "c.json"
    f.write_text('{"lr": 0.3, "steps": 7}')
    cfg = config.build(Cfg, {"lr": 0.2, "name": "variant"}, str(f), ["steps=5", "flag=true", "maybe=3"], "t/x")
    assert (cfg.lr, cfg.steps, cfg.name, cfg.flag, cfg.maybe) == (0.3, 5, "variant", True, 3)


def test_toml_config_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[config]\nlr = 0.5\nmode = "b"\n')
    cfg = config.build(Cfg, {}, str(f), [], "t/x")
    assert cfg.lr == 0.5 and cfg.mode == "b"


@pytest.mark.parametrize("override,message", [
    ("lr=fast", "lr='fast' is not a valid float"),
    ("steps=2.5", "steps='2.5' is not a valid int"),
    ("flag=maybe", "flag='maybe' is not a valid bool"),
    ("mode=c", "mode='c' must be one of"),
    ("maybe=x", "maybe='x' is not a valid"),
    ("lrr=0.1", "unknown key 'lrr'; did you mean 'lr'?"),
    ("novel=1", "unknown key 'novel'; known keys"),
    ("justtext", "expected key=value"),
])
def test_override_errors(override, message):
    with pytest.raises(ZooError, match=message.replace("(", r"\(").replace("?", r"\?")):
        config.build(Cfg, {}, None, [override], "t/x")


def test_none_and_numbers():
    cfg = config.build(Cfg, {}, None, ["maybe=none", "lr=1e-3", "steps=1_000"], "t/x")
    assert cfg.maybe is None and cfg.lr == 1e-3 and cfg.steps == 1000


def test_config_file_errors(tmp_path):
    with pytest.raises(ZooError, match="config file not found"):
        config.build(Cfg, {}, str(tmp_path / "nope.json"), [], "t/x")
    bad = tmp_path / "bad.json"
    bad.write_text("{lr: ")
    with pytest.raises(ZooError, match="cannot parse"):
        config.build(Cfg, {}, str(bad), [], "t/x")
    typo = tmp_path / "typo.json"
    typo.write_text('{"step": 3}')
    with pytest.raises(ZooError, match=f"{typo}: unknown key 'step'; did you mean 'steps'"):
        config.build(Cfg, {}, str(typo), [], "t/x")


def test_field_comments():
    assert config.field_comments(Cfg)["steps"] == "optimizer steps"


# Fields that touch the split, the target, the metric or the evaluation: each config must list them in its
# KEY_FIELDS (so a run that changes one is keyed as another benchmark), or the table below says why not.
TOUCHES_WHAT_IS_MEASURED = re.compile(r"split|target|metric|eval|test|^val_|fold|knn|n_real|n_samples|label|"
                                      r"^task$|^smiles$|^sequence$|mutant|^wt$|offset|probe|on_invalid|^drop$|"
                                      r"categorical|max_len|too_long|hd95|^features$|standardize|class_weight")
NOT_KEY = {  # field: why it does not change what is measured
    "eval_every": "how often validation runs during training; the test is scored once at the end either way",
    "label_smoothing": "a training loss setting; the metric is on hard labels",
    "class_weight": "a training loss weighting; the metric is unweighted",
    "features": "engineered input features are part of the method",
    "standardize": "RDKit standardisation of the features' inputs is part of the method; the split and split.csv "
                   "read the standardised parents either way (test_molecules.py toggles it)",
    "drop": "leaving input columns out is part of the method",
    "categorical": "how input columns are encoded is part of the method",
    "target_nan": "rows without a target are dropped (counted) or refused; the metric reads only rows with one",
    "log_target": "training on log1p of the target is part of the method; the metric is on the original scale",
    "target_modules": "which layers LoRA adapts is part of the method",
    "class_weights": "a training loss weighting; the metric is unweighted",
    "max_len": "how long sequences are handled (an error, or cropped with too_long=crop); no item is dropped, and "
               "the split hashes the whole sequences (test_protein.py crops and compares)",
    "too_long": "how long sequences are handled; no item is dropped, nor moved between splits",
    "hd95": "reports one more test metric (the Hausdorff distance) beside Dice; the ranked metric is unchanged",
    "offset": "the numbering of the mutation strings; a wrong one is refused (the wild-type letter is checked)",
    "target_scale": "what the heads fit (standardised targets or their ranks); predictions and every metric are in "
                    "the targets' own units, on the same items",
}


def _configs():
    from recipe_zoo import registry

    seen = {}
    for spec in registry.load_all().values():
        seen.setdefault(spec.config, []).append(spec.name)
    return seen


def test_every_field_that_changes_what_is_measured_is_a_key_field():
    """A config field that changes the split, target, metric or evaluation is in its KEY_FIELDS, so the run's
    benchmark key says it; KEY_FIELDS name real fields."""
    missing = []
    for cfg_class, names in _configs().items():
        declared = set(getattr(cfg_class, "KEY_FIELDS", ()))
        fields = {f.name for f in dataclasses.fields(cfg_class)}
        assert declared <= fields, (cfg_class.__name__, declared - fields)
        for name in sorted(fields):
            if TOUCHES_WHAT_IS_MEASURED.search(name) and name not in declared and name not in NOT_KEY:
                missing.append(f"{cfg_class.__name__}.{name} ({', '.join(names)})")
    assert not missing, "declare in KEY_FIELDS (or say in NOT_KEY why not): " + "; ".join(missing)


def test_a_key_field_off_its_default_names_another_benchmark():
    from recipe_zoo.runs import key_suffix

    @dataclasses.dataclass
    class Cfg:
        KEY_FIELDS: typing.ClassVar[tuple] = ("split", "eval_bytes")
        split: str = "random"
        eval_bytes: int = 100
        lr: float = 0.1

    assert key_suffix(Cfg()) == "" and key_suffix(Cfg(lr=0.5)) == ""
    assert key_suffix(Cfg(split="scaffold", eval_bytes=50)) == ":split=scaffold:eval_bytes=50"


def test_show_names_the_fields_of_the_benchmark_key():
    from conftest import zoo

    proc = zoo("show", "molecules/dmpnn")
    assert proc.returncode == 0, proc.stderr
    assert "benchmark key: the data's name, plus :field=value for any of split, split_sizes, folds" in proc.stdout


# ---------------------------------------------------------------------------------------------
# Each recipe's config: only fields its code reads, each number with its range
# ---------------------------------------------------------------------------------------------

def _recipe_files(source: str) -> set:
    """The file that registers a recipe and the recipe modules it imports, transitively (its domain's
    helpers, the shared image modules), as tests/import_graph.py reads imports."""
    import import_graph
    from conftest import ROOT

    roots, recipes = import_graph.package_roots(ROOT), ROOT / "recipes"
    seen, todo = set(), [Path(source).resolve()]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += [f for _, f in import_graph.imports(path, roots) if recipes in f.parents]
    return seen


def _read_fields(files) -> set[str]:
    """Every ``cfg.<name>`` (and ``self.cfg.<name>``) read in ``files``."""
    import ast

    names = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (getattr(node.value, "id", None) == "cfg"
                                                    or getattr(node.value, "attr", None) == "cfg"):
                names.add(node.attr)
    return names


def test_each_recipe_config_holds_only_what_its_code_reads():
    """A field its train function never reads is one a user sets for nothing (tabular/xgb took lr= and ignored
    it): every field appears as cfg.<field> in the recipe's files, or is a loop field that ``fit`` consumes (the
    config extends LoopSettings only when the recipe trains in the core loop)."""
    from recipe_zoo import registry
    from recipe_zoo.core.loop import LoopSettings

    loop = {f.name for f in dataclasses.fields(LoopSettings)}
    unused = {}
    for name, spec in sorted(registry.load_all().items()):
        files = _recipe_files(spec.source)
        read = _read_fields(files)
        uses_loop = "LoopSettings.of" in "".join(p.read_text() for p in files)
        assert issubclass(spec.config, LoopSettings) == uses_loop, (name, uses_loop)
        extra = [f.name for f in dataclasses.fields(spec.config)
                 if f.name not in read and not (uses_loop and f.name in loop)]
        if extra:
            unused[name] = extra
    assert not unused, f"config fields no code of the recipe reads: {unused}"


def test_every_number_declares_its_range_and_every_default_lies_in_it():
    from recipe_zoo import registry

    missing, outside = [], []
    for name, spec in sorted(registry.load_all().items()):
        types_ = config.field_types(spec.config)
        defaults = config.build(spec.config, spec.defaults, None, [], name)
        for key, annotation in types_.items():
            base = typing.get_args(annotation)[0] if config.field_range(annotation) else annotation
            if base not in (int, float):
                continue
            valid = config.field_range(annotation)
            if valid is None:
                missing.append(f"{name}: {key}")
            elif not valid.admits(getattr(defaults, key)):
                outside.append(f"{name}: {key}={getattr(defaults, key)} not {valid}")
    assert not missing, f"numeric fields without a Range: {missing}"
    assert not outside, outside


@pytest.mark.parametrize("override, message", [
    ("lr=-1", "override: lr='-1' must be > 0"),
    ("dropout=1", "override: dropout='1' must be in [0, 1)"),
    ("batch_size=0", "override: batch_size='0' must be >= 1"),
    ("eval_every=1.5", "override: eval_every='1.5' must be in [0, 1]"),
    ("precision=bf17", "override: precision='bf17' must be one of ['auto', 'fp32', 'bf16', 'fp16']"),
    ("lr_scaling=cube", "override: lr_scaling='cube' must be one of ['none', 'sqrt', 'linear']"),
])
def test_a_value_out_of_range_is_one_line_and_exit_2_before_the_run(override, message, tmp_path, capsys):
    from recipe_zoo.cli import main

    assert main(["run", "tabular/mlp", override, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"zoo: error: {message}"
    assert not any(tmp_path.iterdir())


def test_a_field_a_recipe_no_longer_has_names_what_replaced_it(tmp_path, capsys):
    """From the command line, a config file, a sweep's best.json and --resume of a run saved before the split."""
    import json

    from recipe_zoo.cli import main
    from recipe_zoo.recipes.tabular.config import XGBConfig

    assert main(["run", "tabular/xgb", "lr=0.1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == ("zoo: error: override: 'lr' is no longer a field of this recipe: "
                                               "the trees' learning rate is xgb_lr")
    best = tmp_path / "best.json"
    best.write_text(json.dumps({"config": {"xgb_lr": 0.05, "batch_size": 512}}))
    assert main(["run", "tabular/xgb", "--config", str(best), "--out", str(tmp_path)]) == 2
    assert "'batch_size' is no longer a field of this recipe: trees read every row" in capsys.readouterr().err
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"recipe": "molecules/fp-xgb", "config": {"hidden": 300},
                                                 "budget": "1m", "seed": 0}))
    assert main(["run", "--resume", str(old)]) == 2
    assert capsys.readouterr().err.strip().endswith("'hidden' is no longer a field of this recipe: a molecules/dmpnn "
                                                    "setting; the trees do not use it")
    assert "lr" not in {f.name for f in dataclasses.fields(XGBConfig)}


def test_device_is_checked_before_the_run(tmp_path, capsys):
    import torch

    from recipe_zoo.cli import main

    assert main(["run", "tabular/mlp", "--device", "gpu", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "zoo: error: --device gpu: not a device (auto, cpu, cuda, cuda:N, mps)"
    if not torch.cuda.is_available():
        assert main(["run", "tabular/mlp", "--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "--device cuda: CUDA is not available here" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_show_lists_data_model_and_optimizer_fields_before_the_loop_fields(capsys):
    from recipe_zoo.cli import main

    assert main(["show", "tabular/mlp"]) == 0
    keys = [line.split()[1] if line.startswith("*") else line.split()[0]
            for line in capsys.readouterr().out.splitlines() if re.match(r"^[* ] \w+ +=", line)]
    assert keys[0] == "data" and keys.index("lr") < keys.index("accum_steps") and keys[-1] == "sync_batchnorm"


# ---------------------------------------------------------------------------------------------
# Every setting toggled: the split and the scored items move only with a key field
# ---------------------------------------------------------------------------------------------

class _SplitRecorded(Exception):
    """Raised by ``_SplitRun.record_split``: the recipe has read its data and split it; nothing trains."""


def _split_of(spec, cfg, tmp_path) -> dict | None:
    """The split a run of ``cfg`` would record (split.csv's parts, each in order: the test part is the scored
    items), from ``train`` stopped at ``record_split``; None when the recipe stops before it (a refused setting)."""
    from recipe_zoo.core.api import SimpleRun
    from recipe_zoo.core.budget import parse_budget

    class _SplitRun(SimpleRun):
        def record_split(self, parts):
            raise _SplitRecorded({name: [str(k) for k in keys] for name, keys in parts.items()})

    run = _SplitRun(budget=parse_budget("2steps"), dir=tmp_path, spec=spec, log=lambda line: None)
    try:
        spec.train(cfg, run)
    except _SplitRecorded as done:
        return done.args[0]
    except Exception:  # noqa: BLE001 - a combination the recipe refuses, or needs more than tiny data: no split
        return None
    return None


def _other_values(hint, value) -> list:
    """Values to toggle a field to: the other choices of a Literal, the other bool, a number halved and doubled."""
    kind = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    if typing.get_origin(kind) is Literal:
        return [c for c in typing.get_args(kind) if c != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, (int, float)) and value == value:
        return [type(value)(value * 2 if value else 1), type(value)(value // 2 if isinstance(value, int) else value / 2)]
    return []


INPUTS = {"data", "target", "weights", "esm_weights", "model", "tokenizer", "inception_weights", "wt", "mutant",
          "eval_data"}  # what names the data or the starting weights: another measurement by definition


@pytest.mark.slow
def test_no_setting_but_a_key_field_moves_the_split_or_the_scored_items(tmp_path):
    """Each recipe on tiny data: every config field that is not a key field (nor one naming the data or weights)
    set to each other value it can take, and the split the run would record compared: the same items in every
    part, in the same order (the test part is what is scored, and paired ranks pair items by position)."""
    import conftest
    from recipe_zoo import registry

    from recipe_zoo.core.precision import torch_state_kept

    with torch_state_kept():  # the recipes set their speed switches as they start
        moved, checked, keyed = _toggle_every_field(registry, conftest, tmp_path)
    assert not moved, "these settings move the split or the scored items without being key fields: " + \
        ", ".join(moved)
    assert len(checked) >= 12 and sum(checked.values()) > 300, checked  # the recipes reached their split
    assert len(keyed) >= 10, keyed  # and a key field (a held-out share, a split seed) does move it: the check sees


def _toggle_every_field(registry, conftest, tmp_path) -> tuple[list, dict, set]:
    """(settings that moved the split without being key fields, toggles compared per recipe, recipes where a key
    field moved it)."""
    moved, checked, keyed = [], {}, set()
    for name, spec in sorted(registry.load_all().items()):
        folder = tmp_path / name.replace("/", "-")
        folder.mkdir()
        args = conftest.small_run_args(name, folder)
        base_cfg = config.build(spec.config, spec.defaults, None, args, name)
        base = _split_of(spec, base_cfg, tmp_path)
        if base is None:
            continue
        key = set(getattr(spec.config, "KEY_FIELDS", ()))
        checked[name] = 0
        hints = typing.get_type_hints(spec.config, include_extras=True)
        for field in dataclasses.fields(spec.config):
            if field.name in INPUTS:
                continue
            for other in _other_values(hints[field.name], getattr(base_cfg, field.name)):
                try:
                    cfg = config.build(spec.config, spec.defaults, None, args + [f"{field.name}={other}"], name)
                except ZooError:
                    continue  # out of the field's range
                got = _split_of(spec, cfg, tmp_path)
                checked[name] += got is not None and field.name not in key
                if got is not None and got != base and field.name in key:
                    keyed.add(name)
                elif got is not None and got != base:
                    moved.append(f"{name} {field.name}={other}")
    return moved, checked, keyed
