"""From RDP to (ε, δ)-DP.

Two conversions of an RDP curve ρ(α) into an (ε, δ) guarantee, minimized over the
available orders. Both are valid; the improved one is never larger, and the book
shows the gap.

References
----------
Mironov, I. (2017). Rényi differential privacy. CSF. Proposition 3.
Balle, B., Barthe, G., Gaboardi, M., Hsu, J., Sato, T. (2020). Hypothesis testing
interpretations and Rényi differential privacy. AISTATS. Theorem 21.
Canonne, C., Kamath, G., Steinke, T. (2020). The discrete Gaussian for differential
privacy. NeurIPS. Proposition 12 (the same bound).
"""
from __future__ import annotations

import numpy as np

from .._validation import check_open_unit

__all__ = ["rdp_to_epsilon_classic", "rdp_to_epsilon_improved", "rdp_to_epsilon",
           "rdp_to_epsilon_batch"]

CONVERSIONS = ("improved", "classic")


def _check_orders(orders) -> np.ndarray:
    """``orders`` as a 1-D float array: non-empty, every entry finite and > 1.

    An empty array would make every accountant report ε = 0 (no order, no bound), so
    it is refused like any other invalid order. (Shared with :mod:`.rdp`, which imports
    it from here: conversions sit below the RDP functions and import nothing of theirs.)
    """
    if isinstance(orders, (str, bytes)):
        raise TypeError(f"orders must be an array of numbers > 1, got {orders!r}")
    try:
        o = np.atleast_1d(np.asarray(orders, dtype=float))
    except (TypeError, ValueError):
        raise TypeError(f"orders must be an array of numbers > 1, got {orders!r}") from None
    if o.ndim != 1 or o.size == 0:
        raise ValueError(f"orders must be a non-empty 1-D array of numbers > 1, got {orders!r}")
    if not np.all(np.isfinite(o)) or not np.all(o > 1):
        raise ValueError(f"orders must be finite numbers > 1, got {orders!r}")
    return o


def _check_rdp(r: np.ndarray) -> None:
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError("rdp must be non-negative numbers (inf allowed), got nan or < 0")


def _prepare(orders, rdp, delta):
    delta = check_open_unit(delta, "delta")
    o = _check_orders(orders)
    try:
        r = np.atleast_1d(np.asarray(rdp, dtype=float))
    except (TypeError, ValueError):
        raise TypeError(f"rdp must be an array of numbers, got {rdp!r}") from None
    if o.shape != r.shape:
        raise ValueError(f"orders and rdp must have the same shape, got {o.shape} and {r.shape}")
    _check_rdp(r)
    return o, r, delta


def _argmin(eps, o):
    i = int(np.argmin(eps))
    return max(float(eps[i]), 0.0), float(o[i])


def _epsilon_by_order(o, r, delta, conversion):
    """The bound at every order (``r`` may carry leading batch axes); minimized by callers."""
    if conversion == "improved":
        return r + np.log1p(-1.0 / o) - (np.log(delta) + np.log(o)) / (o - 1.0)
    if conversion == "classic":
        return r + np.log(1.0 / delta) / (o - 1.0)
    raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")


def rdp_to_epsilon_classic(orders, rdp, delta):
    """ε = min_α ρ(α) + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3).

    Parameters
    ----------
    orders : array of float > 1
    rdp : array of float >= 0 (inf allowed), same shape
    delta : float in (0, 1)

    Returns
    -------
    epsilon, order : (float, float)
        The bound and the order that attains it.
    """
    o, r, delta = _prepare(orders, rdp, delta)
    return _argmin(_epsilon_by_order(o, r, delta, "classic"), o)


def rdp_to_epsilon_improved(orders, rdp, delta):
    """ε = min_α ρ(α) + log((α−1)/α) − (log δ + log α)/(α − 1).

    Balle et al. (2020), Theorem 21 (also Canonne, Kamath, Steinke 2020, Prop. 12).
    Never larger than the classic bound; the form Opacus and dp_accounting use.

    Returns
    -------
    epsilon, order : (float, float)
    """
    o, r, delta = _prepare(orders, rdp, delta)
    return _argmin(_epsilon_by_order(o, r, delta, "improved"), o)


def rdp_to_epsilon(orders, rdp, delta, conversion="improved"):
    """Dispatch to :func:`rdp_to_epsilon_improved` or :func:`rdp_to_epsilon_classic`.

    Source: Mironov (2017), Prop. 3 (classic) or Balle et al. (2020), Thm 21 (improved).
    """
    if conversion == "improved":
        return rdp_to_epsilon_improved(orders, rdp, delta)
    if conversion == "classic":
        return rdp_to_epsilon_classic(orders, rdp, delta)
    raise ValueError(f"conversion must be 'improved' or 'classic', got {conversion!r}")


def rdp_to_epsilon_batch(orders, rdp, delta, conversion="improved"):
    """:func:`rdp_to_epsilon` for many RDP curves at once (one per row of ``rdp``).

    Source: Mironov (2017), Prop. 3 (classic) or Balle et al. (2020), Thm 21 (improved), row by row.

    Parameters
    ----------
    orders : array of float > 1, shape (n,)
    rdp : array of float >= 0 (inf allowed), shape (m, n)
    delta : float in (0, 1)
    conversion : {"improved", "classic"}

    Returns
    -------
    epsilon, order : ndarrays of shape (m,)
        Row by row the same numbers as :func:`rdp_to_epsilon` (same float operations).
    """
    delta = check_open_unit(delta, "delta")
    o = _check_orders(orders)
    try:
        r = np.asarray(rdp, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"rdp must be an array of numbers, got {rdp!r}") from None
    if r.ndim != 2 or r.shape[1] != o.shape[0]:
        raise ValueError(f"rdp must have shape (m, {o.shape[0]}), got {r.shape}")
    _check_rdp(r)
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    if r.shape[0] == 0:
        return np.zeros(0), np.zeros(0)
    eps = _epsilon_by_order(o, r, delta, conversion)
    i = np.argmin(eps, axis=1)
    return np.maximum(eps[np.arange(len(eps)), i], 0.0), o[i]
