"""Per-example gradients of an ``nn.Module`` with ``torch.func``.

``vmap(grad(loss))`` over the batch, with the module called functionally
(``functional_call``): a few readable lines instead of Opacus's hooks, and one
``[batch, n_params]`` matrix that the clipping and noise code treats like the
per-example gradients of a generalized linear problem.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ._validation import check_finite_tensor

__all__ = ["per_sample_grads", "unflatten", "flat_params", "param_shapes"]


def param_shapes(model: nn.Module) -> dict[str, torch.Size]:
    """Names and shapes of the trainable parameters, in the column order of :func:`per_sample_grads`."""
    return {k: v.shape for k, v in model.named_parameters() if v.requires_grad}


def flat_params(model: nn.Module) -> torch.Tensor:
    """The trainable parameters as one vector ``[n_params]`` (same order as the gradient columns)."""
    return torch.cat([v.detach().reshape(-1) for v in model.parameters() if v.requires_grad])


def unflatten(model: nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Map columns of ``flat [..., n_params]`` back to ``{name: tensor[..., *shape]}``."""
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


def per_sample_grads(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor,
                     targets: torch.Tensor) -> torch.Tensor:
    """Per-example gradients of ``loss_fn(model(x_i), y_i)`` as a ``[batch, n_params]`` matrix.

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
    Tensor[batch, n_params]; columns follow :func:`param_shapes`, rows examples.
    Use :func:`unflatten` to get per-parameter views.

    Raises
    ------
    ValueError
        If inputs and targets have different batch sizes, or a gradient is NaN/inf.
    """
    if inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"inputs and targets must have the same batch size, got "
                         f"{inputs.shape[0]} and {targets.shape[0]}")
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def one(p, x, t):
        out = functional_call(model, (p, buffers), (x.unsqueeze(0),))
        return loss_fn(out, t.unsqueeze(0))

    grads = vmap(grad(one), in_dims=(None, 0, 0))(params, inputs, targets)
    flat = torch.cat([g.reshape(inputs.shape[0], -1) for g in grads.values()], dim=1)
    return check_finite_tensor(flat, "per-example gradients")
