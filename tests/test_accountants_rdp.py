"""RDP of the subsampled Gaussian against numerical integration and two libraries."""
import math
import warnings

import mpmath as mp
import numpy as np
import pytest

from dpclip_lab.accountants import (DEFAULT_ORDERS, GaussianEvent, RDPAccountant,
                                    PoissonSampledEvent, rdp_poisson_subsampled_gaussian,
                                    rdp_sampled_without_replacement_gaussian,
                                    rdp_to_epsilon_classic, rdp_to_epsilon_improved)
from dpclip_lab.accountants.paper_bounds import wang_lemma3_conditions, wang_lemma3_rdp


def rdp_by_integration(q, z, alpha, dps=40):
    """D_α((1−q)N(0,z²)+qN(1,z²) ‖ N(0,z²)) by mpmath quadrature of the density ratio."""
    with mp.workdps(dps):
        q, z, a = mp.mpf(q), mp.mpf(z), mp.mpf(alpha)

        def logf(x):
            return (-x * x / (2 * z * z) - mp.log(z * mp.sqrt(2 * mp.pi))
                    + a * mp.log(1 - q + q * mp.exp((2 * x - 1) / (2 * z * z))))
        xs = [-10 * z + k * (a + 20 * z) / 200 for k in range(201)]
        xm = max(xs, key=logf)
        c = logf(xm)
        pts = sorted({-mp.inf, xm - 20 * z, xm - 5 * z, xm - z, xm, xm + z, xm + 5 * z,
                      xm + 20 * z, mp.mpf(0), mp.mpf(1), mp.inf})
        integral = mp.quad(lambda x: mp.exp(logf(x) - c), pts)
        return float((c + mp.log(integral)) / (a - 1))


GRID = [(q, z) for q, z in [(0.001, 0.8), (0.01, 1.1), (0.05, 2.0), (0.5, 0.3), (0.7, 0.4),
                            (0.9, 0.3), (1.0, 0.3), (0.5, 0.7), (1.0, 0.7), (0.2, 0.5)]]
ORDERS = [1.01, 1.5, 2.0, 2.5, 3.0, 7.3, 20.0, 64.5]


@pytest.mark.parametrize("q,z", GRID)
def test_matches_integral(q, z):
    ours = rdp_poisson_subsampled_gaussian(q, z, ORDERS)
    ref = np.array([rdp_by_integration(q, z, a) for a in ORDERS])
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    assert np.all(ours >= ref * (1 - 1e-12))         # never optimistic beyond float


def test_integer_orders_large():
    o = np.array([128.0, 1024.0, 2048.0])
    r = rdp_poisson_subsampled_gaussian(0.01, 1.0, o)
    assert np.all(np.isfinite(r)) and np.all(np.diff(r) > 0)
    assert np.all(r <= o / 2)                         # below the full Gaussian


def test_q1_is_gaussian():
    np.testing.assert_allclose(rdp_poisson_subsampled_gaussian(1.0, 0.9, DEFAULT_ORDERS),
                               DEFAULT_ORDERS / (2 * 0.81))


def test_against_opacus_and_dp_accounting():
    """Both libraries agree with us at integer orders; at fractional orders ...

    FINDING (dp_accounting 0.6.0, ``_compute_log_a_frac``): it sums |C(α, i)| s_i, i.e.
    ignores the negative signs of the binomial coefficients for i > α, so it
    OVERESTIMATES the RDP at fractional orders (safe, but loose): e.g. q=0.01, z=1.1:
    +6.4 % at α=1.01, +3.2 % at α=1.5, +0.05 % at α=2.5; q=0.01, z=5.26: +20 % at
    α=1.01; q=0.9, z=0.3: +0.05 % at α=1.01; and it returns inf (fails to converge, with
    a warning) for q=0.5, z ∈ {0.3, 0.5} at α=1.01. Opacus 1.6 (signed series) agrees
    with the integral to ~1e-7 on this grid, but its float-only integer-order sum loses
    relative precision for tiny q (≈1e-7 at q=1e-4, z=5).
    """
    from dp_accounting.rdp import rdp_privacy_accountant as dpr
    from opacus.accountants.analysis import rdp as orr
    for q, z in [(0.01, 1.1), (0.004, 0.9), (0.2, 0.8), (0.01, 5.26)]:
        o = np.array([1.01, 1.5, 2, 2.5, 3, 8, 32, 256])
        ours = rdp_poisson_subsampled_gaussian(q, z, o)
        op = np.asarray(orr.compute_rdp(q=q, noise_multiplier=z, steps=1, orders=list(o)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dp = dpr._compute_rdp_poisson_subsampled_gaussian(q, z, o)
        np.testing.assert_allclose(ours, op, rtol=1e-5)
        is_int = o == np.floor(o)
        np.testing.assert_allclose(ours[is_int], dp[is_int], rtol=1e-6)
        assert np.all(dp[~is_int] >= ours[~is_int] * (1 - 1e-9))   # dp_accounting ≥ truth
    dp = dpr._compute_rdp_poisson_subsampled_gaussian(0.01, 1.1, [1.01])[0]
    ours = rdp_poisson_subsampled_gaussian(0.01, 1.1, [1.01])[0]
    assert dp / ours - 1 > 0.05                        # the documented 6.4 % overestimate
    assert abs(ours / rdp_by_integration(0.01, 1.1, 1.01) - 1) < 1e-6


@pytest.mark.parametrize("q,z,T,delta", [(256 / 60000, 1.1, 10000, 1e-5), (0.01, 0.8, 1000, 1e-6),
                                         (0.1, 2.0, 500, 1e-5), (1.0, 5.0, 10, 1e-5)])
def test_epsilon_vs_libraries(q, z, T, delta):
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant
    from opacus.accountants.analysis import rdp as orr
    ours = RDPAccountant().compose(PoissonSampledEvent(q, GaussianEvent(z)), T).get_epsilon(delta)
    o = DEFAULT_ORDERS
    eps_op, _ = orr.get_privacy_spent(orders=list(o), rdp=orr.compute_rdp(
        q=q, noise_multiplier=z, steps=T, orders=list(o)), delta=delta)
    acc = RdpAccountant(orders=list(o))
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), T)
    eps_dp = acc.get_epsilon(delta)
    assert ours == pytest.approx(eps_op, rel=1e-5)
    assert ours <= eps_dp * (1 + 1e-9)                  # dp_accounting is looser or equal


def test_conversions_gap():
    r = rdp_poisson_subsampled_gaussian(0.01, 1.0) * 1000
    e_c, _ = rdp_to_epsilon_classic(DEFAULT_ORDERS, r, 1e-5)
    e_i, _ = rdp_to_epsilon_improved(DEFAULT_ORDERS, r, 1e-5)
    assert e_i < e_c


def test_wor_matches_dp_accounting_bound_shape():
    """Our WBK Thm 9 bound ≥ dp_accounting's strengthened Gaussian-specific bound."""
    from dp_accounting.rdp import rdp_privacy_accountant as dpr
    o = np.array([2.0, 3.0, 4.5, 10.0, 32.0])
    ours = rdp_sampled_without_replacement_gaussian(0.01, 1.0, o)
    ref = dpr._compute_rdp_sample_wor_gaussian(0.01, 1.0, o)
    assert np.all(ours >= ref * (1 - 1e-9))
    assert np.all(ours <= ref * 1.5)


def test_caching_returns_readonly():
    r = rdp_poisson_subsampled_gaussian(0.02, 1.0)
    assert not r.flags.writeable


# --- fractional orders: the Euler-bracketed remainder and float bound (added with the speedup)
@pytest.mark.parametrize("q,z", [(0.1, 0.8), (0.5, 0.3), (0.9, 0.3), (0.3, 0.5), (1e-4, 5.0),
                                 (256 / 60000, 1.1), (0.02, 20.0)])
def test_fractional_orders_near_one_match_integral(q, z):
    """Near α = 1 the plain series needed up to 16k terms; the bracketed remainder ~α + 32."""
    orders = [1.01, 1.02, 1.05, 1.1, 1.3, 2.75, 9.75]
    ours = rdp_poisson_subsampled_gaussian(q, z, orders)
    ref = np.array([rdp_by_integration(q, z, a) for a in orders])
    # atol: at q = 1e-4, z = 5, α → 1, A − 1 ≈ 1e-12 and the float slack we add (rounded
    # up) is ~2e-6 of ρ ≈ 2e-10, i.e. ~4e-16 absolute: harmless for any ε.
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-15)
    assert np.all(ours >= ref * (1 - 1e-12))


def test_integer_orders_match_exact_binomial_sum():
    """The flat (ragged) binomial sums against mpmath at large integer orders."""
    def exact(q, z, a):
        with mp.workdps(50):
            q, z = mp.mpf(q), mp.mpf(z)
            s = mp.fsum(mp.binomial(a, k) * (1 - q) ** (a - k) * q ** k * mp.e ** ((k * k - k) / (2 * z * z))
                        for k in range(a + 1))
            return float(mp.log(s) / (a - 1))
    for q, z in [(0.01, 1.0), (1e-4, 3.0), (0.3, 2.0)]:
        o = np.array([2.0, 7.0, 64.0, 512.0, 2048.0])
        ours = rdp_poisson_subsampled_gaussian(q, z, o)
        ref = np.array([exact(q, z, int(a)) for a in o])
        np.testing.assert_allclose(ours, np.minimum(ref, o / (2 * z * z)), rtol=1e-9)


# --- sampling without replacement: the Gaussian-specific bound (WBK 2019, Thm 27)
def wor_thm27_by_mpmath(g, z, alpha, prec=1200):
    """WBK Thm 27 for the Gaussian at integer α, in exact-enough arithmetic (no cancellation)."""
    with mp.workprec(prec):
        s, g = mp.mpf(1) / (mp.mpf(z) ** 2), mp.mpf(g)
        f = [mp.e ** (s * k * (k - 1) / 2) for k in range(alpha + 2)]
        moment = [mp.fsum(mp.binomial(j, k) * (-1) ** (j - k) * f[k] for k in range(j + 1))
                  for j in range(alpha + 2)]
        total = mp.mpf(1)
        for j in range(2, alpha + 1):
            general = 2 * mp.e ** ((j - 1) * j * s / 2)
            if j == 2:
                c = min(4 * (mp.e ** s - 1), 2 * mp.e ** s)
            else:
                c = min(4 * mp.sqrt(moment[2 * (j // 2)] * moment[2 * ((j + 1) // 2)]), general)
            total += g ** j * mp.binomial(alpha, j) * c
        return float(mp.log(total) / (alpha - 1))


def test_wor_gaussian_bound_is_tighter_and_matches_dp_accounting():
    """The brief's example: up to ~1/3 below the general Thm 9 bound at orders 4–16."""
    from dp_accounting.rdp import rdp_privacy_accountant as dpr
    o = np.array([3.0, 4.0, 8.0, 16.0])
    tight = rdp_sampled_without_replacement_gaussian(0.1, 2.0, o)
    general = rdp_sampled_without_replacement_gaussian(0.1, 2.0, o, bound="general")
    np.testing.assert_allclose(tight, dpr._compute_rdp_sample_wor_gaussian(0.1, 2.0, o), rtol=1e-9)
    assert np.all(tight < general)
    assert general[2] / tight[2] - 1 > 0.25


@pytest.mark.parametrize("g,z", [(0.1, 2.0), (0.01, 1.0), (0.3, 0.5), (0.7, 1.5), (1e-3, 0.8),
                                 (0.05, 4.0), (0.3, 10.0), (0.7, 30.0)])
def test_wor_gaussian_bound_never_below_exact(g, z):
    """Never below Thm 27 computed in high precision; never above Thm 9; equal where floats suffice."""
    orders = [2, 3, 4, 5, 8, 13, 16, 32]
    ours = rdp_sampled_without_replacement_gaussian(g, z, [float(a) for a in orders])
    general = rdp_sampled_without_replacement_gaussian(g, z, [float(a) for a in orders],
                                                       bound="general")
    exact = np.array([wor_thm27_by_mpmath(g, z, a) for a in orders])
    assert np.all(ours >= exact * (1 - 1e-12))
    assert np.all(ours <= general * (1 + 1e-12))
    if z <= 4:                                   # no cancellation trouble: the exact value
        np.testing.assert_allclose(ours, exact, rtol=1e-9)


def test_wor_integer_orders_vs_dp_accounting_grid():
    """Integer orders: equal to dp_accounting (same theorem) wherever its floats are accurate."""
    from dp_accounting.rdp import rdp_privacy_accountant as dpr
    o = np.array([2.0, 3.0, 4.0, 6.0, 10.0, 20.0, 40.0, 64.0])
    for g in [1e-3, 0.01, 0.1, 0.5]:
        for z in [0.5, 0.8, 1.0, 2.0, 3.0]:
            ours = rdp_sampled_without_replacement_gaussian(g, z, o)
            ref = dpr._compute_rdp_sample_wor_gaussian(g, z, o)
            np.testing.assert_allclose(ours, ref, rtol=1e-8, err_msg=f"g={g}, z={z}")


def test_wor_fractional_orders_interpolate_the_cgf():
    o = np.array([2.0, 2.5, 3.0])
    r = rdp_sampled_without_replacement_gaussian(0.05, 1.0, o)
    k = r * (o - 1)
    assert k[1] == pytest.approx(0.5 * (k[0] + k[2]), rel=1e-12)
    with pytest.raises(ValueError, match="bound"):
        rdp_sampled_without_replacement_gaussian(0.05, 1.0, o, bound="thm27")


def test_wang_lemma3_is_upper_bound_of_both_wbk_bounds():
    """Lemma 3 of paper 003 ≥ the general WBK bound ≥ the Gaussian-specific one, where valid."""
    checked = 0
    for p in [1e-4, 1e-3, 1e-2]:
        for z in [0.9, 1.5, 3.0, 8.0]:
            for lam in [2, 3, 5, 10, 20, 50]:
                if wang_lemma3_conditions(p, z, lam):
                    tight = rdp_sampled_without_replacement_gaussian(p, z, [float(lam)])[0]
                    general = rdp_sampled_without_replacement_gaussian(
                        p, z, [float(lam)], bound="general")[0]
                    assert tight <= general * (1 + 1e-12)
                    assert wang_lemma3_rdp(p, z, lam) >= general
                    assert wang_lemma3_rdp(p, z, lam) >= tight
                    checked += 1
    assert checked > 20
    with pytest.raises(ValueError, match="Lemma 3"):
        wang_lemma3_rdp(0.5, 0.5, 3)


def test_rdp_accountant_uses_the_gaussian_wor_bound():
    from dpclip_lab.accountants import SampledWithoutReplacementEvent
    from dpclip_lab.accountants.conversions import rdp_to_epsilon_improved
    acc = RDPAccountant().compose(SampledWithoutReplacementEvent(1000, 100, GaussianEvent(2.0)), 50)
    general = 50 * rdp_sampled_without_replacement_gaussian(0.1, 2.0, DEFAULT_ORDERS, bound="general")
    assert acc.get_epsilon(1e-5) < rdp_to_epsilon_improved(DEFAULT_ORDERS, general, 1e-5)[0]


# -- issue #14, item 1b: every exported RDP function validates its input ------------------
@pytest.mark.parametrize("orders", [[], [1.0], [0.5, 2.0], [2.0, float("inf")], [float("nan")], [[2.0, 3.0]]])
def test_invalid_orders_are_refused_everywhere(orders):
    from dpclip_lab.accountants import (RDPAccountant, rdp_gaussian, rdp_laplace,
                                        rdp_poisson_subsampled_gaussian,
                                        rdp_sampled_without_replacement_gaussian, rdp_to_epsilon)
    with pytest.raises(ValueError, match="orders"):
        RDPAccountant(orders=orders)                      # [] used to report ε = 0
    for f in (lambda: rdp_gaussian(1.0, orders), lambda: rdp_laplace(1.0, orders),
              lambda: rdp_poisson_subsampled_gaussian(0.1, 1.0, orders),
              lambda: rdp_sampled_without_replacement_gaussian(0.1, 1.0, orders),
              lambda: rdp_to_epsilon(orders, [1.0] * len(orders), 1e-5)):
        with pytest.raises(ValueError, match="orders"):
            f()


@pytest.mark.parametrize("call, name", [
    (lambda A: A.rdp_gaussian(-1), "noise_multiplier"),
    (lambda A: A.rdp_gaussian(float("nan")), "noise_multiplier"),
    (lambda A: A.rdp_laplace(-1), "noise_multiplier"),
    (lambda A: A.rdp_laplace(0), "noise_multiplier"),
    (lambda A: A.rdp_poisson_subsampled_gaussian(0.1, -1), "noise_multiplier"),     # was NaN
    (lambda A: A.rdp_poisson_subsampled_gaussian(0.0, 1.0), "sample_rate"),
    (lambda A: A.rdp_poisson_subsampled_gaussian(1.5, 1.0), "sample_rate"),
    (lambda A: A.rdp_sampled_without_replacement_gaussian(1.5, 1), "sample_rate"),  # was finite
    (lambda A: A.rdp_sampled_without_replacement_gaussian(0.1, -2), "noise_multiplier"),
    (lambda A: A.rdp_poisson_subsampled_gaussian("0.1", 1.0), "sample_rate"),
])
def test_low_level_rdp_functions_name_the_bad_parameter(call, name):
    import dpclip_lab.accountants as A
    with pytest.raises((ValueError, TypeError), match=name):
        call(A)


def test_rdp_to_epsilon_batch_validates():
    from dpclip_lab.accountants import rdp_to_epsilon_batch
    with pytest.raises(ValueError, match="orders"):
        rdp_to_epsilon_batch([], np.zeros((1, 0)), 1e-5)
    with pytest.raises(ValueError, match="conversion"):
        rdp_to_epsilon_batch([2.0], np.ones((1, 1)), 1e-5, conversion="nope")
