"""dpclip_lab: gradient clipping in differentially private optimization, as a lab.

The package grows with the book: every function a chapter uses is importable here.
"""
__version__ = "0.1.0"

from . import (accountants, algorithms, audit, comparison, data, geometry, ghost, huberization, losses, lower_bounds,
               models, noise, numbers, optima, privatizers, sampling, softmax, stability, training)
from .clipping import clip, clip_factor, clip_per_block, clipped_fraction, safe_norm
from .glp import GLProblem, MeanEstimation
from .per_sample import flat_params, per_sample_grads, unflatten
from .algorithms import (DPResult, automatic_dice_sgd, dice_sgd, dp_gd, dp_gd_ldp, dp_sgd,
                         dp_sgd_adaptive_clipping, dp_sgd_gradient_perturbation,
                         dp_sgd_output_perturbation, project_interval, project_l2_ball,
                         select_stationary_iterate, sweep_grid)
from .training import train
from .accountants import (ComposedEvent, EpsilonDeltaEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent,
                          NoOpEvent, PLDAccountant, PoissonSampledEvent, RDPAccountant,
                          SampledWithoutReplacementEvent, SelfComposedEvent, epsilon_curve, get_epsilon,
                          get_noise_multiplier)

__all__ = [
    "__version__", "clip", "clip_factor", "clip_per_block", "clipped_fraction", "safe_norm",
    "GLProblem", "MeanEstimation", "per_sample_grads", "unflatten", "flat_params",
    "get_epsilon", "get_noise_multiplier", "epsilon_curve", "RDPAccountant", "PLDAccountant", "GaussianEvent", "LaplaceEvent",
    "PoissonSampledEvent", "SampledWithoutReplacementEvent", "SelfComposedEvent", "ComposedEvent",
    "EpsilonDeltaEvent", "NonPrivateEvent", "NoOpEvent",
    "dp_gd", "dp_gd_ldp", "dp_sgd", "dice_sgd", "automatic_dice_sgd", "select_stationary_iterate",
    "dp_sgd_output_perturbation", "dp_sgd_gradient_perturbation", "dp_sgd_adaptive_clipping",
    "project_l2_ball", "project_interval", "sweep_grid", "DPResult", "train",
    "accountants", "algorithms", "data", "softmax", "training", "losses", "huberization", "noise", "optima", "privatizers", "sampling",
    "audit", "comparison", "geometry", "ghost", "lower_bounds", "models", "stability",
]
