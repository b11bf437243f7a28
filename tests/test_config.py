from dataclasses import dataclass
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
