"""Per-example gradients, reduced to the sums a privatizer needs.

Every algorithm asks the same question each step: *at θ (one per run), for this
batch, what is* ``Σ_i s_i g_i`` *(the sum of rescaled per-example gradients;
``s_i = min(1, C/‖g_i‖)`` for clipping) and, for error feedback, the raw sum*
``Σ_i g_i``? Two oracles answer it:

:class:`CallableOracle`
    Any ``grad_fn(theta, idx) -> Tensor[len(idx), p]`` (or batched
    ``[R, p], [R, b] -> [R, b, p]``). Per-example gradients are materialized.
:class:`GLPOracle`
    A generalized linear problem (``dpclip_lab.GLProblem``): the gradient of
    example i is ``f'(⟨θ, x_i⟩; y_i) x_i``, so its norm is ``|f'_i| ‖x_i‖`` and
    the rescaled sum is ``X_Bᵀ (s ⊙ f')`` — O(np), no ``[n, p]`` tensor
    (Song et al. 2021, §2). Poisson batches are gathered: O(nq·p) per run and
    step, not O(np) (see the class). Pre-clip perturbation (Chen et al. §5,
    with one ``k`` or one per run) breaks the rank-one structure, so it falls
    back to materialized gradients.

:func:`as_oracle` picks one: a ``GLProblem`` — or its bound ``grad_fn`` — gets
the fast path; any other callable (or object with a ``grad_fn`` method, such
as ``MeanEstimation``) the generic one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .._validation import check_finite_tensor
from ..clipping import safe_norm
from ..sampling import SeedGroups, gaussian

__all__ = ["Sums", "CallableOracle", "GLPOracle", "as_oracle"]


@dataclass
class Sums:
    """Lab utility: what one step's per-example gradients reduce to (runs dim first).

    ``scaled``: ``Σ_i w_i s_i g_i`` ``[R, p]``; ``raw``: ``Σ_i w_i g_i`` ``[R, p]``
    (or None); ``norms``: ``w_i ‖g_i‖`` ``[R, m]`` (0 in slots that hold no
    example); ``weight``: 0/1 batch membership ``[R, m]`` (None when every slot
    is a real example).
    """

    scaled: torch.Tensor
    raw: torch.Tensor | None
    norms: torch.Tensor
    weight: torch.Tensor | None


def _check_finite(t: torch.Tensor, what: str) -> None:
    check_finite_tensor(t, f"the batch sum of grad_fn's {what}",
                        hint="A diverging run (learning rate too large?) is the usual cause.")


def _is_glp(obj) -> bool:
    return all(hasattr(obj, a) for a in ("X", "y", "loss", "feature_norms")) and hasattr(obj.loss, "derivative")


class GLPOracle:
    """Fast clipped sums for a generalized linear problem (Song, Thakkar & Thakurta 2021, §2; module docstring).

    Poisson batches given as sorted member positions (:class:`dpclip_lab.sampling.Batch`)
    are *gathered*: per run and step the work is O(m p) for the ``m ≈ nq`` members
    — rows of ``X`` (plus a zero row at index ``n`` for padding) are gathered
    once for ``⟨θ_r, x_i⟩`` and the clipped sum ``Σ_i s_i c_i x_i`` — instead of
    O(n p) for a 0/1 mask over all n rows. When ``n`` is at most
    ``DENSE_MARGINS_MAX_RATIO`` times ``m``, the margins of all rows come from one
    matrix product instead (cheaper per element than a gather), and the sum is one
    fused gather-and-weighted-sum (``embedding_bag``). When ``m`` is not small against
    ``n`` the mask path is used.
    """

    #: gather members when the padded batch width m is at most this fraction of n (above it
    #: the dense mask path's matrix products should win; a rough threshold, not tuned).
    GATHER_MAX_FRACTION = 0.5
    #: On gathered batches, the margins ⟨θ_r, x_i⟩ of *all* n rows by one matrix product
    #: ``[R, p] x [p, n + 1]``, then each run's members picked from them, when ``n + 1`` is at most
    #: this many times the padded width m; above it, the members' rows are gathered ([R, m, p]) and
    #: multiplied. A product multiply-add costs ~40x less than a gathered element here (1 thread,
    #: R = 1024, p = 20: n = 2000, m = 250: 1.1 ms against 3.9 ms; n = 10^5: gathering wins).
    DENSE_MARGINS_MAX_RATIO = 16

    def __init__(self, problem):
        self.problem = problem
        self.X, self.y, self.loss = problem.X, problem.y, problem.loss
        self.feature_norms = problem.feature_norms
        self.n, self.p = self.X.shape
        self._padded_rows = None
        self._padded_T = None

    def _pad(self):
        """X, y, feature norms with one extra row at index n (zero features: padding contributes 0)."""
        if self._padded_rows is None:
            X, y, f = self.X, self.y, self.feature_norms
            self._padded_rows = (torch.cat([X, X.new_zeros((1, self.p))]), torch.cat([y, y[:1]]),
                                 torch.cat([f, f.new_zeros(1)]))
        return self._padded_rows

    def _gathered(self, batch):
        """``(idx [R, m] padded with n, weights or None)`` if the batch is gathered, else None."""
        if getattr(batch, "positions", None) is None or batch.n != self.n:
            return None
        idx, w = batch.members()
        if idx.shape[1] > self.GATHER_MAX_FRACTION * self.n:
            return None
        return idx, w

    def _rows(self, batch):
        """(X rows, y, feature norms, weights, gathered?) for a batch."""
        if batch.mask is not None:
            return self.X, self.y, self.feature_norms, batch.mask.to(self.X.dtype), False
        idx = batch.idx
        if batch.full:
            return self.X, self.y, self.feature_norms, None, False
        if idx.dim() == 1:
            return self.X[idx], self.y[idx], self.feature_norms[idx], None, False
        return self.X[idx], self.y[idx], self.feature_norms[idx], None, True

    def per_example(self, theta, batch):
        """Per-example gradients ``[R, m, p]`` (or ``[R, n, p]`` with a mask) and 0/1 weights."""
        g = self._gathered(batch)
        if g is not None:
            idx, w = g
            Xp, yp, _ = self._pad()
            Xg = Xp.index_select(0, idx.reshape(-1)).view(*idx.shape, self.p)
            z = torch.bmm(theta.unsqueeze(1), Xg.transpose(1, 2)).squeeze(1)
            return self.loss.derivative(z, yp[idx]).unsqueeze(-1) * Xg, w
        X, y, _, w, gathered = self._rows(batch)
        z = torch.einsum("rmp,rp->rm", X, theta) if gathered else theta @ X.T
        return self.loss.derivative(z, y).unsqueeze(-1) * X, w

    def reduce(self, theta, batch, scale: Callable | None, *, pre_clip_std=0.0, need_raw=False,
               generator=None) -> Sums:
        """The sums of one step (see :class:`Sums`); pre-clip noise materializes per-example gradients."""
        if has_pre_clip(pre_clip_std):
            return _materialized_reduce(*self.per_example(theta, batch), scale, pre_clip_std,
                                        need_raw, generator)
        g = self._gathered(batch)
        if g is not None:
            idx, w = g
            if idx.shape[1] == 0:  # no run has a member
                zero = theta.new_zeros(theta.shape)
                return Sums(zero, zero.clone() if need_raw else None, theta.new_zeros(idx.shape), w)
            if batch.groups is not None and batch.groups < theta.shape[0]:
                return self._reduce_grouped(theta, idx[:batch.groups], w, scale, need_raw)
            return self._reduce_gathered(theta, idx, w, scale, need_raw)
        X, y, fnorm, w, gathered = self._rows(batch)
        z = torch.einsum("rmp,rp->rm", X, theta) if gathered else theta @ X.T
        coef = self.loss.derivative(z, y)
        # In-place from here on: [R, m] temporaries dominate the cost of a batched sweep.
        if w is not None:
            coef = coef.mul_(w)       # non-members: coefficient 0, norm 0, never "clipped"
        norms = coef.abs().mul_(fnorm)
        sc = coef if scale is None else scale(norms).mul_(coef)
        if gathered:
            scaled = torch.einsum("rm,rmp->rp", sc, X)
            raw = torch.einsum("rm,rmp->rp", coef, X) if need_raw else None
        else:
            scaled = sc @ X
            raw = coef @ X if need_raw else None
        _check_finite(scaled, "loss derivative")
        return Sums(scaled, raw, norms, w)

    def _reduce_gathered(self, theta, idx, w, scale, need_raw) -> Sums:
        # Padding slots index the zero row n: z = 0, feature norm 0, so norm 0 (never "clipped")
        # and no contribution to any sum, whatever the loss derivative there.
        Xp = self._pad()[0]
        R, m = idx.shape
        flat = idx.reshape(-1)
        Xg = None
        if self.n + 1 <= self.DENSE_MARGINS_MAX_RATIO * m:
            if self._padded_T is None:  # Xpᵀ laid out contiguously: the product runs ~1.6x faster than on the view
                self._padded_T = Xp.T.contiguous()
            z = (theta @ self._padded_T).gather(1, idx)                            # [R, m]; row n is zero
        else:
            Xg = Xp.index_select(0, flat).view(R, m, self.p)
            z = torch.bmm(theta.unsqueeze(1), Xg.transpose(1, 2)).squeeze(1)      # [R, m]
        coef, norms, sc = self._member_coefs(z, flat, (R, m), scale)
        if Xg is None:
            # Fused gather + weighted sum over each run's members (Σ_i sc_i x_i): no [R, m, p] tensor.
            scaled = F.embedding_bag(idx, Xp, per_sample_weights=sc, mode="sum")
            raw = F.embedding_bag(idx, Xp, per_sample_weights=coef, mode="sum") if need_raw else None
        elif need_raw:  # the rows are gathered already: one product for both sums (n = 10^5: 1.3 ms vs 3.9)
            scaled, raw = torch.bmm(torch.stack([sc, coef], 1), Xg).unbind(1)
        else:
            scaled, raw = torch.bmm(sc.unsqueeze(1), Xg).squeeze(1), None
        _check_finite(scaled, "loss derivative")
        return Sums(scaled, raw, norms, w)

    def _member_coefs(self, z, flat, rows, scale):
        """Loss derivatives, norms and rescaled derivatives ``[R, m]`` of the members at margins ``z``;
        their labels and feature norms (rows ``flat`` of the padded data) viewed as ``rows`` broadcast to z."""
        _, yp, fp = self._pad()
        m = z.shape[-1]
        coef = self.loss.derivative(z, yp.index_select(0, flat).view(rows))       # (index_select: 3x faster than yp[idx])
        norms = coef.abs().mul_(fp.index_select(0, flat).view(rows))
        coef, norms = coef.view(-1, m), norms.view(-1, m)
        return coef, norms, (coef if scale is None else scale(norms).mul_(coef))

    def _reduce_grouped(self, theta, idx, w, scale, need_raw) -> Sums:
        # Runs that share a batch (SeedGroups: run r holds batch r % k, idx [k, m] the k distinct ones):
        # gather their rows once, and each batch's margins and sums for its R/k runs are one matrix
        # product, [R/k, p] x [p, m] — instead of R gathers of m rows and R vector products.
        k, m = idx.shape
        R, p = theta.shape
        J = R // k
        flat = idx.reshape(-1)
        Xg = self._pad()[0].index_select(0, flat).view(k, m, p)
        # theta viewed [J, k, p] (run r = j k + s); group s's runs: theta[:, s], as one batch of k products
        z = torch.bmm(theta.view(J, k, p).transpose(0, 1), Xg.transpose(1, 2))      # [k, J, m]
        z = z.transpose(0, 1).contiguous()                                          # [J, k, m]: run order
        coef, norms, sc = self._member_coefs(z, flat, (1, k, m), scale)

        def wsum(c):  # Σ_i c_ri x_i for every run: [J, k, m] -> k products [J, m] x [m, p]
            return torch.bmm(c.view(J, k, m).transpose(0, 1), Xg).transpose(0, 1).reshape(R, p)

        scaled = wsum(sc)
        raw = wsum(coef) if need_raw else None
        _check_finite(scaled, "loss derivative")
        return Sums(scaled, raw, norms, w)


class CallableOracle:
    """Lab utility: generic per-example gradient oracle ``grad_fn(theta, idx)``.

    With one run, ``grad_fn`` is called as ``grad_fn(theta[p], idx[b]) -> [b, p]``;
    with ``R > 1`` runs as ``grad_fn(theta[R, p], idx[R, b] or [b]) -> [R, b, p]``.
    Poisson masks are turned into padded indices with 0/1 weights.
    """

    def __init__(self, grad_fn: Callable):
        self.grad_fn = grad_fn

    def per_example(self, theta, batch):
        idx, w = batch.padded()
        R = theta.shape[0]
        try:
            if R == 1:
                G = self.grad_fn(theta[0], idx if idx.dim() == 1 else idx[0])
                if isinstance(G, torch.Tensor) and G.dim() == 2:
                    G = G.unsqueeze(0)
            else:
                G = self.grad_fn(theta, idx)
        except (RuntimeError, IndexError) as err:
            raise ValueError(f"grad_fn failed on theta of shape {tuple(theta.shape[1:] if R == 1 else theta.shape)} "
                             f"(is theta0 the right shape for grad_fn?): {err}") from err
        m = idx.shape[-1]
        if not isinstance(G, torch.Tensor) or G.dim() != 3 or G.shape != (R, m, theta.shape[-1]):
            shape = tuple(G.shape) if isinstance(G, torch.Tensor) else type(G).__name__
            want = f"[{m}, {theta.shape[-1]}]" if R == 1 else f"[{R}, {m}, {theta.shape[-1]}]"
            raise ValueError(f"grad_fn must return per-example gradients of shape {want} "
                             f"(len(idx), p = theta0.shape[-1]); got {shape}")
        return G, w

    def reduce(self, theta, batch, scale, *, pre_clip_std=0.0, need_raw=False, generator=None) -> Sums:
        G, w = self.per_example(theta, batch)
        return _materialized_reduce(G, w, scale, pre_clip_std, need_raw, generator)


def _materialized_reduce(G, w, scale, pre_clip_std, need_raw, generator) -> Sums:
    _check_finite(G, "per-example gradients")  # before the norms: NaN/inf is grad_fn's fault, not the clip's
    if has_pre_clip(pre_clip_std):
        # Chen et al. (2020) §5, eq. (11): g_i + k ζ_i, ζ_i ~ N(0, I), *before* clipping.
        # k is a float or one value per run ([R]: a sweep over k is one batched call).
        k = pre_clip_std
        if isinstance(k, torch.Tensor):
            k = k.to(device=G.device, dtype=G.dtype).reshape(-1, *([1] * (G.dim() - 1)))
        # Seed groups on padded batches: each seed draws for its own members only, as one run with it would.
        lengths = None
        if isinstance(generator, SeedGroups) and w is not None:
            lengths = w[:len(generator)].sum(1).tolist()
        G = G + k * gaussian(G.shape, generator, G.device, G.dtype, lengths)
    norms = safe_norm(G)  # overflow-safe: a norm past the dtype's max would otherwise silently zero the example
    if not bool(torch.isfinite(norms).all()) and bool(torch.isfinite(G).all()):
        raise ValueError(f"a per-example gradient norm exceeds the range of {G.dtype} (max "
                         f"{torch.finfo(G.dtype).max:.3g}); rescale the loss or compute in float64")
    s = None if scale is None else scale(norms)
    if w is not None:
        wd = w.to(G.dtype)
        s = wd if s is None else s * wd
    scaled = G.sum(1) if s is None else torch.einsum("rm,rmp->rp", s, G)
    raw = None
    if need_raw:
        raw = G.sum(1) if w is None else torch.einsum("rm,rmp->rp", w.to(G.dtype), G)
    _check_finite(scaled, "per-example gradients")  # NaN/inf anywhere in G reaches the sum
    if w is not None:
        norms = norms * w.to(norms.dtype)  # padding slots: norm 0, never "clipped"
    return Sums(scaled, raw, norms, w)


def has_pre_clip(pre_clip_std) -> bool:
    """Lab utility: True when pre-clip perturbation (Chen, Wu & Hong 2020, §5 eq. (11)) is on —
    ``k > 0`` for a float, any ``k_r > 0`` for a per-run tensor."""
    if isinstance(pre_clip_std, torch.Tensor):
        return bool((pre_clip_std != 0).any())
    return bool(pre_clip_std)


def as_oracle(grad_fn):
    """Lab utility: a :class:`GLPOracle` for a GLProblem (or its bound ``grad_fn``), else a :class:`CallableOracle`."""
    if isinstance(grad_fn, (GLPOracle, CallableOracle)):
        return grad_fn
    if _is_glp(grad_fn):
        return GLPOracle(grad_fn)
    owner = getattr(grad_fn, "__self__", None)
    if owner is not None and _is_glp(owner) and getattr(grad_fn, "__name__", "") in ("grad_fn", "per_example_grads"):
        return GLPOracle(owner)
    if callable(grad_fn):
        return CallableOracle(grad_fn)
    if callable(getattr(grad_fn, "grad_fn", None)):  # a problem object (e.g. MeanEstimation)
        return CallableOracle(grad_fn.grad_fn)
    raise TypeError(f"grad_fn must be a callable (theta, idx) -> per-example gradients or a GLProblem, "
                    f"got {type(grad_fn).__name__}")
