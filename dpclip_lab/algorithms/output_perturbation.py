"""DP-SGD with output perturbation for α-Hölder smooth losses (Wang, Lei, Ying, Zhang, Alg. 1).

Run *non-private* SGD (one uniformly drawn example per step, optional projection
onto a ball, averaged iterate), then add Gaussian noise calibrated to the
uniform argument stability (UAS) of SGD — the ℓ2-sensitivity of the whole run —
from Thm 7. Same loop as every other method: sampler ``"with_replacement"``
with ``b = 1``, privatizer = no clipping and no noise, release = noisy average.

Notes on the paper's text
-------------------------
* Alg. 1 line 12 prints ``σ² = 2 log(2.5/δ) Δ² / t``; Lemma 2 with ``δ/2``
  (the proof of Thm 8) gives ``σ = √(2 log(2.5/δ)) Δ / ε``. The lab uses ε² where
  the text (likely garbled) shows t.
* Alg. 1 averages ``w_1, …, w_T`` with ``w_1 = 0`` the initial point (not
  ``w_2, …, w_{T+1}``); the lab does the same.
* On ``B(0, R)`` the released average can never move by more than the
  diameter ``2R``; Thm 7's Δ̃ can exceed that for moderate T η (e.g. 54 vs 2),
  so the lab uses ``min(Δ̃_SGD, 2R)`` (sound, never larger) and keeps the
  paper's value in ``extra["sensitivity_thm7"]``.
* The Hölder constants (α, L, M) are those of ``w ↦ ℓ(w; z)`` over the whole
  data *domain*: for a ``GLProblem`` they come from :meth:`GLProblem.holder`
  with a stated ``feature_bound`` (and ``label_bound`` for regression), never
  from the private rows' norms.
* Noise: Alg. 1 uses the classic Gaussian mechanism (Lemma 2,
  ``σ = √(2 log(1.25/δ')) Δ / ε`` at ``δ' = δ/2``), which is proved only for
  ε < 1 (at ε = 10 it certifies only about 10.4). The lab calibrates with the
  analytic Gaussian mechanism of Balle & Wang (2018) at ``δ/2`` — exact, valid
  for every ε, and never noisier than the classic σ — and records the classic
  σ in ``extra["noise_std_classic"]`` (None where it is not valid, ε ≥ 1).

:func:`uas_bound` computes ``C_α`` (eq. (2), Lemma 20) and delegates Thm 7's
closed form to ``dpclip_lab.accountants.paper_bounds.wang_delta_sgd``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._validation import (check_int, check_interval, check_nonnegative, check_open_unit, check_positive,
                           finite_result)
from ..accountants.gaussian import analytic_gaussian_sigma, classic_gaussian_sigma
from ..privatizers import GaussianPrivatizer
from ..sampling import events as _ev
from ..sampling import make_sampler
from .dp_sgd import check_n
from .loop import DPResult, finish, make_generator, run
from .oracles import GLPOracle, as_oracle
from .updates import project_l2_ball

__all__ = ["dp_sgd_output_perturbation", "uas_bound", "output_noise_std", "holder_constants",
           "OutputPerturbationResult", "CALIBRATIONS"]


def _check_alpha(alpha) -> float:
    """The Hölder exponent α ∈ [0, 1] (a string, None or NaN raises naming ``alpha``)."""
    return check_interval(alpha, "alpha (the Hölder exponent)", 0.0, 1.0)


@finite_result()
def uas_bound(*, alpha, holder_constant, grad_at_zero, lr, steps, n, gamma, radius=None,
              sup_loss_at_zero=None) -> float:
    """Δ_SGD(γ) (unbounded domain) or Δ̃_SGD(γ) (ball of radius R) of Wang et al. Thm 7.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 7.

    With probability ≥ 1 − γ over the sampled indices, two SGD runs (T steps,
    constant step η) on neighbouring datasets end at averages within this distance::

        Δ = ( e ( c²_{α,2} T η^{2/(1−α)} + 4 G² η² (1 + T(1+c_{γ,T})/n) T(1+c_{γ,T})/n ) )^{1/2}

    with ``c_{γ,T} = max{√(3n log(n/γ)/T), 3n log(n/γ)/T}``,
    ``c²_{α,2} = (1−α)/(1+α) (2^{−α} L)^{2/(1−α)}`` and ``G = M + L R^α``
    (bounded) or ``G = M + L (C_α T η)^{α/2}`` (unbounded, Lemma 20).

    At ``α = 1`` the first term's limit is 0 (``ηL < 2``), and ``C_1 = 2 sup ℓ(0; z)``
    (Lemma 20's Young step is exact at α = 1 when ηL ≤ 1).

    Parameters
    ----------
    alpha, holder_constant, grad_at_zero : float
        α, L and ``M = sup_z ‖∂ℓ(0, z)‖``.
    lr, steps, n, gamma : float, int, int, float
        η (must be < min{1, 1/L}), T, n and the failure probability γ (Alg. 1: δ/2).
    radius : float, optional
        R of the bounded domain; None = ℝ^d (then ``sup_loss_at_zero`` is required).
    sup_loss_at_zero : float, optional
        ``sup_z ℓ(0; z)`` (enters C_α).
    """
    a = _check_alpha(alpha)
    L = check_positive(holder_constant, "holder_constant")
    M = check_nonnegative(grad_at_zero, "grad_at_zero")
    eta = check_positive(lr, "lr")
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    g = check_open_unit(gamma, "gamma")
    if radius is not None:
        radius = check_positive(radius, "radius")
    if not eta < min(1.0, 1.0 / L):
        raise ValueError(f"Thm 7 needs lr < min(1, 1/L) = {min(1.0, 1.0 / L):g} (L = holder_constant), got {lr!r}")
    C_a = None
    if radius is None:
        if sup_loss_at_zero is None:
            raise ValueError("the unbounded-domain bound Δ_SGD needs sup_loss_at_zero = sup_z ℓ(0; z)")
        s0 = check_nonnegative(sup_loss_at_zero, "sup_loss_at_zero")
        if a == 0.0:
            C_a = (M + L) ** 2 + 2 * s0
        elif a < 1.0:
            c1 = (1 + 1 / a) ** (a / (1 + a)) * L ** (1 / (1 + a))
            C_a = ((1 - a) / (1 + a) * c1 ** (2 * (1 + a) / (1 - a)) * (a / (1 + a)) ** (2 * a / (1 - a))
                   + 2 * s0)
        else:
            C_a = 2 * s0
    from ..accountants.paper_bounds import wang_delta_sgd  # the closed form lives with the accountants
    return wang_delta_sgd(steps=T, n=n, eta=eta, alpha=a, L=L, M=M, gamma=g, R=radius, C_alpha=C_a)


CALIBRATIONS = ("analytic", "classic")


@finite_result(zero_if=lambda sensitivity, **_: float(sensitivity) == 0)
def output_noise_std(sensitivity, epsilon, delta, calibration="analytic") -> float:
    """Noise std for Alg. 1's output: a Gaussian mechanism at ``δ/2`` (the other δ/2 is Thm 7's failure).

    ``calibration="analytic"`` (default): the smallest σ that makes the Gaussian
    mechanism (ε, δ/2)-DP (Balle & Wang 2018, Thm 8; valid for every ε > 0).
    ``"classic"``: Wang et al. Lemma 2 / Alg. 1 line 12, ``σ = √(2 log(2.5/δ)) Δ / ε``
    (Dwork & Roth Thm A.1 at δ/2) — proved only for ε < 1, so larger ε raises.
    Sensitivity 0 gives σ = 0.
    """
    D = check_nonnegative(sensitivity, "sensitivity")
    eps = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if D == 0:
        return 0.0
    if calibration == "classic":
        return classic_gaussian_sigma(eps, d / 2, D)
    return analytic_gaussian_sigma(eps, d / 2, D)


def holder_constants(grad_fn, holder=None, radius=None, *, feature_bound=None, label_bound=None):
    """(α, L, M) from an explicit tuple or a GLProblem's domain bounds; plus ``sup ℓ(0; z)`` if known.

    Source: Wang, Lei, Ying & Zhang (2022), eq. (1) (the α-Hölder constants L and M of the loss).

    For a GLProblem without ``holder``, ``feature_bound`` (and ``label_bound`` for
    regression losses) is required: :meth:`dpclip_lab.GLProblem.holder`.
    """
    oracle = as_oracle(grad_fn)
    s0 = None
    is_glp = isinstance(oracle, GLPOracle) and hasattr(oracle.problem, "holder")
    if is_glp and (feature_bound is not None or holder is None):
        oracle.problem.check_domain(feature_bound, label_bound)
        s0 = oracle.problem.sup_loss_at_zero(label_bound=label_bound)
    if holder is not None:
        if isinstance(holder, (str, bytes)) or not hasattr(holder, "__len__") or len(holder) != 3:
            raise TypeError(f"holder must be a tuple (alpha, L, M) of Hölder constants, got {holder!r}")
        a, L, M = holder
        return _check_alpha(a), check_positive(L, "holder L"), check_nonnegative(M, "holder M"), s0
    if is_glp:
        a, L, M = oracle.problem.holder(radius, feature_bound=feature_bound, label_bound=label_bound)
        if not math.isfinite(L):
            raise ValueError(f"the loss {oracle.loss!r} has no finite Hölder constant; pass holder=(alpha, L, M)")
        return a, L, M, s0
    raise ValueError("holder=(alpha, L, M) is required unless grad_fn is a GLProblem")


@dataclass(repr=False)
class OutputPerturbationResult(DPResult):
    """Result of Wang et al. Alg. 1: ``theta`` is the noisy average.

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 1.
    """

    epsilon: float = 0.0
    delta: float = 0.0

    def dp_event(self):
        """``EpsilonDeltaEvent(ε, δ)`` (Thm 8: Gaussian mechanism on the UAS bound, δ/2 + δ/2)."""
        A = _ev()  # accountant events
        return A.EpsilonDeltaEvent(self.epsilon, self.delta)


def dp_sgd_output_perturbation(grad_fn, theta0, *, n, steps, lr, epsilon, delta, radius=None,
                               holder=None, feature_bound=None, label_bound=None, sup_loss_at_zero=None,
                               calibration="analytic", seed=None, keep_iterates=True,
                               progress=None) -> OutputPerturbationResult:
    """DP-SGD-Output (Wang, Lei, Ying, Zhang, Alg. 1; Thm 7–8).

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 1, Thm 7–8.

    Parameters
    ----------
    grad_fn : callable or GLProblem
    theta0 : Tensor[p] or Tensor[R, p]
        The paper starts at ``w_1 = 0``.
    n, steps, lr
        n, T, η (η < min{1, 1/L} for Thm 7).
    epsilon, delta : float
        Target (ε, δ).
    radius : float, optional
        R for ``W = B(0, R)`` (uses Δ̃_SGD and projects); None for ``W = ℝ^d`` (Δ_SGD).
    holder : tuple (alpha, L, M), optional
        Hölder constants of ``w ↦ ℓ(w; z)`` over the data domain. Default: from a
        GLProblem and the stated ``feature_bound`` / ``label_bound``.
    feature_bound : float, optional
        A stated bound on ``||x||`` over the data domain (required for a GLProblem
        without ``holder``; the rows are checked against it). The lab's unit-norm
        data sets have ``feature_bound=1.0``.
    label_bound : float, optional
        A stated bound on ``|y|`` (regression losses only).
    sup_loss_at_zero : float, optional
        ``sup_z ℓ(0; z)`` for the unbounded case (default from a GLProblem's label domain).
    calibration : {"analytic", "classic"}
        Noise calibration (:func:`output_noise_std`); "classic" is the paper's and needs ε < 1.
    seed : int, optional

    Returns
    -------
    OutputPerturbationResult
        ``theta = (1/T) Σ_{t=1}^T w_t + b``, with ``extra["sensitivity"]`` (Δ),
        ``extra["noise_std"]`` (σ) and ``extra["noise_std_classic"]`` (Lemma 2's σ, None
        for ε ≥ 1); ``dp_event()`` is ``EpsilonDeltaEvent(ε, δ)``.
    """
    n = check_n(n, grad_fn)
    eps = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    a, L, M, s0 = holder_constants(grad_fn, holder, radius, feature_bound=feature_bound, label_bound=label_bound)
    s0 = s0 if sup_loss_at_zero is None else sup_loss_at_zero
    delta_sgd = uas_bound(alpha=a, holder_constant=L, grad_at_zero=M, lr=lr, steps=steps, n=n, gamma=d / 2,
                          radius=radius, sup_loss_at_zero=s0)
    paper_delta = delta_sgd
    if radius is not None:  # averages lie in B(0, R): no two differ by more than the diameter
        delta_sgd = min(delta_sgd, 2.0 * float(radius))
    sigma = output_noise_std(delta_sgd, eps, d, calibration)
    sigma_classic = output_noise_std(delta_sgd, eps, d, "classic") if eps < 1 else None
    sampler = make_sampler("with_replacement", n, 1)
    privatizer = GaussianPrivatizer(None, 0.0)
    project = None if radius is None else project_l2_ball(radius)
    # theta0 is checked by run(); a non-tensor must reach it (and fail naming theta0), not fail here
    gen = make_generator(seed, theta0.device if isinstance(theta0, torch.Tensor) else "cpu")
    traj = run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer, project=project,
               average=True, seed=gen, keep_iterates=keep_iterates, progress=progress)
    start = theta0 if theta0.dim() == 2 else theta0.unsqueeze(0)
    w_bar = traj.average + (start - traj.last) / steps  # (1/T) Σ_{t=1}^T w_t with w_1 = θ_0
    traj.average = w_bar + sigma * torch.randn(w_bar.shape, generator=traj.generator, device=w_bar.device,
                                               dtype=w_bar.dtype)
    res = finish(traj, theta0, result_cls=OutputPerturbationResult, release="average",
                  algorithm="DP-SGD-Output (Wang et al. Alg. 1)", sampling="with_replacement",
                  sample_rate=1.0 / n, noise_multiplier=0.0, steps=steps, batch_size=1, n=n, clip_norm=None,
                  epsilon=eps, delta=d,
                  extra={"sensitivity": delta_sgd, "sensitivity_thm7": paper_delta, "noise_std": sigma, "noise_std_classic": sigma_classic,
                         "calibration": calibration, "holder": (a, L, M),
                         "radius": radius, "nonprivate_average": w_bar if (theta0.dim() == 2 or traj.runs > 1) else w_bar[0]})
    res.release = "noisy average"
    return res
