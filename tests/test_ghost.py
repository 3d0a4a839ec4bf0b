"""Layer-wise clipping (dpclip_lab.ghost) equals the materialized torch.func path."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dpclip_lab.ghost as ghost
from dpclip_lab.algorithms.oracles import CallableOracle
from dpclip_lab.ghost import ModuleOracle, SelfAttention, TinySequenceModel, supports, unsupported_parameters
from dpclip_lab.per_sample import flat_params
from dpclip_lab.privatizers import clip_scale, normalize_scale
from dpclip_lab.sampling import Batch, make_sampler, poisson_positions
from dpclip_lab.training import module_grad_fn, train

RTOL = 1e-6


def small_cnn(side=8, norm=False):
    k = side // 4
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), *( [nn.GroupNorm(4, 32)] if norm else []), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * k * k, 10))


def _rel(a, b):
    return float((a - b).norm() / b.norm().clamp(min=1e-300))


def _compare(model, X, y, loss=F.cross_entropy, runs=1, q=0.5, normalize=False, seed=0):
    """Sums of the layer-wise oracle vs the materialized one on one Poisson batch."""
    model = model.double()
    theta = flat_params(model).unsqueeze(0).expand(runs, -1).clone()
    if runs > 1:
        theta = theta + 0.01 * torch.randn(theta.shape, generator=torch.Generator().manual_seed(1), dtype=theta.dtype)
    fast = ModuleOracle(model, loss, X, y)
    assert fast.use_ghost
    ref = CallableOracle(_batched_grad_fn(model, loss, X, y))
    g = torch.Generator().manual_seed(seed)
    batch = make_sampler("poisson", X.shape[0], max(1, int(q * X.shape[0]))).sample(0, runs, g, "cpu", torch.float64)
    C = torch.linspace(0.05, 0.5, runs, dtype=torch.float64)
    scale = (lambda n: normalize_scale(n, C)) if normalize else (lambda n: clip_scale(n, C))
    a = fast.reduce(theta, batch, scale, need_raw=True)
    b = ref.reduce(theta, batch, scale, need_raw=True)
    assert fast.fallbacks == 0
    for name in ("scaled", "raw", "norms"):
        assert _rel(getattr(a, name), getattr(b, name)) < RTOL, name
    c = fast.reduce(theta, batch, scale)  # the clipped sum alone (one weight row, not two)
    assert c.raw is None and _rel(c.scaled, b.scaled) < RTOL and _rel(c.norms, b.norms) < RTOL
    assert bool((a.norms > 0).any())
    return a


def _batched_grad_fn(model, loss, X, y):
    one = module_grad_fn(model, loss, X, y)

    def fn(theta, idx):
        if theta.dim() == 1:
            return one(theta, idx)
        return torch.stack([one(theta[r], idx[r] if idx.dim() == 2 else idx) for r in range(theta.shape[0])])
    return fn


@pytest.fixture(params=["auto", "auto, channels first", "ghost", "bookkeeping", "bookkeeping, grouped conv",
                        "bookkeeping, thin conv"])
def strategy(request, monkeypatch):
    """The rule branches: as chosen (image batches channels-last, and in the layout they came in),
    ghost norms forced, book-keeping forced (conv layers on small maps from their patches, thin layers
    from theirs), book-keeping with every conv layer by the grouped convolution, and book-keeping with
    every conv layer (groups = 1) treated as thin."""
    monkeypatch.setattr(ghost, "STRATEGY", request.param.split(",")[0])
    if request.param.endswith("channels first"):
        monkeypatch.setattr(ghost, "CHANNELS_LAST", False)
    if request.param.endswith("grouped conv"):
        monkeypatch.setattr(ghost, "PATCH_POSITIONS", 0)
        monkeypatch.setattr(ghost, "THIN_PATCH", 0)
    if request.param.endswith("thin conv"):
        monkeypatch.setattr(ghost, "THIN_PATCH", 10**9)
    return request.param


def _whole(n):
    """The batch of all n examples, in order (one run)."""
    return Batch(torch.arange(n), None, float(n), torch.tensor([n]))


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _cls(n, k, seed=1):
    return torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("layer,shape", [
    (lambda: nn.Linear(5, 3), (5,)),
    (lambda: nn.Linear(5, 3, bias=False), (5,)),
    (lambda: nn.Linear(5, 3), (4, 5)),                       # a sequence: T = 4 positions
    (lambda: nn.Conv1d(3, 4, 3, padding=1), (3, 9)),
    (lambda: nn.Conv1d(3, 4, 3, stride=2, dilation=2), (3, 11)),
    (lambda: nn.Conv1d(4, 4, 3, groups=2, padding="same", padding_mode="circular"), (4, 7)),
    (lambda: nn.Conv2d(2, 4, 3, padding=1), (2, 6, 6)),
    (lambda: nn.Conv2d(2, 4, (3, 2), stride=(2, 1), dilation=(1, 2), padding="valid"), (2, 7, 6)),
    (lambda: nn.Conv2d(2, 4, 3, padding="same", padding_mode="reflect", bias=False), (2, 5, 5)),
    (lambda: nn.Conv2d(4, 6, 3, groups=2, padding=1), (4, 5, 5)),
    # thin layers (C_in · k ≤ THIN_PATCH): per-example gradients by one bmm over their own patches
    (lambda: nn.Conv2d(1, 4, (3, 2), stride=(2, 1), dilation=(1, 2), padding=(1, 0)), (1, 7, 6)),
    (lambda: nn.Conv2d(3, 4, 3, padding="same", padding_mode="reflect"), (3, 12, 11)),   # L > PATCH_POSITIONS
    (lambda: nn.Conv1d(2, 3, 5, stride=2, dilation=2, padding=3, padding_mode="circular"), (2, 13)),
    (lambda: nn.LayerNorm(6), (3, 6)),
    (lambda: nn.LayerNorm((2, 3)), (2, 3)),
    (lambda: nn.GroupNorm(2, 4), (4, 3, 3)),
])
def test_every_layer_type_matches_materialized(layer, shape, strategy):
    torch.manual_seed(0)
    lay = layer()
    with torch.no_grad():  # non-trivial affine parameters for the norm layers
        for p in lay.parameters():
            p.add_(0.3 * torch.randn_like(p))
    model = nn.Sequential(lay, nn.Tanh(), nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, *shape))  # materialize the lazy layer
    _compare(model, _x(24, *shape), _cls(24, 3))


def test_thin_conv_rule_applies_where_documented():
    """Per-example weight gradients from the layer's own patches for conv layers with short patches
    (C_in · k ≤ THIN_PATCH: 3×3 kernels on one- or three-channel images) and groups = 1, at any map size,
    padding or dimension; not for grouped or wider layers."""
    assert ghost.THIN_PATCH == 27
    assert ghost._thin(nn.Conv2d(1, 4, (3, 2), stride=(2, 1), dilation=(1, 2), padding=(1, 0)))
    assert ghost._thin(small_cnn(8)[0]) and ghost._thin(small_cnn(28)[0])  # the benchmark CNN's first layer
    assert ghost._thin(nn.Conv2d(3, 4, 3, padding="same", padding_mode="reflect"))  # C_in · k = 27
    assert ghost._thin(nn.Conv1d(2, 4, 5, padding=1))
    assert not ghost._thin(nn.Conv2d(4, 4, 3, padding=1))      # C_in · k = 36
    assert not ghost._thin(nn.Conv2d(2, 4, 3, groups=2, padding=1))


def test_thin_patches_are_unfolds_layout():
    """The strided gather equals F.unfold (the layout the bmm and the weight's order rely on)."""
    x = _x(3, 2, 9, 8)
    for conv in (nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(2, 4, (3, 2), stride=(2, 3), dilation=(2, 1)),
                 nn.Conv2d(2, 4, (2, 3), stride=2, padding=(1, 2))):
        ref = F.unfold(x, conv.kernel_size, dilation=conv.dilation, padding=conv.padding, stride=conv.stride)
        assert torch.equal(ghost._thin_patches(conv, x), ref)
    conv1 = nn.Conv1d(2, 4, 3, stride=2, dilation=2, padding=2)
    ref = F.unfold(x[:, :, :1], (1, 3), dilation=(1, 2), padding=(0, 2), stride=(1, 2))
    assert torch.equal(ghost._thin_patches(conv1, x[:, :, 0]), ref)


def test_rule_choice_follows_the_documented_costs(monkeypatch):
    """Ghost norm where its Gram matrices cost fewer multiply-adds than forming G_i (embeddings: where they
    are smaller than G_i); conv book-keeping from the patches on small maps, thin layers from their own
    patches, larger maps by the grouped convolution."""
    assert ghost._use_ghost(16, 144, 32)          # the book CNN's second conv on 8×8 digits (4×4 map)
    assert not ghost._use_ghost(49, 288, 32)      # 7×7, 32 → 32: 2 L² < d_in d_out, but 2x slower as ghost
    assert not ghost._use_ghost(196, 144, 32)     # 14×14
    assert not ghost._embedding_ghost(64, 30, 16)  # the book's CharModel: G_i [30, 16] < [64, 64]
    assert ghost._embedding_ghost(32, 50257, 64)   # a word vocabulary: the [T, T] matrices are smaller
    paths = []
    for name in ("_conv_patches", "_thin_patches"):
        real = getattr(ghost, name)
        monkeypatch.setattr(ghost, name, lambda m, x, real=real, name=name: paths.append(name[1:-8]) or real(m, x))
    real_grads = ghost._conv_weight_grads
    monkeypatch.setattr(ghost, "_conv_weight_grads",
                        lambda m, x, g: (paths.append("grouped") if not ghost._thin(m) else None) or real_grads(m, x, g))
    for conv, side in ((nn.Conv2d(8, 8, 3, padding=1), 4),      # TinyCNN's second conv: patches
                       (nn.Conv2d(32, 32, 3, padding=1), 7),    # patches (book-keeping)
                       (nn.Conv2d(1, 8, 3, padding=1), 8),      # thin
                       (nn.Conv2d(1, 16, 3, padding=1), 28),    # thin, on a large map
                       (nn.Conv2d(16, 32, 3, padding=1), 14)):  # a larger map: grouped convolution
        x = torch.randn(5, conv.in_channels, side, side)
        ghost._rule_conv(conv, [[x, torch.randn(5, conv.out_channels, side, side)]])
    assert paths == ["conv", "conv", "thin", "thin", "grouped"]


def test_plan_frees_layer_outputs_and_gradients_before_the_later_rules(monkeypatch):
    """The peak of a step: by the time a layer's rule runs, no layer output is alive any more, and the
    output gradients of the layers whose rules already ran are freed (28×28 CNN, batch 256: the peak RSS
    increment of a step drops by about a fifth with this)."""
    import weakref
    model = small_cnn(8)
    outputs = []
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.register_forward_hook(lambda _m, _i, o: outputs.append(weakref.ref(o)))
    seen = []  # (module, weak refs to its output gradients) in the order the rules run
    rule = ghost._rule

    def spy(m):
        def wrapped(mod, calls):
            assert all(r() is None for r in outputs), "a layer output is still alive when the rules run"
            for prev, refs in seen:
                if isinstance(prev, nn.Conv2d):  # conv terms keep no view of the output gradient
                    assert all(r() is None for r in refs), f"{prev}: output gradient kept after its rule"
            seen.append((mod, [weakref.ref(c[1]) for c in calls]))
            return rule(m)(mod, calls)
        return wrapped
    monkeypatch.setattr(ghost, "_rule", spy)
    X = torch.randn(16, 1, 8, 8)
    norms, scaled, _ = ghost.ghost_norms_and_sum(model, F.cross_entropy, X, _cls(16, 10), None)
    assert [type(m) for m, _ in seen] == [nn.Conv2d, nn.Conv2d, nn.Linear] and len(outputs) == 3
    monkeypatch.setattr(ghost, "_rule", rule)
    ref, ref_scaled, _ = ghost.ghost_norms_and_sum(model, F.cross_entropy, X, _cls(16, 10), None)
    assert torch.equal(norms, ref) and torch.equal(scaled, ref_scaled)


def test_embedding_with_padding_idx_and_repeated_tokens(strategy):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(7, 4, padding_idx=0), nn.Flatten(), nn.Linear(20, 2))
    ids = torch.randint(0, 7, (30, 5), generator=torch.Generator().manual_seed(2))  # repeats within examples
    _compare(model, ids, _cls(30, 2))


def test_module_called_twice_and_frozen_parameter(strategy):
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(4, 4)
            self.head = nn.Linear(4, 2)
            self.head.bias.requires_grad_(False)

        def forward(self, x):
            return self.head(torch.tanh(self.shared(torch.tanh(self.shared(x)))))

    torch.manual_seed(0)
    _compare(Twice(), _x(20, 4), _cls(20, 2))


@pytest.mark.parametrize("runs,normalize", [(1, False), (3, False), (2, True)])
def test_book_cnn_matches_materialized(runs, normalize):
    torch.manual_seed(0)
    _compare(small_cnn(8, norm=True), _x(40, 1, 8, 8), _cls(40, 10), runs=runs, normalize=normalize)


def test_book_cnn_28x28_matches_materialized():
    torch.manual_seed(0)
    _compare(small_cnn(28), _x(12, 1, 28, 28), _cls(12, 10))


def test_sequence_model_matches_materialized(strategy):
    torch.manual_seed(0)
    model = TinySequenceModel(vocab=11, d_model=8, n_heads=2, max_len=6, classes=3)
    assert supports(model)
    ids = torch.randint(0, 11, (20, 6), generator=torch.Generator().manual_seed(3))
    _compare(model, ids, _cls(20, 3))


def test_self_attention_equals_multihead_attention():
    torch.manual_seed(0)
    att = SelfAttention(8, 2).double()
    mha = nn.MultiheadAttention(8, 2, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(att.qkv.weight)
        mha.in_proj_bias.copy_(att.qkv.bias)
        mha.out_proj.weight.copy_(att.out.weight)
        mha.out_proj.bias.copy_(att.out.bias)
    x = _x(3, 5, 8)
    assert torch.allclose(att(x), mha(x, x, x, need_weights=False)[0], atol=1e-12)


def test_mse_loss_and_regression_output():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    _compare(model, _x(25, 5), _x(25, 1, seed=4), loss=F.mse_loss)


def test_unsupported_models_fall_back_exactly():
    torch.manual_seed(0)
    mha = nn.Sequential(nn.Linear(4, 4))
    mha.att = nn.MultiheadAttention(4, 1, batch_first=True)
    assert not supports(mha) and any("in_proj_weight" in n for n in unsupported_parameters(mha))

    class Raw(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return x * self.w
    assert unsupported_parameters(Raw()) == ["w"]
    tied = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    tied[1].weight = tied[0].weight
    assert not supports(tied)
    X, y = _x(10, 3), _cls(10, 3)
    m = nn.Sequential(nn.Linear(3, 3)).double()
    m.append(Raw().double())
    o = ModuleOracle(m, F.cross_entropy, X, y)
    assert not o.use_ghost
    with pytest.raises(ValueError, match="ghost"):
        ModuleOracle(m, F.cross_entropy, X, y, mode="ghost")
    with pytest.raises(ValueError, match="per_example"):
        ModuleOracle(m, F.cross_entropy, X, y, mode="fast")


def test_runtime_fallback_for_inplace_activation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 2)).double()
    X, y = _x(16, 4), _cls(16, 2)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    ref = CallableOracle(module_grad_fn(model, F.cross_entropy, X, y))
    batch = _whole(16)
    theta = flat_params(model).unsqueeze(0)
    C = torch.tensor([0.1], dtype=torch.float64)
    a = fast.reduce(theta, batch, lambda n: clip_scale(n, C))
    b = ref.reduce(theta, batch, lambda n: clip_scale(n, C))
    assert fast.fallbacks == 1 and not fast.use_ghost
    assert _rel(a.scaled, b.scaled) < RTOL


def _conv_inputs_seen(model):
    """The memory layouts of the inputs each Conv2d of ``model`` sees, recorded by forward hooks."""
    seen = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(lambda _m, inp, _o: seen.append(
                "channels_last" if inp[0].is_contiguous(memory_format=torch.channels_last)
                and inp[0].stride(1) == 1 else "channels_first"))
    return seen


@pytest.mark.parametrize("channels", [1, 3])
def test_image_batches_go_channels_last_and_stay_exact(channels):
    """CPU image batches enter a model with Conv2d layers channels-last (one channel: by its strides alone,
    no copy), every convolution sees that layout, and the sums equal the materialized ones."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16, 10))
    X, y = _x(24, channels, 8, 8), _cls(24, 10)
    _compare(model, X, y)
    seen = _conv_inputs_seen(model)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    fast.reduce(flat_params(model).unsqueeze(0), _whole(24), None)
    assert fast.channels_last and seen == ["channels_last", "channels_last"]
    x = _x(4, 1, 8, 8)
    y = ghost._channels_last(x)
    assert y.data_ptr() == x.data_ptr() and torch.equal(y, x) and y.stride() == (64, 1, 8, 1)
    z = ghost._channels_last(_x(4, 3, 8, 8))
    assert z.is_contiguous(memory_format=torch.channels_last) and torch.equal(z, _x(4, 3, 8, 8))


def test_layout_is_left_alone_where_it_does_not_apply():
    """No channels-last for models without Conv2d, for non-image inputs, or with CHANNELS_LAST off."""
    assert not ModuleOracle(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)), F.cross_entropy, _x(8, 1, 8, 8),
                            _cls(8, 3)).channels_last
    assert not ModuleOracle(nn.Sequential(nn.Conv1d(2, 3, 3), nn.Flatten(), nn.Linear(21, 3)), F.cross_entropy,
                            _x(8, 2, 9), _cls(8, 3)).channels_last
    assert ModuleOracle(small_cnn(8), F.cross_entropy, _x(8, 1, 8, 8).float(), _cls(8, 10)).channels_last


class _ViewsAfterConv(nn.Module):
    """A forward written for channels-first activations: ``.view`` of a convolution's output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        h = torch.tanh(self.conv(x))
        return self.fc(h.view(h.shape[0], -1))


def test_forward_that_needs_channels_first_gets_it():
    """``h.view(B, -1)`` fails on a channels-last activation: the oracle runs that step, and all later
    ones, in the layout the data came in — same sums as the materialized path, no fallback."""
    torch.manual_seed(0)
    model = _ViewsAfterConv()
    with pytest.raises(RuntimeError, match="view"):
        model(ghost._channels_last(torch.randn(2, 3, 8, 8)))
    X, y = _x(24, 3, 8, 8), _cls(24, 5)
    _compare(model, X, y)
    seen = _conv_inputs_seen(model)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    assert fast.channels_last
    batch = _whole(24)
    fast.reduce(flat_params(model).unsqueeze(0), batch, None)
    fast.reduce(flat_params(model).unsqueeze(0), batch, None)
    assert seen == ["channels_last", "channels_first", "channels_first"]  # tried once, then as the model needs
    assert not fast.channels_last and fast.use_ghost and fast.fallbacks == 0


def test_errors_of_the_forward_are_still_raised():
    """A forward that fails in both layouts raises its own error (no silent retry result)."""
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(7, 2)).double()  # wrong in_features
    X, y = _x(6, 1, 8, 8), _cls(6, 2)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    batch = _whole(6)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        fast.reduce(flat_params(model).unsqueeze(0), batch, None)


def test_pre_clip_perturbation_uses_materialized_vectors():
    torch.manual_seed(0)
    model = small_cnn(8).double()
    X, y = _x(16, 1, 8, 8), _cls(16, 10)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    ref = CallableOracle(module_grad_fn(model, F.cross_entropy, X, y))
    batch = _whole(16)
    theta = flat_params(model).unsqueeze(0)
    C = torch.tensor([0.1], dtype=torch.float64)
    a = fast.reduce(theta, batch, lambda n: clip_scale(n, C), pre_clip_std=0.5, generator=torch.Generator().manual_seed(0))
    b = ref.reduce(theta, batch, lambda n: clip_scale(n, C), pre_clip_std=0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.scaled, b.scaled)


def test_parameters_are_loaded_through_one_buffer_and_rebound_when_replaced():
    """Each step loads θ into the model by one copy into the buffer its parameters view; parameters rebound in
    between (``vector_to_parameters``, as a monitor callback does) are bound to the buffer again, and every
    step's sums equal those of a fresh oracle at the same θ."""
    from torch.nn.utils import vector_to_parameters
    model = small_cnn(8).double()
    X, y = _x(12, 1, 8, 8), _cls(12, 10)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    theta0 = flat_params(model)
    thetas = [theta0 + 0.05 * k * _x(theta0.shape[0], seed=k) for k in range(3)]
    for k, th in enumerate(thetas):
        if k == 2:
            vector_to_parameters(torch.zeros_like(th), list(model.parameters()))  # rebinds every parameter
        a = fast.reduce(th.unsqueeze(0), _whole(12), lambda n: clip_scale(n, torch.tensor([0.3], dtype=n.dtype)))
        assert torch.equal(flat_params(model), th)
        assert all(q.data_ptr() == v.data_ptr() for q, v in zip(model.parameters(), fast._views))
        vector_to_parameters(th.clone(), list(model.parameters()))
        ref = ModuleOracle(model, F.cross_entropy, X, y).reduce(
            th.unsqueeze(0), _whole(12), lambda n: clip_scale(n, torch.tensor([0.3], dtype=n.dtype)))
        assert torch.equal(a.scaled, ref.scaled) and torch.equal(a.norms, ref.norms)


def test_empty_poisson_batch():
    model = nn.Sequential(nn.Linear(3, 2)).double()
    X, y = _x(10, 3), _cls(10, 2)
    fast = ModuleOracle(model, F.cross_entropy, X, y)
    batch = Batch(None, torch.zeros(2, 10, dtype=torch.float64), 2.0, torch.zeros(2))
    s = fast.reduce(flat_params(model).expand(2, -1), batch, None, need_raw=True)
    assert torch.equal(s.scaled, torch.zeros_like(s.scaled)) and s.raw is not None


@pytest.mark.parametrize("method,kw", [("dp_sgd", {}), ("dice_sgd", dict(feedback_clip_norm=2.0)),
                                       ("adaptive", {})])
def test_train_ghost_equals_materialized(method, kw):
    X = _x(64, 1, 8, 8)
    y = _cls(64, 10)
    out = {}
    for mode in ("ghost", "materialize"):
        torch.manual_seed(0)
        model = small_cnn(8).double()
        out[mode] = train(model, F.cross_entropy, X, y, steps=4, lr=0.5, clip_norm=0.5, noise_multiplier=1.0,
                          batch_size=16, seed=5, progress=False, per_example=mode, method=method, **kw)
    assert _rel(out["ghost"].theta, out["materialize"].theta) < RTOL
    assert torch.equal(out["ghost"].history["batch_size"], out["materialize"].history["batch_size"])


def test_train_rejects_bad_per_example():
    X, y = _x(8, 3), _cls(8, 2)
    with pytest.raises(ValueError, match="per_example"):
        train(nn.Linear(3, 2).double(), F.cross_entropy, X, y, steps=1, lr=0.1, clip_norm=1.0,
              noise_multiplier=0.0, batch_size=2, per_example="vmap", progress=False)


def test_poisson_positions_are_sorted_members():
    g = torch.Generator().manual_seed(0)
    n, q, runs = 500, 0.03, 400
    pos = poisson_positions(n, q, runs, g, "cpu")
    members = pos < n
    assert bool((pos[:, 1:] >= pos[:, :-1]).all())
    assert bool(((pos[:, 1:] > pos[:, :-1]) | ~members[:, 1:]).all())  # no duplicates
    counts = torch.zeros(n).index_add_(0, pos[members], torch.ones(int(members.sum())))
    rate = counts / runs  # every example is a member with probability q
    assert abs(float(rate.mean()) - q) < 5 * math.sqrt(q * (1 - q) / (n * runs))
    first, last = float(rate[:100].mean()), float(rate[-100:].mean())
    assert abs(first - q) < 5 * math.sqrt(q / (100 * runs)) and abs(last - q) < 5 * math.sqrt(q / (100 * runs))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_parity():
    torch.manual_seed(0)
    X, y = _x(32, 1, 8, 8), _cls(32, 10)
    cpu = ModuleOracle(small_cnn(8, norm=True).double(), F.cross_entropy, X, y)
    torch.manual_seed(0)
    gpu_model = small_cnn(8, norm=True).double().cuda()
    gpu = ModuleOracle(gpu_model, F.cross_entropy, X.cuda(), y.cuda())
    batch = _whole(32)
    gb = Batch(torch.arange(32, device="cuda"), None, 32.0, torch.tensor([32], device="cuda"))
    C = torch.tensor([0.1], dtype=torch.float64)
    a = cpu.reduce(flat_params(cpu.model).unsqueeze(0), batch, lambda n: clip_scale(n, C), need_raw=True)
    b = gpu.reduce(flat_params(gpu_model).unsqueeze(0), gb, lambda n: clip_scale(n, C.cuda()), need_raw=True)
    assert _rel(b.scaled.cpu(), a.scaled) < RTOL and _rel(b.norms.cpu(), a.norms) < RTOL
    res = train(gpu_model, F.cross_entropy, X.cuda(), y.cuda(), steps=3, lr=0.1, clip_norm=1.0,
                noise_multiplier=1.0, batch_size=8, seed=0, progress=False)
    assert res.theta.is_cuda


def test_default_rdp_orders_contain_opacus_defaults():
    """Issue #11: a superset of Opacus 1.6's DEFAULT_ALPHAS, so the RDP ε is never looser on the same conversion."""
    import numpy as np
    from dpclip_lab.accountants import DEFAULT_ORDERS
    opacus_alphas = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
    assert all(np.isclose(DEFAULT_ORDERS, a, rtol=0, atol=1e-12).any() for a in opacus_alphas)


# -- finite gradients whose squared norms overflow, and NaN ones ----------------------------------------
def test_huge_finite_gradients_are_clipped_exactly():
    """float32 per-example gradients with norms ~1e20 are finite, but their squared norms are not: the
    layer rules' norms would be inf and C / inf = 0 would silently drop every example from the sum. That
    step runs on the materialized path instead (safe norms), with the same result, and the oracle stays
    layer-wise for the next steps."""
    torch.manual_seed(0)
    X, y = torch.randn(8, 4) * 1e10, torch.randn(8, 1) * 1e10
    model = nn.Linear(4, 1)
    fast = ModuleOracle(model, F.mse_loss, X, y)
    ref = ModuleOracle(model, F.mse_loss, X, y, mode="materialize")
    theta = flat_params(model).unsqueeze(0)
    batch = make_sampler("full", 8, 8).sample(0, 1, torch.Generator().manual_seed(0), "cpu", torch.float32)
    C = torch.tensor([1.0])
    a = fast.reduce(theta, batch, lambda n: clip_scale(n, C), need_raw=True)
    b = ref.reduce(theta, batch, lambda n: clip_scale(n, C), need_raw=True)
    assert bool(torch.isfinite(b.norms).all()) and float(b.norms.min()) > 1e19
    assert float(a.scaled.norm()) > 1.0  # not the silent zero
    for name in ("scaled", "raw", "norms"):
        assert _rel(getattr(a, name), getattr(b, name)) < RTOL, name
    assert fast.use_ghost and fast.fallbacks == 0
    small = fast.reduce(theta, make_sampler("full", 8, 8).sample(0, 1, torch.Generator(), "cpu", torch.float32),
                        lambda n: clip_scale(n, C))  # the same oracle, back on the layer rules when finite
    assert small.scaled.shape == a.scaled.shape


def test_nan_gradients_raise_naming_them():
    X, y = torch.randn(8, 4), torch.randn(8, 1)
    X[3, 1] = float("nan")
    model = nn.Linear(4, 1)
    fast = ModuleOracle(model, F.mse_loss, X, y)
    batch = make_sampler("full", 8, 8).sample(0, 1, torch.Generator().manual_seed(0), "cpu", torch.float32)
    with pytest.raises(ValueError, match="per-example gradients contains .* NaN or inf"):
        fast.reduce(flat_params(model).unsqueeze(0), batch, lambda n: clip_scale(n, torch.tensor([1.0])))
