"""Privacy events: *what happened* to the data, as small immutable values.

An event says which mechanism touched the data (a Gaussian, a Laplace, an
(ε, δ)-DP step with a known guarantee), how the data was sampled for it, and how
often it ran. It says nothing about *how to account* for it: that is the job of
an accountant (:class:`~dpclip_lab.accountants.RDPAccountant`,
:class:`~dpclip_lab.accountants.PLDAccountant`). The split follows Google's
``dp_accounting`` (``GaussianDpEvent``, ``PoissonSampledDpEvent``, ...).

Conventions (the same as Opacus and Abadi et al. 2016):

* ``noise_multiplier`` z is the ratio of the noise standard deviation to the
  ℓ2-sensitivity. For DP-SGD, noise of std ``z * C`` is added to the SUM of the
  per-example gradients clipped to norm ``C``.
* :class:`PoissonSampledEvent` uses the add/remove-one neighbouring relation
  (sensitivity of the clipped sum = C).
* :class:`SampledWithoutReplacementEvent` uses the replace-one relation
  (Wang, Balle, Kasiviswanathan 2019), for which the sensitivity of a clipped
  sum is 2C: there ``noise_multiplier`` is std / (replace-one sensitivity), i.e.
  ``std / (2 C)`` for clipped gradients.

References
----------
Google differential-privacy team, ``dp_accounting`` (python/dp_accounting/dp_event.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .._validation import check_int, check_nonnegative, check_positive, check_probability

__all__ = [
    "DpEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "PoissonSampledEvent",
    "SampledWithoutReplacementEvent",
    "SelfComposedEvent",
    "ComposedEvent",
    "EpsilonDeltaEvent",
    "NonPrivateEvent",
    "NoOpEvent",
]


class DpEvent:
    """Lab utility: Base class of all privacy events (a marker; events are frozen dataclasses)."""


@dataclass(frozen=True)
class GaussianEvent(DpEvent):
    """Gaussian mechanism with noise std ``noise_multiplier`` × sensitivity.

    Source: the Gaussian mechanism of Balle & Wang (2018), Thm 8.

    ``noise_multiplier = 0`` is allowed and means "no noise" (ε = inf).
    """

    noise_multiplier: float

    def __post_init__(self):
        object.__setattr__(self, "noise_multiplier",
                           check_nonnegative(self.noise_multiplier, "noise_multiplier"))


@dataclass(frozen=True)
class LaplaceEvent(DpEvent):
    """Laplace mechanism with scale ``noise_multiplier`` × ℓ1-sensitivity.

    Source: Mironov (2017), Prop. 6 (RDP of the Laplace mechanism).

    A single Laplace step with scale b (sensitivity 1) is (1/b)-DP.
    """

    noise_multiplier: float

    def __post_init__(self):
        object.__setattr__(self, "noise_multiplier",
                           check_positive(self.noise_multiplier, "noise_multiplier"))


@dataclass(frozen=True)
class PoissonSampledEvent(DpEvent):
    """Run ``event`` on a Poisson sample: each record is kept with prob. ``sample_rate``.

    Source: Mironov, Talwar & Zhang (2019), Thm 5 and Sec. 3.3; Abadi et al. (2016), Alg. 1.

    Neighbouring relation: add/remove one record.
    """

    sample_rate: float
    event: DpEvent

    def __post_init__(self):
        object.__setattr__(self, "sample_rate", check_probability(self.sample_rate, "sample_rate"))
        _check_event(self.event, "event")


@dataclass(frozen=True)
class SampledWithoutReplacementEvent(DpEvent):
    """Run ``event`` on a uniformly random subset of exactly ``sample_size`` of ``n`` records.

    Source: Wang, Balle & Kasiviswanathan (2019), Thm 9 (RDP of sampling without replacement).

    Neighbouring relation: replace one record (``n`` is public).
    """

    n: int
    sample_size: int
    event: DpEvent

    def __post_init__(self):
        n = check_int(self.n, "n", minimum=1)
        m = check_int(self.sample_size, "sample_size", minimum=1)
        if m > n:
            raise ValueError(f"sample_size must be <= n, got sample_size={m} > n={n}")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "sample_size", m)
        _check_event(self.event, "event")

    @property
    def sample_rate(self) -> float:
        """The sampling proportion ``sample_size / n``."""
        return self.sample_size / self.n


@dataclass(frozen=True)
class SelfComposedEvent(DpEvent):
    """Lab utility: ``event`` run ``count`` times (adaptively)."""

    event: DpEvent
    count: int

    def __post_init__(self):
        _check_event(self.event, "event")
        object.__setattr__(self, "count", check_int(self.count, "count", minimum=0))


@dataclass(frozen=True)
class ComposedEvent(DpEvent):
    """Lab utility: The events in ``events`` run one after the other (adaptively)."""

    events: tuple

    def __post_init__(self):
        events = tuple(self.events)
        for i, e in enumerate(events):
            _check_event(e, f"events[{i}]")
        object.__setattr__(self, "events", events)


@dataclass(frozen=True)
class EpsilonDeltaEvent(DpEvent):
    """Lab utility: A step whose (ε, δ)-DP guarantee is given (e.g. report-noisy-min, ε-DP with δ=0)."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "epsilon", check_nonnegative(self.epsilon, "epsilon"))
        d = check_nonnegative(self.delta, "delta")
        if d >= 1:
            raise ValueError(f"delta must lie in [0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", d)


@dataclass(frozen=True)
class NonPrivateEvent(DpEvent):
    """Lab utility: The data was released without protection: ε = inf from now on."""


@dataclass(frozen=True)
class NoOpEvent(DpEvent):
    """Lab utility: Nothing data-dependent happened (ε and δ unchanged)."""


def _check_event(event, name: str) -> None:
    if not isinstance(event, DpEvent):
        raise TypeError(f"{name} must be a DpEvent, got {type(event).__name__}")


def flatten(event: DpEvent, count: int = 1):
    """Yield ``(leaf_event, count)`` pairs, unrolling Composed and SelfComposed events.

    Leaves are everything except :class:`ComposedEvent` and :class:`SelfComposedEvent`.
    """
    _check_event(event, "event")
    if isinstance(event, SelfComposedEvent):
        if event.count and count:
            yield from flatten(event.event, count * event.count)
    elif isinstance(event, ComposedEvent):
        for e in event.events:
            yield from flatten(e, count)
    elif count:
        yield event, count


def unsupported(event: DpEvent, accountant: str) -> ValueError:
    """The error raised for an event an accountant cannot handle."""
    return ValueError(
        f"{accountant} does not support the event {event!r} "
        f"({type(event).__name__}); supported: see the {accountant} docstring"
    )
