"""Rényi differential privacy (RDP) of the mechanisms DP-SGD is built from.

A mechanism M is (α, ρ)-RDP if D_α(M(D) ‖ M(D')) ≤ ρ for all neighbours D ~ D',
where D_α(P‖Q) = log E_Q[(P/Q)^α] / (α − 1) (Mironov 2017, Def. 3). RDP composes by
addition, order by order, so an accountant keeps one vector ``rdp[orders]`` and adds
to it at every step. Every function here returns that vector for an array of orders
(numpy, vectorized over orders) and works in log space.

Conventions: ``noise_multiplier`` z = noise std / ℓ2-sensitivity; ``orders`` are
α > 1. Where a value is computed approximately it is rounded *up* (never optimistic).

References
----------
Mironov, I. (2017). Rényi differential privacy. CSF.
Mironov, I., Talwar, K., Zhang, L. (2019). Rényi differential privacy of the sampled
Gaussian mechanism. arXiv:1908.10530.
Wang, Y.-X., Balle, B., Kasiviswanathan, S. (2019). Subsampled Rényi differential
privacy and analytical moments accountant. AISTATS (arXiv:1808.00087 for Thm 27).
Cohen, H., Rodriguez Villegas, F., Zagier, D. (2000). Convergence acceleration of
alternating series. Experimental Mathematics 9(1).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from .._validation import (check_int, check_nonnegative, check_open_unit, check_positive,
                           check_probability)
from .conversions import _check_orders, rdp_to_epsilon
from .events import (EpsilonDeltaEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent, NoOpEvent,
                     PoissonSampledEvent, SampledWithoutReplacementEvent, flatten, unsupported)

__all__ = [
    "DEFAULT_ORDERS",
    "rdp_gaussian",
    "rdp_laplace",
    "rdp_poisson_subsampled_gaussian",
    "rdp_sampled_without_replacement_gaussian",
    "RDPAccountant",
]

#: Default RDP orders: dense and fractional near 1 (large ε), every tenth up to 11 and
#: every integer up to 64 (a superset of Opacus's default orders 1.1, 1.2, …, 10.9,
#: 12, …, 63, so that ε is never looser than Opacus's on the same conversion beyond
#: ~1e-10 relative, where our fractional-order values are rounded up), then a
#: coarse geometric tail to 2048 (tiny ε).
DEFAULT_ORDERS = _check_orders(np.unique(np.concatenate([
    np.round(np.arange(1.01, 1.1, 0.01), 2),
    np.round(np.arange(1.1, 11.0, 0.1), 1),
    np.arange(3.0, 10.0, 0.25),
    np.arange(10, 65, 1.0),
    [72, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048.0],
])))
DEFAULT_ORDERS.setflags(write=False)


def _as_orders(orders) -> np.ndarray:
    """``orders`` validated (:func:`~dpclip_lab.accountants.conversions._check_orders`);
    :data:`DEFAULT_ORDERS` is validated once, at import."""
    if orders is DEFAULT_ORDERS:
        return DEFAULT_ORDERS
    return _check_orders(orders)


def _noise(noise_multiplier, name="noise_multiplier") -> float:
    """A Gaussian noise multiplier z in [0, inf) (0 = no noise, ε = inf)."""
    return check_nonnegative(noise_multiplier, name)


#: Noise multipliers outside [_Z_TINY, _Z_HUGE] are accounted by the plain Gaussian bound
#: α/(2z²) (:func:`_gaussian_rdp`), also for the subsampled mechanisms: subsampling never
#: increases RDP (the subsampled pair is a mixture of Gaussian pairs, and E_Q[(P/Q)^α] is
#: jointly convex). Their series lose all meaning there in floating point (z² and 1/z² reach
#: the ends of the float range), and nothing is lost: below _Z_TINY the bound is ≥ 5e199 α
#: (the subsampled value differs by O(log q)), above _Z_HUGE it is below every ε the orders
#: can certify.
_Z_TINY, _Z_HUGE = 1e-100, 1e100

#: The smallest RDP reported for a mechanism with noise (never exactly 0: ρ = 0 means "no
#: privacy loss at all", and an accountant would report ε = 0).
_RHO_MIN = float(np.nextafter(0.0, 1.0))


def _gaussian_rdp(z: float, o: np.ndarray) -> np.ndarray:
    """α / (2z²) at the orders ``o`` for z > 0: inf where it overflows, never 0 where it underflows.

    For ordinary z the float expression ``o / (2z²)``; for z above ~1e154 (2z² = inf) it is
    computed as ((α/2)/z)/z and rounded up by two ulp (not to 0 — the true value is > 0).
    """
    zz2 = 2.0 * z * z
    if zz2 == 0.0:                        # z below ~1e-162: ρ = inf, still an upper bound
        return np.full_like(o, np.inf)
    if zz2 == math.inf:
        return np.nextafter(np.nextafter((0.5 * o) / z / z, np.inf), np.inf)
    with np.errstate(over="ignore"):      # z below ~1e-154: ρ = inf, still an upper bound
        return o / zz2


def rdp_gaussian(noise_multiplier, orders=DEFAULT_ORDERS) -> np.ndarray:
    """RDP of the Gaussian mechanism: ρ(α) = α / (2 z²).

    Parameters
    ----------
    noise_multiplier : float >= 0
        z = std / ℓ2-sensitivity; z = 0 gives inf.
    orders : array of float > 1

    Returns
    -------
    rdp : ndarray, shape (len(orders),)
        inf where α/(2z²) overflows (z below ~1e-154); where it underflows (z above ~1e154)
        rounded up, never to 0 (ρ = 0 would certify ε = 0).

    References
    ----------
    Mironov (2017), Proposition 7 / Table II.
    """
    z = _noise(noise_multiplier)
    o = _as_orders(orders)
    if z == 0:
        return np.full_like(o, np.inf)
    return _gaussian_rdp(z, o)


def rdp_laplace(noise_multiplier, orders=DEFAULT_ORDERS) -> np.ndarray:
    """RDP of the Laplace mechanism with scale b = ``noise_multiplier`` (ℓ1-sensitivity 1).

    ρ(α) = log[ α/(2α−1) · e^{(α−1)/b} + (α−1)/(2α−1) · e^{−α/b} ] / (α − 1).

    References
    ----------
    Mironov (2017), Proposition 6 / Table II.

    Raises
    ------
    ValueError
        If ``noise_multiplier`` is not in (0, inf) (b = 0 is no noise: use ε = inf
        explicitly; a negative scale is meaningless) or ``orders`` is invalid.
    """
    b = check_positive(noise_multiplier, "noise_multiplier")
    o = _as_orders(orders)
    log_terms = np.stack([np.log(o / (2 * o - 1)) + (o - 1) / b,
                          np.log((o - 1) / (2 * o - 1)) - o / b])
    # ρ ≥ 0 always; at very large b the two terms cancel to within rounding (±1e-16)
    return np.maximum(special.logsumexp(log_terms, axis=0) / (o - 1), 0.0)


# ----------------------------------------------------------------------------------------
# Poisson-subsampled Gaussian (Mironov, Talwar, Zhang 2019)
# ----------------------------------------------------------------------------------------
def _log_abs_binom_and_sign(alpha: np.ndarray, n_terms: int):
    """log|C(α, i)| and sign(C(α, i)) for i = 0..n_terms-1, shape (len(α), n_terms).

    Built as a cumulative product C(α, i) = Π_{k<i} (α − k)/(k + 1), so it is exact in
    sign and accurate in log for non-integer α (no Γ of negative arguments).
    """
    k = np.arange(n_terms - 1, dtype=float)
    factors = (alpha[:, None] - k[None, :]) / (k[None, :] + 1.0)
    with np.errstate(divide="ignore"):
        logs = np.concatenate([np.zeros((len(alpha), 1)),
                               np.cumsum(np.log(np.abs(factors)), axis=1)], axis=1)
    neg = np.concatenate([np.zeros((len(alpha), 1), dtype=bool),
                          np.cumsum(factors < 0, axis=1) % 2 == 1], axis=1)
    return logs, np.where(neg, -1.0, 1.0)


def _segment_logsumexp(terms: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """log Σ exp(terms) over the consecutive segments ``terms[starts[i]:starts[i]+counts[i]]``."""
    with np.errstate(invalid="ignore"):
        mx = np.maximum.reduceat(terms, starts)
        safe = np.where(np.isfinite(mx), mx, 0.0)
        s = np.add.reduceat(np.exp(terms - np.repeat(safe, counts)), starts)
    with np.errstate(divide="ignore"):
        return np.where(np.isneginf(mx), -np.inf, safe + np.log(s))


def _log_a_int(q: float, z: float, alpha: np.ndarray) -> np.ndarray:
    """log A_α for integer α ≥ 2 (MTZ 2019, Sec. 3.2, binomial expansion).

    A_α = Σ_{k=0}^{α} C(α,k) (1−q)^{α−k} q^k exp((k² − k)/(2z²)). Since the same sum
    without the exponential is 1, we sum A_α − 1 (terms k ≥ 2 with ``expm1``) so that
    tiny q keeps full relative precision, then return log1p(A_α − 1).

    The (α, k) pairs with 2 ≤ k ≤ α are laid out as one flat, ragged array (Σα terms,
    not len(α) × max α), and each order's sum is a segmented log-sum-exp.
    """
    counts = alpha.astype(np.int64) - 1                # k = 2, ..., α
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    a = np.repeat(alpha, counts)
    k = np.arange(counts.sum(), dtype=float) - np.repeat(starts, counts) + 2.0
    log_binom = special.gammaln(a + 1) - special.gammaln(k + 1) - special.gammaln(a - k + 1)
    expo = (k * k - k) / (2 * z * z)                   # > 0 for k ≥ 2
    with np.errstate(over="ignore"):      # (each branch clamped where not selected: no log(0))
        log_expm1 = np.where(expo > 30, expo + np.log1p(-np.exp(-np.maximum(expo, 30.0))),
                             np.log(np.expm1(np.minimum(expo, 30.0))))
    terms = log_binom + (a - k) * math.log1p(-q) + k * math.log(q) + log_expm1
    return np.logaddexp(0.0, _segment_logsumexp(terms, starts, counts))


#: Euler steps used to bound the remainder of the fractional-order series (see below).
_EULER_STEPS = 4


def _log_a_frac(q: float, z: float, alpha: np.ndarray, rtol: float = 1e-13) -> np.ndarray:
    """log A_α for fractional α (MTZ 2019, Sec. 3.3, the two-sided series), rounded up.

    With z0 = z² log(1/q − 1) + 1/2 (where q·N(1,z²) and (1−q)·N(0,z²) densities meet),
    A_α = Σ_{i≥0} C(α, i) (s0_i + s1_i),
    s0_i = q^i (1−q)^{α−i} exp((i² − i)/(2z²)) Φ̄((i − z0)/z),
    s1_i = q^{α−i} (1−q)^i exp((j² − j)/(2z²)) Φ̄((z0 − j)/z),  j = α − i.

    Numerics (all rounded up):

    * **The remainder is bracketed, not just bounded by a term.** For i > α the terms
      alternate in sign and their magnitude is g(i) = |C(α,i)| (s0_i + s1_i)
      = (1−q)^α e^{−z0²/2z²} · |sin πα|/π · B(i − α, α + 1) · [m(u_i) + m(v_i)],
      with u_i = (i − z0)/z, v_i = (i − α + z0)/z and the Mills factor
      m(u) = e^{u²/2} Φ̄(u) ∝ ∫_0^∞ e^{−ut − t²/2} dt. The Beta function and m are
      Laplace transforms of positive measures, so g is *completely monotone* in i. For
      such g the alternating remainder S = Σ_{k≥0} (−1)^k g(n + k) obeys the Euler
      identity S = Σ_{p<P} h_p/2^{p+1} + S_P/2^P, where h_p = (−Δ)^p g(n) ≥ 0 and S_P,
      the alternating remainder of the (again CM) sequence (−Δ)^P g, lies in [0, h_P]
      (apply S(g) = g(n)/2 + S(−Δg)/2 P times; cf. Cohen, Rodriguez Villegas, Zagier
      2000 on alternating series of moment sequences). We add the P = 4 estimate and
      round it up by h_P/2^P: a bracket ~n⁴ times narrower than the classical "first
      omitted term", so α + 32 terms suffice on every grid we test, where the plain
      bound needed up to 16,000 (q = 0.1, α → 1).
    * Terms are added (32, 128, … beyond α, per order) until that bracket is below
      ``rtol`` of the sum.
    * We sum A − 1, not A: the i = 0 term is split as (1−q)^α Φ(z0/z) =
      1 + [expm1(α log(1−q)) Φ(z0/z) − Φ̄(z0/z)], so that for tiny q (A − 1 ≈ 1e-12)
      log A = log1p(A − 1) keeps its relative precision.
    * A float error bound is added: each term's log is a sum of parts, each accurate to
      about an ulp of its size (log Φ̄ to ~3), so the term is accurate to 4·eps·Σ|parts|
      relative; plus 64 ulp of Σ|terms| for the summation itself.
    """
    P = _EULER_STEPS
    n_extra = 32
    eps = np.finfo(float).eps
    log1mq, logq = math.log1p(-q), math.log(q)
    z0 = z * z * (math.log(1.0 - q) - logq) + 0.5
    phi_z0, phibar_z0 = special.ndtr(z0 / z), special.ndtr(-z0 / z)
    # (−Δ)^p g(n) = Σ_k (−1)^k C(p, k) g(n + k), as rows of a matrix
    diff = np.array([[(-1) ** k * math.comb(p, k) if k <= p else 0 for k in range(P + 1)]
                     for p in range(P + 1)], dtype=float)
    euler = diff[:P].T @ (0.5 ** np.arange(1, P + 1))     # weights of g(n+k) in Σ h_p/2^{p+1}
    out = np.empty_like(alpha)
    todo = np.arange(len(alpha))
    while todo.size:
        a = alpha[todo]
        n_keep = int(np.ceil(a.max())) + n_extra
        log_c, sign = _log_abs_binom_and_sign(a, n_keep + P + 1)
        i = np.arange(n_keep + P + 1, dtype=float)[None, :]
        j = a[:, None] - i
        lt0, lt1 = special.log_ndtr(-(i - z0) / z), special.log_ndtr(-(z0 - j) / z)
        log_s0 = i * logq + j * log1mq + (i * i - i) / (2 * z * z) + lt0
        log_s1 = j * logq + i * log1mq + (j * j - j) / (2 * z * z) + lt1
        log_s0[:, 0] = -np.inf                        # i = 0 of s0 is handled exactly
        log_t = log_c + np.logaddexp(log_s0, log_s1)
        shift = log_t[:, :n_keep].max(axis=1)
        w = sign * np.exp(log_t - shift[:, None])
        # relative float error of each term (see Numerics): the parts of log s0 and of
        # log s1, weighted by the share of s0 and s1 in the term; the shift cancels.
        parts0 = (np.abs(i * logq) + np.abs(j * log1mq) + (i * i + i) / (2 * z * z)
                  + 3 * np.abs(lt0))
        parts1 = (np.abs(j * logq) + np.abs(i * log1mq) + (j * j + np.abs(j)) / (2 * z * z)
                  + 3 * np.abs(lt1))
        with np.errstate(invalid="ignore"):
            share0 = np.nan_to_num(np.exp(log_s0 - np.logaddexp(log_s0, log_s1)))
        parts = (share0 * parts0 + (1 - share0) * parts1 + (i + 1) * (np.abs(log_c) + 1)
                 + np.abs(log_t - shift[:, None]) + 4)
        term_err = 4 * eps * parts * np.abs(w)
        # the remainder i ≥ n_keep, bracketed by the Euler transform and rounded up
        g = np.abs(w[:, n_keep:])
        base = g @ euler
        width = np.maximum(g @ diff[P], 0.0) / 2 ** P
        s_n = sign[:, n_keep]
        tail = s_n * base + np.where(s_n > 0, width, 0.0)
        total = w[:, :n_keep].sum(axis=1) + tail
        err = (term_err[:, :n_keep].sum(axis=1) + 2 * term_err[:, n_keep:].sum(axis=1)
               + 64 * eps * np.abs(w).sum(axis=1))
        c0 = np.expm1(a * log1mq) * phi_z0 - phibar_z0   # (1−q)^α Φ(z0/z) − 1
        with np.errstate(over="ignore"):
            scale = np.exp(shift)
            am1 = scale * (total + err) + c0 + 64 * eps * np.abs(c0)  # A − 1, rounded up
        big = shift > 0.5
        with np.errstate(divide="ignore", invalid="ignore"):
            log_a = np.where(
                big,
                np.logaddexp(shift + np.log(np.maximum(total + err, 1e-300)),
                             a * log1mq + math.log(max(phi_z0, 1e-300))),
                np.log1p(np.maximum(am1, -0.5)))
        done = (width <= rtol * np.maximum(np.abs(total), 1e-300)) | (n_extra >= 1 << 15)
        out[todo[done]] = log_a[done]
        todo = todo[~done]
        n_extra *= 4
    return out


@lru_cache(maxsize=4096)
def _rdp_psg_cached(q: float, z: float, orders: tuple) -> np.ndarray:
    o = np.asarray(orders, dtype=float)
    if z == 0:
        out = np.full_like(o, np.inf)
    elif q == 1.0 or not _Z_TINY <= z <= _Z_HUGE:
        out = _gaussian_rdp(z, o)         # exact at q = 1; the valid bound at extreme z
    else:
        out = np.empty_like(o)
        is_int = o == np.floor(o)
        if is_int.any():
            out[is_int] = _log_a_int(q, z, o[is_int]) / (o[is_int] - 1)
        if (~is_int).any():
            out[~is_int] = _log_a_frac(q, z, o[~is_int]) / (o[~is_int] - 1)
        # RDP of the subsampled mechanism never exceeds that of the full Gaussian; and it is
        # > 0 (an A_α − 1 below the float range, e.g. at q = 1e-300, rounds up, not to 0).
        out = np.maximum(np.minimum(np.maximum(out, 0.0), _gaussian_rdp(z, o)), _RHO_MIN)
    out.setflags(write=False)
    return out


def rdp_poisson_subsampled_gaussian(sample_rate, noise_multiplier,
                                    orders=DEFAULT_ORDERS) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism (add/remove-one neighbours).

    ρ(α) = log(A_α) / (α − 1), with A_α = E_{x∼N(0,z²)}[(1 − q + q e^{(2x−1)/(2z²)})^α],
    the Rényi divergence between the mixture (1−q)N(0,z²) + qN(1,z²) and N(0,z²),
    which dominates the other direction (MTZ 2019, Thm 5).

    Integer orders use the binomial expansion (MTZ 2019, Sec. 3.2), all orders in one
    flat array; fractional orders the two-sided series of MTZ 2019, Sec. 3.3, with
    signed coefficients and a rigorous bracket on the truncated remainder (rounded up;
    see ``_log_a_frac``). Results are cached per (q, z, orders) — sliders over T or δ
    reuse them. A cold call on :data:`DEFAULT_ORDERS` takes about a millisecond.

    Parameters
    ----------
    sample_rate : float in (0, 1]
        Poisson sampling probability q.
    noise_multiplier : float >= 0
        z = noise std / ℓ2-sensitivity (0 gives inf).
    orders : array of float > 1

    Returns
    -------
    rdp : ndarray, shape (len(orders),)
        One step's RDP at each order (read-only; copy before editing).

    Notes
    -----
    For z outside [1e-100, 1e100] the full Gaussian's α/(2z²) is returned instead of the
    series (valid: subsampling never increases RDP). There z² or 1/z² reaches the end
    of the float range and the series give NaN; the bound loses nothing that matters
    (inf or ~5e199 α below, and below every ε the orders certify above).

    References
    ----------
    Mironov, Talwar, Zhang (2019), Sections 3.2 and 3.3; Abadi et al. (2016), the
    moments accountant.
    """
    q = check_probability(sample_rate, "sample_rate")
    z = _noise(noise_multiplier)
    o = _as_orders(orders)
    return _rdp_psg_cached(q, z, tuple(o.tolist()))


# ----------------------------------------------------------------------------------------
# Sampling without replacement (Wang, Balle, Kasiviswanathan 2019)
# ----------------------------------------------------------------------------------------
#: Largest j whose forward difference Δ^j f(0) the Gaussian-specific WOR bound evaluates;
#: terms with larger j use the general WBK term (as dp_accounting does above 256).
_WOR_MAX_DIFF = 256


@lru_cache(maxsize=256)
def _log_lr_central_moments_upper(z: float, jmax: int) -> np.ndarray:
    """Upper bounds on log E_q[(L − 1)^j], j = 0..jmax, for the Gaussian likelihood ratio.

    With L = dN(1, z²)/dN(0, z²) and q = N(0, z²), E_q[L^k] = e^{k(k−1)/(2z²)} =: f(k), so
    E_q[(L − 1)^j] = Σ_k C(j, k) (−1)^{j−k} f(k) = Δ^j f(0), the j-th forward difference
    of f at 0 (non-negative for even j). The alternating sum cancels heavily when z is
    large (its terms are up to ~2^j times the result), so we return the computed value
    *plus* a float error bound: where cancellation has destroyed the digits, the bound is
    large and the caller's min{·, general term} falls back to the general WBK term.
    """
    eps = np.finfo(float).eps
    s = 1.0 / (z * z)
    j = np.arange(jmax + 1, dtype=float)[:, None]
    k = np.arange(jmax + 1, dtype=float)[None, :]
    inside = k <= j
    with np.errstate(invalid="ignore"):
        log_binom = special.gammaln(j + 1) - special.gammaln(k + 1) - special.gammaln(
            np.where(inside, j - k, 0.0) + 1)
    log_t = np.where(inside, log_binom + 0.5 * s * k * (k - 1), -np.inf)
    shift = log_t.max(axis=1, keepdims=True)
    w = np.exp(log_t - shift)
    sign = np.where((j - k) % 2 == 0, 1.0, -1.0)
    total = (sign * w).sum(axis=1)
    rel = (4 * eps * (3 * special.gammaln(j + 1) + 0.5 * s * k * k
                      + np.abs(np.where(inside, log_t - shift, 0.0)) + 4) + (jmax + 2) * eps)
    err = (w * rel).sum(axis=1)
    out = shift[:, 0] + np.log(np.maximum(total + err, 1e-300))
    out.setflags(write=False)
    return out


def _wor_cgf_int(gamma: float, z: float, alpha_int: np.ndarray,
                 bound: str = "gaussian") -> np.ndarray:
    """K(α) = (α−1)·ε'(α) of the WOR-subsampled Gaussian at integer α ≥ 2.

    Both bounds have the form K(α) ≤ log(1 + Σ_{j=2}^{α} γ^j C(α, j) c_j) with, for
    the Gaussian (ε(j) = j/(2z²), ε(∞) = ∞):

    * ``"general"`` (WBK 2019, Thm 9): c_2 = min{4(e^{ε(2)} − 1), 2 e^{ε(2)}},
      c_j = 2 e^{(j−1) ε(j)} for j ≥ 3;
    * ``"gaussian"`` (WBK 2019, Thm 27 of arXiv:1808.00087): the j-th term of the
      binomial expansion is bounded through the ternary |χ|^j divergence, which for the
      Gaussian is controlled by the central moments of its likelihood ratio,
      B_j = E_q[(L − 1)^j] = Δ^j f(0) for even j and, by Cauchy–Schwarz,
      B_j ≤ (B_{j−1} B_{j+1})^{1/2} for odd j; then c_j = min{4 B_j, 2 e^{(j−1) ε(j)}}
      (so c_2 is the same in both). For j > 256 the general c_j is used.
    """
    s = 1.0 / (z * z)
    counts = alpha_int.astype(np.int64) - 1                 # j = 2, ..., α
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    a = np.repeat(alpha_int, counts)
    j = np.arange(counts.sum(), dtype=float) - np.repeat(starts, counts) + 2.0
    log_binom = special.gammaln(a + 1) - special.gammaln(j + 1) - special.gammaln(a - j + 1)
    log_c2 = min(math.log(4.0) + s + math.log(-math.expm1(-s)), math.log(2.0) + s)
    log_c = np.where(j == 2, log_c2, math.log(2.0) + 0.5 * s * (j - 1) * j)
    if bound == "gaussian":
        jmax = int(min(alpha_int.max(), _WOR_MAX_DIFF))
        log_b = _log_lr_central_moments_upper(z, jmax + 1)
        use = (j > 2) & (j <= jmax)
        ji = np.where(use, j, 2).astype(np.int64)
        lo, hi = 2 * (ji // 2), 2 * ((ji + 1) // 2)
        log_tight = math.log(4.0) + 0.5 * (log_b[lo] + log_b[hi])
        log_c = np.where(use, np.minimum(log_c, log_tight), log_c)
    terms = log_binom + j * math.log(gamma) + log_c
    return np.logaddexp(0.0, _segment_logsumexp(terms, starts, counts))


WOR_BOUNDS = ("gaussian", "general")


def rdp_sampled_without_replacement_gaussian(sample_rate, noise_multiplier,
                                             orders=DEFAULT_ORDERS, *,
                                             bound="gaussian") -> np.ndarray:
    """RDP of the Gaussian mechanism on a subset drawn without replacement (replace-one).

    Integer orders: an upper bound of Wang, Balle, Kasiviswanathan (2019) — by default
    the Gaussian-specific one (arXiv:1808.00087, Thm 27; the bound dp_accounting uses),
    up to ~1/3 smaller than the general Theorem 9 at orders 4–16; ``bound="general"``
    gives Theorem 9 applied to the Gaussian (ε(α) = α/(2z²)). Fractional orders: the
    cumulant K(α) = (α−1)ε'(α) is convex in α, so it lies below the chord between
    ⌊α⌋ and ⌈α⌉ (WBK 2019, Cor. 10), with K(1) = 0.

    Parameters
    ----------
    sample_rate : float in (0, 1]
        γ = sample_size / n.
    noise_multiplier : float >= 0
        z = std / replace-one sensitivity (for clipped sums: std / (2C)).
    orders : array of float > 1
    bound : {"gaussian", "general"}
        Which WBK bound (see :func:`_wor_cgf_int` for both formulas).

    Returns
    -------
    rdp : ndarray, shape (len(orders),)

    Notes
    -----
    The Gaussian-specific bound needs the central moments E[(L − 1)^j] of the likelihood
    ratio, alternating sums that cancel badly for large z; we carry a float error bound
    and fall back to the general term wherever it is the smaller (so the result is
    never below the exact Thm 27 value, and never above Thm 9). For z outside
    [1e-100, 1e100], where the bounds' terms over- or underflow (1/z² = inf or 0), the
    full Gaussian's α/(2z²) is returned (valid: subsampling never increases RDP).

    Wang, Lei, Ying & Zhang (2022), Lemma 3 uses the simplified bound
    3.5 γ² α / z² under conditions; see
    :func:`dpclip_lab.accountants.paper_bounds.wang_lemma3_rdp`.
    """
    g = check_probability(sample_rate, "sample_rate")
    z = _noise(noise_multiplier)
    o = _as_orders(orders)
    if bound not in WOR_BOUNDS:
        raise ValueError(f"bound must be one of {WOR_BOUNDS}, got {bound!r}")
    if z == 0:
        return np.full_like(o, np.inf)
    if g == 1.0 or not _Z_TINY <= z <= _Z_HUGE:
        return _gaussian_rdp(z, o)            # exact at γ = 1; the valid bound at extreme z
    lo, hi = np.floor(o), np.ceil(o)
    ints = np.unique(np.concatenate([lo, hi]))
    ints = ints[ints >= 2]
    cgf = dict(zip(ints.tolist(), _wor_cgf_int(g, z, ints, bound).tolist())) if ints.size else {}
    cgf[1.0] = 0.0
    k_lo = np.array([cgf[x] for x in lo])
    k_hi = np.array([cgf[x] for x in hi])
    t = o - lo
    return np.maximum(((1 - t) * k_lo + t * k_hi) / (o - 1), _RHO_MIN)


# ----------------------------------------------------------------------------------------
# The accountant
# ----------------------------------------------------------------------------------------
class RDPAccountant:
    """Rényi-DP accountant: adds one RDP vector per step, converts to (ε, δ) on demand.

    Supported events (see :mod:`dpclip_lab.accountants.events`):

    * ``GaussianEvent`` (ρ = α/2z²), ``LaplaceEvent`` (Mironov 2017, Prop. 6);
    * ``PoissonSampledEvent(q, GaussianEvent)`` (MTZ 2019; add/remove-one);
    * ``SampledWithoutReplacementEvent(n, m, GaussianEvent)`` (WBK 2019, the
      Gaussian-specific bound, Thm 27 of arXiv:1808.00087; replace-one — mixing it with add/remove events gives a bound for the union of
      the two relations only if z is scaled accordingly, see the events module);
    * ``EpsilonDeltaEvent(ε_i, δ_i)``: an (ε, δ) step has no useful RDP curve, so it is
      tracked *separately* and added by basic composition: the run is
      (ε_RDP(δ − Σδ_i) + Σε_i, δ)-DP, where ε_RDP is the RDP part converted at the
      remaining δ (Dwork & Roth 2014, Thm 3.16; sequential composition holds for any
      mix of DP guarantees);
    * ``NoOpEvent`` (nothing), ``NonPrivateEvent`` (ε = inf from then on);
    * ``ComposedEvent`` and ``SelfComposedEvent`` of the above.

    Parameters
    ----------
    orders : array of float > 1, optional
        RDP orders; default :data:`DEFAULT_ORDERS` (1.01 … 2048, fractional near 1).
    conversion : {"improved", "classic"}
        RDP → (ε, δ) conversion (see :mod:`dpclip_lab.accountants.conversions`).

    Examples
    --------
    >>> from dpclip_lab.accountants import RDPAccountant, PoissonSampledEvent, GaussianEvent
    >>> acc = RDPAccountant().compose(PoissonSampledEvent(256 / 60000, GaussianEvent(1.1)), 10000)
    >>> round(acc.get_epsilon(1e-5), 2)
    2.16
    """

    def __init__(self, orders=None, conversion="improved"):
        self.orders = DEFAULT_ORDERS if orders is None else np.sort(_as_orders(orders))
        if conversion not in ("improved", "classic"):
            raise ValueError(f"conversion must be 'improved' or 'classic', got {conversion!r}")
        self.conversion = conversion
        self.rdp = np.zeros_like(self.orders, dtype=float)
        self.eps_delta_epsilon = 0.0   # basic-composition part (EpsilonDeltaEvent)
        self.eps_delta_delta = 0.0
        self.non_private = False

    # --- composition ------------------------------------------------------------------
    def _event_rdp(self, event):
        if isinstance(event, GaussianEvent):
            return rdp_gaussian(event.noise_multiplier, self.orders)
        if isinstance(event, LaplaceEvent):
            return rdp_laplace(event.noise_multiplier, self.orders)
        if isinstance(event, PoissonSampledEvent) and isinstance(event.event, GaussianEvent):
            return rdp_poisson_subsampled_gaussian(event.sample_rate,
                                                   event.event.noise_multiplier, self.orders)
        if (isinstance(event, SampledWithoutReplacementEvent)
                and isinstance(event.event, GaussianEvent)):
            return rdp_sampled_without_replacement_gaussian(
                event.sample_rate, event.event.noise_multiplier, self.orders)
        raise unsupported(event, "RDPAccountant")

    def compose(self, event, count: int = 1) -> "RDPAccountant":
        """Account for ``event`` run ``count`` times; returns ``self`` (chainable).

        Raises ``ValueError`` naming the event if it is not supported; in that case the
        accountant is left unchanged.
        """
        count = check_int(count, "count", minimum=0)
        rdp, eps_d, delta_d, nonpriv = np.zeros_like(self.rdp), 0.0, 0.0, False
        for leaf, c in flatten(event, count):      # validate everything before mutating
            if isinstance(leaf, NoOpEvent):
                continue
            if isinstance(leaf, NonPrivateEvent):
                nonpriv = True
            elif isinstance(leaf, EpsilonDeltaEvent):
                eps_d += c * leaf.epsilon
                delta_d += c * leaf.delta
            else:
                rdp = rdp + c * self._event_rdp(leaf)
        self.rdp = self.rdp + rdp
        self.eps_delta_epsilon += eps_d
        self.eps_delta_delta += delta_d
        self.non_private |= nonpriv
        return self

    # --- queries ----------------------------------------------------------------------
    def get_epsilon_and_order(self, delta):
        """(ε, α*) for the composed run at ``delta``; α* is nan when no order was used."""
        delta = check_open_unit(delta, "delta")
        if self.non_private:
            return math.inf, math.nan
        rest = delta - self.eps_delta_delta
        if rest <= 0:
            return math.inf, math.nan
        if not np.any(self.rdp > 0):
            return self.eps_delta_epsilon, math.nan
        eps, order = rdp_to_epsilon(self.orders, self.rdp, rest, self.conversion)
        return eps + self.eps_delta_epsilon, order

    def get_epsilon(self, delta) -> float:
        """ε of the composed run at ``delta`` (an upper bound)."""
        return self.get_epsilon_and_order(delta)[0]
