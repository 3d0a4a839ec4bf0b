"""Empirical privacy auditing: turn a membership attack into a *lower* bound on ε.

An accountant's ε is an upper bound proved on paper about an *idealized*
algorithm. Code can break it silently (noise on the mean instead of the sum, a
forgotten factor, ...). An **audit** tests the code itself: train many times
with a canary example (``scores_in``) and without it (``scores_out``), score
each run with a membership statistic, and turn the attack's error rates into a
statistically valid lower bound on ε (Jagielski, Ullman, Oprea 2020; Nasr et
al. 2021). If the lower bound exceeds the accountant's ε, the implementation
(or the proof) is wrong.

What this module holds:

* :func:`epsilon_lower_bound` — the estimator: Clopper–Pearson bounds on the
  false-positive and false-negative rates of every threshold test, with a
  union bound that makes the maximum over thresholds valid.
* :func:`gradient_canary_audit` — many runs of a lab algorithm (DP-SGD, DP-GD,
  DiceSGD, adaptive clipping, or any privatizer) batched as one tensor program,
  with a *gradient canary*: one example whose per-example gradient is a fixed
  vector of norm ≥ C while every other gradient is 0 (the strongest white-box
  setting: the released sum is the canary's clipped gradient plus noise).
  Observes the last iterate or all iterates; the all-iterates score uses the
  noise level the code was *observed* to add (canary-free calibration runs),
  never the claimed one, so an under-noised implementation cannot hide behind
  its claim. With :func:`module_batched_grad_fn` the other examples are a small
  network's real per-example gradients and the canary is a "Dirac" gradient on
  one parameter.
* :func:`input_canary_audit` — the same with an *input-space* canary: an extra
  example ``(x_c, y_c)`` of a generalized linear problem, whose gradient the
  algorithm computes (and which shrinks as the model fits it).
* :func:`one_run_epsilon_lower_bound`, :func:`one_run_gradient_audit` — the
  one-run audit of Steinke, Nasr, Jagielski (2023): many canaries, each
  included with probability ½, in *one* training run.
* :class:`BrokenMeanNoisePrivatizer` — a privatizer that is **broken on
  purpose** (its noise is calibrated to the mean but added to the sum), for the
  book to catch. It is not an algorithm of the lab and is not exported from
  :mod:`dpclip_lab.algorithms`.

Conventions: an "out" run keeps the canary's slot with a zero gradient, which
for Poisson sampling (normalizer = the expected batch size) is the same
distribution as removing it (add/remove), for full batches gives a pair of data
sets (same size) whose clipped sums differ by at most ``C``, and for shuffling is
the zero-out relation. The accountant ε an audit is compared with is always the
audited run's own ``result.dp_event()`` (its sampling scheme and relation),
composed by the chosen accountant. Audits run in float32 or float64 only.

References
----------
Jagielski, Ullman, Oprea (2020), "Auditing differentially private machine learning:
how private is private SGD?".
Nasr, Song, Thakurta, Papernot, Carlini (2021), "Adversary instantiation: lower bounds
for differentially private machine learning".
Steinke, Nasr, Jagielski (2023), "Privacy auditing with one (1) training run".
Clopper, Pearson (1934); Kairouz, Oh, Viswanath (2015) (the hypothesis-testing view of DP).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ._validation import check_int, check_interval, check_nonnegative, check_open_unit, check_positive
from .algorithms.loop import LOW_PRECISION_REASON
from .privatizers import GaussianPrivatizer

__all__ = [
    "clopper_pearson_upper", "epsilon_lower_bound", "max_certifiable_epsilon",
    "CanaryAudit", "gradient_canary_oracle", "module_batched_grad_fn", "gradient_canary_audit",
    "input_canary_audit",
    "one_run_p_value", "one_run_epsilon_lower_bound", "one_run_gradient_audit",
    "BrokenMeanNoisePrivatizer",
]


# =========================================================================== the estimator
def clopper_pearson_upper(k, n, alpha):
    """One-sided Clopper–Pearson upper bound on a binomial rate.

    Source: Clopper & Pearson (1934); the error-rate bounds of the audit of Kairouz, Oh & Viswanath (2015), Thm 2.1.

    ``P(Bin(n, p) ≤ k) = alpha`` solved for ``p`` (``1`` when ``k = n``), so that
    ``P(p_true > U(K)) ≤ alpha`` for ``K ~ Bin(n, p_true)``. Vectorized over ``k``.
    """
    from scipy.stats import beta

    n = float(check_int(n, "n", minimum=1))
    try:
        k = np.asarray(k, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"k must be an integer count or an array of them, got {k!r}") from None
    if not np.all(np.isfinite(k)) or np.any(k != np.round(k)) or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"k must hold integer counts in [0, n] = [0, {int(n)}], got {k!r}")
    alpha = check_open_unit(alpha, "alpha")
    with np.errstate(all="ignore"):
        u = beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, u)


def _count_levels(m: int) -> np.ndarray:
    """Count levels of the union bound: 0..16, then a geometric grid (ratio 1.25), then m.

    A threshold whose error count is k is charged to the smallest level ≥ k
    (the Clopper–Pearson bound is monotone in k, so this only loosens it).
    """
    small = np.arange(0, min(m, 16) + 1)
    if m <= 16:
        return small
    geo = np.ceil(16 * 1.25 ** np.arange(1, math.ceil(math.log(m / 16) / math.log(1.25)) + 1))
    return np.unique(np.concatenate([small, np.minimum(geo, m).astype(int), [m]]))


def _as_scores(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must hold real scores, got a complex tensor ({x.dtype}); its imaginary part "
                            "would be dropped")
        x = x.detach().to("cpu", torch.float64).numpy()
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D tensor or array of real scores, got {type(x).__name__}") from None
    if raw.dtype.kind == "c":
        raise TypeError(f"{name} must hold real scores, got complex values ({raw.dtype}); their imaginary part "
                        "would be dropped")
    if raw.dtype.kind not in "biuf":    # strings, None, objects: not scores (np.asarray would parse "1.5")
        raise TypeError(f"{name} must be a 1-D tensor or array of real scores, got entries of dtype {raw.dtype}")
    a = raw.astype(np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D tensor or array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite; it holds {int((~np.isfinite(a)).sum())} NaN or inf entries")
    return a


def _check_delta(delta) -> float:
    d = check_nonnegative(delta, "delta")
    if d >= 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    return d


def _as_included(included, shape) -> np.ndarray:
    """The one-run audit's membership flags: booleans (or 0/1), one per canary, some in and some out."""
    if isinstance(included, torch.Tensor):
        included = included.detach().cpu().numpy()
    try:
        raw = np.asarray(included)
    except (TypeError, ValueError):
        raise ValueError(f"included must be booleans (or 0/1), one per canary, got {type(included).__name__}") from None
    if raw.dtype.kind in "iuf" and np.all((raw == 0) | (raw == 1)):
        raw = raw == 1
    if raw.dtype.kind != "b":
        raise ValueError(f"included must be booleans (or 0/1), one per canary (was canary i in the run?), "
                         f"got values such as {raw.ravel()[:4].tolist()!r}")
    if raw.shape != shape:
        raise ValueError(f"included must have the shape of scores {shape}, got {raw.shape}")
    if raw.all() or not raw.any():
        raise ValueError(f"included must mark some canaries in and some out (each is included with probability "
                         f"1/2 in the one-run audit), got all {'in' if raw.all() else 'out'} ({raw.size} canaries)")
    return raw


def epsilon_lower_bound(scores_in, scores_out, *, delta, confidence=0.95) -> float:
    """A lower bound on ε, valid with probability ≥ ``confidence``, from membership scores.

    Source: Kairouz, Oh & Viswanath (2015), Thm 2.1; the audit of Jagielski, Ullman & Oprea (2020).

    A mechanism that is (ε, δ)-DP forces every test of "canary in" against
    "canary out" to have false-positive rate α and false-negative rate β with
    (Kairouz, Oh, Viswanath 2015; Nasr et al. 2021)::

        α + e^ε β ≥ 1 − δ     and     β + e^ε α ≥ 1 − δ.

    For the test "guess *in* iff score ≥ t", with one-sided Clopper–Pearson
    upper bounds ``U_α(t)``, ``U_β(t)`` on its rates, the mechanism is not
    (ε, δ)-DP for any ε below ``max(log((1−δ−U_α)/U_β), log((1−δ−U_β)/U_α))``.
    This function returns the maximum of that over **all** thresholds t (every
    distinct score, vectorized), or 0 when nothing is certified.

    Multiple thresholds (why the maximum is valid): the bounds hold for every
    threshold *simultaneously*. A union (Bonferroni) bound runs over a fixed
    set J of error-count levels (0..16, then a geometric grid of ratio 1.25, then
    the sample size; about 40 levels for 2,000 runs), not over the data-chosen
    thresholds: if the false-positive rate of some threshold with ``k`` false
    positives exceeds ``U(j)`` for the smallest level ``j ≥ k``, then a fixed
    population threshold already had at most ``j`` false positives although its
    rate exceeds ``U(j)`` — an event of probability at most ``a``. With
    ``a = (1 − confidence) / (2 |J|)`` per level and side, all bounds hold at
    once with probability ≥ ``confidence``, whatever threshold the maximum picks.
    No held-out split is needed. (Jagielski et al. 2020 pick the threshold on the
    same data without a correction; that maximum is *not* a valid bound.)

    Parameters
    ----------
    scores_in, scores_out : 1-D tensor or array
        A membership statistic (larger = more evidence that the canary was in)
        from independent runs with and without the canary. Any lengths.
    delta : float in [0, 1)
        The δ of the (ε, δ)-DP claim being tested.
    confidence : float in (0, 1)
        Probability that the returned value is at most the true ε.

    Returns
    -------
    float
        The certified lower bound (≥ 0). Never above the truth, except with
        probability at most ``1 − confidence``.
    """
    s_in = np.sort(_as_scores(scores_in, "scores_in"))
    s_out = np.sort(_as_scores(scores_out, "scores_out"))
    d = _check_delta(delta)
    conf = check_open_unit(confidence, "confidence")
    n_in, n_out = s_in.size, s_out.size
    thresholds = np.append(np.unique(np.concatenate([s_in, s_out])), np.inf)
    fp = n_out - np.searchsorted(s_out, thresholds, side="left")   # out-runs with score ≥ t
    fn = np.searchsorted(s_in, thresholds, side="left")            # in-runs with score < t
    alpha = 1.0 - conf
    lv_out, lv_in = _count_levels(n_out), _count_levels(n_in)
    u_out = clopper_pearson_upper(lv_out, n_out, alpha / (2 * lv_out.size))
    u_in = clopper_pearson_upper(lv_in, n_in, alpha / (2 * lv_in.size))
    U_fp = u_out[np.searchsorted(lv_out, fp, side="left")]
    U_fn = u_in[np.searchsorted(lv_in, fn, side="left")]
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(1.0 - d - U_fp, 0.0)) - np.log(U_fn)
        e2 = np.log(np.maximum(1.0 - d - U_fn, 0.0)) - np.log(U_fp)
    best = np.max(np.maximum(e1, e2))
    return float(best) if np.isfinite(best) and best > 0 else 0.0


def max_certifiable_epsilon(n_in: int, n_out: int, *, delta, confidence=0.95) -> float:
    """The largest ε :func:`epsilon_lower_bound` can certify with these sample sizes.

    Source: the ceiling of the bound of Kairouz, Oh & Viswanath (2015), Thm 2.1, with Clopper–Pearson intervals.

    What a *perfect* attack (every run classified correctly) certifies: an audit
    with ``n`` runs per side cannot show more than about ``log(n / log(1/a))``.
    """
    n_in = check_int(n_in, "n_in", minimum=1)
    n_out = check_int(n_out, "n_out", minimum=1)
    return epsilon_lower_bound(np.ones(n_in), np.zeros(n_out), delta=delta, confidence=confidence)


# =========================================================================== canary audits
@dataclass
class CanaryAudit:
    """The scores of a batched canary audit and what they certify.

    Source: the audits of Jagielski, Ullman & Oprea (2020) and Nasr et al. (2021), bounded by Kairouz, Oh & Viswanath (2015), Thm 2.1.

    Attributes
    ----------
    algorithm, canary : str
        What was audited, and the canary ("gradient" or "input").
    steps : ndarray[K]
        The checkpoints t (number of steps) at which the runs were scored.
    scores_in, scores_out : dict[str, Tensor[runs, K]]
        Per observation (``"last"``: the iterate θ_t alone; ``"all"``: every
        iterate θ_0..θ_t), the membership score of each run at each checkpoint.
    delta, confidence : float
    accountant_epsilon : ndarray[K] or None
        The lab's (valid) accountant ε at each checkpoint.
    extra : dict
        Anything else (the paper's claimed ε for DiceSGD, z, q, ...).
    """

    algorithm: str
    canary: str
    steps: np.ndarray
    scores_in: dict
    scores_out: dict
    delta: float
    confidence: float
    accountant_epsilon: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    def epsilon_lower(self, observe: str = "all", step: int | None = None) -> float:
        """The certified lower bound for one observation at one checkpoint (default: the last)."""
        if observe not in self.scores_in:
            raise ValueError(f"observe must be one of {tuple(self.scores_in)}, got {observe!r}")
        k = self._index(step)
        return epsilon_lower_bound(self.scores_in[observe][:, k], self.scores_out[observe][:, k],
                                   delta=self.delta, confidence=self.confidence)

    def epsilon_lower_curve(self, observe: str = "all") -> np.ndarray:
        """The certified lower bound at every checkpoint (``[K]``)."""
        return np.array([self.epsilon_lower(observe, int(t)) for t in self.steps])

    @property
    def epsilon_accountant(self) -> float:
        """The accountant's ε after the last checkpoint."""
        return float(self.accountant_epsilon[-1]) if self.accountant_epsilon is not None else math.nan

    @property
    def epsilon_ceiling(self) -> float:
        """The largest ε these sample sizes can certify (:func:`max_certifiable_epsilon`)."""
        any_obs = next(iter(self.scores_in))
        return max_certifiable_epsilon(self.scores_in[any_obs].shape[0], self.scores_out[any_obs].shape[0],
                                       delta=self.delta, confidence=self.confidence)

    def _index(self, step):
        if step is None:
            return len(self.steps) - 1
        hits = np.nonzero(self.steps == int(step))[0]
        if hits.size == 0:
            raise ValueError(f"step must be one of the checkpoints {self.steps.tolist()}, got {step!r}")
        return int(hits[0])

    def __repr__(self) -> str:
        return (f"CanaryAudit(algorithm={self.algorithm!r}, canary={self.canary!r}, runs in/out="
                f"{next(iter(self.scores_in.values())).shape[0]}/{next(iter(self.scores_out.values())).shape[0]}, "
                f"steps={self.steps.tolist()[-1]}, accountant ε={self.epsilon_accountant:.3g})")


def gradient_canary_oracle(in_run: torch.Tensor, canary_gradient: torch.Tensor, *, canary_index: int = 0,
                           other_gradient: torch.Tensor | None = None, base_grad_fn=None):
    """Lab utility: A batched per-example gradient oracle with a crafted canary gradient.

    Example ``canary_index`` has gradient ``canary_gradient`` in the runs where
    ``in_run`` is True and 0 elsewhere; every other example has gradient
    ``other_gradient`` (default 0: the strongest setting for the auditor), or,
    with ``base_grad_fn``, its real gradient (a batched oracle, e.g.
    :func:`module_batched_grad_fn` of a small network). Signature as
    :class:`dpclip_lab.algorithms.oracles.CallableOracle` expects for ``R > 1``
    runs: ``(theta[R, p], idx[R, m] or [m]) -> [R, m, p]``.
    """
    if not isinstance(canary_gradient, torch.Tensor) or not bool(torch.isfinite(canary_gradient).all()):
        raise ValueError("canary_gradient must be a finite tensor (no NaN or inf entries)")
    if not isinstance(in_run, torch.Tensor) or in_run.dim() != 1:
        raise ValueError(f"in_run must be a 1-D tensor (one flag per run), got {getattr(in_run, 'shape', in_run)!r}")
    g = canary_gradient.reshape(-1)
    if other_gradient is not None and (other_gradient.numel() != g.numel()
                                       or not bool(torch.isfinite(other_gradient).all())):
        raise ValueError(f"other_gradient must be a finite tensor with {g.numel()} entries like canary_gradient")
    o = None if other_gradient is None else other_gradient.reshape(-1).to(g)
    member = in_run.to(device=g.device, dtype=torch.bool)

    def grad_fn(theta, idx):
        R = theta.shape[0]
        if idx.dim() == 1:
            idx = idx.unsqueeze(0).expand(R, -1)
        is_canary = idx == canary_index
        G = (is_canary & member.unsqueeze(1)).to(theta.dtype).unsqueeze(-1) * g.to(theta)
        if o is not None:
            G = G + (~is_canary).to(theta.dtype).unsqueeze(-1) * o.to(theta)
        if base_grad_fn is not None:
            G = G + (~is_canary).to(theta.dtype).unsqueeze(-1) * base_grad_fn(theta, idx)
        return G

    return grad_fn


def module_batched_grad_fn(model: torch.nn.Module, loss_fn, inputs: torch.Tensor, targets: torch.Tensor):
    """Lab utility: Per-example gradients of a small ``nn.Module`` for ``R`` runs at once.

    ``(theta[R, n_params], idx[R, m]) -> [R, m, n_params]``: ``vmap`` over runs of
    ``vmap`` over examples of ``grad`` of the functional model (``torch.func``),
    with the parameters as one flat vector per run (the column order of
    :func:`dpclip_lab.per_sample_grads`). ``loss_fn(outputs[1, ...], targets[1])``
    must return a scalar. For audits of many runs of a small network; the lab's
    :func:`dpclip_lab.training.module_grad_fn` handles one run of any size.
    """
    from torch.func import functional_call, grad, vmap

    from .per_sample import unflatten

    if inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"targets must have one entry per input: inputs has {inputs.shape[0]} rows, "
                         f"targets {targets.shape[0]}")

    def loss_one(flat, x, y):
        out = functional_call(model, unflatten(model, flat), (x.unsqueeze(0),))
        return loss_fn(out, y.unsqueeze(0))

    flat_vmap = vmap(grad(loss_one))    # one vmap over (run, example) pairs: faster than two nested

    def grad_fn(theta, idx):
        R, p = theta.shape
        if idx.dim() == 1:
            idx = idx.unsqueeze(0).expand(R, -1)
        m = idx.shape[1]
        th = theta.unsqueeze(1).expand(R, m, p).reshape(R * m, p)
        flat_idx = idx.reshape(-1)
        return flat_vmap(th, inputs[flat_idx], targets[flat_idx]).reshape(R, m, p)

    return grad_fn


_ALGORITHMS = ("dp_sgd", "dp_gd", "dice_sgd", "adaptive")
_AUDIT_DTYPES = (torch.float32, torch.float64)


def _check_audit_dtype(dtype, name: str):
    """An audit runs in float32 or float64: 16-bit rounding breaks the sensitivity argument it tests."""
    if dtype not in _AUDIT_DTYPES:
        raise ValueError(
            f"{name} must be torch.float32 or torch.float64 for an audit, got {dtype}: {LOW_PRECISION_REASON} "
            "(nor what the audit tests). An audit must run in float32/float64")
    return dtype


def _check_accountant(accountant):
    from .accountants.calibration import ACCOUNTANTS
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return accountant


def _resolve_sampling(algorithm, sampling, batch_size, n):
    """The audited runs' sampling scheme: DP-GD's is always the full batch; the others default to Poisson.

    A ``sampling`` or ``batch_size`` that DP-GD would ignore is an error, not a silent no-op.
    """
    if algorithm == "dp_gd":
        if sampling not in (None, "full"):
            raise ValueError(f"sampling must be None or 'full' for algorithm='dp_gd' (DP-GD uses every example "
                             f"at every step; use 'dp_sgd' for sampled batches), got {sampling!r}")
        if batch_size is not None and batch_size != n:
            raise ValueError(f"batch_size must be None (or n = {n}) for algorithm='dp_gd' (DP-GD uses every "
                             f"example at every step), got {batch_size!r}")
        return "full"
    return "poisson" if sampling is None else sampling


def _calibration_seed(seed):
    """A seed for the calibration runs whose stream is independent of the audited runs' (seed ``s``)."""
    if seed is None or isinstance(seed, torch.Generator):
        return seed                  # fresh entropy, or the continuation of the generator's stream
    return int(np.random.SeedSequence([check_int(seed, "seed"), 0xCA11B]).generate_state(1)[0])


def _checkpoints(checkpoints, steps):
    if checkpoints is None:
        return np.array([steps])
    c = np.unique(np.asarray([check_int(t, "checkpoints", minimum=1) for t in np.ravel(checkpoints)]))
    if c[-1] > steps:
        raise ValueError(f"checkpoints must lie in [1, steps = {steps}], got {c[-1]}")
    return c


def _run_algorithm(algorithm, grad_fn, theta0, *, n, steps, lr, clip_norm, noise_multiplier, batch_size,
                   sampling, feedback_clip_norm, privatizer, seed, adaptive_kwargs):
    """Run one of the lab's algorithms (or a bare privatizer in the loop); return (result-like, info)."""
    from . import algorithms as alg

    common = dict(n=n, steps=steps, lr=lr, seed=seed, progress=False)
    if privatizer is not None:
        from .sampling import make_sampler
        sampler = make_sampler(sampling, n, batch_size)
        traj = alg.run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer, seed=seed,
                       progress=False)
        return traj.iterates, traj.history, dict(q=sampler.sample_rate, b=sampler.batch_size,
                                                 z=privatizer.noise_multiplier, result=None)
    if algorithm == "dp_gd":
        res = alg.dp_gd(grad_fn, theta0, clip_norm=clip_norm, noise_multiplier=noise_multiplier, **common)
        z_grad = noise_multiplier
    elif algorithm == "dp_sgd":
        res = alg.dp_sgd(grad_fn, theta0, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                         batch_size=batch_size, sampling=sampling, **common)
        z_grad = noise_multiplier
    elif algorithm == "dice_sgd":
        res = alg.dice_sgd(grad_fn, theta0, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                           feedback_clip_norm=clip_norm if feedback_clip_norm is None else feedback_clip_norm,
                           batch_size=batch_size, sampling=sampling, **common)
        z_grad = noise_multiplier
    elif algorithm == "adaptive":
        res = alg.dp_sgd_adaptive_clipping(grad_fn, theta0, initial_clip_norm=clip_norm,
                                           noise_multiplier=noise_multiplier, batch_size=batch_size,
                                           sampling=sampling, **(adaptive_kwargs or {}), **common)
        z_grad = res.extra["gradient_noise_multiplier"]
    else:
        raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")
    iterates = res.iterates
    res.iterates = None
    return iterates, res.history, dict(q=res.sample_rate, b=res.batch_size, z=z_grad, result=res)


def _accountant_curve(info, steps_at, delta, accountant):
    """ε of the audited run's *own* event after each checkpoint (None for a bare privatizer: no accountant).

    ``dataclasses.replace(result, steps=t).dp_event()`` is the event the algorithm's own record
    reports for its first t steps — its sampling scheme and neighbouring relation (shuffle,
    sampling with replacement), DiceSGD's sensitivity, adaptive clipping's count — composed by
    the named accountant. The audit compares against exactly what the lab would report.
    """
    res = info["result"]
    if res is None:
        return None
    from .accountants.calibration import make_accountant

    return np.array([float(make_accountant(accountant).compose(dataclasses.replace(res, steps=int(t)).dp_event())
                           .get_epsilon(delta)) for t in steps_at])


def _mixture_llr(d, signal, sigma, q):
    """log-likelihood ratio of ``q N(s, σ²) + (1−q) N(0, σ²)`` against ``N(0, σ²)`` at ``d``."""
    z = (2 * d * signal - signal ** 2) / (2 * sigma ** 2)
    if q >= 1:
        return z
    return torch.logaddexp(torch.full_like(z, math.log1p(-q)), math.log(q) + z)


def _steps_along(iterates, history, coordinate, b, lr, C):
    """The iterates along u ``[R, T+1]``, the steps on the scale of the noisy sum ``[R, T]`` and each step's C_s."""
    proj = iterates[..., coordinate]
    d = (proj[:, :-1] - proj[:, 1:]) * b / lr
    C_t = history.get("clip_norm")
    if C_t is None or C_t.shape != d.shape:
        C_t = torch.full_like(d, C)
    return proj, d, C_t


def gradient_canary_audit(algorithm: str = "dp_sgd", *, runs: int, steps: int, noise_multiplier: float, n: int,
                          batch_size: int | None = None, sampling: str | None = None, clip_norm: float = 1.0,
                          canary_norm: float | None = None, feedback_clip_norm: float | None = None,
                          privatizer=None, other_gradient: float = 0.0, base_grad_fn=None, theta0=None,
                          coordinate: int = 0, lr: float = 1.0, dim: int = 1,
                          delta: float = 1e-5, confidence: float = 0.95, checkpoints=None, seed: int = 0,
                          accountant: str = "rdp", adaptive_kwargs: dict | None = None,
                          dtype=torch.float64, calibration_runs: int | None = None) -> CanaryAudit:
    """Audit a lab algorithm with a gradient canary, ``2 × runs`` runs as one tensor program.

    Source: the white-box gradient canaries of Nasr et al. (2021), bounded by Kairouz, Oh & Viswanath (2015), Thm 2.1.

    Example 0 (the canary) has the per-example gradient ``canary_norm · u``
    (``u = e_coordinate``, a "Dirac" canary on one parameter) in the first
    ``runs`` runs and 0 in the other ``runs``; all other examples have gradient
    ``other_gradient · u`` (default 0), or their real gradients from
    ``base_grad_fn`` (a small network: :func:`module_batched_grad_fn`). The scores:

    * ``"last"``: ``⟨θ_0 − θ_t, u⟩`` — the iterate alone (black-box on θ_t);
    * ``"all"``: ``Σ_s log LR(d_s)`` with ``d_s = ⟨θ_s − θ_{s+1}, u⟩ b/η``, the
      likelihood ratio of a step with the canary sampled with probability q
      (signal ``min(G, C_s)``) against a step without it, at the noise level
      ``ẑ C_s`` the code was **observed** to add (``C_s`` from the run's history
      for adaptive clipping).

    The noise level of the ``"all"`` score is not taken from the claim: an audit
    tests the code, and a statistic built on the claimed ``z`` is mis-specified
    exactly when the code is wrong (a privatizer whose noise is ``b`` times too
    small escapes it at small batches). Besides the audited runs, ``calibration_runs``
    more runs *without* the canary, with randomness independent of the audited
    runs (a seed derived from ``seed``), measure the mean ``m̂`` and the spread ``ẑ``
    of ``d_s / C_s`` — pure noise when the other gradients are 0 — and the score
    uses ``d_s − m̂ C_s`` and ``ẑ C_s``. Given the calibration runs the score is a
    fixed function of each audited run's own iterates up to the checkpoint, so the
    runs' scores stay independent and identically distributed on each side and
    :func:`epsilon_lower_bound` stays valid whatever was measured. For DP-SGD with
    Poisson sampling it is the optimal (Neyman–Pearson) test of the steps at the
    noise level the code really has (up to the ~1% error of ``ẑ``); for other
    methods a valid, not necessarily optimal, statistic.

    Parameters
    ----------
    algorithm : {"dp_sgd", "dp_gd", "dice_sgd", "adaptive"}
        Ignored when ``privatizer`` is given (then the bare loop runs with it and
        no accountant ε is reported; put the claimed ε in ``extra`` yourself).
    runs : int
        Runs per side (with / without the canary).
    sampling : {"poisson", "shuffle", "with_replacement", "full"}, optional
        Default ``"poisson"``; DP-GD always uses the full batch (``None`` or
        ``"full"``; anything else is an error, as is a ``batch_size`` other than n).
    canary_norm : float, optional
        ``G = ‖canary gradient‖``; default ``clip_norm`` (any G ≥ C is clipped to C).
    dim : int
        The model dimension p when ``theta0`` is not given (θ_0 = 0).
    base_grad_fn : callable, optional
        Batched per-example gradients of the other examples,
        ``(theta[R, p], idx[R, m]) -> [R, m, p]``; the canary's slot is overwritten.
    theta0 : Tensor[p], optional
        The common starting point (e.g. a network's initial parameters), float32 or float64.
    coordinate : int
        The parameter the canary gradient points along.
    checkpoints : ints in [1, steps], optional
        Steps at which to score (default: only ``steps``).
    accountant : {"rdp", "pld"}
        Composes the audited run's own event, ``result.dp_event()`` of the first t
        steps (its sampling scheme, DiceSGD's sensitivity, adaptive clipping's count).
    dtype : torch.float32 or torch.float64
        Of θ_0 when ``theta0`` is not given. 16-bit runs are refused: their rounding
        breaks the sensitivity argument the audit tests.
    calibration_runs : int, optional
        Canary-free runs that measure the noise level of the ``"all"`` score;
        default ``min(runs, ⌈4096 / steps⌉)`` (about 4,000 noise samples).

    Returns
    -------
    CanaryAudit
        ``extra`` holds the claimed ``noise_multiplier``, the ``observed_noise_multiplier``
        ``ẑ``, the ``sampling`` scheme and the number of ``calibration_runs``.
    """
    runs = check_int(runs, "runs", minimum=2)
    steps = check_int(steps, "steps", minimum=1)
    _check_audit_dtype(dtype, "dtype")
    if theta0 is None:
        theta0 = torch.zeros(check_int(dim, "dim", minimum=1), dtype=dtype)
    elif not isinstance(theta0, torch.Tensor) or theta0.dim() != 1 or not theta0.is_floating_point():
        raise ValueError("theta0 must be a floating-point tensor of shape [p] (one starting point for all runs)")
    _check_audit_dtype(theta0.dtype, "theta0")
    dim = theta0.numel()
    coordinate = check_int(coordinate, "coordinate")
    if coordinate >= dim:
        raise ValueError(f"coordinate must lie in [0, {dim - 1}] (the model's parameters), got {coordinate}")
    n = check_int(n, "n", minimum=1)
    C = check_positive(clip_norm, "clip_norm")
    G = C if canary_norm is None else check_positive(canary_norm, "canary_norm")
    lr = check_positive(lr, "lr")
    delta = check_open_unit(delta, "delta")        # the accountant's ε is defined for δ in (0, 1)
    confidence = check_open_unit(confidence, "confidence")
    accountant = _check_accountant(accountant)
    if privatizer is None and algorithm not in _ALGORITHMS:
        raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")
    sampling = _resolve_sampling(algorithm if privatizer is None else None, sampling, batch_size, n)
    cal_runs = (min(runs, math.ceil(4096 / steps)) if calibration_runs is None
                else check_int(calibration_runs, "calibration_runs", minimum=2))
    cal_seed = _calibration_seed(seed)
    at = _checkpoints(checkpoints, steps)
    R = 2 * runs
    in_run = torch.arange(R) < runs
    u = torch.zeros(dim, dtype=theta0.dtype)
    u[coordinate] = 1.0
    other = None if not other_gradient else other_gradient * u
    run_kw = dict(n=n, steps=steps, lr=lr, clip_norm=C, noise_multiplier=noise_multiplier, batch_size=batch_size,
                  sampling=sampling, feedback_clip_norm=feedback_clip_norm, privatizer=privatizer,
                  adaptive_kwargs=adaptive_kwargs)
    start = theta0.detach().unsqueeze(0)
    grad_fn = gradient_canary_oracle(in_run, G * u, other_gradient=other, base_grad_fn=base_grad_fn)
    iterates, history, info = _run_algorithm(algorithm, grad_fn, start.expand(R, dim).clone(), seed=seed, **run_kw)
    # calibration: canary-free runs with their own randomness measure the noise the code adds
    cal_fn = gradient_canary_oracle(torch.zeros(cal_runs, dtype=torch.bool), G * u, other_gradient=other,
                                    base_grad_fn=base_grad_fn)
    cal_iterates, cal_history, _ = _run_algorithm(algorithm, cal_fn, start.expand(cal_runs, dim).clone(),
                                                  seed=cal_seed, **run_kw)
    _, d_cal, C_cal = _steps_along(cal_iterates, cal_history, coordinate, info["b"], lr, C)
    ratio = d_cal / C_cal
    shift, z_obs = float(ratio.mean()), float(ratio.std())
    proj, d, C_t = _steps_along(iterates, history, coordinate, info["b"], lr, C)
    last = proj[:, :1] - proj[:, at]                                              # [R, K]
    llr = _mixture_llr(d - shift * C_t, torch.clamp(C_t, max=G), max(z_obs, 1e-12) * C_t,
                       info["q"]).cumsum(1)[:, at - 1]
    name = (type(privatizer).__name__ if privatizer is not None else
            {"dp_sgd": "DP-SGD", "dp_gd": "DP-GD", "dice_sgd": "DiceSGD", "adaptive": "adaptive clipping"}[algorithm])
    extra = dict(noise_multiplier=noise_multiplier, observed_noise_multiplier=z_obs, sampling=sampling,
                 sample_rate=info["q"], batch_size=info["b"], n=n, clip_norm=C, canary_norm=G,
                 calibration_runs=cal_runs)
    res = info["result"]
    if algorithm == "dice_sgd" and privatizer is None and hasattr(res, "paper_claimed_epsilon"):
        extra["paper_claimed_epsilon"] = np.array(
            [dataclasses.replace(res, steps=int(t)).paper_claimed_epsilon(delta) for t in at])
    return CanaryAudit(name, "gradient", at, {"last": last[:runs], "all": llr[:runs]},
                       {"last": last[runs:], "all": llr[runs:]}, delta, confidence,
                       _accountant_curve(info, at, delta, accountant), extra)


def input_canary_audit(X: torch.Tensor, y: torch.Tensor, loss, canary_x: torch.Tensor, canary_y: float, *,
                       runs: int, steps: int, noise_multiplier: float, batch_size: int | None,
                       sampling: str | None = None, clip_norm: float = 1.0, lr: float = 1.0,
                       algorithm: str = "dp_sgd", delta: float = 1e-5, confidence: float = 0.95,
                       checkpoints=None, seed: int = 0, accountant: str = "rdp") -> CanaryAudit:
    """Audit with an input-space canary on a generalized linear problem ``f(⟨θ, x⟩; y)``.

    Source: the input-space canaries of Jagielski, Ullman & Oprea (2020), bounded by Kairouz, Oh & Viswanath (2015), Thm 2.1.

    The data set is ``X`` plus the canary ``(canary_x, canary_y)`` as its last
    example (``n = len(X) + 1``); in the "out" runs the canary's gradient is
    zeroed. The algorithm computes the canary's gradient like any other, so its
    norm ``|f'(⟨θ, x_c⟩)| ‖x_c‖`` shrinks as the model fits it — the reason input
    canaries audit less tightly than gradient canaries. Scores:

    * ``"last"``: the canary's margin ``y_c ⟨θ_t, x_c⟩`` (a loss-based attack);
    * ``"all"``: ``Σ_s log LR(d_s)`` with ``d_s`` the step projected on the
      canary's own clipped gradient at θ_s (white-box: the auditor recomputes
      it), as in :func:`gradient_canary_audit`.

    Per-example gradients are materialized (``[2 runs, batch, p]`` per step). ``sampling``
    defaults to ``"poisson"`` (DP-GD: the full batch, and nothing else), ``X`` must be
    float32 or float64, and the accountant ε is that of the run's own ``dp_event()``, as in
    :func:`gradient_canary_audit`. The ``"all"`` score uses the lab's own noise multiplier
    (only the lab's DP-SGD and DP-GD run here, no foreign privatizer).
    """
    from .algorithms.oracles import CallableOracle

    if algorithm not in ("dp_sgd", "dp_gd"):
        raise ValueError(f"algorithm must be 'dp_sgd' or 'dp_gd' for an input canary, got {algorithm!r}")
    runs = check_int(runs, "runs", minimum=2)
    steps = check_int(steps, "steps", minimum=1)
    C = check_positive(clip_norm, "clip_norm")
    lr = check_positive(lr, "lr")
    delta = check_open_unit(delta, "delta")        # the accountant's ε is defined for δ in (0, 1)
    confidence = check_open_unit(confidence, "confidence")
    accountant = _check_accountant(accountant)
    at = _checkpoints(checkpoints, steps)
    if not (isinstance(X, torch.Tensor) and X.dim() == 2):
        raise ValueError(f"X must be a 2-D tensor [n, p], got {getattr(X, 'shape', type(X).__name__)}")
    _check_audit_dtype(X.dtype, "X")
    sampling = _resolve_sampling(algorithm, sampling, batch_size, X.shape[0] + 1)
    if torch.as_tensor(y).shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {tuple(torch.as_tensor(y).shape)}")
    if not isinstance(canary_x, torch.Tensor) or canary_x.numel() != X.shape[1]:
        raise ValueError(f"canary_x must be a tensor with p = {X.shape[1]} entries (one row of X), "
                         f"got shape {tuple(getattr(canary_x, 'shape', ()))}")
    if not bool(torch.isfinite(canary_x).all()):
        raise ValueError("canary_x must be finite; it holds NaN or inf entries")
    canary_y = check_interval(canary_y, "canary_y", -math.inf, math.inf, closed=(False, False))
    X = torch.cat([X, canary_x.reshape(1, -1).to(X)], 0)
    y = torch.cat([torch.as_tensor(y, dtype=X.dtype), torch.tensor([float(canary_y)], dtype=X.dtype)])
    n, p = X.shape
    R = 2 * runs
    member = (torch.arange(R) < runs)

    def grad_fn(theta, idx):
        if idx.dim() == 1:
            idx = idx.unsqueeze(0).expand(theta.shape[0], -1)
        Xb = X[idx]                                                     # [R, m, p]
        coef = loss.derivative(torch.einsum("rmp,rp->rm", Xb, theta), y[idx])
        coef = coef * ~((idx == n - 1) & ~member.unsqueeze(1))           # out-runs: no canary
        return coef.unsqueeze(-1) * Xb

    theta0 = torch.zeros((R, p), dtype=X.dtype)
    iterates, history, info = _run_algorithm(
        algorithm, CallableOracle(grad_fn), theta0, n=n, steps=steps, lr=lr, clip_norm=C,
        noise_multiplier=noise_multiplier, batch_size=batch_size, sampling=sampling, feedback_clip_norm=None,
        privatizer=None, seed=seed, adaptive_kwargs=None)
    xc, yc = X[-1], y[-1]
    margin = yc * (iterates @ xc)                                     # [R, T+1]
    g = loss.derivative(iterates[:, :-1] @ xc, yc).unsqueeze(-1) * xc  # canary gradient at θ_s [R, T, p]
    gn = torch.linalg.vector_norm(g, dim=-1)
    s = torch.clamp(gn, max=C)
    direction = g / gn.clamp(min=1e-300).unsqueeze(-1)
    d = ((iterates[:, :-1] - iterates[:, 1:]) * direction).sum(-1) * info["b"] / lr
    z = float(info["z"]) if info["z"] else 1e-12
    llr = _mixture_llr(d, s, z * C, info["q"]).cumsum(1)[:, at - 1]
    last = margin[:, at]
    name = {"dp_sgd": "DP-SGD", "dp_gd": "DP-GD"}.get(algorithm, algorithm)
    return CanaryAudit(name, "input", at, {"last": last[:runs], "all": llr[:runs]},
                       {"last": last[runs:], "all": llr[runs:]}, delta, confidence,
                       _accountant_curve(info, at, delta, accountant),
                       dict(noise_multiplier=noise_multiplier, sampling=sampling, sample_rate=info["q"],
                            batch_size=info["b"], n=n, clip_norm=C, canary_gradient_norm=gn[:runs]))


# =========================================================================== one-run audit
def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct guesses out of r] for an (ε, δ)-DP algorithm (Steinke, Nasr, Jagielski 2023).

    Source: Steinke, Nasr & Jagielski (2023), Alg. 1 and App. D.

    ``m`` canaries, each included independently with probability ½; the
    auditor guesses ``r`` of them (abstains on the rest). Their main theorem in
    its (ε, δ) form, as computed in their App. D::

        P[W ≥ v] ≤ P[Bin(r, p_ε) ≥ v] + 2 m δ · max_{i=1..v} P[v − i ≤ Bin(r, p_ε) < v] / i,

    with ``p_ε = e^ε / (1 + e^ε)`` (randomized response's accuracy).
    """
    from scipy.stats import binom

    m, r, v = check_int(m, "m"), check_int(r, "r"), check_int(v, "v")
    epsilon = check_nonnegative(epsilon, "epsilon")
    delta = _check_delta(delta)
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = binom.sf(v - 1, r, q)
    if delta == 0 or v == 0:
        return min(float(tail), 1.0)
    i = np.arange(1, v + 1)
    window = binom.cdf(v - 1, r, q) - binom.cdf(v - 1 - i, r, q)   # P[v − i ≤ Bin < v]
    return min(float(tail + 2 * m * delta * np.max(window / i)), 1.0)


def one_run_epsilon_lower_bound(scores, included, *, delta, confidence=0.95, guesses=None) -> float:
    """The one-run audit's lower bound on ε (Steinke, Nasr, Jagielski 2023: Alg. 1, p-value of App. D).

    Canary i was included with probability ½ (``included[i]``: booleans or 0/1; some
    canaries in and some out, anything else is refused). The auditor
    guesses "in" for the ``k_plus`` highest scores and "out" for the
    ``k_minus`` lowest, abstains on the rest, and counts correct guesses ``v``.
    The bound is the largest ε whose p-value (:func:`one_run_p_value`) is below
    ``1 − confidence``. ``guesses`` is a list of ``(k_plus, k_minus)`` pairs
    fixed in advance; the maximum over them is made valid by a Bonferroni
    correction (the p-value threshold is divided by the number of pairs).
    Default: ``[(m//10, m//10), (m//20, m//20), (m//50, m//50)]``.
    """
    s = _as_scores(scores, "scores")
    inc = _as_included(included, s.shape)
    d = _check_delta(delta)
    conf = check_open_unit(confidence, "confidence")
    m = s.size
    if guesses is None:
        guesses = [(max(m // k, 1), max(m // k, 1)) for k in (10, 20, 50)]
    order = np.argsort(s, kind="stable")
    p_thr = (1 - conf) / len(guesses)
    best = 0.0
    for kp, km in guesses:
        kp, km = check_int(kp, "k_plus"), check_int(km, "k_minus")
        if kp + km > m:
            raise ValueError(f"k_plus + k_minus must be at most m = {m}, got {kp} + {km}")
        v = int(inc[order[m - kp:]].sum() + (~inc[order[:km]]).sum()) if kp else int((~inc[order[:km]]).sum())
        r = kp + km
        if one_run_p_value(m, r, v, 0.0, d) >= p_thr:
            continue
        lo, hi = 0.0, 1.0
        while one_run_p_value(m, r, v, hi, d) < p_thr:
            lo, hi = hi, 2 * hi
            if hi > 200:
                break
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if one_run_p_value(m, r, v, mid, d) < p_thr:
                lo = mid
            else:
                hi = mid
        best = max(best, lo)
    return float(best)


def one_run_gradient_audit(*, canaries: int, steps: int, noise_multiplier: float, clip_norm: float = 1.0,
                           extra_examples: int = 0, batch_size: int | None = None, sampling: str = "full",
                           observe: str = "last", delta: float = 1e-5, confidence: float = 0.95,
                           guesses=None, seed: int = 0, accountant: str = "rdp"):
    """One DP-SGD training run with ``canaries`` gradient canaries (Steinke et al. 2023).

    Source: Steinke, Nasr & Jagielski (2023), Alg. 1.

    Canary i has gradient ``C e_i`` (model dimension = ``canaries``) and is
    included with probability ½; ``extra_examples`` more examples have gradient
    0. One run (R = 1), last iterate or all iterates observed; score_i is
    ``⟨θ_0 − θ_T, e_i⟩`` (``"last"``) or the summed per-step likelihood ratio
    on coordinate i (``"all"``).

    ``epsilon_accountant`` composes the run's own ``dp_event()`` (its sampling scheme:
    ``"full"``, ``"poisson"``, ``"shuffle"`` or ``"with_replacement"``) with ``accountant``.

    Returns
    -------
    dict with ``epsilon_lower`` (one-run bound), ``epsilon_accountant``,
    ``scores`` and ``included``.
    """
    from .accountants.calibration import make_accountant
    from .algorithms import dp_sgd

    m = check_int(canaries, "canaries", minimum=2)
    C = check_positive(clip_norm, "clip_norm")
    if observe not in ("last", "all"):
        raise ValueError(f"observe must be 'last' or 'all', got {observe!r}")
    delta = check_open_unit(delta, "delta")        # the accountant's ε is defined for δ in (0, 1)
    accountant = _check_accountant(accountant)
    gen = torch.Generator().manual_seed(check_int(seed, "seed"))
    included = torch.rand(m, generator=gen) < 0.5
    if bool(included.all()) or not bool(included.any()):
        raise ValueError(f"canaries: the random draw put all {m} canaries {'in' if bool(included.all()) else 'out'} "
                         "(the one-run audit needs some of each); use more canaries or another seed")
    n = m + check_int(extra_examples, "extra_examples")
    scale = C * included.to(torch.float64)

    def grad_fn(theta, idx):
        rows = torch.zeros((idx.numel(), m), dtype=theta.dtype)
        is_c = idx < m
        rows[is_c.nonzero().squeeze(1), idx[is_c]] = scale[idx[is_c]].to(theta.dtype)
        return rows

    res = dp_sgd(grad_fn, torch.zeros(m, dtype=torch.float64), n=n, steps=steps, lr=1.0, clip_norm=C,
                 noise_multiplier=noise_multiplier, batch_size=batch_size, sampling=sampling, seed=seed + 1,
                 progress=False)
    it = res.iterates                                                     # [T+1, m]
    if observe == "last":
        scores = it[0] - it[-1]
    else:
        d = (it[:-1] - it[1:]) * res.batch_size                          # [T, m]
        scores = _mixture_llr(d, C, noise_multiplier * C, res.sample_rate).sum(0)
    eps_acc = float(make_accountant(accountant).compose(res.dp_event()).get_epsilon(delta))
    lb = one_run_epsilon_lower_bound(scores, included, delta=delta, confidence=confidence, guesses=guesses)
    return dict(epsilon_lower=lb, epsilon_accountant=eps_acc, scores=scores, included=included)


# =========================================================================== broken on purpose
class BrokenMeanNoisePrivatizer(GaussianPrivatizer):
    """**BROKEN ON PURPOSE — not differentially private at the claimed z.** For the audit chapter.

    Source: breaks Abadi et al. (2016), Alg. 1 on purpose (noise calibrated to the mean, not the sum).

    The bug: the noise is *calibrated to the mean* (std ``σ = z C / b``, the
    right std for noise added to the average of the clipped gradients) but
    *added to the sum*, which is then divided by ``b``. The released direction
    is ``(Σ clip(g_i) + N(0, (zC/b)² I)) / b``: the noise is ``b`` times too
    small, so the real noise multiplier is ``z / b`` while the code (and its
    accountant) believe it is ``z``. A one-character slip (``/ b`` once too
    often) that no unit test of shapes or of convergence catches; an audit does.

    Never use it for training. It lives in :mod:`dpclip_lab.audit` only and is
    not exported from :mod:`dpclip_lab.algorithms`.
    """

    def noise_on_sum(self, clip_norm, batch, shape, generator, like):
        noise = super().noise_on_sum(clip_norm, batch, shape, generator, like)
        return None if noise is None else noise / batch.normalizer   # BUG (deliberate): σ = zC/b on the sum
