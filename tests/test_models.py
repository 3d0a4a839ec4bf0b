"""Small models of dpclip_lab.models work with per-example gradients."""
import pytest
import torch

import dpclip_lab as dl
from dpclip_lab import models

torch.set_num_threads(1)


def test_tiny_cnn_per_sample_grads_match_loop():
    torch.manual_seed(0)
    m = models.TinyCNN(channels=4).double()
    x = torch.rand(5, 1, 8, 8, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3, 4])
    G = dl.per_sample_grads(m, torch.nn.functional.cross_entropy, x, y)
    assert G.shape[0] == 5
    m.zero_grad()
    torch.nn.functional.cross_entropy(m(x[2:3]), y[2:3]).backward()
    ref = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    assert torch.allclose(G[2], ref, atol=1e-10)


def test_e2e_like_and_char_model():
    ids, vocab, texts = models.e2e_like(20, seed=1, length=80)
    assert ids.shape == (20, 80) and len(texts) == 20
    assert texts == models.e2e_like(20, seed=1, length=80)[2]          # deterministic
    m = models.CharModel(len(vocab), embed=4, hidden=8, context=3)
    logits = m(ids[:3])
    assert logits.shape == (3, 80, len(vocab))
    # causal: changing a later character does not change earlier logits
    ids2 = ids[:1].clone()
    ids2[0, 40] = (ids2[0, 40] % (len(vocab) - 1)) + 1
    assert torch.allclose(m(ids2)[0, :40], m(ids[:1])[0, :40])
    G = dl.per_sample_grads(m, models.sequence_loss, ids[:4], ids[:4])
    assert G.shape[0] == 4 and torch.isfinite(G).all()


def test_sequence_loss_per_example_is_the_loss_of_each_sequence_alone(monkeypatch):
    """The batched per-example losses the layer-wise oracle sums equal sequence_loss on each sequence
    (including padding, and NaN for a sequence of padding only), and the oracle's sums are exact."""
    from dpclip_lab.algorithms.oracles import CallableOracle
    from dpclip_lab.ghost import ModuleOracle
    from dpclip_lab.per_sample import flat_params
    from dpclip_lab.privatizers import clip_scale
    from dpclip_lab.sampling import Batch
    from dpclip_lab.training import module_grad_fn
    torch.manual_seed(0)
    ids = torch.randint(1, 9, (6, 12))
    ids[1, 7:] = 0                       # padded tail
    ids[2, 1:] = 0                       # no target at all
    logits = torch.randn(6, 12, 9, dtype=torch.float64)
    per = models.sequence_loss.per_example(logits, ids)
    alone = torch.stack([models.sequence_loss(logits[i:i + 1], ids[i:i + 1]) for i in range(6)])
    assert per.shape == (6,) and torch.isnan(per[2]) and torch.isnan(alone[2])
    keep = torch.tensor([0, 1, 3, 4, 5])
    assert torch.allclose(per[keep], alone[keep], rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="ids"):
        models.sequence_loss.per_example(logits, ids[:, :-1])
    m = models.CharModel(9, embed=4, hidden=8, context=3).double()
    X = ids[[0, 1, 3, 4, 5]]
    used = []
    per_example = models.sequence_loss.per_example
    monkeypatch.setattr(models.sequence_loss, "per_example", lambda o, t: used.append(1) or per_example(o, t))
    fast = ModuleOracle(m, models.sequence_loss, X, X)
    ref = CallableOracle(module_grad_fn(m, models.sequence_loss, X, X))
    batch = Batch(torch.arange(5), None, 5.0, torch.tensor([5]))
    theta = flat_params(m).unsqueeze(0)
    C = torch.tensor([0.05], dtype=torch.float64)
    a = fast.reduce(theta, batch, lambda n: clip_scale(n, C), need_raw=True)
    b = ref.reduce(theta, batch, lambda n: clip_scale(n, C), need_raw=True)
    for name in ("scaled", "raw", "norms"):
        x, y = getattr(a, name), getattr(b, name)
        assert float((x - y).norm() / y.norm()) < 1e-10, name
    assert fast.use_ghost and fast.fallbacks == 0 and len(used) == 1  # the oracle summed per_example, no vmap
