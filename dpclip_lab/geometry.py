"""The geometry of clipping bias: Chen, Wu & Hong (2020) as functions over tensors.

Chen, Wu & Hong, *Understanding Gradient Clipping in Private SGD: A Geometric
Perspective* (NeurIPS 2020; ``chen2020understanding`` in references.bib) study the one number
that decides whether clipped SGD descends:

    the expected descent   E⟨∇f, clip(∇f + ξ, c)⟩,   clip(g, c) = g · min(1, c/‖g‖)   (eq. (1), (3)).

This module computes it and everything the paper builds on it:

* :func:`clipped_descent` — E⟨∇f, clip(∇f + ξ + kζ, c)⟩ for Gaussian ξ and
  pre-clip noise kζ (Thm 2, Thm 6, Tables 1–2): exact in 1-D, Monte Carlo in d-D.
* :func:`theorem2_lower_bound` — the right-hand side of Thm 2 (and the main term
  of Thm 6), with ``P(‖ξ‖ < c/4)`` exact from the chi distribution.
* :func:`expected_clipped_mean`, :func:`clipped_stationary_interval` — the
  expected clipped gradient as a field and its zeros (Examples 1–2, §5).
* :func:`bias_decomposition` — eq. (5): descent = symmetric part + bias ``b_t``.
* :func:`mixture_descent`, :func:`theorem3_lower_bound` — mixtures of spherical
  components (§2.2, Thm 3), exact in 1-D.
* :func:`wasserstein_disparity` — the transport cost ``W_{∇f,c}(p̃, p)`` of
  Thm 5 and eq. (9)–(10), solved with POT's exact network-simplex solver.
* :func:`random_projections`, :func:`cosines_to_mean`, :func:`norm_statistics`,
  :func:`symmetry_score` — the §4 / App. F–G views of per-example gradients.

Every function takes tensors and follows their device and dtype (the OT solver
runs on CPU copies of small cost matrices). Randomness comes only from ``seed``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._validation import check_finite_tensor, check_int, check_nonnegative, check_open_unit, check_positive
from .clipping import clip, safe_norm

__all__ = [
    "clipped_descent", "theorem2_lower_bound", "prob_noise_below", "h_c",
    "expected_clipped_mean", "clipped_stationary_interval",
    "BiasDecomposition", "bias_decomposition", "descent_on_samples",
    "mixture_descent", "theorem3_lower_bound",
    "wasserstein_disparity", "theorem5_rate_term", "theorem5_v", "theorem5_step_bound",
    "random_projections", "cosines_to_mean", "norm_statistics", "symmetry_score",
    "chen_cnn", "GradientSnapshots", "gradients_along_training", "hessian_norm_estimate",
]

_SQRT2 = math.sqrt(2.0)


# ----------------------------------------------------------------------------- helpers
def _as_tensor(x, name, *, like=None, positive=False, nonneg=False):
    """A float tensor from a number or tensor, validated elementwise."""
    if isinstance(x, (bool, str, bytes)) or x is None:
        raise TypeError(f"{name} must be a real number or a tensor, got {x!r}")
    if isinstance(x, torch.Tensor):
        t = x if x.is_floating_point() else x.to(torch.float64)
        if like is not None:
            t = t.to(device=like.device, dtype=like.dtype) if like.is_floating_point() else t
    else:
        try:
            t = torch.as_tensor(float(x), dtype=torch.float64 if like is None else like.dtype,
                                device=None if like is None else like.device)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real number or a tensor, got {x!r}") from None
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite, got {x!r}")
    if positive and not bool((t > 0).all()):
        raise ValueError(f"{name} must lie in (0, inf), got {x!r}")
    if nonneg and not bool((t >= 0).all()):
        raise ValueError(f"{name} must lie in [0, inf), got {x!r}")
    return t


def _ret(t, scalar_inputs):
    return float(t) if scalar_inputs else t


def _normal_cdf(x):
    return 0.5 * (1.0 + torch.erf(x / _SQRT2))


def _normal_pdf(x):
    return torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _clamped_normal_mean(mean, std, c):
    """E[clamp(X, −c, c)] for X ~ N(mean, std²), in closed form (std = 0 allowed).

    With α = (−c − m)/s, β = (c − m)/s:
    E = c (Φ(−β) − Φ(α)) + m (Φ(β) − Φ(α)) + s (φ(α) − φ(β)).
    Evaluated in float64 with ``erfc`` tails (the two tail masses nearly cancel
    when ``s ≫ c``; float32 loses 25% at ``s/c = 10⁴``) and cast back.
    """
    mean, std, c = torch.broadcast_tensors(mean, std, c)
    out_dtype = mean.dtype
    m, sd, cc = (t.to(torch.float64) for t in (mean, std, c))
    pos = sd > 0
    s = torch.where(pos, sd, torch.ones_like(sd))
    a, b = (-cc - m) / s, (cc - m) / s
    Phi = lambda x: 0.5 * torch.erfc(-x / _SQRT2)  # noqa: E731
    val = cc * (Phi(-b) - Phi(a)) + m * (Phi(b) - Phi(a)) + s * (_normal_pdf(a) - _normal_pdf(b))
    val = torch.where(pos, val, m.clamp(-cc, cc))
    return val.to(out_dtype)


def prob_noise_below(radius, *, dim: int = 1, noise_std=1.0):
    """``P(‖ξ‖ < radius)`` for ``ξ ~ N(0, noise_std² I_dim)``: the probability term of Chen, Wu & Hong (2020), Thm 2.

    The chi distribution's CDF (Thm 2, Corollary 1, Thm 6 use it with ``radius = c/4``).

    ``‖ξ‖²/s² ~ χ²_d``, so the probability is the regularized lower incomplete
    gamma function ``P(d/2, r²/(2 s²))`` (scipy's ``gammainc``). With
    ``noise_std = 0`` it is 1 for every ``radius > 0``. Tensors broadcast.
    In 1-D it equals ``erf(r / (s √2))``.
    """
    from scipy.special import gammainc

    d = check_int(dim, "dim", minimum=1)
    scalar = not isinstance(radius, torch.Tensor) and not isinstance(noise_std, torch.Tensor)
    r = _as_tensor(radius, "radius", nonneg=True)
    s = _as_tensor(noise_std, "noise_std", like=r, nonneg=True)
    r, s = torch.broadcast_tensors(r, s)
    x = (r / torch.where(s > 0, s, torch.ones_like(s))) ** 2 / 2
    p = torch.as_tensor(gammainc(d / 2.0, x.detach().cpu().double().numpy()), dtype=r.dtype, device=r.device)
    p = torch.where(s > 0, p, (r > 0).to(r.dtype))
    return _ret(p, scalar)


def h_c(grad_norm, clip_norm):
    """``h_c(y) = min(y², (3/4) c y)`` of Chen, Wu & Hong (2020), Thm 5 (= y · min(y, 3c/4), Thm 2's two cases).

    Tensors broadcast.
    """
    y = _as_tensor(grad_norm, "grad_norm", nonneg=True)
    c = _as_tensor(clip_norm, "clip_norm", like=y if y.is_floating_point() else None, positive=True)
    out = y * torch.minimum(y, 0.75 * c)
    return float(out) if out.dim() == 0 and not isinstance(grad_norm, torch.Tensor) else out


# ----------------------------------------------------------------------------- Thm 2, 6, Tables 1-2
def clipped_descent(grad_norm, clip_norm, *, dim: int = 1, noise_std=1.0, pre_clip_std=0.0,
                    samples: int = 100_000, seed: int = 0, return_se: bool = False):
    """Expected descent ``E⟨∇f, clip(∇f + ξ + kζ, c)⟩`` with Gaussian noise (Chen et al. 2020).

    ``‖∇f‖ = grad_norm``, ``ξ ~ N(0, noise_std² I_d)`` (the gradient noise of
    Thm 2), ``ζ ~ N(0, I_d)`` and ``k = pre_clip_std`` (the pre-clipping
    perturbation of §5, eq. (11), Thm 6). This is the quantity of Table 2
    (``noise_std = 1, c = 1, d = 1``) and of Table 1 (``noise_std = 0``,
    ``‖∇f‖ = 10``, ``c = 1``, ``k`` and ``d`` varying).

    Method. ``ξ + kζ ~ N(0, τ² I)`` with ``τ² = noise_std² + k²``. Rotating
    ``∇f`` onto the first axis, ``⟨∇f, clip(∇f + W, c)⟩ = y (y + W_1) ·
    min(1, c/√((y + W_1)² + ‖W_⊥‖²))`` with ``W_1 ~ N(0, τ²)`` and
    ``‖W_⊥‖² ~ τ² χ²_{d−1}``.

    * ``dim == 1``: exact, in closed form — ``y · E[clamp(y + τZ, −c, c)]``
      for a Gaussian (see :func:`_clamped_normal_mean`); the tests check it
      against numerical quadrature.
    * ``dim > 1``: Monte Carlo with ``samples`` draws of ``(W_1, ‖W_⊥‖²)``
      (two scalars per draw, so ``d = 10⁴`` costs the same as ``d = 10``;
      equal in distribution to drawing the full ``d``-vector). The same draws
      (common random numbers, one ``seed``) serve every broadcast entry, so a
      table or a slider's frames are one tensor program. Standard error ≈
      ``y c / √samples``.

    Parameters
    ----------
    grad_norm, clip_norm, pre_clip_std : float or Tensor
        Broadcast against one another (``noise_std`` too). ``grad_norm ≥ 0``,
        ``clip_norm > 0``, ``pre_clip_std ≥ 0``.
    dim : int
        Dimension d of the parameter.
    noise_std : float or Tensor
        Standard deviation of each coordinate of ξ (≥ 0).
    samples : int
        Monte Carlo draws (``dim > 1`` only).
    seed : int
        Seed of the draws (``dim > 1`` only).
    return_se : bool
        Also return the Monte Carlo standard error (0 in 1-D, where it is exact).

    Returns
    -------
    float or Tensor
        A float if every input is a number, else a Tensor of the broadcast shape
        (a pair ``(value, standard_error)`` with ``return_se=True``).

    References
    ----------
    Chen, Wu & Hong (2020), eq. (3), (11); Thm 2, Thm 6; App. H, Tables 1–2.
    """
    d = check_int(dim, "dim", minimum=1)
    scalar = not any(isinstance(v, torch.Tensor) for v in (grad_norm, clip_norm, noise_std, pre_clip_std))
    like = next((v for v in (grad_norm, clip_norm, pre_clip_std, noise_std)
                 if isinstance(v, torch.Tensor) and v.is_floating_point()), None)
    y = _as_tensor(grad_norm, "grad_norm", like=like, nonneg=True)
    c = _as_tensor(clip_norm, "clip_norm", like=y, positive=True)
    s = _as_tensor(noise_std, "noise_std", like=y, nonneg=True)
    k = _as_tensor(pre_clip_std, "pre_clip_std", like=y, nonneg=True)
    y, c, s, k = torch.broadcast_tensors(y, c, s, k)
    tau = torch.sqrt(s * s + k * k)
    if d == 1:
        val = y * _clamped_normal_mean(y, tau, c)
        return (_ret(val, scalar), _ret(torch.zeros_like(val), scalar)) if return_se else _ret(val, scalar)
    n = check_int(samples, "samples", minimum=1)
    rng = np.random.default_rng(check_int(seed, "seed"))
    w1 = torch.as_tensor(rng.standard_normal(n), dtype=y.dtype, device=y.device)
    q = torch.as_tensor(rng.chisquare(d - 1, n), dtype=y.dtype, device=y.device)
    Y, C, T = y.unsqueeze(-1), c.unsqueeze(-1), tau.unsqueeze(-1)
    along = Y + T * w1                                   # first coordinate of ∇f + W
    norm = torch.sqrt(along * along + T * T * q)
    inner = Y * along * torch.where(norm > C, C / norm.clamp(min=torch.finfo(y.dtype).tiny), torch.ones_like(norm))
    if return_se:
        se = inner.std(-1) / math.sqrt(n) if n > 1 else torch.full_like(inner[..., 0], float("inf"))
        return _ret(inner.mean(-1), scalar), _ret(se, scalar)
    return _ret(inner.mean(-1), scalar)


def theorem2_lower_bound(grad_norm, clip_norm, *, dim: int = 1, noise_std=1.0):
    """Right-hand side of Chen et al. (2020), Thm 2, for ``ξ ~ N(0, noise_std² I_d)``.

    * ``‖∇f‖ ≤ 3c/4``: ``‖∇f‖² · P(‖ξ‖ < c/4)``;
    * ``‖∇f‖ > 3c/4``: ``(3/4) c ‖∇f‖ · P(‖ξ‖ < c/4)``;

    i.e. ``h_c(‖∇f‖) · P(‖ξ‖ < c/4)`` with ``h_c(y) = min(y², 3cy/4)``, and the
    probability exact (:func:`prob_noise_below`, chi distribution). With
    ``noise_std = k`` and no gradient noise it is the main term of Thm 6
    (``P(‖kζ‖ < c/4)``; in 1-D ``erf(c/(4k√2))`` — App. H writes ``erf(c/4k)``,
    which drops the ``√2``). Tensors broadcast; returns a float for numbers.
    """
    scalar = not any(isinstance(v, torch.Tensor) for v in (grad_norm, clip_norm, noise_std))
    like = next((v for v in (grad_norm, clip_norm, noise_std) if isinstance(v, torch.Tensor)
                 and v.is_floating_point()), None)
    y = _as_tensor(grad_norm, "grad_norm", like=like, nonneg=True)
    c = _as_tensor(clip_norm, "clip_norm", like=y, positive=True)
    s = _as_tensor(noise_std, "noise_std", like=y, nonneg=True)
    p = prob_noise_below(c / 4, dim=dim, noise_std=s)
    return _ret(h_c(y, c) * p, scalar)


# ----------------------------------------------------------------------------- fields, Examples 1-2
def expected_clipped_mean(G: torch.Tensor, clip_norm, *, pre_clip_std=0.0, samples: int = 4096,
                          seed: int = 0) -> torch.Tensor:
    """``E_ζ[(1/n) Σ_i clip(g_i + kζ_i, c)]``: the expected clipped gradient of a full batch.

    ``G [..., n, p]`` holds per-example gradients (leading dims: points of a
    grid, runs...). With ``pre_clip_std = k = 0`` it is the plain mean of the
    clipped gradients; with ``k > 0`` the expectation over the pre-clip noise
    of §5 (eq. (11)) is exact for ``p = 1`` (closed form) and Monte Carlo
    (``samples`` draws) otherwise. ``clip_norm`` and ``pre_clip_std`` broadcast
    against ``G.shape[:-2]``. Returns ``[..., p]``.

    Chen et al. (2020), Examples 1–2 and §5: the zeros of this field in ``x`` are
    where clipped SGD stalls (:func:`clipped_stationary_interval`).
    """
    if not isinstance(G, torch.Tensor) or not G.is_floating_point() or G.dim() < 2 or 0 in G.shape[-2:]:
        raise ValueError("G must be a floating-point tensor [..., n, p] with n, p >= 1, got "
                         f"{tuple(G.shape) if isinstance(G, torch.Tensor) else type(G).__name__}"
                         f"{'' if not isinstance(G, torch.Tensor) else ' of dtype ' + str(G.dtype)}")
    check_finite_tensor(G, "G")
    c = _as_tensor(clip_norm, "clip_norm", like=G, positive=True)
    k = _as_tensor(pre_clip_std, "pre_clip_std", like=G, nonneg=True)
    lead = torch.broadcast_shapes(G.shape[:-2], c.shape, k.shape)
    c, k = c.expand(lead), k.expand(lead)
    if G.shape[-1] == 1:
        m = _clamped_normal_mean(G[..., 0], k[..., None], c[..., None])
        return m.mean(-1, keepdim=True)
    if not bool((k > 0).any()):
        return clip(G, c[..., None]).mean(-2)
    gen = torch.Generator(device=G.device).manual_seed(check_int(seed, "seed"))
    S = check_int(samples, "samples", minimum=1)
    Z = torch.randn((S,) + tuple(G.shape[-2:]), generator=gen, device=G.device, dtype=G.dtype)
    Gk = G.unsqueeze(-3) + k[..., None, None, None] * Z       # [..., S, n, p]
    return clip(Gk, c[..., None, None]).mean((-3, -2))


def clipped_stationary_interval(a, clip_norm, *, pre_clip_std=0.0, lo=None, hi=None, iters: int = 80):
    """The set of zeros of the expected clipped gradient for ``f(x) = (1/n) Σ ½(x − a_i)²``.

    The per-example gradients are ``x − a_i`` (Chen et al. 2020, Examples 1–2;
    ``a`` ``[n]``). The expected clipped gradient
    ``F(x) = E(1/n) Σ clamp(x − a_i + kζ, −c, c)`` is nondecreasing in ``x``, so
    its zero set is an interval ``[x_lo, x_hi]``: the points where noise-free
    clipped GD (``k = 0``) or clipped SGD in expectation stalls. Found by two
    batched bisections (``iters`` halvings) on ``[min a − c, max a + c]``.

    ``clip_norm`` and ``pre_clip_std`` broadcast (one call for a sweep over
    ``c`` or ``k``). With ``k > 0``, ``F`` is strictly increasing and the
    interval is one point. Returns ``(x_lo, x_hi)`` (floats or tensors).

    Example 1 (``a = (−3, −3, 9)``, ``c = 1``): ``x* = 1`` but ``F(1) = 1/3``;
    the stall point is ``x = −2.5`` (where ``2(x + 3) = 1``). Example 2 (``a = (−3, 3)``, ``c = 1``):
    every ``x ∈ [−2, 2]`` is stationary.
    """
    scalar = not isinstance(clip_norm, torch.Tensor) and not isinstance(pre_clip_std, torch.Tensor)
    a = a if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=torch.float64)
    a = a.to(torch.float64).reshape(-1)   # bisection to 1e-15 needs float64
    check_finite_tensor(a, "a")
    if a.numel() == 0:
        raise ValueError("a must hold at least one point")
    c = _as_tensor(clip_norm, "clip_norm", like=a, positive=True)
    k = _as_tensor(pre_clip_std, "pre_clip_std", like=a, nonneg=True)
    c, k = torch.broadcast_tensors(c, k)
    lo0 = float(a.min()) - float(c.max()) - 10 * float(k.max()) - 1.0 if lo is None else float(lo)
    hi0 = float(a.max()) + float(c.max()) + 10 * float(k.max()) + 1.0 if hi is None else float(hi)

    def F(x):  # x has c's shape
        return _clamped_normal_mean(x[..., None] - a, k[..., None], c[..., None]).mean(-1)

    def bisect(left_edge):
        L = torch.full_like(c, lo0)
        H = torch.full_like(c, hi0)
        for _ in range(check_int(iters, "iters", minimum=1)):
            M = (L + H) / 2
            f = F(M)
            go_right = (f < 0) if left_edge else (f <= 0)
            L, H = torch.where(go_right, M, L), torch.where(go_right, H, M)
        return (L + H) / 2

    x_lo, x_hi = bisect(True), bisect(False)
    return (float(x_lo), float(x_hi)) if scalar else (x_lo, x_hi)


# ----------------------------------------------------------------------------- eq. (5), §2.2
def descent_on_samples(grad: torch.Tensor, noise: torch.Tensor, clip_norm) -> torch.Tensor:
    """``(1/m) Σ_j ⟨∇f, clip(∇f + ξ_j, c)⟩`` over noise samples ``ξ_j`` (rows of ``noise [m, p]``).

    For an empirical gradient distribution (``ξ_j = g_j − ∇f``) this is the exact
    expected descent of full-batch-sampled clipped SGD (Chen et al. 2020, eq. (53)).
    ``clip_norm`` may be a tensor ``[K]``: returns ``[K]`` (one per clip norm).
    """
    check_finite_tensor(grad, "grad")
    check_finite_tensor(noise, "noise")
    if grad.dim() != 1 or noise.dim() != 2 or noise.shape[1] != grad.shape[0]:
        raise ValueError(f"grad must be [p] and noise [m, p]; got {tuple(grad.shape)} and {tuple(noise.shape)}")
    c = _as_tensor(clip_norm, "clip_norm", like=grad, positive=True)
    h = _descent_values(grad, noise, c.reshape(-1))            # [K, m]
    return h.mean(-1).reshape(c.shape)


@dataclass(frozen=True)
class BiasDecomposition:
    """Chen et al. (2020), eq. (5): ``descent = symmetric + bias``.

    ``descent = E_p⟨∇f, clip(∇f + ξ, c)⟩``; ``symmetric`` the same under the
    symmetric ``p̃``; ``bias = b_t = descent − symmetric``. ``b_t ≥ 0`` helps
    convergence (Corollary 1: it is subtracted on the right-hand side).
    """

    descent: torch.Tensor
    symmetric: torch.Tensor
    bias: torch.Tensor


def bias_decomposition(grad: torch.Tensor, noise: torch.Tensor, clip_norm, *,
                       symmetric_noise: torch.Tensor | None = None) -> BiasDecomposition:
    """Split the expected descent into Thm 2's symmetric part and the bias ``b_t`` (Chen, Wu & Hong (2020), eq. (5)).

    Parameters
    ----------
    grad : Tensor[p]
        The true gradient ∇f(x_t).
    noise : Tensor[m, p]
        Samples of the gradient noise ξ ~ p (equally weighted; for a data set,
        ``g_i − ∇f``).
    clip_norm : float or Tensor[K]
    symmetric_noise : Tensor[m', p], optional
        Samples of the symmetric ``p̃``. Default: the symmetrization
        ``p̃ = ½(p(ξ) + p(−ξ))`` (§2.2, "positively skewed"), i.e. the samples
        and their negatives; then
        ``b_t = ½ E_p[⟨∇f, clip(∇f + ξ, c)⟩ − ⟨∇f, clip(∇f − ξ, c)⟩]`` exactly.

    Returns
    -------
    BiasDecomposition
        Its fields are tensors of shape ``[]`` or ``[K]``.
    """
    sym = torch.cat([noise, -noise]) if symmetric_noise is None else symmetric_noise
    if symmetric_noise is not None:
        check_finite_tensor(sym, "symmetric_noise")
    d = descent_on_samples(grad, noise, clip_norm)
    s = descent_on_samples(grad, sym, clip_norm)
    return BiasDecomposition(d, s, d - s)


def mixture_descent(means: torch.Tensor, weights, clip_norm, *, noise_std=1.0, samples: int = 100_000,
                    seed: int = 0):
    """Expected descent for a mixture of spherical Gaussians (Chen, Wu & Hong (2020), §2.2, Thm 3).

    Component ``i`` (weight ``w_i``) draws ``u_i + η``, ``η ~ N(0, noise_std² I)``;
    the true gradient is ``∇f = Σ w_i u_i``. By spherical symmetry
    ``E[clip(u_i + η, c)] = r_i u_i`` with ``r_i ‖u_i‖² = clipped_descent(‖u_i‖, c)``
    (Chen et al. App. C, eq. (39)), so

        ``E⟨∇f, g⟩ = Σ_i w_i ⟨∇f, u_i⟩ · clipped_descent(‖u_i‖, c) / ‖u_i‖²``

    — exact in 1-D, Monte Carlo (common draws) otherwise. A component with
    ``u_i = 0`` contributes 0 (eq. (7)).

    Parameters
    ----------
    means : Tensor[m, p]
        Component means ``u_i`` (of the stochastic gradient, not of ξ).
    weights : Tensor[m] or sequence
        Mixture weights (≥ 0, normalized here).
    clip_norm, noise_std : float or Tensor
        Broadcast (e.g. ``clip_norm`` of shape ``[K]`` gives ``[K]``).

    Returns
    -------
    descent : Tensor
        The expected descent.
    grad : Tensor[p]
        ``∇f = Σ w_i u_i``.
    """
    check_finite_tensor(means, "means")
    if means.dim() != 2:
        raise ValueError(f"means must be [m, p], got {tuple(means.shape)}")
    w = _as_tensor(weights, "weights", like=means, nonneg=True).reshape(-1) if isinstance(weights, torch.Tensor) \
        else torch.as_tensor(weights, dtype=means.dtype, device=means.device).reshape(-1)
    if w.shape[0] != means.shape[0] or not bool((w >= 0).all()) or not float(w.sum()) > 0:
        raise ValueError("weights must be m non-negative numbers with a positive sum (m = number of means)")
    w = w / w.sum()
    grad = w @ means
    c = _as_tensor(clip_norm, "clip_norm", like=means, positive=True)
    s = _as_tensor(noise_std, "noise_std", like=means, nonneg=True)
    un = torch.linalg.vector_norm(means, dim=-1)                   # [m]
    shape = torch.broadcast_shapes(c.shape, s.shape)
    cc, ss = c.expand(shape).unsqueeze(-1), s.expand(shape).unsqueeze(-1)
    desc = clipped_descent(un.expand(shape + un.shape), cc, dim=means.shape[1], noise_std=ss,
                           samples=samples, seed=seed)            # [..., m]
    ratio = torch.where(un > 0, desc / torch.where(un > 0, un * un, torch.ones_like(un)), torch.zeros_like(desc))
    return (ratio * w * (means @ grad)).sum(-1), grad


def theorem3_lower_bound(means: torch.Tensor, weights, clip_norm, *, noise_std=1.0):
    """Right-hand side of Chen et al. (2020), Thm 3, for Gaussian components ``N(u_i, s² I)``.

    ``‖∇f‖ Σ_i w_i min(‖u_i‖, 3c/4) cos(∇f, u_i) P(‖η‖ < c/4)``. The theorem
    assumes ``⟨u_i, ∇f⟩ ≥ 0`` for all i; the function computes the expression
    regardless (the tests check where the inequality holds and where it fails).
    """
    w = torch.as_tensor(weights, dtype=means.dtype, device=means.device).reshape(-1)
    if w.numel() != means.shape[0] or not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or not w.sum() > 0:
        raise ValueError("weights must be m non-negative numbers with a positive sum (m = number of means)")
    w = w / w.sum()
    grad = w @ means
    g = torch.linalg.vector_norm(grad)
    c = _as_tensor(clip_norm, "clip_norm", like=means, positive=True)
    un = torch.linalg.vector_norm(means, dim=-1)
    cos = torch.where(un > 0, (means @ grad) / (un * g).clamp(min=torch.finfo(means.dtype).tiny), torch.zeros_like(un))
    p = prob_noise_below(c / 4, dim=means.shape[1], noise_std=_as_tensor(noise_std, "noise_std", like=means, nonneg=True))
    cc = c.unsqueeze(-1)
    return g * (w * torch.minimum(un, 0.75 * cc) * cos).sum(-1) * p


# ----------------------------------------------------------------------------- Thm 5
def _descent_values(grad, noise, c):
    """h(ξ_j) = ⟨∇f, clip(∇f + ξ_j, c)⟩ per sample: the only thing the metric d_{∇f,c} sees.

    ``c`` is a float or a 1-D tensor ``[K]`` (then ``[K, m]``). Computed from the two
    scalars ``⟨∇f, ∇f + ξ_j⟩`` and ``‖∇f + ξ_j‖`` (one pass over ``noise``), not by
    materializing clipped vectors: for a ``[m, p]`` CNN gradient matrix and many clip
    norms this is the difference between O(m p) and O(K m p) memory.
    """
    # ⟨v, v + ξ⟩ = ‖v‖² + ⟨ξ, v⟩ and ‖v + ξ‖² = ‖v‖² + 2⟨ξ, v⟩ + ‖ξ‖²: one matrix-vector product and
    # one row norm, in float64, without the [m, p] matrix v + ξ (ten times faster on a CNN's gradients)
    f64 = torch.float64
    gg = (grad.to(f64) @ grad.to(f64))
    ng = (noise @ grad).to(f64)                               # [m]
    nrm = torch.linalg.vector_norm(noise, dim=-1, dtype=f64)  # [m]; overflow-safe fallback below
    if not bool(torch.isfinite(nrm).all()):
        nrm = safe_norm(noise).to(f64)
    nn2 = nrm * nrm
    inner = gg + ng
    norms = torch.sqrt((gg + 2 * ng + nn2).clamp(min=0))
    ct = torch.as_tensor(c, dtype=f64, device=grad.device)
    scale = (ct.reshape(-1, 1) / norms.clamp(min=torch.finfo(f64).tiny)).clamp(max=1.0)
    h = (inner * scale).to(grad.dtype)
    return h[0] if ct.dim() == 0 else h


def wasserstein_disparity(grad: torch.Tensor, noise: torch.Tensor, clip_norm, *,
                          symmetric_noise: torch.Tensor | None = None, weights=None,
                          symmetric_weights=None, method: str = "1d") -> float:
    """``W_{∇f,c}(p̃, p)``: the transport cost of Chen et al. (2020), Thm 5 and eq. (9)–(10).

    The ground metric is ``d_{v,c}(a, b) = |⟨v, clip(v + a, c)⟩ − ⟨v, clip(v + b, c)⟩|``
    with ``v = ∇f``. It depends on a sample ``ξ`` only through the scalar
    ``h(ξ) = ⟨v, clip(v + ξ, c)⟩``, so the optimal coupling of ``p`` (the samples
    ``noise``, e.g. ``g_i − ∇f`` of a data set) and ``p̃`` is the optimal coupling
    of the pushed-forward 1-D distributions. ``method="1d"`` (default) solves that
    exactly with POT's 1-D solver (``ot.emd2_1d``, sorting: O(m log m));
    ``method="emd"`` runs POT's network simplex (``ot.emd2``) on the full
    ``d_{v,c}`` cost matrix — the same number (the tests check it), O(m³), for
    small samples only.

    ``p̃`` defaults to the symmetrization ``½(p(ξ) + p(−ξ))`` of ``p``: the
    symmetric distribution nearest to ``p`` among those built from its own
    samples by reflection, and the one the paper uses for skewed ``p`` (§2.2).
    Any symmetric ``p̃`` gives a valid Thm 5 (the bound holds for each; the
    infimum over all symmetric ``p̃`` can only be smaller). The bias of eq. (5)
    satisfies ``|b_t| ≤ W`` (eq. (9)); the tests check it.

    Parameters
    ----------
    grad : Tensor[p]
        The true gradient ``v = ∇f``.
    noise : Tensor[m, p]
        Samples of ``p``.
    clip_norm : float or Tensor[K]
        A 1-D tensor solves one transport problem per clip norm.
    symmetric_noise : Tensor[m', p], optional
        Samples of ``p̃`` (default: ±noise).
    weights, symmetric_weights : Tensor, optional
        Probability vectors of the two samples (default uniform).
    method : {"1d", "emd"}

    Returns
    -------
    float or Tensor[K]
        ``W_{∇f,c}(p̃, p)`` (a CPU Tensor[K] for a tensor of clip norms), between 0 and
        ``2‖∇f‖c`` (each ``|⟨v, clip(·)⟩| ≤ ‖v‖c``; the paper's remark after eq. (10) says
        the metric is bounded by ``‖∇f‖c``, which holds for the two values' difference
        only when they have the same sign).
    """
    import ot

    check_finite_tensor(grad, "grad")
    check_finite_tensor(noise, "noise")
    if grad.dim() != 1 or noise.dim() != 2 or noise.shape[1] != grad.shape[0]:
        raise ValueError(f"grad must be [p] and noise [m, p]; got {tuple(grad.shape)} and {tuple(noise.shape)}")
    many = isinstance(clip_norm, torch.Tensor) and clip_norm.dim() > 0
    c = _as_tensor(clip_norm, "clip_norm", like=grad, positive=True).reshape(-1)
    sym = torch.cat([noise, -noise]) if symmetric_noise is None else symmetric_noise
    check_finite_tensor(sym, "symmetric_noise")
    HP = _descent_values(grad, noise, c).detach().cpu().double().numpy()     # [K, m]
    HQ = _descent_values(grad, sym, c).detach().cpu().double().numpy()       # [K, m']
    a = np.full(HP.shape[1], 1.0 / HP.shape[1]) if weights is None else np.asarray(weights, dtype=float)
    b = np.full(HQ.shape[1], 1.0 / HQ.shape[1]) if symmetric_weights is None else np.asarray(symmetric_weights, dtype=float)
    a, b = a / a.sum(), b / b.sum()
    if method not in ("1d", "emd"):
        raise ValueError(f"method must be '1d' or 'emd', got {method!r}")
    out = []
    for hp, hq in zip(HP, HQ):                                # one transport problem per clip norm
        if method == "1d":
            out.append(float(ot.emd2_1d(hq, hp, b, a, metric="euclidean")))
        else:
            M = np.abs(hq[:, None] - hp[None, :])             # d_{∇f,c}(p̃ sample, p sample)
            out.append(float(ot.emd2(b, a, M, numItermax=10_000_000)))
    return torch.tensor(out, dtype=grad.dtype) if many else out[0]


def theorem5_v(noise_multiplier: float, *, n: int, batch_size: int, steps: int, epsilon: float,
               delta: float) -> float:
    """The constant ``v`` of Chen, Wu & Hong (2020), Thm 4–5, implied by an actual calibration.

    The paper adds ``Z_t ~ N(0, σ² I)`` to the *mean* clipped gradient and writes
    ``σ² = v c² T ln(1/δ) / (n² ε²)``. The lab adds ``N(0, (zc)²)`` to the sum
    and divides by the batch size ``m``: ``σ = z c / m``. Hence
    ``v = z² n² ε² / (m² T ln(1/δ))`` — with ``z`` from the lab's accountant for
    the same ``(ε, δ)``, this is the ``v`` that the run actually achieves.
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    n = check_int(n, "n", minimum=1)
    m = check_int(batch_size, "batch_size", minimum=1)
    if m > n:
        raise ValueError(f"batch_size must lie in [1, n] = [1, {n}], got {m}")
    T = check_int(steps, "steps", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    dlt = check_open_unit(delta, "delta")
    return z * z * n * n * eps * eps / (m * m * T * math.log(1 / dlt))


def theorem5_rate_term(*, v: float, clip_norm: float, D_f: float, G: float, dim: int, n: int,
                       epsilon: float, delta: float) -> float:
    """First term of Chen, Wu & Hong (2020), Thm 5's right-hand side: ``(v/2 + 3/2) c √(D_f G d ln(1/δ)) / (n ε)``.

    The ``O(√d/(nε))`` rate of DP-SGD; the step size that achieves it is
    ``α = √(D_f d ln(1/δ)) / (n ε c √G)`` (App. D, eq. (52)).
    """
    c = check_positive(clip_norm, "clip_norm")
    Df = check_nonnegative(D_f, "D_f")
    Gs = check_positive(G, "G")
    d = check_int(dim, "dim", minimum=1)
    n = check_int(n, "n", minimum=1)
    eps = check_positive(epsilon, "epsilon")
    dlt = check_open_unit(delta, "delta")
    return (0.5 * check_nonnegative(v, "v") + 1.5) * c * math.sqrt(Df * Gs * d * math.log(1 / dlt)) / (n * eps)


def theorem5_step_bound(*, lr, steps: int, clip_norm, D_f: float, G: float, dim: int, noise_std,
                        batch_factor: float = 1.0):
    """The rate side of Chen, Wu & Hong (2020), Thm 5 for any constant step size: App. D, eq. (50).

    The proof of Thm 5 (App. D, eq. (45)–(50)) bounds, for DP-SGD with step ``α`` over ``T``
    steps on a ``G``-smooth ``f``,

        ``(1/T) Σ_t E⟨∇f(x_t), g_t⟩ ≤ D_f / (T α) + (G α / 2) (E‖g_t‖² + E‖Z_t‖²)``,

    with ``E‖g_t‖² ≤ batch_factor · c²`` and ``E‖Z_t‖² = noise_std² · d``. Thm 5 then picks
    ``α`` and ``T`` (eq. (51)–(52)); this function keeps them free, so it applies to the run
    that was actually made. At Thm 5's ``α = √(D_f d ln(1/δ)) / (n ε c √G)``,
    ``T = n² ε² / (d ln(1/δ))``, ``noise_std² = v c² T ln(1/δ) / (n² ε²)`` and
    ``batch_factor = 1`` it equals :func:`theorem5_rate_term` (the tests check it).

    Parameters
    ----------
    lr : float or Tensor
        The constant step size ``α``.
    steps : int
        ``T``.
    clip_norm : float or Tensor
        ``c`` (tensors broadcast with ``lr`` and ``noise_std``: one value per run of a sweep).
    D_f : float
        Any upper bound on ``f(x_1) − min f`` (for a non-negative loss, ``f(x_1)`` itself).
    G : float
        The Lipschitz constant of ``∇f`` (smoothness).
    dim : int
        ``d``, the number of parameters.
    noise_std : float or Tensor
        Standard deviation per coordinate of the privacy noise on the *mean* clipped gradient
        (the paper's ``σ``; in the lab's convention ``z c / b``).
    batch_factor : float
        A bound on ``E‖g_t‖² / c²`` (≥ 1 is not required; default 1, the paper's). With
        Poisson sampling and the lab's division by the *expected* batch size ``b``,
        ``‖g_t‖ ≤ c |S_t| / b`` and ``E|S_t|² / b² = 1 + (1 − q)/b``: pass that.

    Returns
    -------
    float or Tensor
        A Tensor if any of ``lr``, ``clip_norm``, ``noise_std`` is a tensor.
    """
    scalar = not any(isinstance(v, torch.Tensor) for v in (lr, clip_norm, noise_std))
    a = _as_tensor(lr, "lr", positive=True)
    c = _as_tensor(clip_norm, "clip_norm", like=a, positive=True)
    s = _as_tensor(noise_std, "noise_std", like=a, nonneg=True)
    T = check_int(steps, "steps", minimum=1)
    Df = check_nonnegative(D_f, "D_f")
    Gs = check_positive(G, "G")
    d = check_int(dim, "dim", minimum=1)
    bf = check_nonnegative(batch_factor, "batch_factor")
    out = Df / (T * a) + 0.5 * Gs * a * (bf * c * c + s * s * d)
    return _ret(out, scalar)


# ----------------------------------------------------------------------------- §4 views
def _check_G(G):
    if not isinstance(G, torch.Tensor) or G.dim() != 2 or not G.is_floating_point():
        raise ValueError("G must be a floating-point [n, p] matrix of per-example gradients, got "
                         f"{tuple(G.shape) if isinstance(G, torch.Tensor) else type(G).__name__}")
    if G.shape[0] < 1 or G.shape[1] < 1:
        raise ValueError(f"G must hold at least one example of at least one coordinate, got shape {tuple(G.shape)}")
    return check_finite_tensor(G, "G")


def random_projections(G: torch.Tensor, *, views: int = 8, out_dim: int = 2, seed: int = 0) -> torch.Tensor:
    """Project per-example gradients onto random Gaussian planes (Chen et al. 2020, §4, Figs 1–2, 5–8).

    ``G [n, p]`` (rows = examples). Draws ``views`` matrices ``A_j [p, out_dim]``
    with i.i.d. ``N(0, 1/p)`` entries (the paper: "random Gaussian matrices";
    the ``1/p`` scale only fixes the units) and returns ``G A_j`` as
    ``[views, n, out_dim]``. A symmetric distribution stays symmetric under
    every projection; the figures ask whether the converse shows.
    """
    _check_G(G)
    gen = torch.Generator(device=G.device).manual_seed(check_int(seed, "seed"))
    v = check_int(views, "views", minimum=1)
    k = check_int(out_dim, "out_dim", minimum=1)
    A = torch.randn((v, G.shape[1], k), generator=gen, device=G.device, dtype=G.dtype) / math.sqrt(G.shape[1])
    return torch.einsum("np,vpk->vnk", G, A)


def cosines_to_mean(G: torch.Tensor) -> torch.Tensor:
    """``cos(g_i, ḡ)`` for each example (Chen et al. 2020, §4, Fig. 3): ``[n]``; 0 for zero rows."""
    _check_G(G)
    g = G.mean(0)
    gn = safe_norm(g)
    rn = safe_norm(G)
    den = (rn * gn).clamp(min=torch.finfo(G.dtype).tiny)
    return torch.where(rn > 0, (G @ g) / den, torch.zeros_like(rn)) if gn > 0 else torch.zeros_like(rn)


def norm_statistics(G: torch.Tensor, clip_norm) -> dict:
    """The four statistics of Chen et al. (2020), App. G, Figs 9–11, for one gradient matrix.

    Returns a dict of ``[n]`` tensors: ``grad_norm`` ``‖g_i‖``, ``noise_norm``
    ``‖g_i − ḡ‖``, ``inner`` ``⟨ḡ, g_i⟩``, ``inner_clipped`` ``⟨ḡ, clip(g_i, c)⟩``;
    and the floats ``p_small_noise`` ``= P_p(‖ξ‖ < c/4)`` (the probability term of
    Corollary 1 under the empirical ``p``) and ``true_grad_norm``.
    """
    _check_G(G)
    c = check_positive(float(clip_norm), "clip_norm")
    g = G.mean(0)
    xi = G - g
    nn_ = safe_norm(xi)
    return {"grad_norm": safe_norm(G), "noise_norm": nn_, "inner": G @ g, "inner_clipped": clip(G, c) @ g,
            "p_small_noise": float((nn_ < c / 4).to(G.dtype).mean()), "true_grad_norm": float(safe_norm(g))}


def symmetry_score(X: torch.Tensor, *, center: torch.Tensor | None = None) -> float:
    """Lab utility: how symmetric a point cloud is about its mean, ``1 − W₁(p, p⁻) / (2 E‖x − μ‖)``.

    ``X`` is ``[n]`` or ``[n, k]`` (a projection view, cosines, ...). ``p`` is the
    empirical distribution of ``x_i − μ`` (``μ`` = the mean, or ``center``) and
    ``p⁻`` its reflection ``−(x_i − μ)``; ``W₁`` (Euclidean ground cost) is solved
    exactly with POT (``ot.emd2``). The score lies in ``[0, 1]``: 1 for a
    distribution equal to its reflection; the normalization ``2 E‖x − μ‖`` bounds
    ``W₁`` (couple both through 0). A finite sample of a symmetric distribution
    scores a little below 1 — compare with a Gaussian sample of the same size and
    dimension (the book does). Not in the paper: a one-number summary of its
    visual check, so that it can be plotted along training.
    """
    import ot

    if not isinstance(X, torch.Tensor) or X.dim() not in (1, 2) or not X.is_floating_point():
        raise ValueError("X must be a floating-point tensor [n] or [n, k]")
    if X.shape[0] < 1 or X.numel() == 0:
        raise ValueError(f"X must hold at least one point, got shape {tuple(X.shape)}")
    check_finite_tensor(X, "X")
    Y = X.reshape(X.shape[0], -1).detach().cpu().double()
    mu = Y.mean(0) if center is None else center.detach().cpu().double().reshape(-1)
    Y = (Y - mu).numpy()
    scale = 2.0 * np.linalg.norm(Y, axis=1).mean()
    if not scale > 0:
        return 1.0
    M = ot.dist(Y, -Y, metric="euclidean")
    w = np.full(len(Y), 1.0 / len(Y))
    return float(1.0 - ot.emd2(w, w, M, numItermax=10_000_000) / scale)


# ----------------------------------------------------------------------------- §4 experiment
def chen_cnn(*, seed: int = 0, classes: int = 10, dtype=torch.float32) -> torch.nn.Module:
    """The CNN of Chen, Wu & Hong (2020), §4: two conv layers of 16 4×4 kernels, then 32 units.

    ``conv(1→16, 4×4) → ReLU → conv(16→16, 4×4) → ReLU → avg-pool to 2×2 → linear(64→32)
    → ReLU → linear(32→classes)``. The adaptive average pool is ours: it lets the same
    network take scikit-learn's 8×8 digits and 28×28 MNIST (the paper trains on MNIST
    only). The weights are drawn under ``torch.manual_seed(seed)`` inside a forked RNG
    state, so the global generator is left untouched.
    """
    from torch import nn

    seed = check_int(seed, "seed")
    k = check_int(classes, "classes", minimum=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Conv2d(1, 16, 4, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 4, padding=1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, k))
    return model.to(dtype)


@dataclass(frozen=True)
class GradientSnapshots:
    """Lab utility: what :func:`gradients_along_training` records (Chen, Wu & Hong (2020), §4).

    ``grads[e]`` — per-example gradients ``[view, p]`` (float64) of the first ``view``
    training examples at the end of epoch ``e`` (epoch 0: at initialization);
    ``loss[e]``/``accuracy[e]`` — mean training loss on all ``n`` examples and test
    accuracy (NaN without a test set); ``measured[e]`` — what ``measure(model)`` returned;
    ``params[e]`` — the flat parameters. The privacy record (``noise_multiplier``,
    ``sample_rate``, ``steps``) covers every step trained.
    """

    grads: dict
    loss: dict
    accuracy: dict
    measured: dict
    params: dict
    steps_per_epoch: int
    steps: int
    sample_rate: float
    noise_multiplier: float


def gradients_along_training(model, loss_fn, inputs: torch.Tensor, targets: torch.Tensor, *, epochs: int,
                             checkpoints, view: int = 400, lr, clip_norm, noise_multiplier: float,
                             batch_size: int, test=None, measure=None, measure_at=None,
                             seed: int = 0) -> GradientSnapshots:
    """Train with DP-SGD and record per-example gradients at checkpoints (Chen, Wu & Hong (2020), §4).

    The experiment behind the paper's Figs 1–3 and 5–11: DP-SGD (:func:`dpclip_lab.train`,
    Poisson batches, one call per epoch of ``⌈n / batch_size⌉`` steps with seed
    ``seed + epoch``) and, at the end of each epoch in ``checkpoints`` (0 = before training),
    the per-example gradients of the first ``view`` training examples
    (:func:`dpclip_lab.per_sample_grads`), from which every view of §4 is computed.
    ``measure(model)``, if given, is called at each epoch of ``measure_at`` (default:
    ``checkpoints``) and its result kept in ``measured`` (e.g. quantities of Thm 5 over the
    whole training set, without keeping an ``[n, p]`` matrix per checkpoint). The book runs
    it on scikit-learn's digits, or on MNIST when :func:`dpclip_lab.data.load_mnist` finds
    the IDX files; ``tests/test_geometry.py`` runs it on a tiny MNIST fixture.

    Parameters
    ----------
    model : nn.Module
        Trained in place (it ends with the last epoch's parameters).
    epochs : int
        Number of epochs (≥ 0).
    checkpoints, measure_at : iterable of int
        Epochs in ``[0, epochs]``.
    view : int
        Examples whose gradients are kept (≥ 0; capped at ``n``).
    lr, clip_norm, noise_multiplier, batch_size
        As in :func:`dpclip_lab.train`.
    test : tuple (inputs, targets), optional
        Test set for the accuracy.
    """
    from .per_sample import flat_params, per_sample_grads
    from .training import evaluate, train

    E = check_int(epochs, "epochs")
    cps = sorted({check_int(e, "checkpoints") for e in checkpoints})
    mat = cps if measure_at is None else sorted({check_int(e, "measure_at") for e in measure_at})
    for name, lst in (("checkpoints", cps), ("measure_at", mat)):
        if lst and lst[-1] > E:
            raise ValueError(f"{name} must lie in [0, epochs = {E}], got {lst[-1]}")
    if measure is not None and not callable(measure):
        raise TypeError(f"measure must be callable, got {type(measure).__name__}")
    n = check_int(inputs.shape[0], "n", minimum=1)
    v = min(check_int(view, "view"), n)
    b = check_int(batch_size, "batch_size", minimum=1)
    seed = check_int(seed, "seed")
    spe = math.ceil(n / b)
    grads, loss, acc, measured, params = {}, {}, {}, {}, {}
    record = None
    for e in range(E + 1):
        if e in cps or e in mat:
            loss[e] = evaluate(model, loss_fn, inputs, targets)[0]
            acc[e] = evaluate(model, loss_fn, *test)[1] if test is not None else float("nan")
            params[e] = flat_params(model)
            if e in cps and v > 0:
                grads[e] = per_sample_grads(model, loss_fn, inputs[:v], targets[:v]).double()
            if e in mat and measure is not None:
                measured[e] = measure(model)
        if e < E:
            record = train(model, loss_fn, inputs, targets, steps=spe, lr=lr, clip_norm=clip_norm,
                           noise_multiplier=noise_multiplier, batch_size=b, seed=seed + e, log_every=spe,
                           progress=False)
    q = record.sample_rate if record is not None else b / n
    return GradientSnapshots(grads, loss, acc, measured, params, spe, E * spe, q,
                             check_nonnegative(noise_multiplier, "noise_multiplier"))


def hessian_norm_estimate(model, loss_fn, inputs: torch.Tensor, targets: torch.Tensor, *, iters: int = 10,
                          seed: int = 0) -> float:
    """Lab utility: a lower estimate of the smoothness ``G`` of Chen, Wu & Hong (2020), Thm 1 and Thm 5.

    ``G`` is the Lipschitz constant of ``∇f``, i.e. ``sup_x ‖∇²f(x)‖₂``. This runs ``iters``
    steps of power iteration on the Hessian of ``f = loss_fn(model(inputs), targets)`` at the
    model's current parameters (Hessian-vector products by double backward) and returns
    ``‖H v‖`` for the last unit vector ``v`` — never more than ``‖∇²f(x)‖₂`` at this ``x``,
    which in turn is at most ``G``. So the result *underestimates* ``G``: a bound computed
    with it is optimistic, and the book says so. (A ReLU network is not even smooth
    everywhere; the estimate is the curvature the run actually met.)
    """
    from .per_sample import unflatten

    k = check_int(iters, "iters", minimum=1)
    params = [q for q in model.parameters() if q.requires_grad]
    theta = torch.cat([q.detach().reshape(-1) for q in params]).clone().requires_grad_(True)
    names = [name for name, q in model.named_parameters() if q.requires_grad]
    from torch.func import functional_call

    shaped = unflatten(model, theta)
    out = functional_call(model, {nm: shaped[nm] for nm in names}, (inputs,))
    g = torch.autograd.grad(loss_fn(out, targets), theta, create_graph=True)[0]
    gen = torch.Generator(device=theta.device).manual_seed(check_int(seed, "seed"))
    vec = torch.randn(theta.shape, generator=gen, device=theta.device, dtype=theta.dtype)
    vec = vec / vec.norm()
    est = 0.0
    for _ in range(k):
        hv = torch.autograd.grad(g, theta, vec, retain_graph=True)[0]
        est = float(hv.norm())
        if not est > 0:
            return 0.0
        vec = hv / hv.norm()
    return est
