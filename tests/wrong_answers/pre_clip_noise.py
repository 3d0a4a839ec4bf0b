"""Plausible wrong answers to the exercises of ``book/part2/pre_clip_noise.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "the paper's erf(c/4k) without the √2 of a standard normal",
         "code": """
p_q1 = math.erf(1.0 / (4 * 2.0))
ratio_q1 = math.erf(1.0 / (4 * 2.0)) / p_q1
""",
         "message": "p_q1 does not match a simulation"},
    ],
    "q2": [
        {"mistake": "tests the fixed point itself against 1.1 instead of its distance to x*",
         "code": """
_grid = torch.linspace(0.5, 20, 40)
_fp, _ = geo.clipped_stationary_interval(a1, 1.0, pre_clip_std=_grid)
k_q2 = float(_grid[int(torch.nonzero(_fp <= 1.1)[0])])
""",
         "message": "more than 0.1 away from x* = 1"},
        {"mistake": "takes the largest k of the grid that works",
         "code": """
_grid = torch.linspace(0.5, 20, 40)
_fp, _ = geo.clipped_stationary_interval(a1, 1.0, pre_clip_std=_grid)
k_q2 = float(_grid[int(torch.nonzero((_fp - 1.0).abs() <= 0.1)[-1])])
""",
         "message": "k_q2 must be the smallest"},
    ],
}
