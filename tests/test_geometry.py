"""Tests for dpclip_lab.geometry (Chen, Wu & Hong 2020): closed forms, exact 1-D values, the paper's claims."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, special

from dpclip_lab import geometry as geo
from dpclip_lab.clipping import clip


def quad_descent_1d(g, c, tau):
    """E[g · clamp(g + τZ, −c, c)] by numerical quadrature (independent of the closed form)."""
    if tau == 0:
        return g * max(-c, min(c, g))
    f = lambda z: g * max(-c, min(c, g + tau * z)) * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    pts = sorted({(-c - g) / tau, (c - g) / tau})          # the kinks of the clamp, in units of z
    return sum(integrate.quad(f, lo, hi, limit=200)[0] for lo, hi in zip([-np.inf] + pts, pts + [np.inf]))


# --------------------------------------------------------------------------- clipped_descent
@pytest.mark.parametrize("g,c,s,k", [(0.05, 1, 1, 0), (1, 1, 1, 0), (2, 1, 1, 0), (10, 1, 0, 10),
                                     (0.3, 2.0, 0.5, 0.7), (3, 0.5, 2, 0), (0.0, 1, 1, 1), (1.0, 1.0, 0.0, 0.0)])
def test_1d_exact_against_quadrature(g, c, s, k):
    val = geo.clipped_descent(g, c, noise_std=s, pre_clip_std=k)
    assert isinstance(val, float)
    assert val == pytest.approx(quad_descent_1d(g, c, math.hypot(s, k)), abs=1e-10, rel=1e-9)


def test_2d_monte_carlo_against_quadrature():
    g, c, s = 0.8, 1.0, 1.0

    def integrand(z2, z1):
        v = np.array([g + s * z1, s * z2])
        nv = np.linalg.norm(v)
        return g * v[0] * min(1.0, c / nv) * math.exp(-(z1 * z1 + z2 * z2) / 2) / (2 * math.pi)

    exact = integrate.dblquad(integrand, -8, 8, -8, 8, epsabs=1e-7)[0]
    mc, se = geo.clipped_descent(g, c, dim=2, samples=400_000, seed=1, return_se=True)
    assert abs(mc - exact) < 4 * se and se < 2e-3


def test_high_dim_reduction_matches_full_vectors():
    """Drawing (W_1, ‖W_⊥‖²) is the same distribution as drawing the whole d-vector."""
    d, g, c, s = 6, 1.5, 1.0, 0.8
    gen = torch.Generator().manual_seed(5)
    W = s * torch.randn(200_000, d, generator=gen, dtype=torch.float64)
    v = torch.zeros(d, dtype=torch.float64)
    v[0] = g
    full = (clip(v + W, c) @ v).mean().item()
    mc, se = geo.clipped_descent(g, c, dim=d, noise_std=s, samples=200_000, seed=2, return_se=True)
    assert abs(mc - full) < 5 * se


def test_broadcasting_and_types():
    K = torch.tensor([1.0, 10.0, 100.0])
    out = geo.clipped_descent(10.0, 1.0, dim=10, noise_std=0.0, pre_clip_std=K, samples=20_000)
    assert out.shape == (3,) and out.dtype == K.dtype
    grid = geo.clipped_descent(torch.tensor([[0.1], [1.0]]), torch.tensor([0.5, 1.0, 2.0]))
    assert grid.shape == (2, 3)
    assert grid[1, 1].item() == pytest.approx(geo.clipped_descent(1.0, 1.0))
    f32 = geo.clipped_descent(torch.tensor([1.0], dtype=torch.float32), 1.0)
    assert f32.dtype == torch.float32
    # decreasing in k (Table 1, each row and column)
    assert bool((out[1:] < out[:-1]).all())


def test_validation_messages():
    with pytest.raises(ValueError, match="clip_norm"):
        geo.clipped_descent(1.0, -1.0)
    with pytest.raises(ValueError, match="grad_norm"):
        geo.clipped_descent(-1.0, 1.0)
    with pytest.raises(ValueError, match="pre_clip_std"):
        geo.clipped_descent(1.0, 1.0, pre_clip_std=torch.tensor([0.0, -1.0]))
    with pytest.raises(ValueError, match="dim"):
        geo.clipped_descent(1.0, 1.0, dim=0)
    with pytest.raises(TypeError, match="grad_norm"):
        geo.clipped_descent("1", 1.0)
    with pytest.raises(ValueError, match="clip_norm"):
        geo.theorem2_lower_bound(1.0, float("nan"))


# --------------------------------------------------------------------------- Thm 2, Table 2, Thm 6
def test_prob_noise_below_closed_forms():
    r, s = 0.25, 1.0
    assert geo.prob_noise_below(r, noise_std=s) == pytest.approx(math.erf(r / (s * math.sqrt(2))), rel=1e-12)
    assert geo.prob_noise_below(r, dim=2, noise_std=s) == pytest.approx(1 - math.exp(-r * r / 2), rel=1e-12)
    assert geo.prob_noise_below(r, dim=3, noise_std=0.0) == 1.0
    # chi distribution against scipy.stats.chi
    from scipy.stats import chi
    assert geo.prob_noise_below(1.3, dim=7, noise_std=0.5) == pytest.approx(chi(7).cdf(1.3 / 0.5), rel=1e-12)


def test_theorem2_bound_holds_and_matches_table2():
    gs = [0.05, 0.1, 1, 2, 10, 100]
    bounds = [geo.theorem2_lower_bound(g, 1.0) for g in gs]
    p = math.erf(0.25 / math.sqrt(2))
    assert bounds == pytest.approx([g * min(g, 0.75) * p for g in gs], rel=1e-12)
    # the paper's printed bound row (2 significant digits), except the misprinted 0.05 entry
    printed = {0.1: 2e-3, 1: 0.148, 2: 0.3, 10: 1.48, 100: 14.8}
    for g, b in printed.items():
        assert geo.theorem2_lower_bound(g, 1.0) == pytest.approx(b, rel=0.02)
    # 0.05: the printed 4e-5 is 10x too small (the formula gives 4.9e-4)
    assert geo.theorem2_lower_bound(0.05, 1.0) > 10 * 4e-5
    for g in gs:
        assert geo.clipped_descent(g, 1.0) >= geo.theorem2_lower_bound(g, 1.0)


@pytest.mark.parametrize("d", [1, 4, 30])
def test_theorem2_bound_holds_in_d_dims(d):
    g = torch.tensor([0.05, 0.3, 0.75, 1.0, 3.0, 20.0])
    for c in (0.5, 1.0, 4.0):
        for s in (0.1, 1.0):
            val, se = geo.clipped_descent(g, c, dim=d, noise_std=s, samples=50_000, return_se=True)
            assert bool((val + 4 * se >= geo.theorem2_lower_bound(g, c, dim=d, noise_std=s)).all())


def test_theorem6_main_term_and_paper_erf():
    c, k = 1.0, 3.0
    main = geo.theorem2_lower_bound(10.0, c, noise_std=k)
    assert main == pytest.approx(0.75 * c * 10 * math.erf(c / (4 * k * math.sqrt(2))), rel=1e-12)
    # App. H writes erf(c/4k): it drops the sqrt(2) and overstates the probability
    assert math.erf(c / (4 * k)) > 1.3 * geo.prob_noise_below(c / 4, noise_std=k)
    # and the expected descent with pre-clip noise is above the main term (xi = 0 here)
    assert geo.clipped_descent(10.0, c, noise_std=0.0, pre_clip_std=k) >= main


def test_table1_large_k_scaling():
    """Table 1: descent ~ 1/k for large k (d = 1: y·c·2φ(0)·y/k asymptotically)."""
    k = torch.tensor([100.0, 1000.0, 10000.0])
    v = geo.clipped_descent(10.0, 1.0, noise_std=0.0, pre_clip_std=k)
    assert bool(((v * k)[1:] / (v * k)[:-1] - 1).abs().max() < 0.01)
    assert (v[-1] * k[-1]).item() == pytest.approx(100 * 2 * (1 / math.sqrt(2 * math.pi)), rel=0.01)


# --------------------------------------------------------------------------- Examples 1-2, §5
def test_examples_1_and_2():
    a1 = torch.tensor([-3.0, -3.0, 9.0])
    F = geo.expected_clipped_mean((torch.tensor([1.0]) - a1)[:, None], 1.0)  # at x* = 1
    assert F.item() == pytest.approx(1 / 3)
    lo, hi = geo.clipped_stationary_interval(a1, 1.0)
    assert lo == pytest.approx(-2.5, abs=1e-9) and hi == pytest.approx(-2.5, abs=1e-9)
    lo, hi = geo.clipped_stationary_interval([-3.0, 3.0], 1.0)
    assert lo == pytest.approx(-2.0, abs=1e-9) and hi == pytest.approx(2.0, abs=1e-9)
    # without clipping (c large), the stationary point is the mean
    lo, hi = geo.clipped_stationary_interval(a1, 100.0)
    assert lo == pytest.approx(1.0, abs=1e-9)


def test_pre_clip_noise_moves_fixed_point_to_optimum():
    a1 = torch.tensor([-3.0, -3.0, 9.0])
    k = torch.tensor([0.0, 1.0, 3.0, 10.0, 30.0, 100.0])
    lo, hi = geo.clipped_stationary_interval(a1, 1.0, pre_clip_std=k)
    gap = (lo - 1.0).abs()
    assert bool((gap[1:] < gap[:-1]).all()) and gap[-1] < 0.01
    assert torch.allclose(lo[1:], hi[1:], atol=1e-9)           # unique for k > 0
    # O(1/k^2): the gap shrinks ~100x from k = 10 to k = 100
    assert 30 < (gap[3] / gap[5]).item() < 300


def test_expected_clipped_mean_exact_vs_monte_carlo():
    G = torch.tensor([[[0.3, -0.2], [1.5, 0.4], [-2.0, 1.0]]], dtype=torch.float64)
    k = 0.7
    mc = geo.expected_clipped_mean(G, 1.0, pre_clip_std=k, samples=40_000, seed=3)
    # 1-D exact path, coordinate by coordinate on a 1-D problem
    g1 = G[..., :1]
    ex1 = geo.expected_clipped_mean(g1, 1.0, pre_clip_std=k)
    gen = torch.Generator().manual_seed(0)
    mc1 = (g1 + k * torch.randn((200_000,) + g1.shape[1:], generator=gen, dtype=torch.float64)).clamp(-1, 1).mean((0, 1))
    assert ex1.item() == pytest.approx(mc1.item(), abs=5e-3)
    assert mc.shape == (1, 2)
    assert geo.expected_clipped_mean(G, 1.0).allclose(clip(G, 1.0).mean(-2))


# --------------------------------------------------------------------------- eq. (5), §2.2, Thm 3
def test_bias_zero_for_symmetric_and_positive_for_positive_skew():
    gen = torch.Generator().manual_seed(0)
    xi = torch.randn(500, 3, generator=gen, dtype=torch.float64)
    grad = torch.tensor([0.4, 0.0, 0.0], dtype=torch.float64)
    sym = torch.cat([xi, -xi])
    bd = geo.bias_decomposition(grad, sym, 1.0)
    assert abs(bd.bias.item()) < 1e-12
    assert bd.descent.item() == pytest.approx(bd.symmetric.item() + bd.bias.item())
    # right-skewed noise along grad (rare large pushes forward, frequent small ones back):
    # clipping cuts the rare large ones, so the bias is negative; mirrored, positive.
    # (Neither is "positively skewed" in the paper's sense p(ξ) ≥ p(−ξ) for <ξ, ∇f> > 0:
    # with zero mean that condition forces symmetry -- see the chapter.)
    e = -torch.log(torch.rand(4000, generator=gen, dtype=torch.float64)) - 1.0
    pos = torch.stack([e, torch.zeros_like(e), torch.zeros_like(e)], 1)
    assert geo.bias_decomposition(grad, pos, 1.0).bias.item() < 0
    assert geo.bias_decomposition(grad, -pos, 1.0).bias.item() > 0
    # vectorized over clip norms
    out = geo.bias_decomposition(grad, pos, torch.tensor([0.5, 1.0, 2.0]))
    assert out.bias.shape == (3,)


def test_mixture_descent_exact_1d_and_theorem3():
    means = torch.tensor([[3.0], [0.5], [0.0]], dtype=torch.float64)
    w = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    cs = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    val, grad = geo.mixture_descent(means, w, cs)
    direct = sum(w[i] * grad[0] * geo.clipped_descent(abs(means[i, 0].item()), cs, noise_std=1.0)
                 * (1 if means[i, 0] > 0 else 0) / max(abs(means[i, 0].item()), 1e-300) for i in range(3))
    assert torch.allclose(val, direct)
    gen = torch.Generator().manual_seed(1)
    comp = torch.multinomial(w, 300_000, True, generator=gen)
    X = means[comp] + torch.randn(300_000, 1, generator=gen, dtype=torch.float64)
    mc = geo.descent_on_samples(grad, X - grad, cs)
    assert torch.allclose(val, mc, atol=5e-3)
    # Thm 3 holds when every <u_i, grad> >= 0
    assert bool((val >= geo.theorem3_lower_bound(means, w, cs)).all())
    # d = 3: spherical components, aligned means
    m3 = torch.tensor([[2.0, 1.0, 0.0], [0.5, -0.5, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    v3, g3 = geo.mixture_descent(m3, w, cs, samples=100_000)
    assert bool(((m3 @ g3) >= 0).all())
    assert bool((v3 >= geo.theorem3_lower_bound(m3, w, cs)).all())


# --------------------------------------------------------------------------- Thm 5
def test_wasserstein_disparity_1d_equals_network_simplex_and_bounds_bias():
    gen = torch.Generator().manual_seed(2)
    means = torch.tensor([[4.0, 0.0], [-1.0, 0.5]], dtype=torch.float64)
    comp = torch.multinomial(torch.tensor([0.2, 0.8]), 300, True, generator=gen)
    G = means[comp] + 0.5 * torch.randn(300, 2, generator=gen, dtype=torch.float64)
    grad = G.mean(0)
    xi = G - grad
    for c in (0.3, 1.0, 5.0):
        w1 = geo.wasserstein_disparity(grad, xi, c)
        we = geo.wasserstein_disparity(grad, xi, c, method="emd")
        assert w1 == pytest.approx(we, abs=1e-10)
        b = geo.bias_decomposition(grad, xi, c).bias.item()
        assert abs(b) <= w1 + 1e-12                                 # eq. (9)
        assert w1 <= 2 * grad.norm().item() * c + 1e-12
    assert geo.wasserstein_disparity(grad, torch.cat([xi, -xi]), 1.0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="method"):
        geo.wasserstein_disparity(grad, xi, 1.0, method="sinkhorn")


def test_theorem5_constants():
    v = geo.theorem5_v(1.1, n=1000, batch_size=100, steps=50, epsilon=2.0, delta=1e-5)
    assert v == pytest.approx(1.1 ** 2 * 1000 ** 2 * 4 / (100 ** 2 * 50 * math.log(1e5)))
    r = geo.theorem5_rate_term(v=v, clip_norm=1.0, D_f=2.0, G=1.0, dim=10, n=1000, epsilon=2.0, delta=1e-5)
    assert r == pytest.approx((v / 2 + 1.5) * math.sqrt(2 * 10 * math.log(1e5)) / 2000)
    assert geo.h_c(0.5, 1.0) == 0.25 and geo.h_c(2.0, 1.0) == 1.5
    with pytest.raises(ValueError, match="delta"):
        geo.theorem5_rate_term(v=1.0, clip_norm=1.0, D_f=1.0, G=1.0, dim=1, n=10, epsilon=1.0, delta=1.5)


# --------------------------------------------------------------------------- §4 views
def test_views_shapes_and_symmetry_score():
    gen = torch.Generator().manual_seed(0)
    G = torch.randn(300, 40, generator=gen, dtype=torch.float64) + 0.2
    P = geo.random_projections(G, views=5, seed=1)
    assert P.shape == (5, 300, 2)
    assert torch.allclose(geo.random_projections(3 * G, views=5, seed=1), 3 * P)
    cos = geo.cosines_to_mean(G)
    assert cos.shape == (300,) and bool((cos.abs() <= 1 + 1e-12).all())
    st = geo.norm_statistics(G, 1.0)
    assert torch.allclose(st["noise_norm"], (G - G.mean(0)).norm(dim=1))
    assert bool((st["inner_clipped"].abs() <= st["true_grad_norm"] + 1e-12).all())
    X = torch.randn(200, 2, generator=gen, dtype=torch.float64)
    assert geo.symmetry_score(torch.cat([X, -X])) == pytest.approx(1.0, abs=1e-8)
    gauss = geo.symmetry_score(X)
    expo = geo.symmetry_score(-torch.log(torch.rand(200, 2, generator=gen, dtype=torch.float64)))
    assert 0 <= expo < gauss <= 1
    with pytest.raises(ValueError, match="G must be"):
        geo.random_projections(torch.ones(3))


def test_views_on_module_per_sample_grads():
    import dpclip_lab as dl
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    x = torch.randn(20, 1, 4, 4)
    y = torch.randint(0, 3, (20,))
    G = dl.per_sample_grads(model, torch.nn.functional.cross_entropy, x, y)
    assert geo.random_projections(G, views=2).shape == (2, 20, 2)
    assert 0 <= geo.symmetry_score(geo.cosines_to_mean(G)) <= 1


def test_many_clip_norms_at_once_match_one_at_a_time():
    gen = torch.Generator().manual_seed(4)
    G = torch.randn(200, 30, generator=gen, dtype=torch.float64) ** 3
    g = G.mean(0)
    cs = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    W = geo.wasserstein_disparity(g, G - g, cs)
    D = geo.descent_on_samples(g, G - g, cs)
    for k, c in enumerate(cs.tolist()):
        assert W[k].item() == pytest.approx(geo.wasserstein_disparity(g, G - g, c), abs=1e-12)
        assert D[k].item() == pytest.approx((clip(G, c) @ g).mean().item(), rel=1e-12)


# --------------------------------------------------------------------------- Thm 5 for any step (App. D, eq. (50))
def test_theorem5_step_bound_is_eq52_at_the_theorems_step_and_horizon():
    n, d, eps, delta, Df, G, c = 1000, 10, 2.0, 1e-5, 2.0, 3.0, 0.7
    v = geo.theorem5_v(1.1, n=n, batch_size=100, steps=50, epsilon=eps, delta=delta)
    L = math.log(1 / delta)
    T = n * n * eps * eps / (d * L)                                 # Thm 5's horizon (not an integer here)
    alpha = math.sqrt(Df * d * L) / (n * eps * c * math.sqrt(G))     # Thm 5's step
    sigma = math.sqrt(v * c * c * T * L / (n * n * eps * eps))
    # D_f / (T alpha) with a non-integer T: pass steps=1 and D_f / T
    got = geo.theorem5_step_bound(lr=alpha, steps=1, clip_norm=c, D_f=Df / T, G=G, dim=d, noise_std=sigma)
    want = geo.theorem5_rate_term(v=v, clip_norm=c, D_f=Df, G=G, dim=d, n=n, epsilon=eps, delta=delta)
    assert got == pytest.approx(want, rel=1e-12)
    # any other step is worse: eq. (52)'s alpha minimizes the bound over alpha when T alpha is fixed...
    # ...and the two terms are the ones of eq. (50)
    b = geo.theorem5_step_bound(lr=0.1, steps=200, clip_norm=1.0, D_f=2.0, G=3.0, dim=10, noise_std=0.5,
                                batch_factor=1.2)
    assert b == pytest.approx(2.0 / 20 + 0.15 * (1.2 + 2.5), rel=1e-12)
    cs = torch.tensor([0.1, 1.0, 10.0])
    out = geo.theorem5_step_bound(lr=1 / cs, steps=100, clip_norm=cs, D_f=1.0, G=2.0, dim=5, noise_std=0.2 * cs)
    assert out.shape == (3,) and bool((out[1:] > out[:-1]).all())
    with pytest.raises(ValueError, match="lr"):
        geo.theorem5_step_bound(lr=0.0, steps=1, clip_norm=1.0, D_f=1.0, G=1.0, dim=1, noise_std=0.0)
    with pytest.raises(ValueError, match="G"):
        geo.theorem5_step_bound(lr=0.1, steps=1, clip_norm=1.0, D_f=1.0, G=-1.0, dim=1, noise_std=0.0)


# --------------------------------------------------------------------------- §4 experiment
def test_hessian_norm_estimate_on_least_squares():
    """f(w) = mean (x_i·w − y_i)²: the Hessian is (2/n) XᵀX; power iteration finds its top eigenvalue."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 6, generator=gen, dtype=torch.float64) * torch.tensor([3.0, 1, 1, 1, 1, 0.5], dtype=torch.float64)
    y = torch.randn(50, generator=gen, dtype=torch.float64)
    model = torch.nn.Linear(6, 1, bias=False).double()
    loss = lambda out, t: ((out[:, 0] - t) ** 2).mean()  # noqa: E731
    top = float(torch.linalg.eigvalsh(2 * X.T @ X / 50).max())
    est = geo.hessian_norm_estimate(model, loss, X, y, iters=60)
    assert est == pytest.approx(top, rel=1e-6)
    assert geo.hessian_norm_estimate(model, loss, X, y, iters=2) <= top * (1 + 1e-9)   # never above ‖H‖
    with pytest.raises(ValueError, match="iters"):
        geo.hessian_norm_estimate(model, loss, X, y, iters=0)


def test_chen_cnn_is_deterministic_and_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b = geo.chen_cnn(seed=3), geo.chen_cnn(seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(a.parameters()), next(geo.chen_cnn(seed=4).parameters()))
    assert sum(p.numel() for p in a.parameters()) == 6794
    for size in (8, 28):                                       # digits and MNIST alike
        assert a(torch.zeros(2, 1, size, size)).shape == (2, 10)


FIXTURE = __import__("pathlib").Path(__file__).resolve().parent / "data" / "mnist_tiny"


def test_chapter_mnist_branch_runs_on_tiny_idx(monkeypatch):
    """The code path of "What real gradient distributions look like" when the reader has MNIST.

    The chapter loads with ``load_mnist(limit=4000, fallback="digits")``, trains
    ``chen_cnn()`` with ``gradients_along_training`` and computes the §4 views; here the
    IDX files are the tiny fixture of ``tests/data/mnist_tiny`` (see make_mnist_tiny.py).
    """
    from torch.nn import functional as F

    import dpclip_lab as dl

    monkeypatch.setenv("DPCLIP_MNIST", str(FIXTURE))
    ds = dl.data.load_mnist(limit=4000, fallback="digits")                  # the chapter's line
    assert ds.X_train.shape == (48, 1, 28, 28) and ds.X_test.shape == (16, 1, 28, 28)
    assert ds.description.startswith("MNIST")
    seen = []
    snap = geo.gradients_along_training(
        geo.chen_cnn(), F.cross_entropy, ds.X_train, ds.y_train, epochs=2, checkpoints=[0, 2], view=20, lr=1.0,
        clip_norm=1.0, noise_multiplier=1.1, batch_size=16, test=(ds.X_test, ds.y_test),
        measure=lambda m: seen.append(1) or len(seen), measure_at=[1, 2])
    assert sorted(snap.grads) == [0, 2] and snap.grads[2].shape == (20, 6794) and snap.grads[2].dtype == torch.float64
    assert snap.measured == {1: 1, 2: 2} and snap.steps_per_epoch == 3 and snap.steps == 6
    assert not torch.equal(snap.params[0], snap.params[2])                 # it trained
    assert 0.0 <= snap.accuracy[2] <= 1.0 and snap.loss[0] > 0
    G = snap.grads[2]
    g = G.mean(0)
    assert geo.random_projections(G - g, views=4).shape == (4, 20, 2)
    assert 0 <= geo.symmetry_score(geo.cosines_to_mean(G)) <= 1
    assert geo.wasserstein_disparity(g, G - g, 1.0) >= 0
    eps = dl.get_epsilon(noise_multiplier=snap.noise_multiplier, sample_rate=snap.sample_rate, steps=snap.steps,
                         delta=1e-5)
    assert math.isfinite(eps) and eps > 0


def test_gradients_along_training_validation():
    from torch.nn import functional as F

    X, y = torch.zeros(8, 1, 8, 8), torch.zeros(8, dtype=torch.long)
    common = dict(view=2, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, batch_size=4)
    with pytest.raises(ValueError, match="checkpoints"):
        geo.gradients_along_training(geo.chen_cnn(), F.cross_entropy, X, y, epochs=1, checkpoints=[2], **common)
    with pytest.raises(ValueError, match="measure_at"):
        geo.gradients_along_training(geo.chen_cnn(), F.cross_entropy, X, y, epochs=1, checkpoints=[0],
                                     measure=len, measure_at=[5], **common)
    with pytest.raises(TypeError, match="measure"):
        geo.gradients_along_training(geo.chen_cnn(), F.cross_entropy, X, y, epochs=1, checkpoints=[0],
                                     measure=3, **common)
