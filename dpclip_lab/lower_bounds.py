"""Certified lower bounds on ε: an exact hypothesis test on a worst-case pair of data sets.

An accountant gives an *upper* bound: the run is at most ε-private. A lower bound says the
opposite, "at least": if one pair of neighbouring data sets and one test on the released
output separate the two runs with false-positive rate FPR and false-negative rate FNR, then
no (ε, δ) with

    ε < log((1 − δ − FNR) / FPR)

can hold, since (ε, δ)-DP forces ``P_D(A) ≤ e^ε P_{D'}(A) + δ`` for every event A. When
FPR and FNR are *computed exactly* (not estimated from samples, as an audit must), the result
is a rigorous lower bound on the ε of the mechanism, which refutes any smaller claimed ε.

DiceSGD (Zhang et al. 2024, Alg. 2)
-----------------------------------
:func:`dicesgd_certified_lower_bound` does this for DiceSGD with Poisson sampling, against the
privacy claim of the paper's Thm 3.8 (App. A.2). The pair: a linear loss (per-example
gradients do not depend on θ); in ``D`` one example has gradient ``G·u`` (‖u‖ = 1) and every
other example gradient 0; ``D'`` is ``D`` without it. Then

* on ``D'`` every direction ``v_t`` is 0 and the released steps ``(x_t − x_{t+1})/η = v_t + w_t``
  are pure noise, ``w_t ~ N(0, σ1² I)`` with ``σ1 = z C1 / B`` (the lab's convention);
* on ``D``, until the example is first sampled (at step τ, geometric:
  ``P(τ = t) = (1 − q)^t q``, q = B/N, or never within T steps) ``e`` stays 0 and the steps
  are noise too; at τ the batch term adds ``C1/B·u`` and ``e`` jumps to ``(G − C1)/B·u``, far
  beyond C2 when G is large, so from then on ``clip(e, C2) = C2·u`` adds ``C2·u`` to *every*
  step (in or out of the batch), plus ``C1/B·u`` at each later inclusion (binomial count).

Projected on u, the sum of the released steps, ``S = Σ_t ⟨v_t + w_t, u⟩`` (a function of the
last iterate alone: ``S = ⟨x_0 − x_T, u⟩/η``), is ``N(0, T σ1²)`` on ``D'`` and, on ``D``, an
exact Gaussian mixture with means ``M = C1/B·K + f·(T − 1 − τ)`` over τ and the inclusion
count K (:func:`dicesgd_sum_statistic_law`), where ``f = C2`` for Alg. 2 and ``f = C2/B`` for
the authors' code (``variant="code"``), which adds ``clip(e, C2)`` to the gradient *sum*
before dividing by B. All means are ≥ 0, so the likelihood ratio of S is increasing and the
threshold tests ``S > s`` are the most powerful tests on S: maximizing the bound over s gives
the exact ε(δ) of the statistic S, a lower bound on the ε of the released iterates (of the
last iterate, and a fortiori of all of them).

References
----------
Zhang, Li, Hong, et al. (2024), "Differentially private SGD without clipping bias: an
error-feedback approach", Alg. 2, Thm 3.8 / Thm A.4 and its proof (App. A.2, Step I,
Lemmas A.7 and A.11). Kairouz, Oh & Viswanath (2015), Thm 2.1 (the hypothesis-testing
reading of (ε, δ)-DP).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special   # scipy.stats where it is used (0.4 s at import otherwise)

from ._validation import check_int, check_open_unit, check_positive

__all__ = ["VARIANTS", "CertifiedLowerBound", "dicesgd_saturating_gradient_norm", "dicesgd_sum_statistic_law",
           "dicesgd_certified_lower_bound"]

#: ``"alg2"``: Zhang et al. (2024), Alg. 2, ``v = (1/B) Σ clip(g_i, C1) + clip(e, C2)``;
#: ``"code"``: the authors' code, ``v = (1/B) (Σ clip(g_i, C1) + clip(e, C2))`` (``e`` in sum units).
VARIANTS = ("alg2", "code")

#: Mixture components whose weight is below e^-60 times the largest are dropped: they carry
#: no visible mass, and dropping mass from P_D(S > s) only lowers the bound (it stays valid).
_LOG_WEIGHT_FLOOR = 60.0


@dataclass(frozen=True)
class CertifiedLowerBound:
    """Lab utility: the result of an exact threshold test, ``ε ≥ log((1 − δ − FNR)/FPR)``.

    Attributes
    ----------
    epsilon : float
        The certified lower bound on ε at ``delta`` (``-inf`` if no threshold beats δ).
    delta : float
    threshold : float
        The threshold s of the test "S > s" that attains it (units of the direction v).
    noise_std : float
        The std of S, ``σ1 √T``.
    log_false_positive_rate : float
        ``log P_{D'}(S > s)`` (the rate itself can underflow a float).
    false_negative_rate : float
        ``P_D(S ≤ s)``.
    """

    epsilon: float
    delta: float
    threshold: float
    noise_std: float
    log_false_positive_rate: float
    false_negative_rate: float

    def __float__(self) -> float:
        return float(self.epsilon)


def _variant(variant) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS} ('alg2': Zhang et al. 2024, Alg. 2; 'code': the "
                         f"authors' code, clip(e, C2) added to the gradient sum before dividing by B), got {variant!r}")
    return variant


def _setting(n, batch_size, steps, clip_norm, feedback_clip_norm, variant):
    """Validated (N, B, T, C1, C2, variant)."""
    n = check_int(n, "n", minimum=1)
    B = check_int(batch_size, "batch_size", minimum=1)
    if B > n:
        raise ValueError(f"batch_size (the expected batch size B; Poisson rate q = B/n) must lie in [1, n = {n}], "
                         f"got {B}")
    T = check_int(steps, "steps", minimum=1)
    C1 = check_positive(clip_norm, "clip_norm")
    C2 = check_positive(feedback_clip_norm, "feedback_clip_norm")
    if C1 > C2:
        raise ValueError(f"DiceSGD (Zhang et al. 2024, Alg. 2, Thm 3.8) requires clip_norm <= feedback_clip_norm "
                         f"(C1 <= C2), got C1 = {C1:g} > C2 = {C2:g}")
    return n, B, T, C1, C2, _variant(variant)


def dicesgd_saturating_gradient_norm(*, batch_size, steps, clip_norm, feedback_clip_norm, variant="alg2") -> float:
    """The smallest gradient norm G for which the pair of :func:`dicesgd_certified_lower_bound` saturates.

    Zhang et al. (2024), Alg. 2 line 7 (the error update): after the example's first inclusion
    ``e`` is ``(G − C1)/B`` and falls by at most C2 a step, so ``‖e_t‖ ≥ C2`` (and
    ``clip(e_t, C2) = C2 u``) until step T − 1 as soon as ``G ≥ C1 + B (T − 1) C2``; for the
    authors' code (``e`` in sum units) ``G ≥ C1 + (T − 1) C2``. Any larger G gives the same
    released distributions, so the bound does not depend on G beyond this norm.
    """
    B = check_int(batch_size, "batch_size", minimum=1)
    T = check_int(steps, "steps", minimum=1)
    C1 = check_positive(clip_norm, "clip_norm")
    C2 = check_positive(feedback_clip_norm, "feedback_clip_norm")
    scale = B if _variant(variant) == "alg2" else 1
    return C1 + scale * (T - 1) * C2


def dicesgd_sum_statistic_law(*, n, batch_size, steps, clip_norm, feedback_clip_norm, noise_multiplier,
                              variant="alg2"):
    """The exact law of ``S = Σ_t ⟨released step_t, u⟩`` with the example in (Zhang et al. (2024), Alg. 2).

    The pair of the module docstring under Poisson sampling at rate ``q = B/n`` (Thm 3.8's
    setting, App. A.2): S is the Gaussian mixture ``Σ_j w_j N(m_j, T σ1²)`` with
    ``m = C1/B·K + f·(T − 1 − τ)`` — τ the first inclusion (``P(τ = t) = (1 − q)^t q``; "never",
    probability ``(1 − q)^T``, gives ``m = 0``), ``K = 1 + Binomial(T − 1 − τ, q)`` the inclusions,
    ``f = C2`` (Alg. 2) or ``C2/B`` (``variant="code"``). On the data set without the example,
    S is ``N(0, T σ1²)``. ``σ1 = z C1 / B`` as in :func:`dpclip_lab.algorithms.dice_sgd`.

    Components of weight below e^-60 times the largest are dropped (their total is below
    1e-20); the weights that remain sum to 1 up to that.

    Returns
    -------
    means : ndarray
        The means ``m_j`` of the mixture's components.
    weights : ndarray
        Their weights ``w_j`` (same length).
    std : float
        The common standard deviation ``σ1 √T``.
    """
    n, B, T, C1, C2, variant = _setting(n, batch_size, steps, clip_norm, feedback_clip_norm, variant)
    z = check_positive(noise_multiplier, "noise_multiplier")
    means, log_w = _mixture(n, B, T, C1, C2, variant)
    return means, np.exp(log_w), z * C1 / B * math.sqrt(T)


def _mixture(n, B, T, C1, C2, variant):
    """(means, log-weights) of E[S | τ, K] on D, pruned below e^-60 of the largest weight."""
    q = B / n
    f = C2 if variant == "alg2" else C2 / B
    log1mq = math.log1p(-q) if q < 1 else -math.inf
    from scipy import stats

    tau = np.arange(T)
    # flattened (τ, k): j = T − 1 − τ later steps, k ∈ [0, j] later inclusions
    j_of = np.repeat(T - 1 - tau, T - tau)
    tau_of = np.repeat(tau, T - tau)
    k_of = np.arange(j_of.size) - np.repeat(np.cumsum(T - tau) - (T - tau), T - tau)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_first = np.where(tau_of == 0, 0.0, tau_of * log1mq) + math.log(q)
        log_w = log_first + stats.binom.logpmf(k_of, j_of, q)
    means = C1 / B * (1 + k_of) + f * j_of
    log_never = T * log1mq
    means = np.append(means, 0.0)
    log_w = np.append(log_w, log_never)
    keep = np.isfinite(log_w) & (log_w >= np.nanmax(log_w[np.isfinite(log_w)]) - _LOG_WEIGHT_FLOOR)
    return means[keep], log_w[keep]


def dicesgd_certified_lower_bound(*, n, batch_size, steps, clip_norm, feedback_clip_norm, noise_multiplier, delta,
                                  gradient_norm=None, variant="alg2") -> CertifiedLowerBound:
    """A rigorous lower bound on the ε of DiceSGD's released iterates (refutes Zhang et al. (2024), Thm 3.8).

    Zhang et al. (2024), Alg. 2 with Poisson sampling at rate ``q = B/n`` (the sampling of the
    proof of their Thm 3.8 / A.4, App. A.2), noise ``σ1 = z C1 / B`` on the averaged direction
    (the lab's :func:`dpclip_lab.algorithms.dice_sgd`). On the pair of the module docstring
    (one example with gradient ``G u``, every other gradient 0, against the data set without
    it), the threshold test "S > s" on ``S = Σ_t ⟨released step_t, u⟩`` has exactly computable
    rates (:func:`dicesgd_sum_statistic_law`), and every threshold certifies

        ε ≥ log((P_D(S > s) − δ) / P_{D'}(S > s)).

    The best threshold is found numerically (any threshold gives a valid bound); the rates are
    evaluated in log space (``scipy.special.log_ndtr``), so rates far below the smallest
    float are handled. With ``q = 1`` this is the exact ε of S for the full-batch pair.

    Parameters
    ----------
    n : int
        N, the size of the data set with the example.
    batch_size : int in [1, n]
        B, the expected batch size (the normalizer of the sums; Poisson rate ``q = B/n``).
    steps : int >= 1
        T.
    clip_norm, feedback_clip_norm : float, 0 < C1 <= C2
    noise_multiplier : float > 0
        z with ``σ1 = z C1 / B`` (for ``variant="code"``: the std of the noise on the gradient
        *sum* is ``z C1``, the same convention).
    delta : float in (0, 1)
    gradient_norm : float, optional
        G. None (default): any G at or above :func:`dicesgd_saturating_gradient_norm` (the
        bound is the same for all of them). A smaller G raises: the pair's law then depends
        on the order of the inclusions, which this function does not model.
    variant : {"alg2", "code"}
        ``"alg2"``: the paper's Alg. 2, ``v = (1/B) Σ clip(g_i, C1) + clip(e, C2)``.
        ``"code"``: the authors' code, ``v = (1/B)(Σ clip(g_i, C1) + clip(e, C2))`` with ``e``
        in sum units, so the feedback is B times weaker.

    Returns
    -------
    CertifiedLowerBound
        ``float(result)`` is the certified ε. It never exceeds a valid upper bound such as
        :meth:`dpclip_lab.algorithms.DiceSGDResult.epsilon` (a bug in one of them otherwise).

    Raises
    ------
    ValueError
        On invalid input, C1 > C2, or ``gradient_norm`` below the saturating norm.
    """
    n, B, T, C1, C2, variant = _setting(n, batch_size, steps, clip_norm, feedback_clip_norm, variant)
    z = check_positive(noise_multiplier, "noise_multiplier")
    d = check_open_unit(delta, "delta")
    g_sat = dicesgd_saturating_gradient_norm(batch_size=B, steps=T, clip_norm=C1, feedback_clip_norm=C2,
                                             variant=variant)
    if gradient_norm is not None:
        G = check_positive(gradient_norm, "gradient_norm")
        if G < g_sat:
            raise ValueError(f"gradient_norm must be at least {g_sat:g} (C1 + {'B ' if variant == 'alg2' else ''}"
                             f"(T - 1) C2), so that clip(e, C2) saturates after the first inclusion; got {G:g}")
    means, log_w = _mixture(n, B, T, C1, C2, variant)
    sd = z * C1 / B * math.sqrt(T)
    log_delta = math.log(d)

    def log_tails(s):
        """(log P_D(S > s), log P_{D'}(S > s))."""
        return (float(special.logsumexp(log_w + special.log_ndtr((means - s) / sd))),
                float(special.log_ndtr(-s / sd)))

    def bound(s):
        log_p, log_fpr = log_tails(s)
        if log_p <= log_delta:
            return -math.inf
        return log_p + math.log1p(-math.exp(log_delta - log_p)) - log_fpr

    grid = np.linspace(0.0, float(means.max()) + 12.0 * sd, 241)
    values = np.array([bound(s) for s in grid])
    i = int(np.argmax(values))
    best_s, best = float(grid[i]), float(values[i])
    if math.isfinite(best):
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
        res = optimize.minimize_scalar(lambda s: -bound(s), bounds=(lo, hi), method="bounded",
                                       options={"xatol": 1e-6 * sd})
        if res.success and -res.fun > best:
            best_s, best = float(res.x), float(-res.fun)
    log_p, log_fpr = log_tails(best_s)
    return CertifiedLowerBound(epsilon=best, delta=d, threshold=best_s, noise_std=sd, log_false_positive_rate=log_fpr,
                               false_negative_rate=float(-math.expm1(log_p)))
