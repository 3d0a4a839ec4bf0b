"""Small models for the book's network experiments (DiceSGD in practice, Part IV).

Every model here works with :func:`dpclip_lab.per_sample_grads` (``torch.func``
``vmap(grad(...))``): no batch-coupling layers (no BatchNorm), no cuDNN RNNs.

* :class:`TinyCNN` — a two-layer convolutional classifier for 8×8 digits
  (scikit-learn's, ``dl.data.digits(images=True)``) or any ``[1, H, W]`` images.
* :class:`CharModel` — a character-level next-character model over a fixed
  context window (embedding → one causal convolution → linear), a small stand-in
  for the GPT-2 language model of the DiceSGD paper's E2E experiment.
* :func:`e2e_like` — a synthetic table-to-text data set in the spirit of E2E NLG
  (restaurant attributes rendered as a sentence), encoded as characters.
* :func:`sequence_loss` — mean next-character cross-entropy per sequence.

References
----------
Zhang et al. (2024), DiceSGD, §4 (ViT on CIFAR, GPT-2 on E2E). Novikova, Dušek,
Rieser (2017), the E2E NLG data set (we only imitate its format).
"""
from __future__ import annotations

import torch
from torch import nn

from ._validation import check_int

__all__ = ["TinyCNN", "CharModel", "e2e_like", "sequence_loss", "CharVocab"]


class TinyCNN(nn.Module):
    """Lab utility: a small CNN,
    ``conv(1→c, 3×3) → ReLU → avg-pool 2 → conv(c→c, 3×3) → ReLU → global avg → linear``.

    A laptop-scale stand-in for the ViT of Zhang et al. (2024), §4 (Table 3).

    About ``10 c + 9 c² + c · classes`` parameters (c = 8: about 750) — small
    enough that per-example gradients of a batch cost milliseconds on a CPU.
    """

    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        c = check_int(channels, "channels", minimum=1)
        k = check_int(classes, "classes", minimum=2)
        self.conv1 = nn.Conv2d(1, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.head = nn.Linear(c, k)

    def forward(self, x):
        squeeze = x.dim() == 3                       # one image [1, H, W] (inside vmap)
        if squeeze:
            x = x.unsqueeze(0)
        h = torch.relu(self.conv1(x))
        h = nn.functional.avg_pool2d(h, 2)
        h = torch.relu(self.conv2(h))
        out = self.head(h.mean(dim=(-2, -1)))
        return out[0] if squeeze else out


class CharVocab:
    """Lab utility: characters ↔ integer ids (id 0 is padding)."""

    def __init__(self, texts):
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        chars = sorted({ch for t in texts for ch in t})
        if not chars:
            raise ValueError("texts must hold at least one character (the vocabulary would be empty)")
        self.itos = ["\0"] + chars
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def encode(self, text: str, length: int) -> torch.Tensor:
        ids = [self.stoi[ch] for ch in text[:length]]
        return torch.tensor(ids + [0] * (length - len(ids)), dtype=torch.long)


_NAMES = ["The Eagle", "Blue Spice", "The Mill", "Aromi", "Cotto", "Zizzi", "The Punter", "Loch Fyne"]
_FOODS = ["French", "Italian", "Chinese", "Indian", "English", "Japanese"]
_AREAS = ["riverside", "city centre"]
_PRICES = ["cheap", "moderate", "high"]


def e2e_like(n: int, *, seed: int = 0, length: int = 72):
    """Lab utility: a synthetic E2E-style table-to-text set: ``(ids [n, length], vocab, texts)``.

    Imitates the format of the E2E NLG data (Novikova, Dušek & Rieser (2017)) used in
    Zhang et al. (2024), §4 (Fig. 3).

    Each record is ``"<name>|<food>|<area>|<price>=<sentence>"`` where the sentence
    renders the attributes with one of a few templates; a model that learns the
    format predicts the sentence from the table part. Deterministic given ``seed``.
    """
    n = check_int(n, "n", minimum=1)
    g = torch.Generator().manual_seed(int(seed))
    pick = lambda seq: seq[int(torch.randint(len(seq), (1,), generator=g))]  # noqa: E731
    templates = ["{n} serves {f} food in the {a} area at {p} prices.",
                 "In the {a} area, {n} offers {p}-priced {f} food.",
                 "{n} is a {p} {f} place in the {a}."]
    texts = []
    for _ in range(n):
        name, food, area, price = pick(_NAMES), pick(_FOODS), pick(_AREAS), pick(_PRICES)
        sent = pick(templates).format(n=name, f=food, a=area, p=price)
        texts.append(f"{name}|{food}|{area}|{price}={sent}")
    vocab = CharVocab(texts)
    ids = torch.stack([vocab.encode(t, length) for t in texts])
    return ids, vocab, texts


class CharModel(nn.Module):
    """Lab utility: next-character model: embedding → causal conv (window ``context``) → ReLU → linear.

    ``forward(ids [L] or [b, L]) -> logits [.., L, V]``; position ``t`` sees
    characters ``t − context + 1 … t`` and predicts character ``t + 1``.
    """

    def __init__(self, vocab_size: int, *, embed: int = 16, hidden: int = 64, context: int = 6):
        super().__init__()
        self.context = check_int(context, "context", minimum=1)
        self.emb = nn.Embedding(check_int(vocab_size, "vocab_size", minimum=2), check_int(embed, "embed", minimum=1))
        self.conv = nn.Conv1d(embed, check_int(hidden, "hidden", minimum=1), self.context)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, ids):
        squeeze = ids.dim() == 1
        if squeeze:
            ids = ids.unsqueeze(0)
        h = self.emb(ids).transpose(1, 2)                                 # [b, E, L]
        h = nn.functional.pad(h, (self.context - 1, 0))                   # causal
        # [b, L, H], made contiguous before the ReLU: its backward then reads the gradient and its saved
        # output in one layout (after the transpose they differed, and that backward took a quarter of a
        # plain SGD step; same values). The linear layer copied the transposed view anyway.
        h = torch.relu(self.conv(h).transpose(1, 2).contiguous())
        out = self.out(h)
        return out[0] if squeeze else out


def _check_sequences(logits, ids):
    if logits.dim() == 2:
        logits, ids = logits.unsqueeze(0), ids.unsqueeze(0)
    if logits.dim() != 3 or ids.shape != logits.shape[:2]:
        raise ValueError(f"logits must be [batch, length, vocab] and ids [batch, length] with the same batch and "
                         f"length, got {tuple(logits.shape)} and {tuple(ids.shape)}")
    return logits[:, :-1], ids[:, 1:]


def sequence_loss(logits, ids):
    """Lab utility: mean next-character cross-entropy of each sequence, padding ignored; a scalar for the batch.

    A sequence of padding only has no target and gives NaN (no data-dependent check here: the
    function runs under ``torch.func.vmap`` for per-example gradients).
    ``sequence_loss.per_example(logits, ids)`` gives the loss of each sequence alone, ``[b]``, in one
    batched pass (what the layer-wise oracle :class:`dpclip_lab.ghost.ModuleOracle` sums, instead of
    ``vmap``-ing this function over the batch: 7 % of a CharModel step at batch 64).
    """
    pred, target = _check_sequences(logits, ids)
    return nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), ignore_index=0)


def _sequence_loss_per_example(logits, ids):
    """``[sequence_loss(logits[i], ids[i]) for i]``: per sequence, the summed cross-entropy of its
    non-padding targets over their number (0 / 0 = NaN for a sequence of padding only)."""
    pred, target = _check_sequences(logits, ids)
    ce = nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), ignore_index=0,
                                     reduction="none").view(target.shape)
    return ce.sum(1) / (target != 0).sum(1)


sequence_loss.per_example = _sequence_loss_per_example
