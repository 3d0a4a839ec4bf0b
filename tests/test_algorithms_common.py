"""Properties every algorithm shares: the noise convention, sensitivity, seeds, batching, input checks."""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import data
from dpclip_lab.algorithms import (as_oracle, dice_sgd, dp_gd, dp_gd_ldp, dp_sgd, dp_sgd_adaptive_clipping,
                                   sweep_grid)
from dpclip_lab.losses import Logistic
from dpclip_lab.privatizers import GaussianPrivatizer, clip_scale, normalize_scale
from dpclip_lab.sampling import Batch, make_sampler

f64 = torch.float64


def quadratic_oracle(A):
    """Per-example losses ½‖θ − a_i‖²: gradients θ − a_i (not rank one)."""
    def grad_fn(theta, idx):
        return theta.unsqueeze(-2) - A[idx]
    return grad_fn


def zero_oracle(p):
    def grad_fn(theta, idx):
        return torch.zeros(*idx.shape, p, dtype=theta.dtype) if theta.dim() == 1 else \
            torch.zeros(theta.shape[0], idx.shape[-1], p, dtype=theta.dtype)
    return grad_fn


def random_glp(n=40, p=5, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g, dtype=f64) * scale
    y = torch.where(torch.rand(n, generator=g, dtype=f64) < 0.5, -1.0, 1.0).to(f64)
    return dl.GLProblem(X, y, Logistic())


# -- the noise convention: std z·C on the sum, divided by the EXPECTED batch size -------------
@pytest.mark.parametrize("sampling,b", [("poisson", 10), ("shuffle", 10), ("full", None)])
def test_noise_on_sum_divided_by_expected_batch_size(sampling, b):
    n, p, R, z, C, lr = 50, 3, 4000, 1.5, 2.0, 1.0
    res = dp_sgd(zero_oracle(p), torch.zeros(p, dtype=f64), n=n, steps=1, lr=lr, clip_norm=torch.full((R,), C),
                 noise_multiplier=z, batch_size=b, sampling=sampling, seed=0)
    step = res.iterates[:, 1]
    expected_std = lr * z * C / (b or n)
    assert abs(step.std().item() / expected_std - 1) < 0.05


def test_ldp_noise_is_per_example():
    n, p, R, z, C = 30, 2, 4000, 0.5, 1.0
    res = dp_gd_ldp(zero_oracle(p), torch.zeros(p, dtype=f64), n=n, steps=1, lr=1.0,
                    clip_norm=torch.full((R,), C), noise_multiplier=z, seed=0)
    # (1/n) Σ_i N(0, (zC)²) has std zC/√n
    assert abs(res.iterates[:, 1].std().item() / (z * C / math.sqrt(n)) - 1) < 0.05


def test_dice_noise_scale_sigma1():
    n, p, R, z, C1, B = 40, 2, 4000, 2.0, 0.5, 8
    res = dice_sgd(zero_oracle(p), torch.zeros(p, dtype=f64), n=n, steps=1, lr=1.0, clip_norm=torch.full((R,), C1),
                   feedback_clip_norm=1.0, noise_multiplier=z, batch_size=B, sampling="shuffle", seed=0)
    sigma1 = dl.noise.noise_multiplier_to_dice_sigma(z, batch_size=B, clip_norm=C1)
    assert abs(res.iterates[:, 1].std().item() / sigma1 - 1) < 0.05


# -- sensitivity: removing one example moves every privatized sum by at most C ----------------
@pytest.mark.parametrize("kind", ["glp", "callable"])
@pytest.mark.parametrize("normalize", [False, True])
def test_sensitivity_of_clipped_sum(kind, normalize):
    n, p, C = 25, 4, 0.7
    for seed in range(5):
        prob = random_glp(n, p, seed)
        g = torch.Generator().manual_seed(seed)
        theta = torch.randn(3, p, generator=g, dtype=f64)
        oracle = as_oracle(prob if kind == "glp" else (lambda th, idx: prob.per_example_grads(th, idx)))
        assert type(oracle).__name__ == ("GLPOracle" if kind == "glp" else "CallableOracle")
        Ct = torch.full((3,), C, dtype=f64)
        scale = (lambda nr: normalize_scale(nr, Ct)) if normalize else (lambda nr: clip_scale(nr, Ct))
        mask = torch.rand(3, n, generator=g) < 0.5
        for j in range(n):
            with_j, without_j = mask.clone(), mask.clone()
            with_j[:, j], without_j[:, j] = True, False
            s1 = oracle.reduce(theta, Batch(None, with_j, 10.0, with_j.sum(1)), scale).scaled
            s0 = oracle.reduce(theta, Batch(None, without_j, 10.0, without_j.sum(1)), scale).scaled
            assert (torch.linalg.vector_norm(s1 - s0, dim=-1) <= C * (1 + 1e-12)).all()


def test_sensitivity_on_neighbouring_datasets_full_batch():
    n, p, C = 20, 3, 0.5
    prob = random_glp(n, p, 7)
    theta = torch.randn(2, p, dtype=f64, generator=torch.Generator().manual_seed(1))
    priv = GaussianPrivatizer(C, 0.0)
    full = make_sampler("full", n, None).sample(0, 2, None, "cpu")
    s_full = as_oracle(prob).reduce(theta, full, lambda nr: clip_scale(nr, torch.full((2,), C, dtype=f64))).scaled
    for j in range(n):
        keep = torch.arange(n) != j
        nb = dl.GLProblem(prob.X[keep], prob.y[keep], prob.loss)
        bj = make_sampler("full", n - 1, None).sample(0, 2, None, "cpu")
        s = as_oracle(nb).reduce(theta, bj, lambda nr: clip_scale(nr, torch.full((2,), C, dtype=f64))).scaled
        assert (torch.linalg.vector_norm(s_full - s, dim=-1) <= C * (1 + 1e-12)).all()
    assert priv.noise_multiplier == 0


# -- the GLP fast path and the generic path are the same algorithm ---------------------------
@pytest.mark.parametrize("sampling,b", [("poisson", 8), ("shuffle", 8), ("with_replacement", 8), ("full", None)])
def test_glp_fast_path_matches_generic(sampling, b):
    prob = random_glp(30, 4, 3)
    kw = dict(n=30, steps=20, lr=0.3, clip_norm=torch.tensor([0.1, 1.0, 5.0], dtype=f64), noise_multiplier=0.7,
              batch_size=b, sampling=sampling, seed=11)
    r1 = dp_sgd(prob, torch.zeros(4, dtype=f64), **kw)
    r2 = dp_sgd(prob.grad_fn, torch.zeros(4, dtype=f64), **kw)
    r3 = dp_sgd(lambda th, idx: prob.per_example_grads(th, idx), torch.zeros(4, dtype=f64), **kw)
    assert torch.allclose(r1.iterates, r2.iterates, atol=1e-12)
    assert torch.allclose(r1.iterates, r3.iterates, atol=1e-12)
    assert torch.allclose(r1.history["fraction_clipped"], r3.history["fraction_clipped"])


def test_dice_fast_path_matches_generic():
    prob = random_glp(30, 4, 4)
    kw = dict(n=30, steps=15, lr=0.3, clip_norm=0.3, feedback_clip_norm=0.6, noise_multiplier=0.5,
              batch_size=6, seed=2)
    r1 = dice_sgd(prob, torch.zeros(4, dtype=f64), **kw)
    r2 = dice_sgd(lambda th, idx: prob.per_example_grads(th, idx), torch.zeros(4, dtype=f64), **kw)
    assert torch.allclose(r1.iterates, r2.iterates, atol=1e-12)


# -- seeds and batching --------------------------------------------------------------------------
def test_same_seed_same_result_different_seed_different():
    prob = random_glp()
    kw = dict(n=40, steps=30, lr=0.2, clip_norm=0.5, noise_multiplier=1.0, batch_size=8)
    a = dp_sgd(prob, torch.zeros(5, dtype=f64), seed=3, **kw)
    b = dp_sgd(prob, torch.zeros(5, dtype=f64), seed=3, **kw)
    c = dp_sgd(prob, torch.zeros(5, dtype=f64), seed=4, **kw)
    assert torch.equal(a.iterates, b.iterates) and not torch.equal(a.iterates, c.iterates)
    d1 = dice_sgd(prob, torch.zeros(5, dtype=f64), seed=3, feedback_clip_norm=1.0, **kw)
    d2 = dice_sgd(prob, torch.zeros(5, dtype=f64), seed=3, feedback_clip_norm=1.0, **kw)
    assert torch.equal(d1.theta, d2.theta)


def test_batched_noise_free_full_batch_equals_single_runs():
    prob = random_glp()
    Cs = [0.05, 0.3, 2.0]
    batched = dp_gd(prob, torch.zeros(5, dtype=f64), n=40, steps=50, lr=0.5, clip_norm=torch.tensor(Cs), noise_multiplier=0.0)
    assert batched.theta.shape == (3, 5) and batched.iterates.shape == (3, 51, 5)
    for r, C in enumerate(Cs):
        single = dp_gd(prob, torch.zeros(5, dtype=f64), n=40, steps=50, lr=0.5, clip_norm=C, noise_multiplier=0.0)
        assert torch.allclose(batched.theta[r], single.theta, atol=1e-12)


def test_batched_one_run_equals_single_run():
    prob = random_glp()
    kw = dict(n=40, steps=10, lr=0.2, clip_norm=0.5, noise_multiplier=1.0, batch_size=8, seed=9)
    a = dp_sgd(prob, torch.zeros(5, dtype=f64), **kw)
    b = dp_sgd(prob, torch.zeros(1, 5, dtype=f64), **kw)
    assert b.theta.shape == (1, 5) and torch.equal(a.theta, b.theta[0])


def test_sweep_grid_and_lr_per_run():
    C = sweep_grid([0.1, 1.0], 3)
    assert C.tolist() == [0.1, 0.1, 0.1, 1.0, 1.0, 1.0]
    prob = random_glp()
    res = dp_sgd(prob, torch.zeros(5, dtype=f64), n=40, steps=5, lr=torch.linspace(0.1, 0.6, 6), clip_norm=C,
                 noise_multiplier=1.0, batch_size=4, seed=0)
    assert res.theta.shape == (6, 5) and res.history["fraction_clipped"].shape == (6, 5)
    # different seeds within a clip norm give different runs
    assert not torch.equal(res.theta[0], res.theta[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_gpu_parity():
    prob = random_glp()
    kw = dict(n=40, steps=30, lr=0.2, clip_norm=torch.tensor([0.1, 1.0]), noise_multiplier=0.0, batch_size=None,
              sampling="full")
    a = dp_sgd(prob, torch.zeros(5, dtype=f64), **kw)
    gprob = dl.GLProblem(prob.X.cuda(), prob.y.cuda(), prob.loss)
    b = dp_sgd(gprob, torch.zeros(5, dtype=f64, device="cuda"), **kw)
    assert b.theta.device.type == "cuda"
    assert torch.allclose(a.theta, b.theta.cpu(), atol=1e-10)
    c = dp_sgd(gprob, torch.zeros(5, dtype=f64, device="cuda"), n=40, steps=30, lr=0.2, clip_norm=0.5,
               noise_multiplier=1.0, batch_size=8, seed=1)
    d = dp_sgd(gprob, torch.zeros(5, dtype=f64, device="cuda"), n=40, steps=30, lr=0.2, clip_norm=0.5,
               noise_multiplier=1.0, batch_size=8, seed=1)
    assert torch.equal(c.theta, d.theta)


# -- bad input --------------------------------------------------------------------------------------
@pytest.fixture
def prob():
    return random_glp()


@pytest.mark.parametrize("kw,match", [
    (dict(lr=-0.1), "lr"),
    (dict(lr=float("nan")), "lr"),
    (dict(clip_norm=-1.0), "clip_norm"),
    (dict(clip_norm=0.0), "clip_norm"),
    (dict(clip_norm=torch.tensor([1.0, -2.0])), "clip_norm"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(batch_size=41), "batch_size"),
    (dict(steps=-1), "steps"),
    (dict(sampling="bootstrap"), "sampling"),
    (dict(pre_clip_std=-1.0), "pre_clip_std"),
    (dict(n=39), "n"),
    (dict(clip_norm=None), "clip_norm"),
])
def test_dp_sgd_rejects_bad_input(prob, kw, match):
    args = dict(n=40, steps=3, lr=0.1, clip_norm=1.0, noise_multiplier=1.0, batch_size=4)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        dp_sgd(prob, torch.zeros(5, dtype=f64), **args)


def test_theta0_wrong_shape(prob):
    with pytest.raises(ValueError, match="theta0"):
        dp_sgd(prob, torch.zeros(4, dtype=f64), n=40, steps=3, lr=0.1, clip_norm=1.0, noise_multiplier=1.0, batch_size=4)
    with pytest.raises(ValueError, match="theta0"):
        dp_sgd(prob.grad_fn, torch.zeros(2, 3, 5, dtype=f64), n=40, steps=3, lr=0.1, clip_norm=1.0,
               noise_multiplier=1.0, batch_size=4)
    A = torch.randn(10, 3, dtype=f64)
    with pytest.raises(ValueError, match="theta0"):
        dp_sgd(quadratic_oracle(A), torch.zeros(4, dtype=f64), n=10, steps=3, lr=0.1, clip_norm=1.0,
               noise_multiplier=1.0, batch_size=4)
    with pytest.raises(ValueError, match="grad_fn must return"):
        dp_sgd(lambda th, idx: A[idx], torch.zeros(4, dtype=f64), n=10, steps=3, lr=0.1, clip_norm=1.0,
               noise_multiplier=1.0, batch_size=4)
    with pytest.raises(ValueError, match="runs"):
        dp_sgd(prob, torch.zeros(3, 5, dtype=f64), n=40, steps=3, lr=0.1, clip_norm=torch.ones(2),
               noise_multiplier=1.0, batch_size=4)


def test_nan_from_grad_fn():
    def bad(theta, idx):
        g = theta.unsqueeze(-2).expand(*idx.shape, theta.shape[-1]).clone()
        g[..., 0, 0] = float("nan")
        return g
    with pytest.raises(ValueError, match="NaN"):
        dp_sgd(bad, torch.zeros(2, dtype=f64), n=5, steps=2, lr=0.1, clip_norm=1.0, noise_multiplier=0.0,
               sampling="full")
    with pytest.raises(ValueError, match="theta0"):
        dp_sgd(bad, torch.tensor([float("nan"), 0.0]), n=5, steps=2, lr=0.1, clip_norm=1.0, noise_multiplier=0.0,
               sampling="full")


def test_dice_c1_above_c2(prob):
    with pytest.raises(ValueError, match="clip_norm .*feedback_clip_norm"):
        dice_sgd(prob, torch.zeros(5, dtype=f64), n=40, steps=3, lr=0.1, clip_norm=2.0, feedback_clip_norm=1.0,
                 noise_multiplier=1.0, batch_size=4)
    with pytest.raises(ValueError, match="feedback_clip_norm"):
        dice_sgd(prob, torch.zeros(5, dtype=f64), n=40, steps=3, lr=0.1, clip_norm=1.0, feedback_clip_norm=-1.0,
                 noise_multiplier=1.0, batch_size=4)


def test_adaptive_bad_count_noise(prob):
    with pytest.raises(ValueError, match="count_noise_std"):
        dp_sgd_adaptive_clipping(prob, torch.zeros(5, dtype=f64), n=40, steps=3, lr=0.1, initial_clip_norm=1.0,
                                 noise_multiplier=2.0, count_noise_std=0.5, batch_size=4)


def test_zero_noise_is_nonprivate_event(prob):
    from dpclip_lab.accountants import events as ev
    r = dp_sgd(prob, torch.zeros(5, dtype=f64), n=40, steps=3, lr=0.1, clip_norm=1.0, noise_multiplier=0.0,
               batch_size=4)
    assert isinstance(r.dp_event(), ev.NonPrivateEvent)
    assert r.algorithm == "clipped SGD"


@pytest.mark.parametrize("progress,headless,bar", [(False, False, False), (None, True, False), (True, True, True),
                                                   (None, False, True)])
def test_progress_bar_is_built_only_when_it_can_show(progress, headless, bar, monkeypatch):
    """progress=False and headless runs (book build, grading) build no tqdm bar; otherwise one is built
    (progress=None: shown only after ~3 s). Same iterates either way."""
    import tqdm.auto
    built = []

    class Spy(tqdm.auto.tqdm):
        def __init__(self, *a, **k):
            built.append(k)
            super().__init__(*a, **k)
    monkeypatch.setattr(tqdm.auto, "tqdm", Spy)
    monkeypatch.setenv("DPCLIP_HEADLESS", "1" if headless else "0")
    monkeypatch.delenv("DPCLIP_HTML_ONLY", raising=False)
    prob = random_glp()
    kw = dict(n=40, steps=5, lr=0.2, clip_norm=0.5, noise_multiplier=1.0, batch_size=8, seed=0)
    r = dp_sgd(prob, torch.zeros(5, dtype=f64), progress=progress, **kw)
    assert bool(built) == bar
    assert torch.equal(r.iterates, dp_sgd(prob, torch.zeros(5, dtype=f64), progress=False, **kw).iterates)
