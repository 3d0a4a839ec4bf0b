"""DP-GD of Song, Thakkar, Thakurta (2021): full batch, clip, noise, project, average.

References
----------
Song, Thakkar, Thakurta (2021), "Characterizing private clipped gradient descent
on convex generalized linear problems", Alg. 1, Thm 2.2, App. D (DP-GD_LDP,
Thm D.2).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..privatizers import GaussianPrivatizer
from ..sampling import events as _ev
from ..sampling import make_sampler
from .dp_sgd import check_n, dp_sgd
from .loop import DPResult, finish, run

__all__ = ["dp_gd", "dp_gd_ldp", "LDPResult"]


def dp_gd(grad_fn, theta0, *, n, steps, lr, clip_norm, noise_multiplier, project=None, seed=None,
          keep_iterates=True, progress=None) -> DPResult:
    """DP-GD (Song et al. 2021, Alg. 1): clipped full-batch GD with Gaussian noise and projection.

    ``θ_{t+1} = Π_C(θ_t − η (g_t + N(0, σ² I)))``, ``g_t = (1/n) Σ_i clip(∇ℓ(θ_t; d_i), L)``;
    releases the average ``θ^priv = (1/T) Σ_{t=1}^T θ_t``.

    Parameters
    ----------
    grad_fn : callable or GLProblem
        Per-example gradient oracle; a GLProblem uses the O(np) clipped sum.
    theta0 : Tensor[p] or Tensor[R, p]
        The paper starts at 0.
    n, steps, lr : int, int, float
        Dataset size, T, η.
    clip_norm : float or Tensor[R]
        The clipping norm L.
    noise_multiplier : float
        z = σ n / L (``dpclip_lab.noise.song_sigma_to_noise_multiplier``); Thm 2.2's
        σ² = 2L²T log(1/δ)/(nε)² is ``accountants.paper_bounds.song_thm22_sigma``. 0: noise-free clipped GD,
        which converges to a minimizer of the Huberized objective of Lemma 3.1.
    project : callable, optional
        ``Π_C`` (e.g. ``project_l2_ball(R)``); None means C = ℝ^p.
    seed : int or sequence of ints, optional
        Seed of the generator; a sequence of ``k`` seeds gives run ``r`` the stream of ``seed[r % k]``
        (as in :func:`dpclip_lab.algorithms.dp_sgd`: the runs a loop over the seeds would make).

    Returns
    -------
    DPResult
        With ``release="average"``; ``dp_event()`` is ``SelfComposedEvent(GaussianEvent(z), T)``.
    """
    res = dp_sgd(grad_fn, theta0, n=n, steps=steps, lr=lr, clip_norm=clip_norm,
                 noise_multiplier=noise_multiplier, sampling="full", project=project, average=True,
                 seed=seed, keep_iterates=keep_iterates, progress=progress)
    res.algorithm = "DP-GD" if res.noise_multiplier > 0 else "clipped GD"
    return res


@dataclass(repr=False)
class LDPResult(DPResult):
    """Result of DP-GD_LDP: central and local privacy records.

    Source: Song, Thakkar & Thakurta (2021), App. D (DP-GD_LDP) and Thm D.2.

    Central accounting depends on the neighbouring relation. Every example adds
    its own noise, so under add/remove the *number* of noise draws changes with
    the data set: the two released sums are Gaussians with different covariances
    (``n`` vs ``n − 1`` draws), whose privacy loss grows with the dimension p
    (n = 100, z = 1, one step: ε ≈ 0.96 at p = 10³, 11.5 at p = 10⁵). The lab
    therefore accounts only relations that keep ``n`` fixed: replace-one (default;
    the sum moves by up to ``2C``) and zero-out (the neighbour's clipped gradient
    is 0 but it still adds its noise; the sum moves by up to ``C``).
    """

    def dp_event(self, relation: str = "replace_one"):
        """Central view: the aggregate noise is ``N(0, n (zC)² I)`` on the sum.

        ``relation="replace_one"`` (default): sensitivity ``2C``,
        ``SelfComposedEvent(GaussianEvent(z √n / 2), T)``. ``"zero_out"``:
        sensitivity ``C``, ``GaussianEvent(z √n)``. ``"add_remove"`` raises: no
        Gaussian event describes it (see the class docstring).
        """
        A = _ev()  # accountant events
        if relation not in ("replace_one", "zero_out", "add_remove"):
            raise ValueError(f"relation must be 'replace_one' or 'zero_out', got {relation!r}")
        if relation == "add_remove":
            raise ValueError("DP-GD_LDP has no Gaussian event under add/remove: the number of local noise "
                             "draws changes with the data set and the privacy loss grows with the dimension. "
                             "Use relation='replace_one' (default) or 'zero_out'.")
        if self.steps == 0:
            return A.NoOpEvent()
        if self.noise_multiplier == 0:
            return A.NonPrivateEvent()
        k = 2.0 if relation == "replace_one" else 1.0
        return A.SelfComposedEvent(A.GaussianEvent(self.noise_multiplier * self.n ** 0.5 / k), self.steps)

    def local_dp_event(self):
        """Local view (Def. D.1): one user's T reports ``clip(∇ℓ) + N(0, (zC)² I)``; two
        records' clipped gradients differ by up to ``2C``, so
        ``SelfComposedEvent(GaussianEvent(z / 2), T)``."""
        A = _ev()  # accountant events
        if self.noise_multiplier == 0:
            return A.NonPrivateEvent()
        return A.SelfComposedEvent(A.GaussianEvent(self.noise_multiplier / 2), self.steps)


def dp_gd_ldp(grad_fn, theta0, *, n, steps, lr, clip_norm, noise_multiplier, project=None, seed=None,
              keep_iterates=True, progress=None) -> LDPResult:
    """DP-GD_LDP (Song et al. 2021, App. D): each example perturbs its own clipped gradient.

    ``g_t = (1/n) Σ_i (clip(∇ℓ(θ_t; d_i), L) + N(0, σ² I))``, then Alg. 1's projected
    step and average. Same loop and parts as :func:`dp_gd`; only the privatizer's
    noise differs (``local=True``: per-example std ``zL``, i.e. ``z = σ/L``,
    ``dpclip_lab.noise.song_ldp_sigma_to_noise_multiplier``).

    Thm D.2 prints ``σ² = 2L²T log(1/δ)/ε²``; for local DP two records' clipped
    gradients differ by up to 2L, so :meth:`LDPResult.local_dp_event` uses ``z/2``.
    """
    n = check_n(n, grad_fn)
    sampler = make_sampler("full", n, None)
    privatizer = GaussianPrivatizer(clip_norm, noise_multiplier, local=True)
    traj = run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer,
               project=project, average=True, seed=seed, keep_iterates=keep_iterates, progress=progress)
    return finish(traj, theta0, result_cls=LDPResult, release="average", algorithm="DP-GD_LDP",
                  sampling="full", sample_rate=1.0, noise_multiplier=privatizer.noise_multiplier,
                  steps=steps, batch_size=n, n=n, clip_norm=clip_norm)
