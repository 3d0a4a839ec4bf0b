"""The nn.Module driver runs the same privatizers through the same loop."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpclip_lab.accountants import events as ev
from dpclip_lab.algorithms import dp_sgd
from dpclip_lab.per_sample import flat_params, per_sample_grads
from dpclip_lab.training import module_grad_fn, train


def _data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 6, generator=g)
    y = (X[:, 0] + X[:, 1] > 0).long()
    return X, y


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))


def test_train_learns_and_logs():
    X, y = _data()
    model = _model()
    res = train(model, F.cross_entropy, X, y, steps=60, lr=0.5, clip_norm=1.0, noise_multiplier=0.3,
                batch_size=32, seed=0, log_every=20, progress=False)
    log = res.extra["log"]
    assert log["step"] == [20, 40, 60]
    assert log["loss"][-1] < 0.6 and log["accuracy"][-1] > 0.8
    assert res.history["fraction_clipped"].shape == (60,)
    assert torch.equal(flat_params(model), res.theta)  # the model holds the released parameters
    assert res.dp_event() == ev.SelfComposedEvent(ev.PoissonSampledEvent(32 / 256, ev.GaussianEvent(0.3)), 60)


def test_train_deterministic_and_matches_dp_sgd():
    X, y = _data()
    a = train(_model(), F.cross_entropy, X, y, steps=5, lr=0.5, clip_norm=1.0, noise_multiplier=1.0, batch_size=32,
              seed=3, progress=False)
    b = train(_model(), F.cross_entropy, X, y, steps=5, lr=0.5, clip_norm=1.0, noise_multiplier=1.0, batch_size=32,
              seed=3, progress=False)
    assert torch.equal(a.theta, b.theta)
    m = _model()
    c = dp_sgd(module_grad_fn(m, F.cross_entropy, X, y), flat_params(m), n=256, steps=5, lr=0.5, clip_norm=1.0,
               noise_multiplier=1.0, batch_size=32, seed=3)
    assert torch.allclose(a.theta, c.theta, atol=1e-6)


def test_module_grad_fn_is_per_sample_grads():
    X, y = _data(16)
    m = _model()
    g = module_grad_fn(m, F.cross_entropy, X, y)(flat_params(m), torch.arange(4))
    assert torch.allclose(g, per_sample_grads(m, F.cross_entropy, X[:4], y[:4]))


@pytest.mark.parametrize("method,kw", [("dice_sgd", dict(feedback_clip_norm=2.0)), ("adaptive", {})])
def test_train_other_privatizers(method, kw):
    X, y = _data()
    res = train(_model(), F.cross_entropy, X, y, steps=40, lr=0.5, clip_norm=0.5, noise_multiplier=0.0,
                batch_size=32, seed=0, method=method, progress=False, **kw)
    assert res.extra["log"]["accuracy"][-1] > 0.8


def test_train_bad_method():
    X, y = _data()
    with pytest.raises(ValueError, match="method"):
        train(_model(), F.cross_entropy, X, y, steps=1, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, batch_size=4,
              method="sgd")
    with pytest.raises(ValueError, match="feedback_clip_norm"):
        train(_model(), F.cross_entropy, X, y, steps=1, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, batch_size=4,
              method="dice_sgd")


# -- automatic clipping (normalization, Bu et al. 2023) through dl.train -----------------------------------
@pytest.mark.parametrize("per_example", ["auto", "materialize"])
@pytest.mark.parametrize("stability", [0.0, 0.01])
def test_train_normalize_is_one_normalized_step(per_example, stability):
    """One full-batch step, no noise: θ1 = θ0 − η Σ_i C g_i / (‖g_i‖ + γ) / n, on both oracle paths."""
    X, y = _data(32)
    m = _model()
    theta0 = flat_params(m)
    G = per_sample_grads(m, F.cross_entropy, X, y)
    C, lr = 5.0, 0.3  # above every gradient norm: clipping is the identity, normalization is not
    want = theta0 - lr * (C * G / (G.norm(dim=1, keepdim=True) + stability)).sum(0) / 32
    res = train(m, F.cross_entropy, X, y, steps=1, lr=lr, clip_norm=C, noise_multiplier=0.0, batch_size=32,
                sampling="full", seed=0, progress=False, normalize=True, stability=stability, per_example=per_example)
    torch.testing.assert_close(res.theta, want, rtol=1e-5, atol=1e-6)
    clipped = train(_model(), F.cross_entropy, X, y, steps=1, lr=lr, clip_norm=C, noise_multiplier=0.0, batch_size=32,
                    sampling="full", seed=0, progress=False, per_example=per_example)
    assert not torch.allclose(clipped.theta, res.theta, atol=1e-6)  # normalization is not clipping
    assert res.extra["normalize"] is True and res.extra["stability"] == stability


def test_train_normalize_matches_dp_sgd_and_accounts_like_clipping():
    X, y = _data()
    kw = dict(steps=6, lr=0.5, clip_norm=1.0, noise_multiplier=1.0, batch_size=32, seed=4)
    a = train(_model(), F.cross_entropy, X, y, progress=False, normalize=True, stability=0.01, **kw)
    m = _model()
    b = dp_sgd(module_grad_fn(m, F.cross_entropy, X, y), flat_params(m), n=256, normalize=True, stability=0.01, **kw)
    torch.testing.assert_close(a.theta, b.theta, rtol=1e-5, atol=1e-6)
    c = train(_model(), F.cross_entropy, X, y, progress=False, **kw)
    assert a.dp_event() == c.dp_event()  # same sensitivity C, same noise: same privacy event
    d = train(_model(), F.cross_entropy, X, y, progress=False, method="dice_sgd", feedback_clip_norm=1.0,
              normalize=True, **kw)  # automatic DiceSGD (Zhang et al. 2024, Alg. 4)
    assert torch.isfinite(d.theta).all()


def test_train_normalize_bad_inputs():
    X, y = _data(32)
    kw = dict(steps=1, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, batch_size=4, progress=False)
    with pytest.raises(ValueError, match="adaptive"):
        train(_model(), F.cross_entropy, X, y, method="adaptive", normalize=True, **kw)
    with pytest.raises(ValueError, match="stability"):
        train(_model(), F.cross_entropy, X, y, normalize=True, stability=-0.1, **kw)
    with pytest.raises(ValueError, match="stability"):
        train(_model(), F.cross_entropy, X, y, stability=0.1, **kw)  # γ without normalization
    with pytest.raises(TypeError, match="normalize"):
        train(_model(), F.cross_entropy, X, y, normalize=0.01, **kw)


def test_train_leaves_no_hooks_on_the_model():
    X, y = _data(32)
    m = _model()
    train(m, F.cross_entropy, X, y, steps=2, lr=0.1, clip_norm=1.0, noise_multiplier=0.5, batch_size=8, progress=False)
    assert all(not mod._forward_hooks for mod in m.modules())


@pytest.mark.parametrize("per_example,monitor", [("auto", False), ("materialize", False), ("auto", True)])
def test_released_theta_does_not_alias_the_model(per_example, monitor):
    """The model holds the released θ as a copy: training it further in place leaves the result unchanged."""
    X, y = _data(64)
    m = _model()
    res = train(m, F.cross_entropy, X, y, steps=4, lr=0.1, clip_norm=1.0, noise_multiplier=0.5, batch_size=8,
                progress=False, per_example=per_example, log_every=2, monitor=(X[:8], y[:8]) if monitor else None)
    released = res.theta.clone()
    assert torch.equal(flat_params(m), released)
    with torch.no_grad():
        for q in m.parameters():
            q.add_(1.0)
    assert torch.equal(res.theta, released)


# -- what dl.train logs by default: the steps' own batches ---------------------------------------
@pytest.mark.parametrize("per_example", ["auto", "materialize"])
def test_default_log_is_the_mean_loss_of_the_window_batches(per_example):
    """Full batches, no noise: the log at step 2 (log_every=2) is (L(θ0) + L(θ1)) / 2 and the
    accuracy is averaged the same way, from the steps' own forward passes."""
    from dpclip_lab.training import evaluate
    X, y = _data(64)
    kw = dict(lr=0.5, clip_norm=1.0, noise_multiplier=0.0, batch_size=64, sampling="full", seed=0,
              progress=False, per_example=per_example)
    m0 = _model()
    l0, a0 = evaluate(m0, F.cross_entropy, X, y)
    m1 = _model()
    train(m1, F.cross_entropy, X, y, steps=1, **kw)
    l1, a1 = evaluate(m1, F.cross_entropy, X, y)
    res = train(_model(), F.cross_entropy, X, y, steps=3, log_every=2, **kw)
    log = res.extra["log"]
    assert log["step"] == [2, 3]
    assert log["loss"][0] == pytest.approx((l0 + l1) / 2, rel=1e-5)
    assert log["accuracy"][0] == pytest.approx((a0 + a1) / 2, abs=1e-9)
    assert len(log["fraction_clipped"]) == 2
    assert log["fraction_clipped"] == res.history["fraction_clipped"][[1, 2]].tolist()


def test_default_log_without_classes_and_with_a_monitor():
    """Regression outputs: accuracy NaN; an explicit monitor is evaluated after the logged step."""
    import math

    from dpclip_lab.training import evaluate
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g)
    t = X.sum(1, keepdim=True)
    torch.manual_seed(0)
    m = nn.Linear(3, 1)
    res = train(m, F.mse_loss, X, t, steps=4, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, batch_size=40,
                sampling="full", seed=0, log_every=2, progress=False)
    assert all(math.isnan(a) for a in res.extra["log"]["accuracy"])
    assert all(math.isfinite(v) for v in res.extra["log"]["loss"])
    Xm, ym = _data(32, seed=5)
    model = _model()
    res = train(model, F.cross_entropy, *_data(), steps=4, lr=0.5, clip_norm=1.0, noise_multiplier=0.0,
                batch_size=32, seed=0, log_every=4, progress=False, monitor=(Xm, ym))
    assert res.extra["log"]["loss"] == [pytest.approx(evaluate(model, F.cross_entropy, Xm, ym)[0], rel=1e-6)]


# -- the default log's accuracy: counted once per logging window -----------------------------------
def test_batch_stats_is_a_triple_counted_when_read():
    from dpclip_lab.per_sample import BatchStats, batch_stats, count_correct
    g = torch.Generator().manual_seed(0)
    out, t = torch.randn(9, 4, generator=g), torch.randint(0, 4, (9,), generator=g)
    want = int((out.argmax(1) == t).sum())
    b = batch_stats(out.requires_grad_(), torch.tensor(2.5, requires_grad=True), t)
    assert b.outputs is not None and not b.outputs.requires_grad and not b.loss_sum.requires_grad
    loss, correct, size = b
    assert (float(loss), int(correct), size) == (2.5, want, 9) and int(b[1]) == want and len(b) == 3
    assert b.outputs is None  # released once counted
    # several batches at once = the sum of their counts; an empty batch adds nothing
    bs = [batch_stats(out[:4], torch.tensor(0.0), t[:4]), batch_stats(out[4:], torch.tensor(0.0), t[4:]),
          BatchStats(torch.tensor(0.0), None, None, 0)]
    assert int(count_correct(bs)) == want
    assert int(count_correct([BatchStats(torch.tensor(0.0), None, None, 0)])) == 0
    # outputs that are not class scores (regression): no count
    reg = batch_stats(torch.randn(3, 1), torch.tensor(1.0), torch.randn(3, 1))
    assert reg.correct is None and count_correct([bs[0], reg]) is None


@pytest.mark.parametrize("hold", [1, 10**9])
def test_window_count_matches_per_step_counts(monkeypatch, hold):
    """The log's accuracy equals the per-step counts summed over each window, whether the window's
    batches are counted at its end or, past HOLD_SCORES, as they come; Poisson batches, empty ones included."""
    import dpclip_lab.training as tr
    from dpclip_lab.per_sample import BatchStats
    monkeypatch.setattr(tr, "HOLD_SCORES", hold)
    X, y = _data(64)
    per_step = []
    orig = tr.count_correct

    def spy(bs):  # the reference: every batch counted alone
        per_step.extend(int(orig([b])) for b in bs if isinstance(b, BatchStats))
        return orig(bs)
    monkeypatch.setattr(tr, "count_correct", spy)
    res = train(_model(), F.cross_entropy, X, y, steps=7, lr=0.5, clip_norm=1.0, noise_multiplier=0.0,
                batch_size=2, seed=0, log_every=3, progress=False)
    log = res.extra["log"]
    sizes = res.history["batch_size"].tolist()
    assert log["step"] == [3, 6, 7] and 0.0 in sizes  # an empty Poisson batch in the run
    ends = [0, 3, 6, 7]
    for j in range(3):
        n = sum(sizes[ends[j]:ends[j + 1]])
        want = sum(per_step[ends[j]:ends[j + 1]]) / n if n else float("nan")
        assert log["accuracy"][j] == pytest.approx(want, nan_ok=True)
