"""Chen, Wu, Hong (2020) Examples 1–2 and §5; DiceSGD (Zhang et al. 2024) fixed points and Adam/automatic variants."""
import math

import pytest
import torch

from dpclip_lab import data, noise
from dpclip_lab.accountants import events as ev
from dpclip_lab.algorithms import automatic_dice_sgd, dice_sgd, dp_sgd

f64 = torch.float64
x0 = torch.zeros(1, dtype=f64)


# -- Chen et al. Example 1: clipping moves the fixed point away from x* = 1 --------------------
def test_example1_expected_clipped_gradient_at_optimum():
    prob = data.chen_example1()
    assert math.isclose(prob.clipped_grad(torch.ones(1, dtype=f64), 1.0).item(), 1 / 3)


def test_example1_clipped_gd_and_sgd_fixed_point():
    prob = data.chen_example1()
    gd = dp_sgd(prob, x0, n=3, steps=2000, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, sampling="full")
    # 2 clip(x + 3) + clip(x − 9) = 0 on [−4, −2]  →  x = −2.5, not x* = 1
    assert abs(gd.theta.item() + 2.5) < 1e-9
    sgd = dp_sgd(prob, x0.expand(16, 1), n=3, steps=3000, lr=0.01, clip_norm=1.0, noise_multiplier=0.0,
                 batch_size=1, sampling="with_replacement", seed=0)
    assert abs(sgd.iterates[:, 1000:].mean().item() + 2.5) < 0.05


def test_example2_every_point_in_interval_is_stationary():
    prob = data.chen_example2()
    starts = torch.tensor([[-1.5], [0.0], [1.9], [5.0], [-7.0]], dtype=f64)
    res = dp_sgd(prob, starts, n=2, steps=500, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, sampling="full")
    assert torch.allclose(res.theta[:3], starts[:3])       # never moves
    assert torch.allclose(res.theta[3:], torch.tensor([[2.0], [-2.0]], dtype=f64), atol=1e-9)  # stops at the edge
    # poisson-sampled clipped SGD started inside [−2, 2] has zero drift there as well
    res = dp_sgd(prob, x0, n=2, steps=500, lr=0.01, clip_norm=1.0, noise_multiplier=0.0, batch_size=1, seed=0)
    assert (res.iterates.abs() <= 2.0 + 1e-9).all()


def test_pre_clip_perturbation_moves_fixed_point_toward_optimum():
    """Chen et al. §5, eq. (11): clip(g + kζ) is less biased as k grows (Thm 6: |b_t| = O(σ²/k²))."""
    prob = data.chen_example1()
    gaps = []
    for k in [0.0, 1.0, 3.0, 10.0]:
        res = dp_sgd(prob, x0.expand(32, 1), n=3, steps=4000, lr=0.01, clip_norm=1.0, noise_multiplier=0.0,
                     sampling="full", pre_clip_std=k, seed=0)
        gaps.append(abs(res.iterates[:, 2000:].mean().item() - 1.0))
    assert gaps[0] > 3.4 and all(a > b for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 0.5, gaps
    assert res.algorithm == "clipped SGD + pre-clip perturbation"


def test_chen_mixture_pre_clip_reduces_bias():
    prob = data.chen_mixture(n=600, p=5, seed=0)
    target = prob.minimizer
    kw = dict(n=prob.n, steps=600, lr=0.1, clip_norm=1.0, noise_multiplier=0.0, batch_size=60, seed=0)
    plain = dp_sgd(prob, torch.zeros(5, dtype=f64), **kw)
    pert = dp_sgd(prob, torch.zeros(5, dtype=f64), pre_clip_std=5.0, **kw)
    err = lambda r: (r.iterates[300:].mean(0) - target).norm().item()  # noqa: E731
    assert err(pert) < 0.5 * err(plain)


def test_chen_sigma_conversion():
    z = noise.chen_sigma_to_noise_multiplier(1.0, batch_size=10, clip_norm=0.5)
    assert z == 20.0 and noise.noise_multiplier_to_chen_sigma(z, batch_size=10, clip_norm=0.5) == 1.0


# -- DiceSGD ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("C", [0.5, 2.5])
def test_dice_constant_bias_example_app_b1(C):
    prob = data.dice_constant_bias(C)
    Cp = prob.n - 1
    gc = dp_sgd(prob, x0, n=prob.n, steps=5000, lr=0.05, clip_norm=C, noise_multiplier=0.0, sampling="full")
    assert abs(gc.theta.item() - (C / Cp - 1)) < 1e-6          # DPSGD-GC: O(1) bias
    dice = dice_sgd(prob, x0, n=prob.n, steps=5000, lr=0.05, clip_norm=C, feedback_clip_norm=C,
                    noise_multiplier=0.0, sampling="full")
    assert abs(dice.theta.item()) < 1e-6                        # DiceSGD: stationary point x* = 0
    assert abs(prob.grad(dice.theta).item()) < 1e-6


def test_dice_stochastic_and_example1():
    prob = data.chen_example1()
    dice = dice_sgd(prob, x0, n=3, steps=3000, lr=0.05, clip_norm=1.0, feedback_clip_norm=1.0, noise_multiplier=0.0,
                    sampling="full")
    assert abs(dice.theta.item() - 1.0) < 1e-6 and dice.history["error_norm"].shape == (3000,)
    q = data.dice_constant_bias(0.5)
    sto = dice_sgd(q, x0.expand(8, 1), n=q.n, steps=4000, lr=0.01, clip_norm=0.5, feedback_clip_norm=1.0,
                   noise_multiplier=0.0, batch_size=1, sampling="shuffle", seed=0)
    assert abs(sto.iterates[:, 2000:].mean().item()) < 0.05


@pytest.mark.parametrize("normalize", [False, True])
def test_dice_error_norm_history_is_the_norm_of_each_error(normalize):
    """``history["error_norm"][t]`` is ‖e_t‖, the error the step t+1 clips (e_0 = 0): a run of t steps ends
    with e_t in ``extra["error"]``, and the same seed's longer run records its norm at step t+1."""
    prob = data.chen_example1()
    kw = dict(n=3, lr=0.05, clip_norm=0.5, feedback_clip_norm=1.0, noise_multiplier=0.3, batch_size=2, seed=4,
              normalize=normalize)
    long = dice_sgd(prob, x0, steps=6, **kw)
    assert long.history["error_norm"][0] == 0.0
    for t in range(1, 6):
        e_t = dice_sgd(prob, x0, steps=t, **kw).extra["error"]
        assert long.history["error_norm"][t] == torch.linalg.vector_norm(e_t)


def test_dice_adam_and_automatic():
    prob = data.chen_example1()
    adam = dice_sgd(prob, x0, n=3, steps=3000, lr=0.01, clip_norm=1.0, feedback_clip_norm=1.0, noise_multiplier=0.0,
                    sampling="full", optimizer="adam")
    assert abs(adam.iterates[-100:].mean().item() - 1.0) < 0.01 and adam.algorithm == "DiceSGD (Adam)"
    gc_adam = dp_sgd(prob, x0, n=3, steps=3000, lr=0.01, clip_norm=1.0, noise_multiplier=0.0, sampling="full",
                     optimizer="adam")
    assert abs(gc_adam.iterates[-100:].mean().item() + 2.5) < 0.05
    auto = automatic_dice_sgd(prob, x0, n=3, steps=3000, lr=0.05, noise_multiplier=0.0, sampling="full")
    assert abs(auto.iterates[-100:].mean().item() - 1.0) < 0.05


def test_dice_privacy_record():
    """The record is the valid T-fold Gaussian (tests/test_privacy_safety.py); Thm 3.8 is only a named claim."""
    from dpclip_lab.accountants import paper_bounds as pb
    prob = data.chen_example1()
    res = dice_sgd(prob, x0, n=3, steps=10, lr=0.05, clip_norm=0.5, feedback_clip_norm=1.0, noise_multiplier=2.0,
                   batch_size=2, seed=0)
    e = res.dp_event()
    assert isinstance(e, ev.SelfComposedEvent) and e.count == 10 and isinstance(e.event, ev.GaussianEvent)
    sigma1 = 2.0 * 0.5 / 2
    claim = math.sqrt(32 * 10 * (0.25 + 2 * 1.0) * math.log(1e5)) / (3 * sigma1)
    assert math.isclose(res.paper_claimed_epsilon(1e-5), claim)
    assert res.epsilon(1e-5) > claim                      # here the claim under-reports too
    # Thm 3.8's sigma1 for (eps, delta) gives back eps (the formula, as printed)
    s = pb.dicesgd_thm38_sigma(0.5, 1.0, None, 100, 1000, 2.0, 1e-5)
    assert math.isclose(pb.dicesgd_thm38_epsilon(s, 0.5, 1.0, None, 100, 1000, 1e-5), 2.0)
    # Alg. 4: C1 = C2 = 1 gives sqrt(96 T log(1/δ)) / (N ε)
    s = pb.dicesgd_thm38_sigma(1.0, 1.0, None, 100, 1000, 2.0, 1e-5)
    assert math.isclose(s, math.sqrt(96 * 100 * math.log(1e5)) / (1000 * 2.0))
    with pytest.raises(ValueError, match="C1 <= C2"):
        pb.dicesgd_thm38_epsilon(1.0, 2.0, 1.0, None, 10, 100, 1e-5)
    quiet = dice_sgd(prob, x0, n=3, steps=10, lr=0.05, clip_norm=0.5, feedback_clip_norm=1.0, noise_multiplier=0.0,
                     batch_size=2, seed=0)
    assert isinstance(quiet.dp_event(), ev.NonPrivateEvent)


# -- DiceSGD with a projection (lab option, like dp_sgd's) and the recorded final error --------
N4 = 4  # data.dice_constant_bias(2): three points at −1, one at 3


def test_dice_project_keeps_iterates_in_ball_and_matches_manual_loop():
    from dpclip_lab.algorithms import project_interval
    prob = data.dice_constant_bias(2)            # fixed point of clipped GD at C/C' − 1; DiceSGD at x* = 0
    assert prob.X.shape[0] == N4
    start = torch.full((1,), 3.0, dtype=f64)
    free = dice_sgd(prob, start, n=N4, steps=400, lr=0.2, clip_norm=0.5, feedback_clip_norm=1.0,
                    noise_multiplier=0.0, sampling="full")
    proj = dice_sgd(prob, start, n=N4, steps=400, lr=0.2, clip_norm=0.5, feedback_clip_norm=1.0,
                    noise_multiplier=0.0, sampling="full", project=project_interval(-0.2, 2.5))
    assert abs(free.theta.item()) < 1e-6 and abs(proj.theta.item()) < 1e-6   # x* = 0 lies in the interval
    assert float(proj.iterates.max()) <= 3.0 and float(proj.iterates[1:].max()) <= 2.5 + 1e-12
    assert float(proj.iterates.min()) >= -0.2 - 1e-12
    # One step by hand: x1 = Π(x0 − η v0), e1 = mean g − v0 (e0 = 0).
    g = prob.grad_fn(start, torch.arange(prob.X.shape[0]))        # [n, 1]
    v0 = g.clamp(-0.5, 0.5).mean(0)
    one = dice_sgd(prob, start, n=N4, steps=1, lr=0.2, clip_norm=0.5, feedback_clip_norm=1.0,
                   noise_multiplier=0.0, sampling="full", project=project_interval(-0.2, 2.5))
    assert torch.allclose(one.theta, (start - 0.2 * v0).clamp(-0.2, 2.5))
    assert torch.allclose(one.extra["error"], g.mean(0) - v0)


def test_dice_project_a_binding_ball_changes_the_fixed_point():
    from dpclip_lab.algorithms import project_interval
    prob = data.dice_constant_bias(2)
    r = dice_sgd(prob, x0 + 1.0, n=N4, steps=300, lr=0.2, clip_norm=0.5, feedback_clip_norm=0.5,
                 noise_multiplier=0.0, sampling="full", project=project_interval(0.3, 1.0))
    assert abs(r.theta.item() - 0.3) < 1e-12          # x* = 0 is outside: the run stops on the boundary


def test_dice_project_validated_and_batched_error_shape():
    prob = data.dice_constant_bias(2)
    with pytest.raises(TypeError, match="project"):
        dice_sgd(prob, x0, n=N4, steps=2, lr=0.1, clip_norm=0.5, feedback_clip_norm=1.0,
                 noise_multiplier=0.0, sampling="full", project=3.0)
    with pytest.raises(TypeError, match="project"):
        automatic_dice_sgd(prob, x0, n=N4, steps=2, lr=0.1, noise_multiplier=0.0, sampling="full",
                           project="ball")
    C = torch.tensor([0.5, 1.0], dtype=f64)
    r = dice_sgd(prob, x0, n=N4, steps=5, lr=0.1, clip_norm=C, feedback_clip_norm=C, noise_multiplier=0.0,
                 sampling="full")
    assert r.extra["error"].shape == (2, 1)
    one = dice_sgd(prob, x0, n=N4, steps=5, lr=0.1, clip_norm=0.5, feedback_clip_norm=0.5, noise_multiplier=0.0,
                   sampling="full")
    assert one.extra["error"].shape == (1,)
    assert torch.allclose(one.extra["error"], r.extra["error"][0])
