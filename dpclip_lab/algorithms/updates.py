"""Update rules (what a step does with the privatized direction) and projections.

Update rules share ``state = rule.init_state(theta)`` and
``theta = rule.step(theta, direction, state, lr)``; ``lr`` is a float or a
``[R, 1]`` tensor (one learning rate per run). Projections ``Π_C`` (Song et al.
Alg. 1 line 4; Wang et al. eq. (1)) are applied after the step by the loop.
"""
from __future__ import annotations

import math

import torch

from .._validation import check_finite_tensor, check_interval, check_open_unit, check_positive
from ..clipping import safe_norm

__all__ = ["SGD", "Adam", "make_update", "project_l2_ball", "project_interval"]


class SGD:
    """``θ ← θ − η d`` (Song et al. Alg. 1; Chen et al. eq. (3), (8); DiceSGD Alg. 1–2).

    Source: Song, Thakkar & Thakurta (2021), Alg. 1; Chen, Wu & Hong (2020), eq. (3); Zhang et al. (2024), Alg. 1.
    """

    name = "sgd"

    def init_state(self, theta):
        return {}

    def step(self, theta, direction, state, lr):
        return theta - lr * direction


class Adam:
    """Adam on the privatized direction (Kingma & Ba 2015; DiceSGD Alg. 3 lines 6–8).

    ``m ← β1 m + (1−β1) d``, ``v ← β2 v + (1−β2) d²``,
    ``θ ← θ − η (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε)``. Post-processing of the
    privatized direction, so privacy is unchanged.
    """

    name = "adam"

    def __init__(self, betas=(0.9, 0.999), eps=1e-8):
        self.b1 = check_open_unit(betas[0], "betas[0]") if betas[0] else 0.0
        self.b2 = check_open_unit(betas[1], "betas[1]")
        self.eps = check_positive(eps, "eps")

    def init_state(self, theta):
        return {"m": torch.zeros_like(theta), "v": torch.zeros_like(theta), "t": 0}

    def step(self, theta, direction, state, lr):
        state["t"] += 1
        t = state["t"]
        state["m"].mul_(self.b1).add_(direction, alpha=1 - self.b1)
        state["v"].mul_(self.b2).addcmul_(direction, direction, value=1 - self.b2)
        mhat = state["m"] / (1 - self.b1 ** t)
        vhat = state["v"] / (1 - self.b2 ** t)
        return theta - lr * mhat / (vhat.sqrt() + self.eps)


def make_update(optimizer):
    """Lab utility: ``"sgd"``, ``"adam"`` or an object with ``init_state``/``step``."""
    if optimizer == "sgd":
        return SGD()
    if optimizer == "adam":
        return Adam()
    if hasattr(optimizer, "init_state") and hasattr(optimizer, "step"):
        return optimizer
    raise ValueError(f"optimizer must be 'sgd', 'adam' or an update-rule object, got {optimizer!r}")


def project_l2_ball(radius: float, center=None):
    """``Π(θ) = c + (θ − c) min(1, R / ‖θ − c‖)``: projection onto the ℓ2 ball of radius R.

    Source: Song, Thakkar & Thakurta (2021), Alg. 1 (the projection Π onto the constraint set).

    Returns a callable ``θ[..., p] -> θ[..., p]`` (Song et al. Alg. 1 with
    ``C = B(0, R)``; Wang et al. Alg. 1–2 with ``W = B(0, R)``).
    """
    R = check_positive(radius, "radius")
    if center is not None:
        if not isinstance(center, torch.Tensor):
            raise TypeError(f"center must be a torch.Tensor (or None for the origin), got {type(center).__name__}")
        check_finite_tensor(center, "center")

    def project(theta):
        d = theta if center is None else theta - center
        nrm = safe_norm(d).unsqueeze(-1)
        d = d * (R / torch.clamp(nrm, min=R))
        return d if center is None else d + center

    project.radius = R
    project.__doc__ = f"Projection onto the l2 ball of radius {R:g}."
    return project


def project_interval(low: float, high: float):
    """``Π(θ) = clamp(θ, low, high)`` coordinate-wise (e.g. ``[0, 8L]`` of Song et al. Thm B.4).

    Source: Song, Thakkar & Thakurta (2021), Thm B.4.
    """
    lo = check_interval(low, "low", -math.inf, math.inf)     # ±inf allowed (an open side); NaN is not
    hi = check_interval(high, "high", -math.inf, math.inf)
    if not lo <= hi:
        raise ValueError(f"project_interval needs low <= high, got low={low!r}, high={high!r}")

    def project(theta):
        return theta.clamp(lo, hi)

    project.__doc__ = f"Projection onto [{lo:g}, {hi:g}]^p."
    return project

