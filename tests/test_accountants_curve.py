"""epsilon_curve (ε along a run) and the batched RDP → (ε, δ) conversion."""
import numpy as np
import pytest

from dpclip_lab.accountants import (DEFAULT_ORDERS, epsilon_curve, get_epsilon,
                                    rdp_poisson_subsampled_gaussian, rdp_to_epsilon,
                                    rdp_to_epsilon_batch)


@pytest.mark.parametrize("q,z,T,delta", [(256 / 60000, 1.1, 10000, 1e-5), (0.01, 1.0, 1000, 1e-5),
                                         (0.1, 0.8, 500, 1e-6), (1.0, 10.0, 100, 1e-5)])
def test_rdp_curve_every_step_equals_get_epsilon(q, z, T, delta):
    t, eps = epsilon_curve(noise_multiplier=z, sample_rate=q, steps=T, delta=delta)
    assert np.array_equal(t, np.arange(1, T + 1))
    assert np.all(np.diff(eps) >= 0) and eps[0] > 0
    for n in {1, 2, T // 3, T}:
        assert eps[n - 1] == get_epsilon(noise_multiplier=z, sample_rate=q, steps=n, delta=delta)


def test_rdp_curve_conversions_and_given_steps():
    kw = dict(noise_multiplier=1.0, sample_rate=0.01, delta=1e-5)
    steps = np.array([1, 10, 100, 3000])
    t, improved = epsilon_curve(**kw, steps=steps)
    _, classic = epsilon_curve(**kw, steps=steps, conversion="classic")
    assert np.array_equal(t, steps)
    assert np.all(classic > improved)
    rho = rdp_poisson_subsampled_gaussian(0.01, 1.0)
    for n, e in zip(steps, classic):
        assert e == rdp_to_epsilon(DEFAULT_ORDERS, n * rho, 1e-5, "classic")[0]


def test_pld_curve_subsamples_and_ends_at_get_epsilon():
    kw = dict(noise_multiplier=1.0, sample_rate=0.01, delta=1e-5, accountant="pld")
    t, eps = epsilon_curve(**kw, steps=2000, num_points=8)
    assert t[0] == 1 and t[-1] == 2000 and len(t) <= 9 and np.all(np.diff(t) > 0)
    assert eps[-1] == get_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=2000,
                                  delta=1e-5, accountant="pld")
    assert np.all(np.diff(eps) >= -2e-3 * eps[1:])      # monotone up to the stated grid error
    _, rdp = epsilon_curve(noise_multiplier=1.0, sample_rate=0.01, delta=1e-5, steps=t)
    assert np.all(eps <= rdp * (1 + 1e-3))              # tight ≤ RDP
    t_small, _ = epsilon_curve(**kw, steps=5)
    assert np.array_equal(t_small, np.arange(1, 6))
    t_h, eps_h = epsilon_curve(**kw, steps=[10, 100], value_discretization_interval=1e-3)
    assert np.array_equal(t_h, [10, 100]) and np.all(eps_h > 0)


@pytest.mark.parametrize("kwargs,name", [
    (dict(steps=0), "steps"), (dict(steps=[0, 3]), "steps"), (dict(steps=[1.5]), "steps"),
    (dict(steps=[[1, 2]]), "steps"), (dict(conversion="exact"), "conversion"),
    (dict(accountant="prv"), "accountant"), (dict(delta=0.0), "delta"),
    (dict(noise_multiplier=0.0), "noise_multiplier"), (dict(num_points=1), "num_points"),
])
def test_curve_bad_input(kwargs, name):
    base = dict(noise_multiplier=1.0, sample_rate=0.1, steps=10, delta=1e-5)
    base.update(kwargs)
    with pytest.raises(ValueError, match=name):
        epsilon_curve(**base)


def test_batch_conversion_equals_rowwise():
    rho = rdp_poisson_subsampled_gaussian(0.02, 0.9)
    rdp = np.array([1.0, 7.0, 300.0])[:, None] * rho
    for conv in ("improved", "classic"):
        eps, order = rdp_to_epsilon_batch(DEFAULT_ORDERS, rdp, 1e-6, conv)
        for row, e, o in zip(rdp, eps, order):
            assert (e, o) == rdp_to_epsilon(DEFAULT_ORDERS, row, 1e-6, conv)
    with pytest.raises(ValueError, match="shape"):
        rdp_to_epsilon_batch(DEFAULT_ORDERS, rho, 1e-6)
