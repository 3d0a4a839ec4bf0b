"""Plausible wrong answers to the exercises of ``book/part3/output_vs_gradient.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "divides the accountant's σ by Thm 11's (the ratio upside down)",
         "code": """
_, sigma_thm11_q1 = pb.wang_remark4_beta(G, 200, 200, 8.0, 1 / 200 ** 2)
sigma_acc_q1 = st.wang_thm11_accountant_sigma(8.0, 1 / 200 ** 2, 200, 200, G)
waste_q1 = sigma_acc_q1 / sigma_thm11_q1
""",
         "message": "the ratio is above 1"},
    ],
    "q2": [
        {"mistake": "flips the comparison: the first ε where the classic σ still holds",
         "code": """
grid_q2 = [1 + 0.05 * k for k in range(400)]
eps_break_q2 = next(e for e in grid_q2 if analytic_gaussian_epsilon(classic_sigma(e, 1e-5, 1.0), 1e-5 / 2, 1.0) < e)
""",
         "message": "the classic σ still meets its target"},
    ],
}
