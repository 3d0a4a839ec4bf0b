"""Input validation at the boundary of the lab.

Every public function checks its arguments here, so that bad input fails with a
message naming the parameter and its valid range instead of producing a silent
wrong number (house rule 4).
"""
from __future__ import annotations

import math
from numbers import Real

import torch

__all__ = [
    "check_positive",
    "check_nonnegative",
    "check_probability",
    "check_open_unit",
    "check_int",
    "check_finite_tensor",
    "as_clip_norm",
]


def _as_float(value, name: str) -> float:
    if isinstance(value, (bool, str, bytes)) or not (
            isinstance(value, Real) or (hasattr(value, "__float__") and getattr(value, "ndim", 0) == 0)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a real number, got nan")
    return value


def check_positive(value, name: str, *, allow_inf: bool = False) -> float:
    """Return ``float(value)`` if it lies in (0, inf) (or (0, inf] with ``allow_inf``)."""
    v = _as_float(value, name)
    if not v > 0 or (math.isinf(v) and not allow_inf):
        rng = "(0, inf]" if allow_inf else "(0, inf)"
        raise ValueError(f"{name} must lie in {rng}, got {value!r}")
    return v


def check_nonnegative(value, name: str) -> float:
    """Return ``float(value)`` if it lies in [0, inf)."""
    v = _as_float(value, name)
    if not (v >= 0) or math.isinf(v):
        raise ValueError(f"{name} must lie in [0, inf), got {value!r}")
    return v


def check_probability(value, name: str) -> float:
    """Return ``float(value)`` if it lies in (0, 1] (a sampling rate)."""
    v = _as_float(value, name)
    if not (0 < v <= 1):
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
    return v


def check_open_unit(value, name: str) -> float:
    """Return ``float(value)`` if it lies in (0, 1) (e.g. a DP delta)."""
    v = _as_float(value, name)
    if not (0 < v < 1):
        raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    return v


def check_int(value, name: str, *, minimum: int = 0) -> int:
    """Return ``int(value)`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not float(value).is_integer():
        raise TypeError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return v


def check_finite_tensor(t: torch.Tensor, name: str, *, hint: str = "") -> torch.Tensor:
    """Raise ``ValueError`` if ``t`` holds NaN or inf (e.g. a diverged gradient).

    ``hint`` (e.g. the usual cause) is appended to the message.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        n_bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {n_bad} NaN or inf entries; "
                         "all entries must be finite" + (f". {hint}" if hint else ""))
    return t


def as_clip_norm(clip_norm, like: torch.Tensor, name: str = "clip_norm") -> torch.Tensor:
    """Validate a clip norm (a positive float or a tensor of positive floats).

    Returns a tensor on ``like``'s device and dtype. ``inf`` and NaN are refused:
    "no clipping" is a large finite norm (anything up to 1e30 is exact).
    """
    if isinstance(clip_norm, torch.Tensor):
        c = clip_norm.to(device=like.device, dtype=like.dtype)
        ok = torch.isfinite(c) & (c > 0)
        if not bool(ok.all()):
            bad = c[~ok].flatten()[0].item()
            raise ValueError(f"{name} must lie in (0, inf) everywhere, got {bad!r}")
        return c
    return torch.tensor(check_positive(clip_norm, name), device=like.device, dtype=like.dtype)
