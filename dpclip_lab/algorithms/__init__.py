"""Every optimization algorithm of the four papers, as compositions of shared parts.

Each method is (sampling) × (per-example gradients) × (privatizer) × (update
rule) × (release), run by the one loop :func:`dpclip_lab.algorithms.loop.run`:

======================================  ==========  ============================  =========  ===============
method                                  sampling    privatizer                    update     release
======================================  ==========  ============================  =========  ===============
:func:`dp_gd` (Song Alg. 1)             full        clip + Gaussian               SGD + Π    average
:func:`dp_gd_ldp` (Song App. D)         full        clip + per-example Gaussian   SGD + Π    average
:func:`select_stationary_iterate`       —           —                             —          noisy argmin
(Song Thm 4.2)
:func:`dp_sgd` (Abadi; Chen eq. 3, 8;   any         clip (+ pre-clip noise)       SGD/Adam   last / average
DiceSGD Alg. 1)                                     + Gaussian
:func:`dice_sgd` (DiceSGD Alg. 2–4)     any         clip + error feedback         SGD/Adam   last
                                                    + Gaussian
:func:`dp_sgd_output_perturbation`      1 w/ repl.  none                          SGD + Π    noisy average
(Wang Alg. 1)
:func:`dp_sgd_gradient_perturbation`    1 w/ repl.  clip at G + Gaussian          SGD + Π    average
(Wang Alg. 2)
:func:`dp_sgd_adaptive_clipping`        any         quantile clip + Gaussian      SGD/Adam   last
(Andrew et al. 2021)
======================================  ==========  ============================  =========  ===============
"""
from .adaptive_clipping import AdaptiveClippingResult, dp_sgd_adaptive_clipping
from .dice_sgd import (DiceSGDResult, automatic_dice_sgd, dice_sgd, dicesgd_effective_noise_multiplier,
                       dicesgd_noise_multiplier, dicesgd_sensitivity)
from .dp_gd import LDPResult, dp_gd, dp_gd_ldp
from .dp_sgd import dp_sgd
from .gradient_perturbation import dp_sgd_gradient_perturbation, gradient_noise_std
from .loop import DPResult, Trajectory, make_generator, run, sweep_grid
from .oracles import CallableOracle, GLPOracle, as_oracle
from .output_perturbation import OutputPerturbationResult, dp_sgd_output_perturbation, output_noise_std, uas_bound
from .selection import SelectionResult, clipped_gradient_norms, select_stationary_iterate
from .updates import SGD, Adam, project_interval, project_l2_ball

__all__ = [
    "dp_gd", "dp_gd_ldp", "dp_sgd", "dice_sgd", "automatic_dice_sgd", "select_stationary_iterate",
    "dp_sgd_output_perturbation", "dp_sgd_gradient_perturbation", "dp_sgd_adaptive_clipping",
    "run", "Trajectory", "DPResult", "LDPResult", "DiceSGDResult", "SelectionResult", "OutputPerturbationResult",
    "make_generator", "sweep_grid", "as_oracle", "GLPOracle", "CallableOracle",
    "SGD", "Adam", "project_l2_ball", "project_interval",
    "uas_bound", "output_noise_std", "gradient_noise_std", "clipped_gradient_norms",
    "AdaptiveClippingResult", "dicesgd_sensitivity", "dicesgd_effective_noise_multiplier",
    "dicesgd_noise_multiplier",
]
