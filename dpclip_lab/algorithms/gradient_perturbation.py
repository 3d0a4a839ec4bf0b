"""DP-SGD with gradient perturbation for α-Hölder smooth losses (Wang, Lei, Ying, Zhang, Alg. 2).

One uniformly drawn example per step, Gaussian noise on its gradient, projection
onto ``B(0, R)``, averaged output. On the ball every gradient has norm at most
``G = M + L R^α``, so the lab runs it as DP-SGD with ``batch_size=1``,
``sampling="with_replacement"``, clip norm ``G`` (a no-op when the Hölder
constants are right, and a guarantee of the privacy claim when they are not)
and noise multiplier ``z = σ / G``.

Noise calibration (Thm 11 and Remark 4): with
``λ = log(1/δ)/((1−β)ε) + 1`` and ``σ² = 14 G² T λ / (β n² ε)``, the run is
(ε, δ)-DP if ``σ²/(4G²) ≥ 0.67`` and
``λ − 1 ≤ σ²/(6G²) · log(n / (λ (1 + σ²/(4G²))))``. Remark 4 searches β ∈ (0, 1)
for feasible values and takes the one closest to 1/2 (smallest σ);
:func:`gradient_noise_std` does that on a grid. The closed forms and the search
live in :mod:`dpclip_lab.accountants.paper_bounds` (``wang_thm11_sigma``,
``wang_thm11_conditions``, ``wang_remark4_beta``); this module only adapts their
names to the algorithm's keyword conventions.

Privacy record: ``SelfComposedEvent(SampledWithoutReplacementEvent(n, 1,
GaussianEvent(σ / (2G))), T)`` — replace-one neighbours, sensitivity ``2G``, the
setting of Wang et al.'s Lemma 3 (an accountant may certify a smaller ε than
the paper's). The paper's own (ε, δ) is in ``extra["paper_epsilon"]``.
"""
from __future__ import annotations

from .._validation import check_int, check_open_unit, check_positive
from ..accountants.paper_bounds import wang_remark4_beta, wang_thm11_conditions, wang_thm11_sigma
from .dp_sgd import check_n, dp_sgd
from .loop import DPResult
from .output_perturbation import holder_constants
from .updates import project_l2_ball

__all__ = ["dp_sgd_gradient_perturbation", "gradient_noise_std", "thm11_conditions"]


def thm11_conditions(beta, *, epsilon, delta, steps, n, gradient_bound):
    """σ and whether Thm 11's two RDP conditions hold at ``beta`` (Wang et al.).

    Source: Wang, Lei, Ying & Zhang (2022), Thm 11, conditions (32)–(33).

    ``(paper_bounds.wang_thm11_sigma(...), paper_bounds.wang_thm11_conditions(...))``
    with the algorithm's keyword names.
    """
    sigma = wang_thm11_sigma(gradient_bound, steps, n, epsilon, delta, beta)
    return sigma, wang_thm11_conditions(sigma, gradient_bound, n, epsilon, delta, beta)


def gradient_noise_std(*, epsilon, delta, steps, n, gradient_bound, grid: int = 9999):
    """Remark 4: the feasible β closest to 1/2 on a grid of (0, 1), and its σ.

    Source: Wang, Lei, Ying & Zhang (2022), Remark 4 and Thm 11.

    Returns ``(sigma, beta)`` — :func:`dpclip_lab.accountants.paper_bounds.wang_remark4_beta`
    (which returns ``(beta, sigma)``) with the algorithm's keyword names. Raises
    ValueError if no β on the grid satisfies Thm 11 (Lemma 13 gives a sufficient
    condition on ε for T = n, δ = 1/n²).
    """
    e = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    G = check_positive(gradient_bound, "gradient_bound")
    beta, sigma = wang_remark4_beta(G, T, n, e, d, grid=grid)
    return sigma, beta


def dp_sgd_gradient_perturbation(grad_fn, theta0, *, n, steps, lr, epsilon, delta, radius, holder=None,
                                 feature_bound=None, label_bound=None, seed=None, keep_iterates=True,
                                 progress=None) -> DPResult:
    """DP-SGD-Gradient (Wang, Lei, Ying, Zhang, Alg. 2; Thm 11, Remark 4).

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 2, Thm 11 and Remark 4.

    Parameters
    ----------
    grad_fn : callable or GLProblem
    theta0 : Tensor[p] or Tensor[R, p]
        ``w_1`` (the paper: 0).
    n, steps, lr
        n, T, η.
    epsilon, delta : float
        Target (ε, δ); σ and β come from :func:`gradient_noise_std`.
    radius : float
        R of ``W = B(0, R)`` (Alg. 2 needs a bounded domain; Remark 5).
    holder : tuple (alpha, L, M), optional
        Hölder constants over the data domain. Default: from a GLProblem and the
        stated ``feature_bound`` / ``label_bound`` (:meth:`dpclip_lab.GLProblem.holder`);
        G — and so the noise — must not be read from the private rows.
    feature_bound, label_bound : float, optional
        Stated bounds on ``||x||`` (and ``|y|`` for regression) over the data domain.
    seed : int or sequence of ints, optional
        Seed of the generator; a sequence of ``k`` seeds gives run ``r`` the stream of ``seed[r % k]``
        (as in :func:`dpclip_lab.algorithms.dp_sgd`: the runs a loop over the seeds would make).

    Returns
    -------
    DPResult
        With ``release="average"`` (``(1/T) Σ_{t=1}^T w_t`` with ``w_1 = θ_0``, as in
        the paper), ``extra`` with ``sigma``, ``beta``, ``gradient_bound`` G and
        ``paper_epsilon``, and ``noise_multiplier = σ/G``.
    """
    n = check_n(n, grad_fn)
    R = check_positive(radius, "radius")
    a, L, M, _ = holder_constants(grad_fn, holder, R, feature_bound=feature_bound, label_bound=label_bound)
    G = M + L * R ** a
    sigma, beta = gradient_noise_std(epsilon=epsilon, delta=delta, steps=steps, n=n, gradient_bound=G)
    res = dp_sgd(grad_fn, theta0, n=n, steps=steps, lr=lr, clip_norm=G, noise_multiplier=sigma / G,
                 batch_size=1, sampling="with_replacement", project=project_l2_ball(R), average=True,
                 seed=seed, keep_iterates=True, progress=progress)
    # Wang et al. average w_1..w_T (w_1 = θ_0), not θ_1..θ_T.
    start = theta0 if res.theta.dim() == theta0.dim() else theta0.expand_as(res.theta)
    res.theta = res.theta + (start - res.iterates[..., -1, :]) / steps
    if not keep_iterates:
        res.iterates = None
    res.algorithm = "DP-SGD-Gradient (Wang et al. Alg. 2)"
    res.extra.update(sigma=sigma, beta=beta, gradient_bound=G, holder=(a, L, M),
                     paper_epsilon=float(epsilon), paper_delta=float(delta))
    return res
