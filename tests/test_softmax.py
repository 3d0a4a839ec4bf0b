"""Song, Thakkar, Thakurta (2021) Thm 3.3 and B.5: clipped softmax gradients are no gradient field."""
import math

import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import softmax as sm

F64 = torch.float64


def _problem(n=7, p=3, K=4, seed=0, device="cpu", dtype=F64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g, dtype=F64)
    y = torch.randint(0, K, (n,), generator=g)
    return sm.SoftmaxRegression(X.to(device=device, dtype=dtype), y.to(device), K)


def _theta(prob, *lead, seed=1, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    t = scale * torch.randn(*lead, prob.dim, generator=g, dtype=F64)
    return t.to(device=prob.X.device, dtype=prob.X.dtype)


# ------------------------------------------------------------------ closed forms

def test_loss_matches_torch_cross_entropy(device):
    prob = _problem(device=device)
    th = _theta(prob, 5)
    W = th.reshape(5, prob.K, prob.p)
    for b in range(5):
        ref = torch.nn.functional.cross_entropy(prob.X @ W[b].T, prob.y, reduction="none")
        assert torch.allclose(prob.per_example_losses(th)[b], ref, atol=1e-12)
    assert prob.objective(th).shape == (5,)


@pytest.mark.parametrize("K", [2, 3, 5])
def test_per_example_grads_match_autograd(device, K):
    prob = _problem(K=K, device=device)
    th = _theta(prob, 2, 3).requires_grad_()
    losses = prob.per_example_losses(th)                       # [2, 3, n]
    for i in range(prob.n):
        (g,) = torch.autograd.grad(losses[..., i].sum(), th, retain_graph=True)
        assert torch.allclose(prob.per_example_grads(th.detach())[..., i, :], g, atol=1e-12)
    (g,) = torch.autograd.grad(prob.objective(th).sum(), th)
    assert torch.allclose(prob.grad(th.detach()), g, atol=1e-12)


def test_gradient_is_outer_product_class_major():
    x = torch.tensor([0.6, 0.8], dtype=F64)
    prob = sm.SoftmaxRegression(x, 1, 3)
    th = torch.zeros(6, dtype=F64)
    g = prob.per_example_grads(th)[0].reshape(3, 2)
    expected = torch.tensor([1 / 3, 1 / 3 - 1, 1 / 3], dtype=F64)[:, None] * x
    assert torch.allclose(g, expected, atol=1e-15)


def test_single_example_accepts_vector_and_int_label():
    prob = sm.SoftmaxRegression(torch.ones(4, dtype=F64), 2, 3)
    assert (prob.n, prob.p, prob.K, prob.dim) == (1, 4, 3, 12)
    assert prob.y.tolist() == [2]


@pytest.mark.parametrize("K", [2, 3, 5])
def test_max_grad_norm_is_the_supremum(K):
    prob = _problem(K=K)
    th = _theta(prob, 4000, scale=4.0)
    norms = dl.safe_norm(prob.per_example_grads(th))
    bound = prob.max_grad_norm()
    assert bound == pytest.approx(math.sqrt(2) * float(prob.feature_norms.max()))
    assert float(norms.max()) < bound
    assert not bool(prob.clipped_mask(th, bound).any())
    # approached when one wrong class takes all the probability (App. B.4, eq. (5));
    # the paper's sqrt(K/(K-1)) is the value for equal wrong-class probabilities
    x = prob.X[0]
    one = sm.SoftmaxRegression(x, 0, K)
    worst = torch.zeros(K, prob.p, dtype=F64)
    worst[1] = 30 * x / x.norm() ** 2                      # logit 30 for class 1, 0 for the rest
    assert float(dl.safe_norm(one.per_example_grads(worst.reshape(-1)))) == pytest.approx(
        one.max_grad_norm(), rel=1e-9)
    equal = torch.zeros(K, prob.p, dtype=F64)
    equal[0] = -30 * x / x.norm() ** 2                     # true class improbable, others tie
    assert float(dl.safe_norm(one.per_example_grads(equal.reshape(-1)))) == pytest.approx(
        math.sqrt(K / (K - 1)) * float(x.norm()), rel=1e-9)


# ------------------------------------------------------------------ clipped fields

def test_clipped_fields_use_the_lab_clipping(device):
    prob = _problem(device=device)
    th = _theta(prob, 3, scale=2.0)
    g = prob.per_example_grads(th)
    assert torch.allclose(prob.clipped_grad(th, 0.4), dl.clip(g, 0.4).mean(-2))
    assert torch.allclose(prob.clipped_grad(th, 0.4, per_class=True),
                          dl.clip_per_block(g, 0.4, prob.K).mean(-2))
    # one clip norm per run, broadcast over theta's leading dims
    C = torch.tensor([0.1, 0.4, 9.0], device=device, dtype=F64)
    out = prob.clipped_grad(th, C)
    for r in range(3):
        assert torch.allclose(out[r], prob.clipped_grad(th[r], float(C[r])))
    assert torch.allclose(prob.clipped_grad(th, 1e3), prob.grad(th))
    assert torch.allclose(prob.field()(th), prob.grad(th))


def test_clipped_mask():
    prob = _problem(K=3)
    th = _theta(prob, 200, scale=2.0)
    norms = dl.safe_norm(prob.per_example_grads(th))
    assert torch.equal(prob.clipped_mask(th, 0.7), (norms > 0.7).any(-1))
    blocks = dl.safe_norm(prob.per_example_grads(th).reshape(200, prob.n, 3, prob.p))
    assert torch.equal(prob.clipped_mask(th, 0.7, per_class=True), (blocks > 0.7).any(-1).any(-1))


# ------------------------------------------------------------------ Jacobians

def test_jacobian_is_the_hessian_without_clipping():
    prob = _problem(K=3, n=4, p=2)
    th = _theta(prob, 6)
    J = sm.jacobian(prob.field(), th)
    for b in range(6):
        H = torch.autograd.functional.hessian(lambda t: prob.objective(t), th[b])
        assert torch.allclose(J[b], H, atol=1e-12)
    assert J.shape == (6, prob.dim, prob.dim)


@pytest.mark.parametrize("K", [3, 4, 6])
def test_asymmetry_vanishes_without_clipping(K):
    prob = _problem(K=K)
    th = _theta(prob, 50)
    assert float(sm.asymmetry(sm.jacobian(prob.field(), th)).max()) < 1e-10
    # and with a clip norm that never clips
    G = prob.field(prob.max_grad_norm())
    assert float(sm.asymmetry(sm.jacobian(G, th)).max()) < 1e-10


@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("C", [0.05, 0.3, 1.0])
def test_binary_clipped_field_is_symmetric(C, per_class):
    for n in (1, 6):
        prob = _problem(K=2, n=n, p=3)
        th = _theta(prob, 300)   # moderate margins: far out J -> 0 and the ratio measures rounding
        assert bool(prob.clipped_mask(th, C).any())
        J = sm.jacobian(prob.field(C, per_class=per_class), th)
        assert float(sm.asymmetry(J).max()) < 1e-10


def test_softmax_clipped_field_is_asymmetric_on_the_clipped_region():
    # Thm 3.3: one example, K = 3, a clipped point off the set <θ1,x> = <θ2,x>
    x = torch.tensor([0.6, 0.8], dtype=F64)
    prob = sm.SoftmaxRegression(x, 0, 3)
    C = 0.5
    th = torch.cat([0.0 * x, 1.0 * x, -0.5 * x])         # logits (0, 1, -0.5): clipped
    assert bool(prob.clipped_mask(th, C))
    a = float(sm.asymmetry(sm.jacobian(prob.field(C), th)))
    assert a > 0.05
    # on the "good" set of the proof (equal wrong-class logits) the Jacobian is symmetric
    good = torch.cat([0.0 * x, 0.7 * x, 0.7 * x])
    assert bool(prob.clipped_mask(good, C))
    assert float(sm.asymmetry(sm.jacobian(prob.field(C), good))) < 1e-10
    # App. B.4, step 2: dG^(k)/dθ^(y) = 0 for k != y, but dG^(y)/dθ^(k) != 0
    J = sm.jacobian(prob.field(C), th).reshape(3, 2, 3, 2)
    assert float(J[1, :, 0, :].abs().max()) < 1e-14 and float(J[2, :, 0, :].abs().max()) < 1e-14
    assert float(J[0, :, 1, :].abs().max()) > 1e-2


def test_jacobian_block_matches_the_papers_formula():
    # ∇_{θ^(k')} G^(1) = −L E^(k') / (||x|| D^{3/2}) Σ_{k≥2} E^(k)(E^(k) − E^(k')) x xᵀ  (App. B.4)
    x = torch.tensor([0.3, -1.1, 0.5], dtype=F64)
    K, L = 4, 0.4
    prob = sm.SoftmaxRegression(x, 0, K)
    th = _theta(prob, seed=3)
    assert bool(prob.clipped_mask(th, L))
    J = sm.jacobian(prob.field(L), th).reshape(K, 3, K, 3)
    E = torch.exp(th.reshape(K, 3) @ x)
    D = E[1:].sum() ** 2 + (E[1:] ** 2).sum()
    for kp in range(1, K):
        coef = -L * E[kp] / (x.norm() * D ** 1.5) * (E[1:] * (E[1:] - E[kp])).sum()
        assert torch.allclose(J[0, :, kp, :], coef * torch.outer(x, x), atol=1e-13)


def test_per_class_clipping_is_asymmetric():
    # Thm B.5, case 2: the true-class block is clipped, some other block is not
    x = torch.tensor([0.6, 0.8], dtype=F64)
    prob = sm.SoftmaxRegression(x, 0, 3)
    C = 0.5
    th = torch.cat([0.0 * x, 1.0 * x, -0.5 * x])
    assert float(sm.asymmetry(sm.jacobian(prob.field(C, per_class=True), th))) > 0.1
    # case 1: every block clipped -> G is constant, J = 0 (reported as 0)
    C_small = 0.01
    J = sm.jacobian(prob.field(C_small, per_class=True), th)
    assert float(J.abs().max()) < 1e-14
    assert float(sm.asymmetry(J)) == 0.0


def test_asymmetry_of_known_matrices():
    A = torch.tensor([[1.0, 2.0], [2.0, 3.0]], dtype=F64)
    B = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=F64)
    assert float(sm.asymmetry(A)) == 0.0
    assert float(sm.asymmetry(B)) == pytest.approx(math.sqrt(2))
    assert float(sm.asymmetry(torch.zeros(2, 2, dtype=F64))) == 0.0
    assert sm.asymmetry(torch.stack([A, B])).shape == (2,)


# ------------------------------------------------------------------ circulation and paths

def _plane(prob, i=0, j=1):
    x = prob.X[0]
    return sm.class_direction(i, x, prob.K), sm.class_direction(j, x, prob.K)


def test_circulation_of_a_linear_field_is_twice_the_area_times_the_rotation():
    # G(θ) = A θ with A = [[0, -1], [1, 0]]: ∮ G·dθ = 2π r²
    A = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64)
    field = lambda t: t @ A.T  # noqa: E731
    r = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    c = sm.circulation(field, torch.zeros(2, dtype=F64), torch.tensor([1.0, 0.0], dtype=F64),
                       torch.tensor([0.0, 1.0], dtype=F64), r, n_points=64)
    assert torch.allclose(c, 2 * math.pi * r ** 2, atol=1e-12)


def test_circulation_vanishes_for_gradient_fields(device):
    prob = _problem(K=3, device=device)
    u, v = _plane(prob)
    centers = _theta(prob, 4)
    r = torch.tensor([0.3, 1.0, 3.0], device=device, dtype=F64)[:, None]
    assert float(sm.circulation(prob.field(), centers, u, v, r).abs().max()) < 1e-12
    binary = _problem(K=2, device=device)
    u2, v2 = _plane(binary)
    for C in (0.05, 0.5):
        c = sm.circulation(binary.field(C), _theta(binary, 4), u2, v2, r, n_points=2048)
        assert float(c.abs().max()) < 1e-10


@pytest.mark.parametrize("per_class", [False, True])
def test_circulation_is_nonzero_for_clipped_softmax(per_class):
    x = torch.tensor([0.6, 0.8], dtype=F64)
    prob = sm.SoftmaxRegression(x, 0, 3)
    u, v = _plane(prob)
    # centred off the line <θ1,x> = <θ2,x>, across which the planar curl changes sign
    center = 1.0 * u + 1.5 * v
    c = sm.circulation(prob.field(0.5, per_class=per_class), center, u, v, 1.0, n_points=2048)
    assert abs(float(c)) > 1e-2
    # converged: doubling the nodes changes it by far less than its size
    c2 = sm.circulation(prob.field(0.5, per_class=per_class), center, u, v, 1.0, n_points=4096)
    assert abs(float(c - c2)) < 1e-5 * abs(float(c))


def test_small_loops_measure_the_planar_curl():
    x = torch.tensor([0.6, 0.8], dtype=F64)
    prob = sm.SoftmaxRegression(x, 0, 3)
    u, v = _plane(prob)
    th = torch.cat([0.0 * x, 1.0 * x, -0.5 * x])
    G = prob.field(0.5)
    r = 1e-2
    curl = float(sm.planar_curl(G, th, u, v))
    assert abs(curl) > 1e-3
    assert float(sm.circulation(G, th, u, v, r, n_points=64)) / (math.pi * r ** 2) == pytest.approx(curl, rel=1e-3)


def test_line_integrals_of_gradient_fields_are_path_independent():
    prob = _problem(K=3, n=5, p=2)
    a, b, m = _theta(prob, 3, seed=5).unbind(0)
    straight = torch.stack([a, b])
    corner = torch.stack([a, m, b])
    expected = float(prob.objective(b) - prob.objective(a))
    for path in (straight, corner):
        assert float(sm.line_integral(prob.field(), path)) == pytest.approx(expected, abs=1e-12)
    # binary clipped: the potential is the Huberized objective of Lemma 3.1
    binary = _problem(K=2, n=5, p=2)
    a, b, m = _theta(binary, 3, seed=6, scale=3.0).unbind(0)
    glp = binary.as_glp()
    C = 0.3
    expected = float(glp.clipped_objective(b, C) - glp.clipped_objective(a, C))
    for path in (torch.stack([a, b]), torch.stack([a, m, b])):
        # the integrand has kinks where an example starts to be clipped: Gauss-Legendre
        # then converges like pieces^-2, so many short pieces
        got = float(sm.line_integral(binary.field(C), path, n_nodes=8, pieces=2048))
        assert got == pytest.approx(expected, abs=1e-7)


def test_clipped_softmax_line_integral_depends_on_the_path():
    x = torch.tensor([0.6, 0.8], dtype=F64)
    prob = sm.SoftmaxRegression(x, 0, 3)
    u, v = _plane(prob)
    G = prob.field(0.5)
    a, b = -1.0 * u + 1.5 * v, 1.0 * u + 1.5 * v
    via_up, via_down = torch.stack([a, b + 1.0 * v - u, b]), torch.stack([a, a - 1.0 * v + u, b])
    i_up, i_down = float(sm.line_integral(G, via_up)), float(sm.line_integral(G, via_down))
    assert abs(i_up - i_down) > 1e-2
    # the difference is the circulation of the closed loop a -> -v -> b -> v -> a
    loop = torch.stack([a, a - 1.0 * v + u, b, b + 1.0 * v - u, a])
    assert float(sm.line_integral(G, loop)) == pytest.approx(i_down - i_up, abs=1e-10)
    # batched over paths
    both = sm.line_integral(G, torch.stack([via_up, via_down]))
    assert torch.allclose(both, torch.tensor([i_up, i_down], dtype=F64), atol=1e-14)


def test_binary_softmax_is_the_glp_of_lemma_3_1():
    prob = _problem(K=2, n=6, p=3)
    glp = prob.as_glp()
    th = _theta(prob, 20, scale=3.0)
    assert torch.allclose(glp.objective(th), prob.objective(th), atol=1e-12)
    for C in (0.05, 0.4, 2.0):
        G = prob.clipped_grad(th, C)
        assert torch.allclose(glp.clipped_grad(th, C), G, atol=1e-12)
        t = th.clone().requires_grad_()
        (g,) = torch.autograd.grad(glp.clipped_objective(t, C).sum(), t)
        assert torch.allclose(g, G, atol=1e-10)


# ------------------------------------------------------------------ helpers

def test_class_direction_and_plane_grid():
    x = torch.tensor([3.0, 4.0], dtype=F64)
    u = sm.class_direction(2, x, 3)
    assert torch.allclose(u, torch.tensor([0, 0, 0, 0, 0.6, 0.8], dtype=F64))
    prob = sm.SoftmaxRegression(x, 0, 3)
    z = prob.logits(0.5 * u)[0]
    assert torch.allclose(z, torch.tensor([0.0, 0.0, 2.5], dtype=F64))
    grid = sm.plane_grid(torch.zeros(6, dtype=F64), sm.class_direction(0, x, 3), u,
                         torch.linspace(-1, 1, 5, dtype=F64), torch.linspace(0, 2, 3, dtype=F64))
    assert grid.shape == (3, 5, 6)
    assert torch.allclose(prob.logits(grid)[2, 4, 0], torch.tensor([5.0, 0.0, 10.0], dtype=F64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_device_and_dtype_follow_the_inputs(device, dtype):
    prob = _problem(K=3, device=device, dtype=dtype)
    th = _theta(prob, 2)
    u, v = _plane(prob)
    outs = [prob.per_example_grads(th), prob.clipped_grad(th, 0.5), prob.clipped_grad(th, 0.5, per_class=True),
            sm.jacobian(prob.field(0.5), th), sm.asymmetry(sm.jacobian(prob.field(0.5), th)),
            sm.circulation(prob.field(0.5), th, u, v, 0.5), sm.planar_curl(prob.field(0.5), th, u, v),
            sm.line_integral(prob.field(0.5), torch.stack([th[0], th[1]]))]
    for o in outs:
        assert o.dtype == dtype and o.device.type == torch.device(device).type


# ------------------------------------------------------------------ bad input

def test_bad_input_errors():
    X = torch.randn(4, 3, dtype=F64)
    with pytest.raises(ValueError, match="num_classes"):
        sm.SoftmaxRegression(X, [0, 0, 0, 0], 1)
    with pytest.raises(TypeError, match="num_classes"):
        sm.SoftmaxRegression(X, [0, 0, 0, 0], 2.5)
    with pytest.raises(ValueError, match="y must have shape"):
        sm.SoftmaxRegression(X, [0, 1, 2], 3)
    with pytest.raises(ValueError, match="labels y must lie"):
        sm.SoftmaxRegression(X, [0, 1, 3, 0], 3)
    with pytest.raises(ValueError, match="labels y must lie"):
        sm.SoftmaxRegression(X, [0, -1, 1, 0], 3)
    with pytest.raises(TypeError, match="integer class labels"):
        sm.SoftmaxRegression(X, torch.tensor([0.5, 1, 2, 0]), 3)
    with pytest.raises(TypeError, match="floating-point"):
        sm.SoftmaxRegression(X.long(), [0, 1, 2, 0], 3)
    with pytest.raises(ValueError, match="NaN or inf"):
        sm.SoftmaxRegression(X * float("nan"), [0, 1, 2, 0], 3)
    prob = sm.SoftmaxRegression(X, [0, 1, 2, 0], 3)
    with pytest.raises(ValueError, match=r"\[\.\.\., 9\]"):
        prob.grad(torch.zeros(8, dtype=F64))
    with pytest.raises(ValueError, match=r"\[\.\.\., 9\]"):
        prob.clipped_grad(torch.zeros(3, 3, dtype=F64).T[:2], 1.0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="clip_norm"):
            prob.clipped_grad(torch.zeros(9, dtype=F64), bad)
        with pytest.raises(ValueError, match="clip_norm"):
            prob.field(bad)
    with pytest.raises(ValueError, match="clip_norm"):
        prob.clipped_grad(torch.zeros(2, 9, dtype=F64), torch.tensor([1.0, 0.0], dtype=F64))
    with pytest.raises(ValueError, match="binary"):
        prob.as_glp()
    with pytest.raises(ValueError, match="k must lie"):
        sm.class_direction(3, X[0], 3)
    with pytest.raises(ValueError, match="non-zero"):
        sm.class_direction(0, torch.zeros(3, dtype=F64), 3)
    with pytest.raises(ValueError, match="square"):
        sm.asymmetry(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="n_points"):
        sm.circulation(prob.grad, torch.zeros(9, dtype=F64), torch.eye(9, dtype=F64)[0],
                       torch.eye(9, dtype=F64)[1], 1.0, n_points=4)
    with pytest.raises(ValueError, match="radius"):
        sm.circulation(prob.grad, torch.zeros(9, dtype=F64), torch.eye(9, dtype=F64)[0],
                       torch.eye(9, dtype=F64)[1], -1.0)
    with pytest.raises(ValueError, match="m >= 2"):
        sm.line_integral(prob.grad, torch.zeros(1, 9, dtype=F64))
    with pytest.raises(ValueError, match="map"):
        sm.jacobian(lambda t: t.sum(-1, keepdim=True), torch.zeros(9, dtype=F64))
