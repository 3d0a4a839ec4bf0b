"""Per-example gradient clipping.

Clipping to norm ``C`` maps a vector ``g`` to ``g * min(1, C / ||g||_2)``
(Abadi et al. 2016; Song et al. 2021, Alg. 1 write it ``[g]_L``). The lab
clips along the last dimension, so one call clips a whole ``[batch, p]`` matrix
of per-example gradients, or a ``[runs, batch, p]`` stack for many clipping
norms at once.
"""
from __future__ import annotations

from collections.abc import Sequence

import math
from numbers import Integral

import torch

from ._validation import as_clip_norm, check_finite_tensor, check_int, float_dtype_of

__all__ = ["clip", "clip_factor", "clip_per_block", "safe_norm", "clipped_fraction"]


def _as_vectors(g, name: str = "g") -> torch.Tensor:
    """``g`` as a floating-point tensor with a non-empty last (vector) dimension.

    Integer and bool tensors are promoted to the default float dtype (computing on
    them in their own dtype would truncate the clip norm: 0.5 -> 0).
    """
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(g).__name__}")
    if g.is_complex():
        raise TypeError(f"{name} must be a real tensor, got dtype {g.dtype}")
    if g.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension (the vector dimension), got a scalar")
    if g.shape[-1] == 0:
        raise ValueError(f"{name} has an empty last dimension (shape {tuple(g.shape)}): each vector "
                         "needs at least one coordinate")
    return g if g.is_floating_point() else g.to(float_dtype_of(g))


def _scaled(g: torch.Tensor):
    """``(u, r, s)`` with ``g = s · u``, ``s = max_j |g_j|`` (1 for zero vectors) and ``r = ‖u‖ ∈ {0} ∪ [1, √p]``.

    Nothing here can overflow or underflow: ``u`` has entries in [-1, 1].
    """
    s = g.abs().amax(dim=-1, keepdim=True)
    s = torch.where(s > 0, s, torch.ones_like(s))
    u = g / s
    return u, torch.linalg.vector_norm(u, dim=-1, keepdim=True), s


def safe_norm(g: torch.Tensor) -> torch.Tensor:
    """Lab utility: ℓ2 norm along the last dimension without overflow or underflow.

    Scales by the largest absolute entry first, so the result is finite and correct
    (to a few ulp) whenever the true norm is at most the dtype's largest finite value
    (``torch.finfo(g.dtype).max``: 3.4e38 in float32, 1.8e308 in float64) — where
    ``torch.linalg.vector_norm`` overflows once the *squares* exceed it (float32
    entries above ~1e19). A norm beyond the dtype's max is returned as ``inf`` (it is
    not representable); :func:`clip` does not need the norm and clips such vectors
    exactly. Entries that are ±inf give ``inf``; NaN entries raise ``ValueError``.
    Integer tensors are promoted to the default float dtype.

    Fast path: ``torch.linalg.vector_norm`` (one pass) is kept for every row where it is
    exact to rounding — its sum of squares neither overflowed (the norm is finite) nor lost
    anything to underflow (squares of entries below √tiny are off by at most ``tiny`` each,
    so by less than one ulp of ‖g‖² once ``‖g‖ ≥ √(p·tiny/eps)``: 2.5e-14 at p = 6000 in
    float32). Only the other rows (zero, tiny, huge, inf or NaN) are scaled.
    """
    g = _as_vectors(g)
    n = torch.linalg.vector_norm(g, dim=-1)
    if n.numel() == 0:
        return n
    # every row exact?
    nd = n.detach()
    if nd.numel() == 1:  # one row (DiceSGD's error in one run): one read; a NaN fails both comparisons
        lo = hi = nd.item()
    else:  # one reduction and two scalar reads (NaN propagates through aminmax: not exact)
        lo, hi = (float(v) for v in torch.aminmax(nd))
    if lo >= _exact_floor(g) and hi < math.inf:
        return n
    if g.dim() == 1:
        return _scaled_norm(g)
    bad = ~_exact(n, g)
    return n.index_put((bad,), _scaled_norm(g[bad]))  # out of place: autograd keeps vector_norm's result


def _one_pass_norm(g: torch.Tensor, keepdim: bool = False):
    """``(‖g‖, ok)``: the norm along the last dimension by one ``vector_norm`` pass, and where it
    is exact to rounding (finite, and at least ``√(p·tiny/eps)``; see :func:`safe_norm`)."""
    n = torch.linalg.vector_norm(g, dim=-1, keepdim=keepdim)
    return n, _exact(n, g)


def _exact(n: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Where the one-pass norms ``n`` of ``g``'s rows are exact to rounding: finite and at least
    :func:`_exact_floor` (False for NaN)."""
    return (n >= _exact_floor(g)) & (n < math.inf)


def _exact_floor(g: torch.Tensor) -> float:
    """``√(p·tiny/eps)``: a one-pass norm at least this large lost nothing to underflow (see :func:`safe_norm`)."""
    fi = torch.finfo(g.dtype)
    return math.sqrt(g.shape[-1] * fi.tiny / fi.eps)


def _scaled_norm(g: torch.Tensor) -> torch.Tensor:
    """:func:`safe_norm` by scaling with the largest entry (``g`` already checked by ``_as_vectors``)."""
    if bool(torch.isnan(g).any()):
        check_finite_tensor(g, "g")
    big = torch.isinf(g).any(-1)
    if bool(big.any()):
        g = torch.where(torch.isinf(g), torch.zeros_like(g), g)
    u, r, s = _scaled(g)
    out = (r * s).squeeze(-1)
    return torch.where(big, torch.full_like(out, math.inf), out) if bool(big.any()) else out


def _broadcast_clip_norm(c: torch.Tensor, lead_shape: torch.Size) -> torch.Tensor:
    try:
        return torch.broadcast_to(c, torch.broadcast_shapes(c.shape, lead_shape))
    except RuntimeError:
        raise ValueError(
            f"clip_norm of shape {tuple(c.shape)} does not broadcast against the leading "
            f"dimensions {tuple(lead_shape)} of g (g's last dimension is the vector)"
        ) from None


def clip_factor(norms: torch.Tensor, clip_norm) -> torch.Tensor:
    """The scale ``min(1, C / norm)`` for given norms; exactly 1 for zero norms.

    Source: Chen, Wu & Hong (2020), eq. (3) (the factor min(1, c/‖g‖)); Abadi et al. (2016), Alg. 1.

    ``norms`` must be finite and non-negative: an ``inf`` norm (one that overflowed)
    would give the factor 0 and silently drop its example, so it raises — compute
    the norms with :func:`safe_norm`, or clip the vectors with :func:`clip`, which
    is exact even when the norm exceeds the dtype's range.
    """
    if not isinstance(norms, torch.Tensor):
        raise TypeError(f"norms must be a torch.Tensor, got {type(norms).__name__}")
    norms = norms if norms.is_floating_point() else norms.to(float_dtype_of(norms))
    check_finite_tensor(norms, "norms", hint="An overflowed norm would silently zero its example; "
                        "use safe_norm, or clip() on the vectors themselves")
    if bool((norms < 0).any()):
        raise ValueError("norms must be >= 0 (they are vector norms), got a negative entry")
    c = as_clip_norm(clip_norm, norms)
    return c / torch.maximum(norms, c)


def clip(g: torch.Tensor, clip_norm) -> torch.Tensor:
    """Clip each vector along the last dimension of ``g`` to ℓ2 norm at most ``clip_norm``.

    Parameters
    ----------
    g : Tensor[..., p]
        Per-example gradients (any leading shape: ``[batch, p]``, ``[runs, batch, p]``...).
    clip_norm : float or Tensor
        The clipping norm ``C > 0`` (finite). A tensor must broadcast against
        ``g.shape[:-1]``; e.g. ``torch.tensor([0.1, 1.0])[:, None]`` with
        ``g`` of shape ``[1, batch, p]`` clips the batch at two norms in one call.

    Returns
    -------
    Tensor
        ``g_i * min(1, C / ||g_i||)`` for every vector ``g_i``, of shape
        ``broadcast(g.shape[:-1], clip_norm.shape) + (p,)``. Vectors inside the ball are
        returned unchanged; zero vectors stay exactly zero; the direction is never changed.

        Integer tensors are promoted to the default float dtype. Vectors whose norm
        exceeds the dtype's range (float32 entries near 3e38) are clipped exactly.

    Raises
    ------
    ValueError
        If ``clip_norm`` is not in (0, inf) — checked after the cast to ``g``'s dtype,
        so 1e-50 or 1e50 with float32 ``g`` raise instead of becoming 0 or inf — if
        ``g`` holds NaN/inf, if its last dimension is empty, or if the shapes do not
        broadcast.

    References
    ----------
    Abadi et al. (2016), Alg. 1; Song, Thakkar, Thakurta (2021), Alg. 1 (``[·]_L``).
    """
    g = _as_vectors(g)
    check_finite_tensor(g, "g")
    c = as_clip_norm(clip_norm, g)
    c = _broadcast_clip_norm(c, g.shape[:-1]).unsqueeze(-1)
    n, ok = _one_pass_norm(g, keepdim=True)
    f = c / n
    # The usual case: every norm exact from one pass, and every factor C/‖g‖ that is used a normal
    # number (C = 1e-30 on ‖g‖ = 1e18 would underflow it to 0 in float32): g·C/‖g‖ where ‖g‖ > C.
    if bool((ok & ((n <= c) | (f >= torch.finfo(g.dtype).tiny))).all()):
        return torch.where(n > c, g * f, g)
    # ‖g‖ = r·s may overflow (float32 entries near 3e38); the clipped vector C·g/‖g‖
    # = u·(C/r) never does, so vectors whose norm is inf are still clipped exactly.
    u, r, s = _scaled(g)
    norm = r * s
    return torch.where(norm > c, u * (c / torch.where(r > 0, r, torch.ones_like(r))), g)


def clip_per_block(g: torch.Tensor, clip_norm, blocks: int | Sequence[int]) -> torch.Tensor:
    """"Per-class" clipping (Song, Thakkar, Thakurta 2021, App. B.4.1, Thm B.5).

    Source: Song, Thakkar & Thakurta (2021), App. B.4.1 and Thm B.5.

    Splits the last dimension of ``g`` into blocks and clips each block to
    ``clip_norm`` separately. For softmax regression with parameters
    ``θ = (θ^(1), ..., θ^(K))`` stored class-major, ``blocks=K`` clips
    ``∇_{θ^(k)} ℓ`` for each class k, as in Theorem B.5 (which shows this does
    not make the clipped field a gradient field either).

    Parameters
    ----------
    g : Tensor[..., p]
    clip_norm : float or Tensor broadcasting against ``g.shape[:-1]``
        The norm each block is clipped to (the whole vector's norm can reach
        ``clip_norm * sqrt(n_blocks)``).
    blocks : int or sequence of int
        Number of equal blocks, or the block sizes (summing to p).
    """
    g = _as_vectors(g)
    p = g.shape[-1]
    if isinstance(blocks, Integral):
        k = check_int(blocks, "blocks", minimum=1)
        if p % k:
            raise ValueError(f"blocks={k} does not divide the vector length p={p}")
        sizes = [p // k] * k
    else:
        sizes = [check_int(s, "blocks[i]", minimum=1) for s in blocks]
        if sum(sizes) != p:
            raise ValueError(f"block sizes {list(sizes)} sum to {sum(sizes)}, not to p={p}")
    parts = [clip(block, clip_norm) for block in torch.split(g, sizes, dim=-1)]
    return torch.cat(parts, dim=-1)


def clipped_fraction(g: torch.Tensor, clip_norm) -> torch.Tensor:
    """Fraction of vectors (along the second-to-last dim) whose norm exceeds ``clip_norm``.

    Source: Song, Thakkar & Thakurta (2021), App. D.1 (choosing the clipping norm).

    The standard diagnostic for choosing a clipping norm (Song et al. App. D.1):
    returns a tensor of shape ``broadcast(g.shape[:-2], clip_norm)``.

    Raises ``ValueError`` if ``g`` has fewer than two dimensions (``[..., batch, p]``)
    or holds no vectors (an empty batch has no fraction clipped, not NaN).
    """
    g = _as_vectors(g)
    check_finite_tensor(g, "g")
    if g.dim() < 2:
        raise ValueError(f"g must have shape [..., batch, p] (vectors along the last dimension, "
                         f"examples along the one before), got shape {tuple(g.shape)}")
    if g.shape[-2] == 0:
        raise ValueError(f"g holds no vectors (batch dimension of size 0, shape {tuple(g.shape)}): "
                         "the fraction clipped of an empty batch is undefined")
    c = as_clip_norm(clip_norm, g)
    over = safe_norm(g) > (c.unsqueeze(-1) if c.dim() else c)
    return over.to(g.dtype).mean(-1)
