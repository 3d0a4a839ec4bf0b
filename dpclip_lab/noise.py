"""Each paper's noise parameter, converted to and from the noise multiplier.

The lab has one noise parameter, the **noise multiplier** ``z`` of Abadi et al.
(2016) and Opacus: Gaussian noise of standard deviation ``z · C`` is added to the
*sum* of per-example gradients clipped to norm ``C``, and the noisy sum is divided
by the *expected* batch size ``b`` (``n`` for full-batch methods). The noise on
the averaged gradient therefore has standard deviation ``z · C / b``.

The four papers each name their noise differently:

=====================  ==============================================  ========================
paper                  their parameter                                 noise multiplier
=====================  ==============================================  ========================
Song et al. Alg. 1     σ: std on the *average* over n, clip norm L     ``z = σ n / L``
Song et al. App. D     σ: std added by *each* example (local DP)       ``z = σ / L`` (per example)
Chen et al. eq. (8)    σ: std of Z_t on the *average* over |S_t|       ``z = σ b / c``
DiceSGD Alg. 1–2       σ1: std of w on the averaged v over B           ``z = σ1 B / C1``
Wang et al. Alg. 2     σ: std on one example's gradient, bound G       ``z = σ / G`` (add/remove)
=====================  ==============================================  ========================

For Wang et al. the neighbouring relation matters: their Lemma 3 / Theorem 11
are stated for *replace-one* neighbours, whose sensitivity is ``2G``
(``G = M + L R^α`` bounds every gradient on the ball). The lab runs their
Algorithm 2 as DP-SGD with clip norm ``G`` (a no-op when the bound holds) and
noise multiplier ``z = σ/G`` in its own add/remove convention, and records the
privacy event with the replace-one multiplier ``σ / (2G) = z / 2``
(:func:`wang_replace_one_noise_multiplier`), which is what Wang–Balle–
Kasiviswanathan's subsampled-RDP bound (and ``dp_accounting``'s
``SampledWithoutReplacementDpEvent``) expects: the ratio of the noise std to the
replace-one sensitivity.

This module holds the *conversions* σ ↔ z only. The papers' closed-form
calibrations (σ for a target (ε, δ), and ε for a given σ) live in
:mod:`dpclip_lab.accountants.paper_bounds`; :func:`song_sigma_for_privacy`
is an alias kept here for the book's chapters that meet it next to the
conversions. (DiceSGD's Thm 3.8 calibration is not a privacy guarantee — see
:mod:`dpclip_lab.algorithms.dice_sgd` — so it has no alias here that would
suggest one: it is ``accountants.paper_bounds.dicesgd_thm38_sigma``.)
"""
from __future__ import annotations

import math

from ._validation import check_int, check_nonnegative, check_positive, finite_result

__all__ = [
    "song_sigma_to_noise_multiplier", "noise_multiplier_to_song_sigma", "song_sigma_for_privacy",
    "song_ldp_sigma_to_noise_multiplier", "noise_multiplier_to_song_ldp_sigma",
    "chen_sigma_to_noise_multiplier", "noise_multiplier_to_chen_sigma",
    "dice_sigma_to_noise_multiplier", "noise_multiplier_to_dice_sigma", "wang_sigma_to_noise_multiplier", "noise_multiplier_to_wang_sigma",
    "wang_replace_one_noise_multiplier", "averaged_noise_std", "average_sigma_to_noise_multiplier",
]


def _result(value: float, expr: str, scale: float) -> float:
    """``value`` if it is finite, and non-zero when the noise parameter ``scale`` is: a
    conversion that over- or underflows (``batch_size=1e-320``, ``sigma=1e-300`` with
    ``n=1``, ``clip_norm=1e300``) must not return inf or a silent 0."""
    if not math.isfinite(value) or (scale > 0 and value == 0):
        raise ValueError(f"{expr} = {value!r} over- or underflows a float; rescale the inputs")
    return value


def averaged_noise_std(noise_multiplier, clip_norm, batch_size) -> float:
    """Std of the noise on the averaged gradient: ``z · C / b``.

    Source: Abadi et al. (2016), Alg. 1 (noise σC on the sum, divided by the batch size).
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    return _result(z * check_positive(clip_norm, "clip_norm") / check_positive(batch_size, "batch_size"),
                   "noise_multiplier * clip_norm / batch_size", z)


def average_sigma_to_noise_multiplier(sigma, clip_norm, batch_size) -> float:
    """``z = σ b / C`` for noise of std σ on the *average* of b gradients clipped to C.

    Source: Chen, Wu & Hong (2020), eq. (8); Zhang et al. (2024), Alg. 1 (noise on the average).

    Inverse of :func:`averaged_noise_std`. This is the convention of Chen et al.
    eq. (8) and of DiceSGD's σ1 (and of Abadi's Thm 1 as restated by Chen Thm 4 and
    DiceSGD Thm 2.3); ``b`` may be an expected (Poisson) batch size.
    """
    s = check_nonnegative(sigma, "sigma")
    return _result(s * check_positive(batch_size, "batch_size") / check_positive(clip_norm, "clip_norm"),
                   "sigma * batch_size / clip_norm", s)


# -- Song, Thakkar, Thakurta (2021) ---------------------------------------------------------
def song_sigma_to_noise_multiplier(sigma, clip_norm, n) -> float:
    """Song et al. Alg. 1 line 4: ``N(0, σ²)`` on ``g_t = (1/n) Σ clip(∇ℓ_i, L)`` → ``z = σ n / L``.

    Source: Song, Thakkar & Thakurta (2021), Alg. 1 line 4.

    Song's σ is the noise on the *average* over n examples (sensitivity ``L/n``,
    n public). Call as ``(sigma, clip_norm, n)`` or with keywords ``n=``,
    ``clip_norm=``. Also exported as ``accountants.paper_bounds.song_sigma_to_noise_multiplier``.
    """
    s = check_nonnegative(sigma, "sigma")
    return _result(s * check_int(n, "n", minimum=1) / check_positive(clip_norm, "clip_norm"),
                   "sigma * n / clip_norm", s)


def noise_multiplier_to_song_sigma(noise_multiplier, *, n, clip_norm) -> float:
    """Inverse of :func:`song_sigma_to_noise_multiplier`: ``σ = z L / n``.

    Source: Song, Thakkar & Thakurta (2021), Alg. 1 line 4.
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    return _result(z * check_positive(clip_norm, "clip_norm") / check_int(n, "n", minimum=1),
                   "noise_multiplier * clip_norm / n", z)


@finite_result()
def song_sigma_for_privacy(epsilon, delta, *, n, steps, clip_norm) -> float:
    """Song et al. Thm 2.2's σ: alias of :func:`dpclip_lab.accountants.paper_bounds.song_thm22_sigma`.

    Source: Song, Thakkar & Thakurta (2021), Thm 2.2.

    ``σ² = 2 L² T log(1/δ) / (n ε)²`` makes Alg. 1 (ε, δ)-DP (for moderate ε; see there).
    The formula lives here, below the accountants; ``song_thm22_sigma`` calls it.
    """
    L = check_positive(clip_norm, "clip_norm")
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    delta = check_positive(delta, "delta")
    if not delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    return math.sqrt(2 * L * L * T * math.log(1 / delta)) / (n * eps)


def song_ldp_sigma_to_noise_multiplier(sigma, *, clip_norm) -> float:
    """Song et al. App. D: each example adds ``N(0, σ²)`` to its clipped gradient → ``z = σ / L`` per example.

    Source: Song, Thakkar & Thakurta (2021), App. D (Thm D.2).

    This is the lab's (add/remove, per-example) multiplier, the one ``dp_gd_ldp``
    takes. Relative to local DP's replace-any-record sensitivity ``2L`` it is
    ``z / 2``, which is what ``accountants.paper_bounds.song_ldp_sigma_to_noise_multiplier``
    (same name, a factor 2 apart) returns.
    """
    s = check_nonnegative(sigma, "sigma")
    return _result(s / check_positive(clip_norm, "clip_norm"), "sigma / clip_norm", s)


def noise_multiplier_to_song_ldp_sigma(noise_multiplier, *, clip_norm) -> float:
    """Inverse of :func:`song_ldp_sigma_to_noise_multiplier`: ``σ = z L``.

    Source: Song, Thakkar & Thakurta (2021), App. D (Thm D.2).
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    return _result(z * check_positive(clip_norm, "clip_norm"), "noise_multiplier * clip_norm", z)


# -- Chen, Wu, Hong (2020) ------------------------------------------------------------------
def chen_sigma_to_noise_multiplier(sigma, *, batch_size, clip_norm) -> float:
    """Chen et al. eq. (8): ``Z_t ~ N(0, σ² I)`` added to the *averaged* clipped gradient → ``z = σ b / c``.

    Source: Chen, Wu & Hong (2020), eq. (8).
    """
    return average_sigma_to_noise_multiplier(sigma, clip_norm, batch_size)


def noise_multiplier_to_chen_sigma(noise_multiplier, *, batch_size, clip_norm) -> float:
    """Inverse of :func:`chen_sigma_to_noise_multiplier`: ``σ = z c / b``.

    Source: Chen, Wu & Hong (2020), eq. (8).
    """
    return averaged_noise_std(noise_multiplier, clip_norm, batch_size)


# -- Zhang et al. (DiceSGD, 2024) -----------------------------------------------------------
def dice_sigma_to_noise_multiplier(sigma1, *, batch_size, clip_norm) -> float:
    """DiceSGD Alg. 1–2 line 6: ``w ~ N(0, σ1² I)`` added to ``v = (1/B) Σ clip(g_i, C1) + clip(e, C2)``.

    Source: Zhang et al. (2024), Alg. 1–2 line 6.

    So ``σ1`` is the std on the *averaged* direction and ``z = σ1 B / C1`` (the
    multiplier relative to the per-example clip norm C1, as for DPSGD-GC). This is
    the z of a DPSGD-GC run with the same noise (Poisson rate B/N); DiceSGD's error
    feedback leaks more, so its own ε is larger than DP-SGD's at this z.
    """
    return average_sigma_to_noise_multiplier(check_nonnegative(sigma1, "sigma1"), clip_norm, batch_size)


def noise_multiplier_to_dice_sigma(noise_multiplier, *, batch_size, clip_norm) -> float:
    """Inverse of :func:`dice_sigma_to_noise_multiplier`: ``σ1 = z C1 / B``.

    Source: Zhang et al. (2024), Alg. 1–2 line 6.
    """
    return averaged_noise_std(noise_multiplier, clip_norm, batch_size)


# -- Wang, Lei, Ying, Zhang -----------------------------------------------------------------
def wang_sigma_to_noise_multiplier(sigma, *, gradient_bound) -> float:
    """Wang et al. Alg. 2 line 6: ``b_t ~ N(0, σ² I)`` on one example's gradient, ``‖∂ℓ‖ ≤ G``.

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 2 line 6.

    Returns the lab's (add/remove) multiplier ``z = σ / G`` for DP-SGD with batch
    size 1 and clip norm ``G``. The replace-one multiplier ``σ / (2G)`` of their
    Lemma 3 is :func:`wang_replace_one_noise_multiplier` of this one, and is what
    ``accountants.paper_bounds.wang_sigma_to_noise_multiplier`` (same name, a factor
    2 apart) returns.
    """
    s = check_nonnegative(sigma, "sigma")
    return _result(s / check_positive(gradient_bound, "gradient_bound"), "sigma / gradient_bound", s)


def noise_multiplier_to_wang_sigma(noise_multiplier, *, gradient_bound) -> float:
    """Inverse of :func:`wang_sigma_to_noise_multiplier`: ``σ = z G``.

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 2 line 6.
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    return _result(z * check_positive(gradient_bound, "gradient_bound"), "noise_multiplier * gradient_bound", z)


def wang_replace_one_noise_multiplier(noise_multiplier) -> float:
    """``z / 2``: the multiplier relative to the replace-one sensitivity ``2G`` (Wang et al. Thm 11 proof).

    Source: Wang, Lei, Ying & Zhang (2022), Thm 11 (its proof).
    """
    return check_nonnegative(noise_multiplier, "noise_multiplier") / 2.0
