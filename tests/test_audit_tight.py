"""Tight auditing (issue #30): the sound f-DP bound, the Gaussian-DP estimate, the one-run f-DP audit.

Every statistical claim is checked on mechanisms whose privacy is known exactly (the
Gaussian mechanism: μ-GDP, ε(δ) from the lab's analytic Gaussian accountant; the Laplace
mechanism: pure ε = 1/b), by counting, over repetitions, how often the claim fails, and
comparing the count with what the stated confidence allows (a binomial tail). Each such
check is shown to fail on an unsound variant (no multiplicity correction, a too-narrow
interval, a test that ignores abstentions), so that passing it means something.
"""
import math

import numpy as np
import pytest
import torch
from scipy.stats import binom, norm

from dpclip_lab import audit as A
from dpclip_lab.accountants import analytic_gaussian_epsilon

torch.set_num_threads(1)
TRUE_EPS = analytic_gaussian_epsilon(1.0, 1e-5)          # μ = 1, δ = 1e-5: 4.38


def gaussian_scores(rng, mu, n):
    """Scores of the optimal test for N(mu, 1) vs N(0, 1): the output itself."""
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


def most_exceedances(trials, confidence, tail=1e-3):
    """The most failures a claim valid at ``confidence`` shows in ``trials`` trials, but for a ``tail`` chance."""
    return int(binom.isf(tail, trials, 1.0 - confidence))


def plug_in(s_in, s_out, delta):
    """UNSOUND: the (ε, δ) inversion of the empirical rates themselves, no confidence interval at all
    (a threshold above every out-score has FPR 0, so this certifies ε = ∞)."""
    si, so = np.sort(s_in), np.sort(s_out)
    th = np.append(np.unique(np.concatenate([si, so])), np.inf)
    a = (so.size - np.searchsorted(so, th)) / so.size
    b = np.searchsorted(si, th) / si.size
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.maximum(np.log(np.maximum(1 - delta - a, 0)) - np.log(b),
                       np.log(np.maximum(1 - delta - b, 0)) - np.log(a))
    return float(np.nanmax(e))


def pointwise_fdp(s_in, s_out, delta, confidence):
    """UNSOUND: Clopper-Pearson at every threshold with no multiplicity correction, maximized."""
    si, so = np.sort(s_in), np.sort(s_out)
    th = np.append(np.unique(np.concatenate([si, so])), np.inf)
    fp, fn = so.size - np.searchsorted(so, th), np.searchsorted(si, th)
    a = (1 - confidence) / 2
    (u1, c1), (u2, c2) = A._cp_upper_and_complement(fp, so.size, a), A._cp_upper_and_complement(fn, si.size, a)
    return A._epsilon_from_rate_bounds(u1, u2, delta, c1, c2)


def first_audits_bound(scores_in, scores_out, delta, confidence=0.95):
    """The lab's epsilon_lower_bound as it was before issue #30 (verbatim), for the regression check."""
    s_in, s_out = np.sort(np.asarray(scores_in, float)), np.sort(np.asarray(scores_out, float))
    n_in, n_out = s_in.size, s_out.size
    thresholds = np.append(np.unique(np.concatenate([s_in, s_out])), np.inf)
    fp = n_out - np.searchsorted(s_out, thresholds, side="left")
    fn = np.searchsorted(s_in, thresholds, side="left")
    alpha = 1.0 - confidence
    lv_out, lv_in = A._count_levels(n_out), A._count_levels(n_in)
    u_out = A.clopper_pearson_upper(lv_out, n_out, alpha / (2 * lv_out.size))
    u_in = A.clopper_pearson_upper(lv_in, n_in, alpha / (2 * lv_in.size))
    U_fp = u_out[np.searchsorted(lv_out, fp, side="left")]
    U_fn = u_in[np.searchsorted(lv_in, fn, side="left")]
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(1.0 - delta - U_fp, 0.0)) - np.log(U_fn)
        e2 = np.log(np.maximum(1.0 - delta - U_fn, 0.0)) - np.log(U_fp)
    best = np.max(np.maximum(e1, e2))
    return float(best) if np.isfinite(best) and best > 0 else 0.0


# -- the sound bound: soundness in repeated trials -----------------------------------------------------
def test_fdp_bound_sound_on_the_gaussian_mechanism_at_small_samples():
    """μ = 1, δ = 1e-5 (true ε 4.38), 200 repetitions at 200 ... 2000 runs per side, confidence 0.95.

    At these sizes the truth is out of reach of any valid bound, so only a gross error (rates used
    without intervals) shows here; the tight settings of the next test check the union bound itself."""
    rng = np.random.default_rng(0)
    sizes = (200, 500, 1000, 2000)
    ours, plug = [], []
    for i in range(200):
        s_in, s_out = gaussian_scores(rng, 1.0, sizes[i % 4])
        ours.append(A.epsilon_lower_bound(s_in, s_out, delta=1e-5, method="fdp"))
        plug.append(plug_in(s_in, s_out, 1e-5))
    ours, plug = np.array(ours), np.array(plug)
    allowed = most_exceedances(200, 0.95)
    assert (ours > TRUE_EPS).sum() <= allowed
    assert ours.mean() > 0.2 * TRUE_EPS                  # not vacuous at 200-2000 runs (0.24 here)
    assert (plug > TRUE_EPS).sum() > allowed             # the count catches an unsound estimator


def test_fdp_bound_sound_where_it_is_tight_and_the_uncorrected_maximum_is_not():
    """Pure DP (Laplace, δ = 0, ε = 1/b) and the Gaussian at large δ, confidence 0.8: there the bound is
    close to the truth, so a maximum over thresholds without the union bound overshoots it."""
    rng = np.random.default_rng(1)
    conf = 0.8
    ours, naive = [], []
    for _ in range(40):
        s_in, s_out = rng.laplace(1.0, 1.0, 3000), rng.laplace(0.0, 1.0, 3000)
        ours.append(A.epsilon_lower_bound(s_in, s_out, delta=0.0, confidence=conf, method="fdp"))
        naive.append(pointwise_fdp(s_in, s_out, 0.0, conf))
    ours, naive = np.array(ours), np.array(naive)
    assert (ours > 1.0).sum() <= most_exceedances(40, conf)
    assert (naive > 1.0).sum() > most_exceedances(40, conf)
    assert ours.mean() > 0.6
    true = analytic_gaussian_epsilon(1.0, 0.2)
    ours = [A.epsilon_lower_bound(*gaussian_scores(rng, 1.0, 1000), delta=0.2, confidence=conf, method="fdp")
            for _ in range(40)]
    assert (np.array(ours) > true).sum() <= most_exceedances(40, conf)


def test_fdp_band_covers_the_whole_trade_off_curve_at_once():
    """The band of tradeoff_curve(confidence=c): all true rates below it, simultaneously, in ≥ c of trials."""
    rng = np.random.default_rng(2)
    conf, trials = 0.8, 200

    def violated(s_in, s_out, band):
        th = np.append(np.unique(np.concatenate([s_in, s_out])), np.inf)
        alpha, beta = norm.sf(th), norm.cdf(th - 1.0)          # the true rates of "in iff score ≥ t"
        ua, ub = band(s_in, s_out)
        return bool(np.any(alpha > ua) or np.any(beta > ub))

    def pointwise(s_in, s_out):
        si, so = np.sort(s_in), np.sort(s_out)
        th = np.append(np.unique(np.concatenate([si, so])), np.inf)
        fp, fn = so.size - np.searchsorted(so, th), np.searchsorted(si, th)
        a = (1 - conf) / 2
        return A._cp_upper_and_complement(fp, so.size, a)[0], A._cp_upper_and_complement(fn, si.size, a)[0]

    samples = [gaussian_scores(rng, 1.0, 300) for _ in range(trials)]
    ours = sum(violated(*s, lambda a, b: A.tradeoff_curve(a, b, confidence=conf)) for s in samples)
    naive = sum(violated(*s, pointwise) for s in samples)
    assert ours <= most_exceedances(trials, conf)
    assert naive > most_exceedances(trials, conf)


# -- the sound bound: tightness and exactness of the fast path ------------------------------------------
def test_fdp_bound_is_tight_at_a_million_runs_where_clopper_pearson_is_not():
    rng = np.random.default_rng(3)
    s_in, s_out = gaussian_scores(rng, 1.0, 10**6)
    fdp = A.epsilon_lower_bound(s_in, s_out, delta=1e-5, method="fdp")
    cp = A.epsilon_lower_bound(s_in, s_out, delta=1e-5)
    assert 0.7 * TRUE_EPS <= fdp <= TRUE_EPS, fdp / TRUE_EPS      # 0.73 at this seed
    assert cp < 0.55 * TRUE_EPS and fdp > cp + 1.0                 # the first audits' bound: 0.47
    assert A.max_certifiable_epsilon(10**6, 10**6, delta=1e-5, method="fdp") > fdp


def test_fdp_candidate_thresholds_give_the_maximum_over_all_thresholds():
    """The O(levels) candidate thresholds reach exactly the maximum over every threshold (ties included)."""
    rng = np.random.default_rng(4)
    for trial in range(60):
        n_in, n_out = rng.integers(1, 300, size=2)
        if trial % 3 == 0:
            s_in, s_out = rng.normal(rng.uniform(0, 4), 1, n_in), rng.normal(0, 1, n_out)
        elif trial % 3 == 1:                                     # discrete scores: many ties
            s_in, s_out = rng.integers(0, 5, n_in).astype(float), rng.integers(-2, 3, n_out).astype(float)
        else:
            s_in, s_out = rng.laplace(2, 1, n_in).round(1), rng.laplace(0, 1, n_out).round(1)
        delta = (0.0, 1e-5, 0.1)[trial % 3]
        si, so = np.sort(s_in), np.sort(s_out)
        th = np.append(np.unique(np.concatenate([si, so])), np.inf)
        fp, fn = so.size - np.searchsorted(so, th), np.searchsorted(si, th)
        u_fp, c_fp, u_fn, c_fn = A._fdp_rate_bounds(fp, fn, si.size, so.size, 0.9)
        brute = A._epsilon_from_rate_bounds(u_fp, u_fn, delta, c_fp, c_fn)
        assert A.epsilon_lower_bound(s_in, s_out, delta=delta, confidence=0.9, method="fdp") == brute


def test_default_method_unchanged():
    rng = np.random.default_rng(5)
    for n, mu, delta in [(50, 0.5, 1e-5), (700, 2.0, 0.0), (3000, 1.0, 1e-3)]:
        s_in, s_out = gaussian_scores(rng, mu, n)
        v = A.epsilon_lower_bound(s_in, s_out, delta=delta)
        assert v == first_audits_bound(s_in, s_out, delta)
        assert v == A.epsilon_lower_bound(s_in, s_out, delta=delta, method="clopper_pearson")
    s = np.zeros(10)
    assert A.epsilon_lower_bound(s, s, delta=0.0, method="fdp") == 0.0     # all ties: nothing certified
    assert A.epsilon_lower_bound(s_out, s_out, delta=1e-5, method="fdp") == 0.0


def test_tradeoff_curve_is_the_empirical_curve_and_its_band_lies_above_it():
    a, b = A.tradeoff_curve([2.0, 3.0, 3.0], [1.0, 2.0])
    # thresholds 1, 2, 3, inf: FPR = out-runs >= t, FNR = in-runs < t
    np.testing.assert_allclose(a, [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(b, [0.0, 0.0, 1 / 3, 1.0])
    rng = np.random.default_rng(6)
    s_in, s_out = gaussian_scores(rng, 1.0, 500)
    ea, eb = A.tradeoff_curve(s_in, s_out)
    ua, ub = A.tradeoff_curve(s_in, s_out, confidence=0.9)
    assert ea.shape == ua.shape and np.all(ua >= ea) and np.all(ub >= eb)
    assert np.all(np.diff(ea) <= 0) and np.all(np.diff(eb) >= 0)


# -- the Gaussian-DP estimate ------------------------------------------------------------------------------
def test_gdp_estimate_recovers_mu_within_a_few_percent():
    rng = np.random.default_rng(7)
    g = A.gdp_estimate(*gaussian_scores(rng, 1.0, 10**6))
    assert abs(g.mu - 1.0) < 0.02 and g.ci[0] <= 1.0 <= g.ci[1]
    assert g.ci[1] - g.ci[0] < 0.02
    assert abs(g.epsilon(1e-5) / TRUE_EPS - 1) < 0.05
    lo, hi = g.epsilon_interval(1e-5)
    assert lo <= g.epsilon(1e-5) <= hi and lo <= TRUE_EPS <= hi
    assert g.auc == pytest.approx(norm.cdf(1 / math.sqrt(2)), abs=2e-3)


def test_gdp_confidence_interval_covers_mu_at_its_confidence():
    """200 repetitions at 100-2000 runs per side: coverage ≥ what 95 % allows; an interval half as wide fails."""
    rng = np.random.default_rng(8)
    trials, covered, narrow = 200, 0, 0
    for i in range(trials):
        g = A.gdp_estimate(*gaussian_scores(rng, 1.0, (100, 500, 2000)[i % 3]))
        covered += g.ci[0] <= 1.0 <= g.ci[1]
        quarter = (g.ci[1] - g.ci[0]) / 4
        narrow += g.mu - quarter <= 1.0 <= g.mu + quarter
    allowed = most_exceedances(trials, 0.95)
    assert trials - covered <= allowed
    assert trials - narrow > allowed


def test_gdp_estimate_depends_on_the_roc_curve_only():
    rng = np.random.default_rng(9)
    s_in, s_out = gaussian_scores(rng, 0.7, 2000)
    g = A.gdp_estimate(s_in, s_out)
    h = A.gdp_estimate(np.exp(s_in), torch.tensor(np.exp(s_out)))        # a monotone transform, a tensor
    assert g.mu == pytest.approx(h.mu, rel=1e-12) and g.ci == pytest.approx(h.ci, rel=1e-12)
    assert A.gdp_estimate(s_out, s_in).mu == 0.0                           # wrong way round: clipped at 0
    assert A.gdp_estimate(s_out, s_out[::-1].copy()).mu == 0.0
    with pytest.raises(Exception):
        g.mu = 2.0                                                         # frozen


def test_gdp_estimate_on_dp_gd_matches_the_accountant():
    """Full-batch DP-GD with a gradient canary is exactly μ-GDP, μ = √T / z = 1 (Dong et al. 2022, Cor. 3.3)."""
    a = A.gradient_canary_audit("dp_gd", runs=2000, steps=25, noise_multiplier=5.0, n=10, accountant="pld")
    for observe in ("last", "all"):
        g = a.gdp_estimate(observe)
        assert abs(g.mu - 1.0) < 0.1 and g.ci[0] <= 1.0 <= g.ci[1], (observe, g)
        assert abs(g.epsilon(a.delta) / a.epsilon_accountant - 1) < 0.15
        assert a.epsilon_lower(observe, method="fdp") <= a.epsilon_accountant
    assert a.epsilon_lower_curve("all", method="fdp").shape == (1,)


def test_broken_privatizer_is_flagged_by_a_wide_margin():
    from dpclip_lab import get_epsilon
    z, q, T = 3.0, 0.1, 50                    # batch b = 10: the bug leaves noise z/b = 0.3
    claimed = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=1e-5, accountant="pld")
    kw = dict(runs=1000, steps=T, noise_multiplier=z, n=100, batch_size=10)
    broken = A.gradient_canary_audit(privatizer=A.BrokenMeanNoisePrivatizer(1.0, z), **kw)
    honest = A.gradient_canary_audit("dp_sgd", **kw)
    assert broken.epsilon_lower("all", method="fdp") > 2 * claimed
    assert broken.gdp_estimate("all").epsilon_interval(1e-5)[0] > 2 * claimed
    assert honest.epsilon_lower("all", method="fdp") <= claimed


# -- the one-run audit with f-DP ---------------------------------------------------------------------------
def one_run_game(rng, mu, m):
    """m canaries of the Gaussian mechanism N(μ · included, 1), each included with probability ½."""
    inc = rng.random(m) < 0.5
    return rng.normal(inc * mu, 1.0), inc


def test_one_run_fdp_does_not_reject_the_true_mu_and_ignoring_abstention_would():
    rng = np.random.default_rng(10)
    trials, m, k, tau = 100, 500, 25, 0.05
    ours = naive = 0
    for _ in range(trials):
        s, inc = one_run_game(rng, 1.0, m)
        order = np.argsort(s)
        v = int(inc[order[m - k:]].sum() + (~inc[order[:k]]).sum())
        ours += bool(A._gdp_one_run_rejects(np.array([1.0]), m, 2 * k, v, tau)[0])
        # UNSOUND: compare the confident guesses with a test that must guess on every canary (accuracy Φ(μ/2))
        naive += binom.sf(v - 1, 2 * k, norm.cdf(0.5)) < tau
    assert ours <= most_exceedances(trials, 1 - tau)
    assert naive > most_exceedances(trials, 1 - tau)


def test_one_run_fdp_is_tighter_than_steinke_and_below_the_truth():
    rng = np.random.default_rng(11)
    s, inc = one_run_game(rng, 1.0, 1000)
    st = A.one_run_epsilon_lower_bound(s, inc, delta=1e-5)
    fdp = A.one_run_epsilon_lower_bound(s, inc, delta=1e-5, method="fdp")
    assert st < fdp <= TRUE_EPS and fdp > 0.45 * TRUE_EPS, (st, fdp)
    # mu grid: rejected exactly below the reported bound (monotone in μ)
    mu_lo = A._one_run_best(s, inc, 1e-5, 0.95, None, "fdp")[0]
    assert A.one_run_epsilon_lower_bound(s, inc, delta=1e-5, method="fdp") == A._gdp_epsilon(mu_lo, 1e-5)
    assert 0.5 < mu_lo < 1.0
    order = np.argsort(s)
    v = int(inc[order[-50:]].sum() + (~inc[order[:50]]).sum())
    rejected = A._gdp_one_run_rejects(np.linspace(0, 3, 61), 1000, 100, v, 0.05)
    k = int(rejected.sum())
    assert 0 < k < 61 and rejected[:k].all() and not rejected[k:].any()     # an interval [0, μ*)


def test_one_run_gradient_audit_fdp_on_full_batch_dp_gd():
    """Full batch: each canary's coordinate is a Gaussian mechanism with μ = √T / z (here 1)."""
    out = A.one_run_gradient_audit(canaries=400, steps=4, noise_multiplier=2.0, method="fdp")
    steinke = A.one_run_gradient_audit(canaries=400, steps=4, noise_multiplier=2.0)
    assert steinke["method"] == "steinke" and out["method"] == "fdp"
    assert steinke["epsilon_lower"] < out["epsilon_lower"] <= out["epsilon_accountant"]
    assert 0 < out["mu_lower"] <= 1.0
    assert out["epsilon_lower"] <= out["epsilon_ceiling"] and steinke["epsilon_lower"] <= steinke["epsilon_ceiling"]


def test_one_run_ceiling():
    for r in (100, 1000, 10**4):
        a = 1 - 0.05 ** (1 / r)
        assert A.one_run_ceiling(r, delta=0.0) == pytest.approx(math.log((1 - a) / a), abs=1e-8)
    st = [A.one_run_ceiling(r, delta=1e-5) for r in (100, 1000, 10**4)]
    fdp = [A.one_run_ceiling(r, delta=1e-5, method="fdp") for r in (100, 1000)]
    assert np.all(np.diff(st) > 0) and fdp[0] < fdp[1] and fdp[0] > st[0]
    assert A.one_run_ceiling(100, delta=1e-5, canaries=10**5) < st[0]        # δ's term grows with m
    # perfect guesses reach the ceiling exactly
    s = np.arange(200.0)
    inc = s >= 100
    assert A.one_run_epsilon_lower_bound(s, inc, delta=1e-5, guesses=[(100, 100)]) == A.one_run_ceiling(
        200, delta=1e-5)


# -- bad input ---------------------------------------------------------------------------------------------
GOOD = np.array([0.1, 0.5, 0.9, 1.3])


@pytest.mark.parametrize("call, match", [
    (lambda: A.epsilon_lower_bound(GOOD, GOOD, delta=1e-5, method="gdp"), r"method.*clopper_pearson.*fdp"),
    (lambda: A.epsilon_lower_bound(GOOD, GOOD, delta=1e-5, method=None), "method"),
    (lambda: A.epsilon_lower_bound([], GOOD, delta=1e-5, method="fdp"), "scores_in"),
    (lambda: A.epsilon_lower_bound(GOOD, [1.0, math.nan], delta=1e-5, method="fdp"), "scores_out"),
    (lambda: A.epsilon_lower_bound(GOOD, GOOD, delta=1.0, method="fdp"), r"delta.*\[0, 1\)"),
    (lambda: A.epsilon_lower_bound(GOOD, GOOD, delta=-1e-5, method="fdp"), "delta"),
    (lambda: A.epsilon_lower_bound(GOOD, GOOD, delta=1e-5, confidence=1.0, method="fdp"), r"confidence.*\(0, 1\)"),
    (lambda: A.max_certifiable_epsilon(10, 10, delta=1e-5, method="x"), "method"),
    (lambda: A.tradeoff_curve(GOOD, GOOD, confidence=0.0), "confidence"),
    (lambda: A.tradeoff_curve(GOOD.reshape(2, 2), GOOD), "scores_in"),
    (lambda: A.gdp_estimate([], GOOD), "scores_in"),
    (lambda: A.gdp_estimate(GOOD, [math.inf, 1.0]), "scores_out"),
    (lambda: A.gdp_estimate(GOOD, [1.0]), r"scores_out.*at least 2"),
    (lambda: A.gdp_estimate(GOOD, GOOD, confidence=1.5), r"confidence.*\(0, 1\)"),
    (lambda: A.gdp_estimate(np.ones(5), np.ones(5)), "degenerate.*no information"),
    (lambda: A.gdp_estimate(GOOD + 10, GOOD), "degenerate.*above"),
    (lambda: A.gdp_estimate(GOOD, GOOD + 10), "degenerate.*below"),
    (lambda: A.gdp_estimate(GOOD, GOOD[::-1]).epsilon(0.0), r"delta.*\(0, 1\)"),
    (lambda: A.gdp_estimate(GOOD, GOOD[::-1]).epsilon_interval(1.0), "delta"),
    (lambda: A.one_run_epsilon_lower_bound(GOOD, [1, 0, 1, 0], delta=1e-5, method="fd"), r"method.*steinke.*fdp"),
    (lambda: A.one_run_epsilon_lower_bound(GOOD, [1, 0, 1, 0], delta=0.0, method="fdp"), r"delta.*\(0, 1\)"),
    (lambda: A.one_run_epsilon_lower_bound(GOOD, [1, 0, 1], delta=1e-5, method="fdp"), "included"),
    (lambda: A.one_run_epsilon_lower_bound([1.0, math.nan], [1, 0], delta=1e-5, method="fdp"), "scores"),
    (lambda: A.one_run_epsilon_lower_bound(GOOD, [1, 0, 1, 0], delta=1e-5, confidence=0.0, method="fdp"),
     "confidence"),
    (lambda: A.one_run_ceiling(0, delta=1e-5), "guesses"),
    (lambda: A.one_run_ceiling(10, delta=1e-5, canaries=5), "canaries"),
    (lambda: A.one_run_ceiling(10, delta=1.0), "delta"),
    (lambda: A.one_run_ceiling(10, delta=1e-5, method="fdp", confidence=1.0), "confidence"),
    (lambda: A.one_run_gradient_audit(canaries=10, steps=1, noise_multiplier=1.0, method="x"), "method"),
])
def test_bad_input_names_the_parameter_and_its_range(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_types_are_type_errors():
    with pytest.raises(TypeError, match="scores_in"):
        A.gdp_estimate(["a", "b"], GOOD)
    with pytest.raises(TypeError, match="guesses"):
        A.one_run_ceiling(2.5, delta=1e-5)
    with pytest.raises(TypeError, match="delta"):
        A.epsilon_lower_bound(GOOD, GOOD, delta="1e-5", method="fdp")


# ------------------------------------------------------------------- the accountant's curve, the μ view
def exact_gaussian_tradeoff(mu, alpha):
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ): the trade-off curve of N(μ, 1) against N(0, 1)."""
    return norm.cdf(norm.ppf(1.0 - alpha) - mu)


RATES = np.unique(np.concatenate([np.geomspace(1e-9, 1e-3, 40), np.linspace(1e-3, 1.0, 120)]))


@pytest.mark.parametrize("mu, steps", [(0.5, 1), (1.0, 1), (2.0, 1), (1.0, 4)])
def test_accountant_tradeoff_is_the_gaussian_curve_and_never_above_it(mu, steps):
    """On the Gaussian mechanism (T steps at z = √T/μ: exactly μ-GDP) the envelope of the PLD
    accountant's (ε, δ(ε)) curves is G_μ up to the discretization, and never above it."""
    from dpclip_lab.accountants import GaussianEvent

    f = A.accountant_tradeoff(GaussianEvent(math.sqrt(steps) / mu), RATES, steps=steps)
    G = exact_gaussian_tradeoff(mu, RATES)
    assert f.shape == RATES.shape and np.all((f >= 0) & (f <= 1))
    assert np.all(f <= G + 1e-9), f"above the true curve by {np.max(f - G):.2e}"   # never an understatement
    assert np.max(G - f) < 0.01, f"below the true curve by {np.max(G - f):.3g} (discretization)"
    # the Gaussian μ view of the certified curve is flat at μ (where the curve is resolved)
    a, m = A.gaussian_mu_of_tests(RATES, f, at=[1e-4, 1e-2, 0.3])
    assert np.allclose(m, mu, atol=0.06)


def test_accountant_tradeoff_of_a_subsampled_event_lies_above_its_unsampled_curve():
    """Subsampling only helps: the Poisson-subsampled event's certified curve lies above the curve of
    the same Gaussian without subsampling; and fewer ε (a sub-grid) only lower the envelope."""
    from dpclip_lab.accountants import GaussianEvent, PoissonSampledEvent

    full = A.accountant_tradeoff(GaussianEvent(2.0), RATES, steps=4)
    sub = A.accountant_tradeoff(PoissonSampledEvent(0.5, GaussianEvent(2.0)), RATES, steps=4)
    assert np.all(sub >= full - 1e-9)
    grid = np.linspace(0.0, 12.0, 121)
    fine = A.accountant_tradeoff(GaussianEvent(2.0), RATES, steps=4, epsilons=grid)
    coarse = A.accountant_tradeoff(GaussianEvent(2.0), RATES, steps=4, epsilons=grid[::10])
    assert np.all(coarse <= fine + 1e-12) and np.any(coarse < fine - 1e-3)


def test_gaussian_mu_of_tests_reads_mu_off_a_gaussian_curve():
    for mu in (0.3, 1.0, 2.5):
        a, m = A.gaussian_mu_of_tests(RATES, exact_gaussian_tradeoff(mu, RATES))
        assert a.size > 100 and np.allclose(m, mu, atol=1e-6)
    # at = rates: the test with the largest α not above each rate, each test once
    alpha = np.array([0.9, 0.5, 0.2, 0.05])
    beta = exact_gaussian_tradeoff(1.0, alpha)
    a, m = A.gaussian_mu_of_tests(alpha, beta, at=[0.6, 0.5, 0.1, 0.01])
    assert a.tolist() == [0.5, 0.05] and np.allclose(m, 1.0)
    # order does not matter; degenerate tests (α or β at 0 or 1) are left out
    a2, m2 = A.gaussian_mu_of_tests(np.r_[alpha[::-1], 0.0, 1.0], np.r_[beta[::-1], 1.0, 0.0])
    assert np.allclose(a2, alpha) and np.allclose(m2, 1.0)
    # on an audit's empirical curve (what tradeoff_curve returns)
    g = np.random.default_rng(0)
    a3, m3 = A.gaussian_mu_of_tests(*A.tradeoff_curve(g.normal(1.0, 1.0, 4000), g.normal(0.0, 1.0, 4000)),
                                    at=[0.3, 0.1])
    assert np.allclose(m3, 1.0, atol=0.15)


@pytest.mark.parametrize("delta", [1e-5, 1e-2])
def test_gdp_mu_for_epsilon_inverts_the_gaussian_epsilon(delta):
    for mu in (0.05, 0.5, 1.0, 3.0, 10.0):
        eps = analytic_gaussian_epsilon(1.0 / mu, delta)
        back = A.gdp_mu_for_epsilon(eps, delta)
        assert back == pytest.approx(mu, rel=1e-9)
        assert back <= mu * (1 + 1e-12)                       # rounded down: μ-GDP is (ε, δ)-DP
    est = A.gdp_estimate(*gaussian_scores(np.random.default_rng(1), 1.0, 500))
    assert A.gdp_mu_for_epsilon(est.epsilon(delta), delta) == pytest.approx(est.mu, rel=1e-9)


@pytest.mark.parametrize("call, match", [
    (lambda: A.gaussian_mu_of_tests([], []), "alpha"),
    (lambda: A.gaussian_mu_of_tests([0.1, math.nan], [0.5, 0.4]), "alpha"),
    (lambda: A.gaussian_mu_of_tests([0.1, 1.5], [0.5, 0.4]), r"alpha must hold error rates in \[0, 1\]"),
    (lambda: A.gaussian_mu_of_tests([0.1, -0.1], [0.5, 0.4]), r"alpha.*\[0, 1\]"),
    (lambda: A.gaussian_mu_of_tests([0.1, 0.2], [0.5, 1.2]), r"beta.*\[0, 1\]"),
    (lambda: A.gaussian_mu_of_tests([0.1, 0.2], [0.5]), "alpha and beta must have the same shape"),
    (lambda: A.gaussian_mu_of_tests([[0.1, 0.2]], [[0.5, 0.4]]), "alpha must be a non-empty 1-D"),
    (lambda: A.gaussian_mu_of_tests([0.1, 0.2], [0.5, 0.4], at=[2.0]), r"at.*\[0, 1\]"),
    (lambda: A.gaussian_mu_of_tests([0.1, 0.2], [0.5, 0.4], at=[]), "at"),
    (lambda: A.accountant_tradeoff(_gauss(), [0.1, math.nan]), "alpha"),
    (lambda: A.accountant_tradeoff(_gauss(), []), "alpha"),
    (lambda: A.accountant_tradeoff(_gauss(), [1.5]), r"alpha.*\[0, 1\]"),
    (lambda: A.accountant_tradeoff(_gauss(), [0.1], steps=0), "steps"),
    (lambda: A.accountant_tradeoff(_gauss(), [0.1], epsilons=1), "epsilons"),
    (lambda: A.accountant_tradeoff(_gauss(), [0.1], epsilons=[-1.0, 1.0]), "epsilons"),
    (lambda: A.accountant_tradeoff(_gauss(), [0.1], value_discretization_interval=0.0),
     "value_discretization_interval"),
    (lambda: A.gdp_mu_for_epsilon(0.0, 1e-5), r"epsilon must lie in \(0, inf\)"),
    (lambda: A.gdp_mu_for_epsilon(math.nan, 1e-5), "epsilon"),
    (lambda: A.gdp_mu_for_epsilon(1.0, 1.0), r"delta must lie in \(0, 1\)"),
    (lambda: A.gdp_mu_for_epsilon(1.0, math.nan), "delta"),
])
def test_tight_audit_helpers_reject_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _gauss():
    from dpclip_lab.accountants import GaussianEvent
    return GaussianEvent(1.0)


def test_accountant_tradeoff_rejects_an_event_the_pld_accountant_cannot_compose():
    from dpclip_lab.accountants import GaussianEvent, SampledWithoutReplacementEvent

    with pytest.raises(ValueError):
        A.accountant_tradeoff(SampledWithoutReplacementEvent(100, 10, GaussianEvent(1.0)), [0.1])
    with pytest.raises(TypeError, match="alpha"):
        A.accountant_tradeoff(GaussianEvent(1.0), "0.1")
