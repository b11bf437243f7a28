import pytest
import torch

from recipe_zoo.core import schedule
from recipe_zoo.core.budget import Budget, parse_budget


def test_warmup_cosine_breakpoints():
    f = schedule.make_schedule("cosine", warmup=0.1, final=0.1)
    assert f(0.0) == 0.0
    assert f(0.05) == pytest.approx(0.5)
    assert f(0.1) == pytest.approx(1.0)
    assert f(0.55) == pytest.approx(0.55)  # halfway through the cosine: final + (1 - final) / 2
    assert f(1.0) == pytest.approx(0.1)


def test_wsd_breakpoints():
    f = schedule.make_schedule("wsd", warmup=0.0, decay=0.4, final=0.0)
    assert f(0.0) == 1.0 and f(0.59) == 1.0
    assert f(0.6) == pytest.approx(1.0)
    assert f(0.8) == pytest.approx(0.5)
    assert f(1.0) == pytest.approx(0.0)


def test_one_cycle_from_a_start_fraction():
    f = schedule.make_schedule("linear", warmup=0.25, final=0.1, start=0.2)
    assert f(0.0) == pytest.approx(0.2)
    assert f(0.125) == pytest.approx(0.6)
    assert f(0.25) == pytest.approx(1.0)
    assert f(1.0) == pytest.approx(0.1)


def test_linear_and_constant():
    assert schedule.make_schedule("linear", final=0.2)(0.5) == pytest.approx(0.6)
    assert schedule.make_schedule("constant", warmup=0.5)(0.25) == pytest.approx(0.5)
    assert schedule.make_schedule("constant")(0.9) == 1.0


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown schedule"):
        schedule.make_schedule("cosin")


def test_weight_decay_and_muon_momentum():
    assert schedule.weight_decay_linear(0.25) == 0.75
    assert schedule.muon_momentum(0) == pytest.approx(0.85)
    assert schedule.muon_momentum(150) == pytest.approx(0.90)
    assert schedule.muon_momentum(10_000) == pytest.approx(0.95)


def test_apply_schedules_scales_each_group_from_its_base():
    p1, p2 = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([{"params": [p1], "lr": 0.1, "weight_decay": 0.01},
                           {"params": [p2], "lr": 1.0, "weight_decay": 0.0}])
    mult = schedule.apply_schedules(opt, 0.5, 10, lr=schedule.make_schedule("linear"),
                                    weight_decay=schedule.weight_decay_linear)
    assert mult == pytest.approx(0.5)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.05, 0.5])
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.005)
    schedule.apply_schedules(opt, 1.0, 11, lr=schedule.make_schedule("linear"))
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.0, 0.0])


@pytest.mark.parametrize("text,expected", [
    ("90s", Budget("seconds", 90)), ("5m", Budget("seconds", 300)), ("1h", Budget("seconds", 3600)),
    ("300steps", Budget("steps", 300)), ("3epochs", Budget("epochs", 3)), ("1.5m", Budget("seconds", 90)),
])
def test_parse_budget(text, expected):
    assert parse_budget(text) == expected


@pytest.mark.parametrize("text", ["0s", "-5", "5", "tenmin", "2.5steps", "5parsecs", ""])
def test_parse_budget_rejects(text):
    with pytest.raises(ValueError):
        parse_budget(text)


def test_budget_progress():
    assert Budget("seconds", 100).progress(seconds=25, steps=3, steps_per_epoch=10) == 0.25
    assert Budget("steps", 40).progress(seconds=0, steps=10, steps_per_epoch=10) == 0.25
    assert Budget("epochs", 2).progress(seconds=0, steps=5, steps_per_epoch=10) == 0.25
    assert Budget("steps", 4).progress(seconds=0, steps=9, steps_per_epoch=1) == 1.0


def test_xgboost_time_limit_stops_after_a_round_that_early_stopping_has_seen():
    """A budget spent before the first round ends (a loaded machine) still leaves a best iteration: the limit
    never stops the first round, so XGBoost's early stopping has seen one."""
    import numpy as np
    import xgboost as xgb

    from recipe_zoo.core.budget import xgboost_time_limit

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    model = xgb.XGBRegressor(n_estimators=500, early_stopping_rounds=10, callbacks=[xgboost_time_limit(0.0)])
    model.fit(x[:150], y[:150], eval_set=[(x[150:], y[150:])], verbose=False)
    assert model.best_iteration == 0 and model.get_booster().num_boosted_rounds() == 2
