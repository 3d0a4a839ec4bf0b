"""Plausible wrong answers to the exercises of ``book/part3/stability.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "divides growth by defect, then names the dominant term from the correct comparison",
         "code": """
d_q1, g_q1 = st.wang_thm7_terms(steps=500, n=n, eta=0.02, alpha=0.25, L=1.25, M=1.25, gamma=0.05, R=2.0)
ratio_q1 = g_q1 / d_q1
dominant_q1 = "defect" if d_q1 > g_q1 else "growth"
""",
         "message": "dominant_q1 does not agree with ratio_q1"},
    ],
    "q2": [
        {"mistake": "builds the data set with 50 rows instead of 100",
         "code": """
r_q2 = st.sgd_runs(torch.ones(50, 1), torch.full((50,), 100.0), family="regression", q=1.0, lr=0.05, steps=400,
                   runs=1000, seed=11, replace=(torch.zeros(1000).long(), torch.ones(1000, 1), torch.full((1000,), -100.0)))
mean_q2 = float(r_q2.distance.mean())
""",
         "message": "mean_q2 is far from η(T − 1)/n"},
    ],
}
