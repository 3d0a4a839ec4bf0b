"""The four papers' own privacy formulas, each as a documented function.

Every paper states its noise level in its *own* convention (noise on the average or
on one gradient, add/remove or replace-one neighbours). The conversions to the noise
multiplier z of Opacus / Abadi et al. (noise std z·C on the SUM of gradients clipped to
C) live in :mod:`dpclip_lab.noise`; the ``*_to_noise_multiplier`` names here are those
conversions (re-exported, or composed with the replace-one factor 1/2 where the
paper's neighbouring relation needs it), so that the exact accountants of this package
can check the closed forms: ``get_epsilon(noise_multiplier=z, ...)``.

Where a formula is loose or does not follow from its proof, the docstring says so with
numbers (computed in ``tests/test_accountants_paper_bounds.py``).

References
----------
Song, Thakkar & Thakurta (2021). Characterizing private clipped gradient descent
    on convex generalized linear problems.
Chen, Wu & Hong (2020). Understanding gradient clipping in private SGD: a
    geometric perspective.
Wang, Lei, Ying & Zhang (2022). Differentially private SGD with non-smooth losses.
Zhang et al. (2024). Differentially private SGD without clipping bias: an
    error-feedback approach (DiceSGD).
Abadi et al. (2016). Deep learning with differential privacy. CCS. Theorem 1.
"""
from __future__ import annotations

import math

import numpy as np

from .._validation import (check_int, check_interval, check_nonnegative, check_open_unit, check_positive,
                           check_probability, finite_result)
from ..noise import average_sigma_to_noise_multiplier, song_sigma_for_privacy, song_sigma_to_noise_multiplier
from ..noise import dice_sigma_to_noise_multiplier as _dice_sigma_to_noise_multiplier
from ..noise import song_ldp_sigma_to_noise_multiplier as _song_ldp_per_example_noise_multiplier
from ..noise import wang_replace_one_noise_multiplier
from ..noise import wang_sigma_to_noise_multiplier as _wang_add_remove_noise_multiplier
from .gaussian import analytic_gaussian_epsilon, classic_gaussian_sigma
from .rdp import rdp_sampled_without_replacement_gaussian

__all__ = [
    "song_thm22_sigma", "song_sigma_to_noise_multiplier", "song_thm22_true_epsilon",
    "song_thmD2_sigma", "song_ldp_replace_one_noise_multiplier",
    "abadi_thm1_noise_multiplier", "chen_thm4_sigma", "dicesgd_thm23_sigma",
    "average_sigma_to_noise_multiplier", "abadi_implied_constant",
    "wang_lemma2_sigma", "wang_output_perturbation_sigma", "wang_delta_sgd",
    "wang_lemma3_rdp", "wang_lemma3_conditions", "wang_thm11_sigma",
    "wang_thm11_conditions", "wang_remark4_beta", "wang_remark4_betas", "wang_lemma13_epsilon_threshold",
    "wang_replace_one_sigma_to_noise_multiplier",
    "dicesgd_thm38_sigma", "dicesgd_thm38_epsilon", "dicesgd_alg4_sigma", "dicesgd_sigma_to_noise_multiplier",
    "dicesgd_proof_rdp", "dicesgd_proof_epsilon",
]


def _check_order(order) -> float:
    """An RDP order: a finite number > 1."""
    try:
        lam = float(order)
    except (TypeError, ValueError):
        raise TypeError(f"order must be a number > 1, got {order!r}") from None
    if not (math.isfinite(lam) and lam > 1):
        raise ValueError(f"order must be a finite number > 1, got {order!r}")
    return lam


def _check_beta(beta) -> float:
    return check_interval(beta, "beta", 0.0, 1.0, closed=(False, False))


# ----------------------------------------------------------------------------------------
# [000] Song, Thakkar, Thakurta
# ----------------------------------------------------------------------------------------
@finite_result()
def song_thm22_sigma(clip_norm, steps, n, epsilon, delta) -> float:
    """Song et al. Thm 2.2: σ² = 2 L² T log(1/δ) / (n ε)² for DP-GD (Alg. 1).

    σ is the std of the noise added to the AVERAGE clipped gradient (1/n)Σ clip(∇ℓ),
    whose sensitivity is L/n (n public). In noise-multiplier terms z = σn/L =
    √(2T log(1/δ))/ε, i.e. one Gaussian with z/√T = √(2 log(1/δ))/ε.

    Validity: this is the zCDP/moments-style bound ρ = T/(2z²) → ε ≈ ε + ε²/(4 log(1/δ))
    with the lower-order term dropped; it is exactly valid (checked with the analytic
    Gaussian) only for moderate ε: at δ = 1e-5 the true ε of the prescribed σ exceeds
    the target for ε ≳ 7.9 (10.52 for a target of 10; for ε ≤ 7 it is conservative,
    e.g. 0.76 for a target of 1). See
    :func:`song_thm22_true_epsilon`; the lab's accountants give tighter numbers for
    the same σ. Also reachable as ``dpclip_lab.noise.song_sigma_for_privacy(epsilon,
    delta, *, n, steps, clip_norm)``.

    Parameters
    ----------
    clip_norm : float > 0
        The clipping norm L.
    steps : int >= 1
        The number of steps T.
    n : int >= 1
    epsilon : float > 0
    delta : float in (0, 1)

    Returns
    -------
    sigma : float

    References
    ----------
    Song, Thakkar & Thakurta (2021), Theorem 2.2 (from Abadi et al. 2016 and Bassily et al. 2014).
    """
    return song_sigma_for_privacy(epsilon, delta, n=n, steps=steps, clip_norm=clip_norm)


@finite_result(nonzero=False)
def song_thm22_true_epsilon(epsilon, delta, steps=1) -> float:
    """The exact ε of DP-GD run with Song et al.'s Thm 2.2 noise (analytic Gaussian, z/√T).

    Independent of L, n and T: T Gaussian steps with z = √(2T log(1/δ))/ε are one
    Gaussian with noise multiplier √(2 log(1/δ))/ε (Balle & Wang 2018).
    """
    eps = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    check_int(steps, "steps", minimum=1)
    return analytic_gaussian_epsilon(math.sqrt(2 * math.log(1 / delta)) / eps, delta)


def song_thmD2_sigma(clip_norm, steps, epsilon, delta) -> float:
    """Song et al. Thm D.2 (local DP): σ² = 2 L² T log(1/δ) / ε², noise per user report.

    Source: Song, Thakkar & Thakurta (2021), Thm D.2.

    Each user releases clip(∇ℓ(θ_t; d_i)) + N(0, σ²) at every step. NOTE (loose/wrong
    constant): under local DP a user's record may change arbitrarily, so the report's
    sensitivity is 2L (clip(g) − clip(g') can have norm 2L), not L; the formula is the
    central-DP one with n = 1. With the stated σ the noise multiplier w.r.t. the true
    sensitivity is z = σ/(2L) = √(2T log(1/δ))/(2ε), and the true ε is about twice the
    target (see :func:`song_ldp_replace_one_noise_multiplier`). This function returns the
    printed value; multiply by 2 for the replace-any-record sensitivity (the lab's
    ``LDPResult.local_dp_event()`` uses 2L).

    References
    ----------
    Song, Thakkar & Thakurta (2021), Appendix D, Theorem D.2.
    """
    return song_thm22_sigma(clip_norm, steps, 1, epsilon, delta)


def song_ldp_replace_one_noise_multiplier(sigma, clip_norm) -> float:
    """z = σ / (2L): a local report clip(g) + N(0, σ²) has sensitivity 2L (replace-one).

    Source: Song, Thakkar & Thakurta (2021), Thm D.2 (local DP).

    Half of ``dpclip_lab.noise.song_ldp_sigma_to_noise_multiplier`` (σ / L, the
    per-example multiplier that ``dp_gd_ldp`` takes); the name says which relation.
    """
    return 0.5 * _song_ldp_per_example_noise_multiplier(sigma, clip_norm=clip_norm)


# ----------------------------------------------------------------------------------------
# Abadi et al. Thm 1, as used by [002] Thm 4 and [004] Thm 2.3
# ----------------------------------------------------------------------------------------
@finite_result()
def abadi_thm1_noise_multiplier(sample_rate, steps, epsilon, delta, *, c1, c2) -> float:
    """Abadi et al. Thm 1: z ≥ c2 q √(T log(1/δ)) / ε, valid for ε < c1 q² T.

    The constants c1, c2 are NOT given in the paper ("there exist constants"); they must
    be passed. :func:`abadi_implied_constant` gives the smallest c2 that an exact
    accountant certifies for given settings.

    Raises ``ValueError`` if ε ≥ c1 q² T (outside the theorem).

    References
    ----------
    Abadi et al. (2016), Theorem 1.
    """
    q = check_probability(sample_rate, "sample_rate")
    T = check_int(steps, "steps", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    c1, c2 = check_positive(c1, "c1"), check_positive(c2, "c2")
    if eps >= c1 * q * q * T:
        raise ValueError(f"epsilon={eps} must be < c1 q² T = {c1 * q * q * T:.4g} (Abadi Thm 1)")
    return c2 * q * math.sqrt(T * math.log(1 / delta)) / eps


@finite_result()
def chen_thm4_sigma(clip_norm, steps, n, epsilon, delta, *, v) -> float:
    """Chen et al. Thm 4: σ² ≥ v c² T ln(1/δ) / (n² ε²), σ = std of noise on the AVERAGE.

    Abadi's Thm 1 in Chen's notation (batch |S_t| = qn, noise Z_t added to the average,
    eq. 8); v = c2² is unspecified in the paper and must be passed. In noise-multiplier
    terms z = σ q n / c (:func:`dpclip_lab.noise.average_sigma_to_noise_multiplier`), i.e.
    z² ≥ v q² T ln(1/δ)/ε². The side condition ε ≤ u q² T is not checked here.

    References
    ----------
    Chen, Wu & Hong (2020), Theorem 4; Abadi et al. (2016), Theorem 1.
    """
    c = check_positive(clip_norm, "clip_norm")
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    return math.sqrt(check_positive(v, "v") * c * c * T * math.log(1 / delta)) / (n * eps)


def dicesgd_thm23_sigma(clip_norm, steps, n, epsilon, delta, *, v) -> float:
    """DiceSGD Thm 2.3 (Abadi's Thm 1 for DPSGD-GC): σ² ≥ v C² T log(1/δ)/(N² ε²).

    Source: Zhang et al. (2024), Thm 2.3 (= Abadi et al. (2016), Thm 1).

    Same statement as :func:`chen_thm4_sigma` (σ on the averaged mini-batch gradient,
    Alg. 1 of Zhang et al. (2024)); the constants u, v are unspecified in the paper.

    References
    ----------
    Zhang et al. (2024), Theorem 2.3.
    """
    return chen_thm4_sigma(clip_norm, steps, n, epsilon, delta, v=v)


@finite_result()
def abadi_implied_constant(sample_rate, steps, epsilon, delta, accountant="rdp") -> float:
    """Smallest c2 in Abadi's Thm 1 that the exact accountant certifies at these settings.

    Source: Abadi et al. (2016), Thm 1.

    c2 = z* ε / (q √(T log(1/δ))) with z* = ``get_noise_multiplier(...)``. Chen's and
    DiceSGD's v is c2².
    """
    from .calibration import get_noise_multiplier
    q = check_probability(sample_rate, "sample_rate")
    T = check_int(steps, "steps", minimum=1)
    z = get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=q,
                             steps=T, accountant=accountant)
    return z * epsilon / (q * math.sqrt(T * math.log(1 / delta)))


# ----------------------------------------------------------------------------------------
# [003] Wang, Lei, Ying, Zhang
# ----------------------------------------------------------------------------------------
def wang_lemma2_sigma(sensitivity, epsilon, delta) -> float:
    """Wang et al. Lemma 2 (classic Gaussian mechanism): σ ≥ √(2 log(1.25/δ)) Δ / ε.

    The text prints √(2 log(1.25/δ) Δ)/ε (Δ inside the root, a typesetting slip: the
    cited Dwork & Roth Thm A.1 has Δ outside). Proven only for ε < 1 (raises otherwise).

    References
    ----------
    Wang, Lei, Ying & Zhang (2022), Lemma 2; Dwork & Roth (2014), Theorem A.1.
    """
    return classic_gaussian_sigma(epsilon, delta, sensitivity)


def wang_output_perturbation_sigma(delta_sgd, epsilon, delta) -> float:
    """Alg. 1 (DP-SGD-Output) line 12: σ² = 2 log(2.5/δ) Δ² / ε² (Lemma 2 at δ/2).

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 1 line 12 and Lemma 2.

    ``delta_sgd`` is the UAS bound Δ_SGD(δ/2) of Thm 7 (:func:`wang_delta_sgd`), which
    holds with probability 1 − δ/2; the other δ/2 goes to the Gaussian mechanism.
    Inherits Lemma 2's ε < 1 restriction, which the paper does not state for Alg. 1.
    """
    delta_sgd = check_positive(delta_sgd, "delta_sgd")
    return classic_gaussian_sigma(epsilon, check_open_unit(delta, "delta") / 2.0, delta_sgd)


@finite_result()
def wang_delta_sgd(*, steps, n, eta, alpha, L, M, gamma, R=None, C_alpha=None) -> float:
    """Wang et al. Thm 7: high-probability uniform argument stability Δ_SGD(γ) of SGD.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 7.

    Δ² = e · ( c_{α,2}² T η^{2/(1−α)} + 4 G² η² (1 + (T/n)(1 + c_{γ,T})) (T/n)(1 + c_{γ,T}) ),
    c_{γ,T} = max{√(3n log(n/γ)/T), 3n log(n/γ)/T}, c_{α,2}² = (1−α)/(1+α) (2^{−α}L)^{2/(1−α)}
    (0 for α = 1, when η < 1, as the paper's Remark 1 notes), and the gradient bound
    G = M + L R^α on a ball of radius R (part b, Δ̃_SGD) or G = M + L (C_α T η)^{α/2}
    on R^d (part a; pass ``C_alpha`` — defined in eq. (2) from c_{α,1} and sup ℓ(0; z)).

    Parameters
    ----------
    steps, n : int
        T and the sample size.
    eta : float
        The constant step size (< min{1, 1/L}).
    alpha : float in [0, 1]
        The Hölder exponent.
    L, M : float
        The Hölder constant, and M = sup ‖∂ℓ(0, z)‖.
    gamma : float in (0, 1)
        The failure probability.
    R : float, optional
        The radius of the domain (part b).
    C_alpha : float, optional
        Needed when R is None (part a).

    References
    ----------
    Wang, Lei, Ying & Zhang (2022), Theorem 7, eq. (2).
    """
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    eta = check_positive(eta, "eta")
    gamma = check_open_unit(gamma, "gamma")
    alpha = check_interval(alpha, "alpha", 0.0, 1.0)
    L = check_positive(L, "L")
    M = check_nonnegative(M, "M")
    x = 3 * n * math.log(n / gamma) / T
    c_gt = max(math.sqrt(x), x)
    if alpha < 1:
        c2sq = (1 - alpha) / (1 + alpha) * (2 ** -alpha * L) ** (2 / (1 - alpha))
        first = c2sq * T * eta ** (2 / (1 - alpha))
    else:
        first = 0.0
    if R is not None:
        G = M + L * check_positive(R, "R") ** alpha
    else:
        if C_alpha is None:
            raise ValueError("C_alpha is required when R is None (unbounded domain, Thm 7a)")
        C_alpha = check_nonnegative(C_alpha, "C_alpha")
        G = M + L * (C_alpha * T * eta) ** (alpha / 2)
    r = T / n * (1 + c_gt)
    return math.sqrt(math.e * (first + 4 * G * G * eta * eta * (1 + r) * r))


def wang_lemma3_conditions(sample_rate, noise_multiplier, order) -> bool:
    """Validity of Lemma 3: z² ≥ 0.67 and λ − 1 ≤ (2z²/3) log(1/(λ p (1 + z²))).

    Source: Wang, Lei, Ying & Zhang (2022), Lemma 3.

    z = σ/Δ (replace-one sensitivity Δ); p = sampling-without-replacement rate.
    """
    p = check_probability(sample_rate, "sample_rate")
    z = check_positive(noise_multiplier, "noise_multiplier")
    lam = _check_order(order)
    if z * z < 0.67:
        return False
    arg = 1.0 / (lam * p * (1 + z * z))
    return arg > 0 and lam - 1 <= (2 * z * z / 3) * math.log(arg)


@finite_result()
def wang_lemma3_rdp(sample_rate, noise_multiplier, order, *, check=True) -> float:
    """Wang et al. Lemma 3: WOR-subsampled Gaussian is (λ, 3.5 p² λ / z²)-RDP.

    Under the conditions of :func:`wang_lemma3_conditions` (``check=True`` raises
    ``ValueError`` outside them). The paper cites Liang et al. (2020) for it; it is a
    simplification of Wang, Balle, Kasiviswanathan (2019). We check it against the
    general WBK bound (:func:`~dpclip_lab.accountants.rdp_sampled_without_replacement_gaussian`)
    in the tests: it is an upper bound wherever its conditions hold on our grid.

    References
    ----------
    Wang, Lei, Ying & Zhang (2022), Lemma 3.
    """
    p = check_probability(sample_rate, "sample_rate")
    z = check_positive(noise_multiplier, "noise_multiplier")
    lam = _check_order(order)
    if check and not wang_lemma3_conditions(p, z, lam):
        raise ValueError(f"Lemma 3 does not apply at sample_rate={p}, noise_multiplier={z}, "
                         f"order={lam}: needs z² ≥ 0.67 and λ−1 ≤ (2z²/3) log(1/(λp(1+z²)))")
    return 3.5 * p * p * lam / (z * z)


@finite_result()
def wang_thm11_sigma(grad_bound, steps, n, epsilon, delta, beta) -> float:
    """Alg. 2 (DP-SGD-Gradient) line 3: σ² = 14 G² T λ / (β n² ε), λ = log(1/δ)/((1−β)ε) + 1.

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 2 line 3 and Thm 11.

    G = M + L R^α bounds every gradient, so the per-step sensitivity (replace-one,
    batch of 1) is 2G. Lemma 3 with p = 1/n then gives (λ, βε/T)-RDP per step, βε in
    total, and the classic conversion (Mironov Prop. 3) gives (ε, δ)-DP — *if* the
    conditions of :func:`wang_thm11_conditions` hold.

    References
    ----------
    Wang, Lei, Ying & Zhang (2022), Algorithm 2, Theorem 11 and its proof (Sec. 3.3).
    """
    G = check_positive(grad_bound, "grad_bound")
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    beta = _check_beta(beta)
    lam = math.log(1 / delta) / ((1 - beta) * eps) + 1
    return math.sqrt(14 * G * G * T * lam / (beta * n * n * eps))


@finite_result(nonzero=False)
def wang_thm11_conditions(sigma, grad_bound, n, epsilon, delta, beta) -> bool:
    """Conditions (32)–(33) of Thm 11 at λ = log(1/δ)/((1−β)ε) + 1.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 11, conditions (32)–(33).

    (32) σ²/(4G²) ≥ 0.67;  (33) λ − 1 ≤ σ²/(6G²) · log(n / (λ (1 + σ²/(4G²)))).
    These are Lemma 3's conditions with Δ = 2G, p = 1/n.
    """
    sigma = check_positive(sigma, "sigma")
    G = check_positive(grad_bound, "grad_bound")
    n = check_int(n, "n", minimum=1)
    epsilon = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    beta = _check_beta(beta)
    lam = math.log(1 / delta) / ((1 - beta) * epsilon) + 1
    s = sigma * sigma / (4 * G * G)
    if s < 0.67:
        return False
    arg = n / (lam * (1 + s))
    return arg > 0 and lam - 1 <= sigma * sigma / (6 * G * G) * math.log(arg)


def wang_remark4_betas(grid=999) -> np.ndarray:
    """The β candidates of Remark 4's search: an even grid of (0, 1) (``grid`` interior
    points) joined with a geometric grid from 1e-9 to its first point — at large ε only
    very small β satisfy condition (32), and an even grid alone misses them (it finds no
    β at n = 426, ε ≥ 20 although some exist).

    Source: Wang, Lei, Ying & Zhang (2022), Remark 4.
    """
    grid = check_int(grid, "grid", minimum=1)
    if grid > 10 ** 7:
        raise ValueError(f"grid must be at most 10**7 (a {grid}-point grid does not fit in memory), got {grid}")
    even = np.linspace(0, 1, grid + 2)[1:-1]
    return np.union1d(np.geomspace(1e-9, even[0], 600), even)


def wang_remark4_beta(grad_bound, steps, n, epsilon, delta, *, grid=999):
    """Remark 4's β search: among β ∈ (0, 1) meeting Thm 11's conditions, the one closest to 1/2.

    Source: Wang, Lei, Ying & Zhang (2022), Remark 4 and Thm 11.

    β runs over :func:`wang_remark4_betas` (an even grid of (0, 1) and a geometric grid
    near 0), nearest to 1/2 first (the lower of two equally near points first); the
    first feasible one is returned — it has the smallest σ among the feasible β. Used by
    ``dpclip_lab.algorithms.gradient_noise_std`` (which returns ``(sigma, beta)``).

    Returns
    -------
    beta, sigma : (float, float)
        The chosen β and Alg. 2's σ for it.

    Raises
    ------
    ValueError
        If no β on the grid satisfies (32)–(33) (then Thm 11 certifies nothing;
        Lemma 13 gives a sufficient condition on ε for T = n, δ = 1/n²).
    """
    grid = check_int(grid, "grid", minimum=1)
    G = check_positive(grad_bound, "grad_bound")
    T = check_int(steps, "steps", minimum=1)
    n_ = check_int(n, "n", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    betas = wang_remark4_betas(grid)
    betas = betas[np.argsort(np.abs(betas - 0.5), kind="stable")]
    # Screen the whole grid at once (vectorized (32)-(33)), then confirm candidates in order
    # with the scalar functions, so the answer is exactly the scalar search's.
    with np.errstate(all="ignore"):
        lam = math.log(1 / d) / ((1 - betas) * eps) + 1
        s2 = 14 * G * G * T * lam / (betas * n_ * n_ * eps)            # σ²
        ratio = s2 / (4 * G * G)
        arg = n_ / (lam * (1 + ratio))
        screen = (ratio >= 0.67 * (1 - 1e-9)) & (arg > 0) & (
            lam - 1 <= s2 / (6 * G * G) * np.log(np.where(arg > 0, arg, 1.0)) * (1 + 1e-9) + 1e-12)
    for b in betas[screen]:
        sigma = wang_thm11_sigma(G, T, n_, eps, d, b)
        if wang_thm11_conditions(sigma, G, n_, eps, d, b):
            return float(b), sigma
    raise ValueError(f"no beta in (0, 1) satisfies Wang et al. Thm 11's conditions at n={n}, "
                     f"T={steps}, epsilon={epsilon}, delta={delta}: increase epsilon or n "
                     f"(see their Lemma 13 / Fig. 1)")


def wang_lemma13_epsilon_threshold(n) -> float:
    """Lemma 13 / Fig. 1: with T = n, δ = 1/n², β exists if ε ≥ (7(n^{1/3}−1) + 4 n log n + 7) / (2n(n^{1/3}−1)).

    Source: Wang, Lei, Ying & Zhang (2022), Lemma 13 and Fig. 1.

    Requires n ≥ 18.
    NOTE (the lemma is not sufficient for small n): for n = 18 to 43 the smallest ε
    at which some β satisfies Thm 11's conditions lies *above* this threshold, so at the
    lemma's ε no β works; for larger n it holds and is loose
    (``dpclip_lab.stability.wang_thm11_smallest_epsilon`` computes the true threshold).
    """
    n = check_int(n, "n", minimum=18)
    c = n ** (1 / 3) - 1
    return (7 * c + 4 * math.log(n) * n + 7) / (2 * n * c)


def wang_replace_one_sigma_to_noise_multiplier(sigma, grad_bound) -> float:
    """z = σ / (2G): Wang's σ (noise on ONE gradient bounded by G, replace-one Δ = 2G).

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 2 line 6 and the proof of Thm 11.

    Use with ``SampledWithoutReplacementEvent(n, 1, GaussianEvent(z))`` (i_t ∼ Unif[n]).
    Half of ``dpclip_lab.noise.wang_sigma_to_noise_multiplier`` (σ / G, the lab's
    add/remove multiplier for the run); the name says which relation.
    """
    return wang_replace_one_noise_multiplier(
        _wang_add_remove_noise_multiplier(check_nonnegative(sigma, "sigma"),
                                          gradient_bound=check_positive(grad_bound, "grad_bound")))


# ----------------------------------------------------------------------------------------
# [004] DiceSGD
# ----------------------------------------------------------------------------------------
def _dicesgd_gbar(C1, C2, G_prime) -> float:
    """Ḡ = C1² + 2 min{C2², G′²}; ``G_prime=None`` uses min{C2², G′²} ≤ C2²."""
    C1 = check_positive(C1, "C1")
    C2 = check_positive(C2, "C2")
    if C1 > C2:
        raise ValueError(f"DiceSGD (Thm 3.7-3.8) requires C1 <= C2, got C1={C1!r} > C2={C2!r}")
    m = C2 if G_prime is None else min(C2, check_positive(G_prime, "G_prime"))
    return C1 * C1 + 2 * m * m


@finite_result()
def dicesgd_thm38_sigma(C1, C2, G_prime, steps, N, epsilon, delta) -> float:
    """DiceSGD Thm 3.8 / A.4 as printed: σ1² ≥ 32 T (C1² + 2 min{C2², G′²}) log(1/δ) / (N² ε²).

    Source: Zhang et al. (2024), Thm 3.8 / Thm A.4.

    THE PAPER'S CLAIM, NOT A GUARANTEE. The theorem does not hold in the worst case:
    the error-feedback term ``clip(e_t, C2)`` has sensitivity up to ``2 C2`` every
    step (not ``O(C2/N)``), and no subsampling amplification applies to it. With
    this σ1 a worst-case pair of data sets has ε far above the target (N = B = 100,
    T = 100, C1 = C2 = 1, z = 100: claimed 3.32, exact about 92.5 at δ = 1e-5). For
    a σ1 a proof supports use ``dpclip_lab.algorithms.dicesgd_noise_multiplier``.

    σ1 is the std of the noise w^t added to the update direction v^t = (1/B)Σ clip(g_i, C1)
    + clip(e^t, C2) (Alg. 2, line 6): noise on the AVERAGE. Requires C1 ≤ C2 < C/B.
    G′ (a bound from the paper's Assumption 3.5) may be ``None``: then min{C2², G′²} ≤ C2²
    is used, which can only increase σ1 (sound). Automatic DiceSGD (Alg. 4, C1 = C2 = 1)
    gives σ1 = √(96 T log(1/δ))/(N ε) (:func:`dicesgd_alg4_sigma`). Also reachable as
    ``dpclip_lab.noise.dice_sigma_for_privacy(epsilon, delta, *, n, steps, clip_norm,
    feedback_clip_norm, gradient_bound=None)``.

    NOTE (constant does not follow from the proof): the proof (App. A.2) ends with the RDP
    bound 16 α T (C1² + 2 min{C2², G′²}) / (σ1² N²) (:func:`dicesgd_proof_rdp`), and
    Lemma A.6 (ε = ρ(α) + log(1/δ)/(α−1)); minimizing over α gives
    ε = a + 2√(a log(1/δ)) with a = 16TḠ/(σ1²N²) — with the stated σ1 this is
    √2·ε + ε²/(2 log(1/δ)), not ε. The constant 32 should be 64 (plus the lower-order
    term) for the theorem to follow from its own proof. (The proof's per-step bound for
    the clipped-gradient part, 8p²C1²α/(B²σ1²), is itself 4× the MTZ Thm 11 value
    2p²C1²α/(B²σ1²) for add/remove neighbours, so the *true* ε may still be below target;
    use the exact accountants to check a given setting.)

    References
    ----------
    Zhang et al. (2024), Theorem 3.8, Theorem A.4, Appendix A.2 (eq. after (25)).
    """
    gbar = _dicesgd_gbar(C1, C2, G_prime)
    T = check_int(steps, "steps", minimum=1)
    N = check_int(N, "N", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    return math.sqrt(32 * T * gbar * math.log(1 / delta)) / (N * eps)


@finite_result(inf_if=lambda sigma1, **_: float(sigma1) == 0)
def dicesgd_thm38_epsilon(sigma1, C1, C2, G_prime, steps, N, delta) -> float:
    """DiceSGD Thm 3.8 solved for ε: ε = √(32 T Ḡ log(1/δ)) / (N σ1), Ḡ = C1² + 2 min{C2², G′²}.

    Source: Zhang et al. (2024), Thm 3.8.

    The inverse of :func:`dicesgd_thm38_sigma` (``inf`` for σ1 = 0; ``G_prime=None``
    as there): THE PAPER'S CLAIMED ε, NOT A GUARANTEE (see there).
    ``DiceSGDResult.paper_claimed_epsilon`` uses it; ``DiceSGDResult.epsilon`` is
    the valid accounting.

    References
    ----------
    Zhang et al. (2024), Theorem 3.8, Theorem A.4.
    """
    s = check_nonnegative(sigma1, "sigma1")
    if s == 0:
        return math.inf
    delta = check_open_unit(delta, "delta")
    T = check_int(steps, "steps", minimum=1)
    N = check_int(N, "N", minimum=1)
    return math.sqrt(32 * T * _dicesgd_gbar(C1, C2, G_prime) * math.log(1 / delta)) / (N * s)


@finite_result()
def dicesgd_alg4_sigma(steps, N, epsilon, delta, clip_norm=1.0) -> float:
    """Automatic DiceSGD (Alg. 4): C1 = C2 = C, σ = √(96 T log(1/δ)) C / (N ε).

    Source: Zhang et al. (2024), Alg. 4 and Thm 3.8.

    Thm 3.8 with min{C², G′²} ≤ C² (Ḡ ≤ 3C², 32·3 = 96); Alg. 4 uses C = 1 and lets
    the learning rate absorb C. Inherits Thm 3.8's constant issue.

    References
    ----------
    Zhang et al. (2024), Section 3 ("Hyperparameter tuning efficiency") and Algorithm 4.
    """
    T = check_int(steps, "steps", minimum=1)
    N = check_int(N, "N", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    delta = check_open_unit(delta, "delta")
    return math.sqrt(96 * T * math.log(1 / delta)) * check_positive(clip_norm, "clip_norm") / (N * eps)


def dicesgd_sigma_to_noise_multiplier(sigma1, batch_size, C1) -> float:  # noqa: D401
    """z = σ1 B / C1: ``dpclip_lab.noise.dice_sigma_to_noise_multiplier`` in this module's names.

    Source: Zhang et al. (2024), Alg. 1–2 line 6.
    """
    return _dice_sigma_to_noise_multiplier(check_nonnegative(sigma1, "sigma1"),
                                           batch_size=check_positive(batch_size, "batch_size"),
                                           clip_norm=check_positive(C1, "C1"))


@finite_result()
def dicesgd_proof_rdp(order, sigma1, steps, N, C1, C2, G_prime):
    """RDP at ``order`` implied by DiceSGD's proof: 16 α T (C1² + 2 min{C2², G′²}) / (σ1² N²).

    Valid only where its Lemma A.11 (MTZ 2019 Thm 11: p ≤ 1/5, σ large, α small) applies,
    and — like Thm 3.8 — it misses the 2·C2 per-step sensitivity of the error feedback:
    the proof's bound, not a guarantee.
    """
    a = np.asarray(order, dtype=float)
    if a.size == 0 or not bool(np.all(np.isfinite(a) & (a > 1))):
        raise ValueError(f"order must be finite and > 1 everywhere, got {order!r}")
    sigma1 = check_positive(sigma1, "sigma1")
    steps = check_int(steps, "steps", minimum=1)
    N = check_int(N, "N", minimum=1)
    return 16 * a * steps * _dicesgd_gbar(C1, C2, G_prime) / (sigma1 * sigma1 * N * N)


@finite_result()
def dicesgd_proof_epsilon(sigma1, steps, N, C1, C2, G_prime, delta) -> float:
    """ε from :func:`dicesgd_proof_rdp` and Lemma A.6, optimized over α > 1 in closed form.

    Source: Zhang et al. (2024), App. A.2 (the proof's RDP bound) and Lemma A.6.

    ε = a + 2√(a log(1/δ)), a = 16 T Ḡ/(σ1² N²) (at α − 1 = √(log(1/δ)/a)).
    """
    delta = check_open_unit(delta, "delta")
    a = float(dicesgd_proof_rdp(2.0, sigma1, steps, N, C1, C2, G_prime)) / 2.0  # the RDP is linear in α
    return a + 2 * math.sqrt(a * math.log(1 / delta))
