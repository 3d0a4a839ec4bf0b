"""The Gaussian mechanism: classic and analytic calibration.

Adding N(0, σ² I) to a function with ℓ2-sensitivity Δ gives (ε, δ)-DP when

* classic (Dwork & Roth 2014, Thm A.1): σ ≥ √(2 ln(1.25/δ)) Δ / ε — valid only for
  ε < 1 (the proof needs it) and loose;
* analytic (Balle & Wang 2018, Thm 8): exactly when
  δ ≥ Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ).

The analytic curve is the *exact* privacy profile of the Gaussian mechanism, so
T-fold composition of Gaussians with noise multiplier z is exactly one Gaussian with
noise multiplier z/√T (the privacy losses are Gaussian and add up).

References
----------
Dwork, C. & Roth, A. (2014). The Algorithmic Foundations of Differential Privacy, App. A.
Balle, B. & Wang, Y.-X. (2018). Improving the Gaussian mechanism for differential
privacy: analytical calibration and optimal denoising. ICML. Theorem 8, Algorithm 1.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from .._validation import check_nonnegative, check_open_unit, check_positive, finite_result

__all__ = [
    "classic_gaussian_sigma",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "gaussian_delta_for_epsilon",
]


@finite_result()
def classic_gaussian_sigma(epsilon, delta, sensitivity=1.0) -> float:
    """Noise std of the classic Gaussian mechanism: σ = √(2 ln(1.25/δ)) Δ / ε.

    Parameters
    ----------
    epsilon : float in (0, 1)
        Target ε. The theorem is only proved for ε < 1; larger ε raises.
    delta : float in (0, 1)
    sensitivity : float > 0
        ℓ2-sensitivity Δ.

    Returns
    -------
    sigma : float
        Noise standard deviation (not a noise multiplier unless Δ = 1).

    References
    ----------
    Dwork & Roth (2014), Theorem A.1; used as Lemma 2 of Wang, Lei, Ying & Zhang (2022)
    and Def. 2.2 of Zhang et al. (2024) (DiceSGD).
    """
    epsilon = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    sensitivity = check_positive(sensitivity, "sensitivity")
    if epsilon >= 1:
        raise ValueError(f"epsilon must be < 1 for the classic Gaussian mechanism (Dwork & "
                         f"Roth Thm A.1), got {epsilon!r}; use analytic_gaussian_sigma")
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_delta_for_epsilon(z, epsilon):
    """δ(ε) of the Gaussian mechanism with noise multiplier ``z`` (Δ = 1), vectorized.

    Computes Φ(1/(2z) − εz) − e^ε Φ(−1/(2z) − εz) in log space, so tiny δ keep their
    relative precision and negative ε are allowed (there δ = 1 − e^ε + ...).
    ``z`` and ``epsilon`` broadcast against each other; no input checks.

    References
    ----------
    Balle & Wang (2018), Theorem 8.
    """
    z = np.asarray(z, dtype=float)
    eps = np.asarray(epsilon, dtype=float)
    a = 0.5 / z - eps * z
    b = -0.5 / z - eps * z
    log1 = special.log_ndtr(a)
    log2 = eps + special.log_ndtr(b)
    with np.errstate(over="ignore", invalid="ignore"):
        # δ = e^log1 (1 − e^(log2 − log1)); log2 < log1 always (δ > 0)
        out = np.exp(log1) * -np.expm1(np.minimum(log2 - log1, 0.0))
    # Φ(a) = 0 in floating point (εz beyond ~38 — e.g. z = 1e300 at any ε > 0): δ ≤ Φ(a) is 0
    # too (log2 − log1 would be −inf + inf = NaN)
    out = np.where(log1 == -np.inf, 0.0, out)
    return np.clip(out, 0.0, 1.0)


@finite_result(nonzero=False)
def analytic_gaussian_delta(sigma, epsilon, sensitivity=1.0) -> float:
    """Smallest δ for which N(0, σ²) noise is (ε, δ)-DP (analytic Gaussian mechanism).

    Parameters
    ----------
    sigma : float > 0
        Noise standard deviation.
    epsilon : float >= 0
    sensitivity : float > 0

    Returns
    -------
    delta : float
        δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), computed without the cancellation of
        this formula (see ``_gaussian_log_delta``) and rounded up by its error bound
        (about 1e-15 relative), so it is never below the true δ.

        Where the inputs are so extreme that δ cannot be resolved to 1e-6 relative in floating
        point (εσ/Δ or Δ/σ beyond ~1e16), the cruder valid bound δ ≤ Φ(Δ/(2σ) − εσ/Δ) is returned.

    References
    ----------
    Balle & Wang (2018), Theorem 8.
    """
    sigma = check_positive(sigma, "sigma")
    epsilon = check_nonnegative(epsilon, "epsilon")
    sensitivity = check_positive(sensitivity, "sensitivity")
    return _delta_upper(_noise_multiplier(sigma, sensitivity), epsilon)


def _noise_multiplier(sigma: float, sensitivity: float) -> float:
    """``σ / Δ`` rounded down (a smaller z has the larger δ and ε: the safe side), refused where it
    over- or underflows (inf or 0 would give NaN, or a silent 0 / inf)."""
    z = sigma / sensitivity
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"sigma / sensitivity = {sigma!r} / {sensitivity!r} over- or underflows a float "
                         f"(got {z!r}); rescale sigma and sensitivity")
    return z if sensitivity == 1.0 else math.nextafter(z, 0.0)


# ----------------------------------------------------------------------------------------
# δ(ε) to (nearly) full relative precision, with an error bound (for the calibrations)
# ----------------------------------------------------------------------------------------
_EPS = float(np.finfo(float).eps)
_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CF_TERMS = 48                                     # continued fraction of g(t) for t < -4
_GL_X, _GL_W = np.polynomial.legendre.leggauss(12)
#: Beyond this relative error bound (inputs too extreme to resolve δ in floating point) the
#: calibrations use the cruder bound δ ≤ Φ(a) instead.
_MAX_RELATIVE_ERROR = 1e-6


def _g(t) -> np.ndarray:
    """g(t) = d/dt log M(t) = t + φ(t)/Φ(t) > 0, to ~24 ulp relative (vectorized).

    For t ≥ −4 directly (t + √(2/π)/erfcx(−t/√2): the sum cancels at most ~20x); for
    t < −4, where it cancels badly, by Laplace's continued fraction of the Mills ratio,
    g(−x) = φ(x)/Φ̄(x) − x = 1/(x + 2/(x + 3/(x + ...))) (48 terms: converged for x > 4).
    """
    t = np.atleast_1d(np.asarray(t, dtype=float))
    out = np.empty_like(t)
    far = t < -4.0
    if far.any():
        x = -t[far]
        acc = x.copy()
        for k in range(_CF_TERMS, 1, -1):
            acc = x + k / acc
        out[far] = 1.0 / acc
    near = ~far
    if near.any():
        tn = t[near]
        with np.errstate(over="ignore"):   # erfcx(−t/√2) = inf for t > ~38: φ/Φ = 0 there
            out[near] = tn + _SQRT_2_OVER_PI / special.erfcx(-tn / _SQRT2)
    return out


def _log_m(t):
    """log M(t), M(t) = e^{t²/2} Φ(t) = erfcx(−t/√2)/2 (increasing; vectorized)."""
    t = np.asarray(t, dtype=float)
    small = t < 30.0
    with np.errstate(divide="ignore", over="ignore"):   # t² = inf for t > ~1e154: log M = inf
        via_erfcx = np.log(special.erfcx(-np.where(small, t, 0.0) / _SQRT2)) - math.log(2.0)
        via_ndtr = 0.5 * t * t + special.log_ndtr(np.where(small, 30.0, t))
    return np.where(small, via_erfcx, via_ndtr)


def _gaussian_log_delta(z: float, epsilon: float):
    """(log δ(ε), a bound on the relative error of δ, log of a crude upper bound on δ) for
    noise multiplier z and ε ≥ 0.

    With a = 1/(2z) − εz, b = −1/(2z) − εz and M(t) = e^{t²/2}Φ(t), Balle & Wang's
    δ = Φ(a) − e^ε Φ(b) is exactly Φ(a)(1 − e^{−r}), r = log M(a) − log M(b) > 0 (since
    ε = (b² − a²)/2). No e^ε is formed (no overflow at large ε), and the cancellation
    of the direct formula (relative errors up to 1e-5 at z ≥ 1e8 or ε ≈ 1e-9, and
    worse at tiny δ) becomes the integral r = ∫_b^a g(t) dt of a positive function,
    computed by 12-point Gauss–Legendre quadrature about the midpoint −εz when the
    interval is short (z ≥ 1/2; g is analytic within ~2.8 of the real axis — the zeros
    of Φ — so this is exact to rounding), and as log M(a) − log M(b) otherwise (then r
    is not small).

    The bound covers the rounding of a, b (about 2 ulp of |εz| + 1/(2z)), of g / log M,
    and of the quadrature; it is ~1e-15 relative for ordinary inputs and grows only
    where the inputs themselves do not determine δ to more digits (e.g. 1e-12 at
    z = 1e-3). Checked against mpmath, in as many digits as the cancellation needs, in
    ``tests/test_accountants_extremes.py``. The crude bound is δ ≤ Φ(a) with a rounded up
    by twice its error: valid for any inputs (log δ = 0 where even that is NaN).
    """
    m = -epsilon * z
    hw = 0.5 / z
    a, b = m + hw, m - hw
    da = 2 * _EPS * (abs(m) + hw)                  # rounding of a, b (and of m)
    log_phi_up = float(special.log_ndtr(a + 2 * da))
    if -math.inf < log_phi_up < 0:                # (−inf: Φ = 0 to all float precision)
        log_phi_up = min(log_phi_up + 8 * _EPS * (abs(log_phi_up) + 1), 0.0)
    elif not log_phi_up == -math.inf:             # NaN (z at the ends of the float range)
        log_phi_up = 0.0
    if not (math.isfinite(a) and math.isfinite(b) and da < math.inf):   # z or εz at the float ends
        return math.nan, math.inf, log_phi_up
    if hw <= 1.0:
        g = _g(np.concatenate([[a, b], m + hw * _GL_X]))
        ga, gb = float(g[0]), float(g[1])
        r = hw * float(np.dot(_GL_W, g[2:]))
        err_r = 64 * _EPS * r + abs(ga - gb) * da  # a shift of m moves r by (g(a) − g(b)) dm
    else:
        ga, gb = (float(v) for v in _g([a, b]))
        la, lb = (float(v) for v in _log_m([a, b]))
        r = la - lb
        err_r = 4 * _EPS * (abs(la) + abs(lb) + 1) + (ga + gb) * da
    if not r > 0:                                  # 1/(2z) below the resolution of εz
        return math.nan, math.inf, log_phi_up
    log_phi, log_r = float(special.log_ndtr(a)), math.log(-math.expm1(-r))
    # d log(1 − e^{−r}) = dr / (e^r − 1) (nothing once 1 − e^{−r} rounds to 1, r > 700);
    # d log Φ(a) = (φ/Φ)(a) da = (g(a) − a) da; and log δ itself is a float (an ulp of |log δ|)
    rel_r = err_r / math.expm1(r) if r < 700 else 0.0
    rel = 2 * (4 * _EPS * (abs(log_phi) + abs(log_r) + 1) + (ga - a) * da + rel_r) + 8 * _EPS
    return log_phi + log_r, rel, log_phi_up


def _log_delta_upper(z: float, epsilon: float) -> float:
    """log of an upper bound on δ(ε): the accurate value rounded up by its error bound, or
    δ ≤ Φ(a) where that bound is too large to trust (inputs at the ends of the float range)."""
    log_delta, rel, log_phi_up = _gaussian_log_delta(z, epsilon)
    if rel <= _MAX_RELATIVE_ERROR:
        return min(log_delta + math.log1p(rel), log_phi_up)
    return log_phi_up


def _delta_upper(z: float, epsilon: float) -> float:
    """An upper bound on δ(ε) as a float (exp of :func:`_log_delta_upper`, rounded up)."""
    # exp rounds to nearest (an ulp, also for subnormal δ): round it up
    return min(1.0, math.nextafter(math.exp(_log_delta_upper(z, epsilon)) * (1 + 4 * _EPS), math.inf))


def _step_up(x: float, ok) -> float:
    """The first of x, x(1 + 4u), x(1 + 8u), ... (u = machine epsilon, the step doubling) with ok(x)."""
    k = 4 * _EPS
    while not ok(x):
        x = x + max(abs(x), 1e-300) * k
        k *= 2.0
    return x


def _epsilon_for_z(z: float, delta: float) -> float:
    """Smallest ε ≥ 0 (rounded up) with δ(ε) ≤ delta for noise multiplier z (inf if ε > 1e12)."""
    log_target = math.log(delta)

    def ok(e):
        return _delta_upper(z, e) <= delta

    def f(e):                                    # decreasing in e
        return _log_delta_upper(z, e) - log_target

    if ok(0.0):
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    lo = 0.0
    while hi > 1e-300:                           # a positive lower end when the root is tiny
        if f(hi / 16.0) > 0:
            lo = hi / 16.0
            break
        hi /= 16.0
    eps = optimize.brentq(f, lo, hi, xtol=5e-324, rtol=4 * _EPS, maxiter=500)
    # Never optimistic: step up past the root's own rounding until the bound meets delta.
    return float(_step_up(eps, ok))


@finite_result(nonzero=False)
def analytic_gaussian_epsilon(sigma, delta, sensitivity=1.0) -> float:
    """Smallest ε for which N(0, σ²) noise is (ε, δ)-DP (analytic Gaussian mechanism).

    Parameters
    ----------
    sigma : float > 0
        Noise standard deviation.
    delta : float in (0, 1)
    sensitivity : float > 0

    Returns
    -------
    epsilon : float
        The root of δ(ε) = delta, rounded up: δ(ε) is computed to (nearly) full relative
        precision with an error bound (see ``_gaussian_log_delta``), and the returned ε
        satisfies δ(ε) ≤ delta with that bound added, so it is never below the true ε.

    Notes
    -----
    T-fold composition of the Gaussian mechanism with noise multiplier z is exactly
    ``analytic_gaussian_epsilon(z / sqrt(T), delta)``.

    References
    ----------
    Balle & Wang (2018), Theorem 8 and Algorithm 1.
    """
    sigma = check_positive(sigma, "sigma")
    delta = check_open_unit(delta, "delta")
    sensitivity = check_positive(sensitivity, "sensitivity")
    return _epsilon_for_z(_noise_multiplier(sigma, sensitivity), delta)


@finite_result()
def analytic_gaussian_sigma(epsilon, delta, sensitivity=1.0) -> float:
    """Smallest noise std σ for which the Gaussian mechanism is (ε, δ)-DP.

    Parameters
    ----------
    epsilon : float > 0
    delta : float in (0, 1)
    sensitivity : float > 0

    Returns
    -------
    sigma : float
        Rounded up, so that the true δ(σ) ≤ delta: σ is stepped up until δ(σ), computed
        to (nearly) full relative precision and increased by its error bound (see
        ``_gaussian_log_delta``), meets delta. Unlike the classic formula this is valid
        for every ε > 0.

    Notes
    -----
    Beyond ε ~ 1e16 (where δ(σ) cannot be resolved in floating point) σ is rounded up
    against the cruder bound δ ≤ Φ(Δ/(2σ) − εσ/Δ): still valid, slightly larger.

    References
    ----------
    Balle & Wang (2018), Algorithm 1 (we solve δ(σ) = delta by bisection in log σ
    instead of their closed-form branches; the answer is the same).
    """
    epsilon = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    sensitivity = check_positive(sensitivity, "sensitivity")
    log_target = math.log(delta)

    def f(lz):                                   # decreasing in lz = log z
        return _log_delta_upper(math.exp(lz), epsilon) - log_target
    lo, hi = -5.0, 5.0
    while f(lo) < 0:
        lo -= 5.0
    while f(hi) > 0:
        hi += 5.0
    z = math.exp(optimize.brentq(f, lo, hi, xtol=1e-14))
    z = _step_up(z, lambda x: _delta_upper(x, epsilon) <= delta)
    # σ = zΔ rounded up, so that σ/Δ (exactly) is at least z
    return z if sensitivity == 1.0 else math.nextafter(z * sensitivity, math.inf)
