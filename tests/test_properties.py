"""Issue #14: random valid and invalid inputs at the public entry points.

Each call must return a finite, correctly shaped result, or raise ValueError/TypeError
whose message names the offending parameter — never NaN, never a silent zero.
Deterministic (``derandomize=True``) and fast (small ``max_examples``).
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import dpclip_lab as dl
from dpclip_lab import accountants as A

FAST = settings(max_examples=40, deadline=None, derandomize=True)

anything = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5),
                     st.just("1"), st.none(), st.just(True))
scales = st.one_of(st.floats(min_value=-1e60, max_value=1e60), st.just(math.nan), st.just(math.inf),
                   st.floats(min_value=1e-60, max_value=1e60))


def _raises_named(f, *names):
    """Call f; if it raises ValueError/TypeError the message names one of ``names``."""
    try:
        return f()
    except (ValueError, TypeError) as err:
        assert any(n in str(err) for n in names), f"{err!r} names none of {names}"
        return None


@FAST
@given(st.integers(0, 4), st.integers(0, 4), scales, st.sampled_from([torch.float32, torch.float64, torch.int64]),
       st.floats(min_value=-30, max_value=38))
def test_clip_family(b, p, C, dtype, log_scale):
    g = (torch.randn(b, p, generator=torch.Generator().manual_seed(b * 7 + p), dtype=torch.float64)
         * 10.0 ** log_scale).clamp(-3e38, 3e38)
    g = g.round().clamp(-1e6, 1e6).to(dtype) if dtype == torch.int64 else g.to(dtype)
    out = _raises_named(lambda: dl.clip(g, C), "clip_norm", "g ")
    if out is not None:
        assert out.shape == g.shape and out.is_floating_point() and bool(torch.isfinite(out).all())
        n_in = dl.safe_norm(g) if p else torch.zeros(b)
        n_out = dl.safe_norm(out) if p else torch.zeros(b)
        Cf = float(torch.tensor(C, dtype=out.dtype))
        assert bool((n_out <= Cf * (1 + 1e-5)).all())
        assert bool(((n_in > 0) <= (n_out > 0)).all()), "a non-zero vector was clipped to zero"
    frac = _raises_named(lambda: dl.clipped_fraction(g, C), "clip_norm", "g ")
    if frac is not None:
        assert 0 <= float(frac) <= 1


@FAST
@given(st.one_of(anything, st.floats(1e-6, 1e6)), st.one_of(anything, st.floats(1e-6, 1.0)),
       st.one_of(st.just(None), st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4)))
def test_rdp_functions(z, q, orders):
    kw = {} if orders is None else {"orders": orders}
    for f in (lambda: A.rdp_gaussian(z, **kw), lambda: A.rdp_laplace(z, **kw),
              lambda: A.rdp_poisson_subsampled_gaussian(q, z, **kw),
              lambda: A.rdp_sampled_without_replacement_gaussian(q, z, **kw)):
        out = _raises_named(f, "noise_multiplier", "sample_rate", "orders")
        if out is not None:
            assert out.shape == ((len(A.DEFAULT_ORDERS),) if orders is None else (len(orders),))
            assert not np.isnan(out).any() and (out >= 0).all()


@FAST
@given(st.one_of(anything, st.floats(0.3, 50)), st.one_of(anything, st.floats(1e-4, 1.0)),
       st.one_of(st.integers(-2, 3000), st.just(1.5)), st.one_of(anything, st.floats(1e-12, 0.5)))
def test_get_epsilon_rdp(z, q, steps, delta):
    eps = _raises_named(lambda: A.get_epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta),
                        "noise_multiplier", "sample_rate", "steps", "delta")
    if eps is not None:
        assert eps >= 0 and not math.isnan(eps)
        if steps > 0:
            assert eps > 0, "a private run reported ε = 0"


@FAST
@given(st.one_of(anything, st.floats(1e-3, 1e3)), st.one_of(anything, st.floats(1e-12, 0.9)))
def test_analytic_gaussian(sigma, delta):
    eps = _raises_named(lambda: A.analytic_gaussian_epsilon(sigma, delta), "sigma", "delta")
    if eps is not None:
        assert math.isfinite(eps) and eps >= 0
        assert A.analytic_gaussian_delta(sigma, eps) <= delta * (1 + 1e-9)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.floats(0.3, 5.0), st.floats(1e-4, 1.0), st.integers(1, 300), st.floats(1e-10, 1e-3))
def test_pld_never_below_tight_reference_or_above_rdp(z, q, steps, delta):
    import warnings
    rdp = A.get_epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pld = A.get_epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, accountant="pld")
    assert math.isfinite(pld) and 0 <= pld <= rdp * (1 + 1e-9) + 1e-12


@FAST
@given(st.one_of(st.just([]), st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5)))
def test_rdp_accountant_orders(orders):
    acc = _raises_named(lambda: A.RDPAccountant(orders=orders), "orders")
    if acc is not None:
        eps = acc.compose(A.GaussianEvent(1.0)).get_epsilon(1e-5)
        assert eps > 0 and not math.isnan(eps)


@pytest.mark.parametrize("limit", [-1, 0, 1.5])
def test_data_limits(limit, tmp_path):
    with pytest.raises((ValueError, TypeError), match="limit"):
        dl.data.load_mnist(tmp_path, limit=limit)
