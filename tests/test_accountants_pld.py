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


# -- issue #14, items 8 and 8b: no inf where a finite bound exists, bounded memory ------------
def test_tiny_delta_is_finite_and_never_below_dp_accounting():
    """z = 0.5, q = 1e-5, T = 1e4, δ = 1e-9 used to give inf (RDP: 3.82, dp_accounting: 1.49)."""
    import warnings

    from dpclip_lab.accountants.pld import PLDFallbackWarning
    q, z, T, delta = 1e-5, 0.5, 10_000, 1e-9
    ref = _dp_accounting_pld(q, z, T, delta, 1e-4)
    rdp = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=delta, accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PLDFallbackWarning)
        ours = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=delta, accountant="pld")
    assert math.isfinite(ours)
    assert ours >= ref * (1 - 1e-9)          # never optimistic
    assert ours <= rdp * (1 + 1e-12)


def test_fallback_to_rdp_is_announced_and_recorded():
    """T = 1e6 at δ = 1e-9: the FFT's float-error bound exceeds δ; the RDP bound is reported."""
    from dpclip_lab.accountants.pld import PLDFallbackWarning
    ev = PoissonSampledEvent(0.01, GaussianEvent(1.0))
    acc = PLDAccountant().compose(ev, 10**6)
    with pytest.warns(PLDFallbackWarning, match="rdp"):
        eps = acc.get_epsilon(1e-9)
    rdp = get_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=10**6, delta=1e-9, accountant="rdp")
    assert math.isfinite(eps) and eps <= rdp
    assert acc.last_query["method"] in ("rdp", "pld (coarser grid)")
    assert acc.last_query["pld_epsilon"] == math.inf


def test_small_epsilon_is_resolved():
    """ε ≈ 2.5e-4: the old grid floor (h ≥ ~4e-5) overstated it by 36%."""
    q, z, T, delta = 1e-3, 50.0, 100, 1e-5
    ref = _dp_accounting_pld(q, z, T, delta, 1e-7)
    ours = get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=delta, accountant="pld")
    assert ref * (1 - 1e-9) <= ours <= ref * (1 + REL_ERR)


def test_huge_loss_range_is_coarsened_not_oom():
    """GaussianEvent(0.01) used to allocate ~10 GB (a [61, 12e6] temporary) and die."""
    acc = PLDAccountant().compose(GaussianEvent(0.01))
    eps = acc.get_epsilon(1e-5)
    truth = analytic_gaussian_epsilon(0.01, 1e-5)
    assert truth <= eps <= truth * (1 + REL_ERR)
    assert acc.h_used >= 1e-3


def test_noise_calibration_at_huge_epsilon_finishes():
    """get_noise_multiplier(target_epsilon=300, q=1, T=1, "pld") died with MemoryError."""
    from dpclip_lab.accountants import get_noise_multiplier
    z = get_noise_multiplier(target_epsilon=300, target_delta=1e-5, sample_rate=1, steps=1, accountant="pld")
    assert analytic_gaussian_epsilon(z, 1e-5) <= 300
