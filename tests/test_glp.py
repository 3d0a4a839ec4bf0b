"""Losses, generalized linear problems and Song et al. Lemma 3.1 (clipping = Huberization)."""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import losses
from dpclip_lab.huberization import huberized_derivative, huberized_value

CONVEX = [losses.Logistic(), losses.Squared(), losses.Squared(scale=1.0), losses.QNormRegression(1.0),
          losses.QNormRegression(1.5), losses.QNormRegression(2.0), losses.QHinge(1.0), losses.QHinge(1.5),
          losses.QHinge(2.0), losses.Huber(0.7)]
ALL = CONVEX + [losses.Savage(), losses.Tangent()]


def _data(n=40, p=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g, dtype=torch.float64)
    y = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0).double()
    return X, y


@pytest.mark.parametrize("loss", ALL, ids=repr)
def test_derivative_matches_autograd(loss):
    z = torch.linspace(-4, 4, 161, dtype=torch.float64).requires_grad_()
    for yv in (-1.0, 1.0):
        y = torch.full_like(z, yv)
        v = loss.value(z, y)
        (g,) = torch.autograd.grad(v.sum(), z)
        kink = torch.zeros_like(z, dtype=torch.bool)
        if isinstance(loss, (losses.QNormRegression, losses.QHinge)) and loss.q == 1.0:
            kink = (z - y).abs() < 1e-9 if isinstance(loss, losses.QNormRegression) else (1 - y * z).abs() < 1e-9
        assert torch.allclose(loss.derivative(z, y)[~kink], g[~kink], atol=1e-10)


@pytest.mark.parametrize("loss", ALL, ids=repr)
def test_constants_bound_the_derivative(loss):
    z = torch.linspace(-30, 30, 60001, dtype=torch.float64)
    for yv in (-1.0, 1.0):
        d = loss.derivative(z, torch.full_like(z, yv))
        assert d.abs().max() <= loss.lipschitz * (1 + 1e-12)
        a, L = loss.holder_alpha, loss.holder_constant
        i, j = torch.randint(0, len(z), (2, 5000), generator=torch.Generator().manual_seed(1))
        ok = i != j
        lhs = (d[i] - d[j]).abs()[ok]
        rhs = L * (z[i] - z[j]).abs()[ok] ** a
        assert bool((lhs <= rhs * (1 + 1e-9) + 1e-12).all()), f"Hölder bound fails for {loss!r}"


@pytest.mark.parametrize("loss", CONVEX, ids=repr)
def test_derivative_inverse(loss):
    y = torch.tensor([-1.0, 1.0], dtype=torch.float64)[:, None].expand(2, 50)
    u = torch.linspace(-3, 3, 50, dtype=torch.float64).expand(2, 50)
    z = loss.derivative_inverse(u, y)
    fin = torch.isfinite(z)
    if not (isinstance(loss, (losses.QNormRegression, losses.QHinge)) and loss.q == 1.0):
        assert torch.allclose(loss.derivative(z[fin], y[fin]), u[fin], atol=1e-9)
    # infinite answers only where u lies outside the derivative's range
    zz = torch.linspace(-50, 50, 20001, dtype=torch.float64)
    for r in range(2):
        d = loss.derivative(zz, torch.full_like(zz, y[r, 0].item()))
        bad = ~fin[r]
        assert bool(((u[r][bad] <= d.min() + 1e-9) | (u[r][bad] >= d.max() - 1e-9)).all())


@pytest.mark.parametrize("loss", CONVEX, ids=repr)
def test_lemma_3_1_huberized_loss(loss):
    """g' is the clipped f'; g is convex; g = f when c exceeds the Lipschitz constant."""
    z = (torch.linspace(-5, 5, 2001, dtype=torch.float64) + 1e-3 * math.pi).requires_grad_()  # off the kinks
    for yv in (-1.0, 1.0):
        y = torch.full_like(z, yv)
        for c in (0.05, 0.3, 0.9, 2.5):
            g = huberized_value(loss, z, y, c)
            (dg,) = torch.autograd.grad(g.sum(), z)
            assert torch.allclose(dg, huberized_derivative(loss, z, y, c), atol=1e-9)
            assert bool((dg.abs() <= c + 1e-12).all())
            # convexity: slopes nondecreasing and midpoint inequality
            assert bool((dg[1:] - dg[:-1] >= -1e-9).all())
            gv = g.detach()
            assert bool((gv[1:-1] <= 0.5 * (gv[2:] + gv[:-2]) + 1e-9).all())
            # the derivative of g equals the clipped derivative of f
            assert torch.allclose(dg, loss.derivative(z, y).clamp(-c, c), atol=1e-9)
        if math.isfinite(loss.lipschitz):
            assert torch.allclose(huberized_value(loss, z, y, loss.lipschitz * 1.01), loss.value(z, y))


def test_nonconvex_loss_refuses_huberization():
    with pytest.raises(ValueError, match="convex"):
        huberized_value(losses.Savage(), torch.zeros(3), torch.ones(3), 1.0)


@pytest.mark.parametrize("loss", CONVEX + [losses.Savage()], ids=repr)
def test_glp_gradients_batched(loss, device):
    X, y = _data()
    prob = dl.GLProblem(X.to(device), y.to(device), loss)
    theta = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).to(device)
    th = theta.clone().requires_grad_()
    (auto,) = torch.autograd.grad(prob.objective(th).sum(), th)
    assert torch.allclose(prob.grad(theta), auto, atol=1e-10)
    G = prob.per_example_grads(theta)
    assert G.shape == (3, 40, 5)
    assert torch.allclose(G.mean(-2), prob.grad(theta), atol=1e-12)
    Cs = torch.tensor([0.05, 0.5, 50.0], dtype=torch.float64, device=device)
    assert torch.allclose(prob.clipped_grad(theta, Cs), dl.clip(G, Cs[:, None]).mean(-2), atol=1e-12)
    idx = torch.tensor([[0, 3], [5, 5], [39, 1]], device=device)
    assert torch.allclose(prob.grad_fn(theta, idx)[1, 0], G[1, 5])
    assert torch.allclose(prob.grad_fn(theta[0], torch.tensor([7], device=device))[0], G[0, 7])


@pytest.mark.parametrize("loss", CONVEX, ids=repr)
def test_clipped_objective_gradient_is_clipped_gradient(loss):
    X, y = _data()
    prob = dl.GLProblem(X, y, loss)
    theta = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).requires_grad_()
    Cs = torch.tensor([0.01, 0.2, 1.0, 30.0], dtype=torch.float64)
    (auto,) = torch.autograd.grad(prob.clipped_objective(theta, Cs).sum(), theta)
    assert torch.allclose(auto, prob.clipped_grad(theta.detach(), Cs), atol=1e-10)
    assert torch.allclose(prob.clipped_objective_grad(theta.detach(), Cs), auto, atol=1e-10)


def test_clipped_objective_equals_objective_above_lipschitz():
    ds = dl.data.breast_cancer()
    prob = dl.GLProblem(ds.X_train, ds.y_train, losses.Logistic())
    theta = torch.randn(2, prob.p, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert prob.lipschitz == pytest.approx(1.0)
    assert torch.allclose(prob.clipped_objective(theta, 1.0), prob.objective(theta))


def test_exact_optima_song_theorem_3_2():
    prob = dl.data.song_logistic_lower_bound(50)
    assert abs(dl.optima.minimize(prob).item()) < 1e-4                    # θ* = 0
    for L in (0.05, 0.1, 0.25):
        th = dl.optima.minimize(prob, clip_norm=L).item()
        assert th == pytest.approx(dl.data.song_logistic_huber_minimizer(L), abs=1e-3)
        assert abs(prob.clipped_grad(torch.tensor([th], dtype=torch.float64), L).item()) < 1e-4  # solver precision


def test_separable_data_needs_a_constraint():
    ds = dl.data.breast_cancer()
    prob = dl.GLProblem(ds.X_train, ds.y_train, losses.Logistic())
    assert dl.optima.is_separable(prob)
    with pytest.raises(ValueError, match="linearly separable.*radius="):
        dl.optima.minimize(prob)
    th = dl.optima.minimize(prob, radius=5.0)
    assert th.norm().item() == pytest.approx(5.0, rel=1e-6)              # the constraint is active
    hinge = dl.GLProblem(ds.X_train, ds.y_train, losses.QHinge(1.0))
    assert hinge.objective(dl.optima.minimize(hinge)).item() < 1e-6        # hinge attains 0 on separable data


def test_exact_optima_with_radius_and_errors():
    X, y = _data()
    prob = dl.GLProblem(X, y, losses.Logistic())
    th = dl.optima.minimize(prob, radius=0.1)
    assert th.norm() <= 0.1 + 1e-6
    with pytest.raises(TypeError, match="no cvxpy form"):
        dl.optima.minimize(dl.GLProblem(X, y, losses.Savage()))


def test_holder_constants_of_a_glp():
    X, y = _data()
    prob = dl.GLProblem(X, y, losses.QHinge(1.5))
    xmax = X.norm(dim=1).max().item()
    R = 2.0 * xmax                          # a stated domain bound, not the rows' maximum
    a, L, M = prob.holder(feature_bound=R)
    assert a == 0.5 and L == pytest.approx(1.5 * R ** 1.5)
    assert M == pytest.approx(1.5 * R)      # |f'(0)| = q for every example of the domain
    with pytest.raises(ValueError, match="feature_bound is required"):
        prob.holder()
    with pytest.raises(ValueError, match="feature_bound=.* is violated"):
        prob.holder(feature_bound=0.5 * xmax)


def test_bad_input():
    X, y = _data()
    with pytest.raises(ValueError, match="y must have shape"):
        dl.GLProblem(X, y[:-1], losses.Logistic())
    with pytest.raises(ValueError, match="labels y in"):
        dl.GLProblem(X, y * 2, losses.Logistic())
    with pytest.raises(ValueError, match="X contains"):
        dl.GLProblem(X.clone().fill_(float("nan")), y, losses.Squared())
    prob = dl.GLProblem(X, y, losses.Squared())
    with pytest.raises(ValueError, match=r"theta must have shape \[\.\.\., 5\]"):
        prob.objective(torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="idx must lie in"):
        prob.grad_fn(torch.zeros(5, dtype=torch.float64), torch.tensor([40]))
    with pytest.raises(ValueError, match="clip_norm"):
        prob.clipped_grad(torch.zeros(5, dtype=torch.float64), -1.0)
    with pytest.raises(ValueError, match="q must lie in"):
        losses.QHinge(2.5)
    with pytest.raises(ValueError, match="scale"):
        losses.Squared(scale=0)


def test_mean_estimation():
    prob = dl.data.chen_mixture(n=500, p=4, seed=1)
    theta = torch.zeros(2, 4, dtype=torch.float64)
    assert torch.allclose(prob.grad(theta), prob.per_example_grads(theta).mean(-2))
    assert torch.allclose(prob.clipped_grad(theta, torch.tensor([1.0, 1e9], dtype=torch.float64))[1], prob.grad(theta)[1])
    assert torch.allclose(prob.grad(prob.minimizer), torch.zeros(4, dtype=torch.float64), atol=1e-12)


def test_low_rank_problems_are_isometric_across_dimensions():
    small, big = dl.data.low_rank_glp(60, 8, 3, seed=4), dl.data.low_rank_glp(60, 20_000, 3, seed=4)
    assert small.rank == big.rank == 3
    th_s, th_b = dl.optima.minimize(small), dl.optima.minimize(big)
    assert th_b.shape == (20_000,)
    assert small.objective(th_s).item() == pytest.approx(big.objective(th_b).item(), rel=1e-6)
    assert small.seminorm(th_s).item() == pytest.approx(big.seminorm(th_b).item(), rel=1e-4)
    assert big.seminorm(th_b).item() == pytest.approx(th_b.norm().item(), rel=1e-8)   # minimizer lies in the span
    with pytest.raises(ValueError, match="rank must be <= p"):
        dl.data.low_rank_glp(10, 2, 3)


def test_exact_optimum_reaches_optimal_where_the_default_solver_stalls():
    """#28 item 7: the knob chapter's Huberized optimum at C = 10^(1/3) on breast cancer stopped at cvxpy's
    'optimal_inaccurate' (a UserWarning printed on the page). minimize retries with more accurate solvers:
    no warning, and the same clipped objective as the stalled solution's to solver precision."""
    import warnings

    from dpclip_lab import optima

    ds = dl.data.breast_cancer(seed=0)
    prob = dl.GLProblem(ds.X_train, ds.y_train, dl.losses.Logistic())
    C = 10 ** (1 / 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        theta = optima.minimize(prob, clip_norm=C, radius=20.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stalled = optima.minimize(prob, clip_norm=C, radius=20.0, solver="CLARABEL")   # one attempt, as before
    assert abs(float(prob.clipped_objective(theta, C)) - float(prob.clipped_objective(stalled, C))) < 1e-9
    assert float(theta.norm()) <= 20.0 + 1e-6
