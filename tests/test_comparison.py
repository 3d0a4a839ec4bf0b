"""The side-by-side runner of the closing chapter (dpclip_lab.comparison)."""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import comparison as cmp
from dpclip_lab.algorithms.dice_sgd import dicesgd_noise_multiplier

torch.set_num_threads(1)


def test_skewed_problem_fixed_point():
    P = cmp.skewed_problem(3, 2)
    assert P.X.shape == (9, 1)
    zero = torch.zeros(1, dtype=torch.float64)
    assert abs(float(P.grad(zero)[0])) < 1e-12                      # x* = 0
    for C in (0.2, 0.5, 1.0, 1.6):
        xbar = torch.tensor([C / 2 - 1], dtype=torch.float64)
        assert abs(float(P.clipped_grad(xbar, C)[0])) < 1e-12       # C/C' − 1 is the clipped fixed point


@pytest.mark.parametrize("bad", [dict(copies=0), dict(c_prime=0), dict(copies=1.5)])
def test_skewed_problem_validates(bad):
    with pytest.raises((ValueError, TypeError)):
        cmp.skewed_problem(**{"copies": 2, "c_prime": 2, **bad})


def test_calibrate_dp_sgd_matches_accountant():
    z, acc = cmp.calibrate("dp_sgd", epsilon=2.0, delta=1e-5, n=1000, steps=50, batch_size=50, accountant="rdp")
    assert "Poisson" in acc
    eps = dl.get_epsilon(noise_multiplier=z, sample_rate=0.05, steps=50, delta=1e-5, accountant="rdp")
    assert 1.9 < eps <= 2.0


def test_calibrate_dice_is_valid_and_larger():
    kw = dict(epsilon=2.0, delta=1e-5, n=1000, steps=50, batch_size=50, accountant="rdp")
    z_dice, _ = cmp.calibrate("dice_sgd", **kw)
    z_dp, _ = cmp.calibrate("dp_sgd", **kw)
    assert z_dice > 50 * z_dp                                         # sensitivity C1/B + 2 C2, no amplification
    assert z_dice == pytest.approx(dicesgd_noise_multiplier(2.0, 1e-5, 50, clip_norm=1.0, feedback_clip_norm=1.0,
                                                            batch_size=50, accountant="rdp"))
    assert math.isnan(cmp.calibrate("output_perturbation", **kw)[0])


@pytest.mark.parametrize("kw,msg", [(dict(method="nope"), "method"), (dict(epsilon=-1.0), "epsilon"),
                                    (dict(delta=2.0), "delta"), (dict(steps=0), "steps")])
def test_calibrate_validates(kw, msg):
    base = dict(method="dp_sgd", epsilon=1.0, delta=1e-5, n=100, steps=10, batch_size=10)
    base.update(kw)
    m = base.pop("method")
    with pytest.raises(ValueError, match=msg):
        cmp.calibrate(m, **base)


@pytest.fixture(scope="module")
def small_results():
    P = cmp.skewed_problem(100, 2)
    return cmp.compare(P, ["dp_sgd", "dice_sgd", "adaptive"], f_star=float(P.objective(torch.zeros(1, dtype=torch.float64))),
                       epsilon=2.0, delta=1e-5, steps=60, lr=0.5, batch_size=30, clip_norms=[0.1, 2.0], seeds=3,
                       accountant="rdp")


def test_sweep_shapes_privacy_and_bias(small_results):
    for key, r in small_results.items():
        assert r.excess.shape == (2, 3) and r.excess_free.shape == (2, 3)
        assert r.epsilon_spent <= 2.0 * (1 + 1e-6), key               # each run's own record
        assert r.seconds_per_run > 0
    dps, dice = small_results["dp_sgd"], small_results["dice_sgd"]
    # the too-small C is biased for DP-SGD (fixed point −0.95: excess ≈ 0.3) and not for DiceSGD's noise-free twin
    assert float(dps.excess_free[0].mean()) > 0.2
    assert float(dice.excess_free[0].mean()) < 0.05
    assert dps.best == 1
    rows = cmp.summary_rows(small_results)
    assert len(rows) == 4 and all(len(r) == 7 for r in rows)


def test_wang_methods_need_radius():
    P = cmp.skewed_problem(10, 2)
    with pytest.raises(ValueError, match="radius"):
        cmp.sweep("output_perturbation", P, epsilon=1.0, delta=1e-5, steps=10, lr=0.1, batch_size=5,
                  clip_norms=[1.0], seeds=1, f_star=0.0, label_bound=2.0)


def test_band_traces():
    tr = cmp.band_traces([1, 2, 3], torch.rand(3, 4), "#112233", "x")
    assert len(tr) == 3 and tr[2].name == "x"


def test_sweep_network_shapes_privacy_and_methods():
    ds = dl.data.digits(images=True, dtype=torch.float32)
    data = (ds.X_train[:200], ds.y_train[:200], ds.X_test[:100], ds.y_test[:100])
    from dpclip_lab import models
    kw = dict(epsilon=2.0, delta=1e-5, steps=5, lr=0.1, batch_size=32, clip_norms=[0.1, 1.0], seeds=2,
              accountant="rdp")
    res = cmp.compare_networks(lambda: models.TinyCNN(4), torch.nn.functional.cross_entropy, data,
                               ["dp_sgd", "dice_sgd"], **kw)
    for r in res.values():
        assert r.accuracy.shape == (2, 2) and r.loss.shape == (2, 2)
        assert 0 <= r.at()["min"] <= r.at()["mean"] <= r.at()["max"] <= 1
        assert r.epsilon_spent <= 2.0 * (1 + 1e-6)
    assert res["dice_sgd"].noise_multiplier > 10 * res["dp_sgd"].noise_multiplier
    assert len(cmp.network_rows(res)) == 2
    with pytest.raises(ValueError, match="method"):
        cmp.sweep_network("output_perturbation", lambda: models.TinyCNN(4), torch.nn.functional.cross_entropy,
                          data, **kw)
    with pytest.raises(TypeError, match="data"):
        cmp.sweep_network("dp_sgd", lambda: models.TinyCNN(4), torch.nn.functional.cross_entropy, data[:2], **kw)


def test_calibrate_is_memoized_per_family():
    kw = dict(epsilon=3.0, delta=1e-5, n=777, steps=40, batch_size=32, accountant="rdp")
    a = cmp.calibrate("dp_sgd", **kw)
    b = cmp.calibrate("adaptive", **kw)
    assert a == b and cmp.calibrate("automatic_dice_sgd", **kw) == cmp.calibrate("dice_sgd", **kw)
    with pytest.raises(ValueError, match="epsilon"):
        cmp.calibrate("dp_sgd", **dict(kw, epsilon=-1.0))
