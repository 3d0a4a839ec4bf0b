"""Opacus interop: the lab's accountants and the book's remedies inside an Opacus training loop.

Opacus (Yousefpour et al. 2021) is an optional dependency: ``import dpclip_lab`` never
imports it, and importing this module without it raises ``ImportError`` saying
``pip install opacus``. What it gives a reader who trains with Opacus:

* **Accountants.** :class:`LabRDPAccountant` and :class:`LabPLDAccountant` are the lab's RDP
  (Mironov 2017) and PLD accountants behind Opacus's accountant interface (``IAccountant``:
  ``step(noise_multiplier=, sample_rate=)``, ``get_epsilon(delta)``, ``history``,
  ``mechanism()``, ``len``, ``state_dict``). They are registered with Opacus as ``"lab_rdp"``
  and ``"lab_pld"``, so ``opacus.PrivacyEngine(accountant="lab_rdp")`` uses them too.
* **Optimizers.** :class:`DiceSGDOptimizer` (DiceSGD's clipped error feedback, Zhang et al.
  2024, Alg. 2) and :class:`QuantileClippingOptimizer` (Andrew et al. 2021, Alg. 1) are
  ``opacus.optimizers.DPOptimizer`` subclasses whose step *is* the lab's privatizer
  (:class:`~dpclip_lab.privatizers.ErrorFeedbackPrivatizer`,
  :class:`~dpclip_lab.privatizers.QuantilePrivatizer`) applied to Opacus's per-sample
  gradients: the same clip, the same error state, the same noise draws as
  ``dl.train(method="dice_sgd" / "adaptive")``. Their distributed versions
  (:class:`DistributedDiceSGDOptimizer`, :class:`DistributedQuantileClippingOptimizer`) sum the
  ranks' shares with one all-reduce and take rank 0's noise, as Opacus's
  ``DistributedDPOptimizer`` does.
* **The privacy record of the remedy, not of DP-SGD.** Each step the optimizer tells a lab
  accountant its own record: DiceSGD's is ``GaussianEvent(z_eff)`` per step with
  ``z_eff = σ1 / (C1/B + 2 C2)`` and no subsampling amplification
  (:func:`~dpclip_lab.algorithms.dicesgd_effective_noise_multiplier`) — the record of
  :meth:`dpclip_lab.algorithms.DiceSGDResult.dp_event`, never Opacus's Poisson DP-SGD one.
  A DiceSGD optimizer refuses Opacus's own accountants (they would record DP-SGD).
* **The lab's batches.** :func:`lab_data_loader` (:class:`LabBatchSampler`) draws the batches
  ``dl.train`` draws from the same seed; give the optimizer the same ``torch.Generator`` and
  an Opacus loop reproduces ``dl.train`` step for step (to floating-point rounding).

Opacus 1.6 picks the optimizer class from ``make_private(clipping=...)`` through
``opacus.optimizers.get_optimizer_class``, which knows only ``"flat"``, ``"per_layer"`` and
``"adaptive"``. :class:`PrivacyEngine` (an ``opacus.PrivacyEngine``) adds ``"dice_sgd"`` and
``"quantile"``; the recipe is three lines::

    from dpclip_lab.opacus import PrivacyEngine
    engine = PrivacyEngine(accountant="rdp")          # the lab's RDP accountant ("pld": tight)
    model, optimizer, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
        data_loader=loader, noise_multiplier=z, max_grad_norm=C1, clipping="dice_sgd", feedback_clip_norm=C2)
    # ... the usual Opacus loop ...; engine.get_epsilon(delta) is DiceSGD's ε

With a plain ``opacus.PrivacyEngine``, build the optimizer yourself: ``optimizer =
DiceSGDOptimizer(torch.optim.SGD(...), noise_multiplier=z, max_grad_norm=C1,
feedback_clip_norm=C2, expected_batch_size=B)`` and
``optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=B / n))`` with
``accountant = LabRDPAccountant()``. Ghost clipping (``grad_sample_mode="ghost"``) is not
supported by these optimizers (they need the per-sample gradients), nor ``secure_mode``
(their noise is the lab's ``torch.randn`` draw, so that runs can be reproduced).
"""
from __future__ import annotations

import torch

try:
    from opacus import PrivacyEngine as _OpacusPrivacyEngine
    from opacus.accountants import IAccountant
    from opacus.accountants.registry import _ACCOUNTANTS, register_accountant
    from opacus.data_loader import dtype_safe, shape_safe, wrap_collate_with_empty
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers import get_optimizer_class as _opacus_optimizer_class
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed
except ImportError as err:  # pragma: no cover - exercised with opacus hidden
    raise ImportError("dpclip_lab.opacus needs Opacus, an optional dependency of the lab: pip install opacus "
                      f"(1.5 or later). The rest of dpclip_lab works without it. (Import failed: {err})") from err

from ._validation import check_int, check_nonnegative, check_open_unit, check_positive, check_probability
from .accountants.calibration import ACCOUNTANTS, get_noise_multiplier, make_accountant
from .accountants.events import (ComposedEvent, GaussianEvent, NonPrivateEvent, NoOpEvent, PoissonSampledEvent,
                                 SelfComposedEvent)
from .algorithms.adaptive_clipping import default_count_noise_std, event_noise_multiplier
from .algorithms.dice_sgd import (RELATIONS, batch_multiplicity, dicesgd_effective_noise_multiplier,
                                  dicesgd_noise_multiplier)
from .algorithms.distributed import DataParallel, all_reduce_shares, share
from .algorithms.oracles import Sums
from .clipping import safe_norm
from .privatizers import ErrorFeedbackPrivatizer, QuantilePrivatizer, _scale_fn, adjusted_noise_multiplier
from .sampling import Batch, batch_stream, make_sampler

__all__ = ["LabAccountant", "LabRDPAccountant", "LabPLDAccountant", "make_opacus_accountant", "step_event",
           "LabBatchSampler", "lab_data_loader", "DiceSGDOptimizer", "QuantileClippingOptimizer",
           "DistributedDiceSGDOptimizer", "DistributedQuantileClippingOptimizer", "get_optimizer_class",
           "PrivacyEngine", "LAB_CLIPPING"]

#: The ``clipping=`` values :class:`PrivacyEngine` adds to Opacus's.
LAB_CLIPPING = ("dice_sgd", "quantile")


# -- accountants ---------------------------------------------------------------------------------
def step_event(noise_multiplier: float, sample_rate: float):
    """One step of an accountant's ``history`` as the lab's event: the Gaussian mechanism with noise
    multiplier ``z``, on a Poisson sample of rate ``q`` (Mironov, Talwar & Zhang (2019), Sec. 3.3;
    Abadi et al. (2016), Alg. 1), or on all the data when ``q = 1`` (no amplification: DiceSGD's steps,
    Zhang et al. (2024), Alg. 2). ``z = 0`` is ``NonPrivateEvent``."""
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    q = check_probability(sample_rate, "sample_rate")
    if z == 0:
        return NonPrivateEvent()
    return GaussianEvent(z) if q == 1.0 else PoissonSampledEvent(q, GaussianEvent(z))


class LabAccountant(IAccountant):
    """Lab utility: the lab's accountant (``accountant``: ``"rdp"`` or ``"pld"``) as an Opacus ``IAccountant``.

    ``history`` is Opacus's: ``(noise_multiplier, sample_rate, steps)`` triples, consecutive equal
    steps merged. Each triple is the lab event ``SelfComposedEvent(step_event(z, q), steps)``
    (:func:`step_event`; ``q = 1`` is a step without amplification); :meth:`dp_event` composes them
    and :meth:`get_epsilon` asks the lab's accountant. A lab optimizer (:class:`DiceSGDOptimizer`,
    :class:`QuantileClippingOptimizer`) tells the hook of :meth:`get_optimizer_hook_fn` its own
    record of a step (``lab_step_record``); any other Opacus optimizer is recorded as Opacus
    records it, ``(optimizer.noise_multiplier, sample_rate)``. ``len`` is the number of steps.
    ``accountant_kwargs`` go to the lab's accountant (e.g. ``orders`` for RDP).
    """

    accountant = "rdp"

    def __init__(self, **accountant_kwargs):
        self.history = []
        self.accountant_kwargs = dict(accountant_kwargs)
        make_accountant(self.accountant, **self.accountant_kwargs)  # bad options fail now, not at get_epsilon

    @classmethod
    def mechanism(cls) -> str:
        return f"lab_{cls.accountant}"

    def step(self, *, noise_multiplier: float, sample_rate: float):
        """Record one Gaussian step with ``noise_multiplier`` on a Poisson sample of rate ``sample_rate``."""
        z = check_nonnegative(noise_multiplier, "noise_multiplier")
        q = check_probability(sample_rate, "sample_rate")
        if self.history and tuple(self.history[-1][:2]) == (z, q):
            self.history[-1] = (z, q, self.history[-1][2] + 1)
        else:
            self.history.append((z, q, 1))

    def dp_event(self):
        """The lab event of every step so far (``NoOpEvent`` before the first)."""
        parts = []
        for z, q, count in self.history:
            ev = step_event(z, q)
            parts.append(ev if isinstance(ev, (NonPrivateEvent, NoOpEvent)) else SelfComposedEvent(ev, count))
        if not parts:
            return NoOpEvent()
        return parts[0] if len(parts) == 1 else ComposedEvent(tuple(parts))

    def get_epsilon(self, delta: float) -> float:
        """ε at ``delta`` of every step so far, by the lab's accountant."""
        d = check_open_unit(delta, "delta")
        return make_accountant(self.accountant, **self.accountant_kwargs).compose(self.dp_event()).get_epsilon(d)

    def __len__(self) -> int:
        return sum(c for _, _, c in self.history)

    def get_optimizer_hook_fn(self, sample_rate: float):
        """The step hook for ``optimizer.attach_step_hook``: records each step with ``sample_rate``
        (times the accumulated iterations, as Opacus does), or the optimizer's own ``lab_step_record``."""
        q = check_probability(sample_rate, "sample_rate")

        def hook_fn(optim):
            q_t = min(1.0, q * optim.accumulated_iterations)
            record = getattr(optim, "lab_step_record", None)
            z, q_rec = record(q_t) if record is not None else (optim.noise_multiplier, q_t)
            self.step(noise_multiplier=z, sample_rate=q_rec)

        hook_fn.lab_accountant = self
        return hook_fn

    def __repr__(self) -> str:
        return f"{type(self).__name__}(steps={len(self)}, history={self.history!r})"


class LabRDPAccountant(LabAccountant):
    """Lab utility: :class:`LabAccountant` with the lab's RDP accountant (Opacus mechanism ``"lab_rdp"``)."""

    accountant = "rdp"


class LabPLDAccountant(LabAccountant):
    """Lab utility: :class:`LabAccountant` with the lab's tight PLD accountant (Opacus mechanism ``"lab_pld"``)."""

    accountant = "pld"


_LAB_ACCOUNTANTS = {"rdp": LabRDPAccountant, "pld": LabPLDAccountant}
for _cls in _LAB_ACCOUNTANTS.values():
    if _cls.mechanism() not in _ACCOUNTANTS:
        register_accountant(_cls.mechanism(), _cls)


def make_opacus_accountant(accountant: str = "rdp", **accountant_kwargs) -> LabAccountant:
    """Lab utility: a fresh :class:`LabRDPAccountant` (``"rdp"``) or :class:`LabPLDAccountant` (``"pld"``)."""
    name = accountant[4:] if isinstance(accountant, str) and accountant.startswith("lab_") else accountant
    if name not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS} (the lab's accountants), got {accountant!r}")
    return _LAB_ACCOUNTANTS[name](**accountant_kwargs)


# -- the lab's batches as a batch sampler ---------------------------------------------------------
class LabBatchSampler(torch.utils.data.Sampler):
    """Lab utility: the batches ``dl.train`` draws, as a ``DataLoader`` batch sampler (lists of indices).

    ``steps`` batches of the lab's ``sampling`` scheme (:func:`dpclip_lab.sampling.make_sampler`) drawn
    from ``generator`` (a ``torch.Generator``, or an integer seed) exactly as ``dl.train`` draws them
    with ``seed``: pass the same generator to the optimizer (``noise_generator=``) and the noise draws
    interleave as in ``dl.train``. Each iteration continues the generator's stream. ``distributed=True``:
    every rank draws the whole batch (all ranks must seed alike) and keeps its contiguous share
    (:func:`dpclip_lab.algorithms.distributed.share`), as the data-parallel ``dl.train`` splits it.
    """

    def __init__(self, n: int, batch_size, *, steps: int, sampling: str = "poisson", generator=None,
                 distributed: bool = False):
        self.n = check_int(n, "n", minimum=1)
        self.steps = check_int(steps, "steps", minimum=1)
        self.sampling = sampling
        sampler = make_sampler(sampling, self.n, batch_size)  # validates the scheme and the batch size
        self.batch_size, self.sample_rate = sampler.batch_size, sampler.sample_rate
        if generator is None:
            generator = torch.Generator()
            generator.seed()
        elif not isinstance(generator, torch.Generator):
            generator = torch.Generator().manual_seed(check_int(generator, "generator (a seed)"))
        self.generator = generator
        if distributed:
            dp = DataParallel()
            self.rank, self.world_size = dp.rank, dp.world_size
        else:
            self.rank, self.world_size = 0, 1

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        draws = batch_stream(make_sampler(self.sampling, self.n, self.batch_size), 0, 1, self.generator,
                             self.generator.device)
        for _ in range(self.steps):
            idx = next(draws).padded()[0].reshape(-1)
            lo, hi = share(idx.numel(), self.rank, self.world_size)
            yield idx[lo:hi].tolist()


def lab_data_loader(dataset, batch_size, *, steps: int, sampling: str = "poisson", generator=None,
                    distributed: bool = False, collate_fn=None, **loader_kwargs) -> torch.utils.data.DataLoader:
    """Lab utility: a ``DataLoader`` over ``dataset`` with :class:`LabBatchSampler` batches (empty batches allowed).

    Keep ``num_workers=0`` when the optimizer shares ``generator``: workers prefetch batches,
    which changes the order of the draws (not their distribution).
    """
    sampler = LabBatchSampler(len(dataset), batch_size, steps=steps, sampling=sampling, generator=generator,
                              distributed=distributed)
    first = dataset[0]
    collate = wrap_collate_with_empty(collate_fn=collate_fn or torch.utils.data.default_collate,
                                      sample_empty_shapes=[(0, *shape_safe(x)) for x in first],
                                      dtypes=[dtype_safe(x) for x in first])
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, **loader_kwargs)


# -- optimizers ----------------------------------------------------------------------------------
class _Given:
    """The sums computed from Opacus's per-sample gradients, as the oracle a lab privatizer asks."""

    def __init__(self, sums: Sums):
        self.sums = sums

    def reduce(self, theta, batch, scale, **_):
        return self.sums


class _LabDPOptimizer(DPOptimizer):
    """An Opacus ``DPOptimizer`` whose step is one of the lab's privatizers (see the subclasses)."""

    #: Whether the privatizer needs the raw (unclipped) sum (error feedback).
    needs_raw = False
    #: Privatizer state that depends on the noise: broadcast from rank 0 in the distributed versions.
    noisy_state = ()

    def __init__(self, optimizer, *, noise_multiplier, max_grad_norm, expected_batch_size, loss_reduction="mean",
                 generator=None, secure_mode=False, **kwargs):
        if kwargs:
            raise TypeError(f"{type(self).__name__} got unexpected arguments {sorted(kwargs)}")
        if secure_mode:
            raise ValueError(f"secure_mode=True is not supported by {type(self).__name__}: its noise is the lab's "
                             "torch.randn draw (so that a run reproduces dl.train); use Opacus's own DPOptimizer "
                             "for secure noise")
        if loss_reduction != "mean":
            raise ValueError(f"loss_reduction must be 'mean' for {type(self).__name__} (the lab's step averages "
                             f"over the expected batch size), got {loss_reduction!r}")
        if expected_batch_size is None:
            raise ValueError("expected_batch_size is required (the expected batch size B the sums are divided by)")
        check_positive(expected_batch_size, "expected_batch_size")
        super().__init__(optimizer, noise_multiplier=check_nonnegative(noise_multiplier, "noise_multiplier"),
                         max_grad_norm=check_positive(max_grad_norm, "max_grad_norm"),
                         expected_batch_size=expected_batch_size, loss_reduction="mean", generator=generator,
                         secure_mode=False)
        self.privatizer = self._make_privatizer()
        #: The privatizer's state (clip norm; DiceSGD's error e), created at the first step.
        self.privatizer_state = None
        #: The last step's diagnostics (fraction clipped, batch size, ...), each a tensor ``[1]``.
        self.last_stats = None
        self._acc = None

    # the pieces the distributed versions replace
    world_size_factor = 1

    def _sums(self, scaled, raw, norms) -> Sums:
        return Sums(scaled, raw, norms, None)

    def _agree(self, direction):
        return direction

    def _make_privatizer(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def _sync_noise(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def lab_step_record(self, sample_rate: float) -> tuple[float, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def batch_size(self) -> float:
        """The expected batch size B of one step, over all ranks (Opacus's ``expected_batch_size`` is per rank)."""
        B = float(self.expected_batch_size) * self.world_size_factor
        Bi = round(B)
        return float(Bi) if abs(B - Bi) <= 1e-9 * B else B

    def _like(self):
        p0 = self.params[0]
        P = sum(p.numel() for p in self.params)
        return torch.zeros((1, P), dtype=p0.dtype, device=p0.device)

    def clip_and_accumulate(self):
        """Per-sample norms, rescaled (and raw) sums of this physical batch, added to the step's."""
        params = self.params
        for p in params:
            _check_processed_flag(p.grad_sample)
        like = self._like()
        if self.privatizer_state is None:
            self.privatizer_state = self.privatizer.init_state(1, like.shape[1], like)
        scale = _scale_fn(self.privatizer_state["clip_norm"], self.privatizer.normalize, self.privatizer.stability)
        gs = self.grad_samples
        m = len(gs[0])
        if m == 0:
            norms, scaled = like.new_zeros(0), like.new_zeros(like.shape[1])
            raw = scaled.clone() if self.needs_raw else None
        else:
            flat = [g.reshape(m, -1).to(p.dtype) for g, p in zip(gs, params)]
            norms = safe_norm(torch.stack([safe_norm(f) for f in flat], dim=1))           # [m]
            s = scale(norms.unsqueeze(0))[0]                                               # [m]
            scaled = torch.cat([s @ f for f in flat])
            raw = torch.cat([f.sum(0) for f in flat]) if self.needs_raw else None
        for p in params:
            _mark_as_processed(p.grad_sample)
        if self._acc is None:
            self._acc = [scaled, raw, [norms]]
        else:
            self._acc[0] = self._acc[0] + scaled
            if raw is not None:
                self._acc[1] = self._acc[1] + raw
            self._acc[2].append(norms)

    def add_noise(self):
        """The lab privatizer's step on the accumulated sums: ``p.grad`` is the released direction."""
        if self._acc is None:
            raise ValueError("no per-sample gradients were clipped since the last step: call backward() first")
        scaled, raw, norms = self._acc
        self._acc = None
        like = self._like()
        sums = self._sums(scaled.unsqueeze(0), None if raw is None else raw.unsqueeze(0),
                          torch.cat(norms).unsqueeze(0))
        size = torch.full((1,), sums.norms.shape[-1], dtype=like.dtype, device=like.device)
        batch = Batch(None, None, self.batch_size() * self.accumulated_iterations, size)
        self._sync_noise()
        direction, stats = self.privatizer(_Given(sums), like, batch, self.privatizer_state, self.generator)
        direction = self._agree(direction)
        offset = 0
        for p in self.params:
            k = p.numel()
            p.grad = direction[0, offset:offset + k].reshape(p.shape)
            offset += k
        self.last_stats = stats

    def scale_grad(self):
        """Nothing: the privatizer's direction is already divided by the expected batch size."""

    def zero_grad(self, set_to_none: bool = False):
        super().zero_grad(set_to_none)
        if not self._is_last_step_skipped:
            self._acc = None

    def state_dict(self):
        sd = super().state_dict()
        if self.privatizer_state is not None:
            sd["dpclip_lab_privatizer_state"] = {k: v.clone() for k, v in self.privatizer_state.items()}
        return sd

    def load_state_dict(self, state_dict) -> None:
        state_dict = dict(state_dict)
        lab = state_dict.pop("dpclip_lab_privatizer_state", None)
        super().load_state_dict(state_dict)
        if lab is not None:
            self.privatizer_state = {k: v.clone() for k, v in lab.items()}


class DiceSGDOptimizer(_LabDPOptimizer):
    """DiceSGD (Zhang et al. (2024), Alg. 2; Alg. 4 with ``normalize=True``) as an Opacus ``DPOptimizer``.

    Each step, from Opacus's per-sample gradients of the batch (``max_grad_norm`` = C1,
    ``feedback_clip_norm`` = C2 ≥ C1, B = ``expected_batch_size``)::

        v = (1/B) Σ_i clip(g_i, C1) + clip(e, C2);   p.grad = v + N(0, (z C1 / B)² I);   e ← e + (1/B) Σ_i g_i − v

    by the lab's :class:`~dpclip_lab.privatizers.ErrorFeedbackPrivatizer` itself — one flat
    ``torch.randn`` over all parameters from ``generator``, as ``dl.train(method="dice_sgd")``
    draws it — and the wrapped optimizer steps on ``p.grad``. The hidden error ``e`` is
    :attr:`error` (never released). The privacy record of a step is ``GaussianEvent(z_eff)``
    with ``z_eff = σ1 / Δ``, ``Δ = m C1/B + 2 C2`` (add/remove; :func:`dicesgd_effective_noise_multiplier`)
    and **no** subsampling amplification: :meth:`lab_step_record` gives it to a
    :class:`LabAccountant`, and :meth:`attach_step_hook` refuses Opacus's own accountants.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The wrapped optimizer (``torch.optim.SGD(lr=η)`` is Alg. 2's update).
    noise_multiplier, max_grad_norm, expected_batch_size, generator
        As in Opacus's ``DPOptimizer``: z, C1, B and the noise's ``torch.Generator``.
    feedback_clip_norm : float
        C2 ≥ C1.
    normalize, stability
        Normalize instead of clipping (automatic DiceSGD, Alg. 4), ``C g / (‖g‖ + γ)``.
    relation : {"add_remove", "replace_one"}
        The neighbouring relation of the record (:func:`~dpclip_lab.algorithms.dicesgd_sensitivity`).
    multiplicity : int
        The most times one example appears in a batch (``B`` when sampling with replacement).
    """

    needs_raw = True

    def __init__(self, optimizer, *, noise_multiplier, max_grad_norm, feedback_clip_norm, expected_batch_size,
                 normalize=False, stability=0.0, relation="add_remove", multiplicity=1, loss_reduction="mean",
                 generator=None, secure_mode=False, **kwargs):
        C1 = check_positive(max_grad_norm, "max_grad_norm")
        C2 = check_positive(feedback_clip_norm, "feedback_clip_norm")
        if C1 > C2:
            raise ValueError(f"max_grad_norm (C1) must be at most feedback_clip_norm (C2): DiceSGD (Zhang et al. "
                             f"2024, Alg. 2) requires C1 <= C2, got C1 = {C1:g} > C2 = {C2:g}")
        if relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
        self.feedback_clip_norm, self.relation = C2, relation
        self.multiplicity = check_int(multiplicity, "multiplicity", minimum=1)
        self.normalize, self.stability = bool(normalize), check_nonnegative(stability, "stability")
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=C1,
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction, generator=generator,
                         secure_mode=secure_mode, **kwargs)

    def _make_privatizer(self):
        return ErrorFeedbackPrivatizer(self.max_grad_norm, self.feedback_clip_norm, self.noise_multiplier,
                                       normalize=self.normalize, stability=self.stability)

    def _sync_noise(self):
        z = check_nonnegative(self.noise_multiplier, "noise_multiplier")
        self.privatizer.noise_multiplier = z

    @property
    def error(self) -> torch.Tensor | None:
        """DiceSGD's hidden error state ``e`` (flat, in the parameters' order); None before the first step."""
        return None if self.privatizer_state is None else self.privatizer_state["error"][0]

    def lab_step_record(self, sample_rate: float) -> tuple[float, float]:
        """``(z_eff, 1.0)``: one Gaussian mechanism of DiceSGD's sensitivity, without amplification."""
        B = self.batch_size() * self.accumulated_iterations
        if B != int(B):
            raise ValueError(f"DiceSGD's privacy record needs an integer expected batch size, got B = {B!r}")
        z_eff = dicesgd_effective_noise_multiplier(self.noise_multiplier, self.max_grad_norm,
                                                   self.feedback_clip_norm, int(B), self.relation,
                                                   multiplicity=self.multiplicity)
        return z_eff, 1.0

    def attach_step_hook(self, fn):
        if fn is not None and not isinstance(getattr(fn, "lab_accountant", None), LabAccountant):
            raise ValueError(
                "accountant: DiceSGD is not the Poisson-subsampled Gaussian mechanism Opacus's accountants "
                "record (its error state carries unclipped gradients of examples outside the batch, so no "
                "amplification applies and the sensitivity is C1/B + 2 C2): account it with "
                "dpclip_lab.opacus.LabRDPAccountant or LabPLDAccountant, e.g. "
                "dpclip_lab.opacus.PrivacyEngine(accountant='rdp')")
        super().attach_step_hook(fn)


class QuantileClippingOptimizer(_LabDPOptimizer):
    """DP-SGD with quantile (adaptive) clipping (Andrew et al. (2021), Alg. 1, Thm 1) as an Opacus ``DPOptimizer``.

    The step of the lab's :class:`~dpclip_lab.privatizers.QuantilePrivatizer` (the one
    ``dl.train(method="adaptive")`` runs): clip at C, add ``N(0, (z_Δ C)² I)`` with
    ``z_Δ = (z⁻² − (2σ_b)⁻²)^{-1/2}``, divide by B, then move C geometrically toward the
    ``target_quantile`` of the norms by the noisy *centered* count
    ``(Σ_i (1[‖g_i‖ ≤ C] − ½) + N(0, σ_b²)) / B + ½``. Unlike Opacus's ``AdaClipDPOptimizer`` the
    count is centered (sensitivity ½, as Thm 1 needs), divided by the expected batch size, and
    ``C`` is not clamped. The record of a step is DP-SGD's with the total ``z`` on a Poisson
    sample (:meth:`lab_step_record`). ``max_grad_norm`` is the initial C and follows the current one.

    Parameters
    ----------
    target_quantile : float in (0, 1)
        γ, as in :func:`dpclip_lab.algorithms.dp_sgd_adaptive_clipping`.
    clip_lr : float ≥ 0
        η_C.
    count_noise_std : float or None
        σ_b (default ``max(B/20, z)``).
    """

    noisy_state = ("clip_norm",)

    def __init__(self, optimizer, *, noise_multiplier, max_grad_norm, expected_batch_size, target_quantile=0.5,
                 clip_lr=0.2, count_noise_std=None, loss_reduction="mean", generator=None, secure_mode=False,
                 **kwargs):
        self.target_quantile, self.clip_lr = target_quantile, clip_lr
        if count_noise_std is None and expected_batch_size is not None:
            count_noise_std = default_count_noise_std(expected_batch_size * self.world_size_factor, noise_multiplier)
        self.count_noise_std = count_noise_std
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction, generator=generator,
                         secure_mode=secure_mode, **kwargs)

    def _make_privatizer(self):
        return QuantilePrivatizer(self.max_grad_norm, self.noise_multiplier, target_quantile=self.target_quantile,
                                  clip_lr=self.clip_lr, count_noise_std=self.count_noise_std)

    def _sync_noise(self):
        z = check_nonnegative(self.noise_multiplier, "noise_multiplier")
        if z != self.privatizer.noise_multiplier:
            self.privatizer.gradient_noise_multiplier = (
                adjusted_noise_multiplier(z, self.privatizer.count_noise_std) if z else 0.0)
            self.privatizer.noise_multiplier = z

    def add_noise(self):
        super().add_noise()
        self.max_grad_norm = float(self.privatizer_state["clip_norm"][0])

    def lab_step_record(self, sample_rate: float) -> tuple[float, float]:
        """``(z, sample_rate)``: DP-SGD's Poisson record with the total multiplier (Thm 1)."""
        z = self.privatizer.noise_multiplier
        return event_noise_multiplier("poisson", z, self.privatizer.gradient_noise_multiplier,
                                      self.privatizer.count_noise_std), sample_rate


class _DataParallelSteps:
    """The distributed versions: the ranks' shares summed by one all-reduce, rank 0's noise for every rank."""

    def _init_dp(self):
        self.dp = DataParallel()
        self.rank, self.world_size = self.dp.rank, self.dp.world_size

    @property
    def world_size_factor(self) -> int:
        return self.dp.world_size

    def _sums(self, scaled, raw, norms) -> Sums:
        return all_reduce_shares(self.dp, scaled, raw, norms)

    def _agree(self, direction):
        # The direction (and the noisy part of the state, e.g. the adaptive clip norm) of rank 0 on every rank:
        # the ranks need not share a generator, and every rank steps alike.
        state = self.privatizer_state
        flat = torch.cat([direction.reshape(-1)] + [state[k].reshape(-1) for k in self.noisy_state])
        self.dp.broadcast(flat, "broadcast of rank 0's noisy direction")
        direction = flat[:direction.numel()].view_as(direction)
        offset = direction.numel()
        for k in self.noisy_state:
            n = state[k].numel()
            state[k] = flat[offset:offset + n].view_as(state[k]).clone()
            offset += n
        return direction


class DistributedDiceSGDOptimizer(_DataParallelSteps, DiceSGDOptimizer):
    """:class:`DiceSGDOptimizer` for Opacus's distributed training (Zhang et al. (2024), Alg. 2 on W ranks).

    Each rank clips its own per-sample gradients; one all-reduce sums the ranks' clipped sums,
    raw sums and norms, every rank updates the same error ``e``, and rank 0's noisy direction is
    broadcast. ``expected_batch_size`` is the per-rank one (Opacus's convention): B is its W-fold.
    """

    def __init__(self, optimizer, **kwargs):
        self._init_dp()
        super().__init__(optimizer, **kwargs)


class DistributedQuantileClippingOptimizer(_DataParallelSteps, QuantileClippingOptimizer):
    """:class:`QuantileClippingOptimizer` for Opacus's distributed training (Andrew et al. (2021), Alg. 1 on W ranks).

    The ranks' sums and unclipped counts are summed by one all-reduce; rank 0's noisy direction
    and next clip norm are broadcast. ``expected_batch_size`` is the per-rank one.
    """

    def __init__(self, optimizer, **kwargs):
        self._init_dp()
        super().__init__(optimizer, **kwargs)


_LAB_OPTIMIZERS = {("dice_sgd", False): DiceSGDOptimizer, ("dice_sgd", True): DistributedDiceSGDOptimizer,
                   ("quantile", False): QuantileClippingOptimizer,
                   ("quantile", True): DistributedQuantileClippingOptimizer}


def get_optimizer_class(clipping: str, distributed: bool, grad_sample_mode: str | None = None):
    """Lab utility: ``opacus.optimizers.get_optimizer_class`` plus ``clipping="dice_sgd"`` and ``"quantile"``."""
    if clipping in LAB_CLIPPING:
        if grad_sample_mode not in (None, "hooks", "functorch", "ew"):
            raise ValueError(f"clipping={clipping!r} needs per-sample gradients: grad_sample_mode must be 'hooks', "
                             f"'functorch' or 'ew', got {grad_sample_mode!r}")
        return _LAB_OPTIMIZERS[(clipping, bool(distributed))]
    return _opacus_optimizer_class(clipping=clipping, distributed=distributed, grad_sample_mode=grad_sample_mode)


class PrivacyEngine(_OpacusPrivacyEngine):
    """Lab utility: an ``opacus.PrivacyEngine`` with the lab's accountants and ``clipping="dice_sgd"`` / ``"quantile"``.

    ``accountant``: ``"rdp"`` or ``"pld"`` — the lab's (:class:`LabRDPAccountant`,
    :class:`LabPLDAccountant`; ``accountant_kwargs`` go to them) — or one of Opacus's other names
    (``"prv"``, ``"gdp"``; not with DiceSGD). :meth:`make_private` takes Opacus's arguments, plus
    ``clipping="dice_sgd"`` (with ``feedback_clip_norm=`` and optionally ``normalize``, ``stability``)
    and ``clipping="quantile"`` (with ``target_quantile``, ``clip_lr``, ``count_noise_std``). A data
    loader from :func:`lab_data_loader` keeps its batches (no Opacus resampling), and its batch size
    and sampling rate are the ones the optimizer and the accountant use.
    """

    def __init__(self, *, accountant: str = "rdp", secure_mode: bool = False, **accountant_kwargs):
        lab = accountant in ACCOUNTANTS or accountant in ("lab_rdp", "lab_pld")
        if accountant_kwargs and not lab:
            raise TypeError(f"accountant options {sorted(accountant_kwargs)} are for the lab's accountants "
                            f"('rdp', 'pld'), not {accountant!r}")
        super().__init__(accountant="rdp" if lab else accountant, secure_mode=secure_mode)
        if lab:
            self.accountant = make_opacus_accountant(accountant, **accountant_kwargs)
        self._lab_sampler = None

    def make_private(self, *, module, optimizer, data_loader, noise_multiplier, max_grad_norm, clipping="flat",
                     poisson_sampling=True, grad_sample_mode="hooks", **kwargs):
        """Opacus's ``make_private`` (same arguments and returns), with the lab's clippings and batch samplers."""
        if clipping in LAB_CLIPPING:
            get_optimizer_class(clipping, False, grad_sample_mode)  # checks grad_sample_mode before wrapping
        lab = getattr(data_loader, "batch_sampler", None)
        lab = lab if isinstance(lab, LabBatchSampler) else None
        if lab is not None:
            poisson_sampling = False  # the lab sampler's batches are the run's batches
            if clipping != "dice_sgd" and lab.sampling != "poisson":
                raise ValueError(f"clipping={clipping!r} is accounted as Poisson-subsampled steps: its data loader "
                                 f"must sample with sampling='poisson', got {lab.sampling!r}")
            import torch.distributed as dist
            from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
            distributed = isinstance(module, (DPDDP, torch.nn.parallel.DistributedDataParallel))
            world = dist.get_world_size() if distributed else 1
            if lab.world_size != world:
                raise ValueError(f"data_loader: a LabBatchSampler over {lab.world_size} rank(s) with a module on "
                                 f"{world}: use lab_data_loader(..., distributed=True) with a distributed module, "
                                 "and distributed=False otherwise")
        self._lab_sampler = lab
        try:
            out = super().make_private(module=module, optimizer=optimizer, data_loader=data_loader,
                                       noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                                       clipping=clipping, poisson_sampling=poisson_sampling,
                                       grad_sample_mode=grad_sample_mode, **kwargs)
        finally:
            self._lab_sampler = None
        if lab is not None:
            model, dp_optimizer = out[0], out[1]
            if hasattr(model, "forbid_grad_accumulation"):
                model.forbid_grad_accumulation()
            dp_optimizer.attach_step_hook(self.accountant.get_optimizer_hook_fn(sample_rate=lab.sample_rate))
        return out

    def make_private_with_epsilon(self, *, module, optimizer, data_loader, target_epsilon, target_delta, epochs,
                                  max_grad_norm, clipping="flat", **kwargs):
        """Opacus's ``make_private_with_epsilon``, calibrated to the record the run will have.

        With a lab accountant: DiceSGD's z from :func:`~dpclip_lab.algorithms.dicesgd_noise_multiplier`
        (its sensitivity, no amplification), any other clipping's from the lab's Poisson
        :func:`~dpclip_lab.accountants.get_noise_multiplier`; ``epochs`` passes over ``data_loader``
        (a :func:`lab_data_loader` pass is its ``steps`` batches, of its own batch size and rate).
        """
        if not isinstance(self.accountant, LabAccountant):
            return super().make_private_with_epsilon(
                module=module, optimizer=optimizer, data_loader=data_loader, target_epsilon=target_epsilon,
                target_delta=target_delta, epochs=epochs, max_grad_norm=max_grad_norm, clipping=clipping, **kwargs)
        steps = check_int(epochs, "epochs", minimum=1) * len(data_loader)
        lab = getattr(data_loader, "batch_sampler", None)
        if isinstance(lab, LabBatchSampler):
            B, q, sampling = lab.batch_size, lab.sample_rate, lab.sampling
        else:
            q, sampling = 1 / len(data_loader), "poisson"
            B = int(len(data_loader.dataset) * q)
        name = self.accountant.accountant
        if clipping == "dice_sgd":
            if "feedback_clip_norm" not in kwargs:
                raise ValueError("clipping='dice_sgd' needs feedback_clip_norm (C2 >= max_grad_norm)")
            relation = kwargs.get("relation", "replace_one" if sampling == "with_replacement" else "add_remove")
            z = dicesgd_noise_multiplier(target_epsilon, target_delta, steps, max_grad_norm,
                                         kwargs["feedback_clip_norm"], B, accountant=name, relation=relation,
                                         multiplicity=kwargs.get("multiplicity", batch_multiplicity(sampling, B)))
        else:
            z = get_noise_multiplier(target_epsilon=target_epsilon, target_delta=target_delta, sample_rate=q,
                                     steps=steps, accountant=name)
        return self.make_private(module=module, optimizer=optimizer, data_loader=data_loader, noise_multiplier=z,
                                 max_grad_norm=max_grad_norm, clipping=clipping, **kwargs)

    def _prepare_optimizer(self, *, optimizer, noise_multiplier, max_grad_norm, expected_batch_size,
                           loss_reduction="mean", distributed=False, clipping="flat", noise_generator=None,
                           grad_sample_mode="hooks", **kwargs):
        lab = self._lab_sampler
        if lab is not None:
            world = lab.world_size if distributed else 1
            expected_batch_size = lab.batch_size / world if lab.batch_size % world else lab.batch_size // world
            if clipping == "dice_sgd":
                kwargs.setdefault("relation", "replace_one" if lab.sampling == "with_replacement" else "add_remove")
                kwargs.setdefault("multiplicity", batch_multiplicity(lab.sampling, lab.batch_size))
        if clipping not in LAB_CLIPPING:
            return super()._prepare_optimizer(
                optimizer=optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                expected_batch_size=expected_batch_size, loss_reduction=loss_reduction, distributed=distributed,
                clipping=clipping, noise_generator=noise_generator, grad_sample_mode=grad_sample_mode, **kwargs)
        if isinstance(optimizer, DPOptimizer):
            optimizer = optimizer.original_optimizer
        generator = self.secure_rng if self.secure_mode else noise_generator
        cls = get_optimizer_class(clipping, distributed, grad_sample_mode)
        return cls(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                   expected_batch_size=expected_batch_size, loss_reduction=loss_reduction, generator=generator,
                   secure_mode=self.secure_mode, **kwargs)


del _cls
