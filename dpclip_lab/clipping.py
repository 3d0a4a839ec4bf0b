"""Per-example gradient clipping.

Clipping to norm ``C`` maps a vector ``g`` to ``g * min(1, C / ||g||_2)``
(Abadi et al. 2016; Song et al. 2021, Alg. 1 write it ``[g]_L``). The lab
clips along the last dimension, so one call clips a whole ``[batch, p]`` matrix
of per-example gradients, or a ``[runs, batch, p]`` stack for many clipping
norms at once.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validation import as_clip_norm, check_finite_tensor, check_int

__all__ = ["clip", "clip_factor", "clip_per_block", "safe_norm", "clipped_fraction"]


def safe_norm(g: torch.Tensor) -> torch.Tensor:
    """ℓ2 norm along the last dimension without overflow or underflow.

    Scales by the largest absolute entry first, so vectors with entries near
    1e30 (float32) or 1e300 (float64) give a finite, correct norm.
    """
    scale = g.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return (torch.linalg.vector_norm(g / safe, dim=-1, keepdim=True) * safe).squeeze(-1)


def _broadcast_clip_norm(c: torch.Tensor, lead_shape: torch.Size) -> torch.Tensor:
    try:
        return torch.broadcast_to(c, torch.broadcast_shapes(c.shape, lead_shape))
    except RuntimeError:
        raise ValueError(
            f"clip_norm of shape {tuple(c.shape)} does not broadcast against the leading "
            f"dimensions {tuple(lead_shape)} of g (g's last dimension is the vector)"
        ) from None


def clip_factor(norms: torch.Tensor, clip_norm) -> torch.Tensor:
    """The scale ``min(1, C / norm)`` for given norms; exactly 1 for zero norms."""
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
    Tensor of shape ``broadcast(g.shape[:-1], clip_norm.shape) + (p,)``:
    ``g_i * min(1, C / ||g_i||)``. Vectors inside the ball are returned
    unchanged; zero vectors stay exactly zero; the direction is never changed.

    Raises
    ------
    ValueError
        If ``clip_norm`` is not in (0, inf), if ``g`` holds NaN/inf, or if the
        shapes do not broadcast.

    References
    ----------
    Abadi et al. (2016), Alg. 1; Song, Thakkar, Thakurta (2021), Alg. 1 (``[·]_L``).
    """
    check_finite_tensor(g, "g")
    if g.dim() == 0:
        raise ValueError("g must have at least one dimension (the vector dimension)")
    c = as_clip_norm(clip_norm, g)
    c = _broadcast_clip_norm(c, g.shape[:-1])
    factor = c / torch.maximum(safe_norm(g), c)
    return g * factor.unsqueeze(-1)


def clip_per_block(g: torch.Tensor, clip_norm, blocks: int | Sequence[int]) -> torch.Tensor:
    """"Per-class" clipping (Song, Thakkar, Thakurta 2021, App. B.4.1, Thm B.5).

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
    p = g.shape[-1]
    if isinstance(blocks, int):
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

    The standard diagnostic for choosing a clipping norm (Song et al. App. D.1):
    returns a tensor of shape ``broadcast(g.shape[:-2], clip_norm)``.
    """
    check_finite_tensor(g, "g")
    c = as_clip_norm(clip_norm, g)
    over = safe_norm(g) > (c.unsqueeze(-1) if c.dim() else c)
    return over.to(g.dtype).mean(-1)
