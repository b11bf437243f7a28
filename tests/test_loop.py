"""The training loop: accumulation, exact resume, divergence, checkpoints."""
import os
import signal

import pytest
import torch
from torch import nn

from recipe_zoo.core import checkpoint
from recipe_zoo.core.api import SimpleRun
from recipe_zoo.core.batches import TensorBatches
from recipe_zoo.core.budget import Budget
from recipe_zoo.core.loop import LoopSettings, fit
from recipe_zoo.core.loop_state import eval_thresholds
from recipe_zoo.core.weights import BestState
from recipe_zoo.core.schedule import apply_schedules, make_schedule
from recipe_zoo.core.training_errors import Diverged, Interrupted, OutOfMemory


def make_problem(seed=0, n=96, dropout=0.0):
    g = torch.Generator().manual_seed(123)
    x = torch.randn(n, 5, generator=g)
    y = (x @ torch.randn(5, 3, generator=g)).argmax(1)  # a learnable rule
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 3))
    return model, x, y


def noisy(batch, g):  # augmentation drawing from the batch's generator
    x, y = batch
    return x + 0.1 * torch.randn(x.shape, generator=g), y


def loss_fn(model, batch):
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def run_fit(model, x, y, budget, batch_size=16, accum=1, lr=0.1, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    batches = TensorBatches((x, y), batch_size, seed=7, transform=kw.pop("transform", None))
    update = kw.pop("update", None) or (lambda o, p, s: apply_schedules(o, p, s, lr=make_schedule("cosine", warmup=0.1)))
    settings = LoopSettings(accum_steps=accum, eval_every=kw.pop("eval_every", 0.5), log_every=1e9,
                            ema_decay=kw.pop("ema_decay", 0.0), lookahead=kw.pop("lookahead", 0.0),
                            epoch_cap=kw.pop("epoch_cap", 0.0), sync_every=kw.pop("sync_every", 0),
                            profile=kw.pop("profile", 0), compile=kw.pop("compile", False))
    loss = kw.pop("loss", loss_fn)
    run = SimpleRun(budget, log=lambda s: None, **kw)
    result = fit(model, opt, batches, loss, run, device=torch.device("cpu"),
                 evaluate=lambda m: {"loss": loss_fn(m, (x, y)).item()}, update_hparams=update, settings=settings)
    return result, run.eval_rows


def test_accumulation_equals_larger_batch():
    model_a, x, y = make_problem()
    model_b, _, _ = make_problem()
    run_fit(model_a, x, y, Budget("steps", 3), batch_size=32, accum=1)
    run_fit(model_b, x, y, Budget("steps", 3), batch_size=8, accum=4)
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sync_every", [1, 3])
def test_resume_after_stop_equals_uninterrupted(tmp_path, sync_every):
    """Data order, augmentation, dropout RNG, optimizer, schedule, EMA, Lookahead and eval rows all
    continue exactly; also when the losses are read every few steps."""
    budget = Budget("steps", 24)
    ref_model, x, y = make_problem(dropout=0.2)
    ref, ref_rows = run_fit(ref_model, x, y, budget, transform=noisy, ema_decay=0.9, eval_every=0.25, lookahead=0.95)

    model, _, _ = make_problem(dropout=0.2)
    ckpt = tmp_path / "ckpt.pt"

    def interrupt_at_10(o, p, step):
        if step == 10:
            os.kill(os.getpid(), signal.SIGINT)  # handled between steps: the loop checkpoints and stops
        return apply_schedules(o, p, step, lr=make_schedule("cosine", warmup=0.1))

    with pytest.raises(Interrupted) as info:
        run_fit(model, x, y, budget, transform=noisy, ema_decay=0.9, eval_every=0.25, update=interrupt_at_10,
                checkpoint_path=ckpt, lookahead=0.95, sync_every=sync_every)
    assert info.value.step == 11 and info.value.signum == signal.SIGINT

    # a fresh process would build everything again from scratch: do the same, then resume
    model2, _, _ = make_problem(seed=99, dropout=0.2)
    torch.manual_seed(12345)  # the RNG state must come from the checkpoint, not from here
    res, rows = run_fit(model2, x, y, budget, transform=noisy, ema_decay=0.9, eval_every=0.25,
                        checkpoint_path=ckpt, resume_from=ckpt, lookahead=0.95, sync_every=sync_every)
    assert res.steps == ref.steps == 24
    for a, b in zip(ref_model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(ref.eval_model.parameters(), res.eval_model.parameters()):
        assert torch.equal(a, b)
    assert [r["loss"] for r in rows] == [r["loss"] for r in ref_rows[-len(rows):]]
    assert res.metrics == ref.metrics


def test_best_state_and_last_metrics_survive_a_resume(tmp_path):
    """A BestState handed to fit(keep=...) travels in the checkpoint. The metric here is best at the first
    evaluation (step 6); the run stops at step 11, so without it the resumed run would keep step 12's state."""
    budget = Budget("steps", 24)

    def go(model, x, y, **kw):
        best = BestState(higher_is_better=True)

        def evaluate(m):
            loss = loss_fn(m, (x, y)).item()
            best.update(loss, m)  # "higher is better" on the loss: the earliest evaluation wins
            return {"loss": loss}

        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        update = kw.pop("update", lambda o, p, s: apply_schedules(o, p, s, lr=make_schedule("constant")))
        result = fit(model, opt, TensorBatches((x, y), 16, seed=7), loss_fn, SimpleRun(budget, log=lambda s: None, **kw),
                     device=torch.device("cpu"), evaluate=evaluate, settings=LoopSettings(eval_every=0.25, log_every=1e9),
                     update_hparams=update, keep={"best": best})
        return result, best

    ref_model, x, y = make_problem()
    ref, ref_best = go(ref_model, x, y)
    ckpt = tmp_path / "ckpt.pt"

    def interrupt_at_10(o, p, step):
        if step == 10:
            os.kill(os.getpid(), signal.SIGINT)
        return apply_schedules(o, p, step, lr=make_schedule("constant"))

    with pytest.raises(Interrupted):
        go(make_problem()[0], x, y, update=interrupt_at_10, checkpoint_path=ckpt)
    res, best = go(make_problem(seed=5)[0], x, y, checkpoint_path=ckpt, resume_from=ckpt)
    assert best.value == ref_best.value
    assert all(torch.equal(best.state[k], ref_best.state[k]) for k in ref_best.state)
    # a run killed after its last evaluation resumes with nothing left to train, and still has its metrics
    done, _ = go(make_problem(seed=6)[0], x, y, checkpoint_path=ckpt, resume_from=ckpt)
    assert done.metrics == ref.metrics and done.steps == 24


def test_out_of_memory_names_the_micro_batch():
    model, x, y = make_problem()

    def oom_loss(m, batch):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(OutOfMemory, match="at step 0 with a micro-batch of 16 \\(x2 accumulation\\): CUDA out"):
        fit(model, opt, TensorBatches((x, y), 16, seed=0), oom_loss, SimpleRun(Budget("steps", 3), log=lambda s: None),
            device=torch.device("cpu"), evaluate=lambda m: {}, update_hparams=lambda o, p, s: 1.0,
            settings=LoopSettings(accum_steps=2))


def test_nan_loss_diverges():
    model, x, y = make_problem()
    x = x.clone()
    x[0, 0] = float("nan")
    with pytest.raises(Diverged, match="non-finite.*lower the LR"):
        run_fit(model, x, y, Budget("steps", 10), batch_size=96)


def test_losses_read_every_few_steps_change_nothing_but_when_they_are_read(monkeypatch):
    """sync_every=5 (what a GPU does, 16 there): the same weights, evaluations and train rows as reading every
    step; a loss gone NaN is still caught and named by its own step, not the step that read it. (The budgets
    are long enough that the train rows, read every 1%, leave the windows whole.)"""
    from recipe_zoo.core import profiling

    runs, reads, read = [], [], profiling.LossWindow.read
    monkeypatch.setattr(profiling.LossWindow, "read", lambda self, device: reads.append(len(self.losses)) or read(self, device))
    for k in (1, 5):
        model, x, y = make_problem()
        run = SimpleRun(Budget("steps", 1000), log=lambda s: None)
        fit(model, torch.optim.SGD(model.parameters(), lr=0.1), TensorBatches((x, y), 16, seed=7), loss_fn, run,
            device=torch.device("cpu"), evaluate=lambda m: {"loss": loss_fn(m, (x, y)).item()},
            update_hparams=lambda o, p, s: 1.0, settings=LoopSettings(eval_every=0.3, log_every=0, sync_every=k,
                                                                      ema_decay=0.9))
        runs.append((model, run))
    (a, run_a), (b, run_b) = runs
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))  # one process, the same ops in
    # the same order: when the losses are read changes no computation
    assert len(run_a.train_rows) == 100 and len(run_a.eval_rows) == 4
    assert reads[:1000] == [1] * 1000 and max(reads[1000:]) == 5 and len(reads) < 1000 + 1000 / 3
    drop = lambda rows: [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]  # noqa: E731
    assert drop(run_a.train_rows) == drop(run_b.train_rows) and drop(run_a.eval_rows) == drop(run_b.eval_rows)

    def nan_from_step_6(batch, g):
        calls.append(1)
        return (batch[0] * float("nan"), batch[1]) if len(calls) > 6 else batch

    for k in (1, 4):
        calls = []
        model, x, y = make_problem()
        with pytest.raises(Diverged) as info:
            run_fit(model, x, y, Budget("steps", 2000), transform=nan_from_step_6, sync_every=k)
        # step 0 (FLOPs counted, untimed) is read alone, then steps 1-4 and 5-8 together
        assert info.value.step == 6 and len(calls) == (7 if k == 1 else 9)


def test_profile_traces_steps_without_changing_or_timing_them(tmp_path):
    """profile=4: steps 1-4 (after the FLOP-counting step 0) are traced into profile.txt and trace.json.gz; the
    weights are those of an untraced run, and throughput counts only the 15 timed steps of 20."""
    import gzip
    import json

    traced, x, y = make_problem()
    res, _ = run_fit(traced, x, y, Budget("steps", 20), profile=4, sync_every=3, dir=tmp_path)
    plain, _, _ = make_problem()
    run_fit(plain, x, y, Budget("steps", 20))
    assert all(torch.equal(a, b) for a, b in zip(traced.parameters(), plain.parameters()))  # one process, the
    # same ops: the profiler records them, it changes none
    text = (tmp_path / "profile.txt").read_text()
    assert text.startswith("4 optimizer steps traced on cpu")
    for name in ("zoo::batch", "zoo::forward_backward", "zoo::clip", "zoo::optimizer", "aten::addmm"):
        assert name in text, name
    events = json.loads(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()))["traceEvents"]
    assert sum(e.get("name") == "zoo::optimizer" for e in events) == 4
    assert res.samples_per_s * res.train_seconds == pytest.approx(15 * 16)

    short, _, _ = make_problem()  # the run ends inside the trace: what was traced is still written
    run_fit(short, x, y, Budget("steps", 3), profile=10, dir=tmp_path / "short")
    assert (tmp_path / "short" / "profile.txt").read_text().startswith("2 optimizer steps traced")


class StepClock:
    """The loop's step clock (``profiling.time``, what charges steps to a time budget) moved only by the steps:
    each costs ``step`` seconds, so a time budget ends at the same step on any CPU, however loaded."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        return self.now

    def loss(self, model, batch):
        self.now += self.step
        return loss_fn(model, batch)


@pytest.fixture
def step_clock(monkeypatch):
    from recipe_zoo.core import profiling

    def install(step: float) -> StepClock:
        clock = StepClock(step)
        monkeypatch.setattr(profiling, "time", clock)
        return clock
    return install


def test_time_budget_with_losses_read_every_few_steps(step_clock):
    """0.2 s at 1e-4 s a step: windows of 8 steps (8e-4 s, under the 1e-3 s a window may last: half a train row's
    share), read together; the budget ends after 2,000 charged steps (the first, counting FLOPs, is not), or at
    most one window later where the sum rounds short."""
    clock = step_clock(1e-4)
    model, x, y = make_problem()
    res, rows = run_fit(model, x, y, Budget("seconds", 0.2), sync_every=8, loss=clock.loss)
    assert 2000 <= res.steps - 1 <= 2008
    assert 0.2 <= res.train_seconds <= 0.2 + 8e-4 + 1e-9
    assert rows[-1]["progress"] == 1.0


def test_compiling_steps_are_charged_to_a_time_budget_but_not_timed(step_clock, monkeypatch):
    """compile=true: steps 1-2 (compiling; step 0 counts FLOPs) are on the budget's clock but not in the throughput;
    the FLOP-counting step is on neither."""
    from recipe_zoo.core import train_step

    monkeypatch.setattr(train_step, "maybe_compile", lambda model, on: model)  # the loop's accounting, not inductor
    clock = step_clock(0.01)
    model, x, y = make_problem()
    res, _ = run_fit(model, x, y, Budget("steps", 10), compile=True, loss=clock.loss)
    assert res.train_seconds == pytest.approx(9 * 0.01) and res.samples_per_s == pytest.approx(16 / 0.01)
    model, x, y = make_problem()
    res, _ = run_fit(model, x, y, Budget("seconds", 0.1), compile=True, loss=clock.loss)
    assert res.steps - 1 in (10, 11)  # the compiling steps spent budget: 10 charged, as without compile


def test_exploding_loss_diverges():
    model, x, y = make_problem()
    with pytest.raises(Diverged):
        run_fit(model, x * 100, y, Budget("steps", 50), lr=50.0)


def test_epoch_budget_and_eval_points():
    model, x, y = make_problem()
    res, rows = run_fit(model, x, y, Budget("epochs", 2), batch_size=16, eval_every=0.5)
    assert res.steps == 12  # 96 samples / 16 = 6 steps per epoch
    assert [r["step"] for r in rows] == [6, 12]
    assert eval_thresholds(0.3) == pytest.approx([0.3, 0.6, 0.9, 1.0])
    assert eval_thresholds(0) == [1.0]


def test_time_budget_stops_near_budget(step_clock):
    """0.5 s at 0.01 s a step, each loss read at once (CPU): the step that spends the budget is the last (50
    charged, 51 where the sum rounds short; the first step counts FLOPs and is not charged)."""
    clock = step_clock(0.01)
    model, x, y = make_problem()
    res, rows = run_fit(model, x, y, Budget("seconds", 0.5), loss=clock.loss)
    charged = res.steps - 1
    assert charged in (50, 51) and res.train_seconds >= 0.5 and res.train_seconds == pytest.approx(0.01 * charged)
    assert rows[-1]["progress"] == 1.0


def test_an_epoch_cap_ends_a_time_budget_like_an_epoch_budget(step_clock):
    """A minute's budget (at 0.01 s a step) with epoch_cap=2 stops after 2 epochs (12 steps), its schedule and
    evaluations run to the end with it, and the weights are those of a 2-epoch budget, bit for bit (the same steps
    on the same batches in this process: the order of operations is the same); without the cap 2 s go past it."""
    clock = step_clock(0.01)
    capped, x, y = make_problem()
    res, rows = run_fit(capped, x, y, Budget("seconds", 60), epoch_cap=2, loss=clock.loss)
    by_epochs, _, _ = make_problem()
    ref, ref_rows = run_fit(by_epochs, x, y, Budget("epochs", 2))
    assert res.steps == ref.steps == 12 and res.train_seconds == pytest.approx(0.11)  # the first step: uncharged
    assert [(r["step"], r["progress"]) for r in rows] == [(r["step"], r["progress"]) for r in ref_rows]
    for a, b in zip(capped.parameters(), by_epochs.parameters()):
        assert torch.equal(a, b)
    uncapped, _, _ = make_problem()
    assert run_fit(uncapped, x, y, Budget("seconds", 2), loss=clock.loss)[0].steps - 1 in (200, 201)


def test_loss_falls():
    model, x, y = make_problem()
    initial = loss_fn(model, (x, y)).item()
    res, rows = run_fit(model, x, y, Budget("steps", 100), batch_size=32)
    assert rows[-1]["loss"] < 0.8 * initial


def test_the_checkpoint_keeps_the_entries_older_checkpoints_have(tmp_path):
    """A resume sets the loop's counters back by name (``checkpoint.load_training``): a counter renamed would leave
    an older checkpoint's value unread and the counter at its default. These are the names checkpoints carry."""
    model, x, y = make_problem()
    run_fit(model, x, y, Budget("steps", 2), checkpoint_path=tmp_path / "c.pt", ema_decay=0.9, lookahead=0.5)
    blob = checkpoint.load(tmp_path / "c.pt")
    assert set(blob) == {"model", "optimizer", "scaler", "ema", "batches", "lookahead", "loop", "rng", "rng_ranks",
                         "keep", "metrics", "precision"}
    assert blob["precision"] == "fp32"  # what the run computed in: a resume in another precision is refused
    assert list(blob["loop"]) == ["step", "train_seconds", "samples", "next_eval", "first_loss", "window_loss",
                                  "window_steps", "last_loss", "next_train_log", "train_window_loss",
                                  "train_window_steps", "flops_per_step"]
    assert blob["loop"]["step"] == 2 and blob["ema"] is not None and blob["lookahead"] is not None


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    checkpoint.save_atomic({"w": torch.ones(3)}, path)

    def broken_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        checkpoint.save_atomic({"w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(checkpoint.load(path)["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temp file left behind


def test_each_save_keeps_the_checkpoint_before_it(tmp_path, monkeypatch):
    """Two checkpoints at most on disk: the last and the one before it, which a resume reads when the last is
    missing (killed between the two renames) or cannot be read; none readable is one line naming both."""
    import re

    from recipe_zoo.core.errors import ZooError

    path = tmp_path / "checkpoint.pt"

    def save(step):
        checkpoint.save_atomic({"loop": {"step": step}}, path, keep_previous=True)

    def step_of(p):
        return checkpoint.load(p)["loop"]["step"]

    for step in (1, 2, 3):
        save(step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.prev.pt", "checkpoint.pt"]
    assert (step_of(path), step_of(checkpoint.previous_path(path))) == (3, 2)
    assert checkpoint.resumable(path).path == path and not checkpoint.resumable(path).skipped

    real_replace = os.replace

    def killed_before_the_new_one_is_named(src, dst):
        if dst == path:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_the_new_one_is_named)
    with pytest.raises(KeyboardInterrupt):
        save(4)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.prev.pt"]
    chosen = checkpoint.resumable(path)
    assert chosen.path == checkpoint.previous_path(path) and chosen.blob["loop"]["step"] == 3
    save(4)  # with no checkpoint.pt the previous one is the only one: kept
    assert (step_of(path), step_of(checkpoint.previous_path(path))) == (4, 3)

    path.write_bytes(path.read_bytes()[:100])  # cut short
    chosen = checkpoint.resumable(path)
    assert chosen.path == checkpoint.previous_path(path) and chosen.blob["loop"]["step"] == 3
    assert chosen.skipped.startswith(f"{path}: cannot be read (")
    checkpoint.previous_path(path).write_bytes(b"not a checkpoint")
    with pytest.raises(ZooError, match=f"^{re.escape(str(path))}: cannot be read .*; "
                                       f"{re.escape(str(checkpoint.previous_path(path)))}: cannot be read .*; "
                                       "the run cannot be resumed: start it again$"):
        checkpoint.resumable(path)


def test_a_full_disk_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """The one kept before the last is removed before a write, so a write needs the room it needed without it:
    on a full disk the last checkpoint stays, whole."""
    import errno

    path = tmp_path / "checkpoint.pt"
    for step in (1, 2):
        checkpoint.save_atomic({"loop": {"step": step}, "w": torch.ones(3)}, path, keep_previous=True)

    def disk_full(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left on device") as info:
        checkpoint.save_atomic({"loop": {"step": 3}}, path, keep_previous=True)
    monkeypatch.undo()
    assert info.value.filename == str(path)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert checkpoint.load(path)["loop"]["step"] == 2


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_checkpoint_load_refuses_pickled_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"x": Evil()}, path)
    with pytest.raises(Exception, match="[Ww]eights only"):
        checkpoint.load(path)


def test_safetensors_export(tmp_path):
    from safetensors.torch import load_file

    model, _, _ = make_problem()
    checkpoint.export_safetensors(model, tmp_path / "m.safetensors")
    loaded = load_file(tmp_path / "m.safetensors")
    state = model.state_dict()
    assert set(loaded) == set(state)
    for key, tensor in state.items():  # a copy of the bytes, not a computation: equal bit for bit
        assert loaded[key].dtype == tensor.dtype and torch.equal(loaded[key], tensor), key


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(5, 5), nn.Tanh()) for _ in range(3))
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def test_activation_checkpointing_gives_the_same_gradients():
    from recipe_zoo.core.precision import enable_activation_checkpointing

    torch.manual_seed(0)
    plain = Blocks()
    ckpt_model = Blocks()
    ckpt_model.load_state_dict(plain.state_dict())
    assert enable_activation_checkpointing(ckpt_model) == 3
    x = torch.randn(4, 5)
    for m in (plain, ckpt_model):
        m(x).square().sum().backward()
    for a, b in zip(plain.parameters(), ckpt_model.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    with pytest.raises(ValueError, match="expose .blocks"):
        enable_activation_checkpointing(nn.Linear(2, 2))


def test_lookahead_pulls_weights_towards_their_average():
    model, x, y = make_problem()
    plain, _, _ = make_problem()
    run_fit(model, x, y, Budget("steps", 20), lookahead=0.95)
    run_fit(plain, x, y, Budget("steps", 20))
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), plain.parameters()))


def test_best_state_keeps_the_best_weights_in_either_direction():
    from recipe_zoo.core.weights import BestState

    model = torch.nn.Linear(2, 1)
    for higher, values, kept in ((True, [0.5, 0.9, 0.7], 0.9), (False, [0.5, 0.9, 0.3], 0.3)):
        best, weights = BestState(higher), {}
        for v in values:
            with torch.no_grad():
                model.weight.fill_(v)
            best.update(v, model)
            weights[v] = model.weight.clone()
        best.restore(model)
        assert best.value == kept and torch.equal(model.weight, weights[kept])  # restored by copying: exact


def test_read_weights_reads_tensors_and_refuses_the_rest(tmp_path):
    """The one guarded reader: safetensors and plain torch files load; a pickle carrying code never runs; a broken
    or missing file is a one-line error naming it."""
    from safetensors.torch import save_file

    from recipe_zoo.core.errors import ZooError

    save_file({"w": torch.ones(2)}, str(tmp_path / "w.safetensors"))
    torch.save({"w": torch.ones(2)}, tmp_path / "w.pt")
    assert torch.equal(checkpoint.read_weights(tmp_path / "w.safetensors")["w"], torch.ones(2))
    assert torch.equal(checkpoint.read_weights(tmp_path / "w.pt")["w"], torch.ones(2))
    torch.save({"w": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(ZooError, match=r"weights=.*evil.pt: refused to load: not a file of plain tensors"):
        checkpoint.read_weights(tmp_path / "evil.pt", key="weights")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(ZooError, match=r"bad.safetensors: cannot read weights"):
        checkpoint.read_weights(tmp_path / "bad.safetensors")
    with pytest.raises(ZooError, match=r"missing.pt: file not found"):
        checkpoint.read_weights(tmp_path / "missing.pt")


def test_every_run_handle_has_what_the_run_protocol_lists(tmp_path):
    """The zoo's Run, its parts and SimpleRun each provide every member of recipe_zoo.core.api.Run; a part that is
    not the main one writes no checkpoint and no rows."""
    from recipe_zoo import runs
    from recipe_zoo.core import api
    from recipe_zoo.core.budget import Budget

    members = [m for m in vars(api.Run) if not m.startswith("_")] + list(api.Run.__annotations__)
    spec = api.RecipeSpec(name="t/x", train=lambda cfg, run: {}, config=object, benchmark="b", metric="m")
    run = runs.Run(spec=spec, cfg=None, budget=Budget("steps", 4), seed=0, dir=tmp_path)
    part = run.part(Budget("steps", 2), main=False)
    handles = [run, run.part(Budget("steps", 2), main=True), part, api.SimpleRun(Budget("steps", 1))]
    for handle in handles:
        missing = [m for m in members if not hasattr(handle, m)]
        assert not missing, (type(handle).__name__, missing)
    # a part that is not the main one keeps a checkpoint of its own (numbered by its turn), resumed only on a resume
    assert part.checkpoint_path == tmp_path / "checkpoint-part0.pt" and part.resume_from is None
    assert part.budget == Budget("steps", 2)
    part.record_eval({"step": 1})
    assert run.eval_rows == []
