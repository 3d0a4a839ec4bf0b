"""How a step picks its examples, and what that means for privacy.

Four schemes, one interface (:meth:`Sampler.sample` returns a :class:`Batch`):

``"poisson"``
    Every example joins the batch independently with probability ``q = b/n``
    (Abadi et al. 2016; what the subsampled-Gaussian accountants assume). The
    realized size varies; sums are divided by the *expected* size ``b``.
``"shuffle"``
    Each epoch a fresh random permutation is cut into consecutive batches of
    size ``b`` (the last one smaller when ``b`` does not divide ``n``): every
    example is used exactly once per epoch.
``"with_replacement"``
    ``b`` indices drawn i.i.d. uniformly (Chen et al. eq. (8), footnote 2;
    Wang et al. Alg. 1–2 with ``b = 1``).
``"full"``
    All ``n`` examples every step (Song et al. Alg. 1).

Batched sweeps (``R`` runs) draw one independent batch per run from one
generator. Fixed-size schemes give indices ``[R, b]``; Poisson gives each run's
sorted members ``[R, K]`` padded with ``n`` (``Batch.positions``, drawn by
geometric gaps: O(nq) random numbers per run), from which :meth:`Batch.members`
and :meth:`Batch.padded` give ``[R, m]`` indices with 0/1 weights (``m`` the
largest realized size) and ``Batch.mask`` a Bernoulli mask ``[R, n]`` (built only
when an oracle asks for it). The training loop draws through
:meth:`Sampler.batch_stream`, which the Poisson sampler fills several steps at a
time (the same distribution: every step and run an independent subset).
With :class:`SeedGroups` (``seed=range(k)`` in the algorithms), each seed draws the
batches a single run with that seed would draw, and the runs ``s, s + k, …`` that
hold it share them (:meth:`Batch.tile`; ``Batch.groups = k``).

:func:`sampling_event` states the privacy of ``steps`` noisy steps under each
scheme as an accountant event (see its docstring for the neighbouring relation
each one uses).
"""
from __future__ import annotations

import copy
import math

import torch

from ._validation import check_int, check_nonnegative

__all__ = ["Batch", "Sampler", "PoissonSampler", "ShuffleSampler", "WithReplacementSampler",
           "FullBatchSampler", "make_sampler", "sampling_event", "events", "SAMPLING_SCHEMES", "poisson_positions",
           "SeedGroups"]

SAMPLING_SCHEMES = ("poisson", "shuffle", "with_replacement", "full")


class Batch:
    """Lab utility: the examples of one step for ``runs`` runs.

    A batch is given by one of ``idx`` (fixed-size schemes), ``positions``
    (Poisson sampling, Abadi et al. 2016 §3.1: sorted member indices per run) or
    ``mask`` (0/1 membership; built from ``positions`` on first access).

    Attributes
    ----------
    idx : LongTensor[m] or [R, m] or None
        Example indices; 1-D means the same batch for every run.
    positions : LongTensor[R, K] or None
        Poisson members of each run in increasing order, padded with ``n``
        (:func:`poisson_positions`). Oracles that can gather rows use it directly:
        O(nq) work per run instead of O(n).
    mask : Tensor[R, n] or None
        Poisson membership as 0/1 floats (``mask[r, i] = 1``: example i is in
        run r's batch), in the dtype the algorithm runs in, ready to weight sums.
        With ``positions`` it is computed (once) when first read.
    normalizer : float
        What sums are divided by: the expected batch size (``b``; ``n`` for full).
    sizes : Tensor[R]
        Realized batch sizes (for logging; never used to normalize).
    full : bool
        True when the batch is all ``n`` examples in order (``idx = arange(n)``).
    n : int or None
        Number of examples (the padding value of ``positions``).
    groups : int or None
        ``k`` when the runs share ``k`` batches (:class:`SeedGroups`): run ``r`` holds batch ``r % k``,
        so rows ``0, …, k-1`` hold the ``k`` distinct ones (:meth:`tile`). None: one batch per run.
    """

    __slots__ = ("idx", "_mask", "normalizer", "sizes", "full", "positions", "n", "dtype", "counts", "_padded",
                 "groups")

    def __init__(self, idx, mask, normalizer, sizes, full=False, *, positions=None, n=None, dtype=None,
                 counts=None, groups=None):
        if positions is not None and (idx is not None or mask is not None):
            raise ValueError("a Batch has one of idx, mask or positions")
        if positions is not None and n is None:
            raise ValueError("Batch(positions=...) needs n (the padding value)")
        self.idx, self._mask, self.normalizer, self.sizes, self.full = idx, mask, normalizer, sizes, full
        self.positions, self.n, self.dtype, self.counts, self._padded = positions, n, dtype, counts, None
        self.groups = groups

    @property
    def mask(self):
        if self._mask is None and self.positions is not None:
            R = self.positions.shape[0]
            dt = self.dtype if self.dtype is not None else torch.get_default_dtype()
            m = torch.zeros((R, self.n + 1), device=self.positions.device, dtype=dt)
            m.scatter_(1, self.positions, 1.0)
            self._mask = m[:, : self.n]
        return self._mask

    @mask.setter
    def mask(self, value):
        self._mask = value

    def __repr__(self) -> str:
        what = ("positions", self.positions) if self.positions is not None else (
            ("mask", self._mask) if self._mask is not None else ("idx", self.idx))
        shape = None if what[1] is None else tuple(what[1].shape)
        return f"Batch({what[0]} shape={shape}, normalizer={self.normalizer}, full={self.full})"

    def members(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Lab utility: Poisson members as ``[R, m]`` indices padded with ``n`` (``m`` the largest
        realized size) and 0/1 weights in ``dtype`` (None when no slot is padding); needs ``positions``."""
        if self._padded is None:
            # Count in integers: ``sizes`` is in the run's dtype (inexact above 256 in bfloat16).
            counts = self.counts if self.counts is not None else _member_counts(self.positions, self.n)
            R = counts.shape[0]
            if R == 1:
                lo = m = int(counts[0])
            else:
                lo, m = (int(v) for v in torch.aminmax(counts))  # one synchronization
            pos = self.positions[:, :m].contiguous()  # one copy here, not one in each consumer (reshape, embedding_bag)
            w = None
            if lo < m:
                w = (pos < self.n).to(self.dtype if self.dtype is not None else torch.get_default_dtype())
            self._padded = (pos, w)
        return self._padded

    @staticmethod
    def tile(batches: list, runs: int) -> "Batch":
        """Lab utility: one batch of ``runs`` runs from ``k`` one-run batches: run ``r`` gets ``batches[r % k]``
        (``runs`` a multiple of ``k``; the layout of :func:`dpclip_lab.algorithms.sweep_grid`)."""
        b0, k = batches[0], len(batches)
        sizes = tile_runs(torch.cat([b.sizes.reshape(1) for b in batches]), runs)
        if b0.positions is not None:
            K = max(b.positions.shape[1] for b in batches)
            pos = torch.cat([b.positions if b.positions.shape[1] == K else torch.nn.functional.pad(
                b.positions, (0, K - b.positions.shape[1]), value=b0.n) for b in batches])
            counts = torch.cat([(b.counts if b.counts is not None else _member_counts(b.positions, b.n)).reshape(1)
                                for b in batches])
            return Batch(None, None, b0.normalizer, sizes, positions=tile_runs(pos, runs), n=b0.n, dtype=b0.dtype,
                         counts=tile_runs(counts, runs), groups=k)
        if b0.full:
            return Batch(b0.idx, None, b0.normalizer, sizes, full=True, groups=k)
        if b0._mask is not None:
            return Batch(None, tile_runs(torch.cat([b._mask for b in batches]), runs), b0.normalizer, sizes, groups=k)
        idx = torch.cat([b.idx.reshape(1, -1) for b in batches])
        return Batch(tile_runs(idx, runs), None, b0.normalizer, sizes, groups=k)

    def padded(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Indices ``[R, m]`` (or shared ``[m]``) and 0/1 weights ``[R, m]`` (None if all ones).

        Padding slots hold a valid index (0) with weight 0.
        """
        if self.positions is not None:
            pos, w = self.members()
            if pos.shape[0] == 1:
                return pos, None  # one run: m is its size, every slot a member
            return (pos if w is None else pos.clamp(max=self.n - 1)), w
        if self._mask is None:
            return self.idx, None
        R, n = self._mask.shape
        member = self._mask > 0
        if R == 1:
            idx = member[0].nonzero().squeeze(1)
            return idx.unsqueeze(0), None
        order = torch.sort((~member).to(torch.uint8), dim=1, stable=True).indices
        m = int(self.sizes.max())
        idx = order[:, :m]
        weight = torch.gather(self._mask, 1, idx)
        return idx, weight


class SeedGroups:
    """Lab utility: the random streams of a sweep whose runs share seeds.

    ``SeedGroups(seeds)`` holds one ``torch.Generator`` per seed; run ``r`` of ``R`` draws from
    ``generators[r % k]`` (``k = len(seeds)``, ``R`` a multiple of ``k``). Each seed's generator makes
    the draws that a single run with that seed makes, in the same order, and the runs that share it
    share them: the same batches and the same standard-normal noise directions. So run ``r`` of
    ``dp_sgd(..., clip_norm=sweep_grid(Cs, k), seed=seeds)`` is the run
    ``dp_sgd(..., clip_norm=Cs[r // k], seed=seeds[r % k])``, up to floating-point summation order —
    what a loop over clip norms and seeds computes, with common random numbers across the clip norms.
    """

    def __init__(self, seeds, device=None):
        seeds = list(seeds.tolist() if isinstance(seeds, torch.Tensor) else seeds)
        if not seeds:
            raise ValueError("seed: a sequence of seeds needs at least one seed, got an empty one")
        self.seeds = [check_int(s, "seed") for s in seeds]
        self.generators = [torch.Generator(device=device if device is not None else "cpu").manual_seed(s)
                           for s in self.seeds]

    def __len__(self) -> int:
        return len(self.generators)

    def __repr__(self) -> str:
        return f"SeedGroups({self.seeds})"


def tile_runs(t: torch.Tensor, runs: int) -> torch.Tensor:
    """Lab utility: ``[k, ...]`` to ``[runs, ...]`` with row ``r`` equal to row ``r % k`` (the :class:`SeedGroups` layout)."""
    k = t.shape[0]
    return t if k == runs else t.repeat(runs // k, *([1] * (t.dim() - 1)))


def gaussian(shape, generator, device, dtype, lengths=None) -> torch.Tensor:
    """Lab utility: standard normals of ``shape`` (runs first) from ``generator``.

    From :class:`SeedGroups`, each seed draws ``(1, *shape[1:])`` — what one run with that seed draws —
    for all the runs that share it. ``lengths`` (``k`` ints, with seed groups only): seed ``s`` draws
    ``(1, lengths[s], *shape[2:])`` and the rest of dimension 1 is zero — per-example noise on a padded
    Poisson batch, where a single run would draw for its own members only.
    """
    if isinstance(generator, SeedGroups):
        if lengths is None:
            z = [torch.randn((1, *shape[1:]), generator=g, device=device, dtype=dtype) for g in generator.generators]
        else:
            z = [torch.nn.functional.pad(torch.randn((1, int(L), *shape[2:]), generator=g, device=device, dtype=dtype),
                                         (0, 0) * (len(shape) - 2) + (0, shape[1] - int(L)))
                 for g, L in zip(generator.generators, lengths)]
        return tile_runs(torch.cat(z), shape[0])
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)


def batch_stream(sampler, start: int, runs: int, generator, device, dtype=torch.float32):
    """Lab utility: the batches of steps ``start, start + 1, …`` (an endless iterator) for the training loop.

    A :class:`Sampler` draws through its :meth:`Sampler.batch_stream`; an object with only ``sample()``
    one step at a time. With :class:`SeedGroups` each seed draws its own one-run stream — the batches a
    single run with that seed sees — and the runs that share the seed share them (:meth:`Batch.tile`).
    """
    if isinstance(generator, SeedGroups):
        # One copy of the sampler per seed: a sampler's state (the shuffle's permutation) belongs to one stream.
        streams = [batch_stream(copy.copy(sampler), start, 1, g, device, dtype) for g in generator.generators]
        while True:
            yield Batch.tile([next(st) for st in streams], runs)
    if hasattr(sampler, "batch_stream"):
        yield from sampler.batch_stream(start, runs, generator, device, dtype)
        return
    t = start
    while True:
        yield sampler.sample(t, runs, generator, device, dtype)
        t += 1


class Sampler:
    """Lab utility: base class. ``batch_size`` is the (expected) batch size ``b``."""

    name = "?"

    def __init__(self, n: int, batch_size: int):
        self.n = check_int(n, "n", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        if self.batch_size > self.n:
            raise ValueError(f"batch_size must be at most n = {self.n}, got {batch_size!r}")

    @property
    def sample_rate(self) -> float:
        return self.batch_size / self.n

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def sample(self, step: int, runs: int, generator: torch.Generator, device,
               dtype=torch.float32) -> Batch:  # pragma: no cover
        raise NotImplementedError

    def batch_stream(self, start: int, runs: int, generator: torch.Generator, device, dtype=torch.float32):
        """Lab utility: the batches of steps ``start, start + 1, ...`` (an endless iterator), as the
        training loop draws them: one :meth:`sample` per step here; a sampler may draw several steps at once."""
        t = start
        while True:
            yield self.sample(t, runs, generator, device, dtype)
            t += 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, batch_size={self.batch_size})"


class PoissonSampler(Sampler):
    """Poisson subsampling with rate ``q = batch_size / n`` (Abadi et al. 2016, §3.1).

    The membership randomness is drawn in float64 whatever the model's dtype:
    ``torch.rand(dtype) < q`` is quantized to the dtype's grid (2⁻²⁴ in float32,
    2⁻¹¹ in float16, 2⁻⁸ in bfloat16), so in low precision the realized rate can be
    several times ``q`` and the accountant's ε an under-report. Only the 0/1 mask
    is cast to the run's dtype.
    """

    name = "poisson"

    #: :meth:`batch_stream` draws the batches of this many steps at once (fewer when their positions would
    #: pass :data:`CHUNK_BYTES`): about a dozen small tensor kernels a step become one set per chunk. On
    #: the benchmark CNN (8×8 images, batch 64) drawing a step's batch alone cost ~0.1 ms inside a training
    #: step, 4 % of it, most of ``dl.train``'s overhead over the bare step.
    CHUNK_STEPS = 32
    #: Memory bound of one chunk's member positions (int64), bytes.
    CHUNK_BYTES = 1 << 22

    def sample(self, step, runs, generator, device, dtype=torch.float32):
        if self.sample_rate >= 1.0:
            mask = torch.ones((runs, self.n), device=device, dtype=dtype)
            return Batch(None, mask, float(self.batch_size), torch.full((runs,), self.n, device=device).to(dtype))
        return self._draw(1, runs, generator, device, dtype)[0]

    def batch_stream(self, start, runs, generator, device, dtype=torch.float32):
        """Lab utility: the batches of steps ``start, start + 1, ...``, drawn :data:`CHUNK_STEPS` steps at a
        time by one :func:`poisson_positions` call: the same distribution as one :meth:`sample` per step (every
        run and step an independent Poisson subset), another order of the generator's draws. The chunk
        length depends on ``n``, ``q`` and ``runs`` only, so a run of T steps sees the same batches (and the
        same stream) as the first T steps of a longer one. A subclass that overrides :meth:`sample` is
        drawn through it, one step at a time."""
        if type(self).sample is not PoissonSampler.sample or self.sample_rate >= 1.0:
            yield from super().batch_stream(start, runs, generator, device, dtype)
            return
        row = _poisson_row_length(self.n, self.sample_rate)
        steps = max(1, min(self.CHUNK_STEPS, self.CHUNK_BYTES // (8 * runs * row)))
        while True:
            yield from self._draw(steps, runs, generator, device, dtype)

    def _draw(self, steps, runs, generator, device, dtype):
        """The batches of ``steps`` steps of ``runs`` runs, by one :func:`poisson_positions` call."""
        pos = poisson_positions(self.n, self.sample_rate, steps * runs, generator, device)  # n = "not a member"
        counts = _member_counts(pos, self.n)
        sizes = counts.to(dtype)  # exact count, then cast (bf16 sums drift)
        pos, counts, sizes = pos.view(steps, runs, -1), counts.view(steps, runs), sizes.view(steps, runs)
        # The mask [R, n] is built only if an oracle asks for it (Batch.mask): GLP oracles gather rows.
        return [Batch(None, None, float(self.batch_size), sizes[i], positions=pos[i], n=self.n, dtype=dtype,
                      counts=counts[i]) for i in range(steps)]


def _member_counts(positions: torch.Tensor, n: int) -> torch.Tensor:
    """Members per row (int32) of sorted positions ``[R, K]`` padded with ``n``: where ``n`` would be inserted
    (searchsorted: O(R log K), against a compare-and-sum pass over [R, K] at a tenth of the draw's cost)."""
    return torch.searchsorted(positions, positions.new_full((positions.shape[0], 1), n)).squeeze(1).to(torch.int32)


def _poisson_row_length(n: int, q: float) -> int:
    """Uniforms :func:`poisson_positions` draws first per run: the mean ``nq`` plus 6 standard deviations and 16."""
    mean = n * q
    return int(mean + 6.0 * math.sqrt(mean * (1 - q)) + 16)


def poisson_positions(n: int, q: float, runs: int, generator: torch.Generator, device) -> torch.Tensor:
    """Members of ``runs`` independent Poisson(q) subsets of ``range(n)``, by geometric gaps.

    Poisson subsampling of Abadi et al. (2016), §3.1, drawn in O(nq) per run.

    The gap before the next member is ``G = ⌊log U / log(1 − q)⌋ ~ Geometric(q)``
    (failures before a success), ``U`` uniform on (0, 1] in **float64**, so each
    example is a member independently with probability q up to float64 rounding
    (``rand(float32) < q`` would quantize q; see the class docstring). Drawing
    ``≈ nq + 6 sd`` gaps per run instead of n uniforms makes sampling O(nq) random
    numbers per run — the cost that dominated batched GLP sweeps. If a run's gaps
    do not reach n (probability < 1e-9 per step), more are drawn: the result is
    exact, not truncated.

    Returns
    -------
    LongTensor[runs, K]
        The sorted member indices of each run, padded with ``n``.
    """
    inv_log1mq = 1.0 / math.log1p(-q)
    k = _poisson_row_length(n, q)
    # A gap is at most log(2^-53) / log(1 - q) < 37 / q: clamp the gaps to n only where their running
    # sums could come near int64's range (q below ~1e-11), not at every draw.
    clamp = -37.0 * inv_log1mq > 2.0 ** 40
    start = -1  # the position before the first gap; then each run's last position so far
    chunks = []
    while True:
        u = torch.rand((runs, k), generator=generator, device=device, dtype=torch.float64)
        # 1 - u (exact: u lies on the 2^-53 grid) lies in (0, 1]; its log / log(1-q) >= 0; its integer
        # part (the conversion truncates, = floor for x >= 0) is the gap; +1 steps to the next member.
        # rsub + log: half the time of neg_ + log1p_ on CPU; a multiply by 1/log(1-q): a third of a division.
        g = torch.rsub(u, 1.0).log_().mul_(inv_log1mq)
        steps = (g.clamp_(max=n) if clamp else g).to(torch.int64).add_(1)
        pos = steps.cumsum_(1).add_(start)
        chunks.append(pos)
        start = pos[:, -1:]
        if int(start.min() if runs > 1 else start) >= n:  # every run has passed the last example
            break
        k = max(16, k // 4)
    pos = chunks[0] if len(chunks) == 1 else torch.cat(chunks, 1)
    return pos.clamp_(max=n)


class ShuffleSampler(Sampler):
    """Lab utility: random reshuffling: one permutation per epoch (and per run), consecutive batches.

    The last batch of an epoch holds ``n mod b`` examples when ``b`` does not
    divide ``n``; its normalizer is its own (deterministic, public) size.
    """

    name = "shuffle"

    def __init__(self, n, batch_size):
        super().__init__(n, batch_size)
        self._perm = None

    def sample(self, step, runs, generator, device, dtype=None):
        k = step % self.steps_per_epoch
        if k == 0 or self._perm is None or self._perm.shape[0] != runs:
            if runs == 1:
                self._perm = torch.randperm(self.n, generator=generator, device=device).unsqueeze(0)
            else:
                self._perm = torch.rand((runs, self.n), generator=generator, device=device).argsort(dim=1)
        idx = self._perm[:, k * self.batch_size:(k + 1) * self.batch_size]
        size = idx.shape[1]
        return Batch(idx, None, float(size), torch.full((runs,), size, device=device))


class WithReplacementSampler(Sampler):
    """``b`` indices drawn i.i.d. uniformly from ``[n]`` (duplicates possible): Chen, Wu & Hong (2020), eq. (8)."""

    name = "with_replacement"

    def sample(self, step, runs, generator, device, dtype=None):
        idx = torch.randint(0, self.n, (runs, self.batch_size), generator=generator, device=device)
        return Batch(idx, None, float(self.batch_size), torch.full((runs,), self.batch_size, device=device))


class FullBatchSampler(Sampler):
    """All ``n`` examples each step; no randomness (Song, Thakkar & Thakurta (2021), Alg. 1)."""

    name = "full"

    def __init__(self, n, batch_size=None):
        super().__init__(n, n if batch_size is None else batch_size)
        if self.batch_size != self.n:
            raise ValueError(f"sampling='full' uses all n = {self.n} examples; batch_size must be "
                             f"None or n, got {batch_size!r}")
        self._idx = {}

    def sample(self, step, runs, generator, device, dtype=None):
        key = str(device)
        if key not in self._idx:
            self._idx[key] = torch.arange(self.n, device=device)
        return Batch(self._idx[key], None, float(self.n), torch.full((runs,), self.n, device=device), full=True)


_SAMPLERS = {"poisson": PoissonSampler, "shuffle": ShuffleSampler,
             "with_replacement": WithReplacementSampler, "full": FullBatchSampler}


def make_sampler(sampling: str, n: int, batch_size: int | None) -> Sampler:
    """Lab utility: the sampler for a scheme name in :data:`SAMPLING_SCHEMES`.

    ``batch_size=None`` is allowed only for ``"full"``.
    """
    if sampling not in _SAMPLERS:
        raise ValueError(f"sampling must be one of {SAMPLING_SCHEMES}, got {sampling!r}")
    if sampling == "full":
        return FullBatchSampler(n, batch_size)
    if batch_size is None:
        raise ValueError(f"sampling={sampling!r} needs a batch_size (an integer in [1, n])")
    return _SAMPLERS[sampling](n, batch_size)


def events():
    """Lab utility: the accountants' event module (imported lazily: events are built only on request)."""
    try:
        from . import accountants as A
        A.GaussianEvent  # noqa: B018 - the package may not re-export yet
        return A
    except (ImportError, AttributeError):
        from .accountants import events as A
        return A


def sampling_event(sampling: str, *, noise_multiplier: float, steps: int, n: int, batch_size: int):
    """The accountant event of ``steps`` subsampled-Gaussian steps.

    Each step adds ``N(0, (z C)² I)`` to a sum of per-example gradients clipped
    to ``C``. By scheme (``z = noise_multiplier``, ``b = batch_size``):

    * ``"full"``: ``SelfComposedEvent(GaussianEvent(z), steps)`` (add/remove;
      the sum moves by at most ``C``).
    * ``"poisson"``: ``SelfComposedEvent(PoissonSampledEvent(b/n, GaussianEvent(z)), steps)``
      (add/remove; Abadi et al. 2016, Mironov et al. 2019).
    * ``"shuffle"``: no amplification theorem is used. Under the *zero-out*
      relation (one example replaced by one with zero gradient; Kairouz et al.
      2021) the batch layout is unchanged and an example enters exactly one
      step per epoch, so by parallel composition each epoch is one Gaussian
      mechanism: ``SelfComposedEvent(GaussianEvent(z), epochs)`` with
      ``epochs = ceil(steps / ceil(n/b))``. (Under replace-one, halve ``z``.)
    * ``"with_replacement"``: for ``b = 1`` a draw with replacement *is* a
      draw without replacement, so
      ``SelfComposedEvent(SampledWithoutReplacementEvent(n, 1, GaussianEvent(z/2)), steps)``
      (replace-one; sensitivity ``2C``, as in Wang et al. Thm 11). For
      ``b > 1`` an example may be drawn up to ``b`` times: the worst case
      ``SelfComposedEvent(GaussianEvent(z / (2b)), steps)`` (replace-one, no
      amplification). Sound but very loose: prefer ``"poisson"`` for accounting.

    ``noise_multiplier = 0`` gives ``NonPrivateEvent()``; ``steps = 0`` gives ``NoOpEvent()``.
    """
    A = events()
    GaussianEvent, NonPrivateEvent, NoOpEvent = A.GaussianEvent, A.NonPrivateEvent, A.NoOpEvent
    PoissonSampledEvent, SelfComposedEvent = A.PoissonSampledEvent, A.SelfComposedEvent
    SampledWithoutReplacementEvent = A.SampledWithoutReplacementEvent
    z = check_nonnegative(noise_multiplier, "noise_multiplier")
    steps = check_int(steps, "steps", minimum=0)
    if steps == 0:
        return NoOpEvent()
    if z == 0:
        return NonPrivateEvent()
    if sampling == "full":
        return SelfComposedEvent(GaussianEvent(z), steps)
    if sampling == "poisson":
        return SelfComposedEvent(PoissonSampledEvent(batch_size / n, GaussianEvent(z)), steps)
    if sampling == "shuffle":
        epochs = math.ceil(steps / math.ceil(n / batch_size))
        return SelfComposedEvent(GaussianEvent(z), epochs)
    if sampling == "with_replacement":
        if batch_size == 1:
            return SelfComposedEvent(SampledWithoutReplacementEvent(n, 1, GaussianEvent(z / 2)), steps)
        return SelfComposedEvent(GaussianEvent(z / (2 * batch_size)), steps)
    raise ValueError(f"sampling must be one of {SAMPLING_SCHEMES}, got {sampling!r}")
