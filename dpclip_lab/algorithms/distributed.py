"""Data parallelism: one DP step on several processes is the step one process takes.

A data-parallel step of the one loop (:func:`dpclip_lab.algorithms.loop.run`) on a
``torch.distributed`` process group of ``W`` processes ("ranks")::

    batch     = sampler.sample(t)          # every rank draws the WHOLE batch: same seed, same stream
    share     = batch[lo_r : hi_r]         # rank r keeps a contiguous slice of it (share(m, r, W))
    sums_r    = oracle.reduce(θ, share)    # its per-example norms, clipped (and raw) sums
    sums      = Σ_r sums_r                 # ONE all-reduce: the sums of the whole batch
    direction = privatizer(sums) + noise   # noise from the generator every rank seeded alike
    θ         ← update(θ, direction)       # the same update on every rank

Each rank therefore holds the θ that one process with the same seed computes (up to the
order of the floating-point sums), and the run is the same mechanism — the same batches,
the same per-example sensitivity, the same noise — so its privacy record is the
one-process record (Abadi et al. (2016), Alg. 1: only *where* the per-example gradients
are computed changes, not what is released). The noise is not split across ranks: it is
drawn once, identically, by every rank from the shared stream (drawing it on one rank and
summing would do as well, at the price of one more broadcast).

:class:`DistributedOracle` wraps any oracle of :mod:`dpclip_lab.algorithms.oracles` (the
training driver wraps its :class:`dpclip_lab.ghost.ModuleOracle`), so every privatizer —
clip + noise, pre-clipping perturbation, DiceSGD's error feedback, quantile clipping —
runs data-parallel unchanged. Pre-clipping perturbation draws its per-example noise for
the whole batch on every rank (the draws a single process makes) and each rank adds its
slice. One all-reduce per step carries the clipped sum, the raw sum (error feedback), the
per-example norms (fraction clipped, quantile counts), the logged loss and accuracy, and
a flag per rank for a rank whose share failed, so that a bad batch raises on every rank
instead of leaving the others waiting.

A process that dies mid-run makes the next collective fail on the others
(:class:`DataParallelError`, naming the step); one that stops answering is bounded by the
process group's timeout (``torch.distributed.init_process_group(..., timeout=...)``).
"""
from __future__ import annotations

import math

import torch

from .._validation import check_int
from ..per_sample import BatchStats, count_correct
from ..sampling import Batch, gaussian
from .oracles import CallableOracle, Sums, _materialized_reduce, as_oracle, has_pre_clip

__all__ = ["DataParallel", "DataParallelError", "DistributedOracle", "data_parallel", "share", "all_reduce_shares"]


class DataParallelError(RuntimeError):
    """Lab utility: a data-parallel run failed on another rank (a process died, timed out or raised)."""


def share(m: int, rank: int, world_size: int) -> tuple[int, int]:
    """Lab utility: the slots ``[lo, hi)`` of a batch of ``m`` slots that ``rank`` of ``world_size`` computes.

    Contiguous and as even as possible (sizes differ by at most one); a rank may get none.
    """
    return (m * rank) // world_size, (m * (rank + 1)) // world_size


def data_parallel(distributed=None) -> "DataParallel | None":
    """Lab utility: the process group a run is data-parallel on, or None for one process.

    ``distributed``: None (default) — data-parallel on the default group when
    ``torch.distributed`` is initialized with more than one process; False — one process
    whatever the group; True — data-parallel on the default group (which must be
    initialized); a ``torch.distributed.ProcessGroup`` — data-parallel on that group.
    """
    if distributed is False:
        return None
    import torch.distributed as dist
    ready = dist.is_available() and dist.is_initialized()
    if distributed is None:
        if not ready or dist.get_world_size() == 1:
            return None
        return DataParallel()
    if distributed is True:
        if not ready:
            raise ValueError("distributed=True needs an initialized torch.distributed process group: call "
                             "torch.distributed.init_process_group(...) on every process first (or pass "
                             "distributed=None to run data-parallel only when one is initialized)")
        return DataParallel()
    if ready and isinstance(distributed, dist.ProcessGroup):
        return DataParallel(distributed)
    raise TypeError("distributed must be None (data-parallel when a torch.distributed process group is "
                    "initialized), True, False or a torch.distributed.ProcessGroup, got "
                    f"{type(distributed).__name__} {distributed!r}")


class DataParallel:
    """Lab utility: a ``torch.distributed`` process group as a data-parallel run uses it.

    ``rank`` and ``world_size`` in the group; collectives that fail with a
    :class:`DataParallelError` naming the step, instead of the backend's bare error.
    """

    def __init__(self, group=None):
        import torch.distributed as dist
        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError("distributed: this process is not a member of the process group it was given")
        self.world_size = dist.get_world_size(group)
        self.src = 0 if group is None else dist.get_global_rank(group, 0)  # group rank 0, as a global rank
        self.backend = dist.get_backend(group)
        #: The step being run (0-based; None before the first), for messages.
        self.step = None

    def __repr__(self) -> str:
        return f"DataParallel(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r})"

    def _run(self, what: str, op, *args, **kwargs):
        try:
            return op(*args, group=self.group, **kwargs)
        except Exception as err:  # gloo / NCCL: RuntimeError, DistBackendError, DistNetworkError, timeouts
            where = "" if self.step is None else f" at step {self.step + 1}"
            cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DataParallelError(
                f"data-parallel run, rank {self.rank} of {self.world_size} ({self.backend}): the {what}{where} "
                "failed — another process of the group died, raised, or stopped answering (the wait is bounded "
                "by the process group's timeout, torch.distributed.init_process_group(..., timeout=...)). "
                f"Backend error: {type(err).__name__}: {cause}") from err

    def all_reduce(self, t: torch.Tensor, what: str = "all-reduce of the batch sums") -> torch.Tensor:
        """Lab utility: sum ``t`` over the ranks, in place; returns ``t``."""
        self._run(what, self.dist.all_reduce, t)
        return t

    def broadcast(self, t: torch.Tensor, what: str = "broadcast from rank 0") -> torch.Tensor:
        """Lab utility: rank 0's ``t`` on every rank, in place; returns ``t``."""
        self._run(what, self.dist.broadcast, t, src=self.src)
        return t

    def all_gather(self, t: torch.Tensor, what: str = "all-gather") -> torch.Tensor:
        """Lab utility: ``t`` of every rank, stacked ``[world_size, *t.shape]``."""
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        self._run(what, self.dist.all_gather, out, t)
        return torch.stack(out)

    def shared_seed(self, seed, like: torch.Tensor) -> int:
        """Lab utility: the seed every rank uses: ``seed`` (an integer), or rank 0's fresh one for None."""
        integer = seed is None or isinstance(seed, int) or hasattr(seed, "__index__")
        if isinstance(seed, torch.Generator) or not integer:
            raise TypeError(f"seed must be an integer or None for a data-parallel run (every rank seeds its own "
                            f"generator with it, so that all draw the same batches and noise), got {seed!r}")
        if seed is not None:
            return check_int(seed, "seed")
        fresh = torch.Generator().seed() % (1 << 63) if self.rank == 0 else 0
        t = torch.tensor([fresh >> 32, fresh & 0xFFFFFFFF], dtype=torch.int64, device=like.device)
        hi, lo = self.broadcast(t, "broadcast of rank 0's seed").tolist()
        return (hi << 32) | lo

    def agree(self, values: dict, like: torch.Tensor, *, checksums=()) -> None:
        """Lab utility: raise ``ValueError`` on every rank if a value differs across ranks, naming it.

        ``values``: name -> number (NaN for "not a number here", equal to NaN); ``checksums``: the names
        compared to a relative 1e-9 (sums of data, whose rounding may differ across machines).
        """
        names = list(values)
        t = torch.tensor([float(values[k]) for k in names], dtype=torch.float64, device=like.device)
        every = self.all_gather(t, "check that every rank runs the same training").cpu()
        for j, name in enumerate(names):
            col = every[:, j]
            ref = col[0]
            tol = 1e-9 * max(1.0, abs(float(ref))) if name in checksums else 0.0
            same = ((col - ref).abs() <= tol) | (col.isnan() & ref.isnan()) | (col == ref)
            if not bool(same.all()):
                raise ValueError(
                    f"distributed: {name} differs across the {self.world_size} ranks ({col.tolist()}): a "
                    "data-parallel dl.train is ONE training run on every rank — pass the same arguments, the "
                    "same seed and the whole data set (inputs, targets) on every rank; each rank computes its "
                    "share of every batch itself")


def _number(v) -> float:
    """A hyperparameter as one float for :meth:`DataParallel.agree` (NaN when it is not one number)."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_complex():
        return float(v)
    return math.nan


class DistributedOracle(CallableOracle):
    """Lab utility: an oracle whose ``reduce`` runs data-parallel (module docstring).

    Each rank reduces its contiguous share of the batch with ``oracle`` and one all-reduce
    sums the shares; ``last_batch`` holds the whole batch's ``(Σ loss, correct, size)`` when
    the wrapped oracle records one (:class:`dpclip_lab.ghost.ModuleOracle`). One run at a time
    (no sweeps over seed groups or per-run batches). Other attributes are the wrapped oracle's.
    """

    def __init__(self, oracle, dp: DataParallel):
        self.inner = as_oracle(oracle)
        self.dp = dp
        self.last_batch = None
        self.steps = 0

    def __getattr__(self, name):  # only for attributes not found here: the wrapped oracle's (X, p, load, ...)
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def per_example(self, theta, batch):
        """The wrapped oracle's per-example gradients of the whole batch, on this rank alone."""
        return self.inner.per_example(theta, batch)

    def _local(self, theta, sub, scale, pre_clip_std, Z, lo, hi, need_raw) -> Sums:
        if Z is None:
            return self.inner.reduce(theta, sub, scale, need_raw=need_raw)
        # Chen, Wu & Hong (2020) §5, eq. (11): g_i + k ζ_i with this rank's slice of the whole batch's ζ.
        G, w = self.inner.per_example(theta, sub)
        k = pre_clip_std
        if isinstance(k, torch.Tensor):
            k = k.to(device=G.device, dtype=G.dtype).reshape(-1, *([1] * (G.dim() - 1)))
        return _materialized_reduce(G + k * Z[:, lo:hi], w, scale, 0.0, need_raw, None)

    def reduce(self, theta, batch, scale, *, pre_clip_std=0.0, need_raw=False, generator=None) -> Sums:
        dp = self.dp
        dp.step = self.steps
        self.steps += 1
        idx, w = batch.padded()
        if w is not None or getattr(batch, "groups", None) is not None:
            raise ValueError("a data-parallel run trains one model at a time: batches of several runs "
                             "(a sweep over clip norms or seed groups) are not split across ranks")
        R, p = theta.shape
        m = idx.shape[-1]
        lo, hi = share(m, dp.rank, dp.world_size)
        Z = gaussian((R, m, p), generator, theta.device, theta.dtype) if has_pre_clip(pre_clip_std) else None
        records = hasattr(self.inner, "last_batch")
        sums, stats, failure = None, None, None
        if hi > lo:
            sub = Batch(idx[..., lo:hi], None, batch.normalizer, torch.full((R,), hi - lo, device=theta.device))
            try:
                sums = self._local(theta, sub, scale, pre_clip_std, Z, lo, hi, need_raw)
            except Exception as err:  # raised below, after the all-reduce told the other ranks
                failure = err
            if records:
                stats, self.inner.last_batch = self.inner.last_batch, None
        # One flat buffer, one all-reduce: [scaled | raw | norms of the whole batch | loss, correct, size,
        # non-class | one failure flag per rank].
        W, q = dp.world_size, R * p
        sizes = [q, q if need_raw else 0, R * m, 4, W]
        flat = theta.new_zeros(sum(sizes))
        scaled_v, raw_v, norms_v, stats_v, fail_v = flat.split(sizes)
        if sums is not None:
            scaled_v.copy_(sums.scaled.reshape(-1))
            if need_raw:
                raw_v.copy_(sums.raw.reshape(-1))
            norms_v.view(R, m)[:, lo:hi] = sums.norms
        if stats is not None:
            correct = count_correct([stats])
            stats_v[0] = stats.loss_sum.detach().reshape(()).to(flat.dtype)
            if correct is None:
                stats_v[3] = 1.0
            else:
                stats_v[1] = correct.to(flat.dtype)
            stats_v[2] = float(stats.size)
        if failure is not None:
            fail_v[dp.rank] = 1.0
        dp.all_reduce(flat)
        failed = fail_v.nonzero().reshape(-1).tolist()
        if failed:
            if failure is not None:
                raise failure
            raise DataParallelError(f"data-parallel run: rank(s) {failed} of {W} failed computing their share of "
                                    f"step {self.steps}; their error is raised there")
        if records:
            loss, correct, size, non_class = stats_v.unbind()
            self.last_batch = BatchStats(loss, None, None, int(size))
            self.last_batch._correct = None if bool(non_class > 0) else correct.round().to(torch.int64)
        return Sums(scaled_v.view(R, p), raw_v.view(R, p) if need_raw else None, norms_v.view(R, m), None)


def all_reduce_shares(dp: DataParallel, scaled: torch.Tensor, raw: torch.Tensor | None,
                      norms: torch.Tensor) -> Sums:
    """Lab utility: the sums of a batch whose ranks hold shares of unknown sizes (each rank its own data).

    ``scaled``, ``raw`` ``[R, p]`` and ``norms`` ``[R, m_r]`` of this rank; the ranks' sizes are
    gathered first, then one all-reduce sums the sums and lays the norms side by side in rank order.
    """
    R, p = scaled.shape
    m = norms.shape[-1]
    counts = dp.all_gather(torch.tensor([m], dtype=torch.int64, device=scaled.device),
                           "all-gather of the ranks' batch sizes").reshape(-1).tolist()
    lo = sum(counts[:dp.rank])
    M = sum(counts)
    q = R * p
    sizes = [q, q if raw is not None else 0, R * M]
    flat = scaled.new_zeros(sum(sizes))
    scaled_v, raw_v, norms_v = flat.split(sizes)
    scaled_v.copy_(scaled.reshape(-1))
    if raw is not None:
        raw_v.copy_(raw.reshape(-1))
    norms_v.view(R, M)[:, lo:lo + m] = norms
    dp.all_reduce(flat)
    return Sums(scaled_v.view(R, p), raw_v.view(R, p) if raw is not None else None, norms_v.view(R, M), None)
