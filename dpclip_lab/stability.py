"""Stability, rates and gradient complexity of DP-SGD with α-Hölder losses (Wang, Lei, Ying, Zhang).

What Part III of the book measures, as batched tensor programs and closed forms:

* Hölder ratios of the q-power losses (eq. (1); :func:`holder_ratio`,
  :func:`measured_holder_constant`, :func:`glp_holder_ratio`);
* batched projected SGD on many data sets and on pairs of neighbouring data sets
  with shared sampled indices and noise (Def. 1, Def. 2, Alg. 1 and Alg. 2 line 6;
  :func:`sgd_runs`), and the two terms of the UAS bound of Thm 7
  (:func:`wang_thm7_terms`);
* the excess-risk rates of Thm 9, 10, 12 and their parameter choices
  (:func:`wang_thm9_rate`, :func:`wang_thm10_rate`, :func:`wang_thm12_rate`,
  :func:`wang_thm10_schedule`, :func:`wang_thm12_schedule`);
* Table 1 as data (:data:`WANG_TABLE1`, :func:`wang_table1`) and the smallest ε for
  which Thm 11 admits a β (:func:`wang_thm11_feasible_betas`,
  :func:`wang_thm11_smallest_epsilon`: Fig. 1 recomputed exactly, beside Lemma 13).

The q-power losses here take ``q`` as a *tensor* (one per run), so a sweep over q is one
program; they agree with :class:`dpclip_lab.losses.QHinge` and
:class:`dpclip_lab.losses.QNormRegression` (checked in the tests).

References
----------
Wang, Lei, Ying, Zhang, *Differentially private SGD with non-smooth losses*
(Applied and Computational Harmonic Analysis, 2022): eq. (1), Def. 1–2, Thm 7–12,
Remark 1, Remark 4, Lemma 13, Table 1, Fig. 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._validation import (check_finite_tensor, check_int, check_interval, check_nonnegative, check_open_unit,
                          check_positive)
from .accountants.paper_bounds import wang_remark4_betas

__all__ = [
    "FAMILIES", "q_loss_value", "q_loss_derivative", "holder_ratio", "measured_holder_constant",
    "glp_holder_ratio", "SGDRuns", "sgd_runs", "wang_thm7_terms", "empirical_risk",
    "wang_thm9_rate", "wang_thm10_rate", "wang_thm12_rate", "wang_thm9_schedule",
    "wang_thm10_schedule", "wang_thm12_schedule", "WANG_TABLE1", "wang_table1",
    "default_betas", "wang_thm11_feasible_betas", "wang_thm11_smallest_epsilon", "wang_thm11_wor_epsilon",
    "wang_thm11_accountant_sigma", "wang_remark4_choice",
]

#: The two loss families of Wang et al. §1: q-norm hinge ``(1 − y z)_+^q`` and q-norm
#: regression ``|y − z|^q``, ``q ∈ [1, 2]``, α = q − 1.
FAMILIES = ("hinge", "regression")


def _check_family(family) -> str:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return family


def _as_q(q, like: torch.Tensor) -> torch.Tensor:
    qt = torch.as_tensor(q, dtype=like.dtype, device=like.device)
    if not bool(((qt >= 1) & (qt <= 2)).all()):
        raise ValueError(f"q must lie in [1, 2], got {q!r}")
    return qt


def _check_weights(w, X, name: str) -> None:
    if not isinstance(w, torch.Tensor) or w.dim() == 0 or w.shape[-1] != X.shape[-1]:
        raise ValueError(f"{name} must be a tensor [..., p] with p = {X.shape[-1]} (columns of X), "
                         f"got shape {tuple(getattr(w, 'shape', ()))}")
    check_finite_tensor(w, name)


def _residual(family, z, y):
    # hinge: m = (1 − y z)_+ and f = m^q; regression: r = z − y and f = |r|^q
    return torch.clamp(1.0 - y * z, min=0.0) if family == "hinge" else z - y


def q_loss_value(family, z, y, q) -> torch.Tensor:
    """``f(z; y)`` of the q-norm hinge / regression loss; ``q`` broadcasts (a tensor sweeps q).

    Source: Wang, Lei, Ying & Zhang (2022), §1 (q-norm hinge and regression losses).
    """
    _check_family(family)
    q = _as_q(q, z)
    return _residual(family, z, y).abs() ** q


def q_loss_derivative(family, z, y, q) -> torch.Tensor:
    """``f'(z; y)`` with ``q`` a tensor: hinge ``−y q (1 − yz)_+^{q−1}``, regression ``q sign(r)|r|^{q−1}``.

    Source: Wang, Lei, Ying & Zhang (2022), §1 (q-norm hinge and regression losses).

    At a kink the subgradient 0 is taken (as in :mod:`dpclip_lab.losses`).
    """
    _check_family(family)
    q = _as_q(q, z)
    r = _residual(family, z, y)
    mag = torch.where(r != 0, q * r.abs() ** (q - 1.0), torch.zeros_like(r))
    return -y * mag if family == "hinge" else torch.sign(r) * mag


def holder_ratio(family, a, b, y, q, alpha=None) -> torch.Tensor:
    """``|f'(a) − f'(b)| / |a − b|^α`` elementwise (eq. (1) for the scalar loss); α defaults to q − 1.

    Source: Wang, Lei, Ying & Zhang (2022), eq. (1).

    Pairs with ``a == b`` give 0. With ``alpha=1`` this is the ratio a smooth loss keeps
    bounded and a non-smooth one does not.
    """
    a, b = torch.broadcast_tensors(torch.as_tensor(a), torch.as_tensor(b))
    check_finite_tensor(a, "a")
    check_finite_tensor(b, "b")
    y = torch.as_tensor(y, dtype=a.dtype)
    qt = _as_q(q, a)
    al = qt - 1.0 if alpha is None else torch.as_tensor(alpha, dtype=a.dtype)
    d = (a - b).abs()
    num = (q_loss_derivative(family, a, y, qt) - q_loss_derivative(family, b, y, qt)).abs()
    return torch.where(d > 0, num / d.clamp_min(torch.finfo(a.dtype).tiny) ** al, torch.zeros_like(d))


def measured_holder_constant(family, q, *, y=1.0, alpha=None, span=3.0, num=601,
                             dtype=torch.float64) -> float:
    """``sup |f'(a) − f'(b)| / |a − b|^α`` over all pairs of a grid of ``num`` margins in ``[−span, span]``.

    Source: Wang, Lei, Ying & Zhang (2022), eq. (1) (a lower bound on its constant).

    A lower bound on the Hölder constant ``L_f`` (the grid holds the pairs that attain
    it: ``(y, 0)`` for the hinge, ``(y − t, y + t)`` for regression, when they lie on the grid).
    """
    _check_family(family)
    check_positive(span, "span")
    num = check_int(num, "num", minimum=2)
    z = torch.linspace(-span, span, num, dtype=dtype)
    return float(holder_ratio(family, z[:, None], z[None, :], y, q, alpha).max())


def glp_holder_ratio(family, X, y, q, w, w_prime, alpha=None) -> torch.Tensor:
    """``max_i ‖∂ℓ(w; z_i) − ∂ℓ(w'; z_i)‖ / ‖w − w'‖^α`` for the GLP ``ℓ(w; x, y) = f(⟨w, x⟩; y)``.

    Source: Wang, Lei, Ying & Zhang (2022), eq. (1) (α-Hölder smoothness).

    ``w, w_prime`` are ``[..., p]``; the result has shape ``[...]``. Wang et al. eq. (1)
    with ``L = L_f max‖x‖^{1+α}`` (Lemma 1 of the lab's ``GLProblem.holder``).
    """
    qt = _as_q(q, X)
    al = qt - 1.0 if alpha is None else torch.as_tensor(alpha, dtype=X.dtype)
    _check_weights(w, X, "w")
    _check_weights(w_prime, X, "w_prime")
    za, zb = w @ X.T, w_prime @ X.T                               # [..., n]
    dcoef = (q_loss_derivative(family, za, y, qt) - q_loss_derivative(family, zb, y, qt)).abs()
    gap = dcoef * torch.linalg.vector_norm(X, dim=-1)               # ‖(f'(a) − f'(b)) x‖
    dist = torch.linalg.vector_norm(w - w_prime, dim=-1)
    return gap.max(-1).values / dist ** al


# --------------------------------------------------------------------------- batched SGD

@dataclass
class SGDRuns:
    """Output of :func:`sgd_runs`.

    Source: Wang, Lei, Ying & Zhang (2022), Def. 1 and Alg. 1 (the averaged iterate).

    ``average[r, k]`` is ``(1/t) Σ_{s=1}^{t} w_s`` (``w_1 = 0``) of run ``r`` at
    ``t = checkpoints[k]``; ``average_prime`` the same on the neighbouring data set
    (None without ``replace``). ``distance`` = ``‖average − average_prime‖`` ``[runs, K]``.
    """

    average: torch.Tensor
    checkpoints: list
    average_prime: torch.Tensor | None = None

    @property
    def distance(self) -> torch.Tensor:
        if self.average_prime is None:
            raise ValueError("no neighbouring runs: call sgd_runs with replace=(index, x', y')")
        return torch.linalg.vector_norm(self.average - self.average_prime, dim=-1)

    def tail_average(self, ends, starts=None) -> torch.Tensor:
        """Tail (suffix) averages ``(1/(T − s)) Σ_{s < t ≤ T} w_t`` ``[runs, K, p]``, one per ``T`` in ``ends``.

        ``starts`` (default ``T // 2`` for each ``T``: the last half of the iterates) and
        ``ends`` must be recorded checkpoints (``s = 0`` allowed: the average of Def. 1). The
        tail average is a difference of recorded prefix averages,
        ``(T·avg_T − s·avg_s) / (T − s)``, so one run to the largest ``T`` serves every horizon.
        Wang et al. (Def. 1, Alg. 1) average all iterates; the tail drops the start ``w_1 = 0``.
        """
        ends = [int(T) for T in ends]
        starts = [T // 2 for T in ends] if starts is None else [int(s) for s in starts]
        if len(starts) != len(ends):
            raise ValueError(f"starts and ends must have the same length, got {len(starts)} and {len(ends)}")
        pos = {c: k for k, c in enumerate(self.checkpoints)}
        out = []
        for T, s in zip(ends, starts):
            if not 0 <= s < T:
                raise ValueError(f"need 0 <= start < end, got start={s}, end={T}")
            missing = [c for c in (T, s) if c != 0 and c not in pos]
            if missing:
                raise ValueError(f"{missing} not among the recorded checkpoints {self.checkpoints}: "
                                 "pass them to sgd_runs(checkpoints=...)")
            head = 0.0 if s == 0 else s * self.average[:, pos[s]]
            out.append((T * self.average[:, pos[T]] - head) / (T - s))
        return torch.stack(out, 1)


def _per_run(v, runs, like, name):
    t = torch.as_tensor(v, dtype=like.dtype, device=like.device)
    if t.dim() == 0:
        t = t.expand(runs)
    if t.shape != (runs,):
        raise ValueError(f"{name} must be a scalar or have shape [{runs}] (one per run), got {tuple(t.shape)}")
    return t


def sgd_runs(X, y, *, family, q, lr, steps, runs, n=None, radius=None, noise_std=0.0, seed=0,
             checkpoints=None, replace=None) -> SGDRuns:
    """Many runs of projected (noisy) SGD as one tensor program (Wang et al. Def. 1, Alg. 2 line 6).

    Source: Wang, Lei, Ying & Zhang (2022), Def. 1 and Alg. 2 line 6.

    ``w_{t+1} = Proj_{B(0,R)}(w_t − η (f'(⟨w_t, x_{i_t}⟩; y_{i_t}) x_{i_t} + b_t))``, ``w_1 = 0``,
    ``i_t ~ Unif[n]``, ``b_t ~ N(0, σ² I)`` (σ = 0: plain SGD, Alg. 1's inner loop).

    Parameters
    ----------
    X, y : Tensor
        Data, ``X`` of shape ``[N, p]`` and ``y`` of shape ``[N]``; run r uses the first
        ``n[r]`` rows (a sweep over n is one program).
    family : {"hinge", "regression"}
    q, lr, n, noise_std : float or Tensor[runs]
        Per-run loss exponent, step size η, sample size, noise std σ.
    steps : int
        T (every run makes T steps).
    runs : int
    radius : float or Tensor[runs], optional
        R of ``W = B(0, R)``; None (or ``math.inf`` for a run) for ``W = ℝ^p``.
    seed : int
        Seeds the torch.Generator (indices, then noise).
    checkpoints : list of int, optional
        Steps t at which the average ``(1/t) Σ_{s ≤ t} w_s`` is recorded (default ``[T]``).
    replace : tuple (index Tensor[runs], x' Tensor[runs, p], y' Tensor[runs]), optional
        Also run each r on the neighbouring data set with row ``index[r]`` replaced by
        ``(x'[r], y'[r])``, with the *same* indices ``i_t`` and noise ``b_t`` — the coupling
        of Def. 2 / Thm 7 (UAS is over the algorithm's randomness for a fixed pair).

    Returns
    -------
    SGDRuns
    """
    _check_family(family)
    if X.dim() != 2 or y.shape != X.shape[:1]:
        raise ValueError(f"X must be [N, p] and y [N], got {tuple(X.shape)} and {tuple(y.shape)}")
    check_finite_tensor(X, "X")
    check_finite_tensor(y, "y")
    T = check_int(steps, "steps", minimum=1)
    runs = check_int(runs, "runs", minimum=1)
    N, p = X.shape
    qv = _as_q(_per_run(q, runs, X, "q"), X)
    eta = _per_run(lr, runs, X, "lr")
    if not bool((eta > 0).all()):
        raise ValueError("lr must be positive")
    nv = _per_run(N if n is None else n, runs, X, "n")
    if not bool(((nv >= 1) & (nv <= N) & (nv == nv.round())).all()):
        raise ValueError(f"n must hold integers in [1, {N}] (rows of X)")
    sig = _per_run(noise_std, runs, X, "noise_std")
    if not bool((sig >= 0).all()):
        raise ValueError("noise_std must be >= 0")
    if radius is None:
        R = None
    else:
        R = _per_run(radius, runs, X, "radius")
        if not bool((R > 0).all()):
            raise ValueError("radius must be positive (math.inf: no projection for that run)")
        R = R[:, None]
    cps = [T] if checkpoints is None else sorted({check_int(c, "checkpoints", minimum=1) for c in checkpoints})
    if cps[-1] > T:
        raise ValueError(f"checkpoints must lie in [1, steps={T}], got {cps[-1]}")
    if replace is not None:
        ridx, xr, yr = replace
        ridx = torch.as_tensor(ridx, device=X.device).long().expand(runs)
        xr = torch.as_tensor(xr, dtype=X.dtype, device=X.device).expand(runs, p)
        yr = torch.as_tensor(yr, dtype=X.dtype, device=X.device).expand(runs)
        if bool((ridx < 0).any()) or bool((ridx.to(X.dtype) >= nv).any()):
            raise ValueError("replace index must lie in [0, n) of its run")
    gen = torch.Generator(device=X.device).manual_seed(int(seed))
    noisy = bool((sig > 0).any())

    def proj(w):
        if R is None:
            return w
        nrm = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
        return w * torch.clamp(R / nrm.clamp_min(1e-300), max=1.0)   # R = inf: factor 1

    w = torch.zeros(runs, p, dtype=X.dtype, device=X.device)
    s = torch.zeros_like(w)
    wp = sp = None
    if replace is not None:
        wp, sp = torch.zeros_like(w), torch.zeros_like(w)
    out, out_p = [], []
    cp_set = set(cps)
    for t in range(1, T + 1):
        s = s + w                                   # Σ_{s ≤ t} w_s (w_1 = 0)
        if wp is not None:
            sp = sp + wp
        if t in cp_set:
            out.append(s / t)
            if wp is not None:
                out_p.append(sp / t)
        if t == cps[-1]:
            break
        idx = (torch.rand(runs, generator=gen, device=X.device, dtype=X.dtype) * nv).long().clamp_max(N - 1)
        x, yy = X[idx], y[idx]
        b = sig[:, None] * torch.randn(runs, p, generator=gen, device=X.device, dtype=X.dtype) if noisy else 0.0
        g = q_loss_derivative(family, (w * x).sum(-1), yy, qv)[:, None] * x
        w = proj(w - eta[:, None] * (g + b))
        if wp is not None:
            hit = (idx == ridx)
            xp = torch.where(hit[:, None], xr, x)
            ypv = torch.where(hit, yr, yy)
            gp = q_loss_derivative(family, (wp * xp).sum(-1), ypv, qv)[:, None] * xp
            wp = proj(wp - eta[:, None] * (gp + b))
    avg = torch.stack(out, 1)
    return SGDRuns(avg, cps, torch.stack(out_p, 1) if wp is not None else None)


def empirical_risk(family, X, y, q, w) -> torch.Tensor:
    """``R_S(w) = (1/n) Σ f(⟨w, x_i⟩; y_i)`` for ``w [..., p]`` (q broadcasting over ``[...]``).

    Source: the empirical risk R_S of Wang, Lei, Ying & Zhang (2022), whose excess risk Thm 8–12 bound.
    """
    _check_weights(w, X, "w")
    qt = torch.as_tensor(q, dtype=X.dtype, device=X.device)
    if qt.dim():
        qt = qt[..., None]
    return q_loss_value(family, w @ X.T, y, qt).mean(-1)


# --------------------------------------------------------------------------- Thm 7's two terms

def wang_thm7_terms(*, steps, n, eta, alpha, L, M, gamma, R=None, C_alpha=None):
    """The two terms of Wang et al. Thm 7's Δ² / e: ``(defect, growth)``.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 7.

    * ``defect = c²_{α,2} T η^{2/(1−α)}`` — the price of *approximate* non-expansiveness
      of the gradient map of a non-smooth loss (0 at α = 1);
    * ``growth = 4 G² η² (1 + r) r``, ``r = (T/n)(1 + c_{γ,T})`` — the steps at which the
      differing example is drawn: about T/n of them, at most r with probability 1 − γ.

    ``Δ = √(e (defect + growth))`` equals
    :func:`dpclip_lab.accountants.paper_bounds.wang_delta_sgd` (tested).

    References
    ----------
    Wang, Lei, Ying & Zhang (2022), Theorem 7, Remark 1.
    """
    T = check_int(steps, "steps", minimum=1)
    n = check_int(n, "n", minimum=1)
    eta = check_positive(eta, "eta")
    gamma = check_open_unit(gamma, "gamma")
    a = check_interval(alpha, "alpha", 0.0, 1.0)
    L = check_positive(L, "L")
    M = check_nonnegative(M, "M")
    x = 3 * n * math.log(n / gamma) / T
    c = max(math.sqrt(x), x)
    defect = 0.0 if a == 1 else (1 - a) / (1 + a) * (2 ** -a * L) ** (2 / (1 - a)) * T * eta ** (2 / (1 - a))
    if R is not None:
        G = M + L * check_positive(R, "R") ** a
    else:
        if C_alpha is None:
            raise ValueError("C_alpha is required when R is None (unbounded domain, Thm 7a)")
        G = M + L * (check_nonnegative(C_alpha, "C_alpha") * T * eta) ** (a / 2)
    r = T / n * (1 + c)
    return defect, 4 * G * G * eta * eta * (1 + r) * r


# --------------------------------------------------------------------------- rates (Thm 9, 10, 12)

def _rate_args(n, d, epsilon, delta, gamma):
    return (check_positive(n, "n"), check_positive(d, "d"), check_positive(epsilon, "epsilon"),
            check_open_unit(delta, "delta"), check_open_unit(gamma, "gamma"))


def wang_thm9_rate(n, d, epsilon, delta, alpha, gamma=0.1) -> float:
    """Thm 9 (Alg. 1, W = ℝ^d), without ‖w*‖² and the O-constant:

    Source: Wang, Lei, Ying & Zhang (2022), Thm 9.

    ``√(d log(1/δ)) log(n/δ) / ((log 1/γ)^{(1+α)/(4(3+α))} n^{2/(3+α)} ε)
    + log(n) (log 1/γ)^{2/(3+α)} log(n/δ) / n^{1/(3+α)}``.
    """
    n, d, e, dl, g = _rate_args(n, d, epsilon, delta, gamma)
    a = check_interval(alpha, "alpha", 0.0, 1.0)
    lg = math.log(1 / g)
    return (math.sqrt(d * math.log(1 / dl)) * math.log(n / dl) / (lg ** ((1 + a) / (4 * (3 + a))) * n ** (2 / (3 + a)) * e)
            + math.log(n) * lg ** (2 / (3 + a)) * math.log(n / dl) / n ** (1 / (3 + a)))


def wang_thm10_rate(n, d, epsilon, delta, gamma=0.1) -> float:
    """Thm 10 (Alg. 1, W ⊆ B(0, R)), without ‖w*‖² and the O-constant:

    Source: Wang, Lei, Ying & Zhang (2022), Thm 10.

    ``(d log 1/δ)^{1/4} (log 1/γ)^{1/8} √log(n/δ) / √(nε) + √(log n log(1/γ) log(n/δ)) / √n``.
    """
    n, d, e, dl, g = _rate_args(n, d, epsilon, delta, gamma)
    lg = math.log(1 / g)
    return ((d * math.log(1 / dl)) ** 0.25 * lg ** 0.125 * math.sqrt(math.log(n / dl)) / math.sqrt(n * e)
            + math.sqrt(math.log(n) * lg * math.log(n / dl)) / math.sqrt(n))


def wang_thm12_rate(n, d, epsilon, delta, gamma=0.1) -> float:
    """Thm 12 (Alg. 2), without ‖w*‖² and the O-constant:

    Source: Wang, Lei, Ying & Zhang (2022), Thm 12.

    ``√(d log(1/δ) log(1/γ)) / (nε) + √(log n log(n/γ) log(1/γ)) / √n``.
    """
    n, d, e, dl, g = _rate_args(n, d, epsilon, delta, gamma)
    lg = math.log(1 / g)
    return (math.sqrt(d * math.log(1 / dl) * lg) / (n * e)
            + math.sqrt(math.log(n) * math.log(n / g) * lg) / math.sqrt(n))


def _steps_for(n, alpha, threshold):
    a = check_interval(alpha, "alpha", 0.0, 1.0)
    return max(int(math.ceil(n ** ((2 - a) / (1 + a)))), int(n)) if a < threshold else int(n)


def wang_thm9_schedule(n, alpha, gamma=0.1):
    """Thm 9's (T, η): ``T = n^{(6−3α−α²)/((1+α)(3+α))}`` if ``α < (√73 − 7)/4``, else n;
    ``η = n^{1/(3+α)} / (T (log 1/γ)^{1/(3+α)})``.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 9.
    """
    n = check_int(n, "n", minimum=2)
    a = check_interval(alpha, "alpha", 0.0, 1.0)
    T = int(math.ceil(n ** ((6 - 3 * a - a * a) / ((1 + a) * (3 + a))))) if a < (math.sqrt(73) - 7) / 4 else n
    eta = n ** (1 / (3 + a)) / (T * math.log(1 / check_open_unit(gamma, "gamma")) ** (1 / (3 + a)))
    return T, eta


def wang_thm10_schedule(n, d, epsilon, delta, alpha, gamma=0.1):
    """Thm 10's (T, η): ``T = n^{(2−α)/(1+α)}`` if α < 1/2, else n (the ``+ n`` of Table 1:
    we take the max), ``η = 1 / (T max{√(log(n/δ) log n log(1/γ)/n),
    (d log 1/δ)^{1/4} √log(n/δ) (log 1/γ)^{1/8} / √(nε)})``.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 10.
    """
    n = check_int(n, "n", minimum=2)
    _, d, e, dl, g = _rate_args(n, d, epsilon, delta, gamma)
    T = _steps_for(n, alpha, 0.5)
    lg = math.log(1 / g)
    m = max(math.sqrt(math.log(n / dl) * math.log(n) * lg / n),
            (d * math.log(1 / dl)) ** 0.25 * math.sqrt(math.log(n / dl)) * lg ** 0.125 / math.sqrt(n * e))
    return T, 1.0 / (T * m)


def wang_thm12_schedule(n, d, epsilon, delta, alpha, gamma=0.1):
    """Thm 12's (T, η): ``T = n^{(2−α)/(1+α)}`` if α < 1/2 else n (max with n), and
    ``η = (1/T) max{√(log n log(n/γ) log(1/γ)/n), √(d log 1/δ) (log 1/γ)^{1/4} / (nε)}``.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 12.

    The paper prints η = (1/T)·max{…}; with T ≥ n the step is tiny and T·η — the
    distance SGD can travel — is the max, which is below 1 for moderate n: the
    utility proof needs ``T η ≳ ‖w*‖²/(excess)``, so this schedule is *conservative*.
    """
    n = check_int(n, "n", minimum=2)
    _, d, e, dl, g = _rate_args(n, d, epsilon, delta, gamma)
    T = _steps_for(n, alpha, 0.5)
    lg = math.log(1 / g)
    m = max(math.sqrt(math.log(n) * math.log(n / g) * lg / n), math.sqrt(d * math.log(1 / dl)) * lg ** 0.25 / (n * e))
    return T, m / T


# --------------------------------------------------------------------------- Table 1

def _c_output_bounded(n, a, e, d, dl):
    return n ** ((2 - a) / (1 + a)) + n


def _c_output_unbounded(n, a, e, d, dl):
    return n ** ((-a * a - 3 * a + 6) / ((1 + a) * (3 + a))) + n


#: Wang et al. Table 1: (reference, loss, method, utility bound, gradient complexity, domain,
#: complexity as a function of (n, α, ε, d, δ)). Utility bounds are the O(·) expressions as text.
WANG_TABLE1 = (
    ("[35] Wu et al.", "Lipschitz & smooth", "Output", "(d log(1/δ))^{1/4}/√(nε)", "n", "bounded",
     lambda n, a, e, d, dl: n),
    ("[4] Bassily et al.", "Lipschitz & smooth", "Gradient", "√(d log(1/δ))/(nε) + 1/√n",
     "n^{1.5}√ε + (nε)^{2.5}/(d log(1/δ))", "bounded",
     lambda n, a, e, d, dl: n ** 1.5 * math.sqrt(e) + (n * e) ** 2.5 / (d * math.log(1 / dl))),
    ("[4] Bassily et al.", "Lipschitz", "Gradient", "√(d log(1/δ))/(nε) + 1/√n",
     "n^{4.5}√ε + n^{6.5}ε^{4.5}/(d log(1/δ))²", "bounded",
     lambda n, a, e, d, dl: n ** 4.5 * math.sqrt(e) + n ** 6.5 * e ** 4.5 / (d * math.log(1 / dl)) ** 2),
    ("[16] Feldman et al.", "Lipschitz & smooth", "Phased Output", "√(d log(1/δ))/(nε) + 1/√n", "n", "bounded",
     lambda n, a, e, d, dl: n),
    ("[16] Feldman et al.", "Lipschitz", "Phased ERM", "√(d log(1/δ))/(nε) + 1/√n", "n² log(1/δ)", "bounded",
     lambda n, a, e, d, dl: n * n * math.log(1 / dl)),
    ("[3] Bassily et al.", "Lipschitz", "Gradient", "√(d log(1/δ))/(nε) + 1/√n", "n²", "bounded",
     lambda n, a, e, d, dl: n * n),
    ("Wang et al.", "α-Hölder", "Output", "(d log(1/δ))^{1/4}√log(n/δ)/√(nε)", "n^{(2−α)/(1+α)} + n",
     "bounded", _c_output_bounded),
    ("Wang et al.", "α-Hölder", "Output", "√(d log(1/δ) log(n/δ))/(n^{2/(3+α)}ε) + log(n/δ)/n^{1/(3+α)}",
     "n^{(6−3α−α²)/((1+α)(3+α))} + n", "unbounded", _c_output_unbounded),
    ("Wang et al.", "α-Hölder", "Gradient", "√(d log(1/δ))/(nε) + 1/√n", "n^{(2−α)/(1+α)} + n", "bounded",
     _c_output_bounded),
)


def wang_table1(n, alpha, *, epsilon=1.0, d=30, delta=None):
    """Table 1 of Wang et al. with each row's gradient complexity evaluated at (n, α, ε, d, δ).

    Source: Wang, Lei, Ying & Zhang (2022), Table 1.

    ``delta`` defaults to ``1/n²`` (Remark 4). Returns a list of dicts with keys
    ``reference, loss, method, utility, complexity, domain, gradients`` (a float:
    the O(·) expression without its constant).
    """
    n = check_positive(n, "n")
    a = check_interval(alpha, "alpha", 0.0, 1.0)
    e = check_positive(epsilon, "epsilon")
    d = check_positive(d, "d")
    dl = 1.0 / (n * n) if delta is None else check_open_unit(delta, "delta")
    return [dict(reference=r, loss=lo, method=m, utility=u, complexity=c, domain=dom, gradients=float(f(n, a, e, d, dl)))
            for r, lo, m, u, c, dom, f in WANG_TABLE1]


# --------------------------------------------------------------------------- Thm 11, Remark 4, Lemma 13

def default_betas(grid=999) -> np.ndarray:
    """Remark 4's β candidates: :func:`dpclip_lab.accountants.paper_bounds.wang_remark4_betas`.

    Source: Wang, Lei, Ying & Zhang (2022), Remark 4.
    """
    return wang_remark4_betas(grid)


def wang_thm11_feasible_betas(n, steps, epsilon, delta, *, betas=None) -> np.ndarray:
    """The β in ``betas`` (default :func:`default_betas`) that satisfy Thm 11's conditions (32)–(33).

    Source: Wang, Lei, Ying & Zhang (2022), Thm 11, conditions (32)–(33).

    Vectorized twin of :func:`dpclip_lab.accountants.paper_bounds.wang_thm11_conditions`
    (the conditions do not depend on G: σ²/(4G²) = 14 T λ / (4 β n² ε)).

    Returns
    -------
    betas, feasible : (ndarray, ndarray of bool)
    """
    n = check_int(n, "n", minimum=1)
    T = check_int(steps, "steps", minimum=1)
    e = check_positive(epsilon, "epsilon")
    dl = check_open_unit(delta, "delta")
    b = default_betas() if betas is None else np.asarray(betas, dtype=float)
    if b.ndim != 1 or not np.all((b > 0) & (b < 1)):
        raise ValueError("betas must be a 1-D array of values in (0, 1)")
    lam = math.log(1 / dl) / ((1 - b) * e) + 1
    s = 14 * T * lam / (4 * b * n * n * e)                   # σ²/(4G²)
    arg = n / (lam * (1 + s))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (s >= 0.67) & (arg > 0) & (lam - 1 <= (2 * s / 3) * np.log(np.where(arg > 0, arg, 1.0)))
    return b, ok


def wang_thm11_smallest_epsilon(n, steps=None, delta=None, *, betas=None, lo=1e-3, hi=1e2, rtol=1e-6) -> float:
    """The smallest ε (bisection, to ``rtol``) at which some β in ``betas`` meets Thm 11's conditions.

    Source: Wang, Lei, Ying & Zhang (2022), Thm 11 and Lemma 13.

    Defaults ``T = n``, ``δ = 1/n²``: the setting of Lemma 13 and Fig. 1, whose closed
    form :func:`dpclip_lab.accountants.paper_bounds.wang_lemma13_epsilon_threshold` is a
    *sufficient* condition — this is the exact boundary of Remark 4's search.
    Assumes feasibility is monotone in ε on ``[lo, hi]`` (checked at the ends; the book
    checks it on a grid). Returns ``inf`` if even ``hi`` is infeasible.
    """
    n = check_int(n, "n", minimum=2)
    T = n if steps is None else check_int(steps, "steps", minimum=1)
    dl = 1.0 / (n * n) if delta is None else check_open_unit(delta, "delta")

    def feas(e):
        return bool(wang_thm11_feasible_betas(n, T, e, dl, betas=betas)[1].any())

    if not feas(hi):
        return math.inf
    if feas(lo):
        return lo
    while hi / lo - 1 > rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if feas(mid) else (mid, hi)
    return hi


def wang_thm11_wor_epsilon(sigma, gradient_bound, n, steps, delta) -> float:
    """ε that the lab's RDP accountant certifies for Alg. 2's T steps at Thm 11's σ.

    Each step is one example drawn from n (sampling without replacement of size 1,
    replace-one neighbours), its gradient (norm ≤ G, sensitivity 2G) plus N(0, σ²):
    ``SelfComposedEvent(SampledWithoutReplacementEvent(n, 1, GaussianEvent(σ/(2G))), T)``,
    accounted by Wang–Balle–Kasiviswanathan (2019)'s bound, as Thm 11's proof does via
    its Lemma 3 — but without Lemma 3's simplification and with the optimal order.
    """
    from .accountants import RDPAccountant
    from .accountants.events import GaussianEvent, SampledWithoutReplacementEvent

    s = check_positive(sigma, "sigma")
    G = check_positive(gradient_bound, "gradient_bound")
    n = check_int(n, "n", minimum=1)
    T = check_int(steps, "steps", minimum=1)
    dl = check_open_unit(delta, "delta")
    ev = SampledWithoutReplacementEvent(n, 1, GaussianEvent(s / (2 * G)))
    return float(RDPAccountant().compose(ev, T).get_epsilon(dl))


def wang_thm11_accountant_sigma(epsilon, delta, n, steps, gradient_bound, *, rtol=1e-3) -> float:
    """The smallest σ (bisection, to ``rtol``, rounded up) whose T WOR-sampled steps the RDP accountant certifies at (ε, δ).

    Source: Wang, Lei, Ying & Zhang (2022), Alg. 2 and Thm 11 (the mechanism), accounted by Wang, Balle & Kasiviswanathan (2019), Thm 9.

    The same mechanism as :func:`wang_thm11_wor_epsilon` (one example of n, gradient
    norm ≤ G, replace-one, noise N(0, σ²)); compare with Thm 11's σ
    (:func:`dpclip_lab.accountants.paper_bounds.wang_remark4_beta`) to see how much
    noise the closed form spends beyond what its own accounting model needs. The
    returned σ always certifies ε (the upper end of the bisection bracket).
    """
    e = check_positive(epsilon, "epsilon")
    dl = check_open_unit(delta, "delta")
    G = check_positive(gradient_bound, "gradient_bound")
    n = check_int(n, "n", minimum=1)
    T = check_int(steps, "steps", minimum=1)

    def eps_at(s):
        return wang_thm11_wor_epsilon(s, G, n, T, dl)

    hi = G
    while eps_at(hi) > e:
        hi *= 2.0
        if hi > 1e6 * G:
            raise ValueError(f"epsilon={e!r} is unreachable with sigma <= 1e6 * gradient_bound")
    lo = hi / 2.0
    while eps_at(lo) <= e and lo > 1e-6 * G:
        hi, lo = lo, lo / 2.0
    while hi / lo - 1 > rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_at(mid) <= e else (mid, hi)
    return hi


def wang_remark4_choice(n, steps, epsilon, delta, *, betas=None):
    """Remark 4's β — the feasible β closest to 1/2 — over ``betas`` (default :func:`default_betas`), and σ/G.

    Source: Wang, Lei, Ying & Zhang (2022), Remark 4.

    Like :func:`dpclip_lab.accountants.paper_bounds.wang_remark4_beta` but on a grid that
    also holds very small β (where, at large ε, the only feasible ones are), and
    returning ``(nan, nan)`` instead of raising when no β is feasible.

    Returns
    -------
    beta, sigma_over_G : (float, float)
        Alg. 2's noise std is ``sigma_over_G · G`` (σ² = 14 G² T λ / (β n² ε)).
    """
    b, ok = wang_thm11_feasible_betas(n, steps, epsilon, delta, betas=betas)
    if not ok.any():
        return math.nan, math.nan
    fb = b[ok]
    beta = float(fb[np.argmin(np.abs(fb - 0.5))])
    lam = math.log(1 / delta) / ((1 - beta) * epsilon) + 1
    return beta, math.sqrt(14 * steps * lam / (beta * n * n * epsilon))
