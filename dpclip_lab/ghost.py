"""Per-example clipping of an ``nn.Module`` without per-example gradients: layer by layer.

DP-SGD needs, for a batch, the per-example norms ``‖g_i‖`` and the clipped sum
``Σ_i s_i g_i`` with ``s_i = min(1, C/‖g_i‖)`` — not the ``[batch, n_params]``
matrix itself. For the layers networks are made of, both come from the layer's
input ``a`` and the gradient of the loss w.r.t. its output ``δ`` (one ordinary
backward pass, no parameter gradients):

* **Linear** (positions ``t`` of a sequence, or ``T = 1``): example i's weight
  gradient is ``G_i = Σ_t δ_{it} a_{it}ᵀ``. Its squared norm is
  ``‖a_i‖² ‖δ_i‖²`` for ``T = 1`` and, by the *ghost norm* identity
  (Goodfellow 2015; Li et al. 2022, §4),
  ``‖G_i‖² = Σ_{t,t'} (a_{it}·a_{it'}) (δ_{it}·δ_{it'})`` otherwise — or, when
  that costs more multiply-adds than forming ``G_i`` (``T (d_in + d_out) ≥ d_in d_out``;
  a time version of the "mixed" rule of Bu et al. 2023), ``G_i`` is formed
  (*book-keeping*, Bu et al. 2023) and kept for the sum. The clipped sum is
  ``Σ_i s_i G_i = (s ⊙ δ)ᵀ a``: one matrix product per layer, no second backward pass.
* **Conv1d / Conv2d**: a Linear layer over the ``L`` output positions of the
  unfolded input (its patches, gathered channels-last): ghost norm or book-keeping as
  above. On larger maps (``L > 64``) book-keeping forms ``G_i`` by one grouped-convolution
  weight gradient with the batch as groups; thin layers (short patches, e.g. a first
  layer on one- or three-channel images) form it at any map size by one ``bmm`` over
  their patches gathered position-innermost. Norms and the clipped sum ``Σ_i s_i G_i``
  are then a reduction and one matrix product. Groups, strides, dilation and string /
  non-zero padding modes are supported.
* **Embedding**: ``‖G_i‖² = Σ_{t,t'} 1[id_{it} = id_{it'}] δ_{it}·δ_{it'}``;
  the clipped sum is an ``index_add`` of ``s_i δ_{it}``. When the ``[T, T]`` matrices are
  larger than the per-example gradient ``[V, dim]`` (small vocabularies, long sequences),
  ``G_i`` is formed instead by one scatter-add (book-keeping).
* **LayerNorm / GroupNorm**: per-example gradients of the affine weight and
  bias are small (one value per channel) and formed directly from the
  normalized input.
* Attention: :class:`SelfAttention` is built from Linear layers, so it is
  covered by the Linear rule (``torch.nn.MultiheadAttention`` keeps raw
  parameters and is not; models with it fall back, see below).

A module used several times in one forward (weight sharing over calls) is one
Linear/Conv/Embedding over the concatenated positions of all its calls.

On a CPU, :class:`ModuleOracle` gives a model with Conv2d layers its image batches
channels-last (:data:`CHANNELS_LAST`): the same values in the layout oneDNN's
convolutions, max-pooling and the rules' patch gathers are fastest on. A forward that
needs the layout the data came in (``h.view(B, -1)`` after a convolution) gets it.

Everything else falls back to the materialized path
(:func:`dpclip_lab.per_sample_grads`, ``torch.func``): a model with a
parameter outside the supported layers, a forward in which a layer does not see
the batch as its first dimension, and privatizers that need the per-example
vectors themselves (pre-clipping perturbation, Chen et al. §5). The fast path
equals the materialized one up to floating-point rounding
(``tests/test_ghost.py`` checks 1e-6 relative in float64, every layer type and both
branches of the ghost / book-keeping choice).

References
----------
Goodfellow, I. (2015). Efficient per-example gradient computations. arXiv:1510.01799.
Li, X., Tramèr, F., Liang, P., Hashimoto, T. (2022). Large language models can be
strong differentially private learners. ICLR.
Bu, Z., Wang, Y.-X., Zha, S., Karypis, G. (2023). Differentially private optimization
on large model at small cost (book-keeping). ICML.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .algorithms.oracles import CallableOracle, Sums, _check_finite, has_pre_clip
from .per_sample import BatchStats, batch_stats, module_grad_fn

__all__ = ["SUPPORTED_LAYERS", "unsupported_parameters", "supports", "ModuleOracle", "SelfAttention",
           "TinySequenceModel", "ghost_norms_and_sum"]

SUPPORTED_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Embedding, nn.LayerNorm, nn.GroupNorm)


class _Fallback(Exception):
    """The forward did something the layer rules do not cover: use the materialized path."""


class _NotFinite(Exception):
    """A step's squared per-example norms are not all finite: NaN or inf in the gradients, or finite
    gradients whose squared norms pass the dtype's range (float32: norms above ~1.8e19). That step runs
    on the materialized path, which clips such gradients exactly and names NaN or inf ones."""


def _module_ok(m: nn.Module) -> bool:
    if isinstance(m, nn.Embedding):
        return m.max_norm is None and not m.scale_grad_by_freq
    if isinstance(m, (nn.Conv1d, nn.Conv2d)):
        return not isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d))
    return isinstance(m, SUPPORTED_LAYERS)


def unsupported_parameters(model: nn.Module) -> list[str]:
    """Lab utility: names of trainable parameters the layer rules cannot handle (empty: the model is supported).

    A parameter is supported when it is the ``weight`` or ``bias`` of exactly one
    module of a type in :data:`SUPPORTED_LAYERS` (Embedding without ``max_norm``
    or ``scale_grad_by_freq``).
    """
    owner: dict[int, list[str]] = {}
    bad = []
    for mname, m in model.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            full = f"{mname}.{pname}" if mname else pname
            owner.setdefault(id(p), []).append(full)
            if pname not in ("weight", "bias") or not _module_ok(m):
                bad.append(full)
    bad += [names[0] for names in owner.values() if len(names) > 1]  # tied across modules
    return sorted(set(bad))


def supports(model: nn.Module) -> bool:
    """Lab utility: True when every trainable parameter of ``model`` is covered by a layer rule."""
    return not unsupported_parameters(model)


# -- layer rules -------------------------------------------------------------------------------
# Each rule turns the captured (input, output-gradient) pairs of one module into
#   {param: (n2, wsum)}: n2 [B] the squared per-example norms, and wsum(W, raw) for weight rows
#   W [K, B] the K weighted sums Σ_i W_ki g_i, flattened: [K, numel]. ``raw=True`` says that W's last
#   row is all ones (the raw sum Σ_i g_i, DiceSGD's error feedback): a rule may skip that multiply.
#   Where the per-example gradients are formed (G [B, k]), the K sums are one product W G.

def _rows_weighted(d: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``d [B, *, k]`` scaled per example by each weight row of ``W [K, B]``, side by side:
    ``[B, *, K·k]`` (columns ``j·k .. (j+1)·k`` carry row j), so that one matrix product
    ``(·)ᵀ a`` gives all K weighted sums stacked."""
    if W.shape[0] == 1:
        return d * W[0].view(-1, *([1] * (d.dim() - 1)))
    w = W.T.reshape(W.shape[1], *([1] * (d.dim() - 2)), W.shape[0], 1)  # [B, 1.., K, 1]
    return (w * d.unsqueeze(-2)).flatten(-2)


def _positions_mm(d: torch.Tensor, a: torch.Tensor, W: torch.Tensor, raw: bool) -> torch.Tensor:
    """The ghost norm's weighted sums: ``d [B, T, d_out]``, ``a [B·T, d_in]`` -> ``[K·d_out, d_in]``,
    one matrix product ``(W_k ∘ d)ᵀ a`` per weight row, the raw row's (``raw``) on ``d`` as it is. Against
    one product over the K rows side by side (:func:`_rows_weighted`), the broadcast that builds them costs
    more than the second product's call (benchmark CNN's 8×8 second conv, K = 2, batch 64: 156 -> 132 µs;
    batch 256: 683 -> 633 µs; the same numbers, bit for bit, there)."""
    B, T = d.shape[0], d.shape[1]
    rows = [d * W[k].view(B, 1, 1) for k in range(W.shape[0] - raw)] + ([d] if raw else [])
    return _cat([r.reshape(B * T, -1).T.mm(a) for r in rows], 0)


def _linear_like(a: torch.Tensor, d: torch.Tensor, weight, bias, finish):
    """a [B, T, d_in], d [B, T, d_out]: the Linear rule (ghost norm or book-keeping, whichever is cheaper).

    ``finish`` maps K stacked weight gradients ``[K·d_out, d_in]`` to ``[K, weight.numel()]``
    in the weight's element order."""
    B, T, din = a.shape
    dout = d.shape[-1]
    out = {}
    if T == 1:  # one position: G_i = d_i a_iᵀ, so ‖G_i‖² = ‖a_i‖² ‖d_i‖²; the bias gradient is d_i itself
        a1, d1 = a[:, 0], d[:, 0]
        bias_term = _formed(d1)  # its squared norms serve the weight's too
        if weight is not None:
            out[weight] = (_sq(a1) * bias_term[0], lambda W, raw=False: finish(_rows_weighted(d1, W).T.mm(a1)))
        if bias is not None:
            out[bias] = bias_term
        return out
    if weight is not None:
        if _use_ghost(T, din, dout):  # ghost norm (Li et al. 2022): O(B T² (d_in + d_out))
            n2 = (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(d, d.transpose(1, 2))).sum((1, 2))
            out[weight] = (n2, lambda W, raw=False: finish(_positions_mm(d, a.reshape(B * T, din), W, raw)))
        else:  # book-keeping (Bu et al. 2023): form G_i once, reuse it for the sum
            G = torch.bmm(d.transpose(1, 2), a)  # [B, d_out, d_in]
            n2 = _sq(G.view(B, -1))
            out[weight] = (n2, lambda W, raw=False: finish(W.mm(G.view(B, -1)).view(-1, din)))
    if bias is not None:
        gb = d.sum(1)  # [B, d_out]
        out[bias] = _formed(gb)
    return out


#: "auto": the ghost norm when it costs fewer multiply-adds than forming the per-example
#: gradients, ``T (d_in + d_out) < d_in d_out`` (Gram matrices ``B T² (d_in + d_out)`` against
#: ``B T d_in d_out``), else book-keeping; "ghost" / "bookkeeping" force one (tests cover both
#: branches with it). Bu et al. (2023)'s mixed rule ``2 T² < d_in d_out`` weighs memory: on a CPU
#: it picks the ghost norm for, e.g., a 7×7 conv with 32 → 32 channels, 2x slower there.
STRATEGY = "auto"

#: Conv book-keeping on maps of at most this many output positions forms the per-example weight
#: gradients from the layer's patches by one ``bmm``; on larger maps by one grouped convolution
#: (:func:`_conv_weight_grads`). Measured (batch 64, 1 thread; rule alone): 7×7 and 8×8 maps
#: 10–20 % faster with patches, 4×4 maps 3x; 10×10 even, 12×12 and larger slower. Thin layers
#: (:data:`THIN_PATCH`) take their own path at every size. 0 here and ``THIN_PATCH = 0`` force the
#: grouped convolution (tests cover every path with them).
PATCH_POSITIONS = 64


#: Feed a CPU model with Conv2d layers its image batches channels-last (:func:`_channels_last`). oneDNN's
#: convolutions then keep that layout through the network, and max-pooling, the ReLUs, the backward
#: to the layer outputs and the patch gathers of the rules all run faster on it (benchmark CNN, 1 thread,
#: bare DP-SGD step against channels-first, shuffled rounds in one process: 0.84x on 8×8 images at
#: batch 64, 0.79x at 256; 0.74x and 0.77x on 28×28; its max-pool forward alone is 4.5x faster). The
#: results are the same up to rounding. False keeps the layout the data came in (tests cover both).
CHANNELS_LAST = True


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """A contiguous image batch ``[B, C, H, W]`` in the channels-last layout, with the same values.

    One channel: the same memory with channels-last strides, no copy (``contiguous(memory_format=...)``
    would return the tensor itself, which is contiguous in both layouts, and the convolution would stay
    channels-first)."""
    B, C, H, W = x.shape
    if C == 1:
        return x.as_strided(x.shape, (H * W, 1, W, 1), x.storage_offset())
    return x.contiguous(memory_format=torch.channels_last)


def _ghost_if(cheaper: bool) -> bool:
    """The ghost norm where ``cheaper`` says so (:data:`STRATEGY` ``"auto"``), or as ``STRATEGY`` forces."""
    return cheaper if STRATEGY == "auto" else STRATEGY == "ghost"


def _use_ghost(T, din, dout):
    return _ghost_if(T * (din + dout) < din * dout)


def _seq(x: torch.Tensor) -> torch.Tensor:
    """[B, *, d] -> [B, T, d]."""
    return x.reshape(x.shape[0], -1, x.shape[-1])


def _pads_input(m) -> bool:
    """True when a conv layer's padding is a string or not zeros: the input is padded with
    ``F.pad`` first (the zero padding of numeric ``padding`` is left to the convolution)."""
    return isinstance(m.padding, str) or m.padding_mode != "zeros"


def _conv_weight_grads(m, x, g):
    """Per-example weight gradients ``[B, C_out, C_in/groups · k]`` of a Conv1d/Conv2d call.

    The batch becomes the group dimension of one grouped convolution's weight
    gradient (input ``[1, B·C_in, ...]``, output gradient ``[1, B·C_out, ...]``,
    ``groups = B · groups``): on CPU about as fast as the ordinary weight gradient,
    and 1.2–3x faster than ``F.unfold`` + ``bmm`` (Opacus's rule) on the benchmark
    CNN's 28×28 layers (measured on a loaded 2-core machine). Thin layers
    (:func:`_thin`) are the exception: there the patches + one ``bmm`` win.
    """
    B = x.shape[0]
    if _thin(m):  # G_i = δ_i patches(x_i)ᵀ: one batched product, no per-example convolution
        a = _thin_patches(m, x)  # [B, C_in · k, L]
        return torch.bmm(g.reshape(B, g.shape[1], -1), a.transpose(1, 2)).view(B, -1)
    if _pads_input(m):
        x = _padded(m, x)
        pad = [0] * (x.dim() - 2)
    else:
        pad = list(m.padding)
    W = m.weight
    w = W.new_empty((B * W.shape[0], *W.shape[1:]))
    gw = torch.ops.aten.convolution_backward(
        g.reshape(1, B * g.shape[1], *g.shape[2:]), x.reshape(1, B * x.shape[1], *x.shape[2:]), w, None,
        list(m.stride), pad, list(m.dilation), False, [0] * (x.dim() - 2), B * m.groups,
        [False, True, False])[1]
    return gw.view(B, -1)


#: A conv layer is thin when its patches are this short or shorter (``C_in · k``: 3×3 kernels on one-
#: or three-channel images). Measured (batch 64, 1 thread, rule alone): patches + ``bmm`` against the
#: path the layer took before 0.63–0.92x for ``C_in · k`` = 9, 25, 27 on 5×5 to 32×32 maps; 0.96–1.15x
#: at 36–54; at 72 and wider 1.2–2.4x (0.98x on a 4×4 map, where the ghost norm was the other path).
THIN_PATCH = 27


def _thin(m) -> bool:
    """A conv layer with short patches (``C_in · k ≤ THIN_PATCH``) and ``groups = 1``, such as a first
    layer on one-channel images: its per-example weight gradients are cheaper as one ``bmm`` over its
    patches in :func:`_thin_patches`'s layout than as a grouped convolution (the benchmark CNN's first
    layer at batch 64: 1.5x faster on 28×28 images, 1.7x on 8×8), from channels-last patches (8×8: 1.7x)
    or by ``F.unfold`` + ``bmm`` (8×8: 1.4x)."""
    return m.groups == 1 and math.prod(m.weight.shape[1:]) <= THIN_PATCH


def _padded(m, x):
    """The input of a conv call padded as the layer pads it (string padding, any padding mode)."""
    mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
    return F.pad(x, m._reversed_padding_repeated_twice, mode=mode)


def _window(m):
    """Kernel size, stride and dilation of a Conv1d/Conv2d as 2-D (a Conv1d is a Conv2d of height 1)."""
    if isinstance(m, nn.Conv1d):
        return (1, m.kernel_size[0]), (1, m.stride[0]), (1, m.dilation[0])
    return m.kernel_size, m.stride, m.dilation


def _out_size(H, W, k, st, dil):
    """Output positions ``(Ho, Wo)`` of the windows ``_window`` describes on an ``H × W`` (padded) map."""
    return tuple((n - d * (kk - 1) - 1) // s + 1 for n, kk, s, d in zip((H, W), k, st, dil))


def _thin_patches(m, x):
    """The patches of a Conv1d/Conv2d call in ``F.unfold``'s layout ``[B, C_in · k, L]`` (channel, kernel
    position; the weight's order), gathered by one strided copy whose innermost run is a row of output
    positions: 2x (8×8 maps) to 5x (28×28) faster than ``F.unfold``, which loops over the examples.
    Few channels only: with many, the channels-last gather of :func:`_conv_patches` is faster."""
    x = _padded(m, x)
    if isinstance(m, nn.Conv1d):
        x = x.unsqueeze(2)
    k, st, dil = _window(m)
    B, C, H, W = x.shape
    Ho, Wo = _out_size(H, W, k, st, dil)
    s0, s1, s2, s3 = x.stride()
    v = x.as_strided((B, C, k[0], k[1], Ho, Wo), (s0, s1, s2 * dil[0], s3 * dil[1], s2 * st[0], s3 * st[1]))
    return v.reshape(B, C * k[0] * k[1], Ho * Wo)


def _conv_patches(m, x):
    """The input of a Conv1d/Conv2d call as patches ``[B, L, k · C_in]``, channels last.

    The layout of a Linear layer's input over L positions (the clipped sum is one
    matrix product). Columns are ordered (kernel position, channel) — 4x cheaper to
    gather than ``F.unfold``'s (channel, kernel position) from a channels-last copy;
    :func:`_conv_finish` puts the weight gradient back in the weight's order.
    """
    pad = None
    if _pads_input(m):
        x = _padded(m, x)
    elif any(m.padding):
        pad = m.padding
    if isinstance(m, nn.Conv1d):
        x = x.unsqueeze(2)
        pad = None if pad is None else (0, pad[0])
    k, st, dil = _window(m)
    if pad is None:
        x = x.permute(0, 2, 3, 1).contiguous()  # [B, H, W, C]
    else:  # zero padding and the channels-last copy in one pass (one op)
        x = F.pad(x.permute(0, 2, 3, 1), (0, 0, pad[1], pad[1], pad[0], pad[0]))
    B, H, W, C = x.shape
    Ho, Wo = _out_size(H, W, k, st, dil)
    s0, s1, s2, s3 = x.stride()
    v = x.as_strided((B, Ho, Wo, k[0], k[1], C), (s0, s1 * st[0], s2 * st[1], s1 * dil[0], s2 * dil[1], s3))
    return v.reshape(B, Ho * Wo, k[0] * k[1] * C)


def _conv_finish(W):
    """K stacked ``[C_out, k · C_in]`` (patch order of :func:`_conv_patches`) -> ``[K, W.numel()]``
    in the weight's order ``[C_out, C_in, *k]``."""
    O, C, ks = W.shape[0], W.shape[1], W.shape[2:]
    perm = (0, 1, len(ks) + 2, *range(2, len(ks) + 2))
    return lambda G: G.view(-1, O, *ks, C).permute(perm).reshape(-1, W.numel())


def _rule_conv(m, calls):
    """Conv1d / Conv2d: a Linear layer over the L output positions of the patches — ghost norm
    when it is cheaper (:func:`_use_ghost`), else book-keeping — for ``groups = 1`` where the
    ghost norm is chosen or on small maps (``L ≤ PATCH_POSITIONS``, thin layers excepted);
    otherwise per-example weight gradients by :func:`_conv_weight_grads` (book-keeping)."""
    B = calls[0][0].shape[0]
    out = {}
    W, bias = m.weight, m.bias
    if W.requires_grad:
        L = sum(math.prod(g.shape[2:]) for _, g in calls)  # shapes, not tensor indexing (no ops)
        din, dout = math.prod(W.shape[1:]) * m.groups, W.shape[0]
        use_ghost = _use_ghost(L, din, dout)
        # a Linear layer over the L positions (thin layers: their own patches + bmm are faster, see _thin)
        if m.groups == 1 and (use_ghost or (L <= PATCH_POSITIONS and not _thin(m))):
            a = _cat([_conv_patches(m, x) for x, _ in calls])                      # [B, L, d_in]
            d = _cat([g.reshape(B, dout, -1).transpose(1, 2) for _, g in calls])  # [B, L, d_out]
            if use_ghost:  # positions-major in memory: the Gram bmm and the clipped sum's matrix
                d = d.contiguous()  # product read it directly (each would copy a transposed view)
            # (book-keeping's bmm reads the transposed view [B, d_out, L], contiguous, as it is)
            return _linear_like(a, d, W, bias if (bias is not None and bias.requires_grad) else None,
                                _conv_finish(W))
        else:
            G = _conv_weight_grads(m, *calls[0])
            for x, g in calls[1:]:
                G = G + _conv_weight_grads(m, x, g)
            out[W] = _formed(G)
    if bias is not None and bias.requires_grad:
        gb = sum(g.reshape(B, g.shape[1], -1).sum(-1) for _, g in calls)
        out[bias] = _formed(gb)
    return out


def _cat(ts, dim=1):
    return ts[0] if len(ts) == 1 else torch.cat(ts, dim)


def _formed(G):
    """The term of per-example gradients formed as the rows of ``G [B, k]``: their squared norms,
    and the weighted sums ``W ↦ W G`` (``[K, B] -> [K, k]``)."""
    return _sq(G), (lambda w, raw=False: w.mm(G))


def _sq(G):
    """Squared norms of the rows of ``G [B, k]`` (one fused reduction, no temporary)."""
    return torch.linalg.vector_norm(G, dim=1).square_()


def _rule_linear(m, calls):
    a, d = _seq(calls[0][0]), _seq(calls[0][1])
    if len(calls) > 1:  # one layer over the positions of all calls
        a = torch.cat([_seq(x) for x, _ in calls], 1)
        d = torch.cat([_seq(g) for _, g in calls], 1)
    W = m.weight if m.weight.requires_grad else None
    bias = m.bias if (m.bias is not None and m.bias.requires_grad) else None
    return _linear_like(a, d, W, bias, None if W is None else (lambda G: G.view(-1, W.numel())))


def _rule_embedding(m, calls):
    B = calls[0][0].shape[0]
    ids = torch.cat([x.reshape(B, -1) for x, _ in calls], 1)          # [B, T]
    d = torch.cat([g.reshape(B, -1, g.shape[-1]) for _, g in calls], 1)  # [B, T, dim]
    if m.padding_idx is not None:  # the padding row gets no gradient
        d = d * (ids != m.padding_idx).unsqueeze(-1).to(d.dtype)
    W = m.weight
    if not W.requires_grad:
        return {}
    V, dim = W.shape
    T = ids.shape[1]
    if not _embedding_ghost(T, V, dim):  # book-keeping: G_i [V, dim] by one scatter-add of the δ_it
        G = d.new_zeros((B * V, dim))
        rows = (ids + torch.arange(B, device=ids.device).unsqueeze(1) * V).reshape(-1)
        return {W: _formed(G.index_add_(0, rows, d.reshape(-1, dim)).view(B, V * dim))}
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)).to(d.dtype)          # [B, T, T]
    n2 = (same * torch.bmm(d, d.transpose(1, 2))).sum((1, 2))

    def wsum(w, raw=False):  # [K, B] -> [K, W.numel()]
        out = W.new_zeros((w.shape[0], W.shape[0], W.shape[1]))
        src = _rows_weighted(d, w).reshape(-1, w.shape[0], d.shape[-1]).transpose(0, 1)  # [K, B·T, dim]
        return out.index_add_(1, ids.reshape(-1), src).view(w.shape[0], -1)
    return {W: (n2, wsum)}


def _embedding_ghost(T, V, dim):
    """The ghost norm for an embedding of ``V`` rows of width ``dim`` over ``T`` positions when its
    ``[T, T]`` matrices are smaller than the per-example gradient ``[V, dim]`` (a large vocabulary,
    short sequences), else book-keeping. Both are memory-bound passes over these intermediates, so
    their sizes decide. Measured (batch 64, rule and sums alone, 1 thread): the book's CharModel
    (V = 30, dim = 16, T = 64) 1.41 -> 0.12 ms by book-keeping (its DP-SGD step 8.2 -> 7.3 ms); V = 1000,
    dim = 64, T = 64 about equal (2.5 ms, ghost chosen); a 50k-token vocabulary (T = 32, batch 16) 0.86 ms
    by the ghost norm, 107 ms by book-keeping."""
    return _ghost_if(T * T < V * dim)


def _rule_norm(m, calls):
    """LayerNorm / GroupNorm: per-example affine gradients, formed directly."""
    B = calls[0][0].shape[0]
    gw = gb = 0
    for x, g in calls:
        if isinstance(m, nn.LayerNorm):
            xhat = F.layer_norm(x, m.normalized_shape, None, None, m.eps)
            gw = gw + (g * xhat).reshape(B, -1, *m.normalized_shape).sum(1)
            gb = gb + g.reshape(B, -1, *m.normalized_shape).sum(1)
        else:
            xhat = F.group_norm(x, m.num_groups, None, None, m.eps)
            gw = gw + (g * xhat).reshape(B, x.shape[1], -1).sum(-1)
            gb = gb + g.reshape(B, x.shape[1], -1).sum(-1)
    out = {}
    for p, gp in ((m.weight, gw), (m.bias, gb)):
        if p is not None and p.requires_grad:
            gp = gp.reshape(B, -1)
            out[p] = _formed(gp)
    return out


def _rule(m):
    if isinstance(m, nn.Linear):
        return _rule_linear
    if isinstance(m, (nn.Conv1d, nn.Conv2d)):
        return _rule_conv
    if isinstance(m, nn.Embedding):
        return _rule_embedding
    return _rule_norm


def _per_example_losses(loss_fn, out, t):
    """Σ_i ℓ(f(x_i), y_i): cross-entropy directly; a loss with a ``per_example(outputs, targets) -> [B]``
    attribute (the losses of each example alone, batched; e.g. :func:`dpclip_lab.models.sequence_loss`)
    through it; any other loss applied per example (vmap)."""
    if loss_fn is F.cross_entropy or (isinstance(loss_fn, nn.CrossEntropyLoss) and loss_fn.weight is None
                                      and loss_fn.ignore_index < 0):
        ls = getattr(loss_fn, "label_smoothing", 0.0)
        return F.cross_entropy(out, t, reduction="sum", label_smoothing=ls)
    per_example = getattr(loss_fn, "per_example", None)
    if callable(per_example):
        return per_example(out, t).sum()
    return torch.func.vmap(lambda o, y: loss_fn(o.unsqueeze(0), y.unsqueeze(0)))(out, t).sum()


def ghost_norms_and_sum(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor,
                        scale: Callable | None, *, need_raw: bool = False):
    """Per-example gradient norms and rescaled sums of ``model`` on one batch, layer by layer.

    Ghost norms (Li et al. 2022, §4) and book-keeping (Bu et al. 2023) per layer; see the module docstring.

    Parameters
    ----------
    model : nn.Module
        A supported model (:func:`supports`), evaluated at its current parameters.
    loss_fn : callable
        ``loss_fn(outputs, targets) -> scalar``, applied per example as in
        :func:`dpclip_lab.per_sample_grads`.
    inputs, targets : Tensor
        The batch (first dimension = examples).
    scale : callable or None
        ``scale(norms [1, B]) -> [1, B]`` (e.g. ``min(1, C/‖g_i‖)``); None: all ones.
    need_raw : bool
        Also return the unscaled sum ``Σ_i g_i``.

    Returns
    -------
    norms : Tensor[B]
        The per-example gradient norms.
    scaled : Tensor[n_params]
        ``Σ_i scale_i g_i``, columns in the order of :func:`dpclip_lab.per_sample.flat_params`.
    raw : Tensor[n_params] or None
        ``Σ_i g_i`` (None unless ``need_raw``).

    Raises
    ------
    _Fallback
        If the forward does not fit the layer rules (caught by :class:`ModuleOracle`).
    """
    plan = _Plan(model)
    try:
        return plan.run(loss_fn, inputs, targets, scale, need_raw)
    finally:
        plan.close()


class _Plan:
    """The layer plan of a model, built once: its trainable parameters, the supported
    modules that own them, and forward hooks that record (input, output) pairs only
    while :meth:`run` is recording. Reusing one plan across steps (as
    :class:`ModuleOracle` does) saves the per-step module walk and hook set-up, a
    measurable share of a step on small models."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.calls: dict | None = None
        self.B = 0
        self.last_batch = None  # batch_stats of the last run (its loss, and its outputs for the count)
        self.handles = [m.register_forward_hook(self._hook) for m in model.modules()
                        if isinstance(m, SUPPORTED_LAYERS) and any(p.requires_grad for p in m.parameters(recurse=False))]

    def _hook(self, m, inp, out):
        calls = self.calls
        if calls is None:
            return
        x = inp[0] if inp else None
        B = self.B
        if not isinstance(x, torch.Tensor) or x.shape[0] != B or not isinstance(out, torch.Tensor) \
                or out.shape[0] != B:
            raise _Fallback(f"{type(m).__name__} does not see the batch as its first dimension")
        calls.setdefault(m, []).append([x.detach(), out, out._version])

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def run(self, loss_fn, inputs, targets, scale, need_raw):
        params = self.params
        B = inputs.shape[0]
        calls: dict[nn.Module, list] = {}
        self.calls, self.B = calls, B
        try:
            with torch.enable_grad():
                out = self.model(inputs)
                total = _per_example_losses(loss_fn, out, targets)
                self.last_batch = batch_stats(out, total, targets)
                outs = [c[1] for cl in calls.values() for c in cl]
                if any(c[1]._version != c[2] for cl in calls.values() for c in cl):
                    raise _Fallback("a layer's output was modified in place (inplace=True activation?)")
                grads = list(torch.autograd.grad(total, outs, allow_unused=True)) if outs else []
                del outs, out, total  # the layer outputs: each freed when its gradient replaces it below
        finally:
            self.calls = None
        # Hold each layer's output, then its gradient, no longer than needed: the outputs are
        # freed as their gradients replace them, the gradients once their layer's rule has run
        # (the rule's terms keep only what its sums need). Holding all of them to the end made the
        # peak RSS increment of a step 1.2x larger (28×28 CNN, batch 256: 200 vs 162 MiB).
        k = 0
        for cl in calls.values():
            for c in cl:
                g, grads[k] = grads[k], None
                c[1] = torch.zeros_like(c[1]) if g is None else g
                del c[2]
                k += 1
        with torch.no_grad():
            terms = {}
            for m, cl in calls.items():
                terms.update(_rule(m)(m, cl))
                cl.clear()
            n2 = None
            for p in params:
                if p in terms:
                    n2 = terms[p][0] if n2 is None else n2 + terms[p][0]
            if n2 is None:
                n2 = inputs.new_zeros(B, dtype=params[0].dtype)
            # A finite sum proves every squared norm finite; an inf one would silently clip its example
            # to zero (C / inf = 0). The sums are still checked in reduce (a weight above 1, as
            # normalization gives tiny gradients, can overflow them).
            if not math.isfinite(n2.sum().item()):
                raise _NotFinite
            norms = n2.clamp_(min=0).sqrt_()
            s = torch.ones_like(norms) if scale is None else scale(norms.unsqueeze(0))[0]
            # the clipped sum, and the raw sum when asked for: one weight row each, one pass over the terms
            W = torch.stack([s, torch.ones_like(s)]) if need_raw else s.unsqueeze(0)
            sums = torch.cat([terms[p][1](W, need_raw) if p in terms else W.new_zeros((W.shape[0], p.numel()))
                              for p in params], 1)
        return norms, sums[0], (sums[1] if need_raw else None)


class ModuleOracle(CallableOracle):
    """The ``reduce`` oracle of an ``nn.Module`` (ghost norms, Li et al. 2022, §4; book-keeping, Bu et al. 2023) (see :mod:`dpclip_lab.algorithms.oracles`), layer by layer.

    ``reduce`` computes per-example norms and clipped sums with the layer rules of
    this module (:func:`ghost_norms_and_sum`) when ``mode`` is ``"auto"`` or
    ``"ghost"`` and the model is supported; otherwise — and always for
    pre-clipping perturbation, which clips ``g_i + k ζ_i`` and so needs the
    vectors — it materializes per-example gradients with ``torch.func``
    (:func:`dpclip_lab.per_sample_grads`), exactly as :class:`CallableOracle`
    over :func:`dpclip_lab.per_sample.module_grad_fn`.

    On a CPU the layer-wise path feeds a model with Conv2d layers its image batches channels-last
    (:data:`CHANNELS_LAST`, attribute ``channels_last``); if the forward raises a ``RuntimeError``
    on them, that step and every later one run on the batches as they came (an error the forward
    raises there too propagates).

    Parameters
    ----------
    model, loss_fn, inputs, targets
        As in :func:`dpclip_lab.train`.
    mode : {"auto", "ghost", "materialize"}
        ``"ghost"`` raises ``ValueError`` for an unsupported model.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor,
                 mode: str = "auto"):
        if len(inputs) != len(targets):
            raise ValueError(f"targets must have one entry per input: inputs has {len(inputs)} rows, "
                             f"targets {len(targets)}")
        super().__init__(module_grad_fn(model, loss_fn, inputs, targets, on_batch=self._record))
        if mode not in ("auto", "ghost", "materialize"):
            raise ValueError(f"per_example must be 'auto', 'ghost' or 'materialize', got {mode!r}")
        bad = unsupported_parameters(model)
        if mode == "ghost" and bad:
            raise ValueError(f"per_example='ghost' needs every trainable parameter in a layer of "
                             f"{[c.__name__ for c in SUPPORTED_LAYERS]}; not covered: {bad[:5]}")
        self.model, self.loss_fn, self.inputs, self.targets = model, loss_fn, inputs, targets
        self.params = [q for q in model.parameters() if q.requires_grad]
        self._sizes = [q.numel() for q in self.params]
        self.use_ghost = mode != "materialize" and not bad
        self.fallbacks = 0  # steps that fell back at run time (see module docstring)
        #: ``(Σ loss, number correct or None, batch size)`` of the last batch reduced (one run), from the
        #: step's own forward pass: a :class:`dpclip_lab.per_sample.BatchStats`, whose count is made when read.
        self.last_batch = None
        self._plan = None   # the layer plan and its forward hooks, built on the first step
        self._flat, self._views = None, []  # the parameters' flat buffer (:meth:`load`)
        #: Image batches go in channels-last (:data:`CHANNELS_LAST`): CPU, 4-D inputs, a Conv2d in the model.
        #: Turned off for good if a forward fails on them (e.g. ``x.view(B, -1)`` after a convolution).
        self.channels_last = (CHANNELS_LAST and inputs.dim() == 4 and inputs.device.type == "cpu"
                              and any(isinstance(m, nn.Conv2d) for m in model.modules()))

    def _record(self, stats):
        self.last_batch = stats

    def close(self):
        """Lab utility: remove the forward hooks this oracle put on the model (``dl.train`` calls it)."""
        if self._plan is not None:
            self._plan.close()
            self._plan = None

    def reduce(self, theta, batch, scale, *, pre_clip_std=0.0, need_raw=False, generator=None) -> Sums:
        if has_pre_clip(pre_clip_std) or not self.use_ghost:
            return super().reduce(theta, batch, scale, pre_clip_std=pre_clip_std, need_raw=need_raw,
                                  generator=generator)
        idx, w = batch.padded()
        R = theta.shape[0]
        try:
            if R == 1:
                rows = [self._one(theta[0], idx if idx.dim() == 1 else idx[0], None, scale, need_raw)]
            else:
                rows = [self._one(theta[r], idx if idx.dim() == 1 else idx[r], None if w is None else w[r],
                                  _row_scale(scale, r, R), need_raw) for r in range(R)]
        except _Fallback:
            self.fallbacks += 1
            self.use_ghost = False  # the same forward would fall back every step
            self.close()
            return super().reduce(theta, batch, scale, need_raw=need_raw, generator=generator)
        except _NotFinite:  # this step only (see _NotFinite)
            return super().reduce(theta, batch, scale, need_raw=need_raw, generator=generator)
        if R == 1:  # no stacking copies on the training driver's path
            scaled, raw, norms = rows[0][0].unsqueeze(0), rows[0][1], rows[0][2].unsqueeze(0)
            raw = None if raw is None else raw.unsqueeze(0)
        else:
            scaled = torch.stack([r[0] for r in rows])
            raw = torch.stack([r[1] for r in rows]) if need_raw else None
            norms = torch.stack([r[2] for r in rows])
        _check_finite(scaled, "per-example gradients")
        return Sums(scaled, raw, norms, w)

    def load(self, theta):
        """Lab utility: θ ``[n_params]`` into the model's parameters by one copy.

        The parameters are views of one flat buffer of this oracle (a step's ``vector_to_parameters``
        took a split and a view per parameter, and left them aliasing θ). Parameters rebound since
        (e.g. by ``vector_to_parameters``) are bound to the buffer again."""
        flat = self._flat
        if flat is None or flat.dtype != theta.dtype or flat.device != theta.device:
            flat = self._flat = torch.empty_like(theta)
            self._views = [v.view(q.shape) for q, v in zip(self.params, flat.split(self._sizes))]
        for q, v in zip(self.params, self._views):
            if q.data_ptr() != v.data_ptr():
                q.data = v
        flat.copy_(theta)

    def _one(self, theta, idx, w, scale, need_raw):
        self.load(theta)
        m = idx.shape[0]
        keep = idx if w is None else idx[w > 0]
        if keep.numel() == 0:
            self._record(BatchStats(theta.new_zeros(()), None, None, 0))
            z = theta.new_zeros(theta.shape[0])
            return z, (z.clone() if need_raw else None), theta.new_zeros(m)
        if self._plan is None:
            self._plan = _Plan(self.model)
        x, y = self.inputs.index_select(0, keep), self.targets.index_select(0, keep)
        try:
            norms, scaled, raw = self._plan.run(self.loss_fn, _channels_last(x) if self.channels_last else x, y,
                                                scale, need_raw)
        except RuntimeError:
            if not self.channels_last:
                raise
            # The forward needs the layout the data came in (e.g. ``h.view(B, -1)`` after a convolution):
            # give it that from now on. An error it raises there too propagates.
            self.channels_last = False
            norms, scaled, raw = self._plan.run(self.loss_fn, x, y, scale, need_raw)
        self._record(self._plan.last_batch)
        if w is not None:  # members first (Batch.padded puts them first), zeros in padding slots
            full = theta.new_zeros(m)
            full[: norms.shape[0]] = norms
            norms = full
        return scaled, raw, norms


def _row_scale(scale, r, R):
    """``scale`` for run r alone: it expects ``[R, m]`` norms, so pad the other rows."""
    if scale is None:
        return None

    def f(norms):  # norms [1, m]
        full = norms.new_ones((R, norms.shape[1]))
        full[r] = norms[0]
        return scale(full)[r:r + 1]
    return f


# -- the book's attention block ----------------------------------------------------------------
class SelfAttention(nn.Module):
    """Lab utility: multi-head self-attention made of ``nn.Linear`` layers (so the Linear rule covers it).

    Same computation as ``nn.MultiheadAttention(d_model, n_heads, batch_first=True)``
    on ``(x, x, x)``: ``out = W_o · softmax(Q Kᵀ / √d_h) V`` per head, with
    ``Q, K, V = x W_qᵀ, x W_kᵀ, x W_vᵀ``.
    """

    def __init__(self, d_model: int, n_heads: int = 1, causal: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got {d_model} and {n_heads}")
        self.h, self.causal = n_heads, causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):  # x [B, T, d]
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.h)
        if self.causal:
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        y = att.softmax(-1) @ v                      # [B, h, T, d_h]
        return self.out(y.transpose(1, 2).reshape(B, T, d))


class TinySequenceModel(nn.Module):
    """Lab utility: token + position embeddings → LayerNorm → self-attention (residual) → mean pool → Linear.

    The book's small sequence classifier; every parameter is covered by a layer rule.
    """

    def __init__(self, vocab: int, d_model: int = 16, n_heads: int = 2, max_len: int = 32, classes: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.att = SelfAttention(d_model, n_heads)
        self.head = nn.Linear(d_model, classes)

    def forward(self, ids):  # ids [B, T] (long)
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device).expand(B, T)
        h = self.tok(ids) + self.pos(pos)
        h = h + self.att(self.norm(h))
        return self.head(h.mean(1))
