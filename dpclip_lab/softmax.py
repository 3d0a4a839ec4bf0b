"""Clipped softmax gradients are not a gradient field (Song, Thakkar, Thakurta 2021, §3.2).

For a generalized linear problem, clipping a per-example gradient is the same as
Huberizing its loss (Lemma 3.1, :mod:`dpclip_lab.huberization`): clipped gradient
descent still minimizes *some* convex function. Multinomial logistic (softmax)
regression with ``K >= 3`` classes is different. Theorem 3.3 shows that the field

    G(θ) = clip_C(∇_θ ℓ(θ; (x, y)))

of clipped per-example gradients is the gradient of *no* function that is
differentiable almost everywhere; Theorem B.5 (App. B.4.1) shows that clipping
each class block ``∇_{θ^(k)} ℓ`` separately ("per-class" clipping) does not help.
The proof (App. B.4) finds an open set of the clipped region on which the
Jacobian ``∂G/∂θ`` is not symmetric, which a Hessian always is (Schwarz).

This module makes those statements measurable:

* :class:`SoftmaxRegression` — the cross-entropy loss and its per-example
  gradients ``(softmax(Θx) − e_y) ⊗ x`` in closed form, the clipped field
  (whole-vector or per-class) and :meth:`SoftmaxRegression.field`, a function
  ``θ ↦ G(θ)`` to hand to the tools below;
* :func:`jacobian` (autograd), :func:`asymmetry` ``||J − Jᵀ||_F / ||J||_F`` and
  :func:`planar_curl` ``vᵀ(J − Jᵀ)u``, the curl of the field in the plane ``(u, v)``;
* :func:`circulation` ``∮ G·dθ`` around a circle and :func:`line_integral`
  along a polyline: a gradient field has zero circulation and path-independent
  line integrals;
* :meth:`SoftmaxRegression.as_glp` — the binary case ``K = 2`` *is* a
  generalized linear problem, so its clipped field is the gradient of the
  Huberized objective of Lemma 3.1 (the contrast).

Conventions (as in the paper): ``θ = (θ^(1), ..., θ^(K)) ∈ ℝ^{K×p}`` is stored
flat and class-major, ``θ[..., k*p:(k+1)*p] = θ^(k)``; classes are numbered
``0, ..., K−1`` here (``1, ..., K`` in the paper). Every function is batched over
the leading dimensions of ``θ`` and keeps the device and dtype of the inputs.

The paper's displayed loss (§3.2) lost its minus sign in the text we have; the
cross-entropy here is ``ℓ = −log softmax(Θx)_y``, whose gradient is the one the
paper writes (eq. (3)–(4)).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ._validation import as_clip_norm, check_finite_tensor, check_int, check_nonnegative
from .clipping import clip, clip_per_block, safe_norm

__all__ = [
    "SoftmaxRegression",
    "class_direction",
    "plane_grid",
    "jacobian",
    "asymmetry",
    "planar_curl",
    "circulation",
    "line_integral",
]

Field = Callable[[torch.Tensor], torch.Tensor]


def _clip_norm_per_example(clip_norm, like: torch.Tensor) -> torch.Tensor:
    """A clip norm broadcasting over θ's leading dims, with a trailing axis for examples."""
    c = as_clip_norm(clip_norm, like)
    return c.unsqueeze(-1) if c.dim() else c


class SoftmaxRegression:
    """Softmax (multinomial logistic) regression ``L(θ) = (1/n) Σ_i −log softmax(Θ x_i)_{y_i}``.

    Parameters
    ----------
    X : Tensor[n, p] or Tensor[p]
        Features (one example may be given as a vector; it becomes ``[1, p]``).
    y : int, sequence or Tensor[n]
        Class labels in ``{0, ..., K−1}``.
    num_classes : int
        ``K >= 2``. ``K = 2`` is binary logistic regression written with two
        weight blocks (see :meth:`as_glp`).

    Notes
    -----
    Parameters ``θ`` have shape ``[..., K*p]`` (class-major: block ``k`` is
    ``θ^(k)``). The per-example gradient is ``∇_{θ^(k)} ℓ = (softmax_k − 1[y = k]) x``
    (Song et al. 2021, §3.2), computed in closed form; its norm is below
    ``sqrt(K/(K−1))·||x||`` (App. B.4, after eq. (5)), so a clip norm at or above
    :meth:`max_grad_norm` never clips.

    References
    ----------
    Song, Thakkar, Thakurta (2021), §3.2 (Theorem 3.3), App. B.4 and B.4.1 (Theorem B.5).
    """

    def __init__(self, X: torch.Tensor, y, num_classes: int):
        self.K = check_int(num_classes, "num_classes", minimum=2)
        if not isinstance(X, torch.Tensor) or not X.is_floating_point():
            raise TypeError("X must be a floating-point torch.Tensor of shape [n, p] or [p], got "
                            f"{X.dtype if isinstance(X, torch.Tensor) else type(X).__name__}")
        if X.dim() == 1:
            X = X.unsqueeze(0)
        if X.dim() != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise ValueError(f"X must have shape [n, p] with n, p >= 1 (or [p]), got {tuple(X.shape)}")
        check_finite_tensor(X, "X")
        y = torch.as_tensor(y, device=X.device)
        if y.dim() == 0:
            y = y.unsqueeze(0)
        if y.dtype == torch.bool or y.is_complex() or (
                y.is_floating_point() and not bool((y == y.round()).all())):
            raise TypeError(f"y must hold integer class labels, got dtype {y.dtype}")
        y = y.long()
        if y.shape != X.shape[:1]:
            raise ValueError(f"y must have shape [{X.shape[0]}] to match X of shape "
                             f"{tuple(X.shape)}, got {tuple(y.shape)}")
        if bool(((y < 0) | (y >= self.K)).any()):
            raise ValueError(f"labels y must lie in {{0, ..., {self.K - 1}}} (num_classes = {self.K}), "
                             f"got values {torch.unique(y)[:5].tolist()}")
        self.X, self.y = X, y
        self.n, self.p = X.shape
        self.dim = self.K * self.p
        self.feature_norms = safe_norm(X)

    def __repr__(self) -> str:
        return f"SoftmaxRegression(n={self.n}, p={self.p}, K={self.K})"

    # -- closed forms ----------------------------------------------------------------
    def _check_theta(self, theta: torch.Tensor) -> torch.Tensor:
        if not isinstance(theta, torch.Tensor):
            raise TypeError(f"theta must be a torch.Tensor of shape [..., {self.dim}], "
                            f"got {type(theta).__name__}")
        if theta.dim() == 0 or theta.shape[-1] != self.dim:
            raise ValueError(f"theta must have shape [..., K*p] = [..., {self.dim}] "
                             f"(K = {self.K} classes, p = {self.p} features), got {tuple(theta.shape)}")
        return check_finite_tensor(theta, "theta")

    def logits(self, theta: torch.Tensor) -> torch.Tensor:
        """``⟨θ^(k), x_i⟩`` for every example and class: shape ``[..., n, K]``."""
        theta = self._check_theta(theta)
        W = theta.reshape(*theta.shape[:-1], self.K, self.p)
        return torch.einsum("...kp,np->...nk", W, self.X.to(theta.dtype))

    def probabilities(self, theta: torch.Tensor) -> torch.Tensor:
        """``softmax(Θ x_i)``: shape ``[..., n, K]``."""
        return torch.softmax(self.logits(theta), dim=-1)

    def per_example_losses(self, theta: torch.Tensor) -> torch.Tensor:
        """``ℓ_i(θ) = logsumexp(Θ x_i) − ⟨θ^(y_i), x_i⟩``: shape ``[..., n]``."""
        z = self.logits(theta)
        zy = z.gather(-1, self.y.expand(*z.shape[:-1]).unsqueeze(-1)).squeeze(-1)
        return torch.logsumexp(z, dim=-1) - zy

    def objective(self, theta: torch.Tensor) -> torch.Tensor:
        """``L(θ) = (1/n) Σ ℓ_i(θ)``: shape ``theta.shape[:-1]``."""
        return self.per_example_losses(theta).mean(-1)

    def per_example_grads(self, theta: torch.Tensor) -> torch.Tensor:
        """``(softmax(Θx_i) − e_{y_i}) ⊗ x_i``, class-major: shape ``[..., n, K*p]``."""
        r = self.probabilities(theta)
        r = r - torch.nn.functional.one_hot(self.y, self.K).to(r.dtype)
        g = r.unsqueeze(-1) * self.X.to(r.dtype).unsqueeze(-2)          # [..., n, K, p]
        return g.reshape(*g.shape[:-2], self.dim)

    def grad(self, theta: torch.Tensor) -> torch.Tensor:
        """The full-batch gradient ``∇L(θ)``: shape ``[..., K*p]``."""
        return self.per_example_grads(theta).mean(-2)

    def max_grad_norm(self) -> float:
        """``sqrt(2) · max_i ||x_i||``: the supremum of per-example gradient norms, for every K.

        From eq. (5) of App. B.4: ``||∇ℓ||² / ||x||² = q² + Σ_{k≠y} p_k²`` with
        ``q = 1 − p_y = Σ_{k≠y} p_k``. The sum of squares is at most ``q²`` (all
        the wrong mass on one class), so ``||∇ℓ|| < sqrt(2)·||x||``, approached
        when one wrong class takes all the probability. The paper states the
        range as ``(0, sqrt(K/(K−1))·||x||)``; that is the value for *equal*
        wrong-class probabilities, a lower envelope, not the supremum (the two
        agree only for ``K = 2``). A clip norm at or above this never clips.
        """
        return float(2.0 ** 0.5 * self.feature_norms.max())

    # -- clipping ----------------------------------------------------------------------
    def clipped_per_example_grads(self, theta: torch.Tensor, clip_norm, *,
                                  per_class: bool = False) -> torch.Tensor:
        """Per-example gradients clipped to ``clip_norm``: shape ``[..., n, K*p]``.

        ``per_class=False`` clips the whole vector (:func:`dpclip_lab.clip`, Thm 3.3);
        ``per_class=True`` clips each block ``∇_{θ^(k)} ℓ`` to ``clip_norm``
        (:func:`dpclip_lab.clip_per_block`, Thm B.5). ``clip_norm`` may be a
        tensor broadcasting over ``theta``'s leading dimensions.
        """
        g = self.per_example_grads(theta)
        c = _clip_norm_per_example(clip_norm, g)
        if per_class:
            return clip_per_block(g, c, self.K)
        return clip(g, c)

    def clipped_grad(self, theta: torch.Tensor, clip_norm, *, per_class: bool = False) -> torch.Tensor:
        """The clipped field ``G(θ) = (1/n) Σ_i clip_C(∇ℓ_i(θ))``: shape ``[..., K*p]``."""
        return self.clipped_per_example_grads(theta, clip_norm, per_class=per_class).mean(-2)

    def clipped_mask(self, theta: torch.Tensor, clip_norm, *, per_class: bool = False) -> torch.Tensor:
        """Whether any example is clipped at ``θ`` (``||∇ℓ_i|| > C``; any block if ``per_class``).

        The set where this is true is the paper's ``Θ`` (Thm 3.3 / Thm B.5).
        Shape ``theta.shape[:-1]``, dtype bool.
        """
        g = self.per_example_grads(theta)
        c = _clip_norm_per_example(clip_norm, g)
        if per_class:
            norms = safe_norm(g.reshape(*g.shape[:-1], self.K, self.p))   # [..., n, K]
            return (norms > c.unsqueeze(-1)).any(-1).any(-1)
        return (safe_norm(g) > c).any(-1)

    def field(self, clip_norm=None, *, per_class: bool = False) -> Field:
        """The function ``θ ↦ G(θ)`` (``clip_norm=None``: the unclipped gradient ``∇L``).

        Hand it to :func:`jacobian`, :func:`circulation` or :func:`line_integral`.
        """
        if clip_norm is None:
            return self.grad
        as_clip_norm(clip_norm, self.X)  # validate now, not at the first call

        def G(theta: torch.Tensor) -> torch.Tensor:
            return self.clipped_grad(theta, clip_norm, per_class=per_class)
        return G

    # -- the binary contrast -------------------------------------------------------------
    def as_glp(self):
        """The binary problem (``K = 2``) as a :class:`dpclip_lab.GLProblem` on ``θ ∈ ℝ^{2p}``.

        With two classes, ``ℓ(θ; (x, y))`` depends on θ only through the margin
        ``⟨θ^(0) − θ^(1), x⟩``: it is the logistic loss ``log(1 + e^{−s z})`` of
        ``z = ⟨θ, x̃⟩`` with ``x̃ = (x, −x)`` and ``s = +1`` for ``y = 0``, ``−1``
        for ``y = 1``. So it is a generalized linear problem, Lemma 3.1 applies,
        and the clipped field equals ``GLProblem.clipped_objective_grad``: the
        gradient of a convex (Huberized) objective. Raises ``ValueError`` for ``K != 2``.
        """
        if self.K != 2:
            raise ValueError(f"as_glp needs a binary problem (num_classes = 2), got K = {self.K}")
        from .glp import GLProblem
        from .losses import Logistic
        Xt = torch.cat([self.X, -self.X], dim=-1)
        s = torch.where(self.y == 0, 1.0, -1.0).to(self.X.dtype)
        return GLProblem(Xt, s, Logistic())


# ------------------------------------------------------------------------- geometry helpers

def class_direction(k: int, x: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The unit vector of ``ℝ^{K×p}`` that moves only ``θ^(k)``, along ``x/||x||``.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    Moving ``θ`` by ``t`` along it changes the logit ``⟨θ^(k), x⟩`` by ``t·||x||``
    and no other logit of ``x``. Two of these span the 2-D slices of the chapter.
    """
    K = check_int(num_classes, "num_classes", minimum=2)
    k = check_int(k, "k", minimum=0)
    if k >= K:
        raise ValueError(f"k must lie in [0, {K - 1}], got {k}")
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not x.is_floating_point():
        raise ValueError("x must be a 1-D floating-point tensor (one feature vector)")
    nx = safe_norm(x)
    if not float(nx) > 0:
        raise ValueError("x must be non-zero")
    out = torch.zeros(K, x.shape[0], dtype=x.dtype, device=x.device)
    out[k] = x / nx
    return out.reshape(-1)


def plane_grid(center: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
               s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Points ``center + s_j u + t_i v`` of a 2-D slice: shape ``[len(t), len(s), d]``.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    Row ``i`` holds ``t_i`` (the heatmap's y axis), column ``j`` holds ``s_j`` (x axis).
    """
    _check_vec(center, "center")
    d = center.shape[-1]
    u, v = _as_dir(u, "u", center), _as_dir(v, "v", center)
    if u.shape[-1] != d or v.shape[-1] != d:
        raise ValueError(f"u and v must have length d = {d}, got {u.shape[-1]} and {v.shape[-1]}")
    s, t = _as_tensor(s, "s", center), _as_tensor(t, "t", center)
    if s.dim() != 1 or t.dim() != 1:
        raise ValueError(f"s and t must be 1-D grids of offsets, got shapes {tuple(s.shape)} and {tuple(t.shape)}")
    return center + t[:, None, None] * v + s[None, :, None] * u


# ------------------------------------------------------------------------- Jacobians

def _check_vec(theta, name: str) -> torch.Tensor:
    if not isinstance(theta, torch.Tensor) or theta.dim() == 0 or not theta.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of shape [..., d]")
    return check_finite_tensor(theta, name)


def _as_tensor(u, name: str, like: torch.Tensor) -> torch.Tensor:
    if u is None or isinstance(u, (str, bytes)):
        raise TypeError(f"{name} must be a tensor (or a sequence of numbers), got {u!r}")
    try:
        u = torch.as_tensor(u, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a tensor (or a sequence of numbers): {err}") from None
    return check_finite_tensor(u, name)


def _as_dir(u, name: str, like: torch.Tensor) -> torch.Tensor:
    u = _as_tensor(u, name, like)
    if u.dim() == 0:
        raise ValueError(f"{name} must be a vector of length d, got a scalar")
    return u


def jacobian(field: Field, theta: torch.Tensor) -> torch.Tensor:
    """``J[..., i, j] = ∂G_i/∂θ_j`` at every point of ``theta`` (shape ``[..., d]``), by autograd.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    ``field`` must act pointwise on the leading dimensions (``G(θ)[b]`` depends on
    ``θ[b]`` only — true for every field of the lab). The batch is then one
    call of ``torch.func.jacrev`` on ``θ ↦ Σ_b G(θ_b)``: ``d`` backward passes
    for the whole batch, with no ``vmap`` around the field, so fields that
    validate their inputs with Python control flow (``dpclip_lab.clip`` does)
    work unchanged. (``jacfwd`` would run the field under ``vmap``, where that
    validation is data-dependent control flow and is refused.)

    Returns
    -------
    Tensor[..., d, d]
        For a gradient field (``field = ∇f``) this is the Hessian of ``f`` and is symmetric.
    """
    _check_vec(theta, "theta")
    lead, d = theta.shape[:-1], theta.shape[-1]
    flat = theta.detach().reshape(-1, d)

    def summed(t):
        out = field(t)
        if out.shape != t.shape:
            raise ValueError(f"field must map [..., d] to [..., d]; got {tuple(t.shape)} -> "
                             f"{tuple(out.shape)}")
        return out.sum(0)

    J = torch.func.jacrev(summed)(flat)          # [d_out, B, d_in]
    return J.permute(1, 0, 2).reshape(*lead, d, d)


def asymmetry(J: torch.Tensor, *, atol: float | None = None) -> torch.Tensor:
    """``||J − Jᵀ||_F / ||J||_F`` over the last two dimensions.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    Zero exactly when ``J`` is symmetric: a necessary condition (Schwarz) for the
    field to be a gradient field on an open set. Song et al. (2021), App. B.4,
    step 2: for the clipped softmax field it is non-zero on the clipped region
    except on the set where the wrong-class logits are all equal.

    Parameters
    ----------
    J : Tensor[..., d, d]
    atol : float, optional
        Where ``||J||_F <= atol`` the field is locally constant (for example a
        single binary example in its clipped region, where the clipped gradient
        is ``C`` times a fixed unit vector) and the ratio would only measure
        rounding noise; 0 is returned there. Default ``100 · eps(dtype)``
        (``2.2e-14`` in float64), which assumes Jacobian entries of order one.
    """
    if not isinstance(J, torch.Tensor) or J.dim() < 2 or J.shape[-1] != J.shape[-2]:
        raise ValueError("J must be a tensor of square matrices [..., d, d]")
    check_finite_tensor(J, "J")
    if atol is None:
        atol = 100 * torch.finfo(J.dtype).eps
    else:
        atol = check_nonnegative(atol, "atol")
    num = torch.linalg.matrix_norm(J - J.transpose(-1, -2))
    den = torch.linalg.matrix_norm(J)
    big = den > atol
    return torch.where(big, num / torch.where(big, den, torch.ones_like(den)), torch.zeros_like(den))


def planar_curl(field: Field, theta: torch.Tensor, u, v) -> torch.Tensor:
    """The curl of ``field`` in the plane spanned by ``u, v``: ``vᵀ(J − Jᵀ)u`` at each point.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    For orthonormal ``u, v`` this is the circulation per unit area of small
    loops in that plane (Green's theorem): :func:`circulation` of a circle of
    radius ``r`` is ``≈ π r² · planar_curl``. Shape ``theta.shape[:-1]``.
    """
    J = jacobian(field, theta)
    u, v = _as_dir(u, "u", theta), _as_dir(v, "v", theta)
    A = J - J.transpose(-1, -2)
    return torch.einsum("...i,...ij,...j->...", v.expand_as(theta), A, u.expand_as(theta))


# ------------------------------------------------------------------------- line integrals

def circulation(field: Field, center: torch.Tensor, u, v, radius, *, n_points: int = 1024) -> torch.Tensor:
    """``∮ G·dθ`` around the loop ``θ(φ) = center + r (cos φ · u + sin φ · v)``, ``φ ∈ [0, 2π)``.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    Counter-clockwise in the ``(u, v)`` plane (for orthonormal ``u, v`` a circle
    of radius ``r``). Computed with the trapezoid rule on the periodic
    integrand ``G(θ(φ))·θ'(φ)``: spectrally accurate for a smooth field; where
    the loop crosses the clipping boundary the integrand has a kink and the
    error falls as ``n_points⁻²`` (``n_points = 1024`` gives about 1e-6 relative).

    A gradient field has zero circulation around every loop (its line integral
    only depends on the end points), so a non-zero value proves that no
    potential exists — the statement of Song et al. Thm 3.3 and B.5.

    Parameters
    ----------
    field : callable
        ``[..., d] -> [..., d]``, pointwise in the leading dims.
    center : Tensor[..., d]
    u, v : Tensor[d] (or broadcasting against ``center``)
    radius : float or Tensor broadcasting against ``center.shape[:-1]``
        One call can sweep radii: ``radius=torch.tensor([0.1, 0.5, 1.0])`` with
        ``center`` of shape ``[d]`` returns three circulations.
    n_points : int
        Number of equally spaced nodes (>= 8).

    Returns
    -------
    Tensor
        Of shape ``broadcast(center.shape[:-1], radius.shape)``.
    """
    _check_vec(center, "center")
    n = check_int(n_points, "n_points", minimum=8)
    u, v = _as_dir(u, "u", center), _as_dir(v, "v", center)
    r = torch.as_tensor(radius, dtype=center.dtype, device=center.device)
    if not bool(torch.isfinite(r).all()) or bool((r < 0).any()):
        raise ValueError("radius must be finite and >= 0")
    phi = torch.arange(n, dtype=center.dtype, device=center.device) * (2 * torch.pi / n)
    cos, sin = torch.cos(phi)[:, None], torch.sin(phi)[:, None]
    lead = torch.broadcast_shapes(center.shape[:-1], r.shape)
    r_ = r.expand(lead)[..., None, None]                               # [..., 1, 1]
    c_ = center.expand(*lead, center.shape[-1]).unsqueeze(-2)          # [..., 1, d]
    pts = c_ + r_ * (cos * u + sin * v)                                # [..., n, d]
    tangent = r_ * (-sin * u + cos * v)
    return (field(pts) * tangent).sum(-1).sum(-1) * (2 * torch.pi / n)


def line_integral(field: Field, vertices: torch.Tensor, *, n_nodes: int = 16, pieces: int = 64) -> torch.Tensor:
    """``∫ G·dθ`` along the polyline through ``vertices`` (shape ``[..., m, d]``, ``m >= 2``).

    Source: Song, Thakkar & Thakurta (2021), Thm 3.3 (§3.2: the clipped softmax field is not the gradient of any function).

    Each segment is cut into ``pieces`` equal parts, each integrated with
    ``n_nodes``-point Gauss–Legendre (exact for polynomial integrands of degree
    ``2·n_nodes − 1``, spectrally accurate for a smooth field). Where the path
    crosses the clipping boundary the integrand has a kink; the error of the
    piece holding it then falls only like ``pieces⁻²`` (the defaults give
    about 1e-5 absolute there; raise ``pieces`` for more).
    For a gradient field ``∇f`` the result is ``f(end) − f(start)`` whatever
    the path; two paths with the same end points that give different values
    prove that the field has no potential.

    Returns
    -------
    Tensor
        Of shape ``vertices.shape[:-2]``.
    """
    if not isinstance(vertices, torch.Tensor) or vertices.dim() < 2 or vertices.shape[-2] < 2 \
            or not vertices.is_floating_point():
        raise ValueError("vertices must be a floating-point tensor [..., m, d] with m >= 2 points")
    check_finite_tensor(vertices, "vertices")
    q = check_int(n_nodes, "n_nodes", minimum=1)
    P = check_int(pieces, "pieces", minimum=1)
    x, w = np.polynomial.legendre.leggauss(q)
    x = torch.as_tensor(x, dtype=vertices.dtype, device=vertices.device)
    w = torch.as_tensor(w, dtype=vertices.dtype, device=vertices.device)
    # nodes in [0, 1] for P pieces: piece j covers [j/P, (j+1)/P]
    tau = ((torch.arange(P, dtype=vertices.dtype, device=vertices.device)[:, None] + (x + 1) / 2) / P).reshape(-1)
    wt = (w / (2 * P)).repeat(P)                                       # weights sum to 1
    a, b = vertices[..., :-1, :], vertices[..., 1:, :]                 # [..., m-1, d]
    delta = b - a
    pts = a.unsqueeze(-2) + tau[:, None] * delta.unsqueeze(-2)         # [..., m-1, qP, d]
    vals = (field(pts) * delta.unsqueeze(-2)).sum(-1)                  # [..., m-1, qP]
    return (vals * wt).sum(-1).sum(-1)
