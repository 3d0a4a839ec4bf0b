"""Issue #26: the privacy record attached to a run is never smaller than the truth.

* ``dl.train`` runs each method through the algorithm's own function, so its result type and
  event are that algorithm's (adaptive clipping under shuffling records the scheme's multiplier).
* DiceSGD with sampling with replacement counts the batch's worst-case multiplicity.
* A sweep whose runs share noise (seed groups) does not claim one run's ε for the whole set:
  ``joint_dp_event()`` is infinite there and the composition where runs are independent.
* Messages name what the user passed (DiceSGD's error state, adaptive clipping's clip norm), and a
  private run in 16-bit floats warns that its record is not guaranteed.
"""
import math

import pytest
import torch
from torch import nn

import dpclip_lab as dl
from dpclip_lab.accountants import events as E
from dpclip_lab.accountants.calibration import make_accountant
from dpclip_lab.algorithms import dice_sgd, dp_sgd, dp_sgd_adaptive_clipping, sweep_grid
from dpclip_lab.algorithms.dice_sgd import DiceSGDResult
from dpclip_lab.algorithms.loop import LowPrecisionPrivacyWarning
from dpclip_lab.sampling import SAMPLING_SCHEMES
from dpclip_lab.training import METHODS, module_grad_fn

f64 = torch.float64


def _eps(event, delta=1e-5):
    return make_accountant("rdp").compose(event).get_epsilon(delta)


def _data(n=24):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g)


def _model():
    torch.manual_seed(1)
    return nn.Linear(3, 2)


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("method", METHODS)
def test_train_records_the_algorithms_own_event(method, sampling):
    """Item 1: dl.train(method=...) returns what the algorithm's function returns: type, event, θ."""
    X, y = _data()
    loss = nn.functional.cross_entropy
    b = None if sampling == "full" else 8
    kw = dict(steps=6, lr=0.1, noise_multiplier=1.0, batch_size=b, sampling=sampling, seed=3)
    extra = {"dice_sgd": dict(feedback_clip_norm=2.0), "dp_sgd": {}, "adaptive": {}}[method]
    trained = dl.train(_model(), loss, X, y, clip_norm=1.0, method=method, progress=False, **kw, **extra)
    model = _model()
    theta0 = nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    fn = {"dp_sgd": dp_sgd, "dice_sgd": dice_sgd, "adaptive": dp_sgd_adaptive_clipping}[method]
    clip = {"initial_clip_norm": 1.0} if method == "adaptive" else {"clip_norm": 1.0}
    direct = fn(module_grad_fn(model, loss, X, y), theta0, n=X.shape[0], progress=False, **clip, **kw, **extra)
    assert type(trained) is type(direct)
    assert trained.dp_event() == direct.dp_event(), (trained.dp_event(), direct.dp_event())
    assert _eps(trained.dp_event()) == _eps(direct.dp_event())
    torch.testing.assert_close(trained.theta, direct.theta, rtol=1e-4, atol=1e-5)


def test_train_adaptive_shuffle_records_the_shuffle_multiplier():
    """Item 1, the issue's example: z_eff ≈ 0.756 (ε 15.18), not z = 1 (ε 10.73)."""
    X, y = _data(40)
    r = dl.train(_model(), nn.functional.cross_entropy, X, y, steps=20, lr=0.1, clip_norm=1.0,
                 noise_multiplier=1.0, batch_size=8, sampling="shuffle", method="adaptive", seed=0, progress=False)
    z = r.dp_event().event.noise_multiplier
    assert z == pytest.approx(r.extra["event_noise_multiplier"]) and z < 0.76
    assert _eps(r.dp_event()) > 15


# -- item 2: DiceSGD, sampling with replacement -----------------------------------------------------
def _pair_directions(G=1e6, T=60, z=2.0, seed=0):
    """The issue's worst-case pair: n = B = 2, gradients independent of θ; D = (+G, −G), D' = (−G, −G).

    Same seed, so the same batches and noise: the difference of the released steps is v_t − v'_t."""
    out = []
    for signs in ([1.0, -1.0], [-1.0, -1.0]):
        s = torch.tensor(signs, dtype=f64)

        def grad_fn(theta, idx, s=s):
            return (G * s[idx]).unsqueeze(-1)

        res = dice_sgd(grad_fn, torch.zeros(1, dtype=f64), n=2, steps=T, lr=1.0, clip_norm=1.0,
                       feedback_clip_norm=1.0, noise_multiplier=z, batch_size=2, sampling="with_replacement",
                       seed=seed, progress=False)
        out.append(res)
    d = (out[0].iterates[:-1] - out[0].iterates[1:]) - (out[1].iterates[:-1] - out[1].iterates[1:])
    return out[0], float(d.abs().max())


def test_dicesgd_with_replacement_counts_the_batch_multiplicity():
    res, realized = _pair_directions()
    sigma1 = res.noise_multiplier * 1.0 / res.batch_size          # std of w_t on the direction
    recorded_sensitivity = sigma1 / res.effective_noise_multiplier()
    assert res.neighbouring_relation() == "replace_one" and res.multiplicity == 2
    assert realized > 3.0 + 1e-6           # the pair moves the direction by 2 C1 + 2 C2 = 4 (old record: 3)
    assert realized <= recorded_sensitivity * (1 + 1e-9), (realized, recorded_sensitivity)
    assert recorded_sensitivity == pytest.approx(4.0)
    # Poisson batches hold an example at most once: the record there is unchanged (C1/B + 2 C2)
    assert dl.algorithms.dicesgd_sensitivity(1.0, 1.0, 2) == pytest.approx(2.5)
    assert dl.algorithms.dicesgd_sensitivity(1.0, 1.0, 2, multiplicity=2) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="multiplicity"):
        dl.algorithms.dicesgd_sensitivity(1.0, 1.0, 2, multiplicity=3)


# -- item 4: seed groups share noise ----------------------------------------------------------------
def _sweep(seed, Cs=(0.5, 2.0), n=6, z=5.0):
    X = torch.linspace(-1, 1, n, dtype=f64).unsqueeze(1)

    def grad_fn(theta, idx):                                      # gradients independent of θ, norms < 0.5
        x = X[idx]
        return (0.4 * x) if theta.dim() == 1 else (0.4 * x).expand(theta.shape[0], *x.shape)

    return dp_sgd(grad_fn, torch.zeros(1, dtype=f64), n=n, steps=1, lr=1.0, noise_multiplier=z,
                  clip_norm=sweep_grid(list(Cs), 1),
                  sampling="full", seed=seed, progress=False), 0.4 * float(X.sum()) / n


def test_seed_group_sweep_joint_release_is_not_private():
    res, stat = _sweep(range(1))
    d = res.iterates[:, 0] - res.iterates[:, 1]                  # [2, 1]: mean clipped gradient + noise
    recovered = float((d[0] / 0.5 - d[1] / 2.0) / (1 / 0.5 - 1 / 2.0))
    assert recovered == pytest.approx(stat, abs=1e-12)           # the noise cancels: the data statistic
    assert _eps(res.dp_event()) < 1.0                            # one run alone is private ...
    assert isinstance(res.joint_dp_event(), E.NonPrivateEvent)   # ... the pair together is not
    assert math.isinf(_eps(res.joint_dp_event()))


def test_independent_runs_compose_and_single_run_is_its_own_event():
    res, _ = _sweep(7)                                            # one seed, two runs: independent noise
    joint = res.joint_dp_event()
    assert joint == E.SelfComposedEvent(res.dp_event(), 2)
    assert _eps(joint) > _eps(res.dp_event())
    def zero(theta, idx):
        return torch.zeros((*theta.shape[:-1], idx.shape[-1], 1), dtype=f64)

    kw = dict(n=6, steps=2, lr=1.0, noise_multiplier=2.0, clip_norm=1.0, sampling="full", progress=False)
    distinct = dp_sgd(zero, torch.zeros(1, dtype=f64), seed=[3, 4], **kw)          # k = 2 seeds, 2 runs
    assert distinct.joint_dp_event() == E.SelfComposedEvent(distinct.dp_event(), 2)
    repeated = dp_sgd(zero, torch.zeros(1, dtype=f64), seed=[3, 3], **kw)          # one stream, twice
    assert isinstance(repeated.joint_dp_event(), E.NonPrivateEvent)
    single = dp_sgd(zero, torch.zeros(1, dtype=f64), seed=0, **kw)
    assert single.joint_dp_event() == single.dp_event()


# -- item 7 (messages) and item 8 (16-bit runs) -------------------------------------------------------
def test_dicesgd_overflowing_error_state_is_named():
    def g(theta, idx):
        return torch.full((idx.numel(), 2), 1e307, dtype=theta.dtype)

    with pytest.raises(ValueError, match="error state e") as err:
        dice_sgd(g, torch.zeros(2, dtype=f64), n=4, steps=40, lr=1.0, clip_norm=1.0, feedback_clip_norm=1.0,
                 noise_multiplier=0.0, batch_size=2, sampling="shuffle", seed=0, progress=False)
    assert "g contains" not in str(err.value)


def test_adaptive_clip_norm_underflow_is_named():
    def g(theta, idx):
        return torch.zeros((idx.numel(), 2), dtype=theta.dtype)

    with pytest.raises(ValueError, match="clip_lr") as err:
        dp_sgd_adaptive_clipping(g, torch.zeros(2, dtype=f64), n=4, steps=3000, lr=1e-9, initial_clip_norm=1.0,
                                 noise_multiplier=0.0, batch_size=2, sampling="shuffle", seed=0, progress=False,
                                 target_quantile=0.1, clip_lr=5.0)
    assert "grad_fn" not in str(err.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_private_run_in_16_bit_warns(dtype):
    def g(theta, idx):
        return torch.ones((idx.numel(), 2), dtype=theta.dtype)

    with pytest.warns(LowPrecisionPrivacyWarning, match="16-bit"):
        dp_sgd(g, torch.zeros(2, dtype=dtype), n=4, steps=2, lr=0.1, clip_norm=1.0, noise_multiplier=1.0,
               batch_size=2, sampling="shuffle", seed=0, progress=False)
