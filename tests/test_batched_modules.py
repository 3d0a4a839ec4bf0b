"""Batched training of many copies of one network (dpclip_lab.batched_modules)."""
import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import batched_modules as bm
from dpclip_lab import models

torch.set_num_threads(1)
CE = torch.nn.functional.cross_entropy


def _data(n=12):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(10, (n,), generator=g)


def test_batched_grads_equal_per_sample_grads_run_by_run():
    X, y = _data()
    net = models.TinyCNN(4)
    gf = bm.batched_grad_fn(net, CE, X, y)
    theta = bm.stacked_init(lambda: models.TinyCNN(4), [0, 1, 2])
    idx = torch.tensor([[0, 3, 5], [1, 1, 2], [7, 8, 11]])
    G = gf(theta, idx)
    assert G.shape == (3, 3, theta.shape[1])
    params = [q for q in net.parameters()]
    for r in range(3):
        torch.nn.utils.vector_to_parameters(theta[r], params)
        ref = dl.per_sample_grads(net, CE, X[idx[r]], y[idx[r]])
        assert torch.allclose(G[r], ref, atol=1e-6)
    assert torch.allclose(gf(theta[1], idx[1]), G[1], atol=1e-6)      # one run: [b, p]
    assert torch.allclose(gf(theta, idx[0])[2], gf(theta[2], idx[0]), atol=1e-6)   # shared idx


def test_stacked_init_is_seeded_and_restores_rng():
    state = torch.random.get_rng_state()
    a = bm.stacked_init(lambda: models.TinyCNN(4), [3, 4])
    assert torch.equal(torch.random.get_rng_state(), state)
    b = bm.stacked_init(lambda: models.TinyCNN(4), [3])
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], a[1])


def test_batched_dp_sgd_runs_and_evaluates():
    X, y = _data(40)
    net = models.TinyCNN(4)
    gf = bm.batched_grad_fn(net, CE, X, y)
    th = bm.stacked_init(lambda: models.TinyCNN(4), range(4))
    r = dl.dp_sgd(gf, th, n=40, steps=30, lr=0.05, clip_norm=torch.tensor([0.5, 0.5, 5.0, 5.0]),
                  noise_multiplier=0.0, batch_size=40, sampling="full", optimizer="adam", keep_iterates=False)
    loss0, _ = bm.batched_evaluate(net, th, CE, X, y)
    loss1, acc1 = bm.batched_evaluate(net, r.theta, CE, X, y)
    assert loss1.shape == (4,) and acc1.shape == (4,)
    assert bool((loss1 < loss0).all())                               # noise-free full-batch training descends
    l1, a1 = bm.batched_evaluate(net, r.theta[2], CE, X, y)
    assert abs(float(l1) - float(loss1[2])) < 1e-5


@pytest.mark.parametrize("theta, idx, name", [
    (torch.zeros(3, 7), torch.zeros(3, 2, dtype=torch.long), "theta"),
    (None, torch.zeros(2, 2, dtype=torch.long), "idx"),
])
def test_bad_inputs_name_the_parameter(theta, idx, name):
    X, y = _data()
    net = models.TinyCNN(4)
    gf = bm.batched_grad_fn(net, CE, X, y)
    if theta is None:
        theta = bm.stacked_init(lambda: models.TinyCNN(4), [0, 1, 2])
    with pytest.raises(ValueError, match=name):
        gf(theta, idx)
    with pytest.raises(ValueError, match="seeds"):
        bm.stacked_init(lambda: models.TinyCNN(4), [])
