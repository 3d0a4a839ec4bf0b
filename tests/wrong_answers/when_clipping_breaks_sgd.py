"""Plausible wrong answers to the exercises of ``book/part2/when_clipping_breaks_sgd.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "assumes clipping does not move the stall point (x* = 1)",
         "code": "x_q1 = 1.0\n",
         "message": "the mean clipped gradient F_2 does not vanish at x_q1"},
        {"mistake": "assumes all three gradients are clipped",
         "code": "x_q1 = -3.0 + 2.0 / 3\n",
         "message": "the mean clipped gradient F_2 does not vanish at x_q1"},
    ],
    "q2": [
        {"mistake": "takes the span of the data as the stationary set",
         "code": "interval_q2 = (-3.0, 3.0)\n",
         "message": "does not vanish on all of interval_q2"},
        {"mistake": "takes the interval [-c, c]",
         "code": "interval_q2 = (-0.5, 0.5)\n",
         "message": "the stationary set is wider"},
    ],
    "q3": [
        {"mistake": "symmetric points: clipped SGD stalls at x* itself",
         "code": "a_q3 = torch.tensor([-3.0, -1.0, 1.0, 3.0])\n",
         "message": "can stall less than 1 away from x* = 0"},
    ],
}
