"""Plausible wrong answers to the exercises of ``book/part4/constant_bias.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "keeps the wrong half of the bracket",
         "code": """
lo, hi = -1.0, 0.0
for _ in range(60):
    mid = 0.5 * (lo + hi)
    if float(problems[3].clipped_grad(torch.tensor([mid], dtype=torch.float64), 1.2)[0]) > 0:
        lo = mid
    else:
        hi = mid
x_bar = 0.5 * (lo + hi)
bias = abs(x_bar)
""",
         "message": "the mean clipped gradient (C = 1.2) does not vanish at x_bar"},
        {"mistake": "reports the signed fixed point as the bias",
         "code": """
lo, hi = -1.0, 0.0
for _ in range(60):
    mid = 0.5 * (lo + hi)
    if float(problems[3].clipped_grad(torch.tensor([mid], dtype=torch.float64), 1.2)[0]) > 0:
        hi = mid
    else:
        lo = mid
x_bar = 0.5 * (lo + hi)
bias = x_bar
""",
         "message": "bias is the distance from x_bar to the optimum 0"},
    ],
    "q2": [
        {"mistake": "runs without clipping",
         "code": """
ends = []
for copies in (10, 5000):
    P_q2 = cmp.skewed_problem(copies, 2)
    r_q2 = dl.dp_sgd(P_q2, torch.zeros(1, dtype=torch.float64), n=P_q2.X.shape[0], steps=400, lr=0.5,
                     clip_norm=1e6, noise_multiplier=0.0, sampling="full", progress=False)
    ends.append(float(r_q2.theta[0]))
end_small, end_large = ends
""",
         "message": "a run does not end at a zero of its mean clipped gradient"},
    ],
}
