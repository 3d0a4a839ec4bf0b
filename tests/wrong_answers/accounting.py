"""Plausible wrong answers to the exercises of ``book/foundations/accounting.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "uses the RDP accountant for z_pld and eps_pld too",
         "code": """
z_rdp = acc.get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=0.005, steps=2000)
z_pld = acc.get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=0.005, steps=2000)
eps_rdp = acc.get_epsilon(noise_multiplier=z_rdp, sample_rate=0.005, steps=2000, delta=1e-5)
eps_pld = acc.get_epsilon(noise_multiplier=z_pld, sample_rate=0.005, steps=2000, delta=1e-5)
""",
         "message": "z_pld equals z_rdp"},
        {"mistake": "certifies the PLD noise multiplier with the RDP accountant",
         "code": """
z_rdp = 0.76123046875       # acc.get_noise_multiplier(..., accountant="rdp"), as the solution computes it
z_pld = 0.712890625         # acc.get_noise_multiplier(..., accountant="pld")
eps_rdp = acc.get_epsilon(noise_multiplier=z_rdp, sample_rate=0.005, steps=2000, delta=1e-5)
eps_pld = acc.get_epsilon(noise_multiplier=z_pld, sample_rate=0.005, steps=2000, delta=1e-5)
""",
         "message": "each accountant must certify at most ε = 3 for its own z"},
    ],
}
