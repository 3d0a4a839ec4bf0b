"""The tight accountant: upper bound, within its stated error of the truth."""
import math

import pytest

from dpclip_lab.accountants import (ComposedEvent, EpsilonDeltaEvent, GaussianEvent,
                                    LaplaceEvent, NonPrivateEvent, NoOpEvent, PLDAccountant,
                                    PoissonSampledEvent, SampledWithoutReplacementEvent,
                                    analytic_gaussian_epsilon, get_epsilon)

REL_ERR = 1e-3          # the stated accuracy (the default grid aims at ~1e-4)


@pytest.mark.parametrize("z,T,delta", [(1.0, 1, 1e-5), (2.0, 100, 1e-6), (0.8, 1000, 1e-5),
                                       (5.0, 10, 1e-3), (1.3, 50, 1e-8)])
def test_q1_equals_analytic_gaussian(z, T, delta):
    truth = analytic_gaussian_epsilon(z / math.sqrt(T), delta)
    ours = get_epsilon(noise_multiplier=z, sample_rate=1.0, steps=T, delta=delta, accountant="pld")
    assert ours >= truth
    assert ours <= truth * (1 + REL_ERR)


def _dp_accounting_pld(q, z, T, delta, h):
    from dp_accounting import dp_event
    from dp_accounting.pld import PLDAccountant as Ref
    acc = Ref(value_discretization_interval=h)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), T)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("q,z,T,delta", [(0.01, 1.0, 1000, 1e-5), (0.1, 0.9, 50, 1e-5),
                                         (0.05, 2.0, 300, 1e-6), (0.5, 1.5, 10, 1e-5)])
def test_against_dp_accounting_pld(q, z, T, delta):
    """Both are upper bounds; the finer one is the better reference ("truth")."""
    ref = _dp_accounting_pld(q, z, T, delta, 5e-5)
    ours = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=delta, accountant="pld")
    fine = PLDAccountant(2e-5).compose(PoissonSampledEvent(q, GaussianEvent(z)), T).get_epsilon(delta)
    truth = min(ref, fine)
    assert ours >= truth * (1 - 1e-9)
    assert ours <= truth * (1 + REL_ERR)
    assert abs(fine - ref) <= REL_ERR * truth


def test_pld_below_rdp():
    q, z, T = 256 / 60000, 1.1, 10000
    e_rdp = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=1e-5)
    e_pld = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=1e-5, accountant="pld")
    assert e_pld < e_rdp


def test_heterogeneous_and_special_events():
    acc = PLDAccountant()
    acc.compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 200)
    e1 = acc.get_epsilon(1e-5)
    acc.compose(PoissonSampledEvent(0.02, GaussianEvent(1.5)), 100).compose(NoOpEvent())
    e2 = acc.get_epsilon(1e-5)
    assert e2 > e1
    acc.compose(EpsilonDeltaEvent(0.1, 0.0))
    e3 = acc.get_epsilon(1e-5)
    assert e2 < e3 <= e2 + 0.1 + 1e-9
    acc.compose(NonPrivateEvent())
    assert acc.get_epsilon(1e-5) == math.inf


def test_laplace_single_step_is_pure_dp():
    # exact profile of Laplace(b=2): δ(ε) = 1 − e^{(ε − 1/2)/2}
    truth = 0.5 + 2 * math.log1p(-1e-6)
    e = PLDAccountant().compose(LaplaceEvent(2.0)).get_epsilon(1e-6)
    assert truth * (1 - 1e-12) <= e <= truth * (1 + REL_ERR)


def test_epsilon_delta_event_alone():
    e = PLDAccountant().compose(EpsilonDeltaEvent(1.0, 1e-6)).get_epsilon(2e-6)
    assert 1.0 - 1e-3 < e <= 1.0 + 1e-3


def test_unsupported_event_is_named():
    with pytest.raises(ValueError, match="SampledWithoutReplacementEvent"):
        PLDAccountant().compose(SampledWithoutReplacementEvent(100, 10, GaussianEvent(1.0)))
    with pytest.raises(ValueError, match="PoissonSampledEvent"):
        PLDAccountant().compose(PoissonSampledEvent(0.1, PoissonSampledEvent(0.1, GaussianEvent(1.0))))


def test_composed_event_equals_counts():
    ev = PoissonSampledEvent(0.05, GaussianEvent(1.2))
    a = PLDAccountant(1e-4).compose(ComposedEvent((ev, ev)), 50).get_epsilon(1e-5)
    b = PLDAccountant(1e-4).compose(ev, 100).get_epsilon(1e-5)
    assert a == pytest.approx(b, rel=1e-12)
