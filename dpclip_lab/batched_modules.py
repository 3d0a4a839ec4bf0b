"""Many copies of one small network trained at once: per-example gradients vmapped over runs.

A sweep over clip norms × seeds on a generalized linear problem is one tensor
program (the GLP oracle). For an ``nn.Module`` the lab's :func:`dpclip_lab.train`
trains one model at a time. Here ``R`` copies of the same architecture, with
their parameters stacked as rows of ``θ [R, n_params]``, are trained by the
lab's one loop (:func:`dpclip_lab.algorithms.loop.run`) as one program::

    grad_fn(θ [R, p], idx [R, b]) = vmap_runs( vmap_examples( grad(loss ∘ functional_call) ) )   # [R, b, p]

so every algorithm that takes a per-example gradient oracle — DP-SGD and its
automatic / pre-clip variants, adaptive quantile clipping, DiceSGD (Alg. 2–4) —
runs ``R`` networks per call with per-run clip norms, learning rates, batches and
noise (``torch.func.vmap`` over ``torch.func.functional_call``).

Functions
---------
:func:`batched_grad_fn`    the ``[R, b, p]`` per-example gradient oracle of a module.
:func:`stacked_init`       ``θ₀ [R, p]``: one freshly initialized copy of a model per seed.
:func:`batched_evaluate`   mean loss and accuracy of every run's parameters on a data set.

References
----------
Lab utility: the per-example gradients are those of :func:`dpclip_lab.per_sample_grads`
(Abadi et al. (2016), Alg. 1, line "compute gradient" per example); only the batching
over runs is new.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ._validation import check_int
from .per_sample import check_module_inputs

__all__ = ["batched_grad_fn", "stacked_init", "batched_evaluate"]


def _trainable(model: nn.Module):
    return [(k, v) for k, v in model.named_parameters() if v.requires_grad]


def _unflatten_fn(model: nn.Module):
    names, shapes, sizes = [], [], []
    for k, v in _trainable(model):
        names.append(k)
        shapes.append(v.shape)
        sizes.append(v.numel())
    if not names:
        raise ValueError("model has no trainable parameters (requires_grad=True)")

    def unflatten(vec):
        return {k: t.reshape(s) for k, t, s in zip(names, torch.split(vec, sizes), shapes)}
    return unflatten, sum(sizes)


def _check_theta(theta, p, what="theta"):
    if not isinstance(theta, torch.Tensor) or theta.dim() not in (1, 2) or theta.shape[-1] != p:
        shape = tuple(theta.shape) if isinstance(theta, torch.Tensor) else type(theta).__name__
        raise ValueError(f"{what} must have shape [n_params] or [R, n_params] with n_params = {p}, got {shape}")


def batched_grad_fn(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor):
    """Lab utility: per-example gradients of ``R`` parameter vectors of ``model`` in one call.

    Returns ``grad_fn(theta, idx)``: with ``theta [p]`` and ``idx [b]`` it returns
    ``[b, p]`` (as :func:`dpclip_lab.training.module_grad_fn`); with ``theta [R, p]``
    and ``idx [R, b]`` (or ``[b]``, shared) it returns ``[R, b, p]``, row ``r``
    being the per-example gradients of the model with parameters ``theta[r]``
    on the examples ``idx[r]``. Pass it to any algorithm of the lab with a
    ``theta0`` of shape ``[R, p]`` (:func:`stacked_init`).

    The model's own parameters are not modified (``functional_call``); its
    buffers are read from it. Per-example gradients are those of
    :func:`dpclip_lab.per_sample_grads` (Abadi et al. (2016), Alg. 1); ``loss_fn``
    sees one example at a time (a batch of one).

    Raises
    ------
    ValueError, TypeError
        As :func:`dpclip_lab.per_sample_grads` for the data (mismatched sizes,
        BatchNorm in training mode, dtype mismatch), and for a ``theta`` whose last
        dimension is not the number of trainable parameters.
    """
    check_module_inputs(model, inputs, targets)
    unflatten, p = _unflatten_fn(model)

    def loss_one(vec, x, t):
        out = functional_call(model, unflatten(vec), (x.unsqueeze(0),))
        return loss_fn(out, t.unsqueeze(0))

    per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))     # θ [p], x [b, ...] -> [b, p]
    per_run = vmap(per_example, in_dims=(0, 0, 0))                # θ [R, p], x [R, b, ...] -> [R, b, p]

    def grad_fn(theta, idx):
        _check_theta(theta, p)
        idx = torch.as_tensor(idx, dtype=torch.long, device=inputs.device)
        if theta.dim() == 1:
            if idx.dim() != 1:
                raise ValueError(f"idx must have shape [b] for theta of shape [p], got {tuple(idx.shape)}")
            if idx.numel() == 0:
                return theta.new_zeros((0, p))
            return per_example(theta, inputs[idx], targets[idx])
        R = theta.shape[0]
        if idx.dim() == 1:
            idx = idx.expand(R, -1)
        if idx.dim() != 2 or idx.shape[0] != R:
            raise ValueError(f"idx must have shape [b] or [R, b] with R = {R}, got {tuple(idx.shape)}")
        if idx.shape[1] == 0:
            return theta.new_zeros((R, 0, p))
        return per_run(theta, inputs[idx], targets[idx])

    grad_fn.n_params = p
    return grad_fn


def stacked_init(make_model: Callable[[], nn.Module], seeds) -> torch.Tensor:
    """Lab utility: ``θ₀ [len(seeds), p]``, the flat trainable parameters of ``make_model()`` per seed.

    Each row is the model's default initialization under ``torch.manual_seed(seed)``
    (the global generator's state is restored afterwards).
    """
    seeds = [check_int(s, "seeds", minimum=0) for s in (seeds if hasattr(seeds, "__iter__") else [seeds])]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    state = torch.random.get_rng_state()
    try:
        rows = []
        for s in seeds:
            torch.manual_seed(s)
            m = make_model()
            rows.append(torch.cat([v.detach().reshape(-1) for _, v in _trainable(m)]))
    finally:
        torch.random.set_rng_state(state)
    return torch.stack(rows)


@torch.no_grad()
def batched_evaluate(model: nn.Module, theta: torch.Tensor, loss_fn: Callable, inputs: torch.Tensor,
                     targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Lab utility: mean loss ``[R]`` and accuracy ``[R]`` of each row of ``theta [R, p]`` on ``(inputs, targets)``.

    Accuracy is the fraction of argmax predictions equal to the targets (NaN when the
    outputs are not class scores). ``loss_fn`` is applied per run to the whole set.
    """
    check_module_inputs(model, inputs, targets)
    unflatten, p = _unflatten_fn(model)
    _check_theta(theta, p)
    th = theta.unsqueeze(0) if theta.dim() == 1 else theta
    out = vmap(lambda vec: functional_call(model, unflatten(vec), (inputs,)))(th)       # [R, n, ...]
    loss = torch.stack([loss_fn(o, targets) for o in out])
    is_cls = out.dim() == 3 and out.shape[-1] > 1 and not targets.is_floating_point()
    acc = ((out.argmax(-1) == targets).to(theta.dtype).mean(-1) if is_cls
           else torch.full((th.shape[0],), float("nan"), dtype=theta.dtype))
    if theta.dim() == 1:
        return loss[0], acc[0]
    return loss, acc
