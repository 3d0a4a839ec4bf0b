"""DP-SGD with a clip norm that tracks a private quantile of the gradient norms.

Andrew, Thakkar, McMahan, Ramaswamy (2021), "Differentially private learning
with adaptive clipping", Alg. 1 and Thm 1 (there for federated averaging; here
per example, as their §3 notes applies equally to DP-SGD). Song et al. App. D.1
points to such methods for choosing the clip norm.

Same loop and sampler as :func:`dp_sgd`; the privatizer is
:class:`dpclip_lab.privatizers.QuantilePrivatizer`: each step also releases a
noisy count of unclipped examples and moves ``C`` geometrically toward the
``target_quantile`` of the norms. The gradient noise is ``z_Δ C`` with
``z_Δ = (z⁻² − (2σ_b)⁻²)^{-1/2}``, so gradient + count together are one
Gaussian mechanism with multiplier ``z``: ``dp_event()`` is DP-SGD's event
with that ``z`` — the quantile estimate is paid for, not free.

Neighbouring relations. Thm 1's accounting gives the centered count
``Σ (b_i − ½)`` sensitivity ½, which holds when a neighbour *adds or removes*
an example (``"poisson"``, ``"full"``), and the count's sensitivity 1 under
replace-one (``"with_replacement"``) is already inside the halved multiplier of
that scheme's event. With ``sampling="shuffle"`` the lab's event uses the
*zero-out* relation (the neighbour's example has a zero gradient, so the batch
layout is unchanged): a zero gradient is never clipped, so the example's
``b_i − ½`` can move from −½ to +½ — sensitivity 1, not ½. The event then uses
the effective multiplier ``z_eff = (z_Δ⁻² + σ_b⁻²)^{-1/2}`` (about ``0.76 z`` with
the default ``σ_b = z``), recorded in ``extra["event_noise_multiplier"]``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import as_clip_norm, check_nonnegative, check_positive

from ..privatizers import QuantilePrivatizer
from ..sampling import make_sampler, sampling_event
from .dp_sgd import check_n
from .loop import DPResult, finish, run

__all__ = ["dp_sgd_adaptive_clipping", "default_count_noise_std", "AdaptiveClippingResult",
           "event_noise_multiplier"]


def event_noise_multiplier(sampling: str, noise_multiplier: float, gradient_noise_multiplier: float,
                           count_noise_std: float) -> float:
    """The multiplier of one step's (gradient, count) Gaussian pair under ``sampling``'s relation.

    Source: Andrew et al. (2021), Thm 1.

    ``z`` itself where the centered count has sensitivity ½ relative to the scheme's
    gradient sensitivity (add/remove; replace-one is halved by the scheme's event);
    ``(z_Δ⁻² + σ_b⁻²)^{-1/2}`` for ``"shuffle"`` (zero-out: count sensitivity 1).
    """
    if sampling != "shuffle" or noise_multiplier == 0:
        return float(noise_multiplier)
    inv = gradient_noise_multiplier ** -2 + (count_noise_std ** -2 if count_noise_std else float("inf"))
    return float(inv ** -0.5)


@dataclass(repr=False)
class AdaptiveClippingResult(DPResult):
    """DP-SGD with adaptive clipping; ``dp_event()`` uses ``extra["event_noise_multiplier"]``.

    Source: Andrew et al. (2021), Thm 1 (the privacy of the quantile-tracking run).
    """

    def dp_event(self):
        return sampling_event(self.sampling, noise_multiplier=self.extra["event_noise_multiplier"],
                              steps=self.steps, n=self.n, batch_size=self.batch_size)


def default_count_noise_std(batch_size, noise_multiplier) -> float:
    """σ_b = ``max(b/20, z)`` (0 without noise): Andrew et al. suggest b/20; it must exceed z/2.

    Source: Andrew et al. (2021), Thm 1 (σ_b must exceed z/2).
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    return max(check_positive(batch_size, "batch_size") / 20.0, z) if z else 0.0


def dp_sgd_adaptive_clipping(grad_fn, theta0, *, n, steps, lr, initial_clip_norm, noise_multiplier,
                             batch_size=None, sampling="poisson", target_quantile=0.5, clip_lr=0.2,
                             count_noise_std=None, optimizer="sgd", project=None, average=False, seed=None,
                             keep_iterates=True, progress=None, callback=None) -> DPResult:
    """DP-SGD with adaptive quantile clipping (Andrew et al. 2021).

    Source: Andrew et al. (2021), Thm 1.

    Parameters
    ----------
    grad_fn, theta0, n, steps, lr, batch_size, sampling, optimizer, project, average, seed
        As in :func:`dp_sgd`.
    initial_clip_norm : float or Tensor[R]
        C_0.
    noise_multiplier : float
        The *total* z (what the accountant sees). The gradient gets ``z_Δ ≥ z``.
    target_quantile : float
        γ ∈ (0, 1): the fraction of examples meant to be left unclipped.
    clip_lr : float
        η_C of the geometric update ``C ← C exp(−η_C (b̃ − γ))`` (paper default 0.2).
    count_noise_std : float, optional
        σ_b, the std of the noise on the unclipped count. Default
        ``max(b/20, z)`` (Andrew et al. suggest b/20; it must exceed z/2).

    Returns
    -------
    AdaptiveClippingResult
        The run, with ``history["clip_norm"]`` (C_t), ``history["noisy_unclipped_fraction"]``,
        ``extra["gradient_noise_multiplier"]`` (z_Δ), ``extra["count_noise_std"]`` and
        ``extra["event_noise_multiplier"]`` (what ``dp_event()`` accounts; below z for
        ``sampling="shuffle"``, see the module docstring).
    """
    n = check_n(n, grad_fn)
    # checked here under its own name (the privatizer calls it clip_norm)
    as_clip_norm(initial_clip_norm, theta0 if isinstance(theta0, torch.Tensor) else torch.zeros(()),
                 "initial_clip_norm")
    sampler = make_sampler(sampling, n, batch_size)
    if count_noise_std is None:
        count_noise_std = default_count_noise_std(sampler.batch_size, noise_multiplier)
    privatizer = QuantilePrivatizer(initial_clip_norm, noise_multiplier, target_quantile=target_quantile,
                                    clip_lr=clip_lr, count_noise_std=count_noise_std)
    traj = run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer, update=optimizer,
               project=project, average=average, seed=seed, keep_iterates=keep_iterates, progress=progress,
               callback=callback)
    z_event = event_noise_multiplier(sampling, privatizer.noise_multiplier, privatizer.gradient_noise_multiplier,
                                     privatizer.count_noise_std)
    return finish(traj, theta0, result_cls=AdaptiveClippingResult, release="average" if average else "last", algorithm="DP-SGD with adaptive quantile clipping",
                  sampling=sampling, sample_rate=sampler.sample_rate,
                  noise_multiplier=privatizer.noise_multiplier, steps=steps, batch_size=sampler.batch_size,
                  n=n, clip_norm=initial_clip_norm,
                  extra={"gradient_noise_multiplier": privatizer.gradient_noise_multiplier,
                         "count_noise_std": privatizer.count_noise_std, "target_quantile": target_quantile,
                         "event_noise_multiplier": z_event})
