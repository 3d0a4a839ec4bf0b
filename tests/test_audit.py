"""Empirical privacy auditing (dpclip_lab.audit): the ε lower-bound estimator and the canary audits.

The estimator is checked against mechanisms whose ε is known exactly (Gaussian: the
analytic Gaussian mechanism's ε(δ); Laplace: pure ε = 1/b): it must be sound in
repeated trials at the stated confidence, not vacuous, and it must catch an
under-noised mechanism. The audits of the lab's own algorithms must stay below the
accountants' ε, and catch the deliberately broken privatizer and DiceSGD's claimed ε.
"""
import math

import numpy as np
import pytest
import torch

from dpclip_lab import audit as A
from dpclip_lab.accountants import analytic_gaussian_epsilon

torch.set_num_threads(1)


def gaussian_scores(rng, mu, n):
    """Scores of the optimal test for N(mu, 1) vs N(0, 1): the output itself."""
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


def naive_lower_bound(s_in, s_out, delta, confidence):
    """Max over thresholds of Clopper-Pearson bounds WITHOUT a multiplicity correction (unsound)."""
    s_in, s_out = np.sort(s_in), np.sort(s_out)
    th = np.append(np.unique(np.concatenate([s_in, s_out])), np.inf)
    fp = s_out.size - np.searchsorted(s_out, th)
    fn = np.searchsorted(s_in, th)
    a = (1 - confidence) / 2
    u1, u2 = A.clopper_pearson_upper(fp, s_out.size, a), A.clopper_pearson_upper(fn, s_in.size, a)
    with np.errstate(all="ignore"):
        e = np.maximum(np.log(np.maximum(1 - delta - u1, 0)) - np.log(u2),
                       np.log(np.maximum(1 - delta - u2, 0)) - np.log(u1))
    return max(float(e.max()), 0.0)


# -- Clopper-Pearson ---------------------------------------------------------------------------------
def test_clopper_pearson_closed_forms():
    n, a = 50, 0.05
    assert abs(A.clopper_pearson_upper(0, n, a) - (1 - a ** (1 / n))) < 1e-12   # P(Bin = 0) = (1-p)^n = a
    assert A.clopper_pearson_upper(n, n, a) == 1.0
    u = A.clopper_pearson_upper(np.arange(n + 1), n, a)
    assert np.all(np.diff(u) > 0) and np.all(u >= np.arange(n + 1) / n)
    from scipy.stats import binom
    assert abs(binom.cdf(7, n, A.clopper_pearson_upper(7, n, a)) - a) < 1e-9


# -- soundness in repeated trials --------------------------------------------------------------------
@pytest.mark.parametrize("mu, delta", [(1.0, 0.2), (1.0, 0.05)])
def test_sound_gaussian_repeated_trials(mu, delta):
    """At confidence 0.8, at most ~20% of trials may exceed the true ε; a valid bound has far fewer."""
    rng = np.random.default_rng(0)
    true = analytic_gaussian_epsilon(1 / mu, delta)
    trials, conf = 60, 0.8
    lbs = np.array([A.epsilon_lower_bound(*gaussian_scores(rng, mu, 1000), delta=delta, confidence=conf)
                    for _ in range(trials)])
    assert (lbs > true).mean() <= 1 - conf
    assert (lbs > true).sum() == 0            # the union bound is conservative: no violation at all here
    assert lbs.mean() > 0.4 * true            # and not vacuous


def test_sound_laplace_repeated_trials_and_the_naive_maximum_is_not():
    """Pure DP (δ = 0), ε = 1/b exactly: the naive max over thresholds overshoots in most trials."""
    rng = np.random.default_rng(1)
    b, n, trials, conf = 1.0, 3000, 40, 0.8
    ours, naive = [], []
    for _ in range(trials):
        s_in, s_out = rng.laplace(1.0, b, n), rng.laplace(0.0, b, n)
        ours.append(A.epsilon_lower_bound(s_in, s_out, delta=0.0, confidence=conf))
        naive.append(naive_lower_bound(s_in, s_out, 0.0, conf))
    ours, naive = np.array(ours), np.array(naive)
    assert (ours > 1 / b).mean() <= 1 - conf
    assert (naive > 1 / b).mean() > 1 - conf     # why the correction is needed (the test has teeth)
    assert ours.mean() > 0.6 / b                 # not vacuous: within a factor 0.6 of the truth


def test_not_vacuous_and_tightens_with_runs():
    rng = np.random.default_rng(2)
    true = analytic_gaussian_epsilon(0.5, 1e-3)          # mu = 2
    lb = [A.epsilon_lower_bound(*gaussian_scores(rng, 2.0, n), delta=1e-3) for n in (200, 2000, 20000)]
    assert 0 < lb[0] < lb[1] < lb[2] <= true
    assert lb[2] > 0.5 * true


def test_under_noised_mechanism_is_caught():
    """Claimed: Gaussian with sigma = 2 (mu = 0.5). Implemented: sigma = 0.5 (noise 4x too small)."""
    rng = np.random.default_rng(3)
    claimed = analytic_gaussian_epsilon(2.0, 1e-5)
    s_in, s_out = rng.normal(1.0, 0.5, 2000), rng.normal(0.0, 0.5, 2000)
    assert A.epsilon_lower_bound(s_in, s_out, delta=1e-5) > claimed
    # the honest mechanism is not flagged
    s_in, s_out = rng.normal(1.0, 2.0, 2000), rng.normal(0.0, 2.0, 2000)
    assert A.epsilon_lower_bound(s_in, s_out, delta=1e-5) <= claimed


def test_inputs_and_edge_cases():
    rng = np.random.default_rng(4)
    s_in, s_out = gaussian_scores(rng, 1.5, 300)
    v = A.epsilon_lower_bound(s_in, s_out, delta=1e-5)
    assert A.epsilon_lower_bound(torch.tensor(s_in), torch.tensor(s_out), delta=1e-5) == v
    assert A.epsilon_lower_bound(rng.permutation(s_in), rng.permutation(s_out), delta=1e-5) == v
    assert A.epsilon_lower_bound(s_in, s_out, delta=1e-5, confidence=0.99) <= v
    assert A.epsilon_lower_bound(s_in[:100], s_out, delta=1e-5) >= 0            # unequal lengths
    assert A.epsilon_lower_bound(s_out, s_out, delta=1e-5) == 0.0               # no signal, nothing certified
    assert A.epsilon_lower_bound(s_in, s_out, delta=0.999) == 0.0
    assert A.epsilon_lower_bound(np.zeros(10), np.zeros(10), delta=0.0) == 0.0  # all ties
    ceiling = [A.max_certifiable_epsilon(n, n, delta=1e-5) for n in (10, 100, 1000, 10000)]
    assert np.all(np.diff(ceiling) > 0) and ceiling[-1] < math.log(10000)


@pytest.mark.parametrize("kwargs, match", [
    (dict(scores_in=[], scores_out=[1.0]), "scores_in"),
    (dict(scores_in=[1.0, float("nan")], scores_out=[1.0]), "scores_in"),
    (dict(scores_in=[[1.0]], scores_out=[1.0]), "scores_in"),
    (dict(scores_in=[1.0], scores_out=[1.0, float("inf")]), "scores_out"),
    (dict(scores_in=[1.0], scores_out=[1.0], delta=1.0), "delta"),
    (dict(scores_in=[1.0], scores_out=[1.0], delta=-0.1), "delta"),
    (dict(scores_in=[1.0], scores_out=[1.0], confidence=1.0), "confidence"),
])
def test_bad_input_names_the_parameter(kwargs, match):
    kw = dict(delta=1e-5) | kwargs
    with pytest.raises(ValueError, match=match):
        A.epsilon_lower_bound(**kw)
    with pytest.raises(TypeError, match="scores_in"):
        A.epsilon_lower_bound(object(), [1.0], delta=1e-5)


# -- audits of the lab's algorithms ------------------------------------------------------------------
@pytest.mark.parametrize("algorithm, runs, kw", [
    # Subsampled DP-SGD (q = 0.1) leaks least: at 500 runs its lower bound ranged 0.13-0.59 over 32 seeds
    # and draw orders, so a fixed threshold there held for some seeds only; at 2000 runs, 0.51-0.88.
    ("dp_sgd", 2000, dict(n=20, batch_size=2)),
    ("dp_gd", 500, dict(n=20)),                      # 4.20-4.24 over 16 seeds
    ("adaptive", 500, dict(n=20, batch_size=4)),     # 0.69-1.31 over 16 seeds
])
def test_gradient_canary_audit_below_accountant(algorithm, runs, kw):
    a = A.gradient_canary_audit(algorithm, runs=runs, steps=30, noise_multiplier=1.0, checkpoints=[10, 30],
                                accountant="pld", **kw)
    for obs in ("last", "all"):
        curve = a.epsilon_lower_curve(obs)
        assert np.all(curve <= a.accountant_epsilon), (algorithm, obs, curve, a.accountant_epsilon)
    assert a.epsilon_lower("all") > 0.3              # the audit finds something
    assert a.scores_in["all"].shape == (runs, 2)


def test_full_batch_audit_is_nearly_tight():
    """DP-GD, gradient canary: the last iterate is the whole mechanism (μ = √T / z = 1)."""
    a = A.gradient_canary_audit("dp_gd", runs=2000, steps=25, noise_multiplier=5.0, n=10, delta=1e-2,
                                accountant="pld")
    assert 0.5 * a.epsilon_accountant < a.epsilon_lower("last") <= a.epsilon_accountant


def test_clip_norm_cancels_for_gradient_canaries():
    kw = dict(runs=300, steps=20, noise_multiplier=1.0, n=20, batch_size=2, seed=5)
    base = A.gradient_canary_audit("dp_sgd", clip_norm=1.0, **kw)
    scaled = A.gradient_canary_audit("dp_sgd", clip_norm=8.0, **kw)
    for obs in ("last", "all"):
        assert scaled.epsilon_lower(obs) == base.epsilon_lower(obs)
    # a canary gradient smaller than C carries less signal than the noise is calibrated for
    weak = A.gradient_canary_audit("dp_sgd", clip_norm=8.0, canary_norm=1.0, **kw)
    assert weak.epsilon_lower("all") < base.epsilon_lower("all")


def test_broken_privatizer_is_caught_and_not_exported():
    import dpclip_lab.algorithms as alg
    assert not hasattr(alg, "BrokenMeanNoisePrivatizer")
    z, q, T = 3.0, 0.1, 50                    # batch b = 10: the bug leaves noise z/b = 0.3
    from dpclip_lab import get_epsilon
    claimed = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=1e-5, accountant="pld")
    kw = dict(runs=1000, steps=T, noise_multiplier=z, n=100, batch_size=10)
    broken = A.gradient_canary_audit(privatizer=A.BrokenMeanNoisePrivatizer(1.0, z), **kw)
    honest = A.gradient_canary_audit("dp_sgd", **kw)
    assert broken.epsilon_lower("all") > claimed
    assert honest.epsilon_lower("all") <= claimed
    assert broken.accountant_epsilon is None


def test_dicesgd_counterexample_audit_exceeds_the_papers_claim():
    """Linear loss, full batch, gradient G·u vs 0: n = T = 100, C1 = C2 = 1, z = 100, G = 500."""
    a = A.gradient_canary_audit("dice_sgd", runs=1000, steps=100, noise_multiplier=100.0, n=100,
                                sampling="full", canary_norm=500.0, clip_norm=1.0, checkpoints=[25, 100])
    claimed = a.extra["paper_claimed_epsilon"]
    assert abs(claimed[-1] - 3.32) < 0.01
    lb = a.epsilon_lower_curve("last")
    assert np.all(lb > claimed) and np.all(lb <= a.accountant_epsilon)


def test_input_canary_audit_weaker_than_gradient_canary():
    g = torch.Generator().manual_seed(0)
    n, p = 30, 3
    X = torch.randn(n, p, generator=g, dtype=torch.float64)
    X[:, -1] = 0.0                                            # the canary's feature: nobody else has it
    X = X / torch.linalg.vector_norm(X, dim=1, keepdim=True)
    y = torch.where(X[:, 0] > 0, 1.0, -1.0)
    from dpclip_lab.losses import Logistic
    xc = torch.zeros(p, dtype=torch.float64)
    xc[-1] = 1.0
    kw = dict(runs=500, steps=30, noise_multiplier=1.0, batch_size=3, lr=2.0, accountant="pld")
    inp = A.input_canary_audit(X, y, Logistic(), xc, 1.0, **kw)
    grad = A.gradient_canary_audit("dp_sgd", n=n + 1, **kw)
    assert inp.epsilon_lower("all") <= inp.epsilon_accountant
    assert inp.epsilon_lower("all") <= grad.epsilon_lower("all")
    assert abs(inp.epsilon_accountant - grad.epsilon_accountant) < 1e-9


# -- one-run audit -----------------------------------------------------------------------------------
def test_one_run_p_value():
    from scipy.stats import binom
    # δ = 0: exactly the randomized-response binomial tail
    assert abs(A.one_run_p_value(100, 40, 30, 1.0, 0.0) - binom.sf(29, 40, math.e / (1 + math.e))) < 1e-12
    p0 = A.one_run_p_value(100, 40, 30, 1.0, 0.0)
    assert A.one_run_p_value(100, 40, 30, 1.0, 1e-3) > p0          # δ only adds
    assert A.one_run_p_value(100, 40, 30, 2.0, 0.0) > p0           # larger ε explains more
    with pytest.raises(ValueError):
        A.one_run_p_value(10, 20, 5, 1.0, 0.0)


def test_one_run_audit_sound_and_catches_no_noise():
    out = A.one_run_gradient_audit(canaries=400, steps=10, noise_multiplier=2.0, seed=0)
    assert 0 < out["epsilon_lower"] <= out["epsilon_accountant"]
    # an (almost) noise-free run: every guess is right, a large ε is certified
    loud = A.one_run_gradient_audit(canaries=400, steps=10, noise_multiplier=0.01, seed=0)
    assert loud["epsilon_lower"] > 2.0
    # the random guess of a non-private-looking statistic certifies nothing
    rng = np.random.default_rng(0)
    assert A.one_run_epsilon_lower_bound(rng.normal(size=400), rng.random(400) < 0.5, delta=1e-5) < 0.5


def test_module_batched_grad_fn_matches_per_sample_grads():
    import dpclip_lab as dl
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    g = torch.Generator().manual_seed(1)
    X = torch.randn(6, 3, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 0, 1, 0])
    fn = A.module_batched_grad_fn(net, torch.nn.functional.cross_entropy, X, y)
    th0 = dl.flat_params(net)
    theta = torch.stack([th0, th0 + 0.1])
    idx = torch.tensor([[0, 2, 5], [1, 1, 3]])
    G = fn(theta, idx)
    assert G.shape == (2, 3, th0.numel())
    ref = dl.per_sample_grads(net, torch.nn.functional.cross_entropy, X[idx[0]], y[idx[0]])
    assert torch.allclose(G[0], ref, atol=1e-12)


def test_network_audit_below_accountant():
    import dpclip_lab as dl
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    g = torch.Generator().manual_seed(2)
    X = torch.randn(10, 3, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).long()
    th0 = dl.flat_params(net)
    a = A.gradient_canary_audit("dp_sgd", runs=200, steps=10, noise_multiplier=1.0, n=10, batch_size=3, lr=0.5,
                                base_grad_fn=A.module_batched_grad_fn(net, torch.nn.functional.cross_entropy, X, y),
                                theta0=th0, coordinate=th0.numel() - 1, accountant="pld")
    assert a.epsilon_lower("all") <= a.epsilon_accountant and a.epsilon_lower("last") <= a.epsilon_accountant


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(algorithm="sgd"), ValueError, "algorithm"),
    (dict(runs=1), ValueError, "runs"),
    (dict(checkpoints=[50]), ValueError, "checkpoints"),
    (dict(coordinate=3), ValueError, "coordinate"),
    (dict(theta0=torch.zeros(2, 2)), ValueError, "theta0"),
    (dict(delta=2.0), ValueError, "delta"),
    (dict(clip_norm=-1.0), ValueError, "clip_norm"),
])
def test_audit_bad_input(kwargs, err, match):
    kw = dict(algorithm="dp_sgd", runs=4, steps=5, noise_multiplier=1.0, n=10, batch_size=2, dim=2) | kwargs
    with pytest.raises(err, match=match):
        A.gradient_canary_audit(**kw)


# -- the accountant of the audited run (issue: audit.py item 3) --------------------------------------
def own_epsilon(algorithm, sampling, *, steps, n, batch_size, z, delta, accountant):
    """ε of the lab result's *own* ``dp_event()`` for these settings (a run of the algorithm itself)."""
    from dpclip_lab import algorithms as alg
    from dpclip_lab.accountants.calibration import make_accountant

    def zero(theta, idx):
        return torch.zeros((*theta.shape[:-1], idx.shape[-1], theta.shape[-1]), dtype=theta.dtype)

    kw = dict(n=n, steps=steps, lr=1.0, seed=0, progress=False)
    th = torch.zeros(1, dtype=torch.float64)
    if algorithm == "dp_gd":
        res = alg.dp_gd(zero, th, clip_norm=1.0, noise_multiplier=z, **kw)
    elif algorithm == "dp_sgd":
        res = alg.dp_sgd(zero, th, clip_norm=1.0, noise_multiplier=z, batch_size=batch_size, sampling=sampling, **kw)
    elif algorithm == "dice_sgd":
        res = alg.dice_sgd(zero, th, clip_norm=1.0, feedback_clip_norm=1.0, noise_multiplier=z,
                           batch_size=batch_size, sampling=sampling, **kw)
    else:
        res = alg.dp_sgd_adaptive_clipping(zero, th, initial_clip_norm=1.0, noise_multiplier=z,
                                           batch_size=batch_size, sampling=sampling, **kw)
    return make_accountant(accountant).compose(res.dp_event()).get_epsilon(delta)


_SCHEMES = [("poisson", 2), ("shuffle", 2), ("with_replacement", 2), ("with_replacement", 1), ("full", None)]


@pytest.mark.parametrize("algorithm, sampling, batch_size",
                         [(a, s, b) for a in ("dp_sgd", "dice_sgd", "adaptive") for s, b in _SCHEMES]
                         + [("dp_gd", "full", None), ("dp_gd", None, None)])
def test_audit_accountant_is_the_runs_own_event(algorithm, sampling, batch_size):
    """The audit's accountant ε is the audited run's own event at every checkpoint, for every sampling scheme
    (before: the Poisson formula whatever the sampling, e.g. DP-SGD + shuffle 9.09 against its own 12.30)."""
    n, T, z, delta = 10, 8, 1.0, 1e-5
    kw = dict(runs=2, steps=T, noise_multiplier=z, n=n, batch_size=batch_size, sampling=sampling, delta=delta,
              checkpoints=[3, T], seed=0)
    a = A.gradient_canary_audit(algorithm, **kw)
    want = [own_epsilon(algorithm, sampling or "full", steps=t, n=n, batch_size=batch_size, z=z, delta=delta,
                        accountant="rdp") for t in (3, T)]
    np.testing.assert_allclose(a.accountant_epsilon, want, rtol=1e-9)


def test_audit_accountant_pld_and_one_run_audit_use_the_runs_own_event():
    a = A.gradient_canary_audit("dp_sgd", runs=2, steps=8, noise_multiplier=1.0, n=10, batch_size=2,
                                sampling="shuffle", accountant="pld")
    want = own_epsilon("dp_sgd", "shuffle", steps=8, n=10, batch_size=2, z=1.0, delta=1e-5, accountant="pld")
    assert a.epsilon_accountant == pytest.approx(want, rel=1e-9)
    for sampling, b in _SCHEMES:
        out = A.one_run_gradient_audit(canaries=20, steps=6, noise_multiplier=1.0, batch_size=b, sampling=sampling)
        want = own_epsilon("dp_sgd", sampling, steps=6, n=20, batch_size=b, z=1.0, delta=1e-5, accountant="rdp")
        assert out["epsilon_accountant"] == pytest.approx(want, rel=1e-9), sampling
        assert out["epsilon_lower"] <= out["epsilon_accountant"]


# -- nonsense is refused (item 8; item 7's observe) --------------------------------------------------
@pytest.mark.parametrize("bad", [np.array([1 + 1j, 2.0, 0.5]), torch.tensor([1 + 1j, 2.0, 0.5]),
                                 ["1.0", "2.0", "0.5"], [1.0, None, 0.5]])
def test_complex_or_non_numeric_scores_are_refused(bad):
    ok = np.array([0.1, 0.2, 0.3])
    with pytest.raises((TypeError, ValueError), match="scores_in"):
        A.epsilon_lower_bound(bad, ok, delta=1e-5)
    with pytest.raises((TypeError, ValueError), match="scores_out"):
        A.epsilon_lower_bound(ok, bad, delta=1e-5)
    with pytest.raises((TypeError, ValueError), match="scores"):
        A.one_run_epsilon_lower_bound(bad, [True, False, True], delta=1e-5)


@pytest.mark.parametrize("included", [[0.3, 1.0, 0.0, 1.0], [2, 0, 1, 0], ["yes", "no", "yes", "no"],
                                      [True, True, True, True], [False, False, False, False], [1, 1, 1, 1],
                                      torch.tensor([0.3, 1.0, 0.0, 1.0])])
def test_one_run_included_must_be_a_boolean_mix(included):
    with pytest.raises(ValueError, match="included"):
        A.one_run_epsilon_lower_bound([0.1, 0.5, 0.2, 0.9], included, delta=1e-5, guesses=[(1, 1)])


def test_one_run_included_accepts_booleans_and_zero_one():
    s = [0.1, 0.5, 0.2, 0.9]
    v = A.one_run_epsilon_lower_bound(s, [False, True, False, True], delta=1e-5, guesses=[(1, 1)])
    assert A.one_run_epsilon_lower_bound(s, [0, 1, 0, 1], delta=1e-5, guesses=[(1, 1)]) == v
    assert A.one_run_epsilon_lower_bound(s, torch.tensor([0.0, 1.0, 0.0, 1.0]), delta=1e-5, guesses=[(1, 1)]) == v


@pytest.mark.parametrize("kwargs, match", [
    (dict(algorithm="dp_gd", sampling="poisson"), "sampling"),
    (dict(algorithm="dp_gd", sampling="shuffle"), "sampling"),
    (dict(algorithm="dp_gd", batch_size=2), "batch_size"),
    (dict(dtype=torch.bfloat16), "dtype"),
    (dict(dtype=torch.float16), "dtype"),
    (dict(theta0=torch.zeros(2, dtype=torch.float16)), "theta0"),
    (dict(theta0=torch.zeros(2, dtype=torch.bfloat16)), "theta0"),
    (dict(accountant="moments"), "accountant"),
])
def test_audit_refuses_ignored_or_unsound_settings(kwargs, match):
    kw = dict(algorithm="dp_sgd", runs=4, steps=5, noise_multiplier=1.0, n=10, batch_size=2, dim=2) | kwargs
    with pytest.raises(ValueError, match=match):
        A.gradient_canary_audit(**kw)


def test_audit_16_bit_refusal_says_why_and_dp_gd_accepts_full():
    with pytest.raises(ValueError, match=r"float32 or torch.float64 .*16-bit"):
        A.gradient_canary_audit(runs=4, steps=5, noise_multiplier=1.0, n=10, batch_size=2, dtype=torch.bfloat16)
    for sampling in (None, "full"):
        a = A.gradient_canary_audit("dp_gd", runs=4, steps=5, noise_multiplier=1.0, n=10, sampling=sampling)
        assert a.extra["sampling"] == "full"
    X = torch.eye(3, dtype=torch.float16)
    from dpclip_lab.losses import Logistic
    with pytest.raises(ValueError, match="X"):
        A.input_canary_audit(X, torch.ones(3), Logistic(), X[0], 1.0, runs=4, steps=3, noise_multiplier=1.0,
                             batch_size=2)
    X = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="sampling"):
        A.input_canary_audit(X, torch.ones(3), Logistic(), X[0], 1.0, runs=4, steps=3, noise_multiplier=1.0,
                             batch_size=None, algorithm="dp_gd", sampling="poisson")


def test_epsilon_lower_names_observe():
    a = A.gradient_canary_audit(runs=4, steps=3, noise_multiplier=1.0, n=10, batch_size=2)
    for call in (lambda: a.epsilon_lower("foo"), lambda: a.epsilon_lower_curve("foo")):
        with pytest.raises(ValueError, match=r"observe.*'last'.*'all'|observe.*'all'.*'last'"):
            call()


# -- a statistic that does not trust the claim (item 10) ---------------------------------------------
@pytest.mark.parametrize("z, n, b, T", [
    (0.9, 200, 2, 200),     # b = 2: before, the claimed-noise statistic certified 0.6-0.8 against a claim of 1.24
    (1.0, 1000, 4, 50),     # b = 4, n = 1000 (the setting): before 0.0-0.22 against a claim of 0.217
])
def test_broken_privatizer_is_caught_at_small_batches(z, n, b, T):
    from dpclip_lab import get_epsilon
    claimed = get_epsilon(noise_multiplier=z, sample_rate=b / n, steps=T, delta=1e-5, accountant="pld")
    kw = dict(runs=3000, steps=T, noise_multiplier=z, n=n, batch_size=b, seed=3)
    broken = A.gradient_canary_audit(privatizer=A.BrokenMeanNoisePrivatizer(1.0, z), **kw)
    honest = A.gradient_canary_audit("dp_sgd", **kw)
    assert broken.epsilon_lower("all") > claimed, (broken.epsilon_lower("all"), claimed)
    assert max(honest.epsilon_lower("all"), honest.epsilon_lower("last")) <= claimed
    # the calibration runs measure the noise the code really adds, not the claim
    assert broken.extra["observed_noise_multiplier"] == pytest.approx(z / b, rel=0.05)
    assert honest.extra["observed_noise_multiplier"] == pytest.approx(z, rel=0.05)
