"""Wang, Lei, Ying, Zhang (output / gradient perturbation) and Andrew et al. (2021) adaptive clipping."""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import noise
from dpclip_lab.accountants import events as ev
from dpclip_lab.algorithms import (dp_sgd_adaptive_clipping, dp_sgd_gradient_perturbation,
                                   dp_sgd_output_perturbation, gradient_noise_std, output_noise_std, uas_bound)
from dpclip_lab.algorithms.gradient_perturbation import thm11_conditions
from dpclip_lab.losses import QHinge, QNormRegression
from dpclip_lab.privatizers import adjusted_noise_multiplier

f64 = torch.float64


def hinge_problem(n=60, p=3, q=1.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g, dtype=f64)
    X = X / X.norm(dim=1).max()
    y = torch.where(X[:, 0] + 0.3 * torch.randn(n, generator=g, dtype=f64) > 0, 1.0, -1.0).to(f64)
    return dl.GLProblem(X, y, QHinge(q))


def test_uas_bound_matches_formula_and_grows_with_T():
    a, L, M, eta, T, n, gam, R = 0.5, 1.5, 1.0, 0.05, 200, 100, 1e-3, 2.0
    x = 3 * n * math.log(n / gam) / T
    c = max(math.sqrt(x), x)
    k = T * (1 + c) / n
    first = (1 - a) / (1 + a) * T * (2 ** -a * L * eta) ** (2 / (1 - a))
    G = M + L * R ** a
    expect = math.sqrt(math.e * (first + 4 * G * G * eta * eta * (1 + k) * k))
    got = uas_bound(alpha=a, holder_constant=L, grad_at_zero=M, lr=eta, steps=T, n=n, gamma=gam, radius=R)
    assert math.isclose(got, expect)
    more = uas_bound(alpha=a, holder_constant=L, grad_at_zero=M, lr=eta, steps=2 * T, n=n, gamma=gam, radius=R)
    assert more > got
    unb = uas_bound(alpha=a, holder_constant=L, grad_at_zero=M, lr=eta, steps=T, n=n, gamma=gam, sup_loss_at_zero=1.0)
    assert unb > 0
    with pytest.raises(ValueError, match="lr"):
        uas_bound(alpha=a, holder_constant=L, grad_at_zero=M, lr=0.9, steps=T, n=n, gamma=gam, radius=R)
    with pytest.raises(ValueError, match="sup_loss_at_zero"):
        uas_bound(alpha=a, holder_constant=L, grad_at_zero=M, lr=eta, steps=T, n=n, gamma=gam)


@pytest.mark.parametrize("radius", [1.0, None])
def test_output_perturbation_sensitivity_bound_holds(radius):
    """Thm 7: two SGD runs (same indices) on neighbouring datasets end within Δ_SGD."""
    prob = hinge_problem()
    X2, y2 = prob.X.clone(), prob.y.clone()
    X2[5], y2[5] = X2[6], -y2[6]  # a different datum
    nb = dl.GLProblem(X2, y2, prob.loss)
    kw = dict(n=prob.n, steps=300, lr=0.1, epsilon=0.9, delta=1e-5, radius=radius, feature_bound=1.0, seed=0)
    r1 = dp_sgd_output_perturbation(prob, torch.zeros(3, dtype=f64), **kw)
    r2 = dp_sgd_output_perturbation(nb, torch.zeros(3, dtype=f64), **kw)
    gap = (r1.extra["nonprivate_average"] - r2.extra["nonprivate_average"]).norm().item()
    assert 0 < gap <= r1.extra["sensitivity"]
    D = r1.extra["sensitivity"]
    assert math.isclose(r1.extra["noise_std"], output_noise_std(D, 0.9, 1e-5))
    # the analytic calibration at δ/2 is exact: (0.9, δ/2)-DP, and less noise than Lemma 2's classic σ
    assert dl.accountants.analytic_gaussian_epsilon(r1.extra["noise_std"], 0.5e-5, D) == pytest.approx(0.9, rel=1e-6)
    assert math.isclose(r1.extra["noise_std_classic"], math.sqrt(2 * math.log(2.5e5)) * D / 0.9)
    assert r1.extra["noise_std"] < r1.extra["noise_std_classic"]
    assert r1.dp_event() == ev.EpsilonDeltaEvent(0.9, 1e-5)
    # Wang's average includes w_1 = θ_0 and stops at w_T
    assert torch.allclose(r1.extra["nonprivate_average"], r1.iterates[:-1].mean(0))
    if radius is not None:
        assert (r1.iterates.norm(dim=-1) <= radius + 1e-12).all()


def test_output_perturbation_noise_level():
    prob = hinge_problem()
    res = dp_sgd_output_perturbation(prob, torch.zeros(2000, 3, dtype=f64), n=prob.n, steps=50, lr=0.1, epsilon=2.0,
                                     delta=1e-5, radius=1.0, feature_bound=1.0, seed=0)
    resid = res.theta - res.extra["nonprivate_average"]
    assert abs(resid.std().item() / res.extra["noise_std"] - 1) < 0.05


def test_gradient_perturbation_beta_search_lemma_13():
    n = 1000
    eps = (7 * (n ** (1 / 3) - 1) + 4 * math.log(n) * n + 7) / (2 * n * (n ** (1 / 3) - 1)) * 1.01
    sigma, beta = gradient_noise_std(epsilon=eps, delta=1 / n ** 2, steps=n, n=n, gradient_bound=1.0)
    assert 0 < beta < 1
    s2, ok = thm11_conditions(beta, epsilon=eps, delta=1 / n ** 2, steps=n, n=n, gradient_bound=1.0)
    assert ok and math.isclose(s2, sigma)
    lam = math.log(n ** 2) / ((1 - beta) * eps) + 1
    assert math.isclose(sigma ** 2, 14 * n * lam / (beta * n * n * eps))
    # β is the feasible value closest to 1/2
    closer = [b for b in (0.5, beta - 1e-3 * math.copysign(1, beta - 0.5)) if abs(b - 0.5) < abs(beta - 0.5)]
    assert all(not thm11_conditions(b, epsilon=eps, delta=1 / n ** 2, steps=n, n=n, gradient_bound=1.0)[1]
               for b in closer)
    with pytest.raises(ValueError, match="no beta"):
        gradient_noise_std(epsilon=0.01, delta=1 / n ** 2, steps=n, n=n, gradient_bound=1.0)


def test_gradient_perturbation_run_and_event():
    prob = dl.GLProblem(hinge_problem(n=200).X, hinge_problem(n=200).y, QNormRegression(1.5))
    R = 1.0
    res = dp_sgd_gradient_perturbation(prob, torch.zeros(3, dtype=f64), n=prob.n, steps=200, lr=0.05, epsilon=4.0,
                                       delta=1e-4, radius=R, feature_bound=1.0, label_bound=1.0, seed=0)
    a, L, M = prob.holder(R, feature_bound=1.0, label_bound=1.0)
    G = M + L * R ** a
    assert math.isclose(res.extra["gradient_bound"], G)
    z = res.noise_multiplier
    assert math.isclose(z, res.extra["sigma"] / G)
    assert math.isclose(noise.wang_sigma_to_noise_multiplier(res.extra["sigma"], gradient_bound=G), z)
    assert res.dp_event() == ev.SelfComposedEvent(
        ev.SampledWithoutReplacementEvent(prob.n, 1, ev.GaussianEvent(res.extra["sigma"] / (2 * G))), 200)
    assert (res.iterates.norm(dim=-1) <= R + 1e-12).all()
    assert (res.history["fraction_clipped"] == 0).all()  # clipping at G is a no-op on the ball
    assert torch.allclose(res.theta, res.iterates[:-1].mean(0))


# -- adaptive clipping -----------------------------------------------------------------------------
def test_adjusted_noise_multiplier():
    z, sb = 1.0, 2.0
    zd = adjusted_noise_multiplier(z, sb)
    assert math.isclose(zd ** -2 + (2 * sb) ** -2, z ** -2)
    assert adjusted_noise_multiplier(0.0, 1.0) == 0.0


def test_adaptive_clip_norm_tracks_quantile():
    norms = torch.logspace(-1, 2, 200, dtype=f64)  # gradient norms fixed, independent of θ
    dirs = torch.nn.functional.normalize(torch.randn(200, 2, dtype=f64, generator=torch.Generator().manual_seed(0)), dim=1)
    G = norms.unsqueeze(1) * dirs

    def grad_fn(theta, idx):
        return G[idx] if theta.dim() == 1 else G[idx].expand(theta.shape[0], *G[idx].shape[-2:])

    for gamma in (0.25, 0.5, 0.9):
        res = dp_sgd_adaptive_clipping(grad_fn, torch.zeros(2, dtype=f64), n=200, steps=600, lr=0.01,
                                       initial_clip_norm=1.0, noise_multiplier=0.0, sampling="full",
                                       target_quantile=gamma)
        C = res.history["clip_norm"][-1].item()
        frac_unclipped = (norms <= C).double().mean().item()
        assert abs(frac_unclipped - gamma) < 0.03, (gamma, frac_unclipped)
    noisy = dp_sgd_adaptive_clipping(grad_fn, torch.zeros(2, dtype=f64), n=200, steps=300, lr=0.01,
                                     initial_clip_norm=1.0, noise_multiplier=1.0, batch_size=50, seed=0)
    assert noisy.dp_event() == ev.SelfComposedEvent(ev.PoissonSampledEvent(0.25, ev.GaussianEvent(1.0)), 300)
    assert noisy.extra["gradient_noise_multiplier"] > 1.0
    late = noisy.history["clip_norm"][150:]
    assert 0.5 * norms.median() < late.median() < 2 * norms.median()


def test_adaptive_clipping_projects_and_averages():
    import dpclip_lab as dl
    ds = dl.data.breast_cancer()
    prob = dl.GLProblem(ds.X_train, ds.y_train, dl.losses.Logistic())
    res = dl.algorithms.dp_sgd_adaptive_clipping(prob, torch.zeros(prob.p, dtype=torch.float64), n=prob.n, steps=50,
                                                 lr=50.0, initial_clip_norm=1.0, noise_multiplier=1.0, batch_size=64,
                                                 project=dl.algorithms.project_l2_ball(0.5), average=True, seed=0)
    assert bool((res.iterates.norm(dim=-1) <= 0.5 + 1e-12).all())
    assert res.release == "average"
    assert torch.allclose(res.theta, res.iterates[1:].mean(0))
