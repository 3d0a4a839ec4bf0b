"""Plausible wrong answers to the exercises of ``book/part4/privacy_cost.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "adds up the per-step shifts instead of taking the norm of the difference",
         "code": """
v_q1, _ = directions(200.0, steps=40, n=50)
v0_q1, _ = directions(0.0, steps=40, n=50)
mu_q1 = float((v_q1 - v0_q1).norm(dim=-1).sum()) / 1.0
eps_q1 = analytic_gaussian_epsilon(1.0, 1e-5, sensitivity=mu_q1)
claim_q1 = pb.dicesgd_thm38_epsilon(1.0, 1.0, 1.0, None, 40, 50, 1e-5)
""",
         "message": "mu_q1 is out of range"},
        {"mistake": "swaps the noise std and the shift in analytic_gaussian_epsilon",
         "code": """
v_q1, _ = directions(200.0, steps=40, n=50)
v0_q1, _ = directions(0.0, steps=40, n=50)
mu_q1 = float(torch.linalg.vector_norm(v_q1 - v0_q1)) / 1.0
eps_q1 = analytic_gaussian_epsilon(mu_q1, 1e-5)
claim_q1 = pb.dicesgd_thm38_epsilon(1.0, 1.0, 1.0, None, 40, 50, 1e-5)
""",
         "message": "eps_q1 must be the exact ε at δ = 1e-5"},
    ],
    "q2": [
        {"mistake": "forgets the sampling: DP-SGD's z at rate 1",
         "code": """
z_q2 = dicesgd_noise_multiplier(4.0, 1e-5, 500, clip_norm=0.1, feedback_clip_norm=0.1, batch_size=500)
sigma1_q2 = z_q2 * 0.1 / 500
z_dp_q2 = dl.get_noise_multiplier(target_epsilon=4.0, target_delta=1e-5, sample_rate=1.0, steps=500)
gap_q2 = z_q2 / z_dp_q2
""",
         "message": "z_dp_q2 is too large"},
        {"mistake": "forgets to divide σ_1 by B",
         "code": """
z_q2 = dicesgd_noise_multiplier(4.0, 1e-5, 500, clip_norm=0.1, feedback_clip_norm=0.1, batch_size=500)
sigma1_q2 = z_q2 * 0.1
z_dp_q2 = dl.get_noise_multiplier(target_epsilon=4.0, target_delta=1e-5, sample_rate=500 / 50_000, steps=500)
gap_q2 = z_q2 / z_dp_q2
""",
         "message": "sigma1_q2 must be z_q2 · C_1 / B"},
    ],
}
