"""Seed groups (issue #11): a batched sweep with ``seed=range(k)`` returns a loop's runs.

Run ``c k + s`` of ``dp_sgd(..., clip_norm=sweep_grid(Cs, k), seed=seeds)`` must be the single
run ``dp_sgd(..., clip_norm=Cs[c], seed=seeds[s])``: the same batches, the same noise, the same
iterate up to floating-point summation order — for every sampling scheme, every privatizer
built on the loop, and the GLP oracle's shared-batch path as well as the generic one.
"""
import numpy as np
import pytest
import torch

import dpclip_lab as dl
from dpclip_lab.algorithms import (dice_sgd, dp_gd, dp_sgd, dp_sgd_adaptive_clipping, make_generator,
                                   sweep_grid)
from dpclip_lab.algorithms.oracles import GLPOracle
from dpclip_lab.losses import Logistic
from dpclip_lab.privatizers import clip_scale
from dpclip_lab.sampling import Batch, PoissonSampler, SeedGroups, gaussian, tile_runs

CS = (0.1, 0.5, 2.0)
SEEDS = (3, 7, 11, 5)


def _glp(n=400, p=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(n, p, generator=g, dtype=dtype)
    y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(dtype)
    return dl.GLProblem(X, y, Logistic())


def _assert_sweep_is_loop(method, prob, tol, **kw):
    """Run the grouped sweep once and every (C, seed) pair alone; compare run by run."""
    k = len(SEEDS)
    z = torch.zeros(prob.p, dtype=prob.X.dtype)
    grid = sweep_grid(CS, k, dtype=prob.X.dtype)
    res = method(prob, z, grid, list(SEEDS), **kw)
    assert res.theta.shape == (len(CS) * k, prob.p)
    for c, C in enumerate(CS):
        for s, seed in enumerate(SEEDS):
            one = method(prob, z, C, seed, **kw)
            r = c * k + s
            torch.testing.assert_close(res.theta[r], one.theta, rtol=tol, atol=tol)
            if "batch_size" in one.history:   # the very same batches, not merely their law
                assert torch.equal(res.history["batch_size"][r], one.history["batch_size"].reshape(-1))


def _dp_sgd(prob, z, C, seed, **kw):
    return dp_sgd(prob, z, clip_norm=C, seed=seed, n=prob.n, steps=30, lr=0.3, noise_multiplier=1.0, **kw)


@pytest.mark.parametrize("sampling,b", [("poisson", 40), ("poisson", 400), ("shuffle", 40), ("shuffle", 150),
                                        ("with_replacement", 40), ("full", None)])
def test_grouped_sweep_equals_the_loop_for_every_sampling_scheme(sampling, b):
    # Poisson at q = 1 is a mask batch; a shuffle with b not dividing n has a short last batch
    _assert_sweep_is_loop(_dp_sgd, _glp(), 1e-12, sampling=sampling, batch_size=b)


@pytest.mark.parametrize("case", ["dice", "adaptive", "pre_clip", "adam_average", "normalize", "dp_gd"])
def test_grouped_sweep_equals_the_loop_for_every_privatizer(case):
    prob = _glp()
    common = dict(n=prob.n, steps=30, lr=0.3, noise_multiplier=1.0)
    methods = {
        "dice": lambda p, z, C, s: dice_sgd(p, z, clip_norm=C, feedback_clip_norm=C, seed=s, batch_size=40,
                                            **common),
        "adaptive": lambda p, z, C, s: dp_sgd_adaptive_clipping(p, z, initial_clip_norm=C, seed=s,
                                                                batch_size=40, **common),
        # per-example noise on padded Poisson batches: each seed draws for its own members only
        "pre_clip": lambda p, z, C, s: _dp_sgd(p, z, C, s, pre_clip_std=0.3, batch_size=40),
        "adam_average": lambda p, z, C, s: _dp_sgd(p, z, C, s, optimizer="adam", average=True, batch_size=40),
        "normalize": lambda p, z, C, s: _dp_sgd(p, z, C, s, normalize=True, stability=0.01, batch_size=40),
        "dp_gd": lambda p, z, C, s: dp_gd(p, z, clip_norm=C, seed=s, **common),
    }
    _assert_sweep_is_loop(methods[case], prob, 1e-12)


def test_grouped_sweep_equals_the_loop_through_a_generic_gradient_function():
    prob = _glp()

    def grad_fn(theta, idx):   # the logistic per-example gradients, as an opaque callable
        X, y = prob.X[idx], prob.y[idx]
        if theta.dim() == 1:
            return prob.loss.derivative(X @ theta, y).unsqueeze(-1) * X
        return prob.loss.derivative(torch.einsum("rmp,rp->rm", X, theta), y).unsqueeze(-1) * X

    def method(p, z, C, s):
        return dp_sgd(grad_fn, z, clip_norm=C, seed=s, n=prob.n, steps=20, lr=0.3, noise_multiplier=1.0,
                      batch_size=40)
    _assert_sweep_is_loop(method, prob, 1e-12)


def test_grouped_sweep_equals_the_loop_in_float32():
    _assert_sweep_is_loop(_dp_sgd, _glp(dtype=torch.float32), 2e-5, batch_size=40)


@pytest.mark.parametrize("need_raw", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_glp_shared_batch_path_equals_the_per_run_path(monkeypatch, need_raw, dtype, tol):
    prob = _glp(n=600, dtype=dtype)
    k, R = 4, 12
    groups = SeedGroups(range(k))
    batches = [next(PoissonSampler(prob.n, 50).batch_stream(0, 1, g, "cpu", dtype)) for g in groups.generators]
    grouped = Batch.tile(batches, R)
    assert grouped.groups == k and grouped.positions.shape[0] == R
    plain = Batch(None, None, grouped.normalizer, grouped.sizes, positions=grouped.positions, n=prob.n,
                  dtype=dtype, counts=grouped.counts)
    theta = torch.randn(R, prob.p, generator=torch.Generator().manual_seed(2), dtype=dtype)
    C = torch.linspace(0.05, 1.0, R, dtype=dtype)
    oracle = GLPOracle(prob)
    calls = []
    real = GLPOracle._reduce_grouped
    monkeypatch.setattr(GLPOracle, "_reduce_grouped", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    a = oracle.reduce(theta, grouped, lambda nr: clip_scale(nr, C), need_raw=need_raw)
    b = oracle.reduce(theta, plain, lambda nr: clip_scale(nr, C), need_raw=need_raw)
    assert calls == [1]                                   # the shared-batch path ran (once: for `grouped`)
    torch.testing.assert_close(a.scaled, b.scaled, rtol=tol, atol=tol)
    torch.testing.assert_close(a.norms, b.norms, rtol=tol, atol=tol)
    if need_raw:
        torch.testing.assert_close(a.raw, b.raw, rtol=tol, atol=tol)
    assert (a.weight is None) == (b.weight is None)


def test_runs_that_share_a_seed_share_batches_and_noise_directions():
    prob = _glp()
    res = dp_sgd(prob, torch.zeros(prob.p, dtype=torch.float64), clip_norm=sweep_grid(CS, 2, dtype=torch.float64),
                 seed=[0, 1], n=prob.n, steps=10, lr=0.3, noise_multiplier=1.0, batch_size=40)
    sizes = res.history["batch_size"]                      # [6, 10]; runs 0, 2, 4 hold seed 0
    assert torch.equal(sizes[0], sizes[2]) and torch.equal(sizes[0], sizes[4])
    assert torch.equal(sizes[1], sizes[3]) and not torch.equal(sizes[0], sizes[1])


def test_seeds_alone_give_one_run_per_seed():
    prob = _glp()
    kw = dict(n=prob.n, steps=5, lr=0.3, clip_norm=1.0, noise_multiplier=1.0, batch_size=40)
    z = torch.zeros(prob.p, dtype=torch.float64)
    res = dp_sgd(prob, z, seed=range(3), **kw)
    assert res.theta.shape == (3, prob.p)
    for s in range(3):
        torch.testing.assert_close(res.theta[s], dp_sgd(prob, z, seed=s, **kw).theta, rtol=1e-12, atol=1e-12)
    for seeds in (np.arange(3), torch.arange(3), (0, 1, 2)):
        torch.testing.assert_close(dp_sgd(prob, z, seed=seeds, **kw).theta, res.theta, rtol=0, atol=0)


@pytest.mark.parametrize("seed,match", [([], "at least one seed"), ([1.5], "seed must be an integer"),
                                        (["a"], "seed must be an integer"), ([-1], "seed must be an integer >= 0")])
def test_bad_seed_sequences_are_named(seed, match):
    prob = _glp()
    with pytest.raises((ValueError, TypeError), match=match):
        dp_sgd(prob, torch.zeros(prob.p, dtype=torch.float64), clip_norm=1.0, seed=seed, n=prob.n, steps=2, lr=0.1,
               noise_multiplier=1.0, batch_size=40)


def test_runs_must_be_a_multiple_of_the_number_of_seeds():
    prob = _glp()
    with pytest.raises(ValueError, match=r"seed: with 4 seeds the number of runs must be a multiple of 4"):
        dp_sgd(prob, torch.zeros(prob.p, dtype=torch.float64), clip_norm=sweep_grid(CS, 2), seed=range(4), n=prob.n,
               steps=2, lr=0.1, noise_multiplier=1.0, batch_size=40)


def test_methods_with_one_stream_reject_a_seed_sequence_clearly():
    # output perturbation and selection draw from make_generator's one stream
    for seeds in ([1, 2], range(2), np.arange(2), SeedGroups([1])):
        with pytest.raises(TypeError, match="seed must be one integer here"):
            make_generator(seeds, "cpu")


def test_train_takes_one_seed():
    model = torch.nn.Linear(4, 3)
    X, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    with pytest.raises(TypeError, match="seed must be one integer for train"):
        dl.train(model, torch.nn.functional.cross_entropy, X, y, steps=2, lr=0.1, clip_norm=1.0,
                 noise_multiplier=1.0, batch_size=8, seed=[0, 1])


def test_tile_pads_unequal_widths_and_keeps_the_run_layout():
    n = 50
    b1 = Batch(None, None, 5.0, torch.tensor([2.0]), positions=torch.tensor([[3, 9, 50]]), n=n)
    b2 = Batch(None, None, 5.0, torch.tensor([4.0]), positions=torch.tensor([[1, 2, 7, 40, 50]]), n=n)
    t = Batch.tile([b1, b2], 6)
    assert t.groups == 2
    assert t.positions.tolist()[:2] == [[3, 9, 50, 50, 50], [1, 2, 7, 40, 50]]
    assert torch.equal(t.positions[2:4], t.positions[:2]) and torch.equal(t.positions[4:], t.positions[:2])
    assert t.counts.tolist() == [2, 4] * 3 and t.sizes.tolist() == [2.0, 4.0] * 3
    idx, w = t.members()
    assert idx.shape == (6, 4) and w[0].tolist() == [1, 1, 0, 0]


def test_gaussian_draws_per_seed_what_one_run_draws():
    groups = SeedGroups([4, 9])
    z = gaussian((6, 3, 2), groups, "cpu", torch.float64, lengths=[2, 3])
    for s, seed in enumerate((4, 9)):
        L = (2, 3)[s]
        ref = torch.randn((1, L, 2), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)[0]
        for r in (s, s + 2, s + 4):
            assert torch.equal(z[r, :L], ref) and not z[r, L:].any()
    assert torch.equal(tile_runs(torch.arange(2), 6), torch.tensor([0, 1, 0, 1, 0, 1]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_grouped_sweep_equals_the_loop_on_cuda():
    cpu = _glp()
    prob = dl.GLProblem(cpu.X.cuda(), cpu.y.cuda(), cpu.loss)
    k = len(SEEDS)
    z = torch.zeros(prob.p, dtype=torch.float64, device="cuda")
    kw = dict(n=prob.n, steps=30, lr=0.3, noise_multiplier=1.0, batch_size=40)
    res = dp_sgd(prob, z, clip_norm=sweep_grid(CS, k, device="cuda"), seed=list(SEEDS), **kw)
    assert res.theta.device.type == "cuda"
    for c, C in enumerate(CS):
        for s, seed in enumerate(SEEDS):
            one = dp_sgd(prob, z, clip_norm=C, seed=seed, **kw)
            torch.testing.assert_close(res.theta[c * k + s], one.theta, rtol=1e-10, atol=1e-10)
