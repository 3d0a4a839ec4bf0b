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


def _tuning_data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 5, generator=g)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()
    return (X[:200], y[:200]), (X[200:250], y[200:250]), (X[250:], y[250:])


def _linear():
    return torch.nn.Linear(5, 2)


def test_tune_step_size_shapes_choice_and_privacy():
    train, valid, test = _tuning_data()
    kw = dict(lrs=[1e-4, 0.05, 0.5], seeds=3, steps=30, batch_size=20, clip_norm=1.0, delta=1e-5)
    loss = torch.nn.functional.cross_entropy
    z = dl.get_noise_multiplier(target_epsilon=4.0, target_delta=1e-5, sample_rate=0.1, steps=30)
    free = cmp.tune_step_size("nonprivate", _linear, loss, train, valid, test, **kw)
    gc = cmp.tune_step_size("dp_sgd", _linear, loss, train, valid, test, noise_multiplier=z, **kw)
    dice = cmp.tune_step_size("dice_sgd", _linear, loss, train, valid, test, noise_multiplier=z, **kw)
    for r in (free, gc, dice):
        assert r.validation.shape == (3, 3) and r.test.shape == (3, 3)
        assert r.best == int(r.validation.mean(1).argmax())           # chosen on validation, not test
        assert r.lr == kw["lrs"][r.best] and r.accuracy.shape == (3,)
        assert r.mean == pytest.approx(float(r.test[r.best].double().mean()))
        assert r.se == pytest.approx(float(r.test[r.best].double().std()) / math.sqrt(3))
        assert r.seconds_per_run > 0
    assert free.best > 0 and free.mean > 0.8                           # a tiny η does not train: not chosen
    assert math.isinf(free.epsilon_spent) and free.clip_norm is None
    assert gc.epsilon_spent <= 4.0 * (1 + 1e-6)                       # DP-SGD's z is calibrated for this event
    assert dice.epsilon_spent > 100                                     # the same z is far from private for DiceSGD
    rows = cmp.step_size_rows({"free": free, "gc": gc})
    assert len(rows) == 2 and all(len(r) == 6 for r in rows) and rows[0][2].startswith("∞")


def test_tune_step_size_runs_are_the_single_step_size_runs():
    """Run (η, seed s) of a sweep is the run of η alone with seed s (common random numbers over η)."""
    train, valid, test = _tuning_data()
    kw = dict(seeds=2, steps=10, batch_size=20, clip_norm=0.5, noise_multiplier=1.0)
    loss = torch.nn.functional.cross_entropy
    both = cmp.tune_step_size("dice_sgd", _linear, loss, train, valid, test, lrs=[0.01, 0.1], **kw)
    one = cmp.tune_step_size("dice_sgd", _linear, loss, train, valid, test, lrs=[0.1], **kw)
    assert torch.equal(both.test[1], one.test[0]) and torch.equal(both.validation[1], one.validation[0])


@pytest.mark.parametrize("method,kw,err,msg", [
    ("adam", {}, ValueError, "method"),
    ("dp_sgd", dict(clip_norm=None), ValueError, "clip_norm"),
    ("nonprivate", dict(noise_multiplier=1.0), ValueError, "noise"),
    ("dp_sgd", dict(noise_multiplier=-1.0), ValueError, "noise_multiplier"),
    ("dp_sgd", dict(lrs=[]), ValueError, "lrs"),
    ("dp_sgd", dict(lrs=[0.1, -1.0]), ValueError, "lrs"),
    ("dp_sgd", dict(lrs=[float("inf")]), ValueError, "lrs"),
    ("dp_sgd", dict(lrs="fast"), TypeError, "lrs"),
    ("dp_sgd", dict(noise_multiplier=float("nan")), ValueError, "noise_multiplier"),
    ("dp_sgd", dict(clip_norm=float("nan")), ValueError, "clip_norm"),
    ("dp_sgd", dict(seeds=0), ValueError, "seeds"),
])
def test_tune_step_size_validates(method, kw, err, msg):
    train, valid, test = _tuning_data()
    args = dict(lrs=[0.1], seeds=1, steps=2, batch_size=10, clip_norm=1.0, noise_multiplier=0.0)
    args.update(kw)
    with pytest.raises(err, match=msg):
        cmp.tune_step_size(method, _linear, torch.nn.functional.cross_entropy, train, valid, test, **args)


def test_tune_step_size_needs_pairs():
    train, valid, test = _tuning_data()
    with pytest.raises(TypeError, match="validation"):
        cmp.tune_step_size("nonprivate", _linear, torch.nn.functional.cross_entropy, train, valid[0], test,
                           lrs=[0.1], seeds=1, steps=2, batch_size=10)
