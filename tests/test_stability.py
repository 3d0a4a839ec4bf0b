"""Tests of dpclip_lab.stability (Wang, Lei, Ying, Zhang: Hölder losses, UAS, rates, Table 1, Lemma 13)."""
import math

import numpy as np
import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import stability as st
from dpclip_lab.accountants import paper_bounds as pb

torch.set_num_threads(1)


@pytest.mark.parametrize("family, cls", [("hinge", dl.losses.QHinge), ("regression", dl.losses.QNormRegression)])
@pytest.mark.parametrize("q", [1.0, 1.25, 1.5, 2.0])
def test_q_losses_match_the_lab_losses(family, cls, q):
    z = torch.linspace(-3, 3, 121, dtype=torch.float64)
    for yv in (-1.0, 1.0):
        y = torch.full_like(z, yv)
        loss = cls(q)
        assert torch.allclose(st.q_loss_value(family, z, y, q), loss.value(z, y))
        assert torch.allclose(st.q_loss_derivative(family, z, y, q), loss.derivative(z, y))


@pytest.mark.parametrize("family, cls", [("hinge", dl.losses.QHinge), ("regression", dl.losses.QNormRegression)])
@pytest.mark.parametrize("q", [1.0, 1.3, 1.5, 1.8, 2.0])
def test_measured_holder_constant_attains_the_stated_constant(family, cls, q):
    m = st.measured_holder_constant(family, q)
    L = cls(q).holder_constant
    assert m <= L * (1 + 1e-9)
    assert m >= L * (1 - 1e-6)


def test_non_smooth_loss_has_unbounded_lipschitz_ratio():
    a = 1.0 - torch.logspace(-1, -8, 8, dtype=torch.float64)   # left of the kink at z = y = 1
    r = st.holder_ratio("hinge", a, torch.ones(1, dtype=torch.float64), 1.0, 1.5, alpha=1.0)
    assert bool((r[1:] > r[:-1]).all()) and r[-1] > 1e3


def test_glp_holder_ratio_below_holder_constant():
    ds = dl.data.breast_cancer(seed=0)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(200, ds.p, generator=g, dtype=torch.float64)
    w2 = w + 0.1 * torch.randn(200, ds.p, generator=g, dtype=torch.float64)
    r = st.glp_holder_ratio("hinge", ds.X_train, ds.y_train, 1.5, w, w2)
    assert r.shape == (200,) and bool((r <= 1.5 * 1.0 ** 2.5 + 1e-9).all())


def test_sgd_runs_matches_a_plain_loop():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(20, 3, generator=g, dtype=torch.float64) / 2
    y = torch.sign(torch.randn(20, generator=g, dtype=torch.float64))
    out = st.sgd_runs(X, y, family="hinge", q=1.5, lr=0.3, steps=50, runs=2, radius=1.0, seed=7,
                      checkpoints=[1, 10, 50])
    # the same draws by hand
    gen = torch.Generator().manual_seed(7)
    w = torch.zeros(2, 3, dtype=torch.float64)
    ws = [w]
    for t in range(49):
        idx = (torch.rand(2, generator=gen, dtype=torch.float64) * 20).long()
        x = X[idx]
        gr = dl.losses.QHinge(1.5).derivative((w * x).sum(-1), y[idx])[:, None] * x
        w = w - 0.3 * gr
        w = w * torch.clamp(1.0 / torch.linalg.vector_norm(w, dim=-1, keepdim=True), max=1.0)
        ws.append(w)
    W = torch.stack(ws, 1)
    assert torch.allclose(out.average[:, 0], torch.zeros(2, 3, dtype=torch.float64))
    assert torch.allclose(out.average[:, 1], W[:, :10].mean(1))
    assert torch.allclose(out.average[:, 2], W.mean(1))


def test_tail_average_is_the_mean_of_the_last_iterates():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(20, 3, generator=g, dtype=torch.float64) / 2
    y = torch.sign(torch.randn(20, generator=g, dtype=torch.float64))
    out = st.sgd_runs(X, y, family="hinge", q=1.5, lr=0.3, steps=50, runs=2, radius=1.0, seed=7,
                      checkpoints=[5, 10, 25, 50])
    full = st.sgd_runs(X, y, family="hinge", q=1.5, lr=0.3, steps=50, runs=2, radius=1.0, seed=7,
                       checkpoints=list(range(1, 51)))
    W = torch.stack([full.average[:, 0]] + [t * full.average[:, t - 1] - (t - 1) * full.average[:, t - 2]
                                            for t in range(2, 51)], 1)          # the iterates w_1..w_50
    tail = out.tail_average([10, 50])                                           # last halves: (5, 10], (25, 50]
    assert tail.shape == (2, 2, 3)
    assert torch.allclose(tail[:, 0], W[:, 5:10].mean(1)) and torch.allclose(tail[:, 1], W[:, 25:50].mean(1))
    assert torch.allclose(out.tail_average([50], [0])[:, 0], out.average[:, -1])
    with pytest.raises(ValueError, match="checkpoints"):
        out.tail_average([50], [20])
    with pytest.raises(ValueError, match="start < end"):
        out.tail_average([10], [10])


def test_neighbouring_runs_coincide_until_the_replaced_row_is_drawn():
    ds = dl.data.breast_cancer(seed=0)
    runs = 64
    idx = torch.arange(runs)
    out = st.sgd_runs(ds.X_train, ds.y_train, family="hinge", q=1.5, lr=0.1, steps=400, runs=runs, radius=5.0,
                      checkpoints=[400], replace=(idx, ds.X_train[idx], ds.y_train[idx]))
    assert torch.equal(out.average, out.average_prime)          # identical row: identical runs
    out2 = st.sgd_runs(ds.X_train, ds.y_train, family="hinge", q=1.5, lr=0.1, steps=400, runs=runs, radius=5.0,
                       checkpoints=[400], replace=(idx, -ds.X_train[idx], ds.y_train[idx]))
    d = out2.distance[:, 0]
    assert bool((d > 0).any()) and bool((d < 2 * 5.0).all())


def test_sgd_runs_validates():
    X, y = torch.zeros(5, 2, dtype=torch.float64), torch.ones(5, dtype=torch.float64)
    with pytest.raises(ValueError, match="family"):
        st.sgd_runs(X, y, family="logistic", q=1.5, lr=0.1, steps=3, runs=1)
    with pytest.raises(ValueError, match="q must lie"):
        st.sgd_runs(X, y, family="hinge", q=2.5, lr=0.1, steps=3, runs=1)
    with pytest.raises(ValueError, match="n must"):
        st.sgd_runs(X, y, family="hinge", q=1.5, lr=0.1, steps=3, runs=1, n=9)
    with pytest.raises(ValueError, match="checkpoints"):
        st.sgd_runs(X, y, family="hinge", q=1.5, lr=0.1, steps=3, runs=1, checkpoints=[4])
    with pytest.raises(ValueError, match="lr"):
        st.sgd_runs(X, y, family="hinge", q=1.5, lr=[0.1, 0.2], steps=3, runs=1)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("R", [None, 3.0])
def test_thm7_terms_sum_to_the_closed_form(alpha, R):
    kw = dict(steps=500, n=300, eta=0.05, alpha=alpha, L=1.5, M=1.5, gamma=1e-3, R=R)
    ca = None if R is not None else 2.0
    a, b = st.wang_thm7_terms(**kw, C_alpha=ca)
    assert math.isclose(math.sqrt(math.e * (a + b)), pb.wang_delta_sgd(**kw, C_alpha=ca), rel_tol=1e-12)
    assert (a == 0.0) == (alpha == 1.0)


def test_rates_decrease_in_n_and_eps():
    for f in (lambda n, e: st.wang_thm9_rate(n, 30, e, 1e-5, 0.5), lambda n, e: st.wang_thm10_rate(n, 30, e, 1e-5),
              lambda n, e: st.wang_thm12_rate(n, 30, e, 1e-5)):
        assert f(1e4, 1.0) < f(1e3, 1.0) and f(1e3, 2.0) < f(1e3, 1.0)
    # Thm 12 is the optimal rate: below Thm 10's at large n
    assert st.wang_thm12_rate(1e6, 30, 1.0, 1e-5) < st.wang_thm10_rate(1e6, 30, 1.0, 1e-5)


def test_schedules():
    for a in (0.0, 0.25, 0.5, 1.0):
        T, eta = st.wang_thm12_schedule(400, 31, 1.0, 1 / 400 ** 2, a)
        assert T == (max(math.ceil(400 ** ((2 - a) / (1 + a))), 400) if a < 0.5 else 400) and eta > 0
        T10, _ = st.wang_thm10_schedule(400, 31, 1.0, 1 / 400 ** 2, a)
        assert T10 == T
    assert st.wang_thm9_schedule(400, 1.0)[0] == 400
    with pytest.raises(ValueError, match="alpha"):
        st.wang_thm12_schedule(400, 31, 1.0, 1e-5, 1.5)


def test_table1_rows():
    rows = st.wang_table1(1000, 0.0)
    assert len(rows) == 9
    ours = [r for r in rows if r["reference"] == "Wang et al."]
    assert ours[0]["gradients"] == pytest.approx(1000 ** 2 + 1000)
    assert st.wang_table1(1000, 1.0)[6]["gradients"] == pytest.approx(1000 ** 0.5 + 1000)
    # alpha >= 1/2: linear gradient complexity up to a factor 2
    assert st.wang_table1(1000, 0.5)[-1]["gradients"] <= 2 * 1000


def test_thm11_feasible_betas_match_the_scalar_conditions():
    n, T, e, d = 400, 400, 2.0, 1 / 400 ** 2
    b, ok = st.wang_thm11_feasible_betas(n, T, e, d, betas=np.linspace(0.001, 0.999, 999))
    for beta, f in zip(b[::37], ok[::37]):
        sig = pb.wang_thm11_sigma(1.0, T, n, e, d, beta)
        assert f == pb.wang_thm11_conditions(sig, 1.0, n, e, d, beta)
    beta_r4, _ = pb.wang_remark4_beta(1.0, T, n, e, d)
    assert ok[np.argmin(abs(b - beta_r4))]


def test_smallest_epsilon_and_lemma13():
    # above n ≈ 45 Lemma 13's threshold is sufficient (and loose); at n = 18 it is not
    for n in (100, 1000, 30000):
        e = st.wang_thm11_smallest_epsilon(n)
        assert e < pb.wang_lemma13_epsilon_threshold(n)
        assert st.wang_thm11_feasible_betas(n, n, pb.wang_lemma13_epsilon_threshold(n), 1 / n ** 2)[1].any()
    assert st.wang_thm11_smallest_epsilon(18) > pb.wang_lemma13_epsilon_threshold(18)


def test_wor_accountant_certifies_less_than_the_closed_form():
    n = 400
    beta, sigma = pb.wang_remark4_beta(1.0, n, n, 2.0, 1 / n ** 2)
    eps = st.wang_thm11_wor_epsilon(sigma, 1.0, n, n, 1 / n ** 2)
    assert 0 < eps < 2.0
    with pytest.raises(ValueError, match="sigma"):
        st.wang_thm11_wor_epsilon(0.0, 1.0, n, n, 1e-5)


def test_accountant_sigma_certifies_and_is_smaller_than_thm11():
    n, e, d = 200, 4.0, 1 / 200 ** 2
    s = st.wang_thm11_accountant_sigma(e, d, n, n, 2.0)
    assert st.wang_thm11_wor_epsilon(s, 2.0, n, n, d) <= e
    assert st.wang_thm11_wor_epsilon(s / 1.01, 2.0, n, n, d) > e
    _, s11 = pb.wang_remark4_beta(2.0, n, n, e, d)
    assert s < s11


def test_remark4_choice_matches_the_paper_bounds_search_where_both_work():
    n, e, d = 426, 4.0, 1 / 426 ** 2
    beta, s = st.wang_remark4_choice(n, n, e, d, betas=np.linspace(0, 1, 1001)[1:-1])
    b2, s2 = pb.wang_remark4_beta(1.0, n, n, e, d)
    assert beta == pytest.approx(b2) and s == pytest.approx(s2)
    # at large eps only tiny betas are feasible: the default grid (shared with paper_bounds) finds them,
    # an even grid alone does not
    assert all(math.isnan(v) for v in st.wang_remark4_choice(n, n, 40.0, d, betas=np.linspace(0, 1, 1001)[1:-1]))
    b40, s40 = st.wang_remark4_choice(n, n, 40.0, d)
    assert 0 < b40 < 1e-3 and math.isfinite(s40)
    assert pb.wang_remark4_beta(1.0, n, n, 40.0, d) == (pytest.approx(b40), pytest.approx(s40))
    assert all(math.isnan(v) for v in st.wang_remark4_choice(n, n, 0.5, d))
