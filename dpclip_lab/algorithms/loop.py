"""The one loop every algorithm of the lab runs.

A DP first-order method is a composition (house style, STYLE.md)::

    for t in range(T):
        batch     = sampler.sample(t)                         # sampling
        direction = privatizer(oracle, θ_t, batch, state)     # per-example grads → clip, noise, feedback
        θ_{t+1}   = Π(update.step(θ_t, direction, lr_t))      # SGD / Adam, then projection
    release(θ_0, …, θ_T)                                       # last, average, noisy, selected

:func:`run` is that loop, for ``R`` runs at once (a leading "runs" dimension on
θ; clip norms and learning rates may differ per run, noise and batches are
drawn independently per run from one generator). The algorithms in this
package only choose the parts and build a :class:`DPResult`.

Randomness comes only from ``seed``: a ``torch.Generator`` on θ_0's device. The
same seed gives the same result. A batched run (R runs, seed s) draws all runs'
noise from one stream, so its run r is *not* bitwise equal to a single run with
seed s — statistically it is the same algorithm. A *sequence* of k seeds
(:class:`dpclip_lab.sampling.SeedGroups`) gives each seed its own stream, shared by
runs ``s, s + k, s + 2k, …``: each of those runs draws exactly what a single run with
that seed draws, so a sweep ``clip_norm=sweep_grid(Cs, k), seed=range(k)`` returns the
runs of the loop ``for C in Cs: for s in range(k): dp_sgd(..., clip_norm=C, seed=s)``,
up to floating-point summation order. Runs that share a seed share their batches, which
an oracle may exploit (the GLP oracle gathers each distinct batch once).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import os
import warnings

import torch

from .._validation import as_clip_norm, check_finite_tensor, check_int
from ..sampling import Sampler, SeedGroups, batch_stream, events, sampling_event
from .oracles import as_oracle
from .updates import make_update

__all__ = ["run", "Trajectory", "DPResult", "make_generator", "sweep_grid", "LowPrecisionPrivacyWarning"]


#: Why a 16-bit run breaks its privacy record (the loop's warning and the audit's refusal say it alike).
LOW_PRECISION_REASON = ("in 16-bit arithmetic a clipped gradient's norm can round above C, sums and noise lose "
                        "digits, and adaptive clipping's unclipped count moves in steps of 2-4 past 256, so the "
                        "sensitivity the accountant uses is not guaranteed")


class LowPrecisionPrivacyWarning(UserWarning):
    """Lab utility: a private run in float16 or bfloat16, where rounding can break the sensitivity its privacy record assumes."""


def make_generator(seed, device) -> torch.Generator:
    """Lab utility: a ``torch.Generator`` on ``device`` seeded with ``seed`` (fresh entropy if None)."""
    if is_seed_sequence(seed):
        raise TypeError(f"seed must be one integer here, got {seed!r}; a sequence of seeds (one random stream "
                        "per seed, shared by runs) is taken by the iterative methods built on run() "
                        "(dp_sgd, dp_gd, dice_sgd, ...)")
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    elif isinstance(seed, torch.Generator):
        return seed
    else:
        gen.manual_seed(check_int(seed, "seed"))
    return gen


def is_seed_sequence(seed) -> bool:
    """Lab utility: True for several seeds (a list, tuple, range, 1-D tensor or array, or a :class:`SeedGroups`)."""
    return isinstance(seed, (list, tuple, range, SeedGroups)) or getattr(seed, "ndim", 0) == 1


def _seed_groups(seed, device) -> SeedGroups | None:
    """A :class:`SeedGroups` for a sequence of seeds; None for one seed (or None)."""
    if isinstance(seed, SeedGroups):
        return seed
    return SeedGroups(seed, device) if is_seed_sequence(seed) else None


def _grouped_runs(runs: int, k: int, theta0) -> int:
    """The number of runs with ``k`` seeds: R from the other inputs (a multiple of k), or k when they give one run."""
    if runs == 1 and (theta0.dim() == 1 or theta0.shape[0] == 1):
        return k
    if runs % k:
        raise ValueError(f"seed: with {k} seeds the number of runs must be a multiple of {k} (run r uses "
                         f"seed[r % {k}], the layout of sweep_grid(clip_norms, {k})); the other inputs give {runs} runs")
    return runs


def sweep_grid(clip_norms, n_seeds: int, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """Lab utility: clip norms for a batched sweep: each of ``clip_norms`` repeated ``n_seeds`` times.

    ``dp_sgd(..., clip_norm=sweep_grid(Cs, 16))`` runs ``len(Cs) × 16`` runs as one
    tensor program; reshape results as ``[len(Cs), 16, ...]``. Add ``seed=range(16)`` and
    run ``16 c + s`` is the single run with clip norm ``Cs[c]`` and seed ``s`` (the runs of
    one seed share batches and noise: :class:`dpclip_lab.sampling.SeedGroups`).
    """
    k = check_int(n_seeds, "n_seeds", minimum=1)
    if clip_norms is None or isinstance(clip_norms, (str, bytes)):
        raise TypeError(f"clip_norms must be a sequence or tensor of positive numbers, got {clip_norms!r}")
    try:
        c = torch.as_tensor(clip_norms, dtype=dtype, device=device).reshape(-1)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"clip_norms must be a sequence or tensor of positive numbers: {err}") from None
    as_clip_norm(c, c, "clip_norms")  # positive and finite (in dtype), at least one
    return c.repeat_interleave(k)


@dataclass
class Trajectory:
    """Lab utility: raw output of :func:`run` (runs dim first, always present)."""

    last: torch.Tensor                      # [R, p]
    average: torch.Tensor | None            # [R, p]: (1/T) Σ_{t=1}^T θ_t
    iterates: torch.Tensor | None           # [R, T+1, p]
    history: dict[str, torch.Tensor]        # name -> [R, T]
    generator: torch.Generator | SeedGroups
    runs: int


def _runs_of(theta0, privatizer, lr) -> int:
    cands = {}
    if theta0.dim() == 2:
        cands["theta0"] = theta0.shape[0]
    for name in ("clip_norm", "feedback_clip_norm", "pre_clip_std"):
        v = getattr(privatizer, name, None)
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            cands[name] = v.numel()
    if isinstance(lr, torch.Tensor) and lr.dim() >= 1:
        cands["lr"] = lr.numel()
    sizes = set(cands.values()) - {1}
    if len(sizes) > 1:
        raise ValueError(f"the runs dimension must agree across inputs; got sizes {cands}")
    return sizes.pop() if sizes else (1 if theta0.dim() == 1 or not cands else max(cands.values()))


def _lr_fn(lr, runs, like):
    if callable(lr):
        return lambda t: _check_lr(lr(t))
    if isinstance(lr, torch.Tensor):
        t = lr.to(device=like.device, dtype=like.dtype).reshape(-1)
        if not bool(torch.isfinite(t).all() & (t > 0).all()):
            raise ValueError("lr must be positive and finite in every run")
        t = t.expand(runs).unsqueeze(-1) if t.numel() == 1 else t.unsqueeze(-1)
        return lambda _: t
    v = _check_lr(lr)
    return lambda _: v


def _check_lr(v):
    if isinstance(v, (str, bytes, bool)) or v is None:
        raise TypeError(f"lr must be a positive float, a tensor [R] or a callable step -> float, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"lr must be a positive float, a tensor [R] or a callable step -> float, got {v!r}") from None
    if not (f > 0) or f == float("inf"):
        raise ValueError(f"lr must lie in (0, inf), got {v!r}")
    return f


def run(grad_fn, theta0: torch.Tensor, *, steps: int, lr, sampler: Sampler, privatizer,
        update="sgd", project: Callable | None = None, average: bool = False, seed=None,
        keep_iterates: bool = True, progress: bool | None = None,
        callback: Callable | None = None) -> Trajectory:
    """Run ``steps`` iterations of a DP first-order method (see module docstring).

    The loop of Abadi et al. (2016), Alg. 1 and Song, Thakkar & Thakurta (2021), Alg. 1, for ``R`` runs at once.

    Parameters
    ----------
    grad_fn : callable or GLProblem
        Per-example gradient oracle (see :func:`dpclip_lab.algorithms.oracles.as_oracle`).
    theta0 : Tensor[p] or Tensor[R, p]
        Initial point; its device and dtype are used throughout.
    steps : int
        Number of iterations T.
    lr : float, Tensor[R] or callable
        Learning rate η (or per-run rates, or a schedule ``t -> η_t``).
    sampler, privatizer, update, project
        The parts (see :mod:`dpclip_lab.sampling`, :mod:`dpclip_lab.privatizers`,
        :mod:`dpclip_lab.algorithms.updates`).
    average : bool
        Also accumulate ``(1/T) Σ_{t=1}^T θ_t`` (Song et al. Alg. 1 line 6).
    keep_iterates : bool
        Store all iterates ``[R, T+1, p]`` (turn off for long runs of big models).
    progress : bool or None
        tqdm bar; None shows one only if the run lasts more than ~3 s.
    callback : callable, optional
        ``callback(t, theta, stats)`` after each step (logging in the training driver).
    """
    if not isinstance(theta0, torch.Tensor) or not theta0.is_floating_point() or theta0.dim() not in (1, 2):
        raise ValueError("theta0 must be a floating-point tensor of shape [p] or [R, p], got "
                         f"{tuple(theta0.shape) if isinstance(theta0, torch.Tensor) else type(theta0).__name__}")
    check_finite_tensor(theta0, "theta0")
    steps = check_int(steps, "steps", minimum=0)
    if project is not None and not callable(project):
        raise TypeError(f"project must be a callable theta -> theta (e.g. project_l2_ball(R)) or None, "
                        f"got {type(project).__name__}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a callable (t, theta, stats) or None, got {type(callback).__name__}")
    if theta0.dtype in (torch.float16, torch.bfloat16) and getattr(privatizer, "noise_multiplier", 0):
        warnings.warn(
            f"a private run in {theta0.dtype}: the privacy record assumes exact clipping and exact counts, but "
            f"{LOW_PRECISION_REASON}. Run the private part in float32 or float64 for a record you can rely on",
            LowPrecisionPrivacyWarning, stacklevel=3)
    oracle = as_oracle(grad_fn)
    X = getattr(oracle, "X", None)
    if isinstance(X, torch.Tensor) and (X.dtype != theta0.dtype or X.device != theta0.device):
        raise TypeError(f"theta0 must have the problem's dtype and device ({X.dtype}, {X.device}), got "
                        f"({theta0.dtype}, {theta0.device}); convert one of them (e.g. theta0.to(problem.X))")
    p = theta0.shape[-1]
    if hasattr(oracle, "p") and oracle.p != p:
        raise ValueError(f"theta0 must have last dimension p = {oracle.p} (the problem's features), "
                         f"got shape {tuple(theta0.shape)}")
    runs = _runs_of(theta0, privatizer, lr)
    groups = _seed_groups(seed, theta0.device)
    if groups is not None:
        runs = _grouped_runs(runs, len(groups), theta0)
    theta = theta0.detach().clone() if theta0.dim() == 2 else theta0.detach().unsqueeze(0)
    if theta.shape[0] != runs:
        if theta.shape[0] != 1:
            raise ValueError(f"theta0 has {theta.shape[0]} runs but other inputs have {runs}")
        theta = theta.expand(runs, p).clone()
    gen = make_generator(seed, theta.device) if groups is None else groups
    lr_at = _lr_fn(lr, runs, theta)
    update = make_update(update)
    pstate = privatizer.init_state(runs, p, theta)
    ustate = update.init_state(theta)
    iterates = None
    if keep_iterates:
        iterates = torch.empty((runs, steps + 1, p), device=theta.device, dtype=theta.dtype)
        iterates[:, 0] = theta
    acc = torch.zeros_like(theta) if average else None
    hist: dict[str, list] = {}

    from tqdm.auto import tqdm
    # No bar when a notebook is executed headless (book build, grading): a tqdm widget would be
    # frozen into the static page (megabytes of widget state) — see dpclip_lab.plotting.headless.
    quiet = progress is None and "1" in (os.environ.get("DPCLIP_HEADLESS"), os.environ.get("DPCLIP_HTML_ONLY"))
    # A disabled bar is not built at all (~40 µs a call, a share of short runs such as a benchmark's).
    bar = range(steps) if (progress is False) or quiet else tqdm(
        range(steps), delay=0 if progress else 3.0, desc=type(privatizer).__name__, leave=False)
    # The batches, step by step: a Sampler's batch_stream (Poisson: several steps drawn at once); an
    # object with only sample() (duck-typed) is drawn one step at a time; seed groups draw per seed.
    draws = batch_stream(sampler, 0, runs, gen, theta.device, theta.dtype)
    with torch.no_grad():
        for t in bar:
            batch = next(draws)
            direction, stats = privatizer(oracle, theta, batch, pstate, gen)
            theta = update.step(theta, direction, ustate, lr_at(t))
            if project is not None:
                theta = project(theta)
            if keep_iterates:
                iterates[:, t + 1] = theta
            if acc is not None:
                acc += theta
            for k, v in stats.items():
                hist.setdefault(k, []).append(v)
            if callback is not None:
                callback(t, theta, stats)
    if not isinstance(bar, range):
        bar.close()
    history = {k: torch.stack(v, dim=1) for k, v in hist.items()}
    avg = acc / steps if (acc is not None and steps > 0) else (theta.clone() if acc is not None else None)
    return Trajectory(theta, avg, iterates, history, gen, runs)


@dataclass
class DPResult:
    """Lab utility: what a DP optimizer returns: the released model and its privacy record.

    Attributes
    ----------
    theta : Tensor[p] or [R, p]
        The released model (last iterate, average, noisy or selected; see ``release``).
    iterates : Tensor[T+1, p] or [R, T+1, p] or None
        θ_0, …, θ_T (None when ``keep_iterates=False``).
    algorithm, release : str
        The method's name and what was released.
    sampling : str
        ``"poisson"``, ``"shuffle"``, ``"with_replacement"`` or ``"full"``.
    sample_rate : float
        Expected fraction of examples per step (``b / n``).
    noise_multiplier : float
        ``z``: std of the noise on the sum of clipped gradients, over the clip norm.
    steps, batch_size, n : int
        T, expected batch size b, dataset size.
    clip_norm : float, Tensor[R] or None
        The (initial) clip norm(s).
    history : dict[str, Tensor]
        Per-step diagnostics ``[T]`` or ``[R, T]`` (fraction clipped, batch size, ...).
    extra : dict
        Method-specific values (for example the selected index, the paper's ε).
    """

    theta: torch.Tensor
    iterates: torch.Tensor | None
    algorithm: str
    release: str
    sampling: str
    sample_rate: float
    noise_multiplier: float
    steps: int
    batch_size: int
    n: int
    clip_norm: Any
    history: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def batched(self) -> bool:
        return self.extra.get("runs") is not None

    def dp_event(self):
        """The accountant event of this run (see :func:`dpclip_lab.sampling.sampling_event`).

        Releasing every iterate costs the same as releasing one (post-processing),
        so the event covers ``iterates`` too. Methods with extra releases
        (selection) compose their own events on top. For a batched result (R runs of a
        sweep) it is the event of **one** run, released alone — the least private run where
        runs differ; :meth:`joint_dp_event` covers releasing the runs together.
        """
        return sampling_event(self.sampling, noise_multiplier=self.noise_multiplier, steps=self.steps,
                              n=self.n, batch_size=self.batch_size)

    def joint_dp_event(self):
        """The event of releasing **all** the runs of this result together (one run: :meth:`dp_event`).

        * Runs with independent randomness (a batched call with one seed, or ``k`` distinct seeds
          for ``k`` runs): the composition of the R runs, ``SelfComposedEvent(dp_event(), R)``.
        * Runs that share their noise (``seed=range(k)`` with more runs than seeds, or a repeated
          seed): ``NonPrivateEvent`` (ε = ∞). Two runs with the same noise directions and different
          clip norms (or step sizes) cancel it: with full batches, ``d[0]/C₀ − d[1]/C₁`` of their
          first steps is the noiseless data statistic. Common random numbers are right for
          *comparing* clip norms, but choosing C by looking at such a sweep is not private; choose C
          privately (adaptive clipping, or a private selection whose cost is accounted).
        """
        A = events()
        single = self.dp_event()
        runs = self.extra.get("runs")
        if runs is None or runs == 1 or isinstance(single, (A.NoOpEvent, A.NonPrivateEvent)):
            return single
        seeds = self.extra.get("seeds")
        if seeds is not None and (runs > len(seeds) or len(set(seeds)) < len(seeds)):
            return A.NonPrivateEvent()
        return A.SelfComposedEvent(single, runs)

    def __repr__(self) -> str:
        shape = tuple(self.theta.shape)
        return (f"{type(self).__name__}(algorithm={self.algorithm!r}, release={self.release!r}, "
                f"theta shape={shape}, sampling={self.sampling!r}, sample_rate={self.sample_rate:g}, "
                f"noise_multiplier={self.noise_multiplier:g}, steps={self.steps}, batch_size={self.batch_size})")


def finish(traj: Trajectory, theta0: torch.Tensor, *, result_cls=DPResult, release: str, **record) -> DPResult:
    """Build a result from a trajectory: pick the release and drop the runs dim for single runs."""
    batched = theta0.dim() == 2 or traj.runs > 1
    if release == "average":
        theta = traj.average
    elif release == "last":
        theta = traj.last
    else:
        raise ValueError(f"release must be 'last' or 'average', got {release!r}")
    iterates, history = traj.iterates, traj.history
    if not batched:
        theta = theta[0]
        iterates = None if iterates is None else iterates[0]
        history = {k: v[0] for k, v in history.items()}
    extra = record.pop("extra", {})
    if batched:
        extra["runs"] = traj.runs
        if isinstance(traj.generator, SeedGroups):  # runs r and r + k share their noise (joint_dp_event)
            extra["seeds"] = list(traj.generator.seeds)
    return result_cls(theta=theta, iterates=iterates, release=release, history=history, extra=extra, **record)
