"""Train an ``nn.Module`` with any privatizer of the lab, through the one shared loop.

The model's trainable parameters become one flat vector θ (the columns of
:func:`dpclip_lab.per_sample_grads`), and the per-example gradient oracle is::

    grad_fn(θ, idx) = per_sample_grads(model at θ, loss_fn, inputs[idx], targets[idx])   # [b, n_params]

so DP-SGD, pre-clipping perturbation, DiceSGD and adaptive clipping train
networks with exactly the code that runs them on generalized linear problems
(:func:`dpclip_lab.algorithms.loop.run`). The driver adds what training needs:
per-step logs of loss, accuracy and fraction clipped, a progress bar, and
copying the final θ back into the model.

When a ``torch.distributed`` process group is initialized (or ``distributed=`` names one),
the same loop runs data-parallel: every rank draws the whole batch from the shared seed,
computes the clipped sums of its share, and one all-reduce per step sums them
(:mod:`dpclip_lab.algorithms.distributed`); every rank ends with the one-process θ and record.
"""
from __future__ import annotations

import zlib
from typing import Callable

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from ._validation import check_int, check_nonnegative
from .algorithms.adaptive_clipping import dp_sgd_adaptive_clipping
from .algorithms.dice_sgd import dice_sgd
from .algorithms.distributed import DistributedOracle, _number, data_parallel
from .algorithms.dp_sgd import dp_sgd
from .algorithms.loop import DPResult, is_seed_sequence
from .ghost import ModuleOracle  # the layer-wise oracle (falls back to module_grad_fn)
from .per_sample import BatchStats, _trainable, check_module_inputs, count_correct, module_grad_fn
from .sampling import SAMPLING_SCHEMES, make_sampler

__all__ = ["train", "module_grad_fn", "evaluate", "METHODS"]

#: The methods of :func:`train`, each run by its algorithm's own function (same result type and event).
METHODS = ("dp_sgd", "dice_sgd", "adaptive")


@torch.no_grad()
def evaluate(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor,
             batch: int = 2048) -> tuple[float, float]:
    """Lab utility: mean loss and accuracy (argmax of the outputs; NaN if outputs are not class scores)."""
    tot_loss, correct, n, is_cls = 0.0, 0, inputs.shape[0], True
    for s in range(0, n, batch):
        out = model(inputs[s:s + batch])
        t = targets[s:s + batch]
        tot_loss += float(loss_fn(out, t)) * t.shape[0]
        is_cls = is_cls and out.dim() == 2 and out.shape[1] > 1 and not t.is_floating_point()
        if is_cls:
            correct += int((out.argmax(1) == t).sum())
    return tot_loss / n, (correct / n if is_cls else float("nan"))


def _window_means(batches: list, correct: list, ends: list[int]) -> tuple[list[float], list[float]]:
    """Mean loss and accuracy over the examples of the steps since the previous logged step.

    ``batches[t]`` is step t+1's ``(Σ loss, batch size)`` (None when a privatizer did not go through
    the oracle's reduce), ``correct[j]`` the number of correct predictions in window j (a 0-d tensor, or
    None when some batch had no class scores). A window with no example gives NaN, and accuracy is NaN
    unless every batch had class scores.
    """
    nan = float("nan")
    if not batches:
        return [], []
    if any(b is None for b in batches):
        return [nan] * len(ends), [nan] * len(ends)
    # one stack and one sync each; tolist() converts exactly (float32 -> Python float), the sums run in float64
    loss = torch.stack([b[0].reshape(()) for b in batches]).tolist()
    has_acc = all(c is not None for c in correct)
    right = torch.stack(correct).tolist() if has_acc else None
    count = [b[1] for b in batches]
    losses, accs, start = [], [], 0
    for j, end in enumerate(ends):
        n = sum(count[start:end])
        losses.append(sum(loss[start:end]) / n if n else nan)
        accs.append(right[j] / n if (n and has_acc) else nan)
        start = end
    return losses, accs


#: Class scores (elements) a logging window holds for its batched count of correct predictions
#: (:class:`_Window`); past it the window's batches so far are counted.
HOLD_SCORES = 1 << 20


class _Window:
    """The number of correct predictions in one logging window of ``dl.train``'s default log.

    The batches' :class:`~dpclip_lab.per_sample.BatchStats` are counted together when the window
    closes (one :func:`~dpclip_lab.per_sample.count_correct`), or earlier once their class scores
    pass :data:`HOLD_SCORES` elements, so the memory held stays bounded whatever ``log_every``."""

    def __init__(self):
        self.batches, self.held = [], 0

    def add(self, b):
        """One step's stats (None: the step did not go through the oracle's reduce)."""
        self.batches.append(b)
        if b is not None and b.outputs is not None:
            self.held += b.outputs.numel()
            if self.held > HOLD_SCORES:  # the batches so far become one counted triple
                self.batches, self.held = [self._counted()], 0

    def _counted(self):
        """The window's batches so far as one ``(loss, correct, size)`` triple (None if one is None)."""
        if any(b is None for b in self.batches):
            return None
        size = sum(b.size if isinstance(b, BatchStats) else b[2] for b in self.batches)
        return None, count_correct(self.batches), size

    def close(self):
        """The window's count (0-d tensor; None unless every batch had class scores); starts the next window."""
        c = self._counted()
        self.batches, self.held = [], 0
        return None if c is None else c[1]


def train(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor, *,
          steps: int, lr, clip_norm, noise_multiplier: float, batch_size: int, sampling: str = "poisson",
          method: str = "dp_sgd", pre_clip_std: float = 0.0, feedback_clip_norm=None,
          target_quantile: float = 0.5, clip_lr: float = 0.2, count_noise_std=None,
          optimizer="sgd", seed=None, log_every: int = 10, monitor: tuple | None = None,
          progress: bool | None = None, per_example: str = "auto", normalize: bool = False,
          stability: float = 0.0, distributed=None) -> DPResult:
    """Privately train ``model`` on ``(inputs, targets)``; the model ends with the released θ.

    Parameters
    ----------
    model : nn.Module
        No batch-coupling layers (GroupNorm, not BatchNorm).
    loss_fn : callable
        ``loss_fn(outputs, targets) -> scalar`` (e.g. ``nn.functional.cross_entropy``).
    inputs, targets : Tensor
        The private training set (first dimension = examples).
    steps, lr, clip_norm, noise_multiplier, batch_size, sampling, optimizer, seed
        As in :func:`dpclip_lab.algorithms.dp_sgd` (``clip_norm`` is the initial
        norm for ``method="adaptive"``, C1 for ``"dice_sgd"``).
    method : {"dp_sgd", "dice_sgd", "adaptive"}
        The privatizer: clip + Gaussian (with ``pre_clip_std`` for Chen et al.'s
        pre-clipping perturbation), DiceSGD's error feedback
        (``feedback_clip_norm`` = C2), or Andrew et al.'s quantile clipping.
    log_every : int
        Log every ``log_every`` steps (and at the last step).
    monitor : tuple (inputs, targets) or None
        What is logged. None (default): the mean loss and accuracy over the examples
        of the batches of the last ``log_every`` steps, each at the parameters its step
        was computed at — the training loss, read off each step's own forward pass
        (no extra computation). A tuple: loss and accuracy of the model on those
        examples (a fixed held-out set, say) after the logged step, one extra forward
        pass per logged step.
    progress : bool or None
        tqdm bar (None: only for runs longer than ~3 s).
    normalize : bool
        Normalize instead of clip — automatic clipping (Bu et al. 2023,
        "AUTO-S"): each per-example gradient becomes ``C g_i / (‖g_i‖ + γ)``, with
        ``γ = stability``. Its norm is below ``C``, so the noise, the sensitivity and the
        accounting are those of clipping at ``C`` (same ``dp_event()``). The same
        privatizer as ``dl.dp_sgd(..., normalize=True)`` on generalized linear problems;
        with ``method="dice_sgd"`` both clips are normalizations (automatic DiceSGD,
        Zhang et al. 2024, Alg. 4). Not with ``method="adaptive"`` (a quantile of
        norms that are all rescaled to C has nothing to adapt to).
    stability : float
        ``γ ≥ 0`` of automatic clipping (a small constant such as 0.01; 0 gives exact normalization
        ``C g_i/‖g_i‖``, a zero gradient staying zero).
    per_example : {"auto", "ghost", "materialize"}
        How per-example norms and clipped sums are computed: layer by layer without
        per-example gradients (:mod:`dpclip_lab.ghost`; ``"auto"`` uses it whenever the
        model is supported), or materialized with ``torch.func`` (``"materialize"``).
        Both give the same result up to rounding.
    distributed : None, bool or torch.distributed.ProcessGroup
        Data-parallel training (:mod:`dpclip_lab.algorithms.distributed`). None (default):
        data-parallel when a ``torch.distributed`` process group with more than one process is
        initialized, one process otherwise; False: one process; True: the default group (it must
        be initialized); a ``ProcessGroup``: that group. Every rank calls ``train`` with the same
        arguments, the same seed and the *whole* data set: each step's batch is drawn once for
        the whole data set (the one-process stream), each rank computes the per-example clipped
        sums of a contiguous share of it, one all-reduce sums them, and every rank draws the same
        noise from the shared seed and applies the same update. Every rank ends with the θ of the
        one-process run (up to floating-point summation order) and the same privacy record. Rank
        0's initial parameters are broadcast (as ``DistributedDataParallel`` does); ``seed=None``
        uses rank 0's fresh seed; mismatched arguments or data raise ``ValueError`` on every rank;
        a rank that dies makes the others raise
        :class:`~dpclip_lab.algorithms.distributed.DataParallelError` (one that hangs: the
        group's timeout, ``init_process_group(..., timeout=...)``). The progress bar is rank 0's.

    Raises
    ------
    ValueError, TypeError
        Naming the problem: empty or mismatched data, a BatchNorm layer in training
        mode (use GroupNorm), inputs whose dtype differs from the model's parameters.

    Returns
    -------
    DPResult, DiceSGDResult or AdaptiveClippingResult
        What :func:`dpclip_lab.algorithms.dp_sgd`, :func:`~dpclip_lab.algorithms.dice_sgd` or
        :func:`~dpclip_lab.algorithms.dp_sgd_adaptive_clipping` returns for the same inputs
        (``train`` runs them), with that algorithm's own privacy record and ``dp_event()``.
        ``theta`` is the flat parameters, ``iterates=None``, ``history["fraction_clipped"]``
        and ``history["batch_size"]`` per step, and ``extra["log"]``: a dict of lists ``step``,
        ``loss``, ``accuracy``, ``fraction_clipped`` (at the logged step) — see ``monitor``.
        A data-parallel run adds ``extra["data_parallel"]``: ``{"rank", "world_size", "backend"}``.
    """
    check_module_inputs(model, inputs, targets)   # tensors, same non-zero n, no BatchNorm, dtypes
    n = check_int(inputs.shape[0], "n", minimum=1)
    if not _trainable(model):
        raise ValueError("model has no trainable parameters (requires_grad=True)")
    if monitor is not None:
        if not (isinstance(monitor, tuple) and len(monitor) == 2):
            raise TypeError("monitor must be a tuple (inputs, targets)")
        check_module_inputs(model, *monitor)
    log_every = check_int(log_every, "log_every", minimum=1)
    if is_seed_sequence(seed):  # one model is one run; dp_sgd(..., seed=range(k)) batches runs over seeds
        raise TypeError(f"seed must be one integer for train (it trains one model), got {seed!r}")
    make_sampler(sampling, n, batch_size)  # the scheme and batch size, checked before the model is touched
    if not isinstance(normalize, (bool, int)) or isinstance(normalize, float):
        raise TypeError(f"normalize must be True or False, got {normalize!r}")
    normalize = bool(normalize)
    stability = check_nonnegative(stability, "stability")
    if stability and not normalize:
        raise ValueError(f"stability (γ of automatic clipping) needs normalize=True, got stability={stability!r}")
    if normalize and clip_norm is None:
        raise ValueError("normalize=True needs a clip_norm C (the norm every per-example gradient is rescaled to)")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "dice_sgd" and feedback_clip_norm is None:
        raise ValueError("method='dice_sgd' needs feedback_clip_norm (C2 >= clip_norm)")
    if method == "adaptive" and normalize:
        raise ValueError("normalize=True cannot be combined with method='adaptive': every normalized gradient "
                         "has norm C, so there is no quantile of norms to track; use method='dp_sgd'")

    dp = data_parallel(distributed)  # None: one process (the code path below is then unchanged)
    params = _trainable(model)
    theta0 = parameters_to_vector(params).detach().clone()
    if dp is not None:
        seed = dp.shared_seed(seed, theta0)
        dp.agree(_run_signature(
            theta0, inputs, targets, n=n, steps=steps, batch_size=batch_size, seed=seed, method=method,
            sampling=sampling, lr=lr, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
            pre_clip_std=pre_clip_std, feedback_clip_norm=feedback_clip_norm, target_quantile=target_quantile,
            clip_lr=clip_lr, count_noise_std=count_noise_std, normalize=normalize, stability=stability),
            theta0, checksums=("inputs (checksum)", "targets (checksum)"))
        dp.broadcast(theta0, "broadcast of rank 0's initial parameters")
        if dp.rank != 0:
            progress = False
    grad_fn = ModuleOracle(model, loss_fn, inputs, targets, mode=per_example)
    oracle = grad_fn if dp is None else DistributedOracle(grad_fn, dp)
    log = {"step": [], "loss": [], "accuracy": [], "fraction_clipped": []}
    # Default monitor: per step the (Σ loss, size) of the step's own forward pass; per logging window
    # the number of correct predictions (_Window).
    batches, correct, window = [], [], _Window()

    def callback(t, theta, stats):
        if monitor is None:
            b = oracle.last_batch
            oracle.last_batch = None
            batches.append(None if b is None else (b.loss_sum, b.size))
            window.add(b)
            if (t + 1) % log_every == 0 or t + 1 == steps:
                correct.append(window.close())
        elif (t + 1) % log_every == 0 or t + 1 == steps:
            grad_fn.load(theta[0])
            loss, acc = evaluate(model, loss_fn, *monitor)
            log["loss"].append(loss)
            log["accuracy"].append(acc)

    # The algorithm's own function runs the loop and builds the result: the same result type, privacy
    # record and event as a call to dp_sgd / dice_sgd / dp_sgd_adaptive_clipping (never a second copy).
    common = dict(n=n, steps=steps, lr=lr, noise_multiplier=noise_multiplier, batch_size=batch_size,
                  sampling=sampling, optimizer=optimizer, seed=seed, keep_iterates=False, progress=progress,
                  callback=callback)
    try:
        if method == "dp_sgd":
            result = dp_sgd(oracle, theta0, clip_norm=clip_norm, pre_clip_std=pre_clip_std, normalize=normalize,
                            stability=stability, **common)
        elif method == "dice_sgd":
            result = dice_sgd(oracle, theta0, clip_norm=clip_norm, feedback_clip_norm=feedback_clip_norm,
                              normalize=normalize, stability=stability, **common)
        else:
            result = dp_sgd_adaptive_clipping(oracle, theta0, initial_clip_norm=clip_norm,
                                              target_quantile=target_quantile, clip_lr=clip_lr,
                                              count_noise_std=count_noise_std, **common)
    finally:
        grad_fn.close()  # the layer plan's forward hooks come off the model
    log["step"] = [t for t in range(1, steps + 1) if t % log_every == 0 or t == steps]
    frac = result.history.get("fraction_clipped")
    log["fraction_clipped"] = [] if frac is None else frac[[t - 1 for t in log["step"]]].tolist()
    if monitor is None:
        log["loss"], log["accuracy"] = _window_means(batches, correct, log["step"])
    with torch.no_grad():  # a copy: the model's parameters do not alias the released θ
        grad_fn.load(result.theta)
    result.algorithm += " (nn.Module)"
    result.extra.update({"log": log, "method": method, "normalize": normalize, "stability": stability})
    if dp is not None:
        result.extra["data_parallel"] = {"rank": dp.rank, "world_size": dp.world_size, "backend": dp.backend}
    return result


def _run_signature(theta0, inputs, targets, *, seed, method, sampling, **hyper) -> dict:
    """What every rank of a data-parallel :func:`train` must agree on, as numbers (NaN: not one number)."""
    seed = seed % (1 << 64)
    sig = {"number of parameters": theta0.numel(), "dtype": zlib.crc32(str(theta0.dtype).encode()),
           "seed (high bits)": seed >> 32, "seed (low bits)": seed & 0xFFFFFFFF, "method": METHODS.index(method),
           "sampling": SAMPLING_SCHEMES.index(sampling)}
    sig.update({name: _number(v) for name, v in hyper.items()})
    sig["inputs (checksum)"] = float(inputs.sum(dtype=torch.float64))
    sig["targets (checksum)"] = float(targets.sum(dtype=torch.float64))
    return sig
