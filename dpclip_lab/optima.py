"""Exact optima with cvxpy, to measure excess risk honestly.

:func:`minimize` solves a convex generalized linear problem — or its clipped
(Huberized) version of Song, Thakkar, Thakurta (2021) Lemma 3.1 — to solver
precision. The Huberized loss is written as the infimal convolution
``g(z) = min_u f(u) + c·|z − u|`` with ``c = C/||x||``, which is exactly the
``g_x`` of Lemma 3.1 and is DCP-representable for every convex loss here.
"""
from __future__ import annotations

import numpy as np
import torch

from ._validation import check_positive
from .glp import GLProblem
from .losses import Huber, Logistic, QHinge, QNormRegression, Squared

__all__ = ["minimize", "is_separable", "InaccurateSolutionWarning"]


def _cvx_loss(loss, z, y):
    import cvxpy as cp

    if isinstance(loss, Logistic):
        return cp.logistic(-cp.multiply(y, z))
    if isinstance(loss, Squared):
        return loss.scale * cp.square(z - y)
    if isinstance(loss, QNormRegression):
        r = cp.abs(z - y)
        return r if loss.q == 1.0 else cp.power(r, loss.q)
    if isinstance(loss, QHinge):
        m = cp.pos(1 - cp.multiply(y, z))
        return m if loss.q == 1.0 else cp.power(m, loss.q)
    if isinstance(loss, Huber):  # cvxpy's huber is 2x ours
        return 0.5 * cp.huber(z - y, loss.delta)
    raise TypeError(f"no cvxpy form for {loss!r} (exact optima need a convex loss of dpclip_lab.losses)")


def minimize(problem: GLProblem, *, clip_norm=None, radius=None, solver=None) -> torch.Tensor:
    """The exact minimizer of a convex GLP, optionally clipped and constrained.

    Source: Song, Thakkar & Thakurta (2021), Lemma 3.1 (the clipped problem is the Huberized one).

    Parameters
    ----------
    problem : GLProblem
        A generalized linear problem with a convex loss.
    clip_norm : float, optional
        If given, minimize the clipped objective ``L_clipped^(C)`` of Lemma 3.1
        (what noise-free clipped gradient descent converges to) instead of ``L``.
    radius : float, optional
        Constrain ``||θ||_2 ≤ radius`` (the projection set of Song et al. Alg. 1).
    solver : str, optional
        A cvxpy solver name (default: cvxpy's choice; Clarabel here).

    Returns
    -------
    Tensor[p]
        On the problem's device and dtype. The minimizer may be non-unique
        (e.g. Chen et al. Example 2 clipped); then cvxpy returns one of them. When
        ``p > n`` the problem is solved in the span of the features (the loss only
        sees ``Mθ``, and projecting onto the span never increases ``||θ||``), so the
        answer is the minimizer of smallest norm and ``p = 10^5`` costs no more than
        ``p = rank``.
    """
    if not isinstance(problem, GLProblem):
        raise TypeError("minimize needs a GLProblem")
    if problem.p > problem.n:
        B = problem.feature_basis()                       # [rank, p]
        reduced = GLProblem(problem.X @ B.T, problem.y, problem.loss)
        return minimize(reduced, clip_norm=clip_norm, radius=radius, solver=solver) @ B
    return _minimize_dense(problem, clip_norm=clip_norm, radius=radius, solver=solver)


def is_separable(problem: GLProblem) -> bool:
    """Lab utility: Whether some θ classifies every example with margin: ``y_i ⟨θ, x_i⟩ ≥ 1`` for all i (an LP).

    On separable data the logistic loss has no minimizer (its infimum 0 is
    approached as ``||θ|| → ∞``), and neither has its Huberized version.
    """
    import cvxpy as cp

    X = problem.X.detach().cpu().double().numpy()
    y = problem.y.detach().cpu().double().numpy()
    theta = cp.Variable(problem.p)
    lp = cp.Problem(cp.Minimize(0), [cp.multiply(y, X @ theta) >= 1])
    lp.solve()
    return lp.status == "optimal"


#: Solvers tried, in order, when cvxpy's default stops at "optimal_inaccurate": Clarabel with less
#: static regularization (its default 1e-8 on top of a tiny-curvature problem is what stalls it),
#: then SCS at high accuracy.
ACCURATE_RETRIES = (("CLARABEL", dict(static_regularization_constant=1e-7, max_iter=1000)),
                    ("SCS", dict(eps=1e-10, max_iters=200_000)))


class InaccurateSolutionWarning(UserWarning):
    """Lab utility: no solver reached cvxpy's "optimal" status; the optimum returned is approximate."""


def _solve(prob, solver):
    """Solve to cvxpy's "optimal" status where a solver can: the default first, then :data:`ACCURATE_RETRIES`.

    cvxpy's own "Solution may be inaccurate" warning is not shown for an attempt that a retry replaces;
    if none reaches "optimal", one :class:`InaccurateSolutionWarning` says so.
    """
    import warnings

    import cvxpy as cp

    if solver is not None:
        return prob.solve(solver=solver)
    attempts = ((None, {}),) + ACCURATE_RETRIES
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Solution may be inaccurate", category=UserWarning)
        for name, kwargs in attempts:
            try:
                prob.solve(**kwargs) if name is None else prob.solve(solver=getattr(cp, name), **kwargs)
            except cp.error.SolverError:       # rare numerical failure: the next solver
                continue
            if prob.status == "optimal":
                return prob.value
    if prob.status == "optimal_inaccurate":
        warnings.warn("no solver reached cvxpy's 'optimal' status (tried the default, then "
                      f"{', '.join(n for n, _ in ACCURATE_RETRIES)}); the optimum is approximate",
                      InaccurateSolutionWarning, stacklevel=4)
    return prob.value


def _minimize_dense(problem, *, clip_norm, radius, solver):
    import cvxpy as cp

    if radius is None and isinstance(problem.loss, Logistic) and is_separable(problem):
        raise ValueError(f"the data are linearly separable, so {problem.loss!r} has no minimizer "
                         "(the loss tends to 0 as ||θ|| grows); pass radius= to constrain θ to a ball, "
                         "as the constraint set of Song et al. Alg. 1 does")
    X = problem.X.detach().cpu().double().numpy()
    y = problem.y.detach().cpu().double().numpy()
    theta = cp.Variable(problem.p)
    z = X @ theta
    if clip_norm is None:
        terms = _cvx_loss(problem.loss, z, y)
    else:
        C = check_positive(clip_norm, "clip_norm")
        c = C / np.maximum(problem.feature_norms.detach().cpu().double().numpy(), 1e-300)
        u = cp.Variable(problem.n)
        terms = _cvx_loss(problem.loss, u, y) + cp.multiply(c, cp.abs(z - u))
    constraints = [] if radius is None else [cp.norm(theta, 2) <= check_positive(radius, "radius")]
    prob = cp.Problem(cp.Minimize(cp.sum(terms) / problem.n), constraints)
    _solve(prob, solver)
    if prob.status not in ("optimal", "optimal_inaccurate") or theta.value is None:
        raise RuntimeError(f"cvxpy could not solve the problem (status {prob.status!r}); "
                           "the objective may be unbounded below (e.g. separable data without a constraint)")
    return torch.as_tensor(theta.value, dtype=problem.X.dtype, device=problem.X.device)
