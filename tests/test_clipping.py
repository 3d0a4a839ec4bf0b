"""Per-example clipping: invariants (hypothesis), broadcasting, per-block clipping, bad input."""
import math
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

import dpclip_lab as dl

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
norms = st.floats(min_value=1e-6, max_value=1e6)


@settings(max_examples=200, deadline=None)
@given(arrays("float64", st.tuples(st.integers(1, 6), st.integers(1, 5)), elements=finite), norms)
def test_clip_invariants(g_np, C):
    g = torch.as_tensor(g_np)
    out = dl.clip(g, C)
    n_in, n_out = torch.linalg.vector_norm(g, dim=-1), torch.linalg.vector_norm(out, dim=-1)
    assert bool((n_out <= C * (1 + 1e-12)).all())                       # norm <= C
    inside = n_in <= C
    assert torch.equal(out[inside], g[inside])                          # identity inside the ball
    # direction kept: out = s * g with s in (0, 1]
    unit = lambda v: v / v.abs().amax(-1, keepdim=True).clamp_min(1e-300)  # noqa: E731 (no underflow)
    nz = n_in > 0
    assert torch.allclose(unit(out[nz]), unit(g[nz]), rtol=1e-9, atol=1e-12)
    assert bool((n_out[~inside] > C * (1 - 1e-9)).all())                # clipped ones land on the sphere


def test_zero_vectors_are_exact_and_huge_norms_finite(device):
    g = torch.tensor([[0.0, 0.0], [1e30, -1e30], [3.0, 4.0]], device=device)
    out = dl.clip(g, 1.0)
    assert torch.equal(out[0], torch.zeros(2, device=device))
    assert bool(torch.isfinite(out).all())
    assert torch.allclose(out[1], torch.tensor([1.0, -1.0], device=device) / math.sqrt(2))
    assert torch.allclose(dl.clip(g, 1e30)[2], g[2])                    # C up to 1e30: no clipping, no overflow
    assert dl.safe_norm(torch.tensor([[1e30, 1e30]])).item() == pytest.approx(math.sqrt(2) * 1e30)


def test_many_norms_in_one_call():
    g = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 5
    Cs = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    out = dl.clip(g, Cs[:, None])                                        # [3, 7, 3]
    assert out.shape == (3, 7, 3)
    for k, C in enumerate(Cs):
        assert torch.allclose(out[k], dl.clip(g, float(C)))


def test_clipped_fraction_and_factor():
    g = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    assert dl.clipped_fraction(g, 1.0).item() == pytest.approx(1 / 3)
    assert torch.allclose(dl.clip_factor(torch.tensor([5.0, 0.5, 0.0]), 1.0), torch.tensor([0.2, 1.0, 1.0]))


def test_per_block_clipping():
    g = torch.tensor([[3.0, 4.0, 0.3, 0.4]])
    out = dl.clip_per_block(g, 1.0, 2)
    assert torch.allclose(out, torch.tensor([[0.6, 0.8, 0.3, 0.4]]))
    out2 = dl.clip_per_block(g, 1.0, [1, 3])
    assert torch.allclose(out2[0, :1], torch.tensor([1.0]))
    with pytest.raises(ValueError, match="blocks=3 does not divide"):
        dl.clip_per_block(g, 1.0, 3)
    with pytest.raises(ValueError, match="sum to 3"):
        dl.clip_per_block(g, 1.0, [1, 2])


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_clip_norm(bad):
    with pytest.raises(ValueError, match="clip_norm"):
        dl.clip(torch.ones(2, 3), bad)
    with pytest.raises(ValueError, match="clip_norm"):
        dl.clip(torch.ones(2, 3), torch.tensor([1.0, bad]))


def test_bad_gradients_and_shapes():
    with pytest.raises(ValueError, match="g contains 1 NaN"):
        dl.clip(torch.tensor([[1.0, float("nan")]]), 1.0)
    with pytest.raises(ValueError, match="inf"):
        dl.clip(torch.tensor([[1.0, float("inf")]]), 1.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        dl.clip(torch.ones(4, 3), torch.ones(5))
    with pytest.raises(TypeError, match="clip_norm must be a real number"):
        dl.clip(torch.ones(4, 3), "1")


# -- issue #14, items 6, 7, 9, 9a ---------------------------------------------------------
def test_overflowing_norms_are_clipped_exactly():
    g = torch.full((1, 4), 3e38)                       # ‖g‖ = 6e38 > float32 max
    assert torch.allclose(dl.clip(g, 1.0), torch.full((1, 4), 0.5))   # was the zero vector
    assert dl.safe_norm(torch.full((1, 2), 1.5e38)).item() == pytest.approx(1.5e38 * math.sqrt(2), rel=1e-6)
    assert dl.safe_norm(torch.tensor([[math.inf, 1.0]])).item() == math.inf  # was NaN
    assert torch.allclose(dl.clip(torch.tensor([[3e38, -3e38]]), 1e-30),
                          torch.tensor([[1e-30, -1e-30]]) / math.sqrt(2))


@pytest.mark.parametrize("C, becomes", [(1e50, "inf"), (1e-50, "0.0")])
def test_clip_norm_is_checked_after_the_cast(C, becomes):
    with pytest.raises(ValueError, match=f"clip_norm=.*float32.*becomes {becomes}"):
        dl.clip(torch.randn(5, 3), C)                  # was all-NaN / all-zero
    assert bool(torch.isfinite(dl.clip(torch.randn(5, 3, dtype=torch.float64), C)).all())


def test_dp_sgd_names_a_clip_norm_that_vanishes_in_float32():
    from dpclip_lab.algorithms import dp_sgd
    prob = dl.data.chen_example1(dtype=torch.float32)
    with pytest.raises(ValueError, match="clip_norm"):  # used to blame the learning rate
        dp_sgd(prob, torch.zeros(1), n=prob.n, steps=2, lr=0.1, clip_norm=1e-50, noise_multiplier=1.0,
               sampling="full", seed=0)


def test_integer_tensors_are_promoted_not_truncated():
    assert torch.allclose(dl.clip(torch.tensor([[3, 4]]), 0.5), torch.tensor([[0.3, 0.4]]))
    assert dl.clipped_fraction(torch.tensor([[3, 4], [0, 0]]), 0.5).item() == 0.5
    assert dl.safe_norm(torch.tensor([[3, 4]])).item() == 5.0


def test_empty_inputs_name_the_problem():
    with pytest.raises(ValueError, match="empty last dimension"):
        dl.clip(torch.zeros(3, 0), 1.0)
    with pytest.raises(ValueError, match="no vectors"):
        dl.clipped_fraction(torch.zeros(0, 3), 1.0)     # was NaN
    assert dl.clip(torch.zeros(0, 3), 1.0).shape == (0, 3)  # an empty batch clips to an empty batch
    with pytest.raises(ValueError, match="norms"):
        dl.clip_factor(torch.tensor([math.inf]), 1.0)   # an overflowed norm would zero its example


# -- safe_norm's fast path (one vector_norm pass where it is exact) --------------------------
_MAGNITUDES = [0.0, 1e-44, 1e-30, 1e-20, 1e-14, 1e-3, 1.0, 1e3, 1e18, 1e20, 1e30, 2e38]


def _rows_at_scales(scales, p, dtype, seed):
    """One Gaussian row of length p per scale, cast to ``dtype``: ``(g, torch dtype)``."""
    gen = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    return torch.stack([torch.randn(p, generator=gen, dtype=torch.float64) * s for s in scales]).to(dt), dt


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_MAGNITUDES), min_size=1, max_size=8), st.integers(1, 300),
       st.sampled_from(["float32", "float64"]), st.integers(0, 2**31 - 1))
def test_safe_norm_matches_a_float64_reference_on_every_scale(scales, p, dtype, seed):
    """Rows of every magnitude from subnormal to near overflow, mixed in one matrix: each row's norm
    equals the norm of its exact values (computed in float64, where none of these under- or
    overflow) to a few ulp of the dtype (or the subnormal spacing, for a subnormal norm), or is
    inf where that norm exceeds the dtype's max."""
    g, dt = _rows_at_scales(scales, p, dtype, seed)
    ref = torch.linalg.vector_norm(g.double(), dim=-1)  # squares from 1e-88 to 4e76: exact in float64
    out = dl.safe_norm(g)
    assert out.dtype == dt and out.shape == (len(scales),)
    big = ref > torch.finfo(dt).max
    assert bool((out[big] == math.inf).all())
    fi = torch.finfo(dt)  # a subnormal norm is only representable to the subnormal spacing tiny·eps
    assert torch.allclose(out[~big].double(), ref[~big], rtol=8 * fi.eps, atol=2 * fi.tiny * fi.eps), (out, ref)


def test_safe_norm_scales_only_the_rows_that_need_it(monkeypatch):
    """Ordinary rows take the one-pass norm; a zero, a tiny or a huge row is rescaled alone."""
    import dpclip_lab.clipping as clipping
    seen = []
    real = clipping._scaled_norm
    monkeypatch.setattr(clipping, "_scaled_norm", lambda g: seen.append(g.shape) or real(g))
    g = torch.randn(64, 500)
    assert torch.allclose(dl.safe_norm(g), torch.linalg.vector_norm(g.double(), dim=-1).float(), rtol=1e-6)
    assert seen == []
    g[3] = 0.0
    g[7] *= 1e-25       # squares underflow in float32
    g[9] *= 1e25        # squares overflow in float32
    out = dl.safe_norm(g)
    assert seen == [(3, 500)]
    assert out[3] == 0 and torch.allclose(out.double(), torch.linalg.vector_norm(g.double(), dim=-1), rtol=1e-6)
    with pytest.raises(ValueError, match="g contains 1 NaN"):
        g[5, 2] = math.nan
        dl.safe_norm(g)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_MAGNITUDES[:-1] + [3e37]), min_size=1, max_size=8), st.integers(1, 300),
       st.sampled_from(["float32", "float64"]), st.sampled_from([1e-30, 1e-3, 1.0, 1e20]), st.integers(0, 2**31 - 1))
def test_clip_matches_a_float64_reference_on_every_scale(scales, p, dtype, C, seed):
    """clip's one-pass fast path and its rescaled path agree with ``g·min(1, C/‖g‖)`` on exact
    values (float64) for rows of every magnitude (finite entries: clip rejects inf; norms may still
    overflow float32), and never leave a norm above C."""
    g, dt = _rows_at_scales(scales, p, dtype, seed)
    g64 = g.double()
    n64 = torch.linalg.vector_norm(g64, dim=-1, keepdim=True)
    ref = torch.where(n64 > C, g64 * (C / n64), g64)
    out = dl.clip(g, C)
    fi = torch.finfo(dt)
    assert out.dtype == dt
    assert torch.allclose(out.double(), ref, rtol=8 * fi.eps, atol=2 * fi.tiny * fi.eps)
    assert bool((torch.linalg.vector_norm(out.double(), dim=-1) <= C * (1 + 8 * fi.eps)).all())


def test_safe_norm_is_differentiable_on_both_paths():
    """Rows through the one-pass norm and rows through the rescaled path (zero, tiny) in one matrix:
    the backward runs (no in-place write over a tensor autograd saved) and matches g/‖g‖ on regular rows."""
    g = torch.randn(4, 5, dtype=torch.float64)
    g[1] = 0.0
    g[2] *= 1e-300
    g.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. reading a norm that requires grad as a Python float
        dl.safe_norm(g).sum().backward()
    for i in (0, 3):
        assert torch.allclose(g.grad[i], g[i].detach() / g[i].detach().norm())
    assert torch.autograd.gradcheck(dl.safe_norm, (torch.randn(3, 4, dtype=torch.float64, requires_grad=True),))
