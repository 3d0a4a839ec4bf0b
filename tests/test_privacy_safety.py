"""Privacy numbers a proof supports (issue #14): each test fails on the lab as it was before the fix.

* DiceSGD: the paper's Thm 3.8 under-reports ε; the lab's valid accounting does not.
* DP-GD_LDP: no add/remove Gaussian event; replace-one / zero-out are accounted.
* Wang Alg. 1: the classic Gaussian calibration is wrong for ε ≥ 1; the analytic one is exact.
* Hölder constants come from a stated data-domain bound, never from the private rows.
* Adaptive clipping under the zero-out relation (shuffle): count sensitivity 1.
* Poisson sampling in low precision realizes the stated rate.
"""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import accountants as acc
from dpclip_lab.accountants import events as ev
from dpclip_lab.algorithms import (dice_sgd, dicesgd_effective_noise_multiplier, dicesgd_noise_multiplier,
                                   dicesgd_sensitivity, dp_gd_ldp, dp_sgd_adaptive_clipping,
                                   dp_sgd_output_perturbation)
from dpclip_lab.sampling import PoissonSampler

f64 = torch.float64


def gaussian_shift_epsilon(mu, delta):
    """Exact ε of the pair N(0, 1) vs N(mu, 1) (Balle & Wang 2018): the worst case of a released path."""
    return acc.analytic_gaussian_epsilon(1.0 / mu, delta)


def linear_oracle(G, p=2):
    """Linear loss: example 0's gradient is G·e_1 in every step, all others 0 (gradients do not depend on θ)."""
    def grad_fn(theta, idx):
        shape = (*theta.shape[:-1], idx.shape[-1], p) if theta.dim() == 2 else (idx.shape[-1], p)
        g = torch.zeros(shape, dtype=theta.dtype)
        g[..., 0] = torch.where(idx == 0, torch.tensor(float(G), dtype=theta.dtype), torch.tensor(0.0, dtype=theta.dtype))
        return g
    return grad_fn


@pytest.mark.parametrize("G,exact_expected", [(500.0, 92.5), (50.0, 32.9)])
def test_dicesgd_counterexample_valid_epsilon_covers_the_exact_one(G, exact_expected):
    """Issue #14 item 1: n = B = 100, T = 100, C1 = C2 = 1, z = 100, one example's gradient G·u vs 0."""
    n, T, z, delta = 100, 100, 100.0, 1e-5
    kw = dict(n=n, steps=T, lr=1.0, clip_norm=1.0, feedback_clip_norm=1.0, sampling="full", delta=delta)
    with_ex = dice_sgd(linear_oracle(G), torch.zeros(2, dtype=f64), noise_multiplier=0.0, **kw)
    without = dice_sgd(linear_oracle(0.0), torch.zeros(2, dtype=f64), noise_multiplier=0.0, **kw)
    # The released iterates are the noise-free paths plus the same Gaussian noise w_t (std σ1 = zC1/B per step):
    # their privacy loss is that of one Gaussian shift of norm ‖Δv‖ / σ1 over the whole path.
    sigma1 = z * 1.0 / n
    steps_diff = (with_ex.iterates.diff(dim=0) - without.iterates.diff(dim=0))  # −η Δv_t
    mu = float(steps_diff.norm()) / sigma1
    exact = gaussian_shift_epsilon(mu, delta)
    assert exact == pytest.approx(exact_expected, rel=0.01)
    res = dice_sgd(linear_oracle(G), torch.zeros(2, dtype=f64), noise_multiplier=z, seed=0, **kw)
    assert res.paper_claimed_epsilon() < exact / 5               # the paper's Thm 3.8 under-reports
    assert res.epsilon(accountant="pld") >= exact                # the lab's ε does not
    assert res.epsilon() >= exact                                 # nor its RDP
    # per-step shifts never exceed the sensitivity the accountant uses
    assert float((steps_diff.norm(dim=-1) / 1.0).max()) <= dicesgd_sensitivity(1.0, 1.0, n) + 1e-12


def test_dicesgd_event_and_calibration():
    res = dice_sgd(dl.data.chen_example1(), torch.zeros(1, dtype=f64), n=3, steps=10, lr=0.05, clip_norm=0.5,
                   feedback_clip_norm=1.0, noise_multiplier=2.0, batch_size=2, seed=0, delta=1e-5)
    z_eff = 2.0 * 0.5 / 2 / (0.5 / 2 + 2 * 1.0)
    assert res.effective_noise_multiplier() == pytest.approx(z_eff)
    assert res.dp_event() == ev.SelfComposedEvent(ev.GaussianEvent(z_eff), 10)
    z_r1 = 2.0 * 0.5 / 2 / (2 * 0.5 / 2 + 2 * 1.0)
    assert res.dp_event("replace_one").event.noise_multiplier == pytest.approx(z_r1)
    # paper's claim kept under its own name
    sigma1 = 2.0 * 0.5 / 2
    assert res.paper_claimed_epsilon() == pytest.approx(math.sqrt(32 * 10 * (0.25 + 2) * math.log(1e5)) / (3 * sigma1))
    # calibration: the z it returns gives back the target ε
    z = dicesgd_noise_multiplier(2.0, 1e-5, 100, 0.5, 1.0, 10, accountant="pld")
    eps = acc.get_epsilon(noise_multiplier=dicesgd_effective_noise_multiplier(z, 0.5, 1.0, 10), sample_rate=1.0,
                          steps=100, delta=1e-5, accountant="pld")
    assert eps == pytest.approx(2.0, rel=1e-2) and eps <= 2.0 + 1e-9
    with pytest.raises(ValueError, match="relation"):
        dicesgd_sensitivity(1.0, 1.0, 10, relation="zero")
    with pytest.raises(ValueError, match="clip_norm"):
        dicesgd_sensitivity(-1.0, 1.0, 10)
    quiet = dice_sgd(dl.data.chen_example1(), torch.zeros(1, dtype=f64), n=3, steps=10, lr=0.05, clip_norm=0.5,
                     feedback_clip_norm=1.0, noise_multiplier=0.0, batch_size=2)
    assert isinstance(quiet.dp_event(), ev.NonPrivateEvent)
    with pytest.raises(ValueError, match="delta is required"):
        quiet.epsilon()


def test_dicesgd_sweep_reports_least_private_run():
    res = dice_sgd(dl.data.chen_example1(), torch.zeros(3, 1, dtype=f64), n=3, steps=5, lr=0.05,
                   clip_norm=torch.tensor([0.5, 1.0, 1.0]), feedback_clip_norm=torch.tensor([1.0, 1.0, 3.0]),
                   noise_multiplier=1.0, batch_size=2, seed=0)
    zs = [dicesgd_effective_noise_multiplier(1.0, c1, c2, 2) for c1, c2 in [(0.5, 1.0), (1.0, 1.0), (1.0, 3.0)]]
    assert res.effective_noise_multiplier() == pytest.approx(min(zs))


def test_ldp_central_event_states_its_relation():
    """Issue #14 item 1c: add/remove changes the number of local noise draws; no Gaussian event for it."""
    res = dp_gd_ldp(lambda th, idx: torch.zeros(idx.shape[-1], 3, dtype=f64), torch.zeros(3, dtype=f64), n=100,
                    steps=1, lr=1.0, clip_norm=1.0, noise_multiplier=1.0)
    assert res.dp_event() == ev.SelfComposedEvent(ev.GaussianEvent(10.0 / 2), 1)        # replace-one: 2C
    assert res.dp_event("zero_out") == ev.SelfComposedEvent(ev.GaussianEvent(10.0), 1)  # zero-out: C
    with pytest.raises(ValueError, match="add/remove"):
        res.dp_event("add_remove")


def test_ldp_add_remove_loss_grows_with_dimension():
    """Why add/remove is refused: N(0, n s² I) vs N(c, (n−1) s² I) — the loss grows with p (issue's numbers)."""
    n, delta = 100, 1e-5

    def eps_add_remove(p, draws=200_000):  # noqa: D401
        # privacy loss L(x) = log N(x; c, (n-1)I)/N(x; 0, nI) with c = e_1 (C = 1, s = 1), x ~ P = N(c, (n−1)I)
        g = torch.Generator().manual_seed(0)
        r2 = torch.distributions.Chi2(torch.tensor(float(p - 1))).sample((draws,))  # ‖x_⊥‖² / (n−1)
        x1 = 1.0 + math.sqrt(n - 1) * torch.randn(draws, generator=g, dtype=f64)
        sq_perp = (n - 1) * r2.double()
        loss = (-0.5 * ((x1 - 1) ** 2 + sq_perp) / (n - 1) - 0.5 * p * math.log(n - 1)
                + 0.5 * (x1 ** 2 + sq_perp) / n + 0.5 * p * math.log(n))
        return float(torch.quantile(loss, 1 - 1e-4))   # a high quantile of the privacy loss: its scale
    lo3 = eps_add_remove(1000)
    lo5 = eps_add_remove(100_000)
    central = acc.analytic_gaussian_epsilon(10.0 / 2, delta)  # what the replace-one event reports
    assert lo5 > lo3 > 0.3 and lo5 > 5 * central                # grows with p, far past the reported value


def test_output_perturbation_calibration_valid_for_large_epsilon():
    """Issue #14 item 2: the classic σ is not (ε, δ)-DP for ε ≥ 1; the lab's analytic σ is, exactly."""
    for eps in (10.0, 20.0):
        sigma_classic = math.sqrt(2 * math.log(1.25 / 1e-5)) / eps
        assert acc.analytic_gaussian_epsilon(sigma_classic, 1e-5) > eps * 1.03   # 10.39, 25.4: the bug
        sigma = dl.algorithms.output_noise_std(1.0, eps, 2e-5)                     # δ/2 = 1e-5
        assert acc.analytic_gaussian_epsilon(sigma, 1e-5) == pytest.approx(eps, rel=1e-6)
    with pytest.raises(ValueError, match="epsilon must be < 1"):
        dl.algorithms.output_noise_std(1.0, 2.0, 1e-5, calibration="classic")
    with pytest.raises(ValueError, match="calibration"):
        dl.algorithms.output_noise_std(1.0, 2.0, 1e-5, calibration="loose")


def test_holder_constants_from_the_domain_not_the_rows():
    """Issue #14 item 3: the noise of Alg. 1/2 must not be a function of the private rows' norms."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=g, dtype=f64)
    X = 0.5 * X / X.norm(dim=1).max()                     # rows inside the stated domain ‖x‖ ≤ 1
    y = torch.where(X[:, 0] > 0, 1.0, -1.0).to(f64)
    prob = dl.GLProblem(X, y, dl.losses.QHinge(1.5))
    kw = dict(n=50, steps=100, lr=0.1, epsilon=1.0, delta=1e-5, radius=1.0, seed=0)
    with pytest.raises(ValueError, match="feature_bound is required"):
        dp_sgd_output_perturbation(prob, torch.zeros(3, dtype=f64), **kw)
    a = dp_sgd_output_perturbation(prob, torch.zeros(3, dtype=f64), feature_bound=1.0, **kw)
    X2 = X.clone()
    X2[0] = X2[0] / X2[0].norm() * 0.9                   # a neighbour with a larger row, same domain
    b = dp_sgd_output_perturbation(dl.GLProblem(X2, y, prob.loss), torch.zeros(3, dtype=f64), feature_bound=1.0, **kw)
    assert a.extra["holder"] == b.extra["holder"] and a.extra["noise_std"] == b.extra["noise_std"]
    with pytest.raises(ValueError, match="violated"):
        dp_sgd_output_perturbation(prob, torch.zeros(3, dtype=f64), feature_bound=0.1, **kw)
    reg = dl.GLProblem(X, 3 * X[:, 0], dl.losses.QNormRegression(1.5))
    with pytest.raises(ValueError, match="label_bound is required"):
        reg.holder(feature_bound=1.0)
    _, L, M = reg.holder(feature_bound=1.0, label_bound=2.0)
    assert M == pytest.approx(1.5 * 2.0 ** 0.5)           # q |y|^{q−1} at |y| = label_bound, ‖x‖ = 1
    assert reg.sup_loss_at_zero(label_bound=2.0) == pytest.approx(2.0 ** 1.5)


def test_adaptive_clipping_shuffle_counts_sensitivity_one():
    """Issue #14 item 4: under zero-out a zero gradient is never clipped: the centered count moves by 1."""
    grad_fn = lambda th, idx: torch.ones(idx.shape[-1], 2, dtype=f64)  # noqa: E731
    z = 1.0
    res = dp_sgd_adaptive_clipping(grad_fn, torch.zeros(2, dtype=f64), n=40, steps=20, lr=0.1, initial_clip_norm=0.5,
                                   noise_multiplier=z, batch_size=10, sampling="shuffle", count_noise_std=z, seed=0)
    zd, sb = res.extra["gradient_noise_multiplier"], res.extra["count_noise_std"]
    # the (gradient, count) pair under zero-out: shifts C and 1 against noise z_Δ C and σ_b
    mu = math.sqrt(zd ** -2 + sb ** -2)
    assert res.extra["event_noise_multiplier"] == pytest.approx(1 / mu)
    assert 1 / mu == pytest.approx(math.sqrt(4 / 7) * z, rel=1e-9)               # ≈ 0.76 z with σ_b = z
    e = res.dp_event()                                                         # 20 steps = 5 epochs
    assert e.count == 5 and e.event.noise_multiplier == pytest.approx(1 / mu)
    pois = dp_sgd_adaptive_clipping(grad_fn, torch.zeros(2, dtype=f64), n=40, steps=20, lr=0.1, initial_clip_norm=0.5,
                                    noise_multiplier=z, batch_size=10, sampling="poisson", count_noise_std=z, seed=0)
    assert pois.dp_event().event.event.noise_multiplier == z                    # add/remove: sensitivity ½


@pytest.mark.parametrize("dtype,q", [(torch.bfloat16, 5e-4), (torch.float16, 3e-4), (torch.float32, 3e-8)])
def test_poisson_sampling_rate_is_exact_in_low_precision(dtype, q):
    """Issue #14 item 5: `rand(dtype) < q` realizes up to 5x q in bf16; the sampler must realize q."""
    n = 2_000_000 if dtype == torch.float32 else 200_000
    b = max(1, round(q * n))
    s = PoissonSampler(n, b)
    g = torch.Generator().manual_seed(0)
    runs = 4 if dtype == torch.float32 else 50
    total = sum(float(s.sample(t, runs, g, "cpu", dtype).mask.double().sum()) for t in range(5))
    draws = 5 * runs * n
    rate = total / draws
    sd = math.sqrt(s.sample_rate * (1 - s.sample_rate) / draws)
    assert abs(rate - s.sample_rate) < 5 * sd + 1e-12, (rate, s.sample_rate)
    assert s.sample(0, 2, g, "cpu", dtype).mask.dtype == dtype


# -- silent wrong numbers at the oracle and privatizer boundary (issue #14 items 6, 7, 9a) ------------------
def test_overflowing_per_example_norm_raises_instead_of_dropping_the_example():
    big = torch.full((4,), 3e38, dtype=torch.float32)          # finite entries, norm 6e38 > float32 max
    grad_fn = lambda th, idx: big.expand(idx.shape[-1], 4).clone()  # noqa: E731
    with pytest.raises(ValueError, match="exceeds the range of torch.float32"):
        dl.dp_sgd(grad_fn, torch.zeros(4), n=5, steps=1, lr=0.1, clip_norm=1.0, noise_multiplier=1.0,
                  sampling="full")


def test_noise_std_checked_in_the_runs_dtype():
    grad_fn = lambda th, idx: torch.zeros(idx.shape[-1], 2)     # noqa: E731
    with pytest.raises(ValueError, match="noise_multiplier"):
        dl.dp_sgd(grad_fn, torch.zeros(2), n=5, steps=1, lr=0.1, clip_norm=1.0, noise_multiplier=1e50,
                  sampling="full")


def test_glp_without_features_and_string_integers():
    with pytest.raises(ValueError, match="p >= 1"):
        dl.GLProblem(torch.zeros(3, 0, dtype=f64), torch.ones(3, dtype=f64), dl.losses.Logistic())
    from dpclip_lab._validation import check_int
    with pytest.raises(TypeError, match="steps must be an integer"):
        check_int("3", "steps")


def test_normalization_of_a_denormal_gradient_is_finite():
    from dpclip_lab.privatizers import normalize_scale
    norms = torch.tensor([[0.0, 1e-320, 1e-300, 2.0]], dtype=f64)
    s = normalize_scale(norms, torch.tensor([1.0], dtype=f64))
    assert bool(torch.isfinite(s).all()) and s[0, 0] == 0 and s[0, 1] == 0
    assert s[0, 3] == 0.5 and s[0, 2] == pytest.approx(1e300)


def test_remark4_search_finds_small_beta_at_large_epsilon():
    """The even grid alone found no β at n = 426, ε = 20 (Part III shows only β < 1e-2 are feasible there)."""
    from dpclip_lab.accountants import paper_bounds as pb
    beta, sigma = pb.wang_remark4_beta(1.0, 426, 426, 20.0, 1e-5)
    assert 0 < beta < 1e-3 and pb.wang_thm11_conditions(sigma, 1.0, 426, 20.0, 1e-5, beta)
