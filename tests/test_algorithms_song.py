"""Song, Thakkar, Thakurta (2021): DP-GD converges to the Huberized minimizer (Lemma 3.1)."""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import data, noise, optima
from dpclip_lab.accountants import events as ev
from dpclip_lab.algorithms import (dp_gd, dp_gd_ldp, project_interval, project_l2_ball,
                                   select_stationary_iterate)
from dpclip_lab.losses import Logistic

f64 = torch.float64


@pytest.mark.parametrize("L", [0.1, 0.2])
def test_clipped_gd_finds_huberized_minimizer_thm_3_2(L):
    """Thm 3.2 data: θ* = 0, but clipped GD stops at θ_huber = 2 log(1/L − 1)."""
    prob = data.song_logistic_lower_bound(50)
    res = dp_gd(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=2000, lr=2.0, clip_norm=L, noise_multiplier=0.0)
    last = res.iterates[-1]
    assert abs(last.item() - optima.minimize(prob, clip_norm=L).item()) < 1e-3
    assert abs(last.item() - data.song_logistic_huber_minimizer(L)) < 1e-3
    assert prob.clipped_grad(last, L).abs().item() < 1e-8
    assert abs(optima.minimize(prob).item()) < 1e-4 and last.item() > 2.0
    assert res.release == "average" and res.theta.shape == (1,)
    assert torch.allclose(res.theta, res.iterates[1:].mean(0))


def test_no_bias_when_clip_norm_exceeds_lipschitz():
    prob = data.song_logistic_lower_bound(50)
    res = dp_gd(prob, torch.ones(1, dtype=f64), n=prob.n, steps=2000, lr=2.0, clip_norm=2.0, noise_multiplier=0.0)
    assert abs(res.iterates[-1].item()) < 1e-6


def test_squared_loss_lower_bound_thm_b4():
    L = 0.5
    prob = data.song_squared_lower_bound(10, L)
    res = dp_gd(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=1000, lr=0.2, clip_norm=L, noise_multiplier=0.0,
                project=project_interval(0.0, 8 * L))
    assert abs(res.iterates[-1].item() - L) < 1e-6          # clipped fixed point
    assert abs(optima.minimize(prob).item() - 3 * L) < 1e-4  # θ* = 3L
    res = dp_gd(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=1000, lr=0.2, clip_norm=16 * L, noise_multiplier=0.0,
                project=project_interval(0.0, 8 * L))
    assert abs(res.iterates[-1].item() - 3 * L) < 1e-6


def test_breast_cancer_projected_clipped_gd():
    ds = data.breast_cancer(seed=0)
    prob = dl.GLProblem(ds.X_train, ds.y_train, Logistic())
    R, C = 5.0, 0.05
    target = optima.minimize(prob, clip_norm=C, radius=R)
    original = optima.minimize(prob, radius=R)
    res = dp_gd(prob, torch.zeros(prob.p, dtype=f64), n=prob.n, steps=3000, lr=20.0, clip_norm=C, noise_multiplier=0.0,
                project=project_l2_ball(R))
    last = res.iterates[-1]
    assert (last - target).norm() < 1e-4 < 0.1 < (target - original).norm()
    assert (res.iterates.norm(dim=-1) <= R + 1e-12).all()
    # C = 1 ≥ max ||x|| (logistic is 1-Lipschitz): no clipping, original constrained optimum
    res = dp_gd(prob, torch.zeros(prob.p, dtype=f64), n=prob.n, steps=3000, lr=2.0, clip_norm=1.0,
                noise_multiplier=0.0, project=project_l2_ball(R))
    assert (res.iterates[-1] - original).norm() < 1e-3


def test_dp_gd_event_and_song_sigma():
    prob = data.song_logistic_lower_bound(20)
    eps, delta, T, L = 1.0, 1e-5, 50, 0.5
    sigma = noise.song_sigma_for_privacy(eps, delta, n=prob.n, steps=T, clip_norm=L)
    z = noise.song_sigma_to_noise_multiplier(sigma, n=prob.n, clip_norm=L)
    assert math.isclose(noise.noise_multiplier_to_song_sigma(z, n=prob.n, clip_norm=L), sigma)
    assert math.isclose(z, math.sqrt(2 * T * math.log(1 / delta)) / eps)
    res = dp_gd(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=T, lr=0.5, clip_norm=L, noise_multiplier=z, seed=0)
    assert res.dp_event() == ev.SelfComposedEvent(ev.GaussianEvent(z), T)
    assert res.algorithm == "DP-GD"


def test_ldp_matches_dp_gd_without_noise_and_records_events():
    prob = data.song_logistic_lower_bound(20)
    a = dp_gd(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=100, lr=1.0, clip_norm=0.2, noise_multiplier=0.0)
    b = dp_gd_ldp(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=100, lr=1.0, clip_norm=0.2, noise_multiplier=0.0)
    assert torch.allclose(a.iterates, b.iterates)
    c = dp_gd_ldp(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=10, lr=1.0, clip_norm=0.2, noise_multiplier=2.0,
                  seed=0)
    assert c.local_dp_event() == ev.SelfComposedEvent(ev.GaussianEvent(1.0), 10)
    assert c.dp_event() == ev.SelfComposedEvent(ev.GaussianEvent(2.0 * math.sqrt(prob.n) / 2), 10)  # replace-one
    assert c.dp_event("zero_out") == ev.SelfComposedEvent(ev.GaussianEvent(2.0 * math.sqrt(prob.n)), 10)


def test_noisy_min_selection_thm_4_2():
    prob = data.song_logistic_lower_bound(50)
    L = 2.0
    res = dp_gd(prob, torch.full((1,), 3.0, dtype=f64), n=prob.n, steps=200, lr=1.0, clip_norm=L,
                noise_multiplier=0.5, seed=0)
    # huge epsilon: the selection is the true argmin of the scores
    sel = select_stationary_iterate(res, prob, epsilon=1e9, seed=0)
    scores = sel.extra["scores"]
    assert scores.shape == (200,)
    expect = torch.stack([prob.clipped_grad(res.iterates[t], L).norm() for t in range(200)])
    assert torch.allclose(scores, expect)
    assert int(sel.extra["selected_index"]) == int(scores.argmin())
    assert torch.equal(sel.theta, res.iterates[int(scores.argmin())])
    assert math.isclose(float(sel.extra["laplace_scale"]), 4 * L / (prob.n * 1e9))
    e = sel.dp_event()
    assert e == ev.ComposedEvent((res.dp_event(), ev.EpsilonDeltaEvent(1e9, 0.0)))
    # small epsilon: still a valid index, selection is random
    sel2 = select_stationary_iterate(res, prob, epsilon=1e-3, seed=1)
    assert 0 <= int(sel2.extra["selected_index"]) < 200


def test_selection_batched():
    prob = data.song_logistic_lower_bound(20)
    res = dp_gd(prob, torch.zeros(1, dtype=f64), n=prob.n, steps=30, lr=1.0, clip_norm=torch.tensor([0.1, 1.0]),
                noise_multiplier=0.5, seed=0)
    sel = select_stationary_iterate(res, prob, epsilon=1e9, seed=0)
    assert sel.theta.shape == (2, 1) and sel.extra["scores"].shape == (2, 30)
    picked = sel.extra["scores"].gather(1, sel.extra["selected_index"].unsqueeze(1)).squeeze(1)
    assert torch.allclose(picked, sel.extra["scores"].min(1).values, atol=1e-6)  # ties broken by the noise


def test_selection_checks_the_problem_matches_the_run():
    """Issue #14 item 9: selecting with another data set's gradients gave a wrong privacy claim."""
    from dpclip_lab import data
    prob = data.chen_example1()
    other = data.chen_example2()
    res = dp_gd(prob, torch.zeros(1, dtype=torch.float64), n=prob.n, steps=5, lr=0.1, clip_norm=1.0,
                noise_multiplier=1.0, seed=0, keep_iterates=True)
    assert select_stationary_iterate(res, prob, epsilon=1.0, seed=0).theta.shape == (1,)
    with pytest.raises(ValueError, match="n=2 examples but the run was made on n=3"):
        select_stationary_iterate(res, other, epsilon=1.0, seed=0)
