"""Plausible wrong answers to the exercises of ``book/clipping_in_one_picture.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "all three gradients point the same way",
         "code": """
G_q1 = torch.tensor([[10.0], [1.5], [1.5]], dtype=torch.float64)
C_lo_q1 = 0.5
C_hi_q1 = 1.0
""",
         "message": "when all gradients point the same way"},
        {"mistake": "C_hi_q1 above every gradient norm",
         "code": """
G_q1 = torch.tensor([[10.0], [-1.5], [-1.5]], dtype=torch.float64)
C_lo_q1 = 0.5
C_hi_q1 = 20.0
""",
         "message": "nothing is clipped"},
    ],
}
