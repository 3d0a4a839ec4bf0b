"""Sampling schemes: distribution of batches, epochs, and their privacy events."""
import math

import pytest
import torch
from scipy import stats

from dpclip_lab.sampling import make_sampler, sampling_event
from dpclip_lab.accountants import events as ev


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_poisson_sizes_are_binomial():
    n, b, draws = 50, 10, 4000
    s = make_sampler("poisson", n, b)
    g = _gen(1)
    sizes = torch.cat([s.sample(t, 8, g, "cpu").sizes for t in range(draws // 8)]).double().numpy()
    q = b / n
    # moments: mean n q, variance n q (1 - q)
    se = math.sqrt(n * q * (1 - q) / len(sizes))
    assert abs(sizes.mean() - n * q) < 4 * se
    assert abs(sizes.var() / (n * q * (1 - q)) - 1) < 0.1
    # chi-square goodness of fit on binned counts (bins with expected count >= 5)
    ks = torch.arange(0, n + 1).numpy()
    pmf = stats.binom.pmf(ks, n, q)
    obs = torch.bincount(torch.as_tensor(sizes).long(), minlength=n + 1).double().numpy()
    lo, hi = 4, 17
    o = list(obs[lo:hi + 1]) + [obs[:lo].sum() + obs[hi + 1:].sum()]
    e = list(pmf[lo:hi + 1] * len(sizes)) + [(pmf[:lo].sum() + pmf[hi + 1:].sum()) * len(sizes)]
    assert stats.chisquare(o, e).pvalue > 1e-3


def test_poisson_normalizer_is_expected_size_and_padding():
    s = make_sampler("poisson", 30, 6)
    batch = s.sample(0, 5, _gen(2), "cpu")
    assert batch.normalizer == 6.0
    idx, w = batch.padded()
    assert idx.shape[0] == 5 and w.shape == idx.shape
    for r in range(5):
        members = set(torch.nonzero(batch.mask[r]).flatten().tolist())
        got = set(idx[r][w[r] > 0].tolist())
        assert got == members and int(w[r].sum()) == int(batch.sizes[r])


@pytest.mark.parametrize("n,b", [(10, 3), (12, 4), (7, 7)])
def test_shuffle_visits_each_example_once_per_epoch(n, b):
    s = make_sampler("shuffle", n, b)
    g = _gen(3)
    spe = math.ceil(n / b)
    for epoch in range(3):
        seen = [s.sample(epoch * spe + k, 2, g, "cpu").idx for k in range(spe)]
        allidx = torch.cat(seen, dim=1)
        for r in range(2):
            assert sorted(allidx[r].tolist()) == list(range(n))


def test_shuffle_epochs_differ():
    s = make_sampler("shuffle", 20, 20)
    g = _gen(4)
    a, b = s.sample(0, 1, g, "cpu").idx, s.sample(1, 1, g, "cpu").idx
    assert not torch.equal(a, b)


def test_with_replacement_uniform():
    s = make_sampler("with_replacement", 5, 4)
    g = _gen(5)
    idx = torch.cat([s.sample(t, 10, g, "cpu").idx.flatten() for t in range(250)])
    counts = torch.bincount(idx, minlength=5).double().numpy()
    assert stats.chisquare(counts).pvalue > 1e-3


def test_full_batch():
    s = make_sampler("full", 6, None)
    b = s.sample(0, 3, None, "cpu")
    assert b.full and torch.equal(b.idx, torch.arange(6)) and b.normalizer == 6


@pytest.mark.parametrize("sampling,n,b", [("poisson", 10, 11), ("shuffle", 3, 4), ("with_replacement", 2, 5)])
def test_batch_size_larger_than_n(sampling, n, b):
    with pytest.raises(ValueError, match="batch_size"):
        make_sampler(sampling, n, b)


def test_bad_scheme_and_missing_batch_size():
    with pytest.raises(ValueError, match="sampling"):
        make_sampler("bootstrap", 10, 2)
    with pytest.raises(ValueError, match="batch_size"):
        make_sampler("poisson", 10, None)
    with pytest.raises(ValueError, match="batch_size"):
        make_sampler("full", 10, 5)


def test_sampling_events():
    e = sampling_event("poisson", noise_multiplier=1.1, steps=7, n=100, batch_size=10)
    assert e == ev.SelfComposedEvent(ev.PoissonSampledEvent(0.1, ev.GaussianEvent(1.1)), 7)
    e = sampling_event("shuffle", noise_multiplier=1.0, steps=25, n=100, batch_size=10)
    assert e == ev.SelfComposedEvent(ev.GaussianEvent(1.0), 3)  # ceil(25 / 10) epochs
    e = sampling_event("full", noise_multiplier=2.0, steps=4, n=100, batch_size=100)
    assert e == ev.SelfComposedEvent(ev.GaussianEvent(2.0), 4)
    e = sampling_event("with_replacement", noise_multiplier=2.0, steps=4, n=100, batch_size=1)
    assert e == ev.SelfComposedEvent(ev.SampledWithoutReplacementEvent(100, 1, ev.GaussianEvent(1.0)), 4)
    e = sampling_event("with_replacement", noise_multiplier=2.0, steps=4, n=100, batch_size=4)
    assert e == ev.SelfComposedEvent(ev.GaussianEvent(0.25), 4)
    assert isinstance(sampling_event("poisson", noise_multiplier=0, steps=4, n=10, batch_size=2), ev.NonPrivateEvent)
    assert isinstance(sampling_event("poisson", noise_multiplier=1, steps=0, n=10, batch_size=2), ev.NoOpEvent)


def _positions_by_floor(n, q, runs, generator):
    """Reference: the members of Poisson(q) subsets by geometric gaps written out with an explicit floor,
    drawing the same uniforms in the same order as dpclip_lab.sampling.poisson_positions."""
    log1mq = math.log1p(-q)
    mean = n * q
    k = int(mean + 6.0 * math.sqrt(mean * (1 - q)) + 16)
    start, chunks = torch.full((runs, 1), -1, dtype=torch.int64), []
    while True:
        u = torch.rand((runs, k), generator=generator, dtype=torch.float64)
        gaps = torch.floor(torch.log1p(-u) / log1mq).clamp(max=n).to(torch.int64)
        pos = torch.cumsum(gaps + 1, 1) + start
        chunks.append(pos)
        start = pos[:, -1:]
        if bool((start >= n).all()):
            break
        k = max(16, k // 4)
    return torch.cat(chunks, 1).clamp(max=n)


@pytest.mark.parametrize("n,q,runs", [(10, 0.5, 3), (4096, 64 / 4096, 1), (2000, 0.01, 16), (7, 0.999, 5),
                                      (50, 0.9, 2), (10**6, 1e-5, 3)])
def test_poisson_positions_equal_the_explicit_floor_formula(n, q, runs):
    """The in-place kernel chain (gaps truncated by the integer conversion, a scalar start, one min for
    the stop test) gives exactly the positions of the textbook formula, seed for seed."""
    from dpclip_lab.sampling import poisson_positions
    for seed in range(20):
        got = poisson_positions(n, q, runs, torch.Generator().manual_seed(seed), "cpu")
        want = _positions_by_floor(n, q, runs, torch.Generator().manual_seed(seed))
        assert torch.equal(got, want), (n, q, runs, seed)


# -- the training loop's Poisson stream: several steps drawn at once ---------------------------------
@pytest.mark.parametrize("runs, steps", [(1, 6000), (4, 1500)])
def test_poisson_stream_draws_independent_poisson_subsets(runs, steps):
    """batch_stream's batches (drawn CHUNK_STEPS steps at a time) are Poisson(q) subsets: every example's
    inclusion frequency is q, the sizes are Binomial(n, q), and consecutive steps are independent."""
    from dpclip_lab.sampling import PoissonSampler
    n, b = 40, 8
    s = PoissonSampler(n, b)
    it = s.batch_stream(0, runs, _gen(3), "cpu", torch.float64)
    masks = torch.stack([next(it).mask for _ in range(steps)])      # [steps, R, n]
    q = b / n
    freq = masks.mean((0, 1))
    se = math.sqrt(q * (1 - q) / (steps * runs))
    assert float((freq - q).abs().max()) < 5 * se
    sizes = masks.sum(-1).flatten()
    m = sizes.numel()
    assert abs(float(sizes.mean()) - n * q) < 4 * math.sqrt(n * q * (1 - q) / m)
    assert abs(float(sizes.var()) / (n * q * (1 - q)) - 1) < 0.1
    # one example's membership at steps t and t+1 (across chunk boundaries too): uncorrelated
    x, y = masks[:-1, :, 0].flatten().numpy(), masks[1:, :, 0].flatten().numpy()
    assert abs(stats.pearsonr(x, y)[0]) < 4 / math.sqrt(x.size)


def test_poisson_stream_is_prefix_consistent_and_bounded():
    """The chunk length depends on n, q and runs only, not on the number of steps: a run of T steps is
    the first T steps of a longer run with the same seed (chunks of 32 steps here: T = 10 and 45 end
    inside different chunks). A chunk stays under CHUNK_BYTES: one step when a step alone fills it,
    which is then exactly sample()'s draw."""
    import dpclip_lab as dl
    from dpclip_lab.algorithms import dp_sgd
    from dpclip_lab.losses import Logistic
    from dpclip_lab.sampling import PoissonSampler
    g = _gen(0)
    X = torch.randn(500, 4, generator=g, dtype=torch.float64)
    y = torch.where(torch.rand(500, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    prob = dl.GLProblem(X, y, Logistic())
    kw = dict(n=500, lr=0.5, clip_norm=0.3, noise_multiplier=1.0, batch_size=25, seed=4, progress=False)
    short = dp_sgd(prob, torch.zeros(4, dtype=torch.float64), steps=10, **kw)
    long = dp_sgd(prob, torch.zeros(4, dtype=torch.float64), steps=45, **kw)
    assert torch.equal(short.iterates, long.iterates[:11])
    assert torch.equal(short.history["batch_size"], long.history["batch_size"][:10])
    big = PoissonSampler(10**5, 1000)   # 2000 runs x ~1200 positions x 8 bytes > CHUNK_BYTES: one step a chunk
    it, g = big.batch_stream(0, 2000, _gen(6), "cpu"), _gen(6)
    for t in range(3):
        assert torch.equal(next(it).positions, big.sample(t, 2000, g, "cpu").positions)


def test_poisson_stream_honours_an_overridden_sample():
    from dpclip_lab.sampling import PoissonSampler
    calls = []

    class Spy(PoissonSampler):
        def sample(self, step, *a, **k):
            calls.append(step)
            return super().sample(step, *a, **k)

    it = Spy(30, 3).batch_stream(4, 1, _gen(), "cpu")
    for _ in range(3):
        next(it)
    assert calls == [4, 5, 6]
