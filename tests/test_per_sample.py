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
