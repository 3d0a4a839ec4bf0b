"""Input validation at the boundary of the lab.

Every public function checks its arguments here, so that bad input fails with a
message naming the parameter and its valid range instead of producing a silent
wrong number (house rule 4).
"""
from __future__ import annotations

import functools
import inspect
import math
from numbers import Real

import numpy as np
import torch

__all__ = [
    "check_positive",
    "check_nonnegative",
    "check_probability",
    "check_open_unit",
    "check_int",
    "check_interval",
    "check_finite_tensor",
    "as_clip_norm",
    "check_in_dtype",
    "check_noise_std",
    "float_dtype_of",
    "finite_result",
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


def check_interval(value, name: str, low: float, high: float, *, closed: tuple = (True, True)) -> float:
    """Return ``float(value)`` if it lies in the interval from ``low`` to ``high``.

    ``closed=(True, True)`` is ``[low, high]``; ``(False, True)`` is ``(low, high]``, and so
    on. Strings, bools, None and NaN raise (``TypeError`` / ``ValueError`` naming ``name``),
    as for the other checks — ``float("0.5")`` would otherwise slip through.
    """
    v = _as_float(value, name)
    lo_ok = v >= low if closed[0] else v > low
    hi_ok = v <= high if closed[1] else v < high
    if not (lo_ok and hi_ok):
        rng = f"{'[' if closed[0] else '('}{low:g}, {high:g}{']' if closed[1] else ')'}"
        raise ValueError(f"{name} must lie in {rng}, got {value!r}")
    return v


def check_int(value, name: str, *, minimum: int = 0) -> int:
    """Return ``int(value)`` if it is an integer >= ``minimum``."""
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        integral = float(value).is_integer()
    except (TypeError, ValueError, OverflowError):
        integral = False
    if not integral:
        raise TypeError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return v


def check_finite_tensor(t: torch.Tensor, name: str, *, hint: str = "") -> torch.Tensor:
    """Raise ``ValueError`` if ``t`` holds NaN or inf (e.g. a diverged gradient).

    ``hint`` (e.g. the usual cause) is appended to the message. Costs one sum in the
    usual case: the entrywise scan (about as much as the per-example backward of a
    small CNN on a ``[batch, p]`` matrix) runs only when the sum is not finite.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    # A finite sum proves every entry finite (an inf or NaN entry makes any sum inf or NaN): one
    # reduction in the usual case; the entrywise scan runs only if the sum is not finite.
    if t.is_floating_point() and not math.isfinite(t.sum().item()) and not bool(torch.isfinite(t).all()):
        n_bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {n_bad} NaN or inf entries; "
                         "all entries must be finite" + (f". {hint}" if hint else ""))
    return t


def float_dtype_of(like: torch.Tensor) -> torch.dtype:
    """``like``'s dtype if it is a floating-point tensor, else torch's default float dtype.

    Integer (and bool) tensors are computed on in floating point: casting a clip norm
    0.5 to int64 would silently make it 0.
    """
    return like.dtype if like.is_floating_point() else torch.get_default_dtype()


def _dtype_range(dtype: torch.dtype) -> str:
    fi = torch.finfo(dtype)
    return f"[{fi.tiny:.3g}, {fi.max:.3g}]"


def check_in_dtype(value, like: torch.Tensor, name: str, *, allow_zero: bool = False) -> torch.Tensor:
    """``value`` (a float or tensor) cast to ``like``'s float dtype and device, checked *after* the cast.

    A Python float can be valid and still become 0 or inf in float32 (``1e-50``,
    ``1e50``); this raises ``ValueError`` naming ``name`` and the representable range
    instead of letting the cast produce a silent zero or a NaN later. Values must be
    finite and > 0 (or >= 0 with ``allow_zero``) both before and after the cast.
    """
    dtype = float_dtype_of(like)
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"{name} must be a real tensor, got dtype {value.dtype}")
        if value.numel() == 0:
            raise ValueError(f"{name} must hold at least one value, got an empty tensor of shape "
                             f"{tuple(value.shape)}")
        raw = value.detach().to(torch.float64) if value.is_floating_point() else value.detach().double()
    else:
        v = check_nonnegative(value, name) if allow_zero else check_positive(value, name)
        c = torch.tensor(v, device=like.device, dtype=dtype)
        cv = c.item()  # the usual case, checked on the cast value in Python (one read, no tensor ops)
        if math.isfinite(cv) and (cv > 0 or (allow_zero and v == 0)):
            return c
        raw = torch.tensor(v, dtype=torch.float64)
    low = "[0, inf)" if allow_zero else "(0, inf)"
    ok_raw = torch.isfinite(raw) & ((raw >= 0) if allow_zero else (raw > 0))
    if not bool(ok_raw.all()):
        bad = raw[~ok_raw].flatten()[0].item()
        raise ValueError(f"{name} must lie in {low} everywhere, got {bad!r}")
    c = (value.to(device=like.device, dtype=dtype) if isinstance(value, torch.Tensor)
         else torch.tensor(float(raw), device=like.device, dtype=dtype))
    ok = torch.isfinite(c) & ((c >= 0) if allow_zero else (c > 0))
    if allow_zero:  # a positive value must not round to 0
        ok = ok & ((c > 0) | (raw.to(c.device) == 0))
    if not bool(ok.all()):
        i = int((~ok).flatten().nonzero()[0])
        before = raw.flatten()[i].item()
        after = c.flatten()[i].item()
        raise ValueError(f"{name}={before!r} is not representable in {dtype} (it becomes {after!r}); "
                         f"{name} must lie in {_dtype_range(dtype)} for {dtype} tensors "
                         f"(or compute in float64)")
    return c


def as_clip_norm(clip_norm, like: torch.Tensor, name: str = "clip_norm") -> torch.Tensor:
    """Validate a clip norm (a positive float or a tensor of positive floats).

    Returns a tensor on ``like``'s device and float dtype (the default float dtype for
    integer ``like``). ``inf`` and NaN are refused: "no clipping" is a large finite
    norm. The check is made *after* the cast to the dtype (see :func:`check_in_dtype`):
    ``1e-50`` or ``1e50`` with a float32 tensor raise instead of becoming 0 or inf.
    """
    return check_in_dtype(clip_norm, like, name)


def check_noise_std(noise_multiplier, clip_norm: torch.Tensor, name: str = "noise_multiplier") -> float:
    """Check that the noise std ``z · C`` is finite (and non-zero for z > 0) in ``clip_norm``'s dtype.

    ``clip_norm`` is the tensor :func:`as_clip_norm` returned. ``z = 1e50`` with a
    float32 clip norm would make every noise draw inf (a NaN model, blamed later on
    the learning rate); a z so small that ``z · C`` rounds to 0 would silently drop the
    noise. Returns ``float(z)``.
    """
    z = check_nonnegative(noise_multiplier, name)
    if z == 0:
        return z
    std = z * clip_norm
    ok = torch.isfinite(std) & (std > 0)
    if not bool(ok.all()):
        c = clip_norm.expand(std.shape)[~ok].flatten()[0].item() if clip_norm.dim() else clip_norm.item()
        raise ValueError(f"{name}={noise_multiplier!r} times clip_norm={c!r} gives a noise std that is "
                         f"{std[~ok].flatten()[0].item()!r} in {clip_norm.dtype}; the product must lie in "
                         f"{_dtype_range(clip_norm.dtype)} (or compute in float64)")
    return z


def finite_result(*, nonzero: bool = True, zero_if=None, inf_if=None):
    """Decorator for closed-form calibrations: the result must be a finite number (non-zero
    with ``nonzero=True``), or the call raises ``ValueError`` naming every argument.

    Valid but extreme inputs (``epsilon=1e-300``, ``steps=10**15``, ``clip_norm=1e300``) can
    over- or underflow a float: σ = inf, or σ = 0 — a silent "no noise" — or a bare
    ``ZeroDivisionError``. ``zero_if(**bound)`` / ``inf_if(**bound)`` say when 0 / inf is the
    documented answer (e.g. ε = inf for σ = 0). Arrays are checked elementwise.
    """
    def deco(f):
        sig = inspect.signature(f)

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            try:
                out = f(*args, **kwargs)
            except (ZeroDivisionError, OverflowError) as err:
                out, why = None, f"({type(err).__name__}: {err})"
            else:
                why = ""
            try:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                named = dict(bound.arguments)
            except TypeError:
                named = {}
            if out is not None:
                try:
                    vals = [float(v) for v in np.asarray(out, dtype=float).ravel()]
                except (TypeError, ValueError):  # not numbers: nothing to check
                    return out
                ok = all(not math.isnan(v) for v in vals)
                if ok and any(math.isinf(v) for v in vals):
                    ok = bool(inf_if is not None and inf_if(**named))
                if ok and nonzero and any(v == 0 for v in vals):
                    ok = bool(zero_if is not None and zero_if(**named))
                if ok:
                    return out
                why = f"= {out!r}"
            args_txt = ", ".join(f"{k}={v!r}" for k, v in named.items())
            raise ValueError(f"{f.__name__}({args_txt}) {why} over- or underflows a float; "
                             f"rescale the inputs ({', '.join(named)})")
        return wrapper
    return deco
