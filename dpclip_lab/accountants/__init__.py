"""Privacy accountants: events (what happened) and accountants (how to count it).

* :mod:`.events` — immutable privacy events (``GaussianEvent``, ``PoissonSampledEvent``, ...).
* :mod:`.gaussian` — classic and analytic Gaussian mechanism (Balle & Wang 2018).
* :mod:`.rdp` — Rényi DP of (subsampled) Gaussian and Laplace mechanisms; ``RDPAccountant``.
* :mod:`.conversions` — RDP → (ε, δ), classic and improved.
* :mod:`.pld` — tight accountant: privacy-loss distributions by FFT; ``PLDAccountant``.
* :mod:`.calibration` — ``get_epsilon`` and ``get_noise_multiplier`` (Opacus names), and
  ``epsilon_curve`` (ε after every step of a run).
* :mod:`.paper_bounds` — the four papers' own closed forms and noise conventions.
"""
from .calibration import (ACCOUNTANTS, epsilon_curve, get_epsilon, get_noise_multiplier,
                          make_accountant)
from .conversions import (rdp_to_epsilon, rdp_to_epsilon_batch, rdp_to_epsilon_classic,
                          rdp_to_epsilon_improved)
from .events import (ComposedEvent, DpEvent, EpsilonDeltaEvent, GaussianEvent, LaplaceEvent,
                     NonPrivateEvent, NoOpEvent, PoissonSampledEvent,
                     SampledWithoutReplacementEvent, SelfComposedEvent)
from .gaussian import (analytic_gaussian_delta, analytic_gaussian_epsilon,
                       analytic_gaussian_sigma, classic_gaussian_sigma)
from .pld import PLDAccountant
from .rdp import (DEFAULT_ORDERS, RDPAccountant, rdp_gaussian, rdp_laplace,
                  rdp_poisson_subsampled_gaussian, rdp_sampled_without_replacement_gaussian)
from . import paper_bounds

__all__ = [
    "get_epsilon", "get_noise_multiplier", "epsilon_curve", "make_accountant", "ACCOUNTANTS",
    "RDPAccountant", "PLDAccountant",
    "DpEvent", "GaussianEvent", "LaplaceEvent", "PoissonSampledEvent",
    "SampledWithoutReplacementEvent", "SelfComposedEvent", "ComposedEvent",
    "EpsilonDeltaEvent", "NonPrivateEvent", "NoOpEvent",
    "classic_gaussian_sigma", "analytic_gaussian_delta", "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "DEFAULT_ORDERS", "rdp_gaussian", "rdp_laplace", "rdp_poisson_subsampled_gaussian",
    "rdp_sampled_without_replacement_gaussian",
    "rdp_to_epsilon", "rdp_to_epsilon_classic", "rdp_to_epsilon_improved",
    "rdp_to_epsilon_batch",
    "paper_bounds",
]
