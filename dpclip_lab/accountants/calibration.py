"""The two questions a DP-SGD user asks: "what is my ε?" and "how much noise do I need?".

Both are about T steps of the Poisson-subsampled Gaussian mechanism (add/remove-one
neighbours, sensitivity 1, noise std z·C on the sum of gradients clipped to C) — the
setting of Abadi et al. (2016) and Opacus, with the same argument names as Opacus.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .._validation import check_int, check_open_unit, check_positive, check_probability
from .conversions import CONVERSIONS, rdp_to_epsilon_batch
from .events import GaussianEvent, PoissonSampledEvent
from .pld import PLDAccountant
from .rdp import RDPAccountant, rdp_poisson_subsampled_gaussian

__all__ = ["get_epsilon", "get_noise_multiplier", "epsilon_curve", "make_accountant",
           "ACCOUNTANTS"]

ACCOUNTANTS = ("rdp", "pld")


def make_accountant(accountant: str = "rdp", **kwargs):
    """Lab utility: A fresh accountant by name: ``"rdp"`` → RDPAccountant, ``"pld"`` → PLDAccountant."""
    if accountant == "rdp":
        return RDPAccountant(**kwargs)
    if accountant == "pld":
        return PLDAccountant(**kwargs)
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


def get_epsilon(*, noise_multiplier, sample_rate, steps, delta, accountant="rdp") -> float:
    """ε after ``steps`` steps of DP-SGD (Poisson-subsampled Gaussian mechanism).

    Source: Mironov (2017), Prop. 1 and Balle et al. (2020), Thm 21 (RDP); Mironov, Talwar & Zhang (2019), Sec. 3.3 (the subsampled Gaussian); Zhu, Dong & Wang (2022), Prop. 30 (PLD).

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
        Every z > 0 gives a valid bound: inf where it overflows (z below ~1e-154), and
        "pld" reports the RDP bound, with a ``PLDFallbackWarning``, where the privacy loss
        is too wide for its grid (z below ~1.4e-3).

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


#: The search range of :func:`get_noise_multiplier`: up to _Z_MAX, and down to the smallest
#: positive normal float (the accountants answer for every z > 0: a finite bound or inf).
_Z_MAX = 1e4
_Z_MIN = sys.float_info.min


def get_noise_multiplier(*, target_epsilon, target_delta, sample_rate, steps,
                         accountant="rdp", epsilon_tolerance=0.01) -> float:
    """Smallest noise multiplier z (to tolerance) whose ε is at most ``target_epsilon``.

    Source: the inverse of :func:`get_epsilon` (Opacus's name), whose accountants follow Mironov (2017), Prop. 1 and Balle et al. (2020), Thm 21.

    Bisection on z (ε falls as z grows). The returned z always satisfies
    ``get_epsilon(z) <= target_epsilon`` and ``get_epsilon(z) >= target_epsilon -
    epsilon_tolerance`` (unless z is at the lower search limit, the smallest positive
    normal float ~2.2e-308, which no target reaches: ε is inf there). Huge targets are
    searched for downward as far as needed (ε = 1e9 needs z ~ 1e-4); the bisection runs to
    adjacent floats if the tolerance needs it.

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
        RDP orders can certify, or δ too small); or if no float z meets the tolerance
        (the accountant's ε jumps by more than ``epsilon_tolerance`` between two adjacent
        floats — e.g. where "pld" hands over to its RDP fallback); the message names the
        largest ε ≤ target found, at which z, so a looser ``epsilon_tolerance`` can be asked for.

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
    memo = {}

    def eps(z):
        if z not in memo:
            memo[z] = get_epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta,
                                  accountant=accountant)
        return memo[z]

    z_max = _Z_MAX
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
    if z_lo == 0.0:
        # ε(1) <= target: search downward, 1/4, 1/16, ..., 4^-5 (then bisect on [z_lo, 1]) ...
        z_lo = z_hi
        while z_lo > 1e-3:
            z_lo /= 4.0
            if eps(z_lo) > eps_t:
                break
        else:
            # ... and, for huge targets, on: z, z², z⁴, ... down to _Z_MIN, then bisect
            # in log z until the bracket is a factor 4 wide.
            z_hi, e_hi = z_lo, eps(z_lo)
            while True:
                if z_hi <= _Z_MIN:
                    return float(z_hi)               # the lower search limit meets the target
                z_lo = max(z_hi * z_hi, _Z_MIN)
                if eps(z_lo) > eps_t:
                    break
                z_hi, e_hi = z_lo, eps(z_lo)
            while e_hi < eps_t - tol and z_hi > 4.0 * z_lo:
                z_mid = math.sqrt(z_lo) * math.sqrt(z_hi)   # (z_lo * z_hi may underflow)
                if eps(z_mid) > eps_t:
                    z_lo = z_mid
                else:
                    z_hi, e_hi = z_mid, eps(z_mid)
    # invariant: eps(z_lo) > target >= eps(z_hi)
    while e_hi < eps_t - tol:
        z_mid = 0.5 * (z_lo + z_hi)
        if not z_lo < z_mid < z_hi:                  # adjacent floats: no z meets the tolerance
            raise ValueError(
                f"no noise_multiplier gives target_epsilon - epsilon_tolerance <= ε <= target_epsilon "
                f"(target_epsilon={eps_t!r}, epsilon_tolerance={tol!r}): the {accountant} accountant's "
                f"ε jumps from {eps(z_lo)!r} at z={z_lo!r} to {e_hi!r} at the next float z={z_hi!r}; "
                f"z={z_hi!r} meets the target — pass a larger epsilon_tolerance to accept it")
        e_mid = eps(z_mid)
        if e_mid > eps_t:
            z_lo = z_mid
        else:
            z_hi, e_hi = z_mid, e_mid
    return float(z_hi)


def _curve_steps(steps, accountant, num_points):
    """The step counts of a curve: 1..T, a geometric subset ending at T, or those given."""
    if np.ndim(steps) == 0:
        total = check_int(steps, "steps", minimum=1)
        if accountant == "rdp" or total <= num_points:
            return np.arange(1, total + 1)
        grid = np.unique(np.round(np.geomspace(1, total, num_points)).astype(np.int64))
        return np.union1d(grid, [total])
    t = np.asarray(steps)
    if t.ndim != 1 or t.size == 0 or not np.issubdtype(t.dtype, np.integer) or np.any(t < 1):
        raise ValueError(f"steps must be an int >= 1 or a 1-D array of ints >= 1, got {steps!r}")
    return t.astype(np.int64)


def epsilon_curve(*, noise_multiplier, sample_rate, steps, delta, accountant="rdp",
                  conversion="improved", num_points=24, value_discretization_interval=None):
    """ε along a DP-SGD run: after t steps, for t = 1..T (or the step counts given).

    The privacy "odometer" of the book's accounting chapter: the same mechanism as
    :func:`get_epsilon` (Poisson-subsampled Gaussian, add/remove-one), evaluated at many
    run lengths at once.

    * ``"rdp"``: one RDP vector ρ(α) of a step (cached), t·ρ(α) for all t as one
      (t × orders) array, converted row by row (:func:`~dpclip_lab.accountants.conversions.rdp_to_epsilon_batch`);
      with an int ``steps`` every t = 1..T is returned. Costs about one ``get_epsilon``
      plus T × len(orders) flops.
    * ``"pld"``: one FFT composition per t, so with an int ``steps`` a geometric subset
      of about ``num_points`` step counts is returned, always including T.

    In both cases the value at t equals ``get_epsilon(..., steps=t)`` with the same
    accountant (for "pld" when ``value_discretization_interval`` is None).

    Parameters
    ----------
    noise_multiplier : float > 0
    sample_rate : float in (0, 1]
    steps : int >= 1 or 1-D array of ints >= 1
        T (all of 1..T for "rdp"; a subset for "pld"), or the step counts wanted.
    delta : float in (0, 1)
    accountant : {"rdp", "pld"}
    conversion : {"improved", "classic"}
        RDP → (ε, δ) conversion ("rdp" only; see :mod:`~dpclip_lab.accountants.conversions`).
    num_points : int >= 2
        About how many step counts "pld" evaluates when ``steps`` is an int.
    value_discretization_interval : float > 0, optional
        "pld" only: one grid spacing for every t (faster, comparable across t); default
        ``None`` lets each t pick its own for ~1e-4 relative error, as ``get_epsilon`` does.

    Returns
    -------
    t : ndarray of int, shape (m,)
        The step counts.
    epsilon : ndarray of float, shape (m,)
        ε after t[i] steps (an upper bound); non-decreasing in t for "rdp".

    Examples
    --------
    >>> t, eps = epsilon_curve(noise_multiplier=1.1, sample_rate=256 / 60000, steps=10000,
    ...                        delta=1e-5)
    >>> t.shape, round(float(eps[-1]), 2)
    ((10000,), 2.16)

    References
    ----------
    Mironov (2017), Prop. 1 (RDP composes additively); Balle et al. (2020), Thm 21;
    Koskela et al. (2020) and Doroshenko et al. (2022) for "pld".
    """
    z = check_positive(noise_multiplier, "noise_multiplier")
    q = check_probability(sample_rate, "sample_rate")
    delta = check_open_unit(delta, "delta")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    num_points = check_int(num_points, "num_points", minimum=2)
    t = _curve_steps(steps, accountant, num_points)
    if accountant == "rdp":
        acc = RDPAccountant(conversion=conversion)
        rho = rdp_poisson_subsampled_gaussian(q, z, acc.orders)
        eps = np.empty(len(t))
        for lo in range(0, len(t), 4096):          # bounded memory for long runs
            block = t[lo:lo + 4096]
            rdp = np.zeros((len(block), len(rho))) + block[:, None].astype(float) * rho
            eps[lo:lo + 4096] = rdp_to_epsilon_batch(acc.orders, rdp, delta, conversion)[0]
        return t, eps
    event = PoissonSampledEvent(q, GaussianEvent(z))
    eps = np.array([PLDAccountant(value_discretization_interval).compose(event, int(n))
                    .get_epsilon(delta) for n in t])
    return t, eps
