"""Per-example gradients of an ``nn.Module`` with ``torch.func``.

``vmap(grad(loss))`` over the batch, with the module called functionally
(``functional_call``): a few readable lines instead of Opacus's hooks, and one
``[batch, n_params]`` matrix that the clipping and noise code treats like the
per-example gradients of a generalized linear problem.

Speed (``benchmarks/bench_algorithms.py``, small CNNs on CPU): per-example
gradients cost 1.3–3× a plain batched forward + backward, and they are most of
a DP-SGD step. Two exact alternatives were measured against this ``vmap`` and
not adopted: ``vmap(..., chunk_size=32)`` is 10–90% slower, and PyTorch's
expanded weights (``torch.nn.utils._per_sample_grad.call_for_per_sample_grads``,
unfold + einsum as in Opacus; only for Linear/Conv/norm layers) is 10–20% faster
at 8×8 inputs and batch 64, on par at 8×8 and batch 256, and 10–25% slower at
28×28 — not a consistent win worth a second code path on a private API.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn.utils import vector_to_parameters

from ._validation import check_finite_tensor

__all__ = ["per_sample_grads", "unflatten", "flat_params", "param_shapes", "check_module_inputs", "module_grad_fn"]


def param_shapes(model: nn.Module) -> dict[str, torch.Size]:
    """Lab utility: names and shapes of the trainable parameters, in the column order of :func:`per_sample_grads`."""
    return {k: v.shape for k, v in model.named_parameters() if v.requires_grad}


def flat_params(model: nn.Module) -> torch.Tensor:
    """Lab utility: the trainable parameters as one vector ``[n_params]`` (same order as the gradient columns)."""
    return torch.cat([v.detach().reshape(-1) for v in model.parameters() if v.requires_grad])


def unflatten(model: nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Lab utility: map columns of ``flat [..., n_params]`` back to ``{name: tensor[..., *shape]}``."""
    shapes = param_shapes(model)
    total = sum(s.numel() for s in shapes.values())
    if flat.shape[-1] != total:
        raise ValueError(f"flat must have last dimension n_params = {total}, got {flat.shape[-1]}")
    out, start = {}, 0
    for name, shape in shapes.items():
        k = shape.numel()
        out[name] = flat[..., start:start + k].reshape(*flat.shape[:-1], *shape)
        start += k
    return out


def check_module_inputs(model: nn.Module, inputs, targets) -> None:
    """Lab utility: raise a ``ValueError``/``TypeError`` naming the problem before any per-example gradient.

    Checks: ``inputs`` and ``targets`` are tensors with the same, non-zero batch size;
    no BatchNorm layer is in training mode (batch statistics couple the examples, so a
    per-example gradient is undefined and DP's sensitivity argument fails — use
    GroupNorm or LayerNorm, or ``model.eval()``); floating-point inputs have the
    dtype of the model's trainable parameters.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, t in (("inputs", inputs), ("targets", targets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 0:
            raise ValueError(f"{name} must have a batch dimension (first dimension = examples), got a scalar")
    if inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"inputs and targets must have the same batch size, got "
                         f"{inputs.shape[0]} and {targets.shape[0]}")
    if inputs.shape[0] == 0:
        raise ValueError("inputs holds no examples (batch size 0): per-example gradients of an empty "
                         "batch are an empty [0, n_params] matrix; skip the call instead")
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.training:
            raise ValueError(f"model layer {name or type(mod).__name__!r} is {type(mod).__name__} in training "
                             "mode: its batch statistics couple the examples, so per-example gradients "
                             "(and DP-SGD's privacy analysis) do not apply; use GroupNorm (or LayerNorm), "
                             "or call model.eval() to use the running statistics")
    dtypes = {v.dtype for v in model.parameters() if v.requires_grad}
    if inputs.is_floating_point() and dtypes and inputs.dtype not in dtypes:
        (pd,) = dtypes if len(dtypes) == 1 else (sorted(map(str, dtypes))[0],)
        raise TypeError(f"inputs have dtype {inputs.dtype} but the model's parameters are {pd}; "
                        f"convert one of them (e.g. model.to({inputs.dtype}) or inputs.to({pd}))")


def per_sample_grads(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor,
                     targets: torch.Tensor) -> torch.Tensor:
    """Per-example gradients of ``loss_fn(model(x_i), y_i)`` as a ``[batch, n_params]`` matrix.

    The per-example "compute gradient" step of Abadi et al. (2016), Alg. 1, with ``torch.func``.

    Parameters
    ----------
    model : nn.Module
        Any module without batch-coupling layers in training mode (use
        GroupNorm/LayerNorm, not BatchNorm, as in all DP-SGD work).
    loss_fn : callable
        ``loss_fn(outputs, targets) -> scalar`` with mean or sum reduction; it is
        applied to one example at a time (batch of one), so both give the
        per-example loss.
    inputs, targets : Tensor
        A batch (first dimension = examples).

    Returns
    -------
    Tensor[batch, n_params]
        One row per example; the columns follow :func:`param_shapes`.
        Use :func:`unflatten` to get per-parameter views.

    Raises
    ------
    ValueError
        If inputs and targets have different batch sizes, the batch is empty, the
        model has a BatchNorm layer in training mode (it couples the examples of a
        batch: use GroupNorm), or a gradient is NaN/inf.
    TypeError
        If inputs or targets are not tensors, or floating-point inputs do not have
        the dtype of the model's parameters (float32 model, float64 data).
    """
    check_module_inputs(model, inputs, targets)
    return _per_sample_grads(model, loss_fn, inputs, targets, with_stats=False)


def _per_sample_grads(model, loss_fn, inputs, targets, *, with_stats: bool):
    """:func:`per_sample_grads` without the input checks; ``with_stats``: also :func:`batch_stats`."""
    # Only the trainable parameters are swapped in; buffers (and frozen parameters)
    # are read from the module itself, as a normal forward would.
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}

    def loss_one(p, x, t):
        out = functional_call(model, p, (x.unsqueeze(0),))
        return loss_fn(out, t.unsqueeze(0)), out.squeeze(0)

    def flat_grad_one(p, x, t):  # one example's gradient as one vector [n_params] (+ its loss, output)
        g, (loss, out) = grad_and_value(loss_one, has_aux=True)(p, x, t)
        return torch.cat([v.reshape(-1) for v in g.values()]), loss.detach(), out.detach()

    # Flattening inside vmap (rather than concatenating the batched per-parameter
    # gradients afterwards) saves copies: 3-25% faster on the benchmark CNNs.
    flat, losses, outs = vmap(flat_grad_one, in_dims=(None, 0, 0))(params, inputs, targets)
    flat = check_finite_tensor(flat, "per-example gradients")
    return (flat, batch_stats(outs, losses.sum(), targets)) if with_stats else flat


def batch_stats(outputs: torch.Tensor, loss_sum: torch.Tensor, targets: torch.Tensor) -> "BatchStats":
    """Lab utility: ``(Σ_i loss_i, number correct or None, batch size)`` of one batch, as tensors (no sync).

    "Correct" is ``argmax(outputs) == target`` when the outputs are class scores
    (``[b, classes > 1]`` and integer targets), as in :func:`dpclip_lab.training.evaluate`;
    otherwise None. What ``dl.train`` logs by default, at no extra forward pass. The count is
    computed when it is first read (:class:`BatchStats`).
    """
    is_cls = outputs.dim() == 2 and outputs.shape[1] > 1 and not targets.is_floating_point()
    return BatchStats(loss_sum.detach(), outputs.detach() if is_cls else None, targets if is_cls else None,
                      int(targets.shape[0]))


class BatchStats:
    """Lab utility: what :func:`batch_stats` returns: the triple ``(loss_sum, correct, size)`` (it unpacks
    and indexes as one), whose count of correct predictions ``correct`` is computed when first read.

    It keeps the batch's detached class scores until then. ``dl.train`` counts a whole logging window's
    batches at once (:func:`count_correct`): one ``argmax`` over their outputs side by side instead of three
    small kernels at every step, which cost 1.8 % of a DP-SGD step on the benchmark CNN (8×8 images,
    batch 64; measured against not counting at all).
    """

    __slots__ = ("loss_sum", "outputs", "targets", "size", "_correct")

    def __init__(self, loss_sum: torch.Tensor, outputs: torch.Tensor | None, targets: torch.Tensor | None,
                 size: int):
        self.loss_sum, self.outputs, self.targets, self.size = loss_sum, outputs, targets, size
        self._correct = None

    @property
    def correct(self) -> torch.Tensor | None:
        """Number of rows whose argmax is the target (a 0-d tensor), or None when the outputs are not class scores."""
        if self._correct is None and self.outputs is not None:
            self._correct = count_correct([self])
            self.outputs = self.targets = None
        return self._correct

    def __iter__(self):
        return iter((self.loss_sum, self.correct, self.size))

    def __getitem__(self, i):
        return (self.loss_sum, self.correct, self.size)[i]

    def __len__(self) -> int:
        return 3

    def __repr__(self) -> str:
        return f"BatchStats(loss_sum={self.loss_sum!r}, correct={self.correct!r}, size={self.size})"


def count_correct(stats) -> torch.Tensor | None:
    """Lab utility: Σ of the ``correct`` counts of several batches' stats (0-d int64 tensor), by one
    ``argmax`` over their class scores side by side; None unless every non-empty batch has class scores.

    ``stats``: :class:`BatchStats` or ``(loss_sum, correct, size)`` triples (an empty batch's is
    ``(0, None, 0)``)."""
    outs, tgts, done = [], [], []
    for b in stats:
        if isinstance(b, BatchStats) and b.outputs is not None:
            outs.append(b.outputs)
            tgts.append(b.targets)
        elif b[1] is not None:
            done.append(b[1])
        elif b[2] != 0:
            return None
    total = None
    if outs:
        with torch.no_grad():
            o, t = (outs[0], tgts[0]) if len(outs) == 1 else (torch.cat(outs), torch.cat(tgts))
            total = (o.argmax(1) == t).sum()
    for c in done:
        total = c if total is None else total + c
    if total is None:  # only empty batches
        total = torch.zeros((), dtype=torch.int64)
    return total


def _trainable(model: nn.Module):
    return [q for q in model.parameters() if q.requires_grad]


def module_grad_fn(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor, *,
                   on_batch: Callable | None = None):
    """Lab utility: the per-example gradient oracle ``(θ[n_params], idx[b]) -> [b, n_params]`` of a module.

    θ is loaded into the model's parameters (in place) before each call. ``on_batch``,
    if given, receives each call's :func:`dpclip_lab.per_sample.batch_stats` (the
    batch's summed loss and number correct, from the same forward pass).
    """
    params = _trainable(model)
    n_params = sum(q.numel() for q in params)

    def grad_fn(theta, idx):
        if theta.dim() != 1:
            raise ValueError("module_grad_fn supports one run at a time (theta of shape [n_params])")
        vector_to_parameters(theta, params)
        if idx.numel() == 0:  # an empty Poisson batch
            if on_batch is not None:
                on_batch(BatchStats(theta.new_zeros(()), None, None, 0))
            return theta.new_zeros((0, n_params))
        if on_batch is None:
            return per_sample_grads(model, loss_fn, inputs[idx], targets[idx])
        check_module_inputs(model, inputs[idx], targets[idx])
        G, stats = _per_sample_grads(model, loss_fn, inputs[idx], targets[idx], with_stats=True)
        on_batch(stats)
        return G

    return grad_fn
