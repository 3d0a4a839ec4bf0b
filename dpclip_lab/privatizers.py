"""Privatizers: turn one batch of per-example gradients into one released direction.

A privatizer is the part of a DP optimizer between the per-example gradients
and the update rule. All of them share the interface::

    state = privatizer.init_state(runs, p, like)
    direction, stats = privatizer(oracle, theta, batch, state, generator)

where ``oracle.reduce`` (see :mod:`dpclip_lab.algorithms.oracles`) supplies the
sums of rescaled per-example gradients, ``direction`` ``[R, p]`` goes to the
update rule, and ``stats`` holds per-run diagnostics ``[R]`` (fraction clipped,
realized batch size, the current clip norm...). ``state`` is a dict of tensors
updated in place (error feedback, adaptive clip norm).

* :class:`GaussianPrivatizer` — clip (or normalize), optionally perturb before
  clipping, sum, add ``N(0, (zC)² I)``, divide by the expected batch size:
  DP-GD (Song et al. Alg. 1), DP-SGD / DPSGD-GC (Abadi et al.; Chen et al.
  eq. (3), (8); DiceSGD Alg. 1), pre-clipping perturbation (Chen et al. §5,
  eq. (11)), local-DP noise (Song et al. App. D).
* :class:`ErrorFeedbackPrivatizer` — DiceSGD (Zhang et al. Alg. 2, 4): adds the
  clipped accumulated clipping error ``clip(e, C2)`` and carries ``e`` forward.
* :class:`QuantilePrivatizer` — adaptive clip norm by a private quantile
  estimate (Andrew et al. 2021).
"""
from __future__ import annotations

import torch

from ._validation import as_clip_norm, check_noise_std, check_nonnegative, check_open_unit, check_positive
from .clipping import safe_norm
from .sampling import gaussian

__all__ = ["clip_scale", "normalize_scale", "GaussianPrivatizer", "ErrorFeedbackPrivatizer",
           "QuantilePrivatizer", "adjusted_noise_multiplier"]


# -- per-example rescaling ------------------------------------------------------------------
def clip_scale(norms: torch.Tensor, clip_norm: torch.Tensor) -> torch.Tensor:
    """``min(1, C/‖g‖)`` per example; ``clip_norm`` is ``[R]`` (one per run) and ``norms`` ``[R, m]``.

    Source: Chen, Wu & Hong (2020), eq. (3); Abadi et al. (2016), Alg. 1.
    """
    return (clip_norm.unsqueeze(-1) / norms).clamp_(max=1.0)  # norm 0 -> inf -> 1


def normalize_scale(norms: torch.Tensor, clip_norm: torch.Tensor, stability: float = 0.0) -> torch.Tensor:
    """``C / (‖g‖ + γ)`` per example: normalization ("automatic clipping", Bu et al. 2023;
    DiceSGD Alg. 4 with ``clip(z) = z/‖z‖``). With ``γ = 0`` a zero gradient stays zero."""
    c = clip_norm.unsqueeze(-1)
    if stability:
        return c / (norms + stability)
    # A norm so small that C/‖g‖ overflows (a denormal gradient) is treated as zero: inf·0 would be NaN.
    ok = norms > c / torch.finfo(norms.dtype).max
    return torch.where(ok, c / torch.where(ok, norms, torch.ones_like(norms)), torch.zeros_like(norms))


def _scale_fn(clip_norm, normalize: bool, stability: float):
    if clip_norm is None:
        return None
    if normalize:
        return lambda norms: normalize_scale(norms, clip_norm, stability)
    return lambda norms: clip_scale(norms, clip_norm)


def _fraction_clipped(sums, clip_norm, sizes):
    """Fraction of the batch with norm above C (``sums.norms`` is 0 in empty slots)."""
    if clip_norm is None:
        return torch.zeros_like(sizes, dtype=sums.norms.dtype)
    # int32 accumulator: summing a bool tensor into the default int64 costs 4x more
    # (about a tenth of a batched GLP sweep's step went to this count).
    over = (sums.norms > clip_norm.unsqueeze(-1)).sum(-1, dtype=torch.int32)
    # the division casts the (exact) integer counts itself: no separate cast kernel
    return over / sizes.clamp(min=1).to(sums.norms.dtype)


def _gauss(shape, generator, like):
    return gaussian(shape, generator, like.device, like.dtype)  # per seed with SeedGroups


def _per_run(value, runs, like, name, allow_none=False):
    if value is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required")
    c = as_clip_norm(value, like, name)
    if c.dim() == 0:
        c = c.expand(runs)
    if c.shape != (runs,):
        raise ValueError(f"{name} must be a float or a tensor of shape [{runs}] (one per run), "
                         f"got shape {tuple(c.shape)}")
    return c


def _check_pre_clip_std(pre_clip_std):
    """Lab utility: validate k of Chen, Wu & Hong (2020) §5 eq. (11): a float in [0, inf) or a
    1-D tensor of such values (one per run); returns a float or a float64 tensor ``[R]``."""
    if isinstance(pre_clip_std, torch.Tensor) and pre_clip_std.dim() > 0 and pre_clip_std.numel() != 1:
        if pre_clip_std.dim() != 1 or pre_clip_std.is_complex() or pre_clip_std.dtype == torch.bool:
            raise ValueError(f"pre_clip_std must be a float or a 1-D tensor [R] of values in [0, inf), "
                             f"got a tensor of shape {tuple(pre_clip_std.shape)} and dtype {pre_clip_std.dtype}")
        k = pre_clip_std.detach().to(torch.float64)
        if not bool((torch.isfinite(k) & (k >= 0)).all()):
            bad = k[~(torch.isfinite(k) & (k >= 0))][0].item()
            raise ValueError(f"pre_clip_std must lie in [0, inf) in every run, got {bad!r}")
        return k
    return check_nonnegative(pre_clip_std, "pre_clip_std")


class GaussianPrivatizer:
    """Clip, (perturb,) sum, add Gaussian noise, divide by the expected batch size.

    Parameters
    ----------
    clip_norm : float, Tensor[R] or None
        Per-example clip norm ``C``. ``None``: no clipping (plain SGD); then
        ``noise_multiplier`` must be 0.
    noise_multiplier : float
        ``z``: noise ``N(0, (zC)² I)`` on the sum (Abadi et al. 2016).
    pre_clip_std : float or Tensor[R]
        ``k`` of Chen et al. (2020) eq. (11): ``g_i + k ζ_i`` is clipped, ``ζ_i ~ N(0, I)``.
        Not a privacy mechanism by itself.
    normalize : bool
        Rescale every gradient to norm ``C`` instead of clipping (``C / (‖g‖ + stability)``).
    local : bool
        Song et al. App. D (DP-GD_LDP): *each example* adds ``N(0, (zC)² I)`` to
        its clipped gradient. The sum of ``m`` such noises is drawn as one
        ``N(0, m (zC)² I)`` (equal in distribution).
    """

    def __init__(self, clip_norm, noise_multiplier=0.0, *, pre_clip_std=0.0, normalize=False,
                 stability=0.0, local=False):
        self.clip_norm = clip_norm
        self.noise_multiplier = check_nonnegative(noise_multiplier, "noise_multiplier")
        self.pre_clip_std = _check_pre_clip_std(pre_clip_std)  # a float, or one k per run (tensor [R])
        self.normalize = bool(normalize)
        self.stability = check_nonnegative(stability, "stability")
        self.local = bool(local)
        if clip_norm is None and self.noise_multiplier > 0:
            raise ValueError("noise_multiplier > 0 needs a clip_norm: the noise is calibrated to it")

    def init_state(self, runs, p, like):
        C = _per_run(self.clip_norm, runs, like, "clip_norm", allow_none=True)
        if C is not None:  # z·C must be a finite, non-zero std in the run's dtype (not inf / 0 after the cast)
            check_noise_std(self.noise_multiplier, C)
            check_noise_std(getattr(self, "gradient_noise_multiplier", 0.0), C, "gradient_noise_multiplier")
        return {"clip_norm": C}

    def noise_on_sum(self, clip_norm, batch, shape, generator, like):
        z = self.noise_multiplier
        if z == 0:
            return None
        std = z * clip_norm
        if self.local:
            std = std * batch.sizes.to(like.dtype).sqrt()
        return std.unsqueeze(-1) * _gauss(shape, generator, like)

    def __call__(self, oracle, theta, batch, state, generator):
        C = state["clip_norm"]
        sums = oracle.reduce(theta, batch, _scale_fn(C, self.normalize, self.stability),
                             pre_clip_std=self.pre_clip_std, generator=generator)
        total = sums.scaled
        noise = self.noise_on_sum(C, batch, total.shape, generator, total)
        if noise is not None:
            total = total + noise
        stats = {"fraction_clipped": _fraction_clipped(sums, C, batch.sizes), "batch_size": batch.sizes}
        return total / batch.normalizer, stats


class ErrorFeedbackPrivatizer(GaussianPrivatizer):
    """DiceSGD's clipped error feedback (Zhang et al. 2024, Alg. 2 lines 5–7)::

        v   = (1/B) Σ_i clip(g_i, C1) + clip(e, C2)
        out = v + w,   w ~ N(0, (z C1 / B)² I)
        e  ← e + (1/B) Σ_i g_i − v

    ``B`` is the expected batch size. With ``normalize=True`` both clips are
    normalizations ``z/‖z‖`` scaled by C (automatic DiceSGD, Alg. 4).
    """

    def __init__(self, clip_norm, feedback_clip_norm, noise_multiplier=0.0, *, normalize=False,
                 stability=0.0):
        super().__init__(clip_norm, noise_multiplier, normalize=normalize, stability=stability)
        if clip_norm is None:
            raise ValueError("clip_norm (C1) is required for DiceSGD")
        self.feedback_clip_norm = feedback_clip_norm

    def init_state(self, runs, p, like):
        state = super().init_state(runs, p, like)
        C2 = _per_run(self.feedback_clip_norm, runs, like, "feedback_clip_norm")
        if bool((state["clip_norm"] > C2 * (1 + 1e-12)).any()):
            raise ValueError("clip_norm (C1) must be at most feedback_clip_norm (C2): DiceSGD "
                             "(Zhang et al. 2024, Alg. 2, Thm 3.7-3.8) requires C1 <= C2, got "
                             f"C1 = {state['clip_norm'].max().item():g} > C2 = {C2.min().item():g}")
        state["feedback_clip_norm"] = C2
        state["error"] = torch.zeros((runs, p), device=like.device, dtype=like.dtype)
        # ‖e‖ [R, 1], computed where e is updated. e starts at 0: a zero norm safe_norm would confirm by its
        # slow path (rescaling) at every run's first step
        state["error_norm"] = torch.zeros((runs, 1), device=like.device, dtype=like.dtype)
        return state

    def __call__(self, oracle, theta, batch, state, generator):
        C1, C2, e, e_norm = state["clip_norm"], state["feedback_clip_norm"], state["error"], state["error_norm"]
        sums = oracle.reduce(theta, batch, _scale_fn(C1, self.normalize, self.stability), need_raw=True,
                             generator=generator)
        b = batch.normalizer
        fb = _scale_fn(C2, self.normalize, self.stability)(e_norm)  # [R, 1]
        v = sums.scaled / b + fb * e
        state["error"] = e = e + sums.raw / b - v
        try:
            state["error_norm"] = safe_norm(e).unsqueeze(-1)
        except ValueError:  # NaN in e: the oracle's sums were finite, so e itself ran out of range
            raise ValueError(
                f"DiceSGD's error state e (Zhang et al. 2024, Alg. 2 line 7: e <- e + mean raw gradient - v) "
                f"is no longer finite in {e.dtype}: it accumulates the *unclipped* per-example gradients, "
                f"whose mean this step has norm {float(safe_norm(sums.raw / b).max()):.3g}, and overflowed. "
                + ("Use float64, " if e.dtype != torch.float64 else "Use ")
                + "smaller gradients (rescale the loss or the inputs), or a smaller learning rate if the run "
                "diverges") from None
        out = v
        noise = self.noise_on_sum(C1, batch, v.shape, generator, v)
        if noise is not None:
            out = v + noise / b
        stats = {"fraction_clipped": _fraction_clipped(sums, C1, batch.sizes), "batch_size": batch.sizes,
                 "error_norm": e_norm.squeeze(-1)}
        return out, stats


def adjusted_noise_multiplier(noise_multiplier: float, count_noise_std: float) -> float:
    """Andrew et al. (2021), Thm 1: ``z_Δ = (z⁻² − (2σ_b)⁻²)^{-1/2}``.

    Gradient noise ``z_Δ`` plus count noise ``σ_b`` (on a count of sensitivity
    1/2) together cost exactly one Gaussian mechanism with multiplier ``z``.
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    if z == 0:
        return 0.0
    sb = check_positive(count_noise_std, "count_noise_std")
    inv = z ** -2 - (2.0 * sb) ** -2
    if inv <= 0:
        raise ValueError(f"count_noise_std must exceed noise_multiplier / 2 = {z / 2:g} so that the "
                         f"gradient keeps some noise budget (Andrew et al. 2021, Thm 1); got {count_noise_std!r}")
    return inv ** -0.5


def _check_adaptive_clip_norm(C: torch.Tensor, privatizer) -> None:
    """Raise naming the geometric update when adaptive clipping's C has left (0, inf) (under- or overflow)."""
    bad = ~(torch.isfinite(C) & (C > 0))
    if bool(bad.any()):
        value = float(C[bad].reshape(-1)[0])
        raise ValueError(
            f"adaptive clipping's clip norm C is {value:g} in {C.dtype}: the geometric update "
            f"C <- C exp(-clip_lr (b - target_quantile)) (Andrew et al. 2021, Alg. 1) with clip_lr = "
            f"{privatizer.clip_lr:g} and target_quantile = {privatizer.target_quantile:g} drove it out of the "
            "dtype's range (every gradient stayed on one side of C for many steps). Use a smaller clip_lr, "
            "a target_quantile inside (0, 1) nearer 0.5, an initial clip norm nearer the gradient norms, or fewer steps")


class QuantilePrivatizer(GaussianPrivatizer):
    """DP-SGD whose clip norm tracks a private quantile of the gradient norms (Andrew et al. 2021).

    Source: Andrew et al. (2021), Alg. 1 and Thm 1.

    Each step, with ``b_i = 1[‖g_i‖ ≤ C]``::

        b̃  = (Σ_i (b_i − ½) + N(0, σ_b²)) / b + ½       (noisy unclipped fraction)
        C  ← C · exp(−η_C (b̃ − γ))                      (geometric update)

    and the gradient sum gets noise ``z_Δ C`` with
    ``z_Δ = (z⁻² − (2σ_b)⁻²)^{-1/2}`` (:func:`adjusted_noise_multiplier`), so the
    pair costs one Gaussian mechanism with multiplier ``z`` (the recorded one).
    Centering ``b_i − ½`` gives the count sensitivity ½ the theorem uses under
    add/remove; the paper divides by the expected batch size as here.
    """

    def __init__(self, clip_norm, noise_multiplier=0.0, *, target_quantile=0.5, clip_lr=0.2,
                 count_noise_std=None):
        super().__init__(clip_norm, noise_multiplier)
        if clip_norm is None:
            raise ValueError("clip_norm (the initial clip norm) is required")
        self.target_quantile = check_open_unit(target_quantile, "target_quantile")
        self.clip_lr = check_nonnegative(clip_lr, "clip_lr")
        z = self.noise_multiplier
        if count_noise_std is None:
            count_noise_std = 0.0 if z == 0 else z  # leaves z_Δ = z / √(3/4) ≈ 1.15 z
        self.count_noise_std = check_nonnegative(count_noise_std, "count_noise_std")
        self.gradient_noise_multiplier = adjusted_noise_multiplier(z, self.count_noise_std) if z else 0.0

    def __call__(self, oracle, theta, batch, state, generator):
        C = state["clip_norm"]
        try:
            sums = oracle.reduce(theta, batch, _scale_fn(C, False, 0.0), generator=generator)
        except ValueError:
            _check_adaptive_clip_norm(C, self)  # an out-of-range C is the cause: say so
            raise
        total = sums.scaled
        if self.gradient_noise_multiplier:
            total = total + (self.gradient_noise_multiplier * C).unsqueeze(-1) * _gauss(total.shape, generator, total)
        under = (sums.norms <= C.unsqueeze(-1)).sum(-1, dtype=torch.int32).to(total.dtype)
        sizes = batch.sizes.to(total.dtype)
        if sums.weight is not None:  # empty slots have norm 0 and were counted
            under = under - (sums.norms.shape[-1] - sizes)
        centered = under - 0.5 * sizes
        if self.count_noise_std:
            centered = centered + self.count_noise_std * _gauss(centered.shape, generator, total)
        frac = centered / batch.normalizer + 0.5
        state["clip_norm"] = C * torch.exp(-self.clip_lr * (frac - self.target_quantile))
        stats = {"fraction_clipped": _fraction_clipped(sums, C, batch.sizes), "batch_size": batch.sizes,
                 "clip_norm": C, "noisy_unclipped_fraction": frac}
        return total / batch.normalizer, stats

