"""Scalar losses of generalized linear problems.

A generalized linear problem (GLP; Song, Thakkar, Thakurta 2021, §2) has
per-example loss ``ℓ(⟨θ, x⟩; y)``: a scalar function ``f(z; y)`` of the margin
``z = ⟨θ, x⟩``. Its gradient in θ is ``f'(z; y) · x``, so a GLP needs no autograd:
each loss here gives ``value`` and ``derivative`` in closed form.

Each loss also carries what the papers' analyses need:

* ``lipschitz``: ``sup_z |f'(z; y)|`` (``inf`` if unbounded). A per-example
  gradient then has norm at most ``lipschitz · ||x||`` (Song et al. §2).
* ``holder_alpha``, ``holder_constant``: ``|f'(a) − f'(b)| ≤ L_f |a − b|^α``
  (α-Hölder smoothness of Wang, Lei, Ying, Zhang, eq. (1)); ``holder_alpha = 1``
  is ordinary smoothness, ``0`` is bounded variation of the derivative.
* ``convex``: whether Lemma 3.1 (Huberization) applies.
* ``derivative_inverse(u, y)``: the margin where ``f'`` crosses ``u`` (used to
  build the clipped loss of Lemma 3.1 in closed form, see :mod:`dpclip_lab.huberization`).

All methods broadcast over tensors of any shape and keep device and dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._validation import check_interval, check_positive

__all__ = [
    "Loss", "Logistic", "Squared", "QNormRegression", "QHinge", "Huber", "Savage", "Tangent",
]

_INF = math.inf


def _labels_pm1(y: torch.Tensor, name: str) -> None:
    if not bool(((y == 1) | (y == -1)).all()):
        raise ValueError(f"{name} needs labels y in {{-1, +1}}; got values "
                         f"{torch.unique(y)[:5].tolist()}")


class Loss:
    """Lab utility: Base class: a scalar loss ``f(z; y)`` of the margin ``z = ⟨θ, x⟩``."""

    name: str = "loss"
    lipschitz: float = _INF
    holder_alpha: float = 1.0
    holder_constant: float = _INF
    convex: bool = True
    needs_pm1_labels: bool = False

    def value(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def derivative(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def derivative_inverse(self, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """A margin ``z`` with ``f'(z; y) = u`` for ``u`` strictly inside the range of ``f'``.

        Outside that range returns ``-inf`` (``u`` at or below ``inf f'``) or
        ``+inf`` (``u`` at or above ``sup f'``). At a kink (hinge, absolute loss)
        the kink is returned for every ``u`` in the subdifferential.
        """
        raise NotImplementedError(f"{type(self).__name__} has no closed-form derivative inverse")

    def check_labels(self, y: torch.Tensor) -> None:
        if self.needs_pm1_labels:
            _labels_pm1(y, type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Logistic(Loss):
    """Logistic loss ``f(z; y) = log(1 + exp(−y z))`` with ``y ∈ {−1, +1}``.

    Source: Song, Thakkar & Thakurta (2021), Thm 3.2 (the logistic lower bound).

    ``f'(z; y) = −y σ(−y z)``, so ``|f'| < 1`` (1-Lipschitz) and ``f`` is
    1/4-smooth. Song et al. Thm 3.2 uses it for the Ω(1) clipping lower bound.
    """

    name = "logistic"
    lipschitz = 1.0
    holder_alpha = 1.0
    holder_constant = 0.25
    needs_pm1_labels = True

    def value(self, z, y):
        return F.softplus(-y * z)

    def derivative(self, z, y):
        return -y * torch.sigmoid(-y * z)

    def derivative_inverse(self, u, y):
        # u = -y σ(-y z)  <=>  σ(-y z) = -u y  <=>  z = -y logit(-u y), for -u y in (0, 1).
        s = -u * y
        inside = (s > 0) & (s < 1)
        s_safe = torch.where(inside, s, torch.full_like(s, 0.5))
        z = -y * torch.logit(s_safe)
        # outside the range: u <= inf f' -> -inf, u >= sup f' -> +inf
        lo = torch.where(y > 0, torch.full_like(u, -1.0), torch.zeros_like(u))
        return torch.where(inside, z, torch.where(u <= lo, -_INF, _INF) * torch.ones_like(z))


@dataclass(frozen=True, repr=True)
class Squared(Loss):
    """Squared loss ``f(z; y) = scale · (z − y)²``.

    Source: Chen, Wu & Hong (2020), Examples 1–2.

    ``scale=0.5`` (default) is the usual ``½(z − y)²`` of Chen et al. Examples 1–2;
    ``scale=1`` is the ``(θ − x)²`` of Song et al. Thm B.4. Not Lipschitz on ℝ.
    """

    scale: float = 0.5
    name = "squared"

    def __post_init__(self):
        check_positive(self.scale, "scale")

    @property
    def holder_constant(self):  # f'' = 2·scale
        return 2.0 * self.scale

    def value(self, z, y):
        return self.scale * (z - y) ** 2

    def derivative(self, z, y):
        return 2.0 * self.scale * (z - y)

    def derivative_inverse(self, u, y):
        return y + u / (2.0 * self.scale)


def _check_q(q: float) -> float:
    return check_interval(q, "q", 1.0, 2.0)


def _signed_power(t: torch.Tensor, a: float) -> torch.Tensor:
    """sign(t)·|t|^a, with 0^0 = 0 (the subgradient 0 at a kink)."""
    if a == 0.0:
        return torch.sign(t)
    return torch.sign(t) * t.abs() ** a


@dataclass(frozen=True, repr=True)
class _QPowerLoss(Loss):
    """The q-power losses of Wang et al. §1, ``q ∈ [1, 2]``: (q−1)-Hölder smooth, Lipschitz only at q = 1."""

    q: float = 1.5

    def __post_init__(self):
        _check_q(self.q)

    @property
    def holder_alpha(self):
        return self.q - 1.0

    @property
    def lipschitz(self):
        return 1.0 if self.q == 1.0 else _INF


@dataclass(frozen=True, repr=True)
class QNormRegression(_QPowerLoss):
    """q-norm regression loss ``f(z; y) = |y − z|^q``, ``q ∈ [1, 2]`` (Wang et al. §1).

    Source: Wang, Lei, Ying & Zhang (2022), §1.

    (q−1)-Hölder smooth: ``|f'(a) − f'(b)| ≤ q·2^{2−q} |a − b|^{q−1}``
    (because ``t ↦ sign(t)|t|^β`` is β-Hölder with constant ``2^{1−β}``).
    ``q = 1`` is the absolute loss (1-Lipschitz; subgradient 0 taken at the kink).
    """

    q: float = 1.5
    name = "q-norm regression"

    @property
    def holder_constant(self):
        return self.q * 2.0 ** (2.0 - self.q)

    def value(self, z, y):
        return (z - y).abs() ** self.q

    def derivative(self, z, y):
        return self.q * _signed_power(z - y, self.q - 1.0)

    def derivative_inverse(self, u, y):
        if self.q == 1.0:
            inside = u.abs() < 1
            return torch.where(inside, y * torch.ones_like(u), torch.sign(u) * _INF)
        return y + _signed_power(u / self.q, 1.0 / (self.q - 1.0))


@dataclass(frozen=True, repr=True)
class QHinge(_QPowerLoss):
    """q-norm hinge loss ``f(z; y) = (1 − y z)_+^q``, ``q ∈ [1, 2]``, ``y ∈ {−1, +1}``.

    Source: Wang, Lei, Ying & Zhang (2022), §1.

    The loss of the q-norm soft-margin SVM (Wang et al. §1). (q−1)-Hölder smooth
    with constant q (``t ↦ t_+^β`` is β-Hölder with constant 1). ``q = 1`` is the
    hinge loss (1-Lipschitz; subgradient 0 taken at the kink).
    """

    q: float = 1.5
    name = "q-norm hinge"
    needs_pm1_labels = True

    @property
    def holder_constant(self):
        return self.q

    def value(self, z, y):
        return torch.clamp(1.0 - y * z, min=0.0) ** self.q

    def derivative(self, z, y):
        m = torch.clamp(1.0 - y * z, min=0.0)
        inner = (m > 0).to(z.dtype) if self.q == 1.0 else m ** (self.q - 1.0)
        return -y * self.q * inner

    def derivative_inverse(self, u, y):
        # f'(z) = -y q (1 - y z)_+^{q-1} takes values of sign -y only, so with
        # s = -u y: s > 0 is reached at z = y (1 - (s/q)^{1/(q-1)}); s <= 0 never
        # (the flat side). For q = 1, f' jumps from -y to 0 at the kink z = y.
        s = -u * y
        if self.q == 1.0:
            inside = (s > 0) & (s < 1)
            z = y * torch.ones_like(u)
        else:
            inside = s > 0
            z = y * (1.0 - torch.clamp(s, min=0.0).div(self.q) ** (1.0 / (self.q - 1.0)))
        return torch.where(inside, z, torch.sign(u) * _INF)


@dataclass(frozen=True, repr=True)
class Huber(Loss):
    """Huber loss of the residual: ``½(z−y)²`` if ``|z−y| ≤ δ`` else ``δ(|z−y| − δ/2)`` (Huber 1964).

    Source: the Huber (1964) loss, which clipping makes of a GLP loss: Song, Thakkar & Thakurta (2021), Lemma 3.1.

    ``f'(z) = clip(z − y, −δ, δ)``: δ-Lipschitz and 1-smooth. DiceSGD App. B.1
    builds its constant-bias example from it.
    """

    delta: float = 1.0
    name = "huber"

    def __post_init__(self):
        check_positive(self.delta, "delta")

    holder_alpha = 1.0
    holder_constant = 1.0

    @property
    def lipschitz(self):
        return float(self.delta)

    def value(self, z, y):
        r = (z - y).abs()
        return torch.where(r <= self.delta, 0.5 * r ** 2, self.delta * (r - 0.5 * self.delta))

    def derivative(self, z, y):
        return torch.clamp(z - y, -self.delta, self.delta)

    def derivative_inverse(self, u, y):
        inside = u.abs() < self.delta
        return torch.where(inside, y + u, torch.sign(u) * _INF * torch.ones_like(u))


def _grid_sup(fn, lo=-60.0, hi=60.0, num=2_000_001) -> float:
    """sup |fn| on a fine grid, rounded up by 0.1% (for constants with no closed form)."""
    v = torch.linspace(lo, hi, num, dtype=torch.float64)
    return float(fn(v).abs().max()) * 1.001


class Savage(Loss):
    """Savage loss ``φ(v) = (1 + e^{2v})^{−2}`` of the margin ``v = y z`` (Masnadi-Shirazi & Vasconcelos 2008).

    A smooth, bounded, **non-convex** robust classification loss, the kind of
    non-convex GLP of Song et al. §4.2. ``φ(v) = σ(−2v)²`` and
    ``φ'(v) = −4 σ(2v) σ(−2v)²``, with ``sup|φ'| = 16/27`` (at σ(2v) = 1/3).
    """

    name = "savage"
    convex = False
    lipschitz = 16.0 / 27.0
    needs_pm1_labels = True
    holder_alpha = 1.0

    @property
    def holder_constant(self):
        # φ'' = 8 s (1-s)^2 (3s - 1)... computed on a grid and rounded up.
        def second(v):
            s = torch.sigmoid(2 * v)
            return 8.0 * s * (1 - s) ** 2 * (3 * s - 1)
        return _grid_sup(second, -20, 20, 400_001)

    def value(self, z, y):
        return torch.sigmoid(-2.0 * y * z) ** 2

    def derivative(self, z, y):
        v = y * z
        return y * (-4.0 * torch.sigmoid(2.0 * v) * torch.sigmoid(-2.0 * v) ** 2)


class Tangent(Loss):
    """Tangent loss ``φ(v) = (2 arctan(v) − 1)²`` of the margin ``v = y z`` (Masnadi-Shirazi et al. 2010).

    Source: Masnadi-Shirazi et al. (2010) (the tangent loss); a non-convex GLP loss, as in Song, Thakkar & Thakurta (2021), Thm 4.2.

    Smooth, **non-convex**, bounded derivative: ``φ'(v) = 4(2 arctan v − 1)/(1 + v²)``.
    """

    name = "tangent"
    convex = False
    needs_pm1_labels = True
    holder_alpha = 1.0

    @property
    def lipschitz(self):
        return _grid_sup(lambda v: 4 * (2 * torch.atan(v) - 1) / (1 + v ** 2), -20, 20, 400_001)

    @property
    def holder_constant(self):
        def second(v):
            return (8 / (1 + v ** 2) ** 2) - 8 * v * (2 * torch.atan(v) - 1) / (1 + v ** 2) ** 2
        return _grid_sup(second, -20, 20, 400_001)

    def value(self, z, y):
        return (2.0 * torch.atan(y * z) - 1.0) ** 2

    def derivative(self, z, y):
        v = y * z
        return y * 4.0 * (2.0 * torch.atan(v) - 1.0) / (1.0 + v ** 2)
