"""Batched sweeps (issue #11): gathered Poisson batches for GLPs, per-run pre-clip std.

Exactness, never timing: the gathered GLP path equals the masked one, a batched sweep
equals its runs replayed one by one, and a sweep over the pre-clip std k equals per-k runs.
"""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab.algorithms import dp_sgd, run, sweep_grid
from dpclip_lab.algorithms.oracles import GLPOracle
from dpclip_lab.losses import Logistic
from dpclip_lab.privatizers import GaussianPrivatizer, clip_scale, normalize_scale
from dpclip_lab.sampling import Batch, PoissonSampler, Sampler, make_sampler


def _glp(n=300, p=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g, dtype=dtype)
    y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(dtype)
    return dl.GLProblem(X, y, Logistic())


@pytest.fixture
def masked(monkeypatch):
    """Force the dense-mask GLP path (the reference the gathered path must equal)."""
    def use():
        monkeypatch.setattr(GLPOracle, "GATHER_MAX_FRACTION", -1.0)
    return use


def test_poisson_batch_positions_mask_and_padding_agree():
    n, runs = 200, 6
    s = make_sampler("poisson", n, 20)
    b = s.sample(0, runs, torch.Generator().manual_seed(1), "cpu", torch.float64)
    assert b.positions is not None and b.positions.shape[0] == runs
    mask = b.mask                                          # built on demand from the positions
    assert mask.shape == (runs, n) and mask.dtype == torch.float64
    assert torch.equal(mask.sum(1), b.sizes)
    idx, w = b.members()
    idx2, w2 = b.padded()
    for r in range(runs):
        members = set(torch.nonzero(mask[r]).flatten().tolist())
        k = int(b.sizes[r])
        assert set(idx[r, :k].tolist()) == members and bool((idx[r, k:] == n).all())
        assert set(idx2[r][w2[r] > 0].tolist()) == members
    assert bool((idx2 >= 0).all() & (idx2 < n).all())     # padded(): valid indices for any oracle
    with pytest.raises(ValueError, match="one of idx, mask or positions"):
        Batch(torch.arange(3), None, 3.0, torch.tensor([3]), positions=b.positions, n=n)


@pytest.mark.parametrize("runs", [1, 5])
@pytest.mark.parametrize("kind", ["clip", "normalize", "none"])
@pytest.mark.parametrize("margins", ["all rows", "gathered rows"])
def test_gathered_glp_reduce_equals_masked(runs, kind, margins, monkeypatch):
    """Both ways to the members' margins (one product over all rows, or their gathered rows) give the mask path's sums."""
    monkeypatch.setattr(GLPOracle, "DENSE_MARGINS_MAX_RATIO", 10**9 if margins == "all rows" else 0)
    prob = _glp()
    oracle = GLPOracle(prob)
    s = PoissonSampler(prob.n, 30)
    g = torch.Generator().manual_seed(2)
    theta = torch.randn(runs, prob.p, generator=g, dtype=torch.float64)
    C = torch.linspace(0.05, 2.0, runs, dtype=torch.float64)
    scale = {"clip": lambda nr: clip_scale(nr, C), "normalize": lambda nr: normalize_scale(nr, C, 0.01),
             "none": None}[kind]
    for _ in range(3):
        b = s.sample(0, runs, g, "cpu", torch.float64)
        assert oracle._gathered(b) is not None
        got = oracle.reduce(theta, b, scale, need_raw=True)
        ref_batch = Batch(None, b.mask.clone(), b.normalizer, b.sizes)
        ref = oracle.reduce(theta, ref_batch, scale, need_raw=True)
        torch.testing.assert_close(got.scaled, ref.scaled, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.raw, ref.raw, rtol=1e-12, atol=1e-12)
        # norms: [R, m] over members (gathered) vs [R, n] over all rows (masked), same multiset per run
        for r in range(runs):
            a = torch.sort(got.norms[r][got.norms[r] > 0]).values
            c = torch.sort(ref.norms[r][ref.norms[r] > 0]).values
            torch.testing.assert_close(a, c, rtol=1e-12, atol=0)


def test_gathered_path_handles_empty_batches():
    prob = _glp(n=50)
    oracle = GLPOracle(prob)
    pos = torch.full((3, 4), 50, dtype=torch.int64)
    b = Batch(None, None, 1.0, torch.zeros(3, dtype=torch.float64), positions=pos, n=50, dtype=torch.float64)
    out = oracle.reduce(torch.randn(3, prob.p, dtype=torch.float64), b, lambda nr: clip_scale(nr, torch.ones(3)),
                        need_raw=True)
    assert torch.equal(out.scaled, torch.zeros(3, prob.p, dtype=torch.float64)) and out.norms.shape == (3, 0)


@pytest.mark.parametrize("n,b,dtype", [(400, 40, torch.float64), (20_000, 16, torch.float64),
                                       (400, 40, torch.float32)])
def test_gathered_sweep_equals_masked_sweep(n, b, dtype, masked):
    """Same seed, same random stream: the two GLP paths give the same trajectories."""
    prob = _glp(n=n, dtype=dtype)
    grid = sweep_grid([0.05, 0.5, 5.0], 3, dtype=dtype)
    kw = dict(n=n, steps=25, lr=0.5, noise_multiplier=1.0, batch_size=b, seed=7, progress=False)
    fast = dp_sgd(prob, torch.zeros(prob.p, dtype=dtype), clip_norm=grid, **kw)
    masked()
    slow = dp_sgd(prob, torch.zeros(prob.p, dtype=dtype), clip_norm=grid, **kw)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(fast.iterates, slow.iterates, rtol=tol, atol=tol)
    torch.testing.assert_close(fast.history["fraction_clipped"], slow.history["fraction_clipped"])
    torch.testing.assert_close(fast.history["batch_size"], slow.history["batch_size"])


class _Replay(Sampler):
    """Replays run ``r`` of recorded batched Poisson batches as a single run."""

    name = "poisson"

    def __init__(self, n, batch_size, batches, r):
        super().__init__(n, batch_size)
        self.batches, self.r = batches, r

    def sample(self, step, runs, generator, device, dtype=torch.float32):
        b = self.batches[step]
        r = slice(self.r, self.r + 1)
        return Batch(None, None, b.normalizer, b.sizes[r], positions=b.positions[r], n=b.n, dtype=b.dtype,
                     counts=None if b.counts is None else b.counts[r])


class _Recorder(PoissonSampler):
    def __init__(self, n, batch_size):
        super().__init__(n, batch_size)
        self.batches = []

    def sample(self, *a, **k):
        b = super().sample(*a, **k)
        self.batches.append(b)
        return b


@pytest.mark.parametrize("n,b", [(500, 50), (30_000, 24)])
def test_batched_sweep_equals_runs_replayed_one_by_one(n, b):
    """A batched sweep (clip norms × seeds) is its runs, run by run: same batches give the same iterates."""
    prob = _glp(n=n)
    grid = sweep_grid([0.02, 0.3, 4.0], 2)
    steps = 20
    rec = _Recorder(n, b)
    priv = GaussianPrivatizer(grid, 0.0)
    batched = run(prob, torch.zeros(prob.p, dtype=torch.float64), steps=steps, lr=0.5, sampler=rec,
                  privatizer=priv, seed=3, progress=False)
    for r in range(grid.numel()):
        one = run(prob, torch.zeros(prob.p, dtype=torch.float64), steps=steps, lr=0.5,
                  sampler=_Replay(n, b, rec.batches, r), privatizer=GaussianPrivatizer(float(grid[r]), 0.0),
                  seed=0, progress=False)
        torch.testing.assert_close(one.iterates[0], batched.iterates[r], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(one.history["fraction_clipped"][0], batched.history["fraction_clipped"][r])


# -- pre-clip perturbation (Chen, Wu & Hong 2020, §5) as a per-run tensor ---------------------------------
def _pre_clip_kw(n):
    return dict(n=n, steps=15, lr=0.3, clip_norm=0.5, noise_multiplier=0.8, batch_size=n // 10, progress=False)


@pytest.mark.parametrize("oracle", ["glp", "callable"])
def test_pre_clip_std_tensor_equals_per_k_runs(oracle):
    """Run j of one call over ks equals run j of the call with the float k_j (same seed, same streams)."""
    prob = _glp(n=200)
    grad_fn = prob
    ks = torch.tensor([0.05, 0.3, 1.5], dtype=torch.float64)
    theta0 = torch.zeros(3, prob.p, dtype=torch.float64)
    kw = _pre_clip_kw(prob.n)
    if oracle == "callable":  # batched callable: [R, p], [R, m] -> [R, m, p]
        grad_fn = (lambda th, idx: torch.stack([prob.per_example_grads(th[r], idx[r] if idx.dim() == 2 else idx)
                                                for r in range(th.shape[0])]))
    swept = dp_sgd(grad_fn, theta0, pre_clip_std=ks, seed=11, **kw)
    assert swept.algorithm.endswith("pre-clip perturbation")
    assert torch.equal(swept.extra["pre_clip_std"], ks)
    for j, k in enumerate(ks.tolist()):
        one = dp_sgd(grad_fn, theta0, pre_clip_std=torch.full((3,), k, dtype=torch.float64), seed=11, **kw)
        torch.testing.assert_close(swept.iterates[j], one.iterates[j], rtol=1e-12, atol=1e-12)
    same = dp_sgd(grad_fn, theta0, pre_clip_std=torch.full((3,), 0.3, dtype=torch.float64), seed=5, **kw)
    ref = dp_sgd(grad_fn, theta0, pre_clip_std=0.3, seed=5, **kw)
    torch.testing.assert_close(same.iterates, ref.iterates, rtol=1e-12, atol=1e-12)   # tensor k = float k


def test_pre_clip_std_tensor_changes_only_its_run():
    """k acts per run: a k = 0 run of a mixed sweep gets the plain clipped gradient, a k > 0 run does not."""
    prob = _glp(n=200)
    kw = dict(_pre_clip_kw(prob.n), noise_multiplier=0.0, sampling="full", batch_size=None)
    theta0 = torch.zeros(2, prob.p, dtype=torch.float64)
    mixed = dp_sgd(prob, theta0, pre_clip_std=torch.tensor([0.0, 2.0], dtype=torch.float64), seed=1, **kw)
    clean = dp_sgd(prob, theta0, **kw)
    torch.testing.assert_close(mixed.iterates[0], clean.iterates[0], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(mixed.iterates[1], clean.iterates[1])


@pytest.mark.parametrize("bad,match", [
    (torch.tensor([0.1, -0.2, 0.3]), "pre_clip_std"),
    (torch.tensor([0.1, math.nan, 0.3]), "pre_clip_std"),
    (torch.tensor([0.1, math.inf, 0.3]), "pre_clip_std"),
    (torch.ones(3, 1), "pre_clip_std"),
    (torch.ones(4), "runs dimension"),
])
def test_pre_clip_std_tensor_bad_inputs(bad, match):
    prob = _glp(n=100)
    with pytest.raises(ValueError, match=match):
        dp_sgd(prob, torch.zeros(prob.p, dtype=torch.float64), pre_clip_std=bad,
               **dict(_pre_clip_kw(prob.n), clip_norm=sweep_grid([0.5], 3)))
