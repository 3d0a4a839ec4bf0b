"""Plausible wrong answers to the exercises of ``book/closing/which_remedy.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "divides DP-SGD's noise multiplier by DiceSGD's",
         "code": """
_r = results["breast cancer"]
z_ratio = _r["dp_sgd"].noise_multiplier / _r["dice_sgd"].noise_multiplier
noise_share = _r["dice_sgd"].at()["noise"] / _r["dice_sgd"].at()["mean"]
""",
         "message": "the ratio is above 1"},
        {"mistake": "divides the mean by the noise part",
         "code": """
_r = results["breast cancer"]
z_ratio = _r["dice_sgd"].noise_multiplier / _r["dp_sgd"].noise_multiplier
noise_share = _r["dice_sgd"].at()["mean"] / _r["dice_sgd"].at()["noise"]
""",
         "message": "did you divide the wrong way round"},
        {"mistake": "takes the share of the noise-free part",
         "code": """
_r = results["breast cancer"]
z_ratio = _r["dice_sgd"].noise_multiplier / _r["dp_sgd"].noise_multiplier
noise_share = _r["dice_sgd"].at()["bias"] / _r["dice_sgd"].at()["mean"]
""",
         "message": "take the noise-free part"},
    ],
    "q2": [
        {"mistake": "forgets to divide by the batch size B",
         "code": """
sigma_claim = dl.accountants.paper_bounds.dicesgd_thm38_sigma(0.03, 0.03, None, 200, 426, 2.0, 1e-5)
sigma_valid = results["breast cancer"]["dice_sgd"].noise_multiplier * 0.03
factor = sigma_valid / sigma_claim
""",
         "message": "far smaller than z itself"},
        {"mistake": "divides the other way round",
         "code": """
sigma_claim = dl.accountants.paper_bounds.dicesgd_thm38_sigma(0.03, 0.03, None, 200, 426, 2.0, 1e-5)
sigma_valid = results["breast cancer"]["dice_sgd"].noise_multiplier * 0.03 / 64
factor = sigma_claim / sigma_valid
""",
         "message": "factor must be sigma_valid / sigma_claim"},
    ],
}
