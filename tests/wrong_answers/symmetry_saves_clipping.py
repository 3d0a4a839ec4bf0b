"""Plausible wrong answers to the exercises of ``book/part2/symmetry_saves_clipping.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "forgets to scale by the standard deviation 0.5",
         "code": "from scipy.stats import chi\np_q1 = float(chi(3).cdf(0.25))\n",
         "message": "mind the standard deviation 0.5 and the dimension 3"},
        {"mistake": "uses the one-dimensional distribution",
         "code": "from scipy.stats import chi\np_q1 = float(chi(1).cdf(0.25 / 0.5))\n",
         "message": "p_q1 does not match a simulation"},
    ],
    "q2": [
        {"mistake": "divides the bound by the exact descent",
         "code": "ratio_q2 = geo.theorem2_lower_bound(2.0, 1.0) / geo.clipped_descent(2.0, 1.0)\n",
         "message": "Theorem 2 is a lower bound"},
    ],
    "q3": [
        {"mistake": "subtracts the other way round (symmetric part minus descent)",
         "code": """
noise_q3 = torch.tensor([[3.0], [-1.0], [-1.0], [-1.0]])
_d = geo.bias_decomposition(torch.tensor([0.5]), noise_q3, 1.0)
b_q3 = float(_d.symmetric - _d.descent)
""",
         "message": "b_q3 is too large"},
        {"mistake": "reports the descent under p as the bias",
         "code": """
noise_q3 = torch.tensor([[3.0], [-1.0], [-1.0], [-1.0]])
b_q3 = float(geo.bias_decomposition(torch.tensor([0.5]), noise_q3, 1.0).descent)
""",
         "message": "b_q3 is too large"},
    ],
}
