"""dpclip_lab: gradient clipping in differentially private optimization, as a lab.

The package grows with the book: every function a chapter uses is importable here.
"""
__version__ = "0.1.0"

from . import data, huberization, losses, optima
from .clipping import clip, clip_factor, clip_per_block, clipped_fraction, safe_norm
from .glp import GLProblem, MeanEstimation
from .per_sample import flat_params, per_sample_grads, unflatten

__all__ = [
    "__version__", "clip", "clip_factor", "clip_per_block", "clipped_fraction", "safe_norm",
    "GLProblem", "MeanEstimation", "per_sample_grads", "unflatten", "flat_params",
    "data", "losses", "huberization", "optima",
]
