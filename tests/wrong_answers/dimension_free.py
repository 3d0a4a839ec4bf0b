"""Plausible wrong answers to the exercises of ``book/part1/dimension_free.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "puts the dimension p where Theorem 4.1 has rank(M)",
         "code": """
rank_q1 = prob_q1.rank
seminorm_q1 = prob_q1.seminorm(dl.optima.minimize(prob_q1)).item()
bound_q1 = 1.0 * seminorm_q1 * math.sqrt(1 + 2 * 1000 * math.log(1 / DELTA)) / (EPS * N)
""",
         "message": "not with the dimension p = 1000"},
    ],
    "q2": [
        {"mistake": "keeps the part of v inside the span instead of removing it",
         "code": """
B_q2 = prob_q2.feature_basis()
v_perp = (B_q2 @ v) @ B_q2
""",
         "message": "v_perp still has a component inside the span of the data"},
    ],
}
