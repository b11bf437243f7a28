"""Properties over generated input: the override parser and its type coercion, the budget parser, and the
tabular, molecule and protein loaders. Whatever the text, the answer is a correctly typed value (that
round-trips through its own text) or a ZooError naming the key or the file: never another exception."""
import csv
import io
import math
import string
import tempfile
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, Optional

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from recipe_zoo import config
from recipe_zoo.core.errors import ZooError

# No example database in the repository; the autouse environment fixture (temp runs and caches) is the same
# for every example, so sharing it across examples is fine.
SETTINGS = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@dataclass
class Cfg:
    steps: int = 10
    lr: float = 1e-3
    flag: bool = False
    name: str = "x"
    mode: Literal["fast", "slow", "auto-mode"] = "fast"
    limit: int | None = None
    scale: Optional[float] = None
    tag: str | None = None


def _recipe_configs():
    from recipe_zoo.recipes.molecules.config import DMPNNConfig, FPXGBConfig
    from recipe_zoo.recipes.protein.config import FinetuneConfig, OnehotConfig
    from recipe_zoo.recipes.protein.esm_zeroshot import ZeroShotConfig
    from recipe_zoo.recipes.tabular.config import MLPConfig, XGBConfig

    return [Cfg, XGBConfig, MLPConfig, DMPNNConfig, FPXGBConfig, OnehotConfig, FinetuneConfig, ZeroShotConfig]


def typed_ok(value, annotation) -> bool:
    """``value`` is what a field of type ``annotation`` may hold (within its declared range)."""
    valid = config.field_range(annotation)
    if valid is not None:
        return typed_ok(value, typing.get_args(annotation)[0]) and valid.admits(value)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(typed_ok(value, option) for option in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return type(value) is float and math.isfinite(value)
    return type(value) is annotation


numbers_as_text = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False).map(lambda x: f"{x:.3e}"),
    st.integers(0, 10**6).map(lambda n: f"{n:_}"),
)
words = st.sampled_from(["true", "False", "yes", "off", "none", "null", "None", "nan", "-inf", "Infinity", "1e999",
                         "fast", "slow", "auto-mode", "0x10", "1.5.2", "", " ", "١٢", "½", "\x00", "é"])
value_text = st.one_of(numbers_as_text, words, st.text(max_size=20))
json_values = st.one_of(st.none(), st.booleans(), st.integers(-10**400, 10**400), st.floats(allow_subnormal=False), st.text(max_size=10),
                        st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=1))


def check_one(cls, key: str, value, source: str = "override"):
    """Apply ``key``=``value``: a typed value that round-trips through str(), or a ZooError naming the key."""
    annotation = config.field_types(cls)[key]
    try:
        cfg = config.apply(cls(), {key: value}, source)
    except ZooError as exc:
        assert key in str(exc) and "\n" not in str(exc), str(exc)
        return None
    got = getattr(cfg, key)
    assert typed_ok(got, annotation), (key, value, got)
    again = getattr(config.apply(cls(), {key: str(got)}, source), key)
    assert again == got and type(again) is type(got), (key, got, again)
    return got


@SETTINGS
@given(data=st.data())
def test_overrides_give_a_typed_value_or_an_error_naming_the_key(data):
    cls = data.draw(st.sampled_from(_recipe_configs()))
    key = data.draw(st.sampled_from([f.name for f in fields(cls)]))
    text = data.draw(value_text)
    items = config.parse_overrides([f"{key}={text}"])
    assert list(items) == [key]
    got = check_one(cls, key, items[key])
    if got is not None:  # and back through the command line's own key=value text
        again = getattr(config.apply(cls(), config.parse_overrides([f"{key}={got}"]), "override"), key)
        assert again == got and type(again) is type(got), (key, got, again)


@SETTINGS
@given(key=st.sampled_from([f.name for f in fields(Cfg)]), value=json_values)
@example(key="steps", value=None)  # a JSON null: int(None) raised TypeError, not a ZooError
@example(key="lr", value=10**400)  # float(10**400) raised OverflowError
@example(key="name", value=[1])
@example(key="scale", value=float("nan"))
def test_config_file_values_give_a_typed_value_or_an_error_naming_the_key(key, value):
    check_one(Cfg, key, value, source="c.json")


@SETTINGS
@given(key=st.text(min_size=1, max_size=12).filter(lambda k: "=" not in k and k.strip()), value=value_text)
def test_unknown_keys_are_errors_naming_the_key(key, value):
    assume(key.strip() not in {f.name for f in fields(Cfg)})
    with pytest.raises(ZooError) as err:
        config.apply(Cfg(), config.parse_overrides([f"{key}={value}"]), "override")
    assert repr(key.strip()) in str(err.value) and "unknown key" in str(err.value)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e400"])
@pytest.mark.parametrize("key", ["lr", "scale"])
def test_a_float_that_is_not_finite_is_refused(key, text):
    with pytest.raises(ZooError, match=f"{key}='{text}' is not a finite number"):
        config.apply(Cfg(), config.parse_overrides([f"{key}={text}"]), "override")


def test_no_recipe_config_defaults_to_an_infinite_float():
    for cls in _recipe_configs():
        for f in fields(cls):
            if isinstance(f.default, float):
                assert math.isfinite(f.default), (cls.__name__, f.name)


# ---------------------------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------------------------

UNITS = ["s", "sec", "m", "min", "h", "steps", "step", "epochs", "epoch"]
amounts = st.one_of(st.integers(0, 10**25).map(str),
                    st.decimals(min_value=0, max_value=10**9, places=7, allow_nan=False).map(str),
                    st.from_regex(r"[0-9]{0,4}\.?[0-9]{1,30}", fullmatch=True))
budget_text = st.tuples(st.sampled_from(["", " "]), amounts, st.sampled_from(["", " "]),
                        st.sampled_from(UNITS + [u.upper() for u in UNITS])).map("".join)


def _parse(text: str):
    from recipe_zoo.runs import parse_budget_arg

    return parse_budget_arg(text)


@SETTINGS
@given(text=st.one_of(st.text(max_size=30), budget_text))
def test_any_budget_text_is_a_positive_budget_or_an_error(text):
    try:
        b = _parse(text)
    except ZooError as exc:
        assert "budget" in str(exc) and "\n" not in str(exc)
        return
    assert b.kind in ("seconds", "steps", "epochs") and 0 < b.amount < math.inf
    assert b.kind != "steps" or b.amount == int(b.amount)


@SETTINGS
@given(text=budget_text)
def test_valid_budgets_round_trip_through_their_text(text):
    try:
        b = _parse(text)
    except ZooError:
        return
    again = _parse(str(b))
    assert again == b and str(again) == str(b), (text, str(b))


# ---------------------------------------------------------------------------------------------
# Loaders: generated files load, or fail with a ZooError naming the file
# ---------------------------------------------------------------------------------------------

cells = st.one_of(st.just(""), st.sampled_from(["nan", "NaN", "NA", "inf", "-inf", "1e400", "?", "None", "TRUE"]),
                  st.integers(-10**6, 10**6).map(str), st.floats(allow_subnormal=False).map(repr),
                  st.sampled_from(["red", "blue", "große", "日本", "a,b", 'say "hi"', "x\ny"]), st.text(max_size=8))


def _csv_text(header: list[str], rows: list[list[str]], raw: bool) -> str:
    """Through csv.writer (quoted as needed), or joined raw with commas (ragged and unquoted, as hand-made
    files are)."""
    if raw:
        return "\n".join(",".join(r) for r in [header, *rows]) + "\n"
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    return out.getvalue()


column_kinds = {
    "float": st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False).map(lambda x: f"{x:.4g}"),
    "int": st.integers(-5, 50).map(str),
    "class": st.sampled_from(["red", "blue", "große", "日本", "a,b", 'say "hi"']),
    "any": cells,
}


@st.composite
def tables(draw):
    """A table that is mostly well formed: named columns of numbers, integers or words and a target 'y';
    in some tables odd cells, odd names, ragged or unquoted rows, or bytes that are not UTF-8."""
    noisy = draw(st.booleans())
    names = draw(st.lists(st.one_of(st.sampled_from(["a", "b", "c"]), st.text(max_size=5) if noisy else st.just("d")),
                          min_size=1, max_size=4)) + ["y"]
    names = draw(st.permutations(names))
    kinds = [draw(st.sampled_from(sorted(column_kinds) if noisy else ["float", "int", "class"])) for _ in names]
    rows = []
    for _ in range(draw(st.integers(0 if noisy else 4, 14))):
        row = [draw(st.one_of(column_kinds[k], cells) if noisy and draw(st.integers(0, 4)) == 2 else column_kinds[k])
               for k in kinds]
        if noisy and draw(st.integers(0, 9)) == 3:  # a ragged row: a cell too many or too few
            row = row + [draw(cells)] if draw(st.booleans()) else row[:-1]
        rows.append(row)
    raw = _csv_text(names, rows, raw=noisy and draw(st.booleans())).encode()
    if noisy and draw(st.integers(0, 4)) == 2:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\xff\xfe\xfa" + raw[at:]
    target = draw(st.sampled_from(["y", "y", "y", "price"] if noisy else ["y"]))
    return raw, target, draw(st.sampled_from(["auto", "regression", "binary", "multiclass"]))


class FakeRun:
    seed = 0

    def report(self, *a):
        pass

    def log(self, *a):
        pass

    def set_metric(self, *a):
        pass


def _written(name: str, content: bytes):
    folder = tempfile.TemporaryDirectory()
    path = Path(folder.name) / name
    path.write_bytes(content)
    return folder, path


def loads_or_names_the_file(load, path: Path):
    try:
        return load()
    except ZooError as exc:
        assert path.name in str(exc) and "\n" not in str(exc), str(exc)
        return None


@SETTINGS
@given(table=tables())
@example(table=(b"a,y\n1,2\ninf,3\n4,5\n", "y", "auto"))  # an infinite feature: XGBoost raised at fit time
@example(table=(b"a,y\n1,2\n1e40,3\n4,5\n", "y", "auto"))  # past float32's range: inf after the cast
@example(table=(b"a,y\n1,2\n3,inf\n4,5\n", "y", "regression"))  # an infinite target
@example(table=(b"a,y\n1,2\n3,x\n4,5\n5,6\n", "y", "auto"))  # a word among numbers: was 4 classes
@example(table=(b'"a\nb",y\n1,2\n3,4\n', "price", "auto"))  # a newline in a column name the message lists
@example(table=(b"a,y\n1,2\n\xff\xfe\xfa,3\n", "y", "auto"))
@example(table=(b"", "y", "auto"))
def test_tabular_loader_on_generated_csvs(table):
    from recipe_zoo.recipes.tabular import data as tab
    from recipe_zoo.recipes.tabular.config import TabularConfig

    content, target, task = table
    folder, path = _written("gen.csv", content)
    with folder:
        cfg = TabularConfig(data=str(path), target=target, task=task)
        loaded = loads_or_names_the_file(lambda: tab.load_table(cfg, FakeRun()), path)
    if loaded is not None:
        assert len(loaded.y) == len(loaded.X) > 0 and loaded.task in ("regression", "binary", "multiclass")
        numeric = loaded.X.select_dtypes("number").to_numpy()
        assert not (numeric == float("inf")).any() and not (numeric == -float("inf")).any()


SMILES_CHARS = "CNOSPFIclBrnosp()[]=#@+-.123456789%/\\*"
number = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False).map(lambda x: f"{x:.3g}")
mostly_numbers = st.one_of(number, number, number, number, cells)  # one cell in five odd


def label_lists(n: int):
    """n labels: all numbers in half the examples, some odd cells in the rest."""
    return st.one_of(st.lists(number, min_size=n, max_size=n), st.lists(mostly_numbers, min_size=n, max_size=n))


smiles_text = st.one_of(st.sampled_from(["CCO", "c1ccccc1", "CC(=O)O", "[Na+].[Cl-]", "C1CC", "", "C" * 200]),
                        st.text(alphabet=SMILES_CHARS, max_size=25), st.text(alphabet=SMILES_CHARS, max_size=25),
                        st.text(max_size=10))


@SETTINGS
@given(smiles=st.lists(smiles_text, min_size=1, max_size=8), targets=label_lists(8), skip=st.booleans())
@example(smiles=["CCO", "C1CC"], targets=["1"] * 8, skip=False)  # the message names the row and the SMILES
@example(smiles=["CCO", "C\x00C"], targets=["1"] * 8, skip=False)
@example(smiles=["CCO", "CC"], targets=["1", "inf"] + ["1"] * 6, skip=False)
def test_molecule_loader_on_random_smiles(smiles, targets, skip):
    from recipe_zoo.recipes.molecules.table import read_table
    from recipe_zoo.recipes.molecules.config import MolConfig

    content = _csv_text(["smiles", "y"], [[s, t] for s, t in zip(smiles, targets)], raw=False).encode()
    folder, path = _written("mols.csv", content)
    with folder:
        cfg = MolConfig(data=str(path), target="y", on_invalid="skip" if skip else "auto")
        loaded = loads_or_names_the_file(lambda: read_table(cfg), path)
    if loaded is not None:
        assert len(loaded.mols) == len(loaded.smiles) == len(loaded.y) and all(m is not None for m in loaded.mols)


LETTERS = string.ascii_letters + "*-.? "
AMINO_TEXT = st.text(alphabet="ACDEFGHIKLMNPQRSTVWY", min_size=1, max_size=40)


@SETTINGS
@given(seqs=st.one_of(st.lists(AMINO_TEXT, min_size=10, max_size=14),
                      st.lists(st.one_of(AMINO_TEXT, AMINO_TEXT, st.text(alphabet=LETTERS, max_size=40)),
                               min_size=10, max_size=14)),
       labels=label_lists(14), kind=st.sampled_from(["fasta", "csv"]),
       task=st.sampled_from(["auto", "regression", "classification"]))
def test_protein_loader_on_random_letter_strings(seqs, labels, kind, task):
    from recipe_zoo.recipes.protein.loading import load_data
    from recipe_zoo.recipes.protein.sequences import AMINO, EXTRA
    from recipe_zoo.recipes.protein.config import ProteinConfig

    if kind == "fasta":
        content = "".join(f">r{i}|{lab.replace(chr(10), ' ')}\n{s}\n" for i, (s, lab) in enumerate(zip(seqs, labels)))
    else:
        content = _csv_text(["sequence", "target"], [[s, lab] for s, lab in zip(seqs, labels)], raw=False)
    folder, path = _written(f"prot.{kind}", content.encode())
    with folder:
        cfg = ProteinConfig(data=str(path), task=task, max_len=30)
        loaded = loads_or_names_the_file(lambda: load_data(cfg, FakeRun()), path)
    if loaded is not None:
        assert len(loaded.seqs) == len(loaded.y) and all(set(s) <= set(AMINO + EXTRA) for s in loaded.seqs)
        assert all(len(s) <= 30 for s in loaded.seqs)
