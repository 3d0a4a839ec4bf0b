"""Empirical privacy auditing: turn a membership attack into a *lower* bound on ε.

An accountant's ε is an upper bound proved on paper about an *idealized*
algorithm. Code can break it silently (noise on the mean instead of the sum, a
forgotten factor, ...). An **audit** tests the code itself: train many times
with a canary example (``scores_in``) and without it (``scores_out``), score
each run with a membership statistic, and turn the attack's error rates into a
statistically valid lower bound on ε (Jagielski, Ullman, Oprea 2020; Nasr et
al. 2021). If the lower bound exceeds the accountant's ε, the implementation
(or the proof) is wrong.

What this module holds:

* :func:`epsilon_lower_bound` — the estimator: Clopper–Pearson bounds on the
  false-positive and false-negative rates of every threshold test, with a
  union bound that makes the maximum over thresholds valid. ``method="fdp"``
  bounds the whole trade-off curve at once (error counts bounded at *both* ends,
  so that a test that rarely says "out" is bounded as tightly as one that rarely
  says "in") and inverts it through the (ε, δ) trade-off function — the sound
  bound of the tight audit (Nasr et al. 2023).
* :func:`tradeoff_curve` — the empirical trade-off curve (FPR, FNR) of the
  threshold tests, or its simultaneous upper confidence bounds.
* :func:`gdp_estimate` — an *estimate* (not a bound) of the Gaussian-DP parameter
  μ (Dong, Roth & Su 2022) with a confidence interval, and the ε(δ) it implies,
  valid under the assumption that the trade-off curve is Gaussian.
* :func:`accountant_tradeoff`, :func:`gaussian_mu_of_tests`, :func:`gdp_mu_for_epsilon` —
  the trade-off curve an accountant certifies (never above the true one), the
  "Gaussian μ" view of a curve's tests, and the μ-GDP with a given ε(δ): what an
  audit's curve and estimate are set next to.
* :func:`gradient_canary_audit` — many runs of a lab algorithm (DP-SGD, DP-GD,
  DiceSGD, adaptive clipping, or any privatizer) batched as one tensor program,
  with a *gradient canary*: one example whose per-example gradient is a fixed
  vector of norm ≥ C while every other gradient is 0 (the strongest white-box
  setting: the released sum is the canary's clipped gradient plus noise).
  Observes the last iterate or all iterates; the all-iterates score uses the
  noise level the code was *observed* to add (canary-free calibration runs),
  never the claimed one, so an under-noised implementation cannot hide behind
  its claim. With :func:`module_batched_grad_fn` the other examples are a small
  network's real per-example gradients and the canary is a "Dirac" gradient on
  one parameter.
* :func:`input_canary_audit` — the same with an *input-space* canary: an extra
  example ``(x_c, y_c)`` of a generalized linear problem, whose gradient the
  algorithm computes (and which shrinks as the model fits it).
* :func:`one_run_epsilon_lower_bound`, :func:`one_run_gradient_audit` — the
  one-run audit of Steinke, Nasr, Jagielski (2023): many canaries, each
  included with probability ½, in *one* training run; ``method="fdp"`` is the
  f-DP analysis of Mahloujifar, Melis & Chaudhuri (2025) for Gaussian trade-off
  curves. :func:`one_run_ceiling` is the most either can certify with ``r`` guesses.
* :class:`BrokenMeanNoisePrivatizer` — a privatizer that is **broken on
  purpose** (its noise is calibrated to the mean but added to the sum), for the
  book to catch. It is not an algorithm of the lab and is not exported from
  :mod:`dpclip_lab.algorithms`.

Conventions: an "out" run keeps the canary's slot with a zero gradient, which
for Poisson sampling (normalizer = the expected batch size) is the same
distribution as removing it (add/remove), for full batches gives a pair of data
sets (same size) whose clipped sums differ by at most ``C``, and for shuffling is
the zero-out relation. The accountant ε an audit is compared with is always the
audited run's own ``result.dp_event()`` (its sampling scheme and relation),
composed by the chosen accountant. Audits run in float32 or float64 only.

References
----------
Jagielski, Ullman, Oprea (2020), "Auditing differentially private machine learning:
how private is private SGD?".
Nasr, Song, Thakurta, Papernot, Carlini (2021), "Adversary instantiation: lower bounds
for differentially private machine learning".
Steinke, Nasr, Jagielski (2023), "Privacy auditing with one (1) training run".
Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, Terzis (2023), "Tight auditing of
differentially private machine learning" (USENIX Security).
Dong, Roth, Su (2022), "Gaussian differential privacy" (JRSS B): trade-off functions, μ-GDP.
Mahloujifar, Melis, Chaudhuri (2025), "Auditing f-differential privacy in one run" (ICML).
DeLong, DeLong, Clarke-Pearson (1988): the variance of the area under an ROC curve.
Clopper, Pearson (1934); Kairouz, Oh, Viswanath (2015) (the hypothesis-testing view of DP).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ._validation import check_int, check_interval, check_nonnegative, check_open_unit, check_positive
from .accountants.gaussian import analytic_gaussian_epsilon
from .algorithms.loop import LOW_PRECISION_REASON
from .privatizers import GaussianPrivatizer

__all__ = [
    "clopper_pearson_upper", "epsilon_lower_bound", "max_certifiable_epsilon", "tradeoff_curve",
    "GDPEstimate", "gdp_estimate", "gaussian_mu_of_tests", "accountant_tradeoff", "gdp_mu_for_epsilon",
    "CanaryAudit", "gradient_canary_oracle", "module_batched_grad_fn", "gradient_canary_audit",
    "input_canary_audit",
    "one_run_p_value", "one_run_epsilon_lower_bound", "one_run_ceiling", "one_run_gradient_audit",
    "BrokenMeanNoisePrivatizer",
]

#: The estimators of :func:`epsilon_lower_bound` (the first is the default).
EPSILON_METHODS = ("clopper_pearson", "fdp")
#: The analyses of the one-run audit (:func:`one_run_epsilon_lower_bound`; the first is the default).
ONE_RUN_METHODS = ("steinke", "fdp")


def _check_method(method, valid: tuple) -> str:
    if not isinstance(method, str) or method not in valid:
        raise ValueError(f"method must be one of {valid}, got {method!r}")
    return method


# =========================================================================== the estimator
def clopper_pearson_upper(k, n, alpha):
    """One-sided Clopper–Pearson upper bound on a binomial rate.

    Source: Clopper & Pearson (1934); the error-rate bounds of the audit of Kairouz, Oh & Viswanath (2015), Thm 2.1.

    ``P(Bin(n, p) ≤ k) = alpha`` solved for ``p`` (``1`` when ``k = n``), so that
    ``P(p_true > U(K)) ≤ alpha`` for ``K ~ Bin(n, p_true)``. Vectorized over ``k``.
    """
    from scipy.stats import beta

    n = float(check_int(n, "n", minimum=1))
    try:
        k = np.asarray(k, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"k must be an integer count or an array of them, got {k!r}") from None
    if not np.all(np.isfinite(k)) or np.any(k != np.round(k)) or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"k must hold integer counts in [0, n] = [0, {int(n)}], got {k!r}")
    alpha = check_open_unit(alpha, "alpha")
    with np.errstate(all="ignore"):
        u = beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, u)


def _count_levels(m: int) -> np.ndarray:
    """Count levels of the union bound: 0..16, then a geometric grid (ratio 1.25), then m.

    A threshold whose error count is k is charged to the smallest level ≥ k
    (the Clopper–Pearson bound is monotone in k, so this only loosens it).
    """
    small = np.arange(0, min(m, 16) + 1)
    if m <= 16:
        return small
    geo = np.ceil(16 * 1.25 ** np.arange(1, math.ceil(math.log(m / 16) / math.log(1.25)) + 1))
    return np.unique(np.concatenate([small, np.minimum(geo, m).astype(int), [m]]))


def _as_scores(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must hold real scores, got a complex tensor ({x.dtype}); its imaginary part "
                            "would be dropped")
        x = x.detach().to("cpu", torch.float64).numpy()
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D tensor or array of real scores, got {type(x).__name__}") from None
    if raw.dtype.kind == "c":
        raise TypeError(f"{name} must hold real scores, got complex values ({raw.dtype}); their imaginary part "
                        "would be dropped")
    if raw.dtype.kind not in "biuf":    # strings, None, objects: not scores (np.asarray would parse "1.5")
        raise TypeError(f"{name} must be a 1-D tensor or array of real scores, got entries of dtype {raw.dtype}")
    a = raw.astype(np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D tensor or array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite; it holds {int((~np.isfinite(a)).sum())} NaN or inf entries")
    return a


def _check_delta(delta) -> float:
    d = check_nonnegative(delta, "delta")
    if d >= 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    return d


def _as_included(included, shape) -> np.ndarray:
    """The one-run audit's membership flags: booleans (or 0/1), one per canary, some in and some out."""
    if isinstance(included, torch.Tensor):
        included = included.detach().cpu().numpy()
    try:
        raw = np.asarray(included)
    except (TypeError, ValueError):
        raise ValueError(f"included must be booleans (or 0/1), one per canary, got {type(included).__name__}") from None
    if raw.dtype.kind in "iuf" and np.all((raw == 0) | (raw == 1)):
        raw = raw == 1
    if raw.dtype.kind != "b":
        raise ValueError(f"included must be booleans (or 0/1), one per canary (was canary i in the run?), "
                         f"got values such as {raw.ravel()[:4].tolist()!r}")
    if raw.shape != shape:
        raise ValueError(f"included must have the shape of scores {shape}, got {raw.shape}")
    if raw.all() or not raw.any():
        raise ValueError(f"included must mark some canaries in and some out (each is included with probability "
                         f"1/2 in the one-run audit), got all {'in' if raw.all() else 'out'} ({raw.size} canaries)")
    return raw


def _two_sided_count_levels(m: int) -> np.ndarray:
    """The count levels of :func:`_count_levels` below ``m / 2``, mirrored to ``m − k``, and ``m``.

    Dense at *both* ends: a count close to ``m`` (a test with few true negatives, say)
    is rounded up by at most a factor 1.25 on its complement ``m − k``, where
    :func:`_count_levels` could round it up to ``m`` itself and bound nothing.
    """
    low = _count_levels(m)
    low = low[low <= m // 2]
    return np.unique(np.concatenate([low, m - low, [m]]))


def _cp_upper_and_complement(k, n: int, alpha: float):
    """``(U, 1 − U)`` of the one-sided Clopper–Pearson upper bound U, each computed directly.

    ``1 − U(k; n)`` is the Clopper–Pearson *lower* bound on the complementary rate at
    count ``n − k`` (``Beta(n − k, k + 1)``'s α-quantile); computed so, it keeps its
    relative precision when U is within 1e-5 of 1 (a test with a few hundred true
    negatives out of 10⁷), where ``1 − U`` would lose digits.
    """
    from scipy.stats import beta

    k = np.asarray(k, dtype=float)
    with np.errstate(all="ignore"):
        u = beta.isf(alpha, k + 1.0, np.maximum(n - k, 1e-300))
        comp = beta.ppf(alpha, np.maximum(n - k, 1e-300), k + 1.0)
    full = k >= n
    return np.where(full, 1.0, u), np.where(full, 0.0, comp)


def _epsilon_from_rate_bounds(U_fp, U_fn, delta, comp_fp=None, comp_fn=None) -> float:
    """The largest ``max(log((1−δ−U_α)/U_β), log((1−δ−U_β)/U_α))`` over the tests, or 0.

    Kairouz, Oh & Viswanath (2015), Thm 2.1. ``comp_fp``, ``comp_fn``: ``1 − U_fp`` and ``1 − U_fn`` when
    computed more accurately than by the subtraction.
    """
    # 1 − δ − U, evaluated as the first audits did when no complement is given (same floats)
    slack_fp = 1.0 - delta - U_fp if comp_fp is None else comp_fp - delta
    slack_fn = 1.0 - delta - U_fn if comp_fn is None else comp_fn - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(slack_fp, 0.0)) - np.log(U_fn)
        e2 = np.log(np.maximum(slack_fn, 0.0)) - np.log(U_fp)
    best = np.max(np.maximum(e1, e2))
    return float(best) if np.isfinite(best) and best > 0 else 0.0


def _fdp_candidate_counts(s_in, s_out, lv_in, lv_out):
    """(false positives, false negatives) of the thresholds at which the ``"fdp"`` bound can peak.

    The bound on the FNR is a step function of the threshold t that changes only where the
    false-negative count crosses a level; on each step the bound ``log((1−δ−U_α)/U_β)`` is
    largest at the *highest* t (fewest false positives): ``t = s_in[L]`` for a level L. Likewise
    ``log((1−δ−U_β)/U_α)`` peaks just above ``s_out[n_out − 1 − L]``. Both families (and t = ±∞)
    are scored with both forms, so the maximum over these O(levels) thresholds equals the
    maximum over *all* thresholds, at the cost of a few binary searches instead of 2 × 10⁷.
    """
    n_in, n_out = s_in.size, s_out.size
    t = s_in[lv_in[lv_in < n_in]]                      # "in" iff score >= t
    fn1 = np.searchsorted(s_in, t, side="left")
    fp1 = n_out - np.searchsorted(s_out, t, side="left")
    v = s_out[n_out - 1 - lv_out[lv_out < n_out]]      # "in" iff score > v
    fn2 = np.searchsorted(s_in, v, side="right")
    fp2 = n_out - np.searchsorted(s_out, v, side="right")
    return (np.concatenate([fp1, fp2, [0, n_out]]).astype(np.int64),
            np.concatenate([fn1, fn2, [n_in, 0]]).astype(np.int64))


def _fdp_rate_bounds(fp, fn, n_in: int, n_out: int, confidence: float):
    """Simultaneous upper bounds ``(U_α, 1 − U_α, U_β, 1 − U_β)`` for tests with these error counts.

    Each count is charged to the smallest level ≥ it of :func:`_two_sided_count_levels`
    (Clopper–Pearson is monotone in the count, so this only loosens the bound); a Bonferroni
    split of ``1 − confidence`` over the levels of both sides makes all hold at once.
    """
    a = 1.0 - confidence
    lv_in, lv_out = _two_sided_count_levels(n_in), _two_sided_count_levels(n_out)
    u_out, c_out = _cp_upper_and_complement(lv_out, n_out, a / (2 * lv_out.size))
    u_in, c_in = _cp_upper_and_complement(lv_in, n_in, a / (2 * lv_in.size))
    i_out = np.searchsorted(lv_out, fp, side="left")
    i_in = np.searchsorted(lv_in, fn, side="left")
    return u_out[i_out], c_out[i_out], u_in[i_in], c_in[i_in]


def epsilon_lower_bound(scores_in, scores_out, *, delta, confidence=0.95, method="clopper_pearson") -> float:
    """A lower bound on ε, valid with probability ≥ ``confidence``, from membership scores.

    Source: Kairouz, Oh & Viswanath (2015), Thm 2.1; the audit of Jagielski, Ullman & Oprea (2020);
    ``method="fdp"``: the trade-off-curve view of the tight audit of Nasr et al. (2023), made sound for
    all thresholds at once.

    A mechanism that is (ε, δ)-DP forces every test of "canary in" against
    "canary out" to have false-positive rate α and false-negative rate β with
    (Kairouz, Oh, Viswanath 2015; Nasr et al. 2021)::

        α + e^ε β ≥ 1 − δ     and     β + e^ε α ≥ 1 − δ.

    For the test "guess *in* iff score ≥ t", with one-sided Clopper–Pearson
    upper bounds ``U_α(t)``, ``U_β(t)`` on its rates, the mechanism is not
    (ε, δ)-DP for any ε below ``max(log((1−δ−U_α)/U_β), log((1−δ−U_β)/U_α))``.
    This function returns the maximum of that over **all** thresholds t (every
    distinct score, vectorized), or 0 when nothing is certified.

    Multiple thresholds (why the maximum is valid): the bounds hold for every
    threshold *simultaneously*. A union (Bonferroni) bound runs over a fixed
    set J of error-count levels (0..16, then a geometric grid of ratio 1.25, then
    the sample size; about 40 levels for 2,000 runs), not over the data-chosen
    thresholds: if the false-positive rate of some threshold with ``k`` false
    positives exceeds ``U(j)`` for the smallest level ``j ≥ k``, then a fixed
    population threshold already had at most ``j`` false positives although its
    rate exceeds ``U(j)`` — an event of probability at most ``a``. With
    ``a = (1 − confidence) / (2 |J|)`` per level and side, all bounds hold at
    once with probability ≥ ``confidence``, whatever threshold the maximum picks.
    No held-out split is needed. (Jagielski et al. 2020 pick the threshold on the
    same data without a correction; that maximum is *not* a valid bound.)

    The two methods differ only in the levels J:

    * ``"clopper_pearson"`` (default): levels dense near 0 only. A test whose
      error count is close to the sample size — few *true* negatives, as in the
      tests that decide ε at small δ — is rounded up to a coarse level and bounds
      little; more runs can even lower this bound (μ = 1, δ = 1e-5: 52 % of the
      true ε at 10⁵ runs, 47 % at 10⁶).
    * ``"fdp"``: levels dense at **both** ends (``k`` and ``n − k`` for ``k`` on the
      grid above; about 2 |J|), so the simultaneous bounds ``(U_α(t), U_β(t))``
      form a confidence band for the whole trade-off curve
      ``f(α) = inf {β : a test with FPR α has FNR β}`` (Dong, Roth & Su 2022,
      Def. 2.1): with probability ≥ ``confidence``, ``f(U_α(t)) ≤ U_β(t)`` for
      every t. The ε returned is the largest ε whose (ε, δ) trade-off function
      ``f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α))`` lies above some
      point of the band — the same inversion. It is the sound bound of the tight
      audit: μ = 1, δ = 1e-5 (true ε 4.38) gives 0.72–0.76 × ε at 10⁶ runs per
      side and 0.80–0.84 × ε at 10⁷ over the seeds tried (the benchmark
      ``bench_audit_tight.py``). Computed from O(|J|) candidate thresholds that
      provably include the maximizer, so sorting each side dominates: about 2 s
      for 10⁷ + 10⁷ scores.

    Both methods are sound for any score distributions (continuous, discrete,
    with ties): nothing is assumed but independent runs on each side.

    Parameters
    ----------
    scores_in, scores_out : 1-D tensor or array
        A membership statistic (larger = more evidence that the canary was in)
        from independent runs with and without the canary. Any lengths.
    delta : float in [0, 1)
        The δ of the (ε, δ)-DP claim being tested.
    confidence : float in (0, 1)
        Probability that the returned value is at most the true ε.
    method : {"clopper_pearson", "fdp"}
        The union bound's levels (above). The default is the estimator of the
        lab's first audits, unchanged.

    Returns
    -------
    float
        The certified lower bound (≥ 0). Never above the truth, except with
        probability at most ``1 − confidence``.
    """
    method = _check_method(method, EPSILON_METHODS)
    s_in = np.sort(_as_scores(scores_in, "scores_in"))
    s_out = np.sort(_as_scores(scores_out, "scores_out"))
    d = _check_delta(delta)
    conf = check_open_unit(confidence, "confidence")
    n_in, n_out = s_in.size, s_out.size
    if method == "fdp":
        fp, fn = _fdp_candidate_counts(s_in, s_out, _two_sided_count_levels(n_in), _two_sided_count_levels(n_out))
        U_fp, comp_fp, U_fn, comp_fn = _fdp_rate_bounds(fp, fn, n_in, n_out, conf)
        return _epsilon_from_rate_bounds(U_fp, U_fn, d, comp_fp, comp_fn)
    thresholds = np.append(np.unique(np.concatenate([s_in, s_out])), np.inf)
    fp = n_out - np.searchsorted(s_out, thresholds, side="left")   # out-runs with score ≥ t
    fn = np.searchsorted(s_in, thresholds, side="left")            # in-runs with score < t
    alpha = 1.0 - conf
    lv_out, lv_in = _count_levels(n_out), _count_levels(n_in)
    u_out = clopper_pearson_upper(lv_out, n_out, alpha / (2 * lv_out.size))
    u_in = clopper_pearson_upper(lv_in, n_in, alpha / (2 * lv_in.size))
    U_fp = u_out[np.searchsorted(lv_out, fp, side="left")]
    U_fn = u_in[np.searchsorted(lv_in, fn, side="left")]
    return _epsilon_from_rate_bounds(U_fp, U_fn, d)


def max_certifiable_epsilon(n_in: int, n_out: int, *, delta, confidence=0.95, method="clopper_pearson") -> float:
    """The largest ε :func:`epsilon_lower_bound` can certify with these sample sizes.

    Source: the ceiling of the bound of Kairouz, Oh & Viswanath (2015), Thm 2.1, with Clopper–Pearson intervals.

    What a *perfect* attack (every run classified correctly) certifies: an audit
    with ``n`` runs per side cannot show more than about ``log(n / log(1/a))``.
    ``method`` as in :func:`epsilon_lower_bound`.
    """
    n_in = check_int(n_in, "n_in", minimum=1)
    n_out = check_int(n_out, "n_out", minimum=1)
    return epsilon_lower_bound(np.ones(n_in), np.zeros(n_out), delta=delta, confidence=confidence, method=method)


def tradeoff_curve(scores_in, scores_out, *, confidence=None):
    """The empirical trade-off curve of the threshold tests, or its simultaneous upper confidence bounds.

    Source: the trade-off function of Dong, Roth & Su (2022), Def. 2.1; the band of
    :func:`epsilon_lower_bound` with ``method="fdp"``.

    For every threshold t (each distinct score, and +∞), the test "guess *in* iff
    score ≥ t" has false-positive rate α(t) (out-runs with score ≥ t) and
    false-negative rate β(t) (in-runs with score < t). Plotted as β against α it
    estimates the attack's trade-off curve, which lies on or above the mechanism's own
    curve f (no test has a smaller β at the same α than the optimal one).

    With ``confidence`` (in (0, 1)), the returned rates are instead the simultaneous
    upper bounds ``U_α(t), U_β(t)`` of ``method="fdp"``: with probability ≥ ``confidence``
    the true rates of every threshold lie below them at once, so
    ``f(U_α(t)) ≤ f(α(t)) ≤ β(t) ≤ U_β(t)`` for all t — the mechanism's curve passes on or
    below every point of this band, which an (ε, δ) claim forbids wherever its ``f_{ε,δ}``
    lies above the point.

    Returns
    -------
    (alpha, beta) : two float arrays
        One entry per threshold, in increasing order of the threshold (α decreasing,
        β increasing).
    """
    s_in = np.sort(_as_scores(scores_in, "scores_in"))
    s_out = np.sort(_as_scores(scores_out, "scores_out"))
    n_in, n_out = s_in.size, s_out.size
    thresholds = np.append(np.unique(np.concatenate([s_in, s_out])), np.inf)
    fp = n_out - np.searchsorted(s_out, thresholds, side="left")
    fn = np.searchsorted(s_in, thresholds, side="left")
    if confidence is None:
        return fp / n_out, fn / n_in
    conf = check_open_unit(confidence, "confidence")
    U_fp, _, U_fn, _ = _fdp_rate_bounds(fp, fn, n_in, n_out, conf)
    return U_fp, U_fn


# =========================================================================== Gaussian DP estimate
def _gdp_epsilon(mu: float, delta) -> float:
    """ε(δ) of μ-GDP: the Gaussian mechanism with sensitivity 1 and σ = 1/μ (Dong et al. 2022, Cor. 2.13)."""
    d = check_open_unit(delta, "delta")
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    return float(analytic_gaussian_epsilon(1.0 / mu, d))


@dataclass(frozen=True)
class GDPEstimate:
    """An **estimate** of the Gaussian-DP parameter μ of the audited mechanism, with its confidence interval.

    Source: Dong, Roth & Su (2022), Def. 2.6 (μ-GDP) and Cor. 2.13 (its ε(δ)); the GDP
    view of the tight audit of Nasr et al. (2023). Built by :func:`gdp_estimate`.

    Not a bound. The estimate assumes that the attack's trade-off curve *is* a
    Gaussian one, ``G_μ(α) = Φ(Φ⁻¹(1 − α) − μ)``, and reads μ off its area; where
    the curve is not Gaussian (Poisson-subsampled DP-SGD with few expected draws of
    the canary, ``q T ≈ 1``) the estimate describes the bulk of the curve, not the
    tails that decide ε at small δ, and its ε(δ) can be far from the mechanism's.

    Attributes
    ----------
    mu : float
        μ̂ ≥ 0 (a negative raw estimate — scores that rank the out-runs higher — is
        reported as 0).
    ci : (float, float)
        The two-sided confidence interval for μ at ``confidence`` (asymptotic, see
        :func:`gdp_estimate`), clipped at 0.
    confidence : float
    auc : float
        The area under the attack's ROC curve, ``P(score_in > score_out)`` (ties ½).
    se : float
        The standard error of μ̂ (delta method).
    n_in, n_out : int
        The sample sizes.
    """

    mu: float
    ci: tuple
    confidence: float
    auc: float
    se: float
    n_in: int
    n_out: int

    def epsilon(self, delta) -> float:
        """The ε(δ) that μ̂-GDP implies (an estimate under the Gaussian-trade-off assumption), δ in (0, 1)."""
        return _gdp_epsilon(self.mu, delta)

    def epsilon_interval(self, delta) -> tuple:
        """``(ε(δ) at the lower end of the μ interval, ε(δ) at its upper end)`` — same assumption."""
        return _gdp_epsilon(self.ci[0], delta), _gdp_epsilon(self.ci[1], delta)


def gdp_estimate(scores_in, scores_out, *, confidence=0.95) -> GDPEstimate:
    """Estimate the Gaussian-DP μ of a mechanism from membership scores, with a confidence interval.

    Source: Dong, Roth & Su (2022), Def. 2.6 and Cor. 2.13; the GDP view of the audit of Nasr et al. (2023);
    the variance of the area under an ROC curve of DeLong, DeLong & Clarke-Pearson (1988).

    **An estimate under an assumption, not a bound.** If the trade-off curve of the
    test "in iff score ≥ t" is the Gaussian one ``G_μ`` — the scores are (a monotone
    transform of) N(μ, 1) against N(0, 1), as for the Gaussian mechanism, full-batch
    DP-GD or any mechanism whose privacy loss is Gaussian — then the area under the
    attack's ROC curve is ``AUC = P(score_in > score_out) = Φ(μ / √2)``, so

        μ̂ = √2 Φ⁻¹(AUC),

    with AUC the Mann–Whitney statistic (ties count ½). Why the area and not the
    means and standard deviations of the scores: AUC depends on the ROC curve only,
    so μ̂ is the same for the raw scores, their log-likelihood ratios or any other
    monotone transform (the white-box ``"all"`` score of :func:`gradient_canary_audit`
    is a likelihood ratio whose distribution is far from normal), and it needs no
    choice of threshold. It weighs the whole curve: for a non-Gaussian curve it is the
    μ of the *bulk* of the curve (for Poisson-subsampled DP-SGD, close to the central-limit
    μ = q √(T (e^{1/z²} − 1)) of Dong et al. 2022), not of its tails. Where ε at small δ
    is decided in the tails, ``epsilon(delta)`` can be far off: white-box DP-SGD with
    z = 1, q = 0.01, T = 100 gives μ̂ ≈ 0.13 and ε̂(1e-5) ≈ 0.48 against the PLD
    accountant's 0.72 (``benchmarks/bench_audit_tight.py``); full-batch DP-GD, whose curve
    is Gaussian, is recovered to within its interval.

    Confidence interval (no bootstrap): DeLong's variance of the AUC,
    ``Var = Var(V10)/n_in + Var(V01)/n_out`` with ``V10_i`` the fraction of out-scores below
    in-score i and ``V01_j`` the fraction of in-scores above out-score j, carried to μ by the
    delta method (``dμ/dAUC = √2 / φ(Φ⁻¹(AUC))``): ``μ̂ ± z se``, z the normal quantile of
    ``(1 + confidence)/2``. Asymptotic: its coverage is close to nominal from a few hundred
    runs per side on a Gaussian curve (tested), looser for strongly separated scores.

    Parameters
    ----------
    scores_in, scores_out : 1-D tensor or array
        At least 2 scores each, finite; larger = more evidence for "in".
    confidence : float in (0, 1)

    Returns
    -------
    GDPEstimate
        ``mu``, ``ci``, ``auc``, ``se``; ``epsilon(delta)`` and ``epsilon_interval(delta)``
        give the ε(δ) the estimate implies, via the lab's analytic Gaussian mechanism
        (:func:`dpclip_lab.accountants.analytic_gaussian_epsilon` with σ = 1/μ).

    Raises
    ------
    ValueError
        For fewer than 2 scores on a side, and for degenerate scores: all equal (no
        information), or perfectly separated (AUC = 1 or 0: μ̂ = ±∞ — use more runs,
        or :func:`epsilon_lower_bound`, which stays finite).
    """
    from scipy.special import ndtri

    s_in = np.sort(_as_scores(scores_in, "scores_in"))
    s_out = np.sort(_as_scores(scores_out, "scores_out"))
    conf = check_open_unit(confidence, "confidence")
    n_in, n_out = s_in.size, s_out.size
    for name, n in (("scores_in", n_in), ("scores_out", n_out)):
        if n < 2:
            raise ValueError(f"{name} must hold at least 2 scores for a variance, got {n}")
    if s_in[0] == s_in[-1] == s_out[0] == s_out[-1]:
        raise ValueError("scores_in and scores_out are degenerate: every score equals "
                         f"{s_in[0]!r}, so they carry no information about membership")
    if s_in[0] > s_out[-1] or s_in[-1] < s_out[0]:
        side = "above" if s_in[0] > s_out[-1] else "below"
        raise ValueError(f"scores_in and scores_out are degenerate: every in-score lies {side} every out-score "
                         f"(AUC = {1 if side == 'above' else 0}), so μ̂ would be infinite; use more runs, "
                         "or epsilon_lower_bound, which stays finite")
    # placements (DeLong et al. 1988): V10_i = P(out < x_i) + ½ P(out = x_i), V01_j = P(in > y_j) + ½ P(in = y_j)
    v10 = (np.searchsorted(s_out, s_in, side="left") + np.searchsorted(s_out, s_in, side="right")) / (2.0 * n_out)
    v01 = 1.0 - (np.searchsorted(s_in, s_out, side="left")
                 + np.searchsorted(s_in, s_out, side="right")) / (2.0 * n_in)
    auc = float(v10.mean())
    var = float(v10.var(ddof=1) / n_in + v01.var(ddof=1) / n_out)
    z = float(ndtri(auc))
    mu_raw = math.sqrt(2.0) * z
    se = math.sqrt(2.0) * math.sqrt(var) / (math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi))
    if not (se > 0 and math.isfinite(se)):
        raise ValueError(f"scores_in and scores_out are degenerate: the AUC {auc!r} has no spread to estimate "
                         "a confidence interval from")
    half = float(ndtri(0.5 + conf / 2.0)) * se
    return GDPEstimate(mu=max(mu_raw, 0.0), ci=(max(mu_raw - half, 0.0), max(mu_raw + half, 0.0)),
                       confidence=conf, auc=auc, se=se, n_in=n_in, n_out=n_out)


def _at_least_1d(x):
    """A scalar as a one-entry array; anything else unchanged (for :func:`_as_scores` to check)."""
    if isinstance(x, torch.Tensor):
        return x.reshape(1) if x.dim() == 0 else x
    raw = np.asarray(x) if not isinstance(x, (list, tuple)) else x
    return raw.reshape(1) if isinstance(raw, np.ndarray) and raw.ndim == 0 else raw


def _as_rates(x, name: str) -> np.ndarray:
    """A non-empty, finite 1-D array of error rates, every entry in [0, 1]."""
    a = _as_scores(x, name)
    if a.min() < 0.0 or a.max() > 1.0:
        raise ValueError(f"{name} must hold error rates in [0, 1], got values from {a.min()!r} to {a.max()!r}")
    return a


def gaussian_mu_of_tests(alpha, beta, at=None):
    """The "Gaussian μ view" of a trade-off curve: the μ of the Gaussian curve through each test.

    Source: Dong, Roth & Su (2022), Def. 2.6 (the Gaussian trade-off function ``G_μ``); the
    Gaussian reading of an audit's tests in the tight audit of Nasr et al. (2023).

    The Gaussian trade-off curve ``G_μ(α) = Φ(Φ⁻¹(1 − α) − μ)`` passes through the test
    (α, β) for exactly one μ,

        μ = Φ⁻¹(1 − β) − Φ⁻¹(α),

    so in this view a Gaussian curve is a flat line at its μ, and a curve that rises toward
    small α has a heavier tail than any ``G_μ`` with the same area (Poisson-subsampled DP-SGD
    with few expected draws of the canary).

    Parameters
    ----------
    alpha, beta : 1-D array or tensor
        The false-positive and false-negative rates of the tests, in [0, 1], of one shape
        (e.g. what :func:`tradeoff_curve` returns).
    at : float or 1-D array, optional
        False-positive rates in [0, 1] at which to read the curve: for each, the test with the
        largest α not above it (of those, the one with the smallest β); a test picked twice is
        returned once. Default: every test.

    Returns
    -------
    alpha : ndarray
        The α of the tests kept, in decreasing order. Tests with α or β at 0 or 1 (an infinite
        or undefined μ) are left out, so the result can be empty.
    mu : ndarray
        Their μ, one per kept test (negative where the test is worse than guessing).

    Raises
    ------
    ValueError
        If ``alpha``, ``beta`` or ``at`` is empty, not 1-D, holds NaN or inf, or holds a rate
        outside [0, 1], or if ``alpha`` and ``beta`` differ in shape.
    """
    from scipy.special import ndtri

    a = _as_rates(alpha, "alpha")
    b = _as_rates(beta, "beta")
    if a.shape != b.shape:
        raise ValueError(f"alpha and beta must have the same shape (one test each), got {a.shape} and {b.shape}")
    order = np.lexsort((b, -a))                       # α decreasing, ties by β increasing
    a, b = a[order], b[order]
    if at is None:
        idx = np.arange(a.size)
    else:
        fpr = _as_rates(_at_least_1d(at), "at")
        idx = np.unique(np.searchsorted(-a, -fpr, side="left"))      # the first test with α ≤ each rate
        idx = idx[idx < a.size]
    a, b = a[idx], b[idx]
    keep = (a > 0) & (a < 1) & (b > 0) & (b < 1)
    return a[keep], ndtri(1.0 - b[keep]) - ndtri(a[keep])


def accountant_tradeoff(event, alpha, *, steps: int = 1, epsilons=81, value_discretization_interval=1e-3):
    """The trade-off curve the PLD accountant certifies for ``event``: the envelope of its (ε, δ(ε)) curves.

    Source: Dong, Roth & Su (2022), Prop. 2.12 (a mechanism that is (ε, δ(ε))-DP for every ε
    is f-DP with f the upper envelope of the ``f_{ε,δ(ε)}``), with δ(ε) from the lab's
    :class:`~dpclip_lab.accountants.PLDAccountant` (Zhu, Dong & Wang 2022, Prop. 30).

    Every pair (ε, δ(ε)) the accountant reports is a valid DP guarantee, so the true
    trade-off curve f of the mechanism lies above each

        f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε} (1 − δ − α)),

    and above their pointwise maximum over the ε of a grid, which is returned. **The result
    never lies above the true curve** (a curve above it would understate the privacy loss):
    the PLD accountant's δ(ε) is an upper bound (it rounds towards larger δ), and a finite
    grid of ε only lowers the envelope. It lies below the true curve by the discretization:
    the spacing of the ε grid (the tests between two grid points are bounded by the
    nearer pair) and the accountant's grid ``value_discretization_interval`` (on the
    Gaussian mechanism with μ ≤ 2, within 0.01 of ``G_μ`` on the default grid: tested).
    No test of any attack can beat it, so an audit's trade-off curve lies on or above it
    up to sampling error, and its area is at most this curve's.

    Parameters
    ----------
    event : DpEvent
        A privacy event the PLD accountant composes (``GaussianEvent``, ``LaplaceEvent``,
        ``PoissonSampledEvent`` of either, compositions of them; see
        :class:`~dpclip_lab.accountants.PLDAccountant`), e.g. a lab run's ``dp_event()``.
    alpha : float or 1-D array
        False-positive rates in [0, 1] at which to evaluate the curve.
    steps : int
        The event is composed ``steps`` ≥ 1 times.
    epsilons : int or 1-D array
        The ε grid: an int ≥ 2 is that many ε evenly spaced on ``[0, 3 ε(10⁻⁵) + 2]``, with
        ε(10⁻⁵) the accountant's own; or the ε values themselves (finite, ≥ 0).
    value_discretization_interval : float
        The PLD accountant's grid spacing of the privacy loss (> 0).

    Returns
    -------
    ndarray
        The certified false-negative rate f(α) at each ``alpha``, in [0, 1] (1-D, one per α).

    Raises
    ------
    ValueError
        If ``alpha`` is empty, not 1-D, holds NaN or inf or a rate outside [0, 1]; if
        ``steps`` < 1; if ``epsilons`` is an int < 2 or holds a negative, NaN or inf ε; if
        the PLD accountant does not support ``event``.
    """
    from .accountants.pld import PLDAccountant

    a = _as_rates(_at_least_1d(alpha), "alpha")
    steps = check_int(steps, "steps", minimum=1)
    h = check_positive(value_discretization_interval, "value_discretization_interval")
    acc = PLDAccountant(value_discretization_interval=h).compose(event, steps)
    if isinstance(epsilons, (int, np.integer)) and not isinstance(epsilons, bool):
        k = check_int(epsilons, "epsilons", minimum=2)
        top = acc.get_epsilon(1e-5)
        eps = np.linspace(0.0, 3.0 * top + 2.0 if math.isfinite(top) else 50.0, k)
    else:
        eps = _as_scores(epsilons, "epsilons")
        if eps.min() < 0:
            raise ValueError(f"epsilons must be ≥ 0 (finite), got {eps.min()!r}")
    d = np.array([acc.get_delta(float(e)) for e in eps])
    f = np.maximum(1.0 - d - np.exp(eps) * a[:, None], np.exp(-eps) * (1.0 - d - a[:, None]))
    return np.clip(f.max(axis=1), 0.0, 1.0)


def gdp_mu_for_epsilon(epsilon, delta) -> float:
    """The μ of the μ-GDP mechanism whose ε at ``delta`` is ``epsilon``: the inverse of μ ↦ ε(δ).

    Source: Dong, Roth & Su (2022), Cor. 2.13 (ε(δ) of μ-GDP is that of the Gaussian
    mechanism with σ = 1/μ), inverted with the analytic Gaussian mechanism of Balle & Wang
    (2018), Alg. 1 (:func:`dpclip_lab.accountants.analytic_gaussian_sigma`).

    ``μ = 1 / σ(ε, δ)``, σ the smallest noise for which the Gaussian mechanism with
    sensitivity 1 is (ε, δ)-DP. σ is rounded up, so μ is rounded down: μ-GDP is (ε, δ)-DP.
    The inverse of :meth:`GDPEstimate.epsilon` (round trip to float precision: tested).

    Parameters
    ----------
    epsilon : float
        ε in (0, inf).
    delta : float
        δ in (0, 1).

    Returns
    -------
    float
        μ > 0.

    Raises
    ------
    ValueError
        If ``epsilon`` is not in (0, inf) or ``delta`` not in (0, 1) (NaN included).
    """
    from .accountants.gaussian import analytic_gaussian_sigma

    epsilon = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    return 1.0 / float(analytic_gaussian_sigma(epsilon, delta))


# =========================================================================== canary audits
@dataclass
class CanaryAudit:
    """The scores of a batched canary audit and what they certify.

    Source: the audits of Jagielski, Ullman & Oprea (2020) and Nasr et al. (2021), bounded by Kairouz, Oh & Viswanath (2015), Thm 2.1.

    Attributes
    ----------
    algorithm, canary : str
        What was audited, and the canary ("gradient" or "input").
    steps : ndarray[K]
        The checkpoints t (number of steps) at which the runs were scored.
    scores_in, scores_out : dict[str, Tensor[runs, K]]
        Per observation (``"last"``: the iterate θ_t alone; ``"all"``: every
        iterate θ_0..θ_t), the membership score of each run at each checkpoint.
    delta, confidence : float
    accountant_epsilon : ndarray[K] or None
        The lab's (valid) accountant ε at each checkpoint.
    extra : dict
        Anything else (the paper's claimed ε for DiceSGD, z, q, ...).
    """

    algorithm: str
    canary: str
    steps: np.ndarray
    scores_in: dict
    scores_out: dict
    delta: float
    confidence: float
    accountant_epsilon: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    def epsilon_lower(self, observe: str = "all", step: int | None = None, method: str = "clopper_pearson") -> float:
        """The certified lower bound for one observation at one checkpoint (default: the last).

        ``method`` as in :func:`epsilon_lower_bound` (``"fdp"``: the tight audit's sound bound).
        """
        s_in, s_out = self._scores(observe, step)
        return epsilon_lower_bound(s_in, s_out, delta=self.delta, confidence=self.confidence, method=method)

    def epsilon_lower_curve(self, observe: str = "all", method: str = "clopper_pearson") -> np.ndarray:
        """The certified lower bound at every checkpoint (``[K]``)."""
        return np.array([self.epsilon_lower(observe, int(t), method=method) for t in self.steps])

    def gdp_estimate(self, observe: str = "all", step: int | None = None) -> GDPEstimate:
        """The Gaussian-DP estimate (:func:`gdp_estimate`) of one observation at one checkpoint, at ``confidence``.

        An estimate under the Gaussian-trade-off assumption, not a bound; ``.epsilon(self.delta)``
        is the ε it implies, to set next to :attr:`epsilon_accountant`.
        """
        s_in, s_out = self._scores(observe, step)
        return gdp_estimate(s_in, s_out, confidence=self.confidence)

    def _scores(self, observe, step):
        if observe not in self.scores_in:
            raise ValueError(f"observe must be one of {tuple(self.scores_in)}, got {observe!r}")
        k = self._index(step)
        return self.scores_in[observe][:, k], self.scores_out[observe][:, k]

    @property
    def epsilon_accountant(self) -> float:
        """The accountant's ε after the last checkpoint."""
        return float(self.accountant_epsilon[-1]) if self.accountant_epsilon is not None else math.nan

    @property
    def epsilon_ceiling(self) -> float:
        """The largest ε these sample sizes can certify (:func:`max_certifiable_epsilon`)."""
        any_obs = next(iter(self.scores_in))
        return max_certifiable_epsilon(self.scores_in[any_obs].shape[0], self.scores_out[any_obs].shape[0],
                                       delta=self.delta, confidence=self.confidence)

    def _index(self, step):
        if step is None:
            return len(self.steps) - 1
        hits = np.nonzero(self.steps == int(step))[0]
        if hits.size == 0:
            raise ValueError(f"step must be one of the checkpoints {self.steps.tolist()}, got {step!r}")
        return int(hits[0])

    def __repr__(self) -> str:
        return (f"CanaryAudit(algorithm={self.algorithm!r}, canary={self.canary!r}, runs in/out="
                f"{next(iter(self.scores_in.values())).shape[0]}/{next(iter(self.scores_out.values())).shape[0]}, "
                f"steps={self.steps.tolist()[-1]}, accountant ε={self.epsilon_accountant:.3g})")


def gradient_canary_oracle(in_run: torch.Tensor, canary_gradient: torch.Tensor, *, canary_index: int = 0,
                           other_gradient: torch.Tensor | None = None, base_grad_fn=None):
    """Lab utility: A batched per-example gradient oracle with a crafted canary gradient.

    Example ``canary_index`` has gradient ``canary_gradient`` in the runs where
    ``in_run`` is True and 0 elsewhere; every other example has gradient
    ``other_gradient`` (default 0: the strongest setting for the auditor), or,
    with ``base_grad_fn``, its real gradient (a batched oracle, e.g.
    :func:`module_batched_grad_fn` of a small network). Signature as
    :class:`dpclip_lab.algorithms.oracles.CallableOracle` expects for ``R > 1``
    runs: ``(theta[R, p], idx[R, m] or [m]) -> [R, m, p]``.
    """
    if not isinstance(canary_gradient, torch.Tensor) or not bool(torch.isfinite(canary_gradient).all()):
        raise ValueError("canary_gradient must be a finite tensor (no NaN or inf entries)")
    if not isinstance(in_run, torch.Tensor) or in_run.dim() != 1:
        raise ValueError(f"in_run must be a 1-D tensor (one flag per run), got {getattr(in_run, 'shape', in_run)!r}")
    g = canary_gradient.reshape(-1)
    if other_gradient is not None and (other_gradient.numel() != g.numel()
                                       or not bool(torch.isfinite(other_gradient).all())):
        raise ValueError(f"other_gradient must be a finite tensor with {g.numel()} entries like canary_gradient")
    o = None if other_gradient is None else other_gradient.reshape(-1).to(g)
    member = in_run.to(device=g.device, dtype=torch.bool)

    def grad_fn(theta, idx):
        R = theta.shape[0]
        if idx.dim() == 1:
            idx = idx.unsqueeze(0).expand(R, -1)
        is_canary = idx == canary_index
        G = (is_canary & member.unsqueeze(1)).to(theta.dtype).unsqueeze(-1) * g.to(theta)
        if o is not None:
            G = G + (~is_canary).to(theta.dtype).unsqueeze(-1) * o.to(theta)
        if base_grad_fn is not None:
            G = G + (~is_canary).to(theta.dtype).unsqueeze(-1) * base_grad_fn(theta, idx)
        return G

    return grad_fn


def module_batched_grad_fn(model: torch.nn.Module, loss_fn, inputs: torch.Tensor, targets: torch.Tensor):
    """Lab utility: Per-example gradients of a small ``nn.Module`` for ``R`` runs at once.

    ``(theta[R, n_params], idx[R, m]) -> [R, m, n_params]``: ``vmap`` over runs of
    ``vmap`` over examples of ``grad`` of the functional model (``torch.func``),
    with the parameters as one flat vector per run (the column order of
    :func:`dpclip_lab.per_sample_grads`). ``loss_fn(outputs[1, ...], targets[1])``
    must return a scalar. For audits of many runs of a small network; the lab's
    :func:`dpclip_lab.training.module_grad_fn` handles one run of any size.
    """
    from torch.func import functional_call, grad, vmap

    from .per_sample import unflatten

    if inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"targets must have one entry per input: inputs has {inputs.shape[0]} rows, "
                         f"targets {targets.shape[0]}")

    def loss_one(flat, x, y):
        out = functional_call(model, unflatten(model, flat), (x.unsqueeze(0),))
        return loss_fn(out, y.unsqueeze(0))

    flat_vmap = vmap(grad(loss_one))    # one vmap over (run, example) pairs: faster than two nested

    def grad_fn(theta, idx):
        R, p = theta.shape
        if idx.dim() == 1:
            idx = idx.unsqueeze(0).expand(R, -1)
        m = idx.shape[1]
        th = theta.unsqueeze(1).expand(R, m, p).reshape(R * m, p)
        flat_idx = idx.reshape(-1)
        return flat_vmap(th, inputs[flat_idx], targets[flat_idx]).reshape(R, m, p)

    return grad_fn


_ALGORITHMS = ("dp_sgd", "dp_gd", "dice_sgd", "adaptive")
_AUDIT_DTYPES = (torch.float32, torch.float64)


def _check_audit_dtype(dtype, name: str):
    """An audit runs in float32 or float64: 16-bit rounding breaks the sensitivity argument it tests."""
    if dtype not in _AUDIT_DTYPES:
        raise ValueError(
            f"{name} must be torch.float32 or torch.float64 for an audit, got {dtype}: {LOW_PRECISION_REASON} "
            "(nor what the audit tests). An audit must run in float32/float64")
    return dtype


def _check_accountant(accountant):
    from .accountants.calibration import ACCOUNTANTS
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return accountant


def _resolve_sampling(algorithm, sampling, batch_size, n):
    """The audited runs' sampling scheme: DP-GD's is always the full batch; the others default to Poisson.

    A ``sampling`` or ``batch_size`` that DP-GD would ignore is an error, not a silent no-op.
    """
    if algorithm == "dp_gd":
        if sampling not in (None, "full"):
            raise ValueError(f"sampling must be None or 'full' for algorithm='dp_gd' (DP-GD uses every example "
                             f"at every step; use 'dp_sgd' for sampled batches), got {sampling!r}")
        if batch_size is not None and batch_size != n:
            raise ValueError(f"batch_size must be None (or n = {n}) for algorithm='dp_gd' (DP-GD uses every "
                             f"example at every step), got {batch_size!r}")
        return "full"
    return "poisson" if sampling is None else sampling


def _calibration_seed(seed):
    """A seed for the calibration runs whose stream is independent of the audited runs' (seed ``s``)."""
    if seed is None or isinstance(seed, torch.Generator):
        return seed                  # fresh entropy, or the continuation of the generator's stream
    return int(np.random.SeedSequence([check_int(seed, "seed"), 0xCA11B]).generate_state(1)[0])


def _checkpoints(checkpoints, steps):
    if checkpoints is None:
        return np.array([steps])
    c = np.unique(np.asarray([check_int(t, "checkpoints", minimum=1) for t in np.ravel(checkpoints)]))
    if c[-1] > steps:
        raise ValueError(f"checkpoints must lie in [1, steps = {steps}], got {c[-1]}")
    return c


def _run_algorithm(algorithm, grad_fn, theta0, *, n, steps, lr, clip_norm, noise_multiplier, batch_size,
                   sampling, feedback_clip_norm, privatizer, seed, adaptive_kwargs):
    """Run one of the lab's algorithms (or a bare privatizer in the loop); return (result-like, info)."""
    from . import algorithms as alg

    common = dict(n=n, steps=steps, lr=lr, seed=seed, progress=False)
    if privatizer is not None:
        from .sampling import make_sampler
        sampler = make_sampler(sampling, n, batch_size)
        traj = alg.run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer, seed=seed,
                       progress=False)
        return traj.iterates, traj.history, dict(q=sampler.sample_rate, b=sampler.batch_size,
                                                 z=privatizer.noise_multiplier, result=None)
    if algorithm == "dp_gd":
        res = alg.dp_gd(grad_fn, theta0, clip_norm=clip_norm, noise_multiplier=noise_multiplier, **common)
        z_grad = noise_multiplier
    elif algorithm == "dp_sgd":
        res = alg.dp_sgd(grad_fn, theta0, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                         batch_size=batch_size, sampling=sampling, **common)
        z_grad = noise_multiplier
    elif algorithm == "dice_sgd":
        res = alg.dice_sgd(grad_fn, theta0, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                           feedback_clip_norm=clip_norm if feedback_clip_norm is None else feedback_clip_norm,
                           batch_size=batch_size, sampling=sampling, **common)
        z_grad = noise_multiplier
    elif algorithm == "adaptive":
        res = alg.dp_sgd_adaptive_clipping(grad_fn, theta0, initial_clip_norm=clip_norm,
                                           noise_multiplier=noise_multiplier, batch_size=batch_size,
                                           sampling=sampling, **(adaptive_kwargs or {}), **common)
        z_grad = res.extra["gradient_noise_multiplier"]
    else:
        raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")
    iterates = res.iterates
    res.iterates = None
    return iterates, res.history, dict(q=res.sample_rate, b=res.batch_size, z=z_grad, result=res)


def _accountant_curve(info, steps_at, delta, accountant):
    """ε of the audited run's *own* event after each checkpoint (None for a bare privatizer: no accountant).

    ``dataclasses.replace(result, steps=t).dp_event()`` is the event the algorithm's own record
    reports for its first t steps — its sampling scheme and neighbouring relation (shuffle,
    sampling with replacement), DiceSGD's sensitivity, adaptive clipping's count — composed by
    the named accountant. The audit compares against exactly what the lab would report.
    """
    res = info["result"]
    if res is None:
        return None
    from .accountants.calibration import make_accountant

    return np.array([float(make_accountant(accountant).compose(dataclasses.replace(res, steps=int(t)).dp_event())
                           .get_epsilon(delta)) for t in steps_at])


def _mixture_llr(d, signal, sigma, q):
    """log-likelihood ratio of ``q N(s, σ²) + (1−q) N(0, σ²)`` against ``N(0, σ²)`` at ``d``."""
    z = (2 * d * signal - signal ** 2) / (2 * sigma ** 2)
    if q >= 1:
        return z
    return torch.logaddexp(torch.full_like(z, math.log1p(-q)), math.log(q) + z)


def _steps_along(iterates, history, coordinate, b, lr, C):
    """The iterates along u ``[R, T+1]``, the steps on the scale of the noisy sum ``[R, T]`` and each step's C_s."""
    proj = iterates[..., coordinate]
    d = (proj[:, :-1] - proj[:, 1:]) * b / lr
    C_t = history.get("clip_norm")
    if C_t is None or C_t.shape != d.shape:
        C_t = torch.full_like(d, C)
    return proj, d, C_t


def gradient_canary_audit(algorithm: str = "dp_sgd", *, runs: int, steps: int, noise_multiplier: float, n: int,
                          batch_size: int | None = None, sampling: str | None = None, clip_norm: float = 1.0,
                          canary_norm: float | None = None, feedback_clip_norm: float | None = None,
                          privatizer=None, other_gradient: float = 0.0, base_grad_fn=None, theta0=None,
                          coordinate: int = 0, lr: float = 1.0, dim: int = 1,
                          delta: float = 1e-5, confidence: float = 0.95, checkpoints=None, seed: int = 0,
                          accountant: str = "rdp", adaptive_kwargs: dict | None = None,
                          dtype=torch.float64, calibration_runs: int | None = None) -> CanaryAudit:
    """Audit a lab algorithm with a gradient canary, ``2 × runs`` runs as one tensor program.

    Source: the white-box gradient canaries of Nasr et al. (2021), bounded by Kairouz, Oh & Viswanath (2015), Thm 2.1.

    Example 0 (the canary) has the per-example gradient ``canary_norm · u``
    (``u = e_coordinate``, a "Dirac" canary on one parameter) in the first
    ``runs`` runs and 0 in the other ``runs``; all other examples have gradient
    ``other_gradient · u`` (default 0), or their real gradients from
    ``base_grad_fn`` (a small network: :func:`module_batched_grad_fn`). The scores:

    * ``"last"``: ``⟨θ_0 − θ_t, u⟩`` — the iterate alone (black-box on θ_t);
    * ``"all"``: ``Σ_s log LR(d_s)`` with ``d_s = ⟨θ_s − θ_{s+1}, u⟩ b/η``, the
      likelihood ratio of a step with the canary sampled with probability q
      (signal ``min(G, C_s)``) against a step without it, at the noise level
      ``ẑ C_s`` the code was **observed** to add (``C_s`` from the run's history
      for adaptive clipping).

    The noise level of the ``"all"`` score is not taken from the claim: an audit
    tests the code, and a statistic built on the claimed ``z`` is mis-specified
    exactly when the code is wrong (a privatizer whose noise is ``b`` times too
    small escapes it at small batches). Besides the audited runs, ``calibration_runs``
    more runs *without* the canary, with randomness independent of the audited
    runs (a seed derived from ``seed``), measure the mean ``m̂`` and the spread ``ẑ``
    of ``d_s / C_s`` — pure noise when the other gradients are 0 — and the score
    uses ``d_s − m̂ C_s`` and ``ẑ C_s``. Given the calibration runs the score is a
    fixed function of each audited run's own iterates up to the checkpoint, so the
    runs' scores stay independent and identically distributed on each side and
    :func:`epsilon_lower_bound` stays valid whatever was measured. For DP-SGD with
    Poisson sampling it is the optimal (Neyman–Pearson) test of the steps at the
    noise level the code really has (up to the ~1% error of ``ẑ``); for other
    methods a valid, not necessarily optimal, statistic.

    Parameters
    ----------
    algorithm : {"dp_sgd", "dp_gd", "dice_sgd", "adaptive"}
        Ignored when ``privatizer`` is given (then the bare loop runs with it and
        no accountant ε is reported; put the claimed ε in ``extra`` yourself).
    runs : int
        Runs per side (with / without the canary).
    sampling : {"poisson", "shuffle", "with_replacement", "full"}, optional
        Default ``"poisson"``; DP-GD always uses the full batch (``None`` or
        ``"full"``; anything else is an error, as is a ``batch_size`` other than n).
    canary_norm : float, optional
        ``G = ‖canary gradient‖``; default ``clip_norm`` (any G ≥ C is clipped to C).
    dim : int
        The model dimension p when ``theta0`` is not given (θ_0 = 0).
    base_grad_fn : callable, optional
        Batched per-example gradients of the other examples,
        ``(theta[R, p], idx[R, m]) -> [R, m, p]``; the canary's slot is overwritten.
    theta0 : Tensor[p], optional
        The common starting point (e.g. a network's initial parameters), float32 or float64.
    coordinate : int
        The parameter the canary gradient points along.
    checkpoints : ints in [1, steps], optional
        Steps at which to score (default: only ``steps``).
    accountant : {"rdp", "pld"}
        Composes the audited run's own event, ``result.dp_event()`` of the first t
        steps (its sampling scheme, DiceSGD's sensitivity, adaptive clipping's count).
    dtype : torch.float32 or torch.float64
        Of θ_0 when ``theta0`` is not given. 16-bit runs are refused: their rounding
        breaks the sensitivity argument the audit tests.
    calibration_runs : int, optional
        Canary-free runs that measure the noise level of the ``"all"`` score;
        default ``min(runs, ⌈4096 / steps⌉)`` (about 4,000 noise samples).

    Returns
    -------
    CanaryAudit
        ``extra`` holds the claimed ``noise_multiplier``, the ``observed_noise_multiplier``
        ``ẑ``, the ``sampling`` scheme and the number of ``calibration_runs``.
    """
    runs = check_int(runs, "runs", minimum=2)
    steps = check_int(steps, "steps", minimum=1)
    _check_audit_dtype(dtype, "dtype")
    if theta0 is None:
        theta0 = torch.zeros(check_int(dim, "dim", minimum=1), dtype=dtype)
    elif not isinstance(theta0, torch.Tensor) or theta0.dim() != 1 or not theta0.is_floating_point():
        raise ValueError("theta0 must be a floating-point tensor of shape [p] (one starting point for all runs)")
    _check_audit_dtype(theta0.dtype, "theta0")
    dim = theta0.numel()
    coordinate = check_int(coordinate, "coordinate")
    if coordinate >= dim:
        raise ValueError(f"coordinate must lie in [0, {dim - 1}] (the model's parameters), got {coordinate}")
    n = check_int(n, "n", minimum=1)
    C = check_positive(clip_norm, "clip_norm")
    G = C if canary_norm is None else check_positive(canary_norm, "canary_norm")
    lr = check_positive(lr, "lr")
    delta = check_open_unit(delta, "delta")        # the accountant's ε is defined for δ in (0, 1)
    confidence = check_open_unit(confidence, "confidence")
    accountant = _check_accountant(accountant)
    if privatizer is None and algorithm not in _ALGORITHMS:
        raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")
    sampling = _resolve_sampling(algorithm if privatizer is None else None, sampling, batch_size, n)
    cal_runs = (min(runs, math.ceil(4096 / steps)) if calibration_runs is None
                else check_int(calibration_runs, "calibration_runs", minimum=2))
    cal_seed = _calibration_seed(seed)
    at = _checkpoints(checkpoints, steps)
    R = 2 * runs
    in_run = torch.arange(R) < runs
    u = torch.zeros(dim, dtype=theta0.dtype)
    u[coordinate] = 1.0
    other = None if not other_gradient else other_gradient * u
    run_kw = dict(n=n, steps=steps, lr=lr, clip_norm=C, noise_multiplier=noise_multiplier, batch_size=batch_size,
                  sampling=sampling, feedback_clip_norm=feedback_clip_norm, privatizer=privatizer,
                  adaptive_kwargs=adaptive_kwargs)
    start = theta0.detach().unsqueeze(0)
    grad_fn = gradient_canary_oracle(in_run, G * u, other_gradient=other, base_grad_fn=base_grad_fn)
    iterates, history, info = _run_algorithm(algorithm, grad_fn, start.expand(R, dim).clone(), seed=seed, **run_kw)
    # calibration: canary-free runs with their own randomness measure the noise the code adds
    cal_fn = gradient_canary_oracle(torch.zeros(cal_runs, dtype=torch.bool), G * u, other_gradient=other,
                                    base_grad_fn=base_grad_fn)
    cal_iterates, cal_history, _ = _run_algorithm(algorithm, cal_fn, start.expand(cal_runs, dim).clone(),
                                                  seed=cal_seed, **run_kw)
    _, d_cal, C_cal = _steps_along(cal_iterates, cal_history, coordinate, info["b"], lr, C)
    ratio = d_cal / C_cal
    shift, z_obs = float(ratio.mean()), float(ratio.std())
    proj, d, C_t = _steps_along(iterates, history, coordinate, info["b"], lr, C)
    last = proj[:, :1] - proj[:, at]                                              # [R, K]
    llr = _mixture_llr(d - shift * C_t, torch.clamp(C_t, max=G), max(z_obs, 1e-12) * C_t,
                       info["q"]).cumsum(1)[:, at - 1]
    name = (type(privatizer).__name__ if privatizer is not None else
            {"dp_sgd": "DP-SGD", "dp_gd": "DP-GD", "dice_sgd": "DiceSGD", "adaptive": "adaptive clipping"}[algorithm])
    extra = dict(noise_multiplier=noise_multiplier, observed_noise_multiplier=z_obs, sampling=sampling,
                 sample_rate=info["q"], batch_size=info["b"], n=n, clip_norm=C, canary_norm=G,
                 calibration_runs=cal_runs)
    res = info["result"]
    if algorithm == "dice_sgd" and privatizer is None and hasattr(res, "paper_claimed_epsilon"):
        extra["paper_claimed_epsilon"] = np.array(
            [dataclasses.replace(res, steps=int(t)).paper_claimed_epsilon(delta) for t in at])
    return CanaryAudit(name, "gradient", at, {"last": last[:runs], "all": llr[:runs]},
                       {"last": last[runs:], "all": llr[runs:]}, delta, confidence,
                       _accountant_curve(info, at, delta, accountant), extra)


def input_canary_audit(X: torch.Tensor, y: torch.Tensor, loss, canary_x: torch.Tensor, canary_y: float, *,
                       runs: int, steps: int, noise_multiplier: float, batch_size: int | None,
                       sampling: str | None = None, clip_norm: float = 1.0, lr: float = 1.0,
                       algorithm: str = "dp_sgd", delta: float = 1e-5, confidence: float = 0.95,
                       checkpoints=None, seed: int = 0, accountant: str = "rdp") -> CanaryAudit:
    """Audit with an input-space canary on a generalized linear problem ``f(⟨θ, x⟩; y)``.

    Source: the input-space canaries of Jagielski, Ullman & Oprea (2020), bounded by Kairouz, Oh & Viswanath (2015), Thm 2.1.

    The data set is ``X`` plus the canary ``(canary_x, canary_y)`` as its last
    example (``n = len(X) + 1``); in the "out" runs the canary's gradient is
    zeroed. The algorithm computes the canary's gradient like any other, so its
    norm ``|f'(⟨θ, x_c⟩)| ‖x_c‖`` shrinks as the model fits it — the reason input
    canaries audit less tightly than gradient canaries. Scores:

    * ``"last"``: the canary's margin ``y_c ⟨θ_t, x_c⟩`` (a loss-based attack);
    * ``"all"``: ``Σ_s log LR(d_s)`` with ``d_s`` the step projected on the
      canary's own clipped gradient at θ_s (white-box: the auditor recomputes
      it), as in :func:`gradient_canary_audit`.

    Per-example gradients are materialized (``[2 runs, batch, p]`` per step). ``sampling``
    defaults to ``"poisson"`` (DP-GD: the full batch, and nothing else), ``X`` must be
    float32 or float64, and the accountant ε is that of the run's own ``dp_event()``, as in
    :func:`gradient_canary_audit`. The ``"all"`` score uses the lab's own noise multiplier
    (only the lab's DP-SGD and DP-GD run here, no foreign privatizer).
    """
    from .algorithms.oracles import CallableOracle

    if algorithm not in ("dp_sgd", "dp_gd"):
        raise ValueError(f"algorithm must be 'dp_sgd' or 'dp_gd' for an input canary, got {algorithm!r}")
    runs = check_int(runs, "runs", minimum=2)
    steps = check_int(steps, "steps", minimum=1)
    C = check_positive(clip_norm, "clip_norm")
    lr = check_positive(lr, "lr")
    delta = check_open_unit(delta, "delta")        # the accountant's ε is defined for δ in (0, 1)
    confidence = check_open_unit(confidence, "confidence")
    accountant = _check_accountant(accountant)
    at = _checkpoints(checkpoints, steps)
    if not (isinstance(X, torch.Tensor) and X.dim() == 2):
        raise ValueError(f"X must be a 2-D tensor [n, p], got {getattr(X, 'shape', type(X).__name__)}")
    _check_audit_dtype(X.dtype, "X")
    sampling = _resolve_sampling(algorithm, sampling, batch_size, X.shape[0] + 1)
    if torch.as_tensor(y).shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {tuple(torch.as_tensor(y).shape)}")
    if not isinstance(canary_x, torch.Tensor) or canary_x.numel() != X.shape[1]:
        raise ValueError(f"canary_x must be a tensor with p = {X.shape[1]} entries (one row of X), "
                         f"got shape {tuple(getattr(canary_x, 'shape', ()))}")
    if not bool(torch.isfinite(canary_x).all()):
        raise ValueError("canary_x must be finite; it holds NaN or inf entries")
    canary_y = check_interval(canary_y, "canary_y", -math.inf, math.inf, closed=(False, False))
    X = torch.cat([X, canary_x.reshape(1, -1).to(X)], 0)
    y = torch.cat([torch.as_tensor(y, dtype=X.dtype), torch.tensor([float(canary_y)], dtype=X.dtype)])
    n, p = X.shape
    R = 2 * runs
    member = (torch.arange(R) < runs)

    def grad_fn(theta, idx):
        if idx.dim() == 1:
            idx = idx.unsqueeze(0).expand(theta.shape[0], -1)
        Xb = X[idx]                                                     # [R, m, p]
        coef = loss.derivative(torch.einsum("rmp,rp->rm", Xb, theta), y[idx])
        coef = coef * ~((idx == n - 1) & ~member.unsqueeze(1))           # out-runs: no canary
        return coef.unsqueeze(-1) * Xb

    theta0 = torch.zeros((R, p), dtype=X.dtype)
    iterates, history, info = _run_algorithm(
        algorithm, CallableOracle(grad_fn), theta0, n=n, steps=steps, lr=lr, clip_norm=C,
        noise_multiplier=noise_multiplier, batch_size=batch_size, sampling=sampling, feedback_clip_norm=None,
        privatizer=None, seed=seed, adaptive_kwargs=None)
    xc, yc = X[-1], y[-1]
    margin = yc * (iterates @ xc)                                     # [R, T+1]
    g = loss.derivative(iterates[:, :-1] @ xc, yc).unsqueeze(-1) * xc  # canary gradient at θ_s [R, T, p]
    gn = torch.linalg.vector_norm(g, dim=-1)
    s = torch.clamp(gn, max=C)
    direction = g / gn.clamp(min=1e-300).unsqueeze(-1)
    d = ((iterates[:, :-1] - iterates[:, 1:]) * direction).sum(-1) * info["b"] / lr
    z = float(info["z"]) if info["z"] else 1e-12
    llr = _mixture_llr(d, s, z * C, info["q"]).cumsum(1)[:, at - 1]
    last = margin[:, at]
    name = {"dp_sgd": "DP-SGD", "dp_gd": "DP-GD"}.get(algorithm, algorithm)
    return CanaryAudit(name, "input", at, {"last": last[:runs], "all": llr[:runs]},
                       {"last": last[runs:], "all": llr[runs:]}, delta, confidence,
                       _accountant_curve(info, at, delta, accountant),
                       dict(noise_multiplier=noise_multiplier, sampling=sampling, sample_rate=info["q"],
                            batch_size=info["b"], n=n, clip_norm=C, canary_gradient_norm=gn[:runs]))


# =========================================================================== one-run audit
def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct guesses out of r] for an (ε, δ)-DP algorithm (Steinke, Nasr, Jagielski 2023).

    Source: Steinke, Nasr & Jagielski (2023), Alg. 1 and App. D.

    ``m`` canaries, each included independently with probability ½; the
    auditor guesses ``r`` of them (abstains on the rest). Their main theorem in
    its (ε, δ) form, as computed in their App. D::

        P[W ≥ v] ≤ P[Bin(r, p_ε) ≥ v] + 2 m δ · max_{i=1..v} P[v − i ≤ Bin(r, p_ε) < v] / i,

    with ``p_ε = e^ε / (1 + e^ε)`` (randomized response's accuracy).
    """
    from scipy.stats import binom

    m, r, v = check_int(m, "m"), check_int(r, "r"), check_int(v, "v")
    epsilon = check_nonnegative(epsilon, "epsilon")
    delta = _check_delta(delta)
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = binom.sf(v - 1, r, q)
    if delta == 0 or v == 0:
        return min(float(tail), 1.0)
    i = np.arange(1, v + 1)
    window = binom.cdf(v - 1, r, q) - binom.cdf(v - 1 - i, r, q)   # P[v − i ≤ Bin < v]
    return min(float(tail + 2 * m * delta * np.max(window / i)), 1.0)


def _steinke_epsilon(m: int, r: int, v: int, d: float, p_thr: float) -> float:
    """The largest ε whose one-run p-value (:func:`one_run_p_value`) is below ``p_thr`` (bisection), or 0."""
    if one_run_p_value(m, r, v, 0.0, d) >= p_thr:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, d) < p_thr:
        lo, hi = hi, 2 * hi
        if hi > 200:
            break
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if one_run_p_value(m, r, v, mid, d) < p_thr:
            lo = mid
        else:
            hi = mid
    return lo


def _gdp_one_run_rejects(mu, m: int, r: int, v: int, tau: float) -> np.ndarray:
    """Whether ``v`` correct guesses out of ``r`` (``m`` canaries) reject "μ-GDP" at level ``tau``, per μ.

    The f-DP bound of Mahloujifar, Melis & Chaudhuri (2025) for the guessing game with
    abstentions, for the Gaussian trade-off ``G_μ``: if the mechanism is μ-GDP and
    ``P[≥ v correct] ≥ tau``, then the recursion

        h_v = tau (r − v)/m,   r_v = tau v/m,
        h_i = max(h_{i+1}, G⁻(r_{i+1})),   r_i = r_{i+1} + i/(r − i) · (h_i − h_{i+1})   (i = v−1, ..., 0)

    with ``G⁻(x) = Φ(Φ⁻¹(x) − μ)`` (the inverse "blow-up" of G_μ) ends with
    ``r_0 + h_0 ≤ r/m``. So ``r_0 + h_0 > r/m`` rejects μ-GDP with error at most ``tau``.
    ``r_i, h_i`` grow as μ shrinks (G⁻ decreases in μ): the rejected μ form an interval
    [0, μ*). Vectorized over ``mu`` (the recursion runs once for a whole grid).

    The soundness of the rejection is the paper's theorem, taken on trust; the tests check
    it empirically on the one-run game of the Gaussian mechanism (the true μ is rejected at
    most at the stated rate, while a test that ignores the abstentions is caught).
    """
    from scipy.special import ndtr, ndtri

    mu = np.asarray(mu, dtype=float)
    rr = np.full(mu.shape, tau * v / m)
    h = np.full(mu.shape, tau * (r - v) / m)
    for i in range(v - 1, -1, -1):
        h_new = np.maximum(h, ndtr(ndtri(np.minimum(rr, 1.0)) - mu))
        rr = rr + (i / (r - i)) * (h_new - h)
        h = h_new
    return rr + h > r / m


def _gdp_one_run_mu_lower(m: int, r: int, v: int, tau: float) -> float:
    """The largest μ (to ~1e-6 relative) whose μ-GDP hypothesis ``v`` of ``r`` correct guesses reject, or 0.

    Rounded *down*: the value returned is itself rejected, so the bound stays on the safe side.
    """
    if v == 0 or not _gdp_one_run_rejects(np.array([0.0]), m, r, v, tau)[0]:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gdp_one_run_rejects(np.array([hi]), m, r, v, tau)[0]:
        lo, hi = hi, 2.0 * hi
        if hi > 1024:                  # beyond any μ a finite game can show; keep the last rejected value
            return lo
    for _ in range(4):                 # 4 rounds of a 65-point grid: width (hi − lo) / 64⁴
        grid = np.linspace(lo, hi, 65)
        rejected = np.nonzero(_gdp_one_run_rejects(grid, m, r, v, tau))[0]
        k = int(rejected.max())        # grid[0] = lo is rejected
        lo, hi = float(grid[k]), float(grid[min(k + 1, 64)])
    return lo


def _one_run_guesses(m: int, guesses) -> list:
    if guesses is None:
        guesses = [(max(m // k, 1), max(m // k, 1)) for k in (10, 20, 50)]
    out = []
    for kp, km in guesses:
        kp, km = check_int(kp, "k_plus"), check_int(km, "k_minus")
        if kp + km > m:
            raise ValueError(f"k_plus + k_minus must be at most m = {m}, got {kp} + {km}")
        out.append((kp, km))
    return out


def one_run_epsilon_lower_bound(scores, included, *, delta, confidence=0.95, guesses=None,
                                method="steinke") -> float:
    """The one-run audit's lower bound on ε (Steinke, Nasr, Jagielski 2023: Alg. 1, p-value of App. D).

    Canary i was included with probability ½ (``included[i]``: booleans or 0/1; some
    canaries in and some out, anything else is refused). The auditor
    guesses "in" for the ``k_plus`` highest scores and "out" for the
    ``k_minus`` lowest, abstains on the rest, and counts correct guesses ``v``.
    ``guesses`` is a list of ``(k_plus, k_minus)`` pairs fixed in advance; the
    maximum over them is made valid by a Bonferroni correction (the p-value
    threshold is divided by the number of pairs).
    Default: ``[(m//10, m//10), (m//20, m//20), (m//50, m//50)]``.

    ``method``:

    * ``"steinke"`` (default): the largest ε whose p-value (:func:`one_run_p_value`)
      is below ``1 − confidence`` — a sound bound on ε at this δ for any mechanism.
    * ``"fdp"``: the f-DP analysis of Mahloujifar, Melis & Chaudhuri (2025) (their bound
      for the guessing game with abstentions) for the family of Gaussian trade-off
      curves: the largest μ whose "μ-GDP" hypothesis the guesses reject at level
      ``1 − confidence`` (Bonferroni over the pairs as above), converted to the ε(δ) of
      μ-GDP (Dong, Roth & Su 2022, Cor. 2.13). The statement "the mechanism is not
      μ-GDP" is sound; reading it as a bound on ε(δ) **assumes the mechanism's
      trade-off curve is Gaussian** (it is for the Gaussian mechanism and full-batch
      DP-GD; not exactly for subsampled DP-SGD). Under that assumption it is much
      tighter: μ = 1 per canary, 1,000 canaries and the default guesses certify ε ≈ 3.0
      against Steinke et al.'s ≈ 2.2 (true ε 4.38 at δ = 1e-5).
      ``delta`` must lie in (0, 1): μ-GDP with μ > 0 is not ε-DP for any finite ε.

    See :func:`one_run_ceiling` for the most either method can certify with ``r`` guesses.
    """
    method = _check_method(method, ONE_RUN_METHODS)
    best, d = _one_run_best(scores, included, delta, confidence, guesses, method)
    return _gdp_epsilon(best, d) if method == "fdp" else float(best)


def _one_run_best(scores, included, delta, confidence, guesses, method):
    """``(best, δ)``: the largest certified ε (``"steinke"``) or rejected μ (``"fdp"``) over the guess pairs."""
    s = _as_scores(scores, "scores")
    inc = _as_included(included, s.shape)
    d = check_open_unit(delta, "delta") if method == "fdp" else _check_delta(delta)
    conf = check_open_unit(confidence, "confidence")
    m = s.size
    guesses = _one_run_guesses(m, guesses)
    order = np.argsort(s, kind="stable")
    p_thr = (1 - conf) / len(guesses)
    best = 0.0
    for kp, km in guesses:
        v = int(inc[order[m - kp:]].sum() + (~inc[order[:km]]).sum()) if kp else int((~inc[order[:km]]).sum())
        r = kp + km
        if method == "fdp":
            best = max(best, _gdp_one_run_mu_lower(m, r, v, p_thr))
        else:
            best = max(best, _steinke_epsilon(m, r, v, d, p_thr))
    return best, d


def one_run_ceiling(guesses: int, *, delta, canaries: int | None = None, confidence=0.95,
                    method="steinke") -> float:
    """The most a one-run audit with ``guesses`` guesses can certify: the ε of ``guesses`` correct guesses.

    Source: Steinke, Nasr & Jagielski (2023), Alg. 1 and App. D (``method="steinke"``);
    Mahloujifar, Melis & Chaudhuri (2025) for Gaussian trade-offs (``method="fdp"``).

    However leaky the mechanism, ``r`` guesses that are all right are the strongest
    evidence the audit can see. For pure ε-DP (δ = 0) their probability is at most
    ``p_ε^r`` with ``p_ε = e^ε / (1 + e^ε)``, so the certified ε solves ``p_ε^r = 1 − confidence``:

        ε_max = ln((1 − a) / a),    a = 1 − (1 − confidence)^(1/r),

    about ``ln(r / ln(1/(1 − confidence)))``: 3.5 at r = 100, 5.8 at r = 1,000, 8.1 at
    r = 10⁴ (confidence 0.95). With δ > 0 the δ term of the p-value (it grows with the
    number of canaries m) lowers it; this function computes the ceiling with that term
    (the same bisection as :func:`one_run_epsilon_lower_bound`), and with
    ``method="fdp"`` the ε(δ) of the largest μ that ``r`` correct guesses reject (same
    Gaussian-trade-off assumption as there).

    Parameters
    ----------
    guesses : int ≥ 1
        The number r of guesses (the auditor abstains on the other canaries).
    delta : float
        In [0, 1) for ``"steinke"``, in (0, 1) for ``"fdp"``.
    canaries : int ≥ guesses, optional
        The number m of canaries in the run (default ``guesses``: a guess on every canary).
    confidence : float in (0, 1)
    method : {"steinke", "fdp"}
    """
    method = _check_method(method, ONE_RUN_METHODS)
    r = check_int(guesses, "guesses", minimum=1)
    m = r if canaries is None else check_int(canaries, "canaries", minimum=1)
    if m < r:
        raise ValueError(f"canaries must be at least guesses = {r} (one guess per canary at most), got {m}")
    d = check_open_unit(delta, "delta") if method == "fdp" else _check_delta(delta)
    p_thr = 1.0 - check_open_unit(confidence, "confidence")
    if method == "fdp":
        return _gdp_epsilon(_gdp_one_run_mu_lower(m, r, r, p_thr), d)
    return float(_steinke_epsilon(m, r, r, d, p_thr))


def one_run_gradient_audit(*, canaries: int, steps: int, noise_multiplier: float, clip_norm: float = 1.0,
                           extra_examples: int = 0, batch_size: int | None = None, sampling: str = "full",
                           observe: str = "last", delta: float = 1e-5, confidence: float = 0.95,
                           guesses=None, seed: int = 0, accountant: str = "rdp", method: str = "steinke"):
    """One DP-SGD training run with ``canaries`` gradient canaries (Steinke et al. 2023).

    Source: Steinke, Nasr & Jagielski (2023), Alg. 1.

    Canary i has gradient ``C e_i`` (model dimension = ``canaries``) and is
    included with probability ½; ``extra_examples`` more examples have gradient
    0. One run (R = 1), last iterate or all iterates observed; score_i is
    ``⟨θ_0 − θ_T, e_i⟩`` (``"last"``) or the summed per-step likelihood ratio
    on coordinate i (``"all"``).

    ``epsilon_accountant`` composes the run's own ``dp_event()`` (its sampling scheme:
    ``"full"``, ``"poisson"``, ``"shuffle"`` or ``"with_replacement"``) with ``accountant``.

    ``method`` is that of :func:`one_run_epsilon_lower_bound`: ``"steinke"`` (a sound
    bound) or ``"fdp"`` (Mahloujifar et al. 2025; a sound lower bound on the GDP μ, read
    as ε(δ) under the Gaussian-trade-off assumption — exact for ``sampling="full"``, where
    each canary's coordinate is a Gaussian mechanism with μ = √T / z).

    Returns
    -------
    dict
        With ``epsilon_lower`` (the one-run bound), ``epsilon_accountant``,
        ``scores``, ``included``, ``method``, ``epsilon_ceiling`` (:func:`one_run_ceiling`
        for the largest guess count used) and, for ``"fdp"``, ``mu_lower``.
    """
    from .accountants.calibration import make_accountant
    from .algorithms import dp_sgd

    method = _check_method(method, ONE_RUN_METHODS)
    m = check_int(canaries, "canaries", minimum=2)
    C = check_positive(clip_norm, "clip_norm")
    if observe not in ("last", "all"):
        raise ValueError(f"observe must be 'last' or 'all', got {observe!r}")
    delta = check_open_unit(delta, "delta")        # the accountant's ε is defined for δ in (0, 1)
    accountant = _check_accountant(accountant)
    gen = torch.Generator().manual_seed(check_int(seed, "seed"))
    included = torch.rand(m, generator=gen) < 0.5
    if bool(included.all()) or not bool(included.any()):
        raise ValueError(f"canaries: the random draw put all {m} canaries {'in' if bool(included.all()) else 'out'} "
                         "(the one-run audit needs some of each); use more canaries or another seed")
    n = m + check_int(extra_examples, "extra_examples")
    scale = C * included.to(torch.float64)

    def grad_fn(theta, idx):
        rows = torch.zeros((idx.numel(), m), dtype=theta.dtype)
        is_c = idx < m
        rows[is_c.nonzero().squeeze(1), idx[is_c]] = scale[idx[is_c]].to(theta.dtype)
        return rows

    res = dp_sgd(grad_fn, torch.zeros(m, dtype=torch.float64), n=n, steps=steps, lr=1.0, clip_norm=C,
                 noise_multiplier=noise_multiplier, batch_size=batch_size, sampling=sampling, seed=seed + 1,
                 progress=False)
    it = res.iterates                                                     # [T+1, m]
    if observe == "last":
        scores = it[0] - it[-1]
    else:
        d = (it[:-1] - it[1:]) * res.batch_size                          # [T, m]
        scores = _mixture_llr(d, C, noise_multiplier * C, res.sample_rate).sum(0)
    eps_acc = float(make_accountant(accountant).compose(res.dp_event()).get_epsilon(delta))
    best, _ = _one_run_best(scores, included, delta, confidence, guesses, method)
    out = dict(epsilon_lower=_gdp_epsilon(best, delta) if method == "fdp" else float(best),
               epsilon_accountant=eps_acc, scores=scores, included=included, method=method)
    r_max = max(kp + km for kp, km in _one_run_guesses(m, guesses))
    out["epsilon_ceiling"] = one_run_ceiling(r_max, delta=delta, canaries=m, confidence=confidence, method=method)
    if method == "fdp":
        out["mu_lower"] = best
    return out


# =========================================================================== broken on purpose
class BrokenMeanNoisePrivatizer(GaussianPrivatizer):
    """**BROKEN ON PURPOSE — not differentially private at the claimed z.** For the audit chapter.

    Source: breaks Abadi et al. (2016), Alg. 1 on purpose (noise calibrated to the mean, not the sum).

    The bug: the noise is *calibrated to the mean* (std ``σ = z C / b``, the
    right std for noise added to the average of the clipped gradients) but
    *added to the sum*, which is then divided by ``b``. The released direction
    is ``(Σ clip(g_i) + N(0, (zC/b)² I)) / b``: the noise is ``b`` times too
    small, so the real noise multiplier is ``z / b`` while the code (and its
    accountant) believe it is ``z``. A one-character slip (``/ b`` once too
    often) that no unit test of shapes or of convergence catches; an audit does.

    Never use it for training. It lives in :mod:`dpclip_lab.audit` only and is
    not exported from :mod:`dpclip_lab.algorithms`.
    """

    def noise_on_sum(self, clip_norm, batch, shape, generator, like):
        noise = super().noise_on_sum(clip_norm, batch, shape, generator, like)
        return None if noise is None else noise / batch.normalizer   # BUG (deliberate): σ = zC/b on the sum
