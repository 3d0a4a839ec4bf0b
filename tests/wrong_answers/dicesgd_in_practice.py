"""Plausible wrong answers to the exercises of ``book/part4/dicesgd_in_practice.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "leaves the error feedback out of the sensitivity (z_eff = z)",
         "code": """
z_claim8 = float(arms(8.0)["DiceSGD (Thm 3.8 noise)"][1])
eps_true = dl.RDPAccountant().compose(dl.SelfComposedEvent(dl.GaussianEvent(z_claim8), T)).get_epsilon(1e-5)
""",
         "message": "DiceSGD's sensitivity includes the error feedback"},
        {"mistake": "takes Thm 3.8's σ_1 as the noise multiplier",
         "code": """
z_claim8 = pb.dicesgd_thm38_sigma(1.0, 1.0, None, T, N, 8.0, 1e-5)
eps_true = dl.RDPAccountant().compose(dl.SelfComposedEvent(dl.GaussianEvent((z_claim8 / B) / (1 / B + 2)), T)).get_epsilon(1e-5)
""",
         "message": "z_claim8 is too small"},
    ],
}
