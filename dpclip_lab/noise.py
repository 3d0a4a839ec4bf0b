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
"""
from __future__ import annotations

import math

from ._validation import check_int, check_nonnegative, check_open_unit, check_positive

__all__ = [
    "song_sigma_to_noise_multiplier", "noise_multiplier_to_song_sigma", "song_sigma_for_privacy",
    "song_ldp_sigma_to_noise_multiplier", "noise_multiplier_to_song_ldp_sigma", "song_ldp_sigma_for_privacy",
    "chen_sigma_to_noise_multiplier", "noise_multiplier_to_chen_sigma",
    "dice_sigma_to_noise_multiplier", "noise_multiplier_to_dice_sigma", "dice_sigma_for_privacy",
    "dice_epsilon", "wang_sigma_to_noise_multiplier", "noise_multiplier_to_wang_sigma",
    "wang_replace_one_noise_multiplier", "averaged_noise_std",
]


def averaged_noise_std(noise_multiplier, clip_norm, batch_size) -> float:
    """Std of the noise on the averaged gradient: ``z · C / b``."""
    return (check_nonnegative(noise_multiplier, "noise_multiplier") * check_positive(clip_norm, "clip_norm")
            / check_positive(batch_size, "batch_size"))


# -- Song, Thakkar, Thakurta (2021) ---------------------------------------------------------
def song_sigma_to_noise_multiplier(sigma, *, n, clip_norm) -> float:
    """Song et al. Alg. 1 line 4: ``N(0, σ²)`` on ``g_t = (1/n) Σ clip(∇ℓ_i, L)`` → ``z = σ n / L``."""
    return (check_nonnegative(sigma, "sigma") * check_int(n, "n", minimum=1)
            / check_positive(clip_norm, "clip_norm"))


def noise_multiplier_to_song_sigma(noise_multiplier, *, n, clip_norm) -> float:
    """Inverse of :func:`song_sigma_to_noise_multiplier`: ``σ = z L / n``."""
    return (check_nonnegative(noise_multiplier, "noise_multiplier") * check_positive(clip_norm, "clip_norm")
            / check_int(n, "n", minimum=1))


def song_sigma_for_privacy(epsilon, delta, *, n, steps, clip_norm) -> float:
    """Song et al. Thm 2.2: ``σ² = 2 L² T log(1/δ) / (n ε)²`` makes Alg. 1 (ε, δ)-DP.

    (As stated, for ``ε ≤ 1``-type regimes via the moments accountant [1, 30];
    the lab's accountants give tighter numbers for the same σ.)
    """
    e = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    T = check_int(steps, "steps", minimum=1)
    L = check_positive(clip_norm, "clip_norm")
    return math.sqrt(2.0 * L * L * T * math.log(1.0 / d)) / (check_int(n, "n", minimum=1) * e)


def song_ldp_sigma_to_noise_multiplier(sigma, *, clip_norm) -> float:
    """Song et al. App. D: each example adds ``N(0, σ²)`` to its clipped gradient → ``z = σ / L`` per example."""
    return check_nonnegative(sigma, "sigma") / check_positive(clip_norm, "clip_norm")


def noise_multiplier_to_song_ldp_sigma(noise_multiplier, *, clip_norm) -> float:
    """Inverse of :func:`song_ldp_sigma_to_noise_multiplier`: ``σ = z L``."""
    return check_nonnegative(noise_multiplier, "noise_multiplier") * check_positive(clip_norm, "clip_norm")


def song_ldp_sigma_for_privacy(epsilon, delta, *, steps, clip_norm) -> float:
    """Song et al. Thm D.2 *as printed*: ``σ² = 2 L² T log(1/δ) / ε²``.

    Local DP compares any two records ``d, d'``, whose clipped gradients can
    differ by ``2L`` (not ``L``), so the Gaussian-mechanism calibration the
    theorem cites needs ``σ² = 2 (2L)² T log(1/δ)/ε²``. This function returns the
    printed value; multiply by 2 for the replace-any-record sensitivity. The
    result's ``local_dp_event()`` uses the ``2L`` sensitivity.
    """
    e = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    T = check_int(steps, "steps", minimum=1)
    L = check_positive(clip_norm, "clip_norm")
    return math.sqrt(2.0 * L * L * T * math.log(1.0 / d)) / e


# -- Chen, Wu, Hong (2020) ------------------------------------------------------------------
def chen_sigma_to_noise_multiplier(sigma, *, batch_size, clip_norm) -> float:
    """Chen et al. eq. (8): ``Z_t ~ N(0, σ² I)`` added to the *averaged* clipped gradient → ``z = σ b / c``."""
    return (check_nonnegative(sigma, "sigma") * check_positive(batch_size, "batch_size")
            / check_positive(clip_norm, "clip_norm"))


def noise_multiplier_to_chen_sigma(noise_multiplier, *, batch_size, clip_norm) -> float:
    """Inverse of :func:`chen_sigma_to_noise_multiplier`: ``σ = z c / b``."""
    return averaged_noise_std(noise_multiplier, clip_norm, batch_size)


# -- Zhang et al. (DiceSGD, 2024) -----------------------------------------------------------
def dice_sigma_to_noise_multiplier(sigma1, *, batch_size, clip_norm) -> float:
    """DiceSGD Alg. 1–2 line 6: ``w ~ N(0, σ1² I)`` added to ``v = (1/B) Σ clip(g_i, C1) + clip(e, C2)``.

    So ``σ1`` is the std on the *averaged* direction and ``z = σ1 B / C1`` (the
    multiplier relative to the per-example clip norm C1, as for DPSGD-GC).
    """
    return (check_nonnegative(sigma1, "sigma1") * check_positive(batch_size, "batch_size")
            / check_positive(clip_norm, "clip_norm"))


def noise_multiplier_to_dice_sigma(noise_multiplier, *, batch_size, clip_norm) -> float:
    """Inverse of :func:`dice_sigma_to_noise_multiplier`: ``σ1 = z C1 / B``."""
    return averaged_noise_std(noise_multiplier, clip_norm, batch_size)


def _dice_G(clip_norm, feedback_clip_norm, gradient_bound) -> float:
    c1 = check_positive(clip_norm, "clip_norm")
    c2 = check_positive(feedback_clip_norm, "feedback_clip_norm")
    m = c2 if gradient_bound is None else min(c2, check_positive(gradient_bound, "gradient_bound"))
    return c1 * c1 + 2.0 * m * m


def dice_sigma_for_privacy(epsilon, delta, *, n, steps, clip_norm, feedback_clip_norm,
                           gradient_bound=None) -> float:
    """DiceSGD Thm 3.8 / A.4: ``σ1² ≥ 32 T (C1² + 2 min{C2², G'²}) log(1/δ) / (N² ε²)``.

    ``G'`` (a bound from the paper's Assumption 3.5) is optional; without it
    ``min{C2², G'²} ≤ C2²`` is used, which can only increase σ1 (sound).
    Automatic DiceSGD (Alg. 4, ``C1 = C2 = 1``) gives ``σ1 = √(96 T log(1/δ))/(N ε)``.
    """
    e = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    T = check_int(steps, "steps", minimum=1)
    N = check_int(n, "n", minimum=1)
    G = _dice_G(clip_norm, feedback_clip_norm, gradient_bound)
    return math.sqrt(32.0 * T * G * math.log(1.0 / d)) / (N * e)


def dice_epsilon(sigma1, delta, *, n, steps, clip_norm, feedback_clip_norm, gradient_bound=None) -> float:
    """Thm 3.8 of DiceSGD solved for ε: ``ε = √(32 T G̃ log(1/δ)) / (N σ1)``, ``G̃ = C1² + 2 min{C2², G'²}``."""
    s = check_nonnegative(sigma1, "sigma1")
    if s == 0:
        return math.inf
    d = check_open_unit(delta, "delta")
    T = check_int(steps, "steps", minimum=1)
    N = check_int(n, "n", minimum=1)
    G = _dice_G(clip_norm, feedback_clip_norm, gradient_bound)
    return math.sqrt(32.0 * T * G * math.log(1.0 / d)) / (N * s)


# -- Wang, Lei, Ying, Zhang -----------------------------------------------------------------
def wang_sigma_to_noise_multiplier(sigma, *, gradient_bound) -> float:
    """Wang et al. Alg. 2 line 6: ``b_t ~ N(0, σ² I)`` on one example's gradient, ``‖∂ℓ‖ ≤ G``.

    Returns the lab's (add/remove) multiplier ``z = σ / G`` for DP-SGD with batch
    size 1 and clip norm ``G``. See :func:`wang_replace_one_noise_multiplier`.
    """
    return check_nonnegative(sigma, "sigma") / check_positive(gradient_bound, "gradient_bound")


def noise_multiplier_to_wang_sigma(noise_multiplier, *, gradient_bound) -> float:
    """Inverse of :func:`wang_sigma_to_noise_multiplier`: ``σ = z G``."""
    return check_nonnegative(noise_multiplier, "noise_multiplier") * check_positive(gradient_bound, "gradient_bound")


def wang_replace_one_noise_multiplier(noise_multiplier) -> float:
    """``z / 2``: the multiplier relative to the replace-one sensitivity ``2G`` (Wang et al. Thm 11 proof)."""
    return check_nonnegative(noise_multiplier, "noise_multiplier") / 2.0
