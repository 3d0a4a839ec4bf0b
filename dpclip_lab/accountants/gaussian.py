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
    Dwork & Roth (2014), Theorem A.1; used as Lemma 2 of Wang et al. (paper 003) and
    Def. 2.2 of Zhang et al. (DiceSGD, paper 004).
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
        δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ).

    References
    ----------
    Balle & Wang (2018), Theorem 8.
    """
    sigma = check_positive(sigma, "sigma")
    epsilon = check_nonnegative(epsilon, "epsilon")
    sensitivity = check_positive(sensitivity, "sensitivity")
    return float(gaussian_delta_for_epsilon(_noise_multiplier(sigma, sensitivity), epsilon))


def _noise_multiplier(sigma: float, sensitivity: float) -> float:
    """``σ / Δ``, refused where it over- or underflows (inf or 0 would give NaN, or a silent 0 / inf)."""
    z = sigma / sensitivity
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"sigma / sensitivity = {sigma!r} / {sensitivity!r} over- or underflows a float "
                         f"(got {z!r}); rescale sigma and sensitivity")
    return z


def _epsilon_for_z(z: float, delta: float) -> float:
    """Smallest ε ≥ 0 (rounded up) with δ(ε) ≤ delta for noise multiplier z."""
    if gaussian_delta_for_epsilon(z, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta_for_epsilon(z, hi) > delta:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    f = lambda e: math.log(max(gaussian_delta_for_epsilon(z, e), 1e-320)) - math.log(delta)  # noqa: E731
    eps = optimize.brentq(f, 0.0, hi, xtol=1e-14, rtol=1e-15)
    # Never optimistic: step up until the root really satisfies δ(ε) ≤ delta.
    while gaussian_delta_for_epsilon(z, eps) > delta:
        eps = eps * (1 + 1e-12) + 1e-15
    return float(eps)


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
        The root of δ(ε) = delta, rounded up (so the returned ε is always valid).

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
        Rounded up, so that ``analytic_gaussian_delta(sigma, epsilon) <= delta``.
        Unlike the classic formula this is valid for every ε > 0.

    References
    ----------
    Balle & Wang (2018), Algorithm 1 (we solve δ(σ) = delta by bisection in log σ
    instead of their closed-form branches; the answer is the same).
    """
    epsilon = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    sensitivity = check_positive(sensitivity, "sensitivity")
    f = lambda lz: (math.log(max(gaussian_delta_for_epsilon(math.exp(lz), epsilon), 1e-320))  # noqa: E731
                    - math.log(delta))
    lo, hi = -5.0, 5.0
    if math.isnan(f(lo)) or math.isnan(f(hi)):
        raise ValueError(f"epsilon={epsilon!r} is too large to compute δ(σ) in floating point; "
                         "use a smaller epsilon (δ is 0 to machine precision well before this)")
    while f(lo) < 0:
        lo -= 5.0
    while f(hi) > 0:
        hi += 5.0
    lz = optimize.brentq(f, lo, hi, xtol=1e-14)
    z = math.exp(lz)
    while gaussian_delta_for_epsilon(z, epsilon) > delta:
        z *= 1 + 1e-12
    return z * sensitivity
