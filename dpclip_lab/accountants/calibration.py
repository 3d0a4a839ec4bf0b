"""The two questions a DP-SGD user asks: "what is my ε?" and "how much noise do I need?".

Both are about T steps of the Poisson-subsampled Gaussian mechanism (add/remove-one
neighbours, sensitivity 1, noise std z·C on the sum of gradients clipped to C) — the
setting of Abadi et al. (2016) and Opacus, with the same argument names as Opacus.
"""
from __future__ import annotations

import math

from .._validation import check_int, check_open_unit, check_positive, check_probability
from .events import GaussianEvent, PoissonSampledEvent
from .pld import PLDAccountant
from .rdp import RDPAccountant

__all__ = ["get_epsilon", "get_noise_multiplier", "make_accountant", "ACCOUNTANTS"]

ACCOUNTANTS = ("rdp", "pld")


def make_accountant(accountant: str = "rdp", **kwargs):
    """A fresh accountant by name: ``"rdp"`` → RDPAccountant, ``"pld"`` → PLDAccountant."""
    if accountant == "rdp":
        return RDPAccountant(**kwargs)
    if accountant == "pld":
        return PLDAccountant(**kwargs)
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


def get_epsilon(*, noise_multiplier, sample_rate, steps, delta, accountant="rdp") -> float:
    """ε after ``steps`` steps of DP-SGD (Poisson-subsampled Gaussian mechanism).

    Parameters
    ----------
    noise_multiplier : float > 0
        z: noise std / clipping norm (noise added to the SUM of clipped gradients).
    sample_rate : float in (0, 1]
        Poisson sampling probability q (expected batch size / dataset size).
    steps : int >= 0
        Number of steps T; ``steps=0`` gives ε = 0.
    delta : float in (0, 1)
    accountant : {"rdp", "pld"}
        ``"rdp"``: Rényi DP (Mironov et al. 2019) with the improved conversion of Balle
        et al. (2020) — fast, slightly loose. ``"pld"``: privacy-loss distribution by FFT
        (connect-the-dots; ~1e-4 relative excess) — tight. Both return upper bounds.

    Returns
    -------
    epsilon : float
        With ``sample_rate=1`` and "pld" this is the analytic Gaussian mechanism's ε at
        noise multiplier z/√T (Balle & Wang 2018), up to the stated error, never below.

    References
    ----------
    Abadi et al. (2016); Mironov, Talwar, Zhang (2019); Koskela et al. (2020);
    Doroshenko et al. (2022).
    """
    z = check_positive(noise_multiplier, "noise_multiplier")
    q = check_probability(sample_rate, "sample_rate")
    steps = check_int(steps, "steps", minimum=0)
    delta = check_open_unit(delta, "delta")
    acc = make_accountant(accountant)
    if steps == 0:
        return 0.0
    return float(acc.compose(PoissonSampledEvent(q, GaussianEvent(z)), steps).get_epsilon(delta))


def get_noise_multiplier(*, target_epsilon, target_delta, sample_rate, steps,
                         accountant="rdp", epsilon_tolerance=0.01) -> float:
    """Smallest noise multiplier z (to tolerance) whose ε is at most ``target_epsilon``.

    Bisection on z (ε falls as z grows). The returned z always satisfies
    ``get_epsilon(z) <= target_epsilon`` and ``get_epsilon(z) > target_epsilon -
    epsilon_tolerance`` (unless z is at the lower search limit).

    Parameters
    ----------
    target_epsilon : float > 0
    target_delta : float in (0, 1)
    sample_rate : float in (0, 1]
    steps : int >= 1
    accountant : {"rdp", "pld"}
    epsilon_tolerance : float > 0
        Stop when target − tolerance ≤ ε(z) ≤ target.

    Returns
    -------
    noise_multiplier : float

    Raises
    ------
    ValueError
        If the target cannot be reached with z ≤ 1e4 (e.g. a target ε below what the
        RDP orders can certify, or δ too small).

    References
    ----------
    Opacus, ``opacus.accountants.utils.get_noise_multiplier`` (same interface).
    """
    eps_t = check_positive(target_epsilon, "target_epsilon")
    delta = check_open_unit(target_delta, "target_delta")
    q = check_probability(sample_rate, "sample_rate")
    steps = check_int(steps, "steps", minimum=1)
    tol = check_positive(epsilon_tolerance, "epsilon_tolerance")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")

    def eps(z):
        return get_epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta,
                           accountant=accountant)

    z_max = 1e4
    z_hi = 1.0
    e_hi = eps(z_hi)
    while e_hi > eps_t:
        if z_hi >= z_max:
            raise ValueError(
                f"target_epsilon={eps_t!r} is unreachable at target_delta={delta!r} with "
                f"noise_multiplier <= {z_max:g} ({accountant} accountant gives ε={e_hi:.4g}); "
                "raise target_epsilon or target_delta")
        z_hi = min(z_hi * 4.0, z_max)
        e_hi = eps(z_hi)
    z_lo = z_hi / 4.0 if z_hi > 1.0 else 0.0
    z_min = 1e-3
    if z_lo == 0.0:
        z_lo = z_hi
        while z_lo > z_min:
            z_lo /= 4.0
            if eps(z_lo) > eps_t:
                break
        else:
            return z_hi if eps(z_hi) <= eps_t else z_hi  # pragma: no cover
        if eps(z_lo) <= eps_t:
            return z_lo
    # invariant: eps(z_lo) > target >= eps(z_hi)
    while e_hi < eps_t - tol and z_hi - z_lo > 1e-9 * z_hi:
        z_mid = 0.5 * (z_lo + z_hi)
        e_mid = eps(z_mid)
        if e_mid > eps_t:
            z_lo = z_mid
        else:
            z_hi, e_hi = z_mid, e_mid
    return float(z_hi)
