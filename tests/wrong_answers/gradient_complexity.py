"""Plausible wrong answers to the exercises of ``book/part3/gradient_complexity.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "takes α = q instead of α = q − 1",
         "code": "alpha_q1 = 1.25\ngrads_q1 = 5000 ** ((2 - alpha_q1) / (1 + alpha_q1)) + 5000\n",
         "message": "grads_q1 is out of range"},
    ],
    "q2": [
        {"mistake": "divides ε by Lemma 13's threshold (the ratio upside down)",
         "code": """
eps_q2 = st.wang_thm11_smallest_epsilon(426)
ratio_q2 = eps_q2 / pb.wang_lemma13_epsilon_threshold(426)
""",
         "message": "ratio_q2 must be Lemma 13's threshold divided by eps_q2"},
        {"mistake": "uses δ = 1/n instead of 1/n²",
         "code": """
eps_q2 = st.wang_thm11_smallest_epsilon(426, delta=1 / 426)
ratio_q2 = pb.wang_lemma13_epsilon_threshold(426) / eps_q2
""",
         "message": "eps_q2 is not the smallest such ε"},
    ],
}
