"""Plausible wrong answers to the exercises of ``book/foundations/dp_sgd_clipping_knob.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "certifies with the RDP accountant where the exercise asks for the tight (PLD) one",
         "code": """
z_thm22_1 = math.sqrt(2 * 100 * math.log(1 / DELTA)) / 1.0
z_thm22_8 = math.sqrt(2 * 100 * math.log(1 / DELTA)) / 8.0
eps_true_1 = dl.get_epsilon(noise_multiplier=z_thm22_1, sample_rate=1.0, steps=100, delta=DELTA)
eps_true_8 = dl.get_epsilon(noise_multiplier=z_thm22_8, sample_rate=1.0, steps=100, delta=DELTA)
""",
         "message": "must come from the tight accountant"},
        {"mistake": "forgets the number of steps in Theorem 2.2's noise",
         "code": """
z_thm22_1 = math.sqrt(2 * math.log(1 / DELTA)) / 1.0
z_thm22_8 = math.sqrt(2 * math.log(1 / DELTA)) / 8.0
eps_true_1 = dl.get_epsilon(noise_multiplier=z_thm22_1, sample_rate=1.0, steps=100, delta=DELTA, accountant="pld")
eps_true_8 = dl.get_epsilon(noise_multiplier=z_thm22_8, sample_rate=1.0, steps=100, delta=DELTA, accountant="pld")
""",
         "message": "grows with √T"},
    ],
    "q2": [
        {"mistake": "takes the clipped mean's norm to be C (every gradient clipped): a constant SNR",
         "code": """
snr = torch.stack([torch.as_tensor(C / (Z[1.0] * C * math.sqrt(p) / BATCH)) for C in C_GRID])
""",
         "message": "snr is the same at every C"},
        {"mistake": "leaves C out of the noise",
         "code": """
snr = torch.stack([prob.clipped_grad(theta0, float(C)).norm() / (Z[1.0] * math.sqrt(p) / BATCH) for C in C_GRID])
""",
         "message": "there snr × C must be constant"},
    ],
    "q3": [
        {"mistake": "calibrates z for the chapter's sampling rate q instead of this run's",
         "code": """
z_own = dl.get_noise_multiplier(target_epsilon=2.0, target_delta=DELTA, sample_rate=q, steps=200)
res_own = dl.algorithms.dp_sgd(prob, theta0, n=n, steps=200, lr=ETA, clip_norm=C_best, noise_multiplier=z_own, batch_size=round(0.1 * n), project=project, seed=7, progress=False)
eps_own = dl.RDPAccountant().compose(res_own.dp_event()).get_epsilon(DELTA)
excess_own = float(prob.objective(res_own.theta)) - L_star
""",
         "message": "is not just under the target"},
        {"mistake": "reports the objective instead of the excess risk",
         "code": """
z_own = dl.get_noise_multiplier(target_epsilon=2.0, target_delta=DELTA, sample_rate=round(0.1 * n) / n, steps=200)
res_own = dl.algorithms.dp_sgd(prob, theta0, n=n, steps=200, lr=ETA, clip_norm=C_best, noise_multiplier=z_own, batch_size=round(0.1 * n), project=project, seed=7, progress=False)
eps_own = dl.RDPAccountant().compose(res_own.dp_event()).get_epsilon(DELTA)
excess_own = float(prob.objective(res_own.theta))
""",
         "message": "minus its minimum L_star"},
    ],
}
