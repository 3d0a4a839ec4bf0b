"""Certified lower bounds on DiceSGD's ε (dpclip_lab.lower_bounds; Zhang et al. 2024, Alg. 2, Thm 3.8).

The exact law of the test statistic is checked against Monte Carlo runs of the lab's own
``dice_sgd`` (Poisson sampling) and of an independent simulation of the authors' code; the
bound is checked to be exact where the answer is known (full batch) and never above a valid
upper bound (the lab's record ``DiceSGDResult.epsilon``).
"""
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from dpclip_lab.accountants import PLDAccountant, analytic_gaussian_epsilon
from dpclip_lab.accountants import events as ev
from dpclip_lab.accountants import paper_bounds as pb
from dpclip_lab.algorithms import dice_sgd
from dpclip_lab.lower_bounds import (CertifiedLowerBound, dicesgd_certified_lower_bound,
                                     dicesgd_saturating_gradient_norm, dicesgd_sum_statistic_law)

f64 = torch.float64
SMALL = dict(n=10, batch_size=2, steps=6, clip_norm=1.0, feedback_clip_norm=1.0, noise_multiplier=2.0)


def linear_grads(G):
    """Batched per-example gradients of a linear loss in 1-D: example 0 has gradient G, the others 0."""
    def grad_fn(theta, idx):
        g = (idx == 0).to(f64) * G
        return g.unsqueeze(-1)
    return grad_fn


def mixture_cdf(means, weights, sd):
    return lambda s: np.sum(weights * special.ndtr((np.asarray(s)[..., None] - means) / sd), axis=-1)


def test_law_matches_the_lab_dice_sgd_by_monte_carlo():
    """S = (x_0 − x_T)/η of R = 20,000 Poisson-sampled runs of the lab's dice_sgd has the computed law."""
    R, lr = 20_000, 1.0
    G = dicesgd_saturating_gradient_norm(batch_size=2, steps=6, clip_norm=1.0, feedback_clip_norm=1.0) * 10
    kw = {k: v for k, v in SMALL.items()}
    res = dice_sgd(linear_grads(G), torch.zeros(R, 1, dtype=f64), lr=lr, sampling="poisson", seed=0,
                   keep_iterates=False, progress=False, **kw)
    S = (-res.theta[:, 0] / lr).numpy()
    means, weights, sd = dicesgd_sum_statistic_law(**SMALL)
    assert abs(weights.sum() - 1) < 1e-12 and sd == pytest.approx(2.0 * 1.0 / 2 * math.sqrt(6))
    assert stats.kstest(S, mixture_cdf(means, weights, sd)).pvalue > 1e-3
    assert abs(S.mean() - np.dot(weights, means)) < 4 * S.std() / math.sqrt(R)
    # the tail the test uses, at a moderate threshold (Monte Carlo cannot see e^-100 tails)
    s = float(np.dot(weights, means) + sd)
    p = 1 - mixture_cdf(means, weights, sd)(s)
    assert abs((S > s).mean() - p) < 5 * math.sqrt(p * (1 - p) / R)
    # without the example: pure noise, N(0, T σ1²)
    null = dice_sgd(linear_grads(0.0), torch.zeros(R, 1, dtype=f64), lr=lr, sampling="poisson", seed=1,
                    keep_iterates=False, progress=False, **kw)
    assert stats.kstest((-null.theta[:, 0] / lr).numpy(), stats.norm(scale=sd).cdf).pvalue > 1e-3


def _simulate_code(R, *, n, batch_size, steps, clip_norm, feedback_clip_norm, noise_multiplier, G, rng):
    """The authors' update with e in sum units: v = (Σ clip(g_i, C1) + clip(e, C2)) / B, 1-D, the same pair."""
    B, C1, C2 = batch_size, clip_norm, feedback_clip_norm
    e, S = np.zeros(R), np.zeros(R)
    for _ in range(steps):
        inc = rng.random(R) < B / n
        fb = np.sign(e) * np.minimum(np.abs(e), C2)
        clipped = inc * min(G, C1)
        S += (clipped + fb) / B + rng.normal(scale=noise_multiplier * C1 / B, size=R)
        e = e - fb + inc * G - clipped
    return S


def test_law_of_the_code_variant_by_monte_carlo():
    rng = np.random.default_rng(0)
    G = dicesgd_saturating_gradient_norm(batch_size=2, steps=6, clip_norm=1.0, feedback_clip_norm=1.0,
                                         variant="code") * 10
    S = _simulate_code(20_000, G=G, rng=rng, **SMALL)
    means, weights, sd = dicesgd_sum_statistic_law(**SMALL, variant="code")
    assert stats.kstest(S, mixture_cdf(means, weights, sd)).pvalue > 1e-3
    # the code's feedback is B times weaker than Alg. 2's: a smaller mean shift
    alg2_means, alg2_weights, _ = dicesgd_sum_statistic_law(**SMALL)
    assert np.dot(weights, means) < np.dot(alg2_weights, alg2_means)


def test_full_batch_bound_is_the_exact_epsilon_of_the_sum():
    """q = 1: S is one Gaussian with mean T C1/B + (T − 1) C2: the bound is its exact ε."""
    r = dicesgd_certified_lower_bound(n=100, batch_size=100, steps=100, clip_norm=1.0, feedback_clip_norm=1.0,
                                      noise_multiplier=100.0, delta=1e-5)
    mu = (100 * 0.01 + 99 * 1.0) / (1.0 * math.sqrt(100))
    assert isinstance(r, CertifiedLowerBound) and float(r) == r.epsilon
    assert r.epsilon == pytest.approx(analytic_gaussian_epsilon(1.0, 1e-5, sensitivity=mu), rel=1e-9)


@pytest.mark.parametrize("n, B, T, z", [(10, 2, 6, 2.0), (50, 10, 20, 5.0), (100, 20, 100, 20.0), (40, 40, 30, 30.0)])
def test_never_above_the_labs_valid_record(n, B, T, z):
    """A lower bound above the valid upper bound would be a bug in one of them."""
    res = dice_sgd(linear_grads(0.0), torch.zeros(1, dtype=f64), n=n, steps=T, lr=1.0, batch_size=B,
                   sampling="poisson", clip_norm=1.0, feedback_clip_norm=1.0, noise_multiplier=z, seed=0,
                   keep_iterates=False, progress=False)
    lower = dicesgd_certified_lower_bound(n=n, batch_size=B, steps=T, clip_norm=1.0, feedback_clip_norm=1.0,
                                          noise_multiplier=z, delta=1e-5)
    assert 0 < lower.epsilon <= res.epsilon(1e-5, accountant="pld")
    # the code variant against its own valid bound: sensitivity (C1 + 2 C2)/B, noise z C1/B, no amplification
    code = dicesgd_certified_lower_bound(n=n, batch_size=B, steps=T, clip_norm=1.0, feedback_clip_norm=1.0,
                                         noise_multiplier=z, delta=1e-5, variant="code")
    valid = PLDAccountant().compose(ev.SelfComposedEvent(ev.GaussianEvent(z / 3.0), T)).get_epsilon(1e-5)
    assert code.epsilon <= valid and code.epsilon < lower.epsilon


def test_refutes_thm38_inside_its_hypotheses():
    """The referee's setting (issue 27): q = 0.2 ≤ 1/5, C1 = C2 = 1, z = 20 (σ1 = 1 ≥ 8 C1/B)."""
    r = dicesgd_certified_lower_bound(n=100, batch_size=20, steps=100, clip_norm=1.0, feedback_clip_norm=1.0,
                                      noise_multiplier=20.0, delta=1e-5, gradient_norm=1e6)
    claim = pb.dicesgd_thm38_epsilon(20.0 * 1.0 / 20, 1.0, 1.0, None, 100, 100, 1e-5)
    assert abs(claim - 3.32) < 0.01 and 85 < r.epsilon < 95
    # the certificate itself: P_D(S > s) − δ > e^ε P_D'(S > s) for every smaller ε
    p_d = 1 - r.false_negative_rate
    assert p_d > 1e-5 and math.log(p_d - 1e-5) - r.log_false_positive_rate == pytest.approx(r.epsilon, rel=1e-9)


def test_input_validation():
    ok = dict(SMALL, delta=1e-5)
    with pytest.raises(ValueError, match="C1 <= C2"):
        dicesgd_certified_lower_bound(**dict(ok, clip_norm=2.0))
    with pytest.raises(ValueError, match="batch_size"):
        dicesgd_certified_lower_bound(**dict(ok, batch_size=11))
    with pytest.raises(ValueError, match="gradient_norm must be at least 11"):
        dicesgd_certified_lower_bound(**ok, gradient_norm=5.0)
    with pytest.raises(ValueError, match="variant"):
        dicesgd_certified_lower_bound(**ok, variant="paper")
    with pytest.raises(ValueError, match="delta"):
        dicesgd_certified_lower_bound(**dict(ok, delta=0.0))
    with pytest.raises(ValueError, match="noise_multiplier"):
        dicesgd_certified_lower_bound(**dict(ok, noise_multiplier=0.0))
    with pytest.raises(ValueError, match="steps"):
        dicesgd_certified_lower_bound(**dict(ok, steps=0))
