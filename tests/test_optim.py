import pytest
import torch
from torch import nn

from recipe_zoo.core import optim


def test_orthogonalize_singular_values_near_one():
    torch.manual_seed(0)
    for shape in [(128, 32), (32, 256), (96, 48)]:
        s = torch.linalg.svdvals(optim.orthogonalize(torch.randn(*shape)))
        assert s.min() > 0.7 and s.max() < 1.2, (shape, s.min(), s.max())
        assert abs(s.median().item() - 1) < 0.05


def test_muon_update_is_orthogonal_and_shape_scaled():
    torch.manual_seed(0)
    grad = torch.randn(64, 16)
    buf = torch.zeros_like(grad)
    update = optim.muon_update(grad, buf, momentum=0.95)
    s = torch.linalg.svdvals(update / 2.0)  # tall 64x16 matrix: scaled by sqrt(64/16) = 2
    assert s.min() > 0.7 and s.max() < 1.2
    assert torch.allclose(buf, 0.05 * grad)  # momentum buffer updated in place


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.body = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.conv = nn.Conv1d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 3)

    def forward(self, idx):
        x = self.norm(self.body(self.emb(idx)))
        x = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x).mean(1)


def test_split_covers_every_parameter_exactly_once():
    model = Tiny()
    groups = optim.split_param_groups(model, head=["head"])
    names = {kind: [n for n, _ in ps] for kind, ps in groups.items()}
    assert names["embedding"] == ["emb.weight"]
    assert names["head"] == ["head.weight", "head.bias"]
    assert set(names["matrix"]) == {"body.weight", "conv.weight"}
    assert set(names["scalar"]) == {"body.bias", "norm.weight", "norm.bias", "conv.bias"}
    assert sum(len(v) for v in names.values()) == len(list(model.parameters()))


def test_assert_covers_catches_missing_and_duplicates():
    model = Tiny()
    params = list(model.parameters())
    with pytest.raises(AssertionError, match="missing"):
        optim.assert_covers(model, [params[:-1]])
    with pytest.raises(AssertionError, match="duplicated"):
        optim.assert_covers(model, [params, params[:1]])


def test_split_rejects_unknown_head():
    with pytest.raises(ValueError, match="no parameter matches"):
        optim.split_param_groups(Tiny(), head=["lm_head"])


def test_hybrid_groups_cover_model_and_say_their_kind():
    model = Tiny()
    groups = optim.hybrid_groups(model, head=["head"], matrix_lr=0.02, embedding_lr=0.3, head_lr=0.004,
                                 scalar_lr=0.005, matrix_wd=0.2)
    opt = optim.MuonAdamW(groups)
    optim.assert_covers(model, [g["params"] for g in opt.param_groups])
    kinds = {g["kind"]: g["optimizer"] for g in opt.param_groups}
    assert kinds == {"matrix": "muon", "embedding": "adamw", "head": "adamw", "scalar": "adamw"}
    idx = torch.randint(0, 10, (4, 5))
    before = [p.detach().clone() for p in model.parameters()]
    model(idx).square().mean().backward()
    opt.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_muon_rejects_vectors():
    with pytest.raises(ValueError, match="matrices only"):
        optim.MuonAdamW([{"params": [nn.Parameter(torch.zeros(3))], "optimizer": "muon"}])


def test_adamw_path_matches_torch_adamw():
    torch.manual_seed(0)
    ours, ref = nn.Linear(6, 4), nn.Linear(6, 4)
    ref.load_state_dict(ours.state_dict())
    kw = dict(lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-10)
    opt = optim.MuonAdamW([{"params": list(ours.parameters()), "optimizer": "adamw", **kw}])
    opt_ref = torch.optim.AdamW(ref.parameters(), **kw)
    for step in range(20):
        x = torch.randn(8, 6)
        for model, o in ((ours, opt), (ref, opt_ref)):
            o.zero_grad()
            model(x).pow(2).mean().backward()
            o.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_muon_batches_same_shape_matrices_with_each_result_as_alone(monkeypatch):
    """Same-shape matrices (and conv filters) are orthogonalised as one stack, also when the stack is cut in
    chunks: every parameter ends exactly where the one-matrix-at-a-time update (``muon_update``) takes it."""
    torch.manual_seed(0)
    shapes = [(16, 8), (16, 8), (8, 24), (16, 8), (8, 4, 3), (8, 4, 3), (24, 8)]
    params = [nn.Parameter(torch.randn(*s)) for s in shapes]
    alone = [p.detach().clone() for p in params]
    buffers = [torch.zeros_like(p) for p in params]
    lr, wd = 0.05, 0.1
    monkeypatch.setattr(optim, "MUON_BATCH_ELEMENTS", 2 * 16 * 8)  # the three 16x8 go as a chunk of 2, then 1
    opt = optim.MuonAdamW([{"params": params, "optimizer": "muon", "lr": lr, "weight_decay": wd, "momentum": 0.9}])
    for _ in range(3):
        grads = [torch.randn(*s) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(grads):
            update = optim.muon_update(g, buffers[i], 0.9)
            alone[i].sub_(alone[i] * ((update * alone[i]) > 0), alpha=lr * wd)
            alone[i].sub_(update, alpha=lr)
    for p, a in zip(params, alone):  # the optimizer runs these same per-tensor ops in this order, in this process
        assert torch.equal(p.detach(), a)


def test_cautious_weight_decay_only_where_signs_agree():
    p = nn.Parameter(torch.tensor([[1.0, -1.0], [1.0, -1.0]]))
    opt = optim.MuonAdamW([{"params": [p], "optimizer": "muon", "lr": 0.0, "weight_decay": 0.5}])
    # with lr 0 nothing moves; with lr>0 decay applies only on agreeing coordinates
    p.grad = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    opt.step()
    assert torch.equal(p.detach(), torch.tensor([[1.0, -1.0], [1.0, -1.0]]))


def test_lr_scaling_rules():
    assert optim.width_lr_scale(768) == 1.0
    assert optim.width_lr_scale(3072) == pytest.approx(0.5)
    assert optim.batch_lr_scale(512, 256) == pytest.approx(2 ** 0.5)


def test_decay_groups_skip_biases_norms_embeddings():
    model = Tiny()
    groups = optim.decay_groups(model, 0.1)
    decayed = {id(p) for p in groups[0]["params"]}
    assert decayed == {id(model.body.weight), id(model.conv.weight), id(model.head.weight)}
    assert groups[1]["weight_decay"] == 0.0


def test_layer_decay_scales_lr_by_depth_from_the_top():
    from recipe_zoo.core.optim import layer_decay

    depth = {"embed": 0, "block.0": 1, "block.1": 2, "norm": 3}
    assert layer_decay(depth, 0.5) == {"embed": 0.125, "block.0": 0.25, "block.1": 0.5, "norm": 1.0}
    assert layer_decay(depth, 0.5, top=4)["norm"] == 0.5  # a top above the deepest given (a head elsewhere)
    assert set(layer_decay(depth, 1.0).values()) == {1.0}
