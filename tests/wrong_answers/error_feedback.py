"""Plausible wrong answers to the exercises of ``book/part4/error_feedback.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "forgets to clip the error term",
         "code": """
v = dl.clip(g, 0.5).mean(0, keepdim=True) + e
e_new = e + g.mean(0, keepdim=True) - v
""",
         "message": "clip each gradient to C_1 = 0.5 and the error term to C_2 = 1"},
        {"mistake": "adds the clipped mean, not the raw mean, to the error",
         "code": """
v = dl.clip(g, 0.5).mean(0, keepdim=True) + dl.clip(e, 1.0)
e_new = e + dl.clip(g, 0.5).mean(0, keepdim=True) - v
""",
         "message": "the mean of the raw (unclipped) gradients"},
    ],
    "q2": [
        {"mistake": "drops the minus sign of e*",
         "code": """
P_q2 = cmp.skewed_problem(10, 3)
e_star_q2 = float(P_q2.clipped_grad(torch.zeros(1, dtype=torch.float64), 0.6)[0])
x_end_q2 = float(dl.dice_sgd(P_q2, torch.zeros(1, dtype=torch.float64), n=P_q2.X.shape[0], steps=800, lr=0.5, clip_norm=0.6, feedback_clip_norm=0.6, noise_multiplier=0.0, sampling="full", progress=False).theta[0])
""",
         "message": "e_star_q2 has the wrong sign"},
        {"mistake": "runs clipped SGD without error feedback",
         "code": """
P_q2 = cmp.skewed_problem(10, 3)
e_star_q2 = -float(P_q2.clipped_grad(torch.zeros(1, dtype=torch.float64), 0.6)[0])
x_end_q2 = float(dl.dp_sgd(P_q2, torch.zeros(1, dtype=torch.float64), n=P_q2.X.shape[0], steps=800, lr=0.5, clip_norm=0.6, noise_multiplier=0.0, sampling="full", progress=False).theta[0])
""",
         "message": "run dl.dice_sgd with feedback_clip_norm=0.6"},
    ],
}
