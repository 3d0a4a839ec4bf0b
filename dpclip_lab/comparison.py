"""Every remedy for clipping bias, side by side at one privacy level (the book's closing chapter).

A *method* here is one of the lab's algorithms with its hyperparameters and —
the point of this module — its noise **calibrated to the same (ε, δ)** with the
tightest accountant that is *valid for that method*:

===========================  ==============================================  =====================================
method key                   algorithm                                       noise and accountant
===========================  ==============================================  =====================================
``"dp_sgd"``                 DP-SGD / DPSGD-GC, clip at C                     Poisson-subsampled Gaussian, PLD
``"automatic"``              normalization to C (Bu et al. 2023)             same event as DP-SGD (‖ĝ_i‖ = C), PLD
``"pre_clip"``               pre-clip perturbation (Chen et al. §5)          same event as DP-SGD, PLD
``"adaptive"``               quantile clipping (Andrew et al. 2021)          DP-SGD's event with the *total* z, PLD
``"dice_sgd"``               DiceSGD, C1 = C2 = C (Zhang et al. Alg. 2)       T-fold Gaussian, sensitivity C1/B + 2 C2, no amplification
``"automatic_dice_sgd"``     automatic DiceSGD (Alg. 4)                      as DiceSGD with C1 = C2 = C
``"output_perturbation"``    Wang et al. Alg. 1 (convex, Lipschitz GLPs)     its own UAS calibration (Thm 7–8)
``"gradient_perturbation"``  Wang et al. Alg. 2 (convex, Lipschitz GLPs)     its own RDP calibration (Thm 11)
===========================  ==============================================  =====================================

Each method is run over a grid of clip norms × seeds as **one batched tensor
program** on a generalized linear problem (the lab's O(np) GLP oracle), twice:
once private and once with the noise switched off (same C, same batches), so
that the final excess risk splits into a *bias part* (what the noise-free
algorithm leaves) and a *noise part* (the rest). The wall-clock time of the
private sweep is recorded per run.

The module's functions:

* :func:`skewed_problem` — DiceSGD App. B.1's constant-bias data, replicated to n examples.
* :func:`calibrate` — the noise multiplier z of a method at (ε, δ), with the accountant used.
* :func:`sweep` — one method over clip norms × seeds (private and noise-free).
* :func:`compare` — several methods on one problem: a dict of :class:`MethodSweep`.
* :func:`summary_rows` — a narrow table of the results (best C, spread, bias/noise parts, time).
* :func:`tune_step_size` — one method training a network over step sizes × seeds, η chosen on a
  validation split (:class:`StepSizeSweep`; :func:`step_size_rows` tabulates several).

References
----------
Zhang et al. (2024), DiceSGD: Alg. 1, 2, 4, App. B.1.
Chen, Wu & Hong (2020), §5 (pre-clipping perturbation).
Andrew et al. (2021), adaptive (quantile) clipping.
Bu et al. (2023), automatic clipping.
Wang, Lei, Ying & Zhang (2022), Alg. 1–2.
Abadi et al. (2016), DP-SGD.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import torch

from ._validation import check_int, check_nonnegative, check_open_unit, check_positive
from .accountants import get_noise_multiplier, make_accountant
from .glp import GLProblem
from .losses import Huber
from .numbers import fmt

__all__ = ["METHODS", "GLP_ONLY", "NETWORK_METHODS", "skewed_problem", "calibrate", "sweep", "compare",
           "MethodSweep", "summary_rows", "band_traces", "NetworkSweep", "sweep_network", "compare_networks",
           "network_rows", "TUNED_METHODS", "StepSizeSweep", "tune_step_size", "step_size_rows"]

METHODS = ("dp_sgd", "automatic", "pre_clip", "adaptive", "dice_sgd", "automatic_dice_sgd",
           "output_perturbation", "gradient_perturbation")
#: Methods whose privacy analysis needs a convex, Lipschitz GLP on a bounded domain (Wang et al.).
GLP_ONLY = ("output_perturbation", "gradient_perturbation")
#: Methods that train a network (Wang et al.'s analyses need a convex Lipschitz loss, which a CNN is not).
NETWORK_METHODS = tuple(m for m in METHODS if m not in GLP_ONLY)
LABELS = {"dp_sgd": "DP-SGD (clip)", "automatic": "automatic clipping", "pre_clip": "pre-clip perturbation",
          "adaptive": "adaptive quantile", "dice_sgd": "DiceSGD", "automatic_dice_sgd": "automatic DiceSGD",
          "output_perturbation": "output perturbation", "gradient_perturbation": "gradient perturbation"}


def skewed_problem(copies: int = 1000, c_prime: int = 2, *, dtype=torch.float64, device=None) -> GLProblem:
    """Zhang et al. (2024), App. B.1, replicated: ``copies`` × (``c_prime`` points at −1, one at ``c_prime``).

    Per-example loss: Huber of ``x − ξ_i`` with threshold ``C' = c_prime`` (gradient
    ``clip(x − ξ_i, −C', C')``, so every gradient has norm ≤ C'; ``‖x_i‖ = 1``).
    The minimizer is ``x* = 0``; clipped (S)GD with ``C ≤ C'`` has the fixed point
    ``C/C' − 1`` (:func:`dpclip_lab.data.dice_constant_bias` is the ``copies=1``
    case). Replication keeps the proportions and makes ``n = copies (C' + 1)``
    large enough for private training.
    """
    copies = check_int(copies, "copies", minimum=1)
    cp = check_int(c_prime, "c_prime", minimum=1)
    xi = torch.tensor(([-1.0] * cp + [float(cp)]) * copies, dtype=dtype, device=device)
    return GLProblem(torch.ones_like(xi).unsqueeze(1), xi, Huber(delta=float(cp)))


def _dicesgd_noise_multiplier(*args, **kwargs):
    # ``dpclip_lab.algorithms.dice_sgd`` the attribute is the function; import the module's helper by path.
    from .algorithms.dice_sgd import dicesgd_noise_multiplier
    return dicesgd_noise_multiplier(*args, **kwargs)


def calibrate(method: str, *, epsilon: float, delta: float, n: int, steps: int, batch_size: int,
              accountant: str = "pld") -> tuple[float, str]:
    """Noise multiplier z that makes ``method`` (ε, δ)-DP, and the accountant that certifies it.

    DP-SGD, automatic clipping, pre-clip perturbation and adaptive clipping are the
    Poisson-subsampled Gaussian mechanism (rate ``batch_size / n``) with multiplier
    z (``accountant``: ``"pld"`` is tight). DiceSGD and automatic DiceSGD get
    :func:`dpclip_lab.algorithms.dice_sgd.dicesgd_noise_multiplier` with C1 = C2
    (T-fold Gaussian at sensitivity C1/B + 2 C2 on the averaged direction, no
    amplification by sampling) — not Thm 3.8's closed form, which is not a valid
    bound in the worst case. Wang et al.'s methods calibrate themselves from
    (ε, δ); for them this returns ``(nan, "own calibration")``.

    Memoized (a calibration is a pure function of its arguments and costs about a
    second with PLD); methods that share a privacy event share one calibration.
    References: Abadi et al. (2016), Alg. 1 (moments accountant); Mironov (2017) (RDP);
    Zhang et al. (2024), Alg. 2 and 4, with the sensitivity of
    :func:`dpclip_lab.algorithms.dice_sgd.dicesgd_sensitivity` instead of Thm 3.8.
    """
    eps = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    n = check_int(n, "n", minimum=1)
    T = check_int(steps, "steps", minimum=1)
    b = check_int(batch_size, "batch_size", minimum=1)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    # One calibration per family of methods that share a privacy event.
    family = method if method in GLP_ONLY else ("dice_sgd" if method in ("dice_sgd", "automatic_dice_sgd")
                                                else "dp_sgd")
    return _calibrate_cached(family, eps, d, n, T, b, accountant)


@functools.lru_cache(maxsize=256)
def _calibrate_cached(family, eps, d, n, T, b, accountant):
    return _calibrate(family, epsilon=eps, delta=d, n=n, steps=T, batch_size=b, accountant=accountant)


def _calibrate(method: str, *, epsilon: float, delta: float, n: int, steps: int, batch_size: int,
               accountant: str = "pld") -> tuple[float, str]:
    """Uncached :func:`calibrate` (arguments already validated by it)."""
    eps = check_positive(epsilon, "epsilon")
    d = check_open_unit(delta, "delta")
    n = check_int(n, "n", minimum=1)
    T = check_int(steps, "steps", minimum=1)
    b = check_int(batch_size, "batch_size", minimum=1)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method in GLP_ONLY:
        return float("nan"), "own calibration (Wang et al.)"
    if method in ("dice_sgd", "automatic_dice_sgd"):
        z = _dicesgd_noise_multiplier(eps, d, T, clip_norm=1.0, feedback_clip_norm=1.0, batch_size=b,
                                             accountant=accountant)
        return float(z), f"{accountant}, T-fold Gaussian, sensitivity C1/B + 2 C2"
    z = get_noise_multiplier(target_epsilon=eps, target_delta=d, sample_rate=min(1.0, b / n), steps=T,
                             accountant=accountant)
    return float(z), f"{accountant}, Poisson-subsampled Gaussian"


@dataclass
class MethodSweep:
    """Lab utility: one method on one problem: final excess risk ``[C, seeds]`` private and noise-free."""

    method: str
    clip_norms: torch.Tensor            # [C] (a single NaN for methods without a clip norm)
    excess: torch.Tensor                # [C, seeds], private
    excess_free: torch.Tensor           # [C, seeds], same runs without privacy noise
    noise_multiplier: float
    accountant: str
    epsilon_spent: float                # ε of the private runs at delta, from their own record
    seconds_per_run: float
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS[self.method]

    @property
    def best(self) -> int:
        """Index of the clip norm with the smallest mean private excess risk."""
        return int(self.excess.mean(1).argmin())

    def at(self, i: int | None = None) -> dict:
        """Mean, 25% and 75% quantiles of the excess risk at clip-norm index i (default: best)."""
        i = self.best if i is None else i
        e, f = self.excess[i], self.excess_free[i]
        return {"C": float(self.clip_norms[i]), "mean": float(e.mean()), "q25": float(e.quantile(0.25)),
                "q75": float(e.quantile(0.75)), "bias": float(f.mean()), "noise": float(e.mean() - f.mean())}


def _excess(problem, theta, f_star):
    return problem.objective(theta) - f_star


def sweep(method: str, problem: GLProblem, *, epsilon: float, delta: float, steps: int, lr: float,
          batch_size: int, clip_norms, seeds: int, f_star: float, radius: float | None = None,
          pre_clip_std: float = 0.0, target_quantile: float = 0.5, wang_steps: int | None = None,
          wang_lr: float | None = None, feature_bound: float = 1.0, label_bound: float | None = None,
          accountant: str = "pld", seed: int = 0) -> MethodSweep:
    """Run ``method`` over ``clip_norms × seeds`` (one batched call), private and noise-free.

    The methods of :data:`METHODS`: Abadi et al. (2016), Alg. 1 (DP-SGD); Bu et al. (2023),
    automatic clipping (normalization); Chen, Wu & Hong (2020), §5
    (pre-clip perturbation); Andrew et al. (2021) (quantile clipping); Zhang
    et al. (2024), Alg. 2 and 4 (DiceSGD); Wang et al. (2022), Alg. 1–2.

    Parameters
    ----------
    method : one of :data:`METHODS`
    problem : GLProblem
        With ``‖x_i‖ ≤ 1`` for Wang et al.'s methods (they get ``feature_bound=1``).
    epsilon, delta : float
        The common privacy level.
    steps, lr, batch_size : int, float, int
        T, η and the expected (Poisson) batch size, shared by all
        clipping methods; ``wang_steps``/``wang_lr`` for Wang et al.'s (batch 1;
        default ``n`` steps and ``min(lr, 0.5)``).
    clip_norms : sequence of float
        C grid (C1 = C2 = C for DiceSGD; the initial C for adaptive clipping).
        Ignored by Wang et al.'s methods.
    seeds : int
        Independent runs per clip norm.
    f_star : float
        The optimal objective value (excess risk = objective − f_star).
    radius : float, optional
        Projection radius (required for Wang et al.'s methods; used by all if given).
    pre_clip_std, target_quantile : float
        The knobs of pre-clip perturbation and adaptive clipping.
    feature_bound, label_bound : float
        Stated bounds on ``‖x‖`` and ``|y|`` over the data domain, which
        Wang et al.'s calibrations need (the lab's data sets have ``‖x‖ ≤ 1``).

    Returns
    -------
    MethodSweep
    """
    from . import algorithms as A

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    seeds = check_int(seeds, "seeds", minimum=1)
    n, p = problem.X.shape
    theta0 = torch.zeros(p, dtype=problem.X.dtype, device=problem.X.device)
    project = None if radius is None else A.project_l2_ball(radius)
    z, acc_name = calibrate(method, epsilon=epsilon, delta=delta, n=n, steps=steps, batch_size=batch_size,
                            accountant=accountant)
    if method in GLP_ONLY:
        if radius is None:
            raise ValueError(f"{method} needs radius= (Wang et al. analyse a bounded domain)")
        Tw = n if wang_steps is None else check_int(wang_steps, "wang_steps", minimum=1)
        lw = min(lr, 0.5) if wang_lr is None else check_positive(wang_lr, "wang_lr")
        start = theta0.expand(seeds, p)
        fn = A.dp_sgd_output_perturbation if method == "output_perturbation" else A.dp_sgd_gradient_perturbation
        t0 = time.perf_counter()
        res = fn(problem, start, n=n, steps=Tw, lr=lw, epsilon=epsilon, delta=delta, radius=radius,
                 feature_bound=feature_bound, label_bound=label_bound, seed=seed, keep_iterates=False,
                 progress=False)
        secs = (time.perf_counter() - t0) / seeds
        if method == "output_perturbation":
            free_theta = res.extra["nonprivate_average"]
        else:  # the same projected SGD with the noise switched off (G ≥ every gradient: no clipping)
            G = res.extra["gradient_bound"]
            free = A.dp_sgd(problem, start, n=n, steps=Tw, lr=lw, clip_norm=G, noise_multiplier=0.0, batch_size=1,
                            sampling="with_replacement", project=project, average=True, seed=seed,
                            keep_iterates=True, progress=False)
            free_theta = free.theta + (start - free.iterates[..., -1, :]) / Tw  # average w_1..w_T, as Alg. 2
        eps_spent = _epsilon_of(res, delta, accountant)
        exc = _excess(problem, res.theta, f_star).reshape(1, seeds)
        exc_free = _excess(problem, free_theta, f_star).reshape(1, seeds)
        return MethodSweep(method, torch.tensor([float("nan")]), exc, exc_free, float("nan"), acc_name,
                           eps_spent, secs, extra={"steps": Tw, "lr": lw})

    Cs = torch.as_tensor(clip_norms, dtype=problem.X.dtype).reshape(-1)
    grid = A.sweep_grid(Cs, seeds, dtype=problem.X.dtype, device=problem.X.device)
    common = dict(n=n, steps=steps, lr=lr, batch_size=batch_size, seed=seed, keep_iterates=False, progress=False)

    def go(noise):
        if method in ("dp_sgd", "automatic", "pre_clip"):
            return A.dp_sgd(problem, theta0, clip_norm=grid, noise_multiplier=noise, project=project,
                            normalize=(method == "automatic"),
                            pre_clip_std=pre_clip_std if method == "pre_clip" else 0.0, **common)
        if method == "adaptive":
            return A.dp_sgd_adaptive_clipping(problem, theta0.expand(len(grid), p), initial_clip_norm=grid,
                                              noise_multiplier=noise, target_quantile=target_quantile,
                                              project=project, **common)
        if method == "dice_sgd":
            return A.dice_sgd(problem, theta0, clip_norm=grid, feedback_clip_norm=grid, noise_multiplier=noise,
                              project=project, **common)
        # γ = 1e-3 (Bu et al.'s stability constant, g/(‖g‖ + γ)): without a projection a very noisy run
        # reaches margins where the logistic derivative underflows and g/‖g‖ would be 0·inf.
        return A.automatic_dice_sgd(problem, theta0.expand(len(grid), p), clip_norm=1.0, noise_multiplier=noise,
                                    stability=1e-3, project=project, **dict(common, lr=grid * lr))

    t0 = time.perf_counter()
    res = go(z)
    secs = (time.perf_counter() - t0) / len(grid)
    free = go(0.0)
    theta, theta_free = res.theta, free.theta
    exc = _excess(problem, theta, f_star).reshape(len(Cs), seeds)
    exc_free = _excess(problem, theta_free, f_star).reshape(len(Cs), seeds)
    return MethodSweep(method, Cs, exc, exc_free, z, acc_name, _epsilon_of(res, delta, accountant), secs)


_EPS_CACHE: dict = {}


def _epsilon_of(res, delta, accountant):
    """ε of a finished run from its own privacy record (the number a reader can check).

    Memoized on the event's ``repr`` (events are plain immutable records): sweeps of
    several methods with the same privacy event pay for one accountant composition.
    """
    ev = res.dp_event()
    key = (repr(ev), float(delta), accountant)
    if key not in _EPS_CACHE:
        _EPS_CACHE[key] = _epsilon_of_event(ev, delta, accountant)
    return _EPS_CACHE[key]


def _epsilon_of_event(ev, delta, accountant):
    from .accountants import EpsilonDeltaEvent
    if isinstance(ev, EpsilonDeltaEvent):
        if ev.delta > delta * (1 + 1e-9):
            return float("inf")
        return float(ev.epsilon)
    try:
        return float(make_accountant(accountant).compose(ev).get_epsilon(delta))
    except ValueError:  # e.g. PLD has no sampling-without-replacement event (Wang et al. Alg. 2): RDP does
        return float(make_accountant("rdp").compose(ev).get_epsilon(delta))


def compare(problem, methods, *, f_star, **kwargs) -> dict:
    """Lab utility: ``{method: MethodSweep}`` for each of ``methods`` (keyword arguments go to :func:`sweep`).

    ``methods`` may be a sequence of keys or a mapping ``key -> dict`` of
    per-method overrides (e.g. ``{"pre_clip": {"pre_clip_std": 0.05}}``).
    """
    items = methods.items() if isinstance(methods, dict) else ((m, {}) for m in methods)
    return {m: sweep(m, problem, f_star=f_star, **{**kwargs, **over}) for m, over in items}


def summary_rows(results: dict, *, small: int | None = 0, digits: int = 3):
    """Lab utility: rows for a narrow table: method, best C, mean [IQR] excess risk, bias, noise part, ε, ms/run.

    ``small``: also a row for DP-SGD at clip-norm index ``small`` (a too-small C); None skips it.
    """
    f = lambda v: f"{v:.{digits}g}"  # noqa: E731
    rows = []
    for key, r in results.items():
        picks = [(r.label, None)]
        if key == "dp_sgd" and small is not None:
            picks.append((f"{r.label}, too small C", small))
        for name, i in picks:
            a = r.at(i)
            C = "—" if math.isnan(a["C"]) else f(a["C"])
            rows.append((name, C, f"{f(a['mean'])} [{f(a['q25'])}, {f(a['q75'])}]", f(a["bias"]), f(a["noise"]),
                         f"{r.epsilon_spent:.2f}", f"{1000 * r.seconds_per_run:.1f}"))
    return rows


def band_traces(x, Y, color: str, name: str, *, legend: bool = True, axes=("x", "y"), marker: bool = True,
                legendgroup: str | None = None):
    """Lab utility: mean line and interquartile band of ``Y [len(x), seeds]`` as three plotly traces."""
    import plotly.graph_objects as go

    Y = torch.as_tensor(Y, dtype=torch.float64)
    lo, hi = Y.quantile(0.25, dim=1), Y.quantile(0.75, dim=1)
    xs, ax = [float(v) for v in x], dict(xaxis=axes[0], yaxis=axes[1])
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    grp = dict(legendgroup=legendgroup or name)
    return [go.Scatter(x=xs, y=hi.tolist(), mode="lines", line=dict(width=0), showlegend=False,
                       hoverinfo="skip", **ax, **grp),
            go.Scatter(x=xs, y=lo.tolist(), mode="lines", line=dict(width=0), fill="tonexty",
                       fillcolor=f"rgba({r},{g},{b},0.18)", showlegend=False, hoverinfo="skip", **ax, **grp),
            go.Scatter(x=xs, y=Y.mean(1).tolist(), mode="lines+markers" if marker else "lines", name=name,
                       showlegend=legend, line=dict(color=color, width=3), marker=dict(size=5), **ax, **grp)]


# ---------------------------------------------------------------------------------------------
# The same comparison on a small network (the digits CNN column of the closing chapter)
# ---------------------------------------------------------------------------------------------
@dataclass
class NetworkSweep:
    """Lab utility: one method training a network over clip norms × seeds: test accuracy and loss ``[C, seeds]``."""

    method: str
    clip_norms: torch.Tensor            # [C]
    accuracy: torch.Tensor              # [C, seeds], test accuracy of the released model
    loss: torch.Tensor                  # [C, seeds], test loss
    noise_multiplier: float
    accountant: str
    epsilon_spent: float                # ε of the runs at delta, from their own record
    seconds_per_run: float

    @property
    def label(self) -> str:
        return LABELS[self.method]

    @property
    def best(self) -> int:
        """Index of the clip norm with the largest mean test accuracy."""
        return int(self.accuracy.mean(1).argmax())

    def at(self, i: int | None = None) -> dict:
        """Mean, min, max and std over seeds of the test accuracy at clip-norm index i (default: best)."""
        i = self.best if i is None else i
        a = self.accuracy[i].double()
        return {"C": float(self.clip_norms[i]), "mean": float(a.mean()), "min": float(a.min()),
                "max": float(a.max()), "std": float(a.std()) if a.numel() > 1 else 0.0}


def sweep_network(method: str, make_model, loss_fn, data, *, epsilon: float, delta: float, steps: int, lr: float,
                  batch_size: int, clip_norms, seeds: int, optimizer: str = "adam", pre_clip_std: float = 0.0,
                  target_quantile: float = 0.5, accountant: str = "pld", seed: int = 0) -> NetworkSweep:
    """Train ``seeds`` copies of ``make_model()`` per clip norm with ``method``, as one batched program.

    The clipping methods of :func:`sweep` (Abadi et al. (2016) Alg. 1; Bu et al. (2023)
    normalization; Chen, Wu & Hong (2020) §5 pre-clip perturbation; Andrew et al. (2021)
    quantile clipping; Zhang et al. (2024) Alg. 2–4) on a network: the
    ``len(clip_norms) × seeds`` models are rows of one ``θ [R, p]`` and their
    per-example gradients come from :func:`dpclip_lab.batched_modules.batched_grad_fn`
    (``torch.func.vmap`` over runs and examples). Seed ``s`` of every clip norm starts
    from the same initialization (``torch.manual_seed(s)``), so a difference between
    clip norms is not a difference of initial weights. Noise from :func:`calibrate`
    at (ε, δ); ``epsilon_spent`` from the runs' own record.

    Automatic clipping and automatic DiceSGD normalize to norm C (C1 = C2 = C): with
    Adam this is invariant to C, with SGD it is the step size C absorbs in Alg. 4.
    Wang et al.'s methods are not offered (:data:`GLP_ONLY`: their privacy needs a
    convex Lipschitz loss). No noise-free twin is run here (unlike :func:`sweep`).

    Parameters
    ----------
    method : one of :data:`NETWORK_METHODS`
    make_model : callable () -> nn.Module
        A fresh model (default initialization drawn from the global generator).
    loss_fn : callable (outputs, targets) -> scalar
    data : tuple (X_train, y_train, X_test, y_test)
    epsilon, delta, steps, lr, batch_size, optimizer
        As in :func:`sweep` (``optimizer="adam"`` is Alg. 3 for DiceSGD).
    clip_norms : sequence of float
    seeds : int
    pre_clip_std, target_quantile : float
        The knobs of pre-clip perturbation and adaptive clipping.

    Returns
    -------
    NetworkSweep
    """
    from . import algorithms as A
    from .batched_modules import batched_evaluate, batched_grad_fn, stacked_init

    if method not in NETWORK_METHODS:
        raise ValueError(f"method must be one of {NETWORK_METHODS} for a network, got {method!r}")
    seeds = check_int(seeds, "seeds", minimum=1)
    if not (isinstance(data, (tuple, list)) and len(data) == 4):
        raise TypeError("data must be a tuple (X_train, y_train, X_test, y_test)")
    X, y, Xte, yte = data
    model = make_model()
    n = check_int(X.shape[0], "n", minimum=1)
    grad_fn = batched_grad_fn(model, loss_fn, X, y)
    dtype = next(model.parameters()).dtype
    Cs = torch.as_tensor(clip_norms, dtype=torch.float64).reshape(-1)
    grid = A.sweep_grid(Cs, seeds, dtype=dtype)
    theta0 = stacked_init(make_model, range(seeds)).to(dtype).repeat(len(Cs), 1)      # run r: seed r % seeds
    z, acc_name = calibrate(method, epsilon=epsilon, delta=delta, n=n, steps=steps, batch_size=batch_size,
                            accountant=accountant)
    common = dict(n=n, steps=steps, lr=lr, batch_size=batch_size, optimizer=optimizer, seed=seed,
                  keep_iterates=False, progress=False)
    grad_fn(theta0[:2], torch.zeros((2, 1), dtype=torch.long))  # warm-up (first vmap call), not timed
    t0 = time.perf_counter()
    if method in ("dp_sgd", "automatic", "pre_clip"):
        res = A.dp_sgd(grad_fn, theta0, clip_norm=grid, noise_multiplier=z, normalize=(method == "automatic"),
                       pre_clip_std=pre_clip_std if method == "pre_clip" else 0.0, **common)
    elif method == "adaptive":
        res = A.dp_sgd_adaptive_clipping(grad_fn, theta0, initial_clip_norm=grid, noise_multiplier=z,
                                         target_quantile=target_quantile, **common)
    else:
        res = A.dice_sgd(grad_fn, theta0, clip_norm=grid, feedback_clip_norm=grid, noise_multiplier=z,
                         normalize=(method == "automatic_dice_sgd"),
                         stability=1e-3 if method == "automatic_dice_sgd" else 0.0, **common)
    secs = (time.perf_counter() - t0) / len(grid)
    loss, acc = batched_evaluate(model, res.theta, loss_fn, Xte, yte)
    return NetworkSweep(method, Cs, acc.reshape(len(Cs), seeds), loss.reshape(len(Cs), seeds), z, acc_name,
                        _epsilon_of(res, delta, accountant), secs)


def compare_networks(make_model, loss_fn, data, methods, **kwargs) -> dict:
    """Lab utility: ``{method: NetworkSweep}`` for each of ``methods`` (keys or a mapping key -> overrides)."""
    items = methods.items() if isinstance(methods, dict) else ((m, {}) for m in methods)
    return {m: sweep_network(m, make_model, loss_fn, data, **{**kwargs, **over}) for m, over in items}


def network_rows(results: dict, *, small: int | None = 0):
    """Lab utility: rows (method, best C, mean [min, max] accuracy %, accuracy at the smallest C, ε, ms/run)."""
    rows = []
    for key, r in results.items():
        a = r.at()
        lo = r.at(small) if small is not None else None
        rows.append((r.label, fmt(a['C']), f"{100 * a['mean']:.1f} [{100 * a['min']:.1f}, {100 * a['max']:.1f}]",
                     "—" if lo is None else f"{100 * lo['mean']:.1f} (C = {fmt(lo['C'])})",
                     f"{r.epsilon_spent:.2f}", f"{1000 * r.seconds_per_run:.0f}"))
    return rows


# ---------------------------------------------------------------------------------------------
# Step size tuned per method on a validation split (DiceSGD in practice, Part IV)
# ---------------------------------------------------------------------------------------------
#: Methods of :func:`tune_step_size`: noise-free training, DPSGD-GC and DiceSGD (C1 = C2 = C).
TUNED_METHODS = ("nonprivate", "dp_sgd", "dice_sgd")


@dataclass
class StepSizeSweep:
    """Lab utility: one method trained over a step-size grid × seeds; η is chosen on validation accuracy.

    ``validation`` and ``test`` hold the accuracy ``[len(lrs), seeds]`` of the same runs on the
    two held-out sets. :attr:`best` picks the η with the largest *validation* mean, so the
    test accuracy at :attr:`best` (:attr:`accuracy`) is not selected on the test set.
    """

    method: str
    lrs: torch.Tensor                   # [L]
    validation: torch.Tensor            # [L, seeds], validation accuracy
    test: torch.Tensor                  # [L, seeds], test accuracy
    clip_norm: float | None
    noise_multiplier: float
    epsilon_spent: float                # ε at delta from one run's own record (inf without noise)
    seconds_per_run: float

    @property
    def best(self) -> int:
        """Index of the step size with the largest mean validation accuracy."""
        return int(self.validation.mean(1).argmax())

    @property
    def lr(self) -> float:
        """The chosen step size η."""
        return float(self.lrs[self.best])

    @property
    def accuracy(self) -> torch.Tensor:
        """Test accuracy ``[seeds]`` at the chosen step size."""
        return self.test[self.best].double()

    @property
    def mean(self) -> float:
        """Mean test accuracy over seeds at the chosen step size."""
        return float(self.accuracy.mean())

    @property
    def se(self) -> float:
        """Standard error of :attr:`mean` (sample standard deviation over seeds / √seeds)."""
        a = self.accuracy
        return float(a.std() / math.sqrt(a.numel())) if a.numel() > 1 else float("nan")


def tune_step_size(method: str, make_model, loss_fn, train, validation, test, *, lrs, seeds: int, steps: int,
                   batch_size: int, clip_norm: float | None = None, noise_multiplier: float = 0.0,
                   optimizer: str = "adam", delta: float = 1e-5, accountant: str = "rdp") -> StepSizeSweep:
    """Train ``len(lrs) × seeds`` copies of ``make_model()`` with ``method``, as one batched program.

    Zhang et al. (2024), §4's comparison made fair in step size: DPSGD-GC (Alg. 1;
    Abadi et al. (2016), Alg. 1), DiceSGD (Alg. 2, Alg. 3 with ``optimizer="adam"``;
    C1 = C2 = ``clip_norm``) or noise-free training (``"nonprivate"``: no clipping, no
    noise), each at every step size of ``lrs``, with the same number of ``steps``
    and Poisson batches of expected size ``batch_size``. The step size is chosen by
    validation accuracy (:attr:`StepSizeSweep.best`); the paper grid-searches η but does
    not say on which data. The search over ``lrs`` is not accounted for privacy.

    Run ``r`` has step size ``lrs[r // seeds]`` and seed ``s = r % seeds``: it starts from
    ``torch.manual_seed(s)``'s initialization and draws its batches and noise from seed
    ``s`` (``seed=range(seeds)``, :class:`dpclip_lab.sampling.SeedGroups`), so the step
    sizes are compared on common random numbers. The noise multiplier is the
    caller's (``noise_multiplier``: σ = z C / B on the averaged direction, for both
    methods), so that a run can be set by a valid bound or by a paper's claim;
    ``epsilon_spent`` is what a valid accountant certifies from the run's own record
    (:meth:`dpclip_lab.algorithms.DiceSGDResult.dp_event` for DiceSGD) for **one** run
    released alone; choosing η by comparing runs that share their noise is not covered
    (:meth:`dpclip_lab.algorithms.DPResult.joint_dp_event`).

    Parameters
    ----------
    method : one of :data:`TUNED_METHODS`
    make_model : callable () -> nn.Module
    loss_fn : callable (outputs, targets) -> scalar
    train, validation, test : tuples (inputs, targets)
    lrs : sequence of float
        The step-size grid.
    seeds : int
    steps, batch_size : int
        T and the expected batch size B.
    optimizer : {"adam", "sgd"}
    clip_norm : float
        C (C1 = C2 for DiceSGD); required for the private methods, ignored by ``"nonprivate"``.
    noise_multiplier : float
        z; must be 0 for ``"nonprivate"``.
    delta, accountant
        For ``epsilon_spent``.

    Returns
    -------
    StepSizeSweep
    """
    from . import algorithms as A
    from .batched_modules import batched_evaluate, batched_grad_fn, stacked_init

    if method not in TUNED_METHODS:
        raise ValueError(f"method must be one of {TUNED_METHODS}, got {method!r}")
    seeds = check_int(seeds, "seeds", minimum=1)
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    if method == "nonprivate":
        if z != 0:
            raise ValueError(f"method 'nonprivate' has no noise: noise_multiplier must be 0, got {noise_multiplier!r}")
        C = None
    else:
        if clip_norm is None:
            raise ValueError(f"method {method!r} needs a clip_norm")
        C = check_positive(clip_norm, "clip_norm")
    for name, d in (("train", train), ("validation", validation), ("test", test)):
        if not (isinstance(d, (tuple, list)) and len(d) == 2):
            raise TypeError(f"{name} must be a tuple (inputs, targets)")
    (X, y), (Xv, yv), (Xte, yte) = train, validation, test
    try:
        lr_grid = torch.as_tensor(lrs, dtype=torch.float64).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"lrs must be a sequence of positive step sizes, got {lrs!r}") from None
    if lr_grid.numel() == 0 or not bool(((lr_grid > 0) & torch.isfinite(lr_grid)).all()):
        raise ValueError(f"lrs must be a non-empty sequence of finite positive step sizes, got {lrs!r}")
    model = make_model()
    dtype = next(model.parameters()).dtype
    n = check_int(X.shape[0], "n", minimum=1)
    grad_fn = batched_grad_fn(model, loss_fn, X, y)
    L = lr_grid.numel()
    theta0 = stacked_init(make_model, range(seeds)).to(dtype).repeat(L, 1)          # run r: seed r % seeds
    lr = lr_grid.to(dtype).repeat_interleave(seeds)                                   # run r: lrs[r // seeds]
    common = dict(n=n, steps=steps, lr=lr, batch_size=batch_size, optimizer=optimizer, seed=range(seeds),
                  keep_iterates=False, progress=False)
    grad_fn(theta0[:2], torch.zeros((2, 1), dtype=torch.long))  # warm-up (first vmap call), not timed
    t0 = time.perf_counter()
    if method == "dice_sgd":
        res = A.dice_sgd(grad_fn, theta0, clip_norm=C, feedback_clip_norm=C, noise_multiplier=z, **common)
    else:
        res = A.dp_sgd(grad_fn, theta0, clip_norm=C, noise_multiplier=z, **common)
    secs = (time.perf_counter() - t0) / len(lr)
    acc_v = batched_evaluate(model, res.theta, loss_fn, Xv, yv)[1].reshape(L, seeds)
    acc_t = batched_evaluate(model, res.theta, loss_fn, Xte, yte)[1].reshape(L, seeds)
    eps = float("inf") if z == 0 else _epsilon_of(res, delta, accountant)
    return StepSizeSweep(method, lr_grid, acc_v, acc_t, C, z, eps, secs)


def step_size_rows(results: dict, *, digits: int = 1):
    """Lab utility: rows (arm, z, certified ε, chosen η, validation %, test % mean ± SE) of ``{name: StepSizeSweep}``."""
    rows = []
    for name, r in results.items():
        v = 100 * float(r.validation[r.best].mean())
        rows.append((name, "—" if r.noise_multiplier == 0 else fmt(r.noise_multiplier),
                     "∞ (no noise)" if math.isinf(r.epsilon_spent) else fmt(r.epsilon_spent), fmt(r.lr, "g"),
                     f"{v:.{digits}f}", f"{100 * r.mean:.{digits}f} ± {100 * r.se:.{digits}f}"))
    return rows
