"""Per-example gradients with torch.func against a Python loop of autograd."""
import pytest
import torch
from torch import nn

import dpclip_lab as dl


def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_matches_loop(reduction, device):
    model = _cnn().to(device).double()
    x = torch.randn(6, 1, 8, 8, dtype=torch.float64, device=device)
    y = torch.randint(0, 10, (6,), device=device)
    loss_fn = nn.CrossEntropyLoss(reduction=reduction)
    G = dl.per_sample_grads(model, loss_fn, x, y)
    n_params = sum(p.numel() for p in model.parameters())
    assert G.shape == (6, n_params)
    for i in range(6):
        model.zero_grad()
        loss_fn(model(x[i:i + 1]), y[i:i + 1]).backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        assert torch.allclose(G[i], ref, atol=1e-10)
    parts = dl.unflatten(model, G)
    assert parts["0.weight"].shape == (6, 4, 1, 3, 3)
    assert torch.equal(parts["4.bias"], G[:, -10:])
    assert dl.flat_params(model).shape == (n_params,)


def test_errors():
    model = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="same batch size"):
        dl.per_sample_grads(model, nn.functional.cross_entropy, torch.randn(4, 3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="n_params = 8"):
        dl.unflatten(model, torch.zeros(5))
    bad = nn.Linear(3, 2)
    with torch.no_grad():
        bad.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="per-example gradients contains"):
        dl.per_sample_grads(bad, nn.functional.cross_entropy, torch.randn(4, 3), torch.zeros(4, dtype=torch.long))


def test_buffers_and_frozen_parameters_come_from_the_module():
    # Only trainable parameters are passed to functional_call; BatchNorm's running
    # statistics (eval mode: no batch coupling) and a frozen layer are read from the module.
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 3)).double()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    model.eval()
    model[0].requires_grad_(False)
    x = torch.randn(7, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (7,))
    G = dl.per_sample_grads(model, nn.functional.cross_entropy, x, y)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert G.shape == (7, sum(p.numel() for p in trainable))
    for i in range(7):
        grads = torch.autograd.grad(nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), trainable)
        assert torch.allclose(G[i], torch.cat([g.reshape(-1) for g in grads]), atol=1e-12)


def test_finite_check_is_exact():
    """The per-example gradients' check (the shared check_finite_tensor: one sum, a scan only if it is not finite)."""
    from dpclip_lab._validation import check_finite_tensor

    def _check_finite(t):
        return check_finite_tensor(t, "per-example gradients")
    huge = torch.full((4, 3), 3e38)  # finite entries whose float32 sum overflows: no error
    assert _check_finite(huge) is huge
    bad = torch.zeros(4, 3)
    bad[2, 1] = float("inf")
    with pytest.raises(ValueError, match="1 NaN or inf"):
        _check_finite(bad)


# -- issue #14, item 9a: errors that name the problem -----------------------------------------
def test_per_sample_errors_name_the_problem():
    model = nn.Sequential(nn.Linear(3, 2))
    x, y = torch.randn(4, 3), torch.randint(0, 2, (4,))
    loss = nn.CrossEntropyLoss()
    with pytest.raises(ValueError, match="no examples"):
        dl.per_sample_grads(model, loss, x[:0], y[:0])
    with pytest.raises(TypeError, match="dtype torch.float64.*float32"):
        dl.per_sample_grads(model, loss, x.double(), y)
    bn = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="GroupNorm"):
        dl.per_sample_grads(bn, loss, x, y)
    bn.eval()                                           # running statistics: per-example is fine
    assert dl.per_sample_grads(bn, loss, x, y).shape[0] == 4


def test_train_names_a_dtype_mix():
    from dpclip_lab.training import train
    model = nn.Sequential(nn.Linear(3, 2))              # float32 parameters
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randint(0, 2, (8,))
    with pytest.raises(TypeError, match="dtype"):       # used to blame theta0's shape
        train(model, nn.functional.cross_entropy, x, y, steps=1, lr=0.1, clip_norm=1.0,
              noise_multiplier=1.0, batch_size=4, seed=0, progress=False)
