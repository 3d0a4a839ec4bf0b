"""Plausible wrong answers to the exercises of ``book/auditing/auditing_dp_sgd.ipynb`` (issue #32, item 1).

For each question: what a student gets wrong (``mistake``), the code they would write in
the answer cell (``code``), and a piece of the public test's message that must tell them
(``message``). ``tests/test_assignments.py`` runs each in place of the solution and checks
that the public tests reject it with that message, while the solution passes them.
"""
WRONG_ANSWERS = {
    "q1": [
        {"mistake": "uses the observed error rates instead of their Clopper-Pearson upper bounds",
         "code": """
fp = int((ex_out >= 0.75).sum())
fn = int((ex_in < 0.75).sum())
u_fp, u_fn = fp / 1000, fn / 1000
eps_one = max(math.log((1 - DELTA - u_fp) / u_fn), math.log((1 - DELTA - u_fn) / u_fp))
""",
         "message": "u_fp and u_fn are upper confidence bounds"},
        {"mistake": "gives each side the whole 5% (alpha = 0.05)",
         "code": """
fp = int((ex_out >= 0.75).sum())
fn = int((ex_in < 0.75).sum())
u_fp = float(audit.clopper_pearson_upper(fp, 1000, 0.05))
u_fn = float(audit.clopper_pearson_upper(fn, 1000, 0.05))
eps_one = max(math.log((1 - DELTA - u_fp) / u_fn), math.log((1 - DELTA - u_fn) / u_fp))
""",
         "message": "alpha = 0.025 on each side"},
        {"mistake": "counts the in-scores above the threshold as false positives",
         "code": """
fp = int((ex_in >= 0.75).sum())
fn = int((ex_in < 0.75).sum())
u_fp = float(audit.clopper_pearson_upper(fp, 1000, 0.025))
u_fn = float(audit.clopper_pearson_upper(fn, 1000, 0.025))
eps_one = max(math.log((1 - DELTA - u_fp) / u_fn), math.log((1 - DELTA - u_fn) / u_fp))
""",
         "message": "each is a minority of the 1,000 runs"},
    ],
    "q2": [
        {"mistake": "flips the comparison: the first n whose ceiling is below the claim",
         "code": """
claim_T = float(dice_claim[-1])
runs_needed = next(n for n in RUN_GRID if audit.max_certifiable_epsilon(n, n, delta=DELTA, confidence=CONF) < claim_T)
""",
         "message": "cannot refute it"},
        {"mistake": "off by one on the grid: the value after the first that refutes",
         "code": """
claim_T = float(dice_claim[-1])
_k = next(k for k, n in enumerate(RUN_GRID) if audit.max_certifiable_epsilon(n, n, delta=DELTA, confidence=CONF) > claim_T)
runs_needed = RUN_GRID[_k + 1]
""",
         "message": "runs_needed must be the smallest"},
    ],
}
