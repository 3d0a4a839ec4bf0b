"""Plausible wrong answers to the exercises of ``book/part1/no_gradient_field.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "takes the Jacobian of the unclipped field",
         "code": """
J_P = sm.jacobian(prob.field(), theta_P)
J_01 = J_P[0:2, 2:4]
J_10 = J_P[2:4, 0:2]
zero_block = "J_10"
""",
         "message": "J_P is symmetric"},
        {"mistake": "swaps rows and columns when cutting the blocks",
         "code": """
J_P = sm.jacobian(prob.field(C), theta_P)
J_01 = J_P[2:4, 0:2]
J_10 = J_P[0:2, 2:4]
zero_block = "J_01"
""",
         "message": "J_01 holds the rows of class 0"},
    ],
    "q2": [
        {"mistake": "integrates the gradient field instead of the clipped one",
         "code": """
I_straight = float(sm.line_integral(grad_field, torch.stack([P0, P1])))
I_detour = float(sm.line_integral(grad_field, torch.stack([P0, M, P1])))
I_loop = float(sm.line_integral(grad_field, torch.stack([P0, P1, M, P0])))
""",
         "message": "I_straight equals I_detour"},
        {"mistake": "runs the loop the other way round",
         "code": """
I_straight = float(sm.line_integral(clipped_field, torch.stack([P0, P1])))
I_detour = float(sm.line_integral(clipped_field, torch.stack([P0, M, P1])))
I_loop = float(sm.line_integral(clipped_field, torch.stack([P0, M, P1, P0])))
""",
         "message": "I_loop does not fit the other two"},
    ],
    "q3": [
        {"mistake": "takes the paper's bound sqrt(K/(K-1)) max ||x_i|| as the safe clip norm",
         "code": """
C_safe = math.sqrt(4 / 3) * float(X3.norm(dim=1).max())
circ_safe = float(sm.circulation(prob3.field(C_safe), center3, u3, v3, 1.0))
C_paper = math.sqrt(4 / 3) * float(X3.norm(dim=1).max())
circ_paper = float(sm.circulation(prob3.field(C_paper), center3, u3, v3, 1.0))
""",
         "message": "C_safe is too small"},
    ],
}
