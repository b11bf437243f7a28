"""Predict and export across the zoo: every recipe registers a predict hook with typed, documented options, and
model cards are checked when read. (Each domain's round trips are in tests/test_predict_<domain>.py.)"""
import dataclasses
import json

import pytest

from recipe_zoo import config, registry
from recipe_zoo.core import artifact
from recipe_zoo.core.errors import ZooError

NAMES = sorted(r["name"] for r in registry.static_list())


@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_predicts_with_documented_options(name, capsys):
    from recipe_zoo.cli import main

    spec = registry.get(name)
    assert spec.predict is not None, f"{name}: no predict hook"
    assert issubclass(spec.predict_options, artifact.PredictOptions)
    comments = config.field_comments(spec.predict_options)
    assert not [f.name for f in dataclasses.fields(spec.predict_options) if not comments.get(f.name)]
    assert all(callable(fn) for fn in spec.exports.values()) and "safetensors" not in spec.exports
    assert main(["show", name]) == 0
    out = capsys.readouterr().out
    assert "predict: zoo predict RUN_DIR" in out and "export:  zoo export RUN_DIR --format safetensors" in out


def _card(tmp_path, **changes):
    (tmp_path / "w.safetensors").write_bytes(b"")
    artifact.write_card(tmp_path, recipe="x/y", task="regression", weights=["w.safetensors"], selected="final")
    card = json.loads((tmp_path / "model.json").read_text()) | changes
    (tmp_path / "model.json").write_text(json.dumps(card))
    return card


def test_cards_are_read_back_and_checked(tmp_path):
    card = _card(tmp_path)
    assert artifact.read_card(tmp_path) == card and card["format_version"] == artifact.FORMAT_VERSION
    for changes, needle in [({"format_version": 2}, "format_version 2, and this zoo reads format_version 1"),
                            ({"format": "other"}, "not a recipe zoo model card"),
                            ({"weights": ["gone.safetensors"]}, "gone.safetensors: not found")]:
        _card(tmp_path, **changes)
        with pytest.raises(ZooError, match=needle):
            artifact.read_card(tmp_path)
    (tmp_path / "model.json").write_text("{not json")
    with pytest.raises(ZooError, match="not a model card"):
        artifact.read_card(tmp_path)


def test_a_missing_card_says_why(tmp_path):
    with pytest.raises(ZooError, match="no such run directory"):
        artifact.read_card(tmp_path / "nowhere")
    with pytest.raises(ZooError, match="the run did not finish"):
        artifact.read_card(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    with pytest.raises(ZooError, match="ended interrupted .*zoo run --resume"):
        artifact.read_card(tmp_path)


def test_rows_are_written_exactly(tmp_path):
    rows = [{"id": "a", "p": 1 / 3}, {"id": "b", "q": None, "p": float("nan")}]
    text = artifact.write_rows(tmp_path / "r.csv", rows).read_text().splitlines()
    assert text == ["id,p,q", f"a,{1 / 3!r},", "b,,"]
    assert artifact.write_rows(tmp_path / "r.tsv", rows).read_text().splitlines()[0] == "id\tp\tq"
