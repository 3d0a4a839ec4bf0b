"""Small models of dpclip_lab.models work with per-example gradients."""
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
