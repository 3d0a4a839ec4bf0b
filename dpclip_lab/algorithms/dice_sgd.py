"""DiceSGD: DP-SGD with clipped error feedback (Zhang et al. 2024).

The loop, sampler and update rules are DP-SGD's; only the privatizer differs
(:class:`dpclip_lab.privatizers.ErrorFeedbackPrivatizer`)::

    v_t     = (1/B) Σ_{i∈B_t} clip(g_i, C1) + clip(e_t, C2)
    x_{t+1} = x_t − η (v_t + w_t),      w_t ~ N(0, σ1² I),  σ1 = z C1 / B
    e_{t+1} = e_t + (1/B) Σ_{i∈B_t} g_i − v_t

At a noise-free fixed point ``v = 0`` and ``e`` is constant, so the mean raw
gradient is 0: the fixed point is stationary for the *original* objective,
which DPSGD-GC's is not (App. B.1) — provided ``C2 ≥ C1`` so that ``clip(e, C2)``
can cancel the clipped mean.

Privacy
-------
``e_t`` is a hidden state fed by unclipped gradients, so DiceSGD is *not* the
plain subsampled Gaussian mechanism. Its Thm 3.8 (A.4) gives a closed form:
(ε, δ)-DP when ``σ1² ≥ 32 T (C1² + 2 min{C2², G'²}) log(1/δ) / (N² ε²)``.
:meth:`DiceSGDResult.dp_event` returns ``EpsilonDeltaEvent(ε(δ), δ)`` from that
formula (with ``min{C2², G'²} ≤ C2²``, sound without knowing G') — a δ is
required. The formula is the paper's claim, not re-derived here; note it does
not depend on the sampling rate and assumes the paper's bounded-gradient
assumptions (3.5, 3.6) and ``C1 ≤ C2 < C/B`` there.

References
----------
Zhang, Li, Hong, et al. (2024), "Differentially private SGD without clipping
bias: an error-feedback approach", Alg. 1 (DPSGD-GC), Alg. 2 (DiceSGD), Alg. 3
(Adam variant), Alg. 4 (automatic DiceSGD), Thm 3.7–3.8, App. B.1.
"""
from __future__ import annotations

from dataclasses import dataclass

from .._validation import check_open_unit
from ..accountants.paper_bounds import dicesgd_thm38_epsilon
from ..privatizers import ErrorFeedbackPrivatizer
from ..sampling import events as _ev
from ..sampling import make_sampler
from .dp_sgd import check_n
from .loop import DPResult, finish, run

__all__ = ["dice_sgd", "automatic_dice_sgd", "DiceSGDResult"]


@dataclass(repr=False)
class DiceSGDResult(DPResult):
    """Result of DiceSGD; ``feedback_clip_norm`` is C2."""

    feedback_clip_norm: object = None
    delta: float | None = None

    def epsilon(self, delta: float | None = None) -> float:
        """ε of DiceSGD Thm 3.8 at ``delta`` (``σ1 = z C1 / B``; max over runs for sweeps)."""
        d = self.delta if delta is None else delta
        if d is None:
            raise ValueError("delta is required for DiceSGD's closed-form epsilon (Thm 3.8)")
        d = check_open_unit(d, "delta")
        import torch
        C1 = torch.as_tensor(self.clip_norm, dtype=torch.float64).reshape(-1)
        C2 = torch.as_tensor(self.feedback_clip_norm, dtype=torch.float64).reshape(-1)
        C1, C2 = torch.broadcast_tensors(C1, C2)
        eps = [dicesgd_thm38_epsilon(self.noise_multiplier * float(c1) / self.batch_size, float(c1), float(c2),
                                     None, self.steps, self.n, d) for c1, c2 in zip(C1, C2)]
        return max(eps)

    def dp_event(self, delta: float | None = None):
        """``EpsilonDeltaEvent(ε, δ)`` from DiceSGD Thm 3.8 (see module docstring).

        DiceSGD's hidden error state makes the subsampled-Gaussian events of
        DP-SGD unsound for it; no sampled event is returned. ``delta`` (or the
        ``delta`` given to :func:`dice_sgd`) is required.
        """
        A = _ev()  # accountant events
        if self.noise_multiplier == 0:
            return A.NonPrivateEvent()
        if delta is None and self.delta is None:
            raise NotImplementedError(
                "DiceSGD is not a subsampled Gaussian mechanism (its error state e_t carries unclipped "
                "gradients); its privacy is the closed form of Zhang et al. (2024) Thm 3.8: "
                "sigma1^2 >= 32 T (C1^2 + 2 min{C2^2, G'^2}) log(1/delta) / (N^2 eps^2). "
                "Call dp_event(delta=...) (or pass delta= to dice_sgd) to get EpsilonDeltaEvent(eps, delta).")
        d = self.delta if delta is None else delta
        return A.EpsilonDeltaEvent(self.epsilon(d), d)


def dice_sgd(grad_fn, theta0, *, n, steps, lr, clip_norm, feedback_clip_norm, noise_multiplier,
             batch_size=None, sampling="poisson", optimizer="sgd", normalize=False, stability=0.0,
             delta=None, seed=None, keep_iterates=True, progress=None, callback=None) -> DiceSGDResult:
    """DiceSGD (Zhang et al. 2024, Alg. 2; Alg. 3 with ``optimizer="adam"``).

    Parameters
    ----------
    grad_fn : callable or GLProblem
        Per-example gradient oracle (a GLProblem gets the O(np) path for both
        the clipped and the raw sum).
    theta0 : Tensor[p] or Tensor[R, p]
    n, steps, lr
        Dataset size N, iterations T, step size η.
    clip_norm : float or Tensor[R]
        C1, the per-example clip norm.
    feedback_clip_norm : float or Tensor[R]
        C2, the clip norm of the error feedback; must satisfy ``C1 ≤ C2``.
    noise_multiplier : float
        z, with ``σ1 = z C1 / B`` the std of w on the averaged direction
        (``dpclip_lab.noise.dice_sigma_to_noise_multiplier``;
        ``accountants.paper_bounds.dicesgd_thm38_sigma`` gives Thm 3.8's σ1).
    batch_size : int, optional
        B (expected batch size for Poisson sampling; the paper samples fixed-size
        minibatches — use ``sampling="shuffle"`` or ``"with_replacement"`` for that).
    sampling : {"poisson", "shuffle", "with_replacement", "full"}
    optimizer : {"sgd", "adam"}
        ``"adam"`` is Alg. 3: Adam moments of ``v + w``; e is updated as in Alg. 2.
    normalize : bool
        Replace both clips by normalization to norm C (Alg. 4; see :func:`automatic_dice_sgd`).
    delta : float, optional
        δ used by :meth:`DiceSGDResult.dp_event` when called without one.
    seed : int, optional

    Returns
    -------
    DiceSGDResult (last iterate); ``history["error_norm"]`` tracks ‖e_t‖.

    Raises
    ------
    ValueError
        If ``clip_norm > feedback_clip_norm`` (C1 > C2), or on any invalid input.
    """
    n = check_n(n, grad_fn)
    sampler = make_sampler(sampling, n, batch_size)
    privatizer = ErrorFeedbackPrivatizer(clip_norm, feedback_clip_norm, noise_multiplier,
                                         normalize=normalize, stability=stability)
    traj = run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer,
               update=optimizer, seed=seed, keep_iterates=keep_iterates, progress=progress, callback=callback)
    name = "automatic DiceSGD" if normalize else "DiceSGD"
    if optimizer == "adam":
        name += " (Adam)"
    return finish(traj, theta0, result_cls=DiceSGDResult, release="last", algorithm=name,
                  sampling=sampling, sample_rate=sampler.sample_rate,
                  noise_multiplier=privatizer.noise_multiplier, steps=steps, batch_size=sampler.batch_size,
                  n=n, clip_norm=clip_norm, feedback_clip_norm=feedback_clip_norm,
                  delta=None if delta is None else check_open_unit(delta, "delta"))


def automatic_dice_sgd(grad_fn, theta0, *, n, steps, lr, noise_multiplier, batch_size=None,
                       sampling="poisson", clip_norm=1.0, stability=0.0, optimizer="sgd", delta=None,
                       seed=None, keep_iterates=True, progress=None, callback=None) -> DiceSGDResult:
    """Automatic DiceSGD (Zhang et al. 2024, App. C.2, Alg. 4): ``C1 = C2 = C``, clip = normalize.

    ``v = (1/B) Σ g_i/‖g_i‖ + e/‖e‖`` (times C), noise
    ``w ~ √(96 T log(1/δ))/(N ε) · N(0, I)`` for ``C = 1`` — i.e. Thm 3.8 with
    ``C1 = C2 = 1`` (``accountants.paper_bounds.dicesgd_alg4_sigma``). The paper
    absorbs C into the learning rate; ``clip_norm`` keeps it explicit.
    ``stability`` γ > 0 uses ``g/(‖g‖ + γ)`` (Bu et al. 2023) instead of ``g/‖g‖``.
    """
    return dice_sgd(grad_fn, theta0, n=n, steps=steps, lr=lr, clip_norm=clip_norm,
                    feedback_clip_norm=clip_norm, noise_multiplier=noise_multiplier, batch_size=batch_size,
                    sampling=sampling, optimizer=optimizer, normalize=True, stability=stability, delta=delta,
                    seed=seed, keep_iterates=keep_iterates, progress=progress, callback=callback)
