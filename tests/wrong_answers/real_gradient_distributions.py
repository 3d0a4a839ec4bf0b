"""Plausible wrong answers to the exercises of ``book/part2/real_gradient_distributions.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "compares the noise norms with c instead of c/4",
         "code": """
_G = grads[15]
noise_norms = (_G - _G.mean(0)).norm(dim=1)
grid_q1 = torch.logspace(-2, 2, 41, dtype=torch.float64)
probs = torch.stack([(noise_norms < c).double().mean() for c in grid_q1])
c_q1 = float(grid_q1[int(torch.nonzero(probs >= 0.5)[0])])
""",
         "message": "fewer than half of the noise norms"},
        {"mistake": "uses the gradient norms, not the noise around the mean gradient",
         "code": """
_G = grads[15]
noise_norms = _G.norm(dim=1)
grid_q1 = torch.logspace(-2, 2, 41, dtype=torch.float64)
probs = torch.stack([(noise_norms < c / 4).double().mean() for c in grid_q1])
c_q1 = float(grid_q1[int(torch.nonzero(probs >= 0.5)[0])])
""",
         "message": "c_q1 must be the smallest"},
    ],
    "q2": [
        {"mistake": "normalizes by mean|x| instead of twice that",
         "code": """
_cos = geo.cosines_to_mean(grads[15])
_x = _cos - _cos.mean()
_w1 = (torch.sort(_x).values - torch.sort(-_x).values).abs().mean()
score_q2 = float(1 - _w1 / _x.abs().mean())
""",
         "message": "score_q2 is off"},
    ],
}
