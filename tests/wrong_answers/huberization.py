"""Plausible wrong answers to the exercises of ``book/part1/huberization.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "runs gradient descent without clipping",
         "code": """
gd_q1 = dl.algorithms.dp_gd(song, torch.zeros(1), n=song.n, steps=400, lr=2.0, clip_norm=1e6, noise_multiplier=0.0, progress=False)
theta_q1 = float(gd_q1.iterates[-1, 0])
""",
         "message": "the clipped gradient (C = 0.07) does not vanish at theta_q1"},
    ],
    "q2": [
        {"mistake": "forgets to clip: the loss itself at 3",
         "code": "g_q2 = 0.5 * 3.0 ** 2\n",
         "message": "g_q2 is not below f(3) = 4.5"},
        {"mistake": "continues the line from the origin of z, not from y_2",
         "code": "y2_q2 = 0.5\ng_q2 = 0.5 * y2_q2 ** 2 + 0.5 * 3.0\n",
         "message": "g_q2 is too large"},
        {"mistake": "takes g(z) = c·|z|",
         "code": "g_q2 = 0.5 * 3.0\n",
         "message": "g_q2 is too large"},
    ],
    "q3": [
        {"mistake": "forgets the factor 2 of the gradient 2(θ − x)",
         "code": "C_q3 = 10 * L_B4\n",
         "message": "some gradient on [0, 10C] is still clipped"},
        {"mistake": "copies the 16C that is safe on [0, 8C] from the text",
         "code": "C_q3 = 16 * L_B4\n",
         "message": "some gradient on [0, 10C] is still clipped"},
        {"mistake": "a safe clip norm, but not the smallest",
         "code": "C_q3 = 40 * L_B4\n",
         "message": "C_q3 is safe but not the smallest"},
    ],
}
