"""Plausible wrong answers to the exercises of ``book/part3/holder_losses.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "two margins on the same side of the label",
         "code": "a_q1 = 0.0\nb_q1 = 1.0\n",
         "message": "this pair is far from the worst one"},
        {"mistake": "a pair near the worst one, not at it (98.9% of L_f)",
         "code": "a_q1 = -1.0\nb_q1 = 0.5\n",
         "message": "close, but not the worst pair"},
    ],
    "q2": [
        {"mistake": "takes α = q instead of the Hölder exponent of the q-hinge",
         "code": """
prob_q2 = dl.GLProblem(sets["breast cancer"].X_train, sets["breast cancer"].y_train, dl.losses.QHinge(1.5))
a2, L2, M2 = prob_q2.holder(feature_bound=1.0)
G_q2 = M2 + L2 * 4.0 ** 1.5
""",
         "message": "G_q2 is too large"},
        {"mistake": "forgets the radius: G = M + L",
         "code": """
prob_q2 = dl.GLProblem(sets["breast cancer"].X_train, sets["breast cancer"].y_train, dl.losses.QHinge(1.5))
a2, L2, M2 = prob_q2.holder(feature_bound=1.0)
G_q2 = M2 + L2
""",
         "message": "G_q2 is too small"},
        {"mistake": "drops the Hölder exponent: G = M + L·R",
         "code": """
prob_q2 = dl.GLProblem(sets["breast cancer"].X_train, sets["breast cancer"].y_train, dl.losses.QHinge(1.5))
a2, L2, M2 = prob_q2.holder(feature_bound=1.0)
G_q2 = M2 + L2 * 4.0
""",
         "message": "the radius enters as R^α"},
    ],
}
