"""get_epsilon / get_noise_multiplier: contracts, monotonicity, bad input."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from dpclip_lab.accountants import (EpsilonDeltaEvent, GaussianEvent, LaplaceEvent,
                                    NonPrivateEvent, PoissonSampledEvent, RDPAccountant,
                                    SampledWithoutReplacementEvent, analytic_gaussian_delta,
                                    analytic_gaussian_epsilon, analytic_gaussian_sigma,
                                    classic_gaussian_sigma, get_epsilon, get_noise_multiplier)

Q = st.floats(1e-3, 1.0)
Z = st.floats(0.5, 5.0)
T = st.integers(1, 2000)
D = st.sampled_from([1e-8, 1e-6, 1e-5, 1e-3])


def eps(z, q, t, d, acc="rdp"):
    return get_epsilon(noise_multiplier=z, sample_rate=q, steps=t, delta=d, accountant=acc)


@settings(max_examples=25, deadline=None)
@given(Q, Z, T, D)
def test_monotone_rdp(q, z, t, d):
    e = eps(z, q, t, d)
    assert math.isfinite(e) and e >= 0
    assert eps(z, q, t + 10, d) >= e
    assert eps(z, min(1.0, q * 1.5), t, d) >= e
    assert eps(z * 1.2, q, t, d) <= e
    assert eps(z, q, t, d * 10) <= e


@settings(max_examples=6, deadline=None)
@given(st.floats(0.01, 1.0), st.floats(0.8, 3.0), st.integers(1, 200))
def test_monotone_pld(q, z, t):
    e = eps(z, q, t, 1e-5, "pld")
    tol = 2e-3 * e + 1e-9                      # the two grids differ by the stated error
    assert eps(z, q, t + 20, 1e-5, "pld") >= e - tol
    assert eps(z * 1.3, q, t, 1e-5, "pld") <= e + tol
    assert eps(z, q, t, 1e-4, "pld") <= e + tol


def test_steps_zero_is_zero():
    assert eps(1.0, 0.1, 0, 1e-5) == 0.0
    assert eps(1.0, 0.1, 0, 1e-5, "pld") == 0.0


@pytest.mark.parametrize("acc", ["rdp", "pld"])
@pytest.mark.parametrize("target", [0.5, 2.0, 8.0])
def test_noise_multiplier_never_exceeds_target(acc, target):
    q, t, d = 0.01, 500, 1e-5
    z = get_noise_multiplier(target_epsilon=target, target_delta=d, sample_rate=q, steps=t,
                             accountant=acc)
    e = eps(z, q, t, d, acc)
    assert e <= target
    assert e >= target - 0.01 - 1e-12


def test_noise_multiplier_matches_opacus():
    from opacus.accountants.utils import get_noise_multiplier as opacus_gnm
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = opacus_gnm(target_epsilon=3.0, target_delta=1e-5, sample_rate=256 / 60000,
                         steps=10000, epsilon_tolerance=0.01)
    ours = get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=256 / 60000,
                                steps=10000)
    assert ours == pytest.approx(ref, rel=0.02)


@pytest.mark.parametrize("kwargs,name", [
    (dict(noise_multiplier=0.0), "noise_multiplier"), (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(sample_rate=0.0), "sample_rate"), (dict(sample_rate=1.5), "sample_rate"),
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"), (dict(delta=float("nan")), "delta"),
    (dict(steps=-1), "steps"),
])
@pytest.mark.parametrize("acc", ["rdp", "pld"])
def test_bad_input_get_epsilon(kwargs, name, acc):
    base = dict(noise_multiplier=1.0, sample_rate=0.1, steps=10, delta=1e-5, accountant=acc)
    base.update(kwargs)
    with pytest.raises(ValueError, match=name):
        get_epsilon(**base)


@pytest.mark.parametrize("kwargs,name", [
    (dict(target_epsilon=0.0), "target_epsilon"), (dict(target_epsilon=-1.0), "target_epsilon"),
    (dict(target_delta=1.0), "target_delta"), (dict(sample_rate=0.0), "sample_rate"),
    (dict(steps=0), "steps"), (dict(target_epsilon=1e-4), "target_epsilon"),
    (dict(accountant="moments"), "accountant"),
])
def test_bad_input_get_noise_multiplier(kwargs, name):
    base = dict(target_epsilon=1.0, target_delta=1e-5, sample_rate=0.1, steps=100)
    base.update(kwargs)
    with pytest.raises(ValueError, match=name):
        get_noise_multiplier(**base)


def test_bad_accountant_name():
    with pytest.raises(ValueError, match="accountant"):
        get_epsilon(noise_multiplier=1.0, sample_rate=0.1, steps=1, delta=1e-5, accountant="prv")


def test_rdp_accountant_events():
    acc = RDPAccountant()
    acc.compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 100)
    e1 = acc.get_epsilon(1e-5)
    acc.compose(LaplaceEvent(10.0), 3)
    acc.compose(SampledWithoutReplacementEvent(1000, 10, GaussianEvent(2.0)), 50)
    e2, order = acc.get_epsilon_and_order(1e-5)
    assert e2 > e1 and order > 1
    acc.compose(EpsilonDeltaEvent(0.2, 1e-6))
    e3 = acc.get_epsilon(1e-5)
    assert e3 > e2 + 0.2 - 1e-9
    assert acc.get_epsilon(1e-6) == math.inf           # all δ spent by the (ε, δ) step
    acc.compose(NonPrivateEvent())
    assert acc.get_epsilon(1e-5) == math.inf


def test_events_validate():
    with pytest.raises(ValueError, match="sample_rate"):
        PoissonSampledEvent(0.0, GaussianEvent(1.0))
    with pytest.raises(ValueError, match="noise_multiplier"):
        GaussianEvent(-1.0)
    with pytest.raises(TypeError):
        PoissonSampledEvent(0.1, "gaussian")
    with pytest.raises(ValueError, match="sample_size"):
        SampledWithoutReplacementEvent(10, 11, GaussianEvent(1.0))
    with pytest.raises(ValueError, match="RDPAccountant"):
        RDPAccountant().compose(PoissonSampledEvent(0.1, LaplaceEvent(1.0)))


def test_gaussian_mechanism():
    s = analytic_gaussian_sigma(1.0, 1e-5)
    assert analytic_gaussian_delta(s, 1.0) <= 1e-5
    assert analytic_gaussian_epsilon(s, 1e-5) == pytest.approx(1.0, rel=1e-9)
    assert s < classic_gaussian_sigma(0.99, 1e-5)       # analytic is tighter
    with pytest.raises(ValueError, match="epsilon"):
        classic_gaussian_sigma(2.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        analytic_gaussian_epsilon(1.0, 0.0)
