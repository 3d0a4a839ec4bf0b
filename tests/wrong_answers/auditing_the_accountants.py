"""Plausible wrong answers to the exercises of ``book/auditing/auditing_the_accountants.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "solves at the chapter's DELTA = 1e-5 instead of 1e-8",
         "code": """
eps_star = optimize.brentq(lambda e: pb.song_thm22_true_epsilon(e, DELTA) - e, 2.0, 30.0, xtol=1e-10)
ratio_at_20 = pb.song_thm22_true_epsilon(20.0, DELTA) / 20.0
""",
         "message": "not at the chapter's DELTA"},
        {"mistake": "divides the claim by the certified ε (the ratio upside down)",
         "code": """
eps_star = optimize.brentq(lambda e: pb.song_thm22_true_epsilon(e, 1e-8) - e, 2.0, 30.0, xtol=1e-10)
ratio_at_20 = 20.0 / pb.song_thm22_true_epsilon(20.0, 1e-8)
""",
         "message": "ratio_at_20 must be the certified ε divided by the claimed one"},
    ],
    "q2": [
        {"mistake": "doubles the noise multiplier for the fixed-size run instead of halving it",
         "code": """
eps_claimed = acc.get_epsilon(noise_multiplier=1.2, sample_rate=500 / 50000, steps=2000, delta=1e-5)
eps_actual = acc.get_epsilon(noise_multiplier=2.4, sample_rate=500 / 50000, steps=2000, delta=1e-5)
z_needed = 2 * acc.get_noise_multiplier(target_epsilon=eps_claimed, target_delta=1e-5, sample_rate=500 / 50000, steps=2000)
""",
         "message": "eps_actual must exceed eps_claimed"},
        {"mistake": "takes the Poisson answer as the noise the fixed-size code needs",
         "code": """
eps_claimed = acc.get_epsilon(noise_multiplier=1.2, sample_rate=500 / 50000, steps=2000, delta=1e-5)
eps_actual = acc.get_epsilon(noise_multiplier=0.6, sample_rate=500 / 50000, steps=2000, delta=1e-5)
z_needed = acc.get_noise_multiplier(target_epsilon=eps_claimed, target_delta=1e-5, sample_rate=500 / 50000, steps=2000)
""",
         "message": "z_needed is out of range"},
    ],
}
