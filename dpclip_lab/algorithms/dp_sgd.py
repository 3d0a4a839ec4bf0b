"""Clipped SGD and DP-SGD: sampling × clip (+ pre-clip noise) × Gaussian noise × SGD/Adam.

References
----------
Abadi et al. (2016), "Deep learning with differential privacy", Alg. 1.
Chen, Wu, Hong (2020), eq. (3) (clipped SGD), eq. (8) (DP-SGD), §5 eq. (11)
(pre-clipping perturbation).
Zhang et al. (2024), DiceSGD paper, Alg. 1 (DPSGD-GC).
"""
from __future__ import annotations

import torch

from .._validation import check_int
from ..privatizers import GaussianPrivatizer
from ..sampling import make_sampler
from .loop import DPResult, finish, run
from .oracles import GLPOracle, as_oracle, has_pre_clip

__all__ = ["dp_sgd", "check_n"]


def check_n(n, grad_fn) -> int:
    """Lab utility: validate n (and match it against a GLProblem's number of examples)."""
    n = check_int(n, "n", minimum=1)
    oracle = as_oracle(grad_fn)
    if isinstance(oracle, GLPOracle) and oracle.n != n:
        raise ValueError(f"n = {n} does not match the problem's number of examples ({oracle.n})")
    return n


def dp_sgd(grad_fn, theta0, *, n, steps, lr, clip_norm, noise_multiplier, batch_size=None,
           sampling="poisson", pre_clip_std=0.0, project=None, average=False, optimizer="sgd",
           normalize=False, seed=None, keep_iterates=True, progress=None, callback=None,
           stability=0.0) -> DPResult:
    """DP-SGD with per-example clipping (and, with ``noise_multiplier=0``, clipped SGD).

    Each step: sample a batch ``S_t``; clip each per-example gradient (after
    adding ``k ζ_i`` if ``pre_clip_std = k > 0``); add ``N(0, (zC)² I)`` to the
    sum; divide by the expected batch size ``b``; take an SGD or Adam step;
    project. In Chen et al.'s notation (eq. (8), (11))::

        x_{t+1} = x_t − α ( (1/b) Σ_{i∈S_t} clip(∇f(x_t; s_i) + k ζ_{t,i}, c) + Z_t ),
        Z_t ~ N(0, σ² I),  σ = z c / b   (see dpclip_lab.noise.chen_sigma_to_noise_multiplier)

    Parameters
    ----------
    grad_fn : callable or GLProblem
        Per-example gradients ``(theta, idx) -> [len(idx), p]`` (a GLProblem
        takes the O(np) clipped-sum path unless ``pre_clip_std > 0``).
    theta0 : Tensor[p] or Tensor[R, p]
    n : int
        Number of examples.
    steps : int
        Number of steps T.
    lr : float, Tensor[R] or callable
        Learning rate (per run, or a schedule ``t -> η_t``).
    clip_norm : float or Tensor[R]
        Clip norm C (one per run for sweeps). ``None`` disables clipping
        (plain SGD; needs ``noise_multiplier=0``).
    noise_multiplier : float
        z (Abadi et al.): noise std ``z C`` on the sum. 0 gives clipped SGD.
    batch_size : int, optional
        Expected batch size b (required unless ``sampling="full"``).
    sampling : {"poisson", "shuffle", "with_replacement", "full"}
    pre_clip_std : float or Tensor[R]
        k of Chen et al. §5 (perturbation before clipping; trades bias for variance).
        A tensor gives one k per run, so a sweep over k (× clip norms × seeds) is one
        batched call: ``pre_clip_std=ks.repeat_interleave(seeds)``.
    project : callable, optional
        Projection applied after each step (:func:`project_l2_ball`, :func:`project_interval`).
    average : bool
        Release ``(1/T) Σ_{t=1}^T θ_t`` instead of the last iterate.
    optimizer : {"sgd", "adam"} or update-rule object
    normalize : bool
        Normalize per-example gradients to norm C instead of clipping (automatic
        clipping, Bu et al. 2023, AUTO-S): ``C g_i / (‖g_i‖ + γ)``.
    stability : float
        γ of automatic clipping (0: exact normalization; a small γ such as 0.01 keeps tiny gradients small).
    seed : int or sequence of ints, optional
        Seed of the ``torch.Generator`` (on theta0's device) for batches and noise. A sequence
        of ``k`` seeds (e.g. ``range(16)``) gives run ``r`` the random stream of ``seed[r % k]``
        (:class:`dpclip_lab.sampling.SeedGroups`): with ``clip_norm=sweep_grid(Cs, k)``, run
        ``c k + s`` *is* the single run ``dp_sgd(..., clip_norm=Cs[c], seed=seed[s])`` (up to
        floating-point summation order) — a loop's results in one batched call, with the same
        batches and noise directions for every clip norm. With no other per-run input, ``k`` runs.

    Returns
    -------
    DPResult
        ``.theta``, ``.iterates``, ``.history["fraction_clipped"]``,
        ``.history["batch_size"]``, and ``.dp_event()`` for the accountants.
    """
    n = check_n(n, grad_fn)
    sampler = make_sampler(sampling, n, batch_size)
    privatizer = GaussianPrivatizer(clip_norm, noise_multiplier, pre_clip_std=pre_clip_std,
                                    normalize=normalize, stability=stability)
    k = privatizer.pre_clip_std
    traj = run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer,
               update=optimizer, project=project, average=average, seed=seed,
               keep_iterates=keep_iterates, progress=progress, callback=callback)
    name = "clipped SGD" if privatizer.noise_multiplier == 0 else "DP-SGD"
    if has_pre_clip(k):
        name += " + pre-clip perturbation"
    return finish(traj, theta0, release="average" if average else "last", algorithm=name,
                  sampling=sampling, sample_rate=sampler.sample_rate,
                  noise_multiplier=privatizer.noise_multiplier, steps=steps,
                  batch_size=sampler.batch_size, n=n, clip_norm=clip_norm,
                  extra={"pre_clip_std": k.clone() if isinstance(k, torch.Tensor) else float(k), "optimizer": getattr(optimizer, "name", optimizer)})
