"""Plausible wrong answers to the exercises of ``book/part1/choosing_clip_norm.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "takes the last C that clips more than 10% instead of the first that clips at most 10%",
         "code": """
fractions = torch.stack([dl.clipped_fraction(dg.prob.per_example_grads(dg.theta_star), float(C)) for C in C_GRID])
i_rule = int((fractions > 0.1).nonzero()[-1])
C_rule = float(C_GRID[i_rule])
excess_rule = float(dg.final[i_rule].mean())
""",
         "message": "more than 10% of the per-example gradients"},
        {"mistake": "reads the excess risk of the breast-cancer problem",
         "code": """
fractions = torch.stack([dl.clipped_fraction(dg.prob.per_example_grads(dg.theta_star), float(C)) for C in C_GRID])
i_rule = int((fractions <= 0.1).nonzero()[0])
C_rule = float(C_GRID[i_rule])
excess_rule = float(bc.final[i_rule].mean())
""",
         "message": "the row of C_rule in dg.final"},
    ],
    "q2": [
        {"mistake": "gives the count the noise multiplier σ_b, forgetting its sensitivity 1/2",
         "code": """
z_grad = (2.0 ** -2 - 3.0 ** -2) ** -0.5
pair = dl.ComposedEvent([dl.GaussianEvent(z_grad), dl.GaussianEvent(3.0)])
eps_pair = dl.RDPAccountant().compose(pair, 100).get_epsilon(1e-5)
eps_single = dl.RDPAccountant().compose(dl.GaussianEvent(2.0), 100).get_epsilon(1e-5)
""",
         "message": "z_grad is too large"},
        {"mistake": "multiplies the count's noise by its sensitivity instead of dividing",
         "code": """
z_grad = (2.0 ** -2 - (2 * 3.0) ** -2) ** -0.5
pair = dl.ComposedEvent([dl.GaussianEvent(z_grad), dl.GaussianEvent(3.0 * 0.5)])
eps_pair = dl.RDPAccountant().compose(pair, 100).get_epsilon(1e-5)
eps_single = dl.RDPAccountant().compose(dl.GaussianEvent(2.0), 100).get_epsilon(1e-5)
""",
         "message": "eps_pair differs from eps_single"},
        {"mistake": "gives the gradient the whole noise multiplier z = 2",
         "code": """
z_grad = 2.0
pair = dl.ComposedEvent([dl.GaussianEvent(z_grad), dl.GaussianEvent(3.0 / 0.5)])
eps_pair = dl.RDPAccountant().compose(pair, 100).get_epsilon(1e-5)
eps_single = dl.RDPAccountant().compose(dl.GaussianEvent(2.0), 100).get_epsilon(1e-5)
""",
         "message": "the gradient needs more noise than z = 2"},
    ],
}
