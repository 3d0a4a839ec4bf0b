"""Problems with per-example gradients in closed form.

:class:`GLProblem` is a generalized linear problem (Song, Thakkar, Thakurta 2021,
§2): ``L(θ) = (1/n) Σ_i f(⟨θ, x_i⟩; y_i)``. The gradient of example i is
``f'(⟨θ, x_i⟩; y_i) · x_i`` — a scalar *coefficient* times the feature vector —
so per-example gradients, and their clipped mean, cost O(np) with no autograd.

:class:`MeanEstimation` is ``L(θ) = (1/n) Σ_i ½||θ − z_i||²`` (Chen, Wu, Hong 2020,
§5 and Fig. 5), whose per-example gradients ``θ − z_i`` are not rank one.

Both expose the same interface, which the algorithms use:

* ``grad_fn(theta, idx)``: per-example gradients of examples ``idx`` at ``theta``;
* ``objective(theta)``, ``grad(theta)``, ``per_example_grads(theta, idx=None)``;
* ``clipped_grad(theta, clip_norm)``: the mean of clipped per-example gradients.

Every method is batched: ``theta`` may have any leading shape ``[..., p]`` (for
example ``[runs, p]`` for a sweep over clipping norms and seeds) and results keep
it. Device and dtype follow ``X``.
"""
from __future__ import annotations

import torch

from ._validation import as_clip_norm, check_finite_tensor, check_nonnegative
from .clipping import clip, safe_norm
from .huberization import huberized_derivative, huberized_value
from .losses import Loss

__all__ = ["GLProblem", "MeanEstimation"]


def _check_theta(theta: torch.Tensor, p: int, like: torch.Tensor | None = None) -> torch.Tensor:
    if not isinstance(theta, torch.Tensor):
        raise TypeError(f"theta must be a torch.Tensor of shape [..., {p}], got {type(theta).__name__}")
    if theta.dim() == 0 or theta.shape[-1] != p:
        raise ValueError(f"theta must have shape [..., {p}] (p = {p} features), "
                         f"got {tuple(theta.shape)}")
    if like is not None and (theta.dtype != like.dtype or theta.device != like.device):
        raise TypeError(f"theta must have the problem's dtype and device ({like.dtype}, {like.device}), got "
                        f"({theta.dtype}, {theta.device}); convert one of them (e.g. theta.to(X))")
    return check_finite_tensor(theta, "theta")


def _clip_norm_per_run(clip_norm, like: torch.Tensor) -> torch.Tensor:
    """A clip norm broadcasting over theta's leading dims, with a trailing axis for examples."""
    c = as_clip_norm(clip_norm, like)
    return c.unsqueeze(-1) if c.dim() else c


def _check_idx(idx, n: int, device) -> torch.Tensor:
    idx = torch.as_tensor(idx, device=device)
    if idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"idx must hold integer example indices, got dtype {idx.dtype}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(f"idx must lie in [0, {n - 1}] (n = {n} examples)")
    return idx.long()


class GLProblem:
    """A generalized linear problem ``L(θ) = (1/n) Σ f(⟨θ, x_i⟩; y_i)``.

    Parameters
    ----------
    X : Tensor[n, p]
        Features (rows are examples). Append a column of ones for an intercept.
    y : Tensor[n]
        Responses / labels (``{−1, +1}`` for the classification losses).
    loss : :class:`dpclip_lab.losses.Loss`
        The scalar loss ``f(z; y)``.

    References
    ----------
    Song, Thakkar, Thakurta (2021), §2 (generalized linear problems) and
    Lemma 3.1 (the clipped objective, :meth:`clipped_objective`).
    """

    def __init__(self, X: torch.Tensor, y: torch.Tensor, loss: Loss):
        if not isinstance(X, torch.Tensor) or X.dim() != 2:
            raise ValueError(f"X must be a 2-D tensor [n, p], got "
                             f"{tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__}")
        if not X.is_floating_point():
            raise TypeError(f"X must be a floating-point tensor, got {X.dtype}")
        y = torch.as_tensor(y, dtype=X.dtype, device=X.device)
        if y.shape != X.shape[:1]:
            raise ValueError(f"y must have shape [{X.shape[0]}] to match X of shape "
                             f"{tuple(X.shape)}, got {tuple(y.shape)}")
        if X.shape[0] == 0:
            raise ValueError(f"X must hold at least one example (n >= 1), got shape {tuple(X.shape)}")
        if X.shape[1] == 0:
            raise ValueError("X must have at least one feature column (p >= 1), got shape "
                             f"{tuple(X.shape)}")
        if not isinstance(loss, Loss):
            raise TypeError(f"loss must be a dpclip_lab.losses.Loss, got {type(loss).__name__}")
        check_finite_tensor(X, "X")
        check_finite_tensor(y, "y")
        loss.check_labels(y)
        self.X, self.y, self.loss = X, y, loss
        self.n, self.p = X.shape
        self.feature_norms = safe_norm(X)

    def __repr__(self) -> str:
        return f"GLProblem(n={self.n}, p={self.p}, loss={self.loss!r})"

    # -- margins and coefficients -------------------------------------------------
    def _rows(self, idx):
        if idx is None:
            return self.X, self.y
        idx = _check_idx(idx, self.n, self.X.device)
        return self.X[idx], self.y[idx]

    def margins(self, theta: torch.Tensor, idx=None) -> torch.Tensor:
        """``z_i = ⟨θ, x_i⟩``: shape ``[..., n]`` (or ``[..., len(idx)]``)."""
        _check_theta(theta, self.p, self.X if idx is None or torch.as_tensor(idx).dim() <= 1 else None)
        X, _ = self._rows(idx)
        if X.dim() == 2:  # a matmul: theta must have X's dtype (gathered rows below promote instead)
            return theta @ X.T
        return (X * theta.unsqueeze(-2)).sum(-1)  # idx with leading dims: X is [..., b, p]

    def coefficients(self, theta: torch.Tensor, idx=None) -> torch.Tensor:
        """``f'(⟨θ, x_i⟩; y_i)``: per-example gradient = coefficient × ``x_i``."""
        _, y = self._rows(idx)
        return self.loss.derivative(self.margins(theta, idx), y)

    # -- objective and gradients ----------------------------------------------------
    def objective(self, theta: torch.Tensor) -> torch.Tensor:
        """``L(θ) = (1/n) Σ f(⟨θ, x_i⟩; y_i)``, shape ``theta.shape[:-1]``."""
        return self.loss.value(self.margins(theta), self.y).mean(-1)

    def grad(self, theta: torch.Tensor) -> torch.Tensor:
        """The full-batch gradient ``∇L(θ)``, shape ``[..., p]``."""
        return self.coefficients(theta) @ self.X / self.n

    def per_example_grads(self, theta: torch.Tensor, idx=None) -> torch.Tensor:
        """Per-example gradients ``[..., n or len(idx), p]`` (materialized; O(np) memory)."""
        X, _ = self._rows(idx)
        return self.coefficients(theta, idx).unsqueeze(-1) * X

    def grad_fn(self, theta: torch.Tensor, idx) -> torch.Tensor:
        """The per-example gradient oracle ``(theta, idx) -> [..., len(idx), p]``."""
        return self.per_example_grads(theta, idx)

    # -- clipping -------------------------------------------------------------------
    def clipped_coefficients(self, theta: torch.Tensor, clip_norm, idx=None) -> torch.Tensor:
        """Coefficients after per-example clipping: ``clamp(f'_i, −C/||x_i||, C/||x_i||)``."""
        coef = self.coefficients(theta, idx)
        norms = self.feature_norms if idx is None else self.feature_norms[_check_idx(idx, self.n, self.X.device)]
        c = _clip_norm_per_run(clip_norm, coef)
        return coef * (c / torch.maximum(coef.abs() * norms, c))

    def clipped_grad(self, theta: torch.Tensor, clip_norm) -> torch.Tensor:
        """Mean of per-example gradients clipped to ``clip_norm``, in O(np).

        ``clip_norm`` may be a tensor broadcasting over ``theta``'s leading dims
        (one norm per run). Equals ``clip(per_example_grads(θ), C).mean(-2)``.
        """
        return self.clipped_coefficients(theta, clip_norm) @ self.X / self.n

    def clipped_objective(self, theta: torch.Tensor, clip_norm) -> torch.Tensor:
        """``L_clipped^(C)(θ)`` of Song et al. Lemma 3.1: the objective clipped GD minimizes.

        Each example's loss is Huberized with derivative bound ``C / ||x_i||``;
        its gradient is exactly the clipped per-example gradient.
        """
        z = self.margins(theta)
        c = _clip_norm_per_run(clip_norm, z) / self.feature_norms
        return huberized_value(self.loss, z, self.y, c).mean(-1)

    def clipped_objective_grad(self, theta: torch.Tensor, clip_norm) -> torch.Tensor:
        """Gradient of :meth:`clipped_objective` via Lemma 3.1's clipped derivative."""
        z = self.margins(theta)
        c = _clip_norm_per_run(clip_norm, z) / self.feature_norms
        return huberized_derivative(self.loss, z, self.y, c) @ self.X / self.n

    def feature_basis(self, tol: float = 1e-10) -> torch.Tensor:
        """Orthonormal basis ``[rank, p]`` of the span of the features.

        The projector of Song et al. Thm 4.1 is ``M = Bᵀ B`` for this ``B``: the
        projector onto the eigenspace of ``Σ x_i x_iᵀ`` with nonzero eigenvalues.
        Computed from the n×n Gram matrix, so ``p = 10^5`` is cheap when n is small.
        """
        tol = check_nonnegative(tol, "tol")
        gram = self.X @ self.X.T
        evals, evecs = torch.linalg.eigh(gram)
        # Relative cut-off no finer than the dtype's rounding of an n×n eigenproblem: in float32,
        # tol = 1e-10 would count rounding noise (~1e-7 relative) as extra directions (rank > p).
        fi = torch.finfo(self.X.dtype)
        cut = max(float(tol), 10.0 * max(self.n, self.p) * fi.eps)
        keep = evals > cut * evals.max().clamp_min(fi.tiny)
        basis = (evecs[:, keep] / evals[keep].sqrt()).T @ self.X
        return basis

    @property
    def rank(self) -> int:
        """``rank(M)``: the dimension of the span of the features (Song et al. Thm 4.1)."""
        return int(self.feature_basis().shape[0])

    def seminorm(self, theta: torch.Tensor) -> torch.Tensor:
        """``||θ||_M = ||Mθ||_2``, the seminorm of Song et al. Thm 4.1 (``[...]``)."""
        _check_theta(theta, self.p, self.X)
        return torch.linalg.vector_norm(theta @ self.feature_basis().T, dim=-1)

    @property
    def lipschitz(self) -> float:
        """``sup|f'| · max_i ||x_i||``: a bound on every per-example gradient norm *of this data set*.

        A statistic of the (private) training rows: fine for analysis and plots,
        not for calibrating a private mechanism (use a stated domain bound, as
        :meth:`holder` does with ``feature_bound``).
        """
        return float(self.loss.lipschitz) * float(self.feature_norms.max())

    def check_domain(self, feature_bound, label_bound=None) -> tuple[float, float | None]:
        """Check the rows against a stated data-domain bound; return ``(feature_bound, label_bound)``.

        A privacy calibration needs a supremum over the data *domain* — a bound the
        user states before seeing the data — never a statistic of the private set.
        Raises ``ValueError`` if a training row has ``||x_i|| > feature_bound`` (or
        ``|y_i| > label_bound``): the stated domain does not hold the data (clip or
        rescale the features first). ``label_bound`` is needed only by losses whose
        labels are not ±1 (regression), where ``|f'(0; y)|`` grows with ``|y|``.
        """
        from ._validation import check_positive
        if feature_bound is None:
            raise ValueError("feature_bound is required: state a bound on ||x|| over the data domain "
                             "(e.g. 1.0 for the lab's unit-norm data sets); a privacy calibration must not "
                             "read it from the private rows")
        R = check_positive(feature_bound, "feature_bound")
        # slack: the dtype's rounding only (a unit-norm row stored in float32 has norm 1 ± 1e-7)
        rtol = max(1e-9, 8 * torch.finfo(self.X.dtype).eps)
        if float(self.feature_norms.max()) > R * (1 + rtol):
            raise ValueError(f"feature_bound={R:g} is violated: some training rows have ||x|| > feature_bound; "
                             "clip or rescale the features to the stated domain first")
        if self.loss.needs_pm1_labels:
            return R, None
        if label_bound is None:
            raise ValueError(f"label_bound is required for {self.loss!r}: its |f'(0; y)| grows with |y|, so "
                             "state a bound on |y| over the data domain")
        Y = check_positive(label_bound, "label_bound")
        if float(self.y.abs().max()) > Y * (1 + rtol):
            raise ValueError(f"label_bound={Y:g} is violated: some training labels have |y| > label_bound")
        return R, Y

    def _domain_labels(self, label_bound) -> torch.Tensor:
        """Labels at which ``|f'(0; y)|`` and ``f(0; y)`` attain their sup over the domain.

        ±1 for classification losses; ``±label_bound`` for the lab's regression
        losses, whose ``|f'(0; y)|`` and ``f(0; y)`` grow with ``|y|``.
        """
        ys = [-1.0, 1.0] if label_bound is None else [-float(label_bound), float(label_bound)]
        return torch.tensor(ys, dtype=self.X.dtype, device=self.X.device)

    def holder(self, radius: float | None = None, *, feature_bound=None, label_bound=None):
        """Hölder constants ``(α, L, M)`` of ``θ ↦ f(⟨θ, x⟩; y)`` over the data domain (Wang et al. eq. (1), Lemma 1).

        ``L = L_f · R_x^{1+α}`` bounds ``||∂ℓ(θ) − ∂ℓ(θ')|| / ||θ − θ'||^α`` and
        ``M = sup_y |f'(0; y)| · R_x`` bounds the gradient norm at 0, for every
        ``(x, y)`` with ``||x|| ≤ R_x = feature_bound`` (and ``|y| ≤ label_bound``
        for regression losses). Both are suprema over the *domain*, as the
        sensitivity of Alg. 1 / Alg. 2 needs — not maxima over the training rows,
        which would make the noise level itself a function of the private data.
        The rows are checked against the bounds (:meth:`check_domain`).
        ``radius`` is accepted for symmetry with the algorithms and unused here.
        """
        R, Y = self.check_domain(feature_bound, label_bound)
        a = float(self.loss.holder_alpha)
        L = float(self.loss.holder_constant) * R ** (1.0 + a)
        ys = self._domain_labels(Y)
        M = float(self.loss.derivative(torch.zeros_like(ys), ys).abs().max()) * R
        return a, L, M

    def sup_loss_at_zero(self, *, label_bound=None) -> float:
        """``sup_y f(0; y)`` over the label domain (±1, or ``|y| ≤ label_bound``): Wang et al. eq. (2)'s ``sup ℓ(0; z)``."""
        if not self.loss.needs_pm1_labels:
            from ._validation import check_positive
            if label_bound is None:
                raise ValueError(f"label_bound is required for {self.loss!r}: ℓ(0; y) grows with |y|")
            label_bound = check_positive(label_bound, "label_bound")
        else:
            label_bound = None
        ys = self._domain_labels(label_bound)
        return float(self.loss.value(torch.zeros_like(ys), ys).max())


class MeanEstimation:
    """``L(θ) = (1/n) Σ ½||θ − z_i||²``: per-example gradients ``θ − z_i``.

    The high-dimensional example of Chen, Wu, Hong (2020), §5 (Fig. 5): points
    from a 3-component Gaussian mixture, where clipping biases the fixed point
    and pre-clipping noise removes the bias. The minimizer is the mean of ``z``.
    """

    def __init__(self, Z: torch.Tensor):
        if not isinstance(Z, torch.Tensor) or Z.dim() != 2 or not Z.is_floating_point():
            raise ValueError("Z must be a floating-point tensor of shape [n, p]")
        if Z.shape[0] == 0 or Z.shape[1] == 0:
            raise ValueError(f"Z must hold at least one point of at least one coordinate (n, p >= 1), "
                             f"got shape {tuple(Z.shape)}")
        check_finite_tensor(Z, "Z")
        self.Z = Z
        self.n, self.p = Z.shape

    def __repr__(self) -> str:
        return f"MeanEstimation(n={self.n}, p={self.p})"

    def objective(self, theta):
        _check_theta(theta, self.p)
        d = theta.unsqueeze(-2) - self.Z
        return 0.5 * (d ** 2).sum(-1).mean(-1)

    def grad(self, theta):
        _check_theta(theta, self.p)
        return theta - self.Z.mean(0)

    def per_example_grads(self, theta, idx=None):
        _check_theta(theta, self.p)
        Z = self.Z if idx is None else self.Z[_check_idx(idx, self.n, self.Z.device)]
        return theta.unsqueeze(-2) - Z

    def grad_fn(self, theta, idx):
        return self.per_example_grads(theta, idx)

    def clipped_grad(self, theta, clip_norm):
        c = as_clip_norm(clip_norm, self.Z)
        return clip(self.per_example_grads(theta), c.unsqueeze(-1) if c.dim() else c).mean(-2)

    @property
    def minimizer(self):
        return self.Z.mean(0)
