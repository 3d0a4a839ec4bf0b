"""Clipping is Huberization (Song, Thakkar, Thakurta 2021, Lemma 3.1).

For a convex scalar loss ``f`` and an example with features ``x ≠ 0``, clipping
the gradient ``f'(⟨θ, x⟩)·x`` to norm ``C`` is the same as clipping the scalar
derivative ``f'`` to ``[−c, c]`` with ``c = C / ||x||``. Lemma 3.1 shows that the
clipped derivative is the derivative of a convex function ``g_x``:
``g_x = f`` between the points ``y1 ≤ y2`` where ``f'`` crosses ``−c`` and ``c``,
and ``g_x`` continues linearly with slope ``∓c`` outside. In closed form,

    g_x(z) = f(clamp(z, y1, y2)) + c · |z − clamp(z, y1, y2)|,

which is also the infimal convolution ``min_u f(u) + c|z − u|`` (the form
:func:`dpclip_lab.optima.minimize` hands to cvxpy). Noise-free clipped gradient
descent therefore minimizes ``L_clipped(θ) = (1/n) Σ g_{x_i}(⟨θ, x_i⟩)`` — the
objective whose minimizer clipped DP-GD actually approaches.
"""
from __future__ import annotations

import torch

from ._validation import check_finite_tensor
from .losses import Loss

__all__ = ["huberization_points", "huberized_value", "huberized_derivative"]


def _require_convex(loss: Loss) -> None:
    if not isinstance(loss, Loss):
        raise TypeError(f"loss must be a dpclip_lab.losses.Loss, got {type(loss).__name__}")
    if not loss.convex:
        raise ValueError(f"Lemma 3.1 (Huberization) needs a convex loss; {loss!r} is not convex")


def _check_c(c, like: torch.Tensor) -> torch.Tensor:
    """The derivative bound ``c = C / ||x||`` as a tensor: > 0 everywhere (``inf``: nothing clipped)."""
    if c is None or isinstance(c, (str, bytes, bool)):
        raise TypeError(f"c (the derivative bound C/||x||) must be a positive number or tensor, got {c!r}")
    c = torch.as_tensor(c, dtype=like.dtype, device=like.device)
    if not bool((c > 0).all()):  # also catches NaN
        bad = c[~(c > 0)].flatten()[0].item()
        raise ValueError(f"c (the derivative bound C/||x||) must be > 0 everywhere (inf allowed), got {bad!r}")
    return c


def _label(y):
    if y is None or isinstance(y, (str, bytes, bool)):
        raise TypeError(f"y must be a tensor of labels (or a number), got {y!r}")
    return y


def _check_inputs(z, y, c):
    """Finite margins ``z`` and labels ``y``, a valid ``c``, and shapes that broadcast; returns ``(y, c)``."""
    check_finite_tensor(z, "z")
    if not z.is_floating_point():
        raise TypeError(f"z must be a floating-point tensor, got {z.dtype}")
    if not isinstance(y, torch.Tensor):  # a number: one label for every margin
        y = torch.as_tensor(_label(y), dtype=z.dtype, device=z.device)
    check_finite_tensor(y, "y")
    c = _check_c(c, z)
    try:
        torch.broadcast_shapes(z.shape, y.shape, c.shape)
    except RuntimeError:
        raise ValueError(f"z, y and c must broadcast together, got shapes {tuple(z.shape)}, "
                         f"{tuple(y.shape)} and {tuple(c.shape)}") from None
    return y, c


def huberization_points(loss: Loss, y: torch.Tensor, c: torch.Tensor):
    """The points ``(y1, y2)`` of Lemma 3.1 where ``f'(·; y)`` crosses ``−c`` and ``+c``.

    Source: Song, Thakkar & Thakurta (2021), Lemma 3.1.

    ``y1 = −inf`` when ``f' > −c`` everywhere and ``y2 = +inf`` when ``f' < c``
    everywhere (nothing is clipped on that side).
    """
    _require_convex(loss)
    if not isinstance(y, torch.Tensor):
        y = torch.as_tensor(_label(y), dtype=torch.get_default_dtype())
    check_finite_tensor(y, "y")
    c = _check_c(c, y)
    return loss.derivative_inverse(-c, y), loss.derivative_inverse(c, y)


def huberized_value(loss: Loss, z: torch.Tensor, y: torch.Tensor, c) -> torch.Tensor:
    """The clipped (Huberized) loss ``g(z)`` of Lemma 3.1 with derivative bound ``c``.

    Source: Song, Thakkar & Thakurta (2021), Lemma 3.1.
    """
    _require_convex(loss)
    y, c = _check_inputs(z, y, c)
    y1, y2 = huberization_points(loss, y, c)
    zc = torch.maximum(torch.minimum(z, y2), y1)
    tail = torch.where(z == zc, torch.zeros_like(z), c * (z - zc).abs())
    return loss.value(zc, y) + tail


def huberized_derivative(loss: Loss, z: torch.Tensor, y: torch.Tensor, c) -> torch.Tensor:
    """``g'(z) = clamp(f'(z), −c, c)``: the clipped derivative (Lemma 3.1).

    Source: Song, Thakkar & Thakurta (2021), Lemma 3.1.
    """
    _require_convex(loss)
    y, c = _check_inputs(z, y, c)
    return torch.maximum(torch.minimum(loss.derivative(z, y), c), -c)
