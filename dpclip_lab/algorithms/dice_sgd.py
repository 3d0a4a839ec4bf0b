"""DiceSGD: DP-SGD with clipped error feedback (Zhang et al. 2024).

The loop, sampler and update rules are DP-SGD's; only the privatizer differs
(:class:`dpclip_lab.privatizers.ErrorFeedbackPrivatizer`)::

    v_t     = (1/B) Σ_{i∈B_t} clip(g_i, C1) + clip(e_t, C2)
    x_{t+1} = x_t − η (v_t + w_t),      w_t ~ N(0, σ1² I),  σ1 = z C1 / B
    e_{t+1} = e_t + (1/B) Σ_{i∈B_t} g_i − v_t

At a noise-free fixed point ``v = 0`` and ``e`` is constant, so the mean raw
gradient is 0: the fixed point is stationary for the *original* objective,
which DPSGD-GC's is not (App. B.1) — provided ``C2 ≥ C1`` so that ``clip(e, C2)``
can cancel the clipped mean.

Privacy
-------
``e_t`` is a hidden state fed by *unclipped* gradients of *every* example seen
so far, so DiceSGD is not the plain subsampled Gaussian mechanism, and its Thm 3.8
(A.4) closed form — σ1² ≥ 32 T (C1² + 2 min{C2², G'²}) log(1/δ) / (N² ε²), which
does not depend on the gradient size — **does not hold in the worst case**. The
released iterates reveal ``v_t + w_t`` each step, and given the past releases one
example can move ``v_t`` by up to

    Δ = m·C1/B + 2·C2      (add/remove; 2·m·C1/B + 2·C2 under replace-one)

(:func:`dicesgd_sensitivity`), with ``m`` the most times one example can appear in a
batch (1 for Poisson, shuffled and full batches; ``B`` for sampling with replacement,
where one example can fill the whole batch): its clipped gradient in the batch term, and —
whether or not it is in the batch — the error feedback term, because
``clip(e_t, C2)`` and ``clip(e'_t, C2)`` lie anywhere in the ball of radius C2
(one example with a large gradient saturates ``clip(e, C2)`` every step; it is not
divided by N). No subsampling amplification applies, since ``e_t`` depends on
examples outside the batch. Exact counterexample: linear loss (gradients do not
depend on θ), full batch, one example's gradient ``G·u`` against ``0``, N = B = 100,
T = 100, C1 = C2 = 1, z = 100, G = 500: Thm 3.8 claims ε = 3.32 at δ = 1e-5; the
released iterates' exact ε is about 92.5.

So the lab accounts DiceSGD as what it provably is: T adaptive Gaussian mechanisms
with noise multiplier ``z_eff = σ1 / Δ`` (:func:`dicesgd_effective_noise_multiplier`),
composed by the tight accountants (:meth:`DiceSGDResult.dp_event`,
:meth:`DiceSGDResult.epsilon`). :func:`dicesgd_noise_multiplier` gives the z a
target (ε, δ) really needs. Thm 3.8's number stays available under a name that
says what it is, :meth:`DiceSGDResult.paper_claimed_epsilon` — the paper's claim,
never a guarantee.

References
----------
Zhang, Li, Hong, et al. (2024), "Differentially private SGD without clipping
bias: an error-feedback approach", Alg. 1 (DPSGD-GC), Alg. 2 (DiceSGD), Alg. 3
(Adam variant), Alg. 4 (automatic DiceSGD), Thm 3.7–3.8, App. B.1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import as_clip_norm, check_int, check_nonnegative, check_open_unit, finite_result
from ..accountants.paper_bounds import dicesgd_thm38_epsilon
from ..privatizers import ErrorFeedbackPrivatizer
from ..sampling import events as _ev
from ..sampling import make_sampler
from .dp_sgd import check_n
from .loop import DPResult, finish, run

__all__ = ["dice_sgd", "automatic_dice_sgd", "DiceSGDResult", "dicesgd_sensitivity", "batch_multiplicity",
           "dicesgd_effective_noise_multiplier", "dicesgd_noise_multiplier", "RELATIONS"]

RELATIONS = ("add_remove", "replace_one")


def _relation(relation) -> str:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return relation


def _multiplicity(multiplicity, batch_size: int) -> int:
    m = check_int(multiplicity, "multiplicity", minimum=1)
    if m > batch_size:
        raise ValueError(f"multiplicity (the most times one example appears in a batch) must lie in "
                         f"[1, batch_size = {batch_size}], got {m}")
    return m


def batch_multiplicity(sampling: str, batch_size: int) -> int:
    """Lab utility: the most times one example can appear in a batch of ``sampling`` (B with replacement, else 1)."""
    return int(batch_size) if sampling == "with_replacement" else 1


def _clip_norms(clip_norm, feedback_clip_norm):
    """C1, C2 as float64 tensors of one broadcast shape, checked positive and C1 ≤ C2."""
    like = torch.zeros((), dtype=torch.float64)
    C1 = as_clip_norm(clip_norm, like, "clip_norm").reshape(-1)
    C2 = as_clip_norm(feedback_clip_norm, like, "feedback_clip_norm").reshape(-1)
    return torch.broadcast_tensors(C1, C2)


@finite_result()
def dicesgd_sensitivity(clip_norm, feedback_clip_norm, batch_size, relation="add_remove", *, multiplicity=1):
    """ℓ2 sensitivity of DiceSGD's direction ``v_t = (1/B) Σ clip(g_i, C1) + clip(e_t, C2)``.

    Zhang et al. (2024), Alg. 2 line 5 (the direction) — the quantity their Thm 3.8
    / App. A.4 bounds too loosely.

    Given the released past, one example changes the batch term by at most
    ``m C1/B`` (add/remove; ``2 m C1/B`` replace-one; ``m`` = ``multiplicity``) and the error-feedback term by at
    most ``2 C2`` (both ``clip(e, C2)`` lie in the ball of radius C2, and ``e_t``
    carries the example's unclipped gradients from every earlier step, in the
    batch or not). See the module docstring for why the paper's Thm 3.8 misses
    the ``2 C2`` term.

    Parameters
    ----------
    clip_norm, feedback_clip_norm : float or Tensor[R]
        C1 and C2 (> 0).
    batch_size : int
        B, the (expected) batch size that divides the clipped sum.
    relation : {"add_remove", "replace_one"}
    multiplicity : int in [1, B]
        The most times one example can appear in a batch: 1 for Poisson, shuffled and full
        batches, ``B`` for sampling with replacement (:func:`batch_multiplicity`).

    Returns
    -------
    float
        The sensitivity (the largest over runs when the norms are tensors).
    """
    C1, C2 = _clip_norms(clip_norm, feedback_clip_norm)
    B = check_int(batch_size, "batch_size", minimum=1)
    m = _multiplicity(multiplicity, B)
    k = 1.0 if _relation(relation) == "add_remove" else 2.0
    return float((k * m * C1 / B + 2.0 * C2).max())


@finite_result(zero_if=lambda noise_multiplier, **_: float(noise_multiplier) == 0)
def dicesgd_effective_noise_multiplier(noise_multiplier, clip_norm, feedback_clip_norm, batch_size,
                                       relation="add_remove", *, multiplicity=1) -> float:
    """``z_eff = σ1 / Δ``: DiceSGD's noise over its true per-step sensitivity (Zhang et al. (2024), Alg. 2).

    ``σ1 = z C1 / B`` is the std of ``w_t`` on the averaged direction (the lab's
    convention, ``dpclip_lab.noise.noise_multiplier_to_dice_sigma``) and ``Δ`` is
    :func:`dicesgd_sensitivity`; for add/remove and ``multiplicity = 1``,
    ``z_eff = z / (1 + 2 B C2 / C1)``.
    With tensors of clip norms (a sweep) the smallest over runs (the least
    private run) is returned. T steps of DiceSGD are
    ``SelfComposedEvent(GaussianEvent(z_eff), T)``.
    """
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    C1, C2 = _clip_norms(clip_norm, feedback_clip_norm)
    B = check_int(batch_size, "batch_size", minimum=1)
    m = _multiplicity(multiplicity, B)
    k = 1.0 if _relation(relation) == "add_remove" else 2.0
    return float((z * C1 / B / (k * m * C1 / B + 2.0 * C2)).min())


@finite_result()
def dicesgd_noise_multiplier(target_epsilon, delta, steps, clip_norm, feedback_clip_norm, batch_size,
                             accountant="rdp", relation="add_remove", *, multiplicity=1) -> float:
    """The noise multiplier z (``σ1 = z C1 / B``) that makes T steps of DiceSGD (ε, δ)-DP.

    Replaces Zhang et al. (2024), Thm 3.8's σ1 (not valid in the worst case) by a
    calibration from the sensitivity of Alg. 2's direction, composed by the lab's
    RDP (Mironov 2017) or PLD accountant.

    Calibrates ``z_eff`` for T composed Gaussian mechanisms with the lab's
    accountants (:func:`dpclip_lab.accountants.get_noise_multiplier` at
    ``sample_rate=1``; ``"pld"`` is tight) and returns ``z = z_eff · Δ · B / C1``.
    Compare with DP-SGD's z at the same (ε, δ): DiceSGD's is larger by about
    ``1 + 2 B C2 / C1`` before DP-SGD's subsampling amplification is counted.
    ``multiplicity`` as in :func:`dicesgd_sensitivity` (``B`` for sampling with replacement).
    """
    from ..accountants.calibration import get_noise_multiplier  # lazy: accountants import the lab
    T = check_int(steps, "steps", minimum=1)
    C1, C2 = _clip_norms(clip_norm, feedback_clip_norm)
    B = check_int(batch_size, "batch_size", minimum=1)
    k = 1.0 if _relation(relation) == "add_remove" else 2.0
    m = _multiplicity(multiplicity, B)
    z_eff = get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=1.0, steps=T,
                                 accountant=accountant)
    return float((z_eff * (k * m * C1 / B + 2.0 * C2) * B / C1).max())


@dataclass(repr=False)
class DiceSGDResult(DPResult):
    """Result of DiceSGD (Zhang et al. (2024), Alg. 2–4); ``feedback_clip_norm`` is C2.

    Privacy: :meth:`dp_event` / :meth:`epsilon` account T Gaussian mechanisms of
    sensitivity ``C1/B + 2 C2`` (see the module docstring); the paper's Thm 3.8
    value is :meth:`paper_claimed_epsilon`, not a guarantee.
    """

    feedback_clip_norm: object = None
    delta: float | None = None

    def neighbouring_relation(self, relation: str | None = None) -> str:
        """The neighbouring relation of the record: ``relation`` if given, else the scheme's own —
        replace-one for ``sampling="with_replacement"`` (as DP-SGD's event there), add/remove otherwise."""
        if relation is None:
            return "replace_one" if self.sampling == "with_replacement" else "add_remove"
        return _relation(relation)

    @property
    def multiplicity(self) -> int:
        """The most times one example can appear in a batch (:func:`batch_multiplicity`): B with replacement."""
        return batch_multiplicity(self.sampling, self.batch_size)

    def effective_noise_multiplier(self, relation: str | None = None) -> float:
        """``z_eff = σ1 / Δ`` (:func:`dicesgd_effective_noise_multiplier`; the least private run of a sweep).

        ``Δ`` counts the batch's worst-case multiplicity: with ``sampling="with_replacement"`` one example
        can fill all B slots, so the batch term moves by ``C1`` (``2 C1`` replace-one), not ``C1/B``.
        """
        return dicesgd_effective_noise_multiplier(self.noise_multiplier, self.clip_norm, self.feedback_clip_norm,
                                                  self.batch_size, self.neighbouring_relation(relation),
                                                  multiplicity=self.multiplicity)

    def dp_event(self, relation: str | None = None):
        """``SelfComposedEvent(GaussianEvent(z_eff), T)``: a valid event for the released iterates.

        No subsampling amplification (the error state carries examples outside
        the batch). ``relation``: None (default) is the scheme's own (:meth:`neighbouring_relation`);
        ``"replace_one"`` uses sensitivity ``2 m C1/B + 2 C2``.
        """
        A = _ev()  # accountant events
        if self.steps == 0:
            return A.NoOpEvent()
        if self.noise_multiplier == 0:
            return A.NonPrivateEvent()
        return A.SelfComposedEvent(A.GaussianEvent(self.effective_noise_multiplier(relation)), self.steps)

    def epsilon(self, delta: float | None = None, accountant: str = "rdp", relation: str | None = None) -> float:
        """A valid ε at ``delta`` (default: the ``delta`` given to :func:`dice_sgd`) from :meth:`dp_event`."""
        from ..accountants.calibration import make_accountant  # lazy: accountants import the lab
        d = self.delta if delta is None else delta
        if d is None:
            raise ValueError("delta is required (pass delta= here or to dice_sgd)")
        d = check_open_unit(d, "delta")
        return make_accountant(accountant).compose(self.dp_event(relation)).get_epsilon(d)

    def paper_claimed_epsilon(self, delta: float | None = None) -> float:
        """Zhang et al. (2024) Thm 3.8's ε at ``delta`` — the paper's CLAIM, not a guarantee.

        ``ε = √(32 T (C1² + 2 C2²) log(1/δ)) / (N σ1)`` with ``σ1 = z C1 / B``
        (:func:`dpclip_lab.accountants.paper_bounds.dicesgd_thm38_epsilon`; the
        smallest over the runs of a sweep). It does not depend on the gradient
        size and can be far below the true ε (module docstring); use
        :meth:`epsilon` for a number a proof supports.
        """
        d = self.delta if delta is None else delta
        if d is None:
            raise ValueError("delta is required (pass delta= here or to dice_sgd)")
        d = check_open_unit(d, "delta")
        C1, C2 = _clip_norms(self.clip_norm, self.feedback_clip_norm)
        return min(dicesgd_thm38_epsilon(self.noise_multiplier * float(c1) / self.batch_size, float(c1), float(c2),
                                         None, self.steps, self.n, d) for c1, c2 in zip(C1, C2))


class _RecordingErrorFeedback(ErrorFeedbackPrivatizer):
    """Lab utility: :class:`ErrorFeedbackPrivatizer` that keeps a handle on its state (the final error e_T)."""

    state = None

    def init_state(self, runs, p, like):
        self.state = super().init_state(runs, p, like)
        return self.state


def dice_sgd(grad_fn, theta0, *, n, steps, lr, clip_norm, feedback_clip_norm, noise_multiplier,
             batch_size=None, sampling="poisson", optimizer="sgd", normalize=False, stability=0.0,
             project=None, delta=None, seed=None, keep_iterates=True, progress=None,
             callback=None) -> DiceSGDResult:
    """DiceSGD (Zhang et al. 2024, Alg. 2; Alg. 3 with ``optimizer="adam"``).

    Parameters
    ----------
    grad_fn : callable or GLProblem
        Per-example gradient oracle (a GLProblem gets the O(np) path for both
        the clipped and the raw sum).
    theta0 : Tensor[p] or Tensor[R, p]
    n, steps, lr
        Dataset size N, iterations T, step size η.
    clip_norm : float or Tensor[R]
        C1, the per-example clip norm.
    feedback_clip_norm : float or Tensor[R]
        C2, the clip norm of the error feedback; must satisfy ``C1 ≤ C2``.
    noise_multiplier : float
        z, with ``σ1 = z C1 / B`` the std of w on the averaged direction
        (``dpclip_lab.noise.dice_sigma_to_noise_multiplier``;
        ``accountants.paper_bounds.dicesgd_thm38_sigma`` gives Thm 3.8's σ1).
    batch_size : int, optional
        B (expected batch size for Poisson sampling; the paper samples fixed-size
        minibatches — use ``sampling="shuffle"`` or ``"with_replacement"`` for that).
    sampling : {"poisson", "shuffle", "with_replacement", "full"}
    optimizer : {"sgd", "adam"}
        ``"adam"`` is Alg. 3: Adam moments of ``v + w``; e is updated as in Alg. 2.
    normalize : bool
        Replace both clips by normalization to norm C (Alg. 4; see :func:`automatic_dice_sgd`).
    project : callable, optional
        Projection applied to each iterate after its step, as in :func:`dp_sgd`
        (:func:`project_l2_ball`, :func:`project_interval`). Not in the paper's
        Alg. 2 (unconstrained); the lab adds it so that DiceSGD runs on the same
        bounded domain as the other methods. It changes neither the privacy
        account (the projection is applied to ``x_t − η(v_t + w_t)``, a function of
        the released past and the noisy direction) nor the error update, which still
        records what clipping cut from the raw mean gradient.
    delta : float, optional
        δ used by :meth:`DiceSGDResult.dp_event` when called without one.
    seed : int or sequence of ints, optional
        Seed of the generator; a sequence of ``k`` seeds gives run ``r`` the stream of ``seed[r % k]``
        (as in :func:`dpclip_lab.algorithms.dp_sgd`: the runs a loop over the seeds would make).

    Returns
    -------
    DiceSGDResult
        The last iterate; ``history["error_norm"]`` tracks ‖e_t‖ and
        ``extra["error"]`` holds the final error ``e_T`` (``[p]``, or ``[R, p]`` for a
        sweep) — hidden state, never released; the book uses it for the virtual
        iterate ``x̃_T = x_T − η e_T`` of the Thm 3.7 / A.3 proof.

    Raises
    ------
    ValueError
        If ``clip_norm > feedback_clip_norm`` (C1 > C2), or on any invalid input.
    """
    n = check_n(n, grad_fn)
    sampler = make_sampler(sampling, n, batch_size)
    privatizer = _RecordingErrorFeedback(clip_norm, feedback_clip_norm, noise_multiplier,
                                         normalize=normalize, stability=stability)
    traj = run(grad_fn, theta0, steps=steps, lr=lr, sampler=sampler, privatizer=privatizer,
               update=optimizer, project=project, seed=seed, keep_iterates=keep_iterates, progress=progress,
               callback=callback)
    name = "automatic DiceSGD" if normalize else "DiceSGD"
    if optimizer == "adam":
        name += " (Adam)"
    error = privatizer.state["error"].clone() if privatizer.state is not None else None
    if error is not None and theta0.dim() == 1 and traj.runs == 1:
        error = error[0]
    return finish(traj, theta0, result_cls=DiceSGDResult, release="last", algorithm=name, extra={"error": error},
                  sampling=sampling, sample_rate=sampler.sample_rate,
                  noise_multiplier=privatizer.noise_multiplier, steps=steps, batch_size=sampler.batch_size,
                  n=n, clip_norm=clip_norm, feedback_clip_norm=feedback_clip_norm,
                  delta=None if delta is None else check_open_unit(delta, "delta"))


def automatic_dice_sgd(grad_fn, theta0, *, n, steps, lr, noise_multiplier, batch_size=None,
                       sampling="poisson", clip_norm=1.0, stability=0.0, optimizer="sgd", project=None,
                       delta=None, seed=None, keep_iterates=True, progress=None, callback=None) -> DiceSGDResult:
    """Automatic DiceSGD (Zhang et al. 2024, App. C.2, Alg. 4): ``C1 = C2 = C``, clip = normalize.

    ``v = (1/B) Σ g_i/‖g_i‖ + e/‖e‖`` (times C), noise
    ``w ~ √(96 T log(1/δ))/(N ε) · N(0, I)`` for ``C = 1`` — i.e. Thm 3.8 with
    ``C1 = C2 = 1`` (``accountants.paper_bounds.dicesgd_alg4_sigma``). The paper
    absorbs C into the learning rate; ``clip_norm`` keeps it explicit.
    ``stability`` γ > 0 uses ``g/(‖g‖ + γ)`` (Bu et al. 2023) instead of ``g/‖g‖``.
    ``project`` as in :func:`dice_sgd`.
    """
    return dice_sgd(grad_fn, theta0, n=n, steps=steps, lr=lr, clip_norm=clip_norm,
                    feedback_clip_norm=clip_norm, noise_multiplier=noise_multiplier, batch_size=batch_size,
                    sampling=sampling, optimizer=optimizer, normalize=True, stability=stability, project=project,
                    delta=delta, seed=seed, keep_iterates=keep_iterates, progress=progress, callback=callback)
