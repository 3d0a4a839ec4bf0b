"""Speed of the lab's algorithms, measured side by side in one run (ratios, CPU).

Run:  .venv/bin/python benchmarks/bench_algorithms.py [--quick]

1. Small CNN, digits-sized (8×8) and MNIST-sized (28×28) random inputs: one
   step of our DP-SGD (the training driver's step: layer-wise per-example norms and
   clipped sums, :mod:`dpclip_lab.ghost`, then noise and update; and the same step with
   per-example gradients materialized by torch.func) vs a plain SGD step on the same
   batch, vs Opacus's DP-SGD step (GradSampleModule + DPOptimizer) on the same model
   and batch. ``benchmarks/bench_train.py`` times the same through ``dl.train``.
2. GLP (logistic regression): one clipped DP-GD step (O(np) clipped sum + noise)
   vs one full-batch gradient ``prob.grad``.
3. GLP sweep: 64 clip norms × 16 seeds as one tensor program vs a Python loop of
   single runs (the loop is timed on a subset of runs and scaled; said in the table),
   on the breast-cancer training set and synthetic data at n = 2,000 (b = n/10) and n = 10⁵ (b = 256).
   Batched two ways: with ``seed=range(16)`` (seed groups: each run *is* the loop's run with
   its clip norm and seed, checked on one run) and with one seed for all runs (independent runs).

Timings are medians of repeated, interleaved measurements, so that load from other
processes hits all contenders alike; a ratio is the median over rounds of the ratio
within a round (robust to the machine slowing down for seconds at a time).
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import dpclip_lab as dl
from dpclip_lab.algorithms import dp_gd, dp_sgd, run, sweep_grid
from dpclip_lab.losses import Logistic
from dpclip_lab.per_sample import flat_params
from dpclip_lab.privatizers import GaussianPrivatizer
from dpclip_lab.sampling import make_sampler
from dpclip_lab.ghost import ModuleOracle
from dpclip_lab.training import module_grad_fn


def small_cnn(side: int) -> nn.Module:
    k = side // 4
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * k * k, 10))


def interleaved(fns: dict, repeats: int, inner: int) -> dict:
    """Seconds per call of each fn in each round (round-robin): ``{name: [repeats]}``."""
    times = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        f()
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            for _ in range(inner):
                f()
            times[k].append((time.perf_counter() - t) / inner)
    return times


def median(times: list) -> float:
    return statistics.median(times)


def paired_ratio(t: dict, a: str, b: str) -> float:
    """Median over rounds of ``t[a] / t[b]`` measured in the same round."""
    return statistics.median(x / y for x, y in zip(t[a], t[b]))


def bench_cnn(side: int, batch: int, repeats: int):
    torch.manual_seed(0)
    X = torch.randn(batch, 1, side, side)
    y = torch.randint(0, 10, (batch,))

    # plain SGD
    m_plain = small_cnn(side)
    opt = torch.optim.SGD(m_plain.parameters(), lr=0.01)

    K = 10  # steps per timed call (the loop's per-run setup is amortized as in training)

    def plain():
        for _ in range(K):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m_plain(X), y).backward()
            opt.step()

    # ours: one step of the shared loop on this batch (sampling="full" over the batch)
    m_ours = small_cnn(side)
    grad_fn = module_grad_fn(m_ours, F.cross_entropy, X, y)
    sampler = make_sampler("full", batch, None)
    priv = GaussianPrivatizer(1.0, 1.0)
    state = {"theta": flat_params(m_ours)}

    oracle = ModuleOracle(m_ours, F.cross_entropy, X, y)

    def ours():
        traj = run(oracle, state["theta"], steps=K, lr=0.01, sampler=sampler, privatizer=priv, seed=0,
                   keep_iterates=False, progress=False)
        state["theta"] = traj.last[0]

    def ours_func():
        traj = run(grad_fn, state["theta"], steps=K, lr=0.01, sampler=sampler, privatizer=priv, seed=0,
                   keep_iterates=False, progress=False)
        state["theta"] = traj.last[0]

    fns = {"plain SGD": plain, "ours DP-SGD": ours, "ours DP-SGD (torch.func)": ours_func}
    try:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m_op = GradSampleModule(small_cnn(side))
            op_opt = DPOptimizer(torch.optim.SGD(m_op.parameters(), lr=0.01), noise_multiplier=1.0,
                                 max_grad_norm=1.0, expected_batch_size=batch)

        def opacus_step():
            for _ in range(K):
                op_opt.zero_grad(set_to_none=True)
                F.cross_entropy(m_op(X), y).backward()
                op_opt.step()

        fns["Opacus DP-SGD"] = opacus_step
    except ImportError:  # pragma: no cover
        pass
    return {k: [x / K for x in v] for k, v in interleaved(fns, repeats, inner=1).items()}


def bench_glp_step(n: int, p: int, repeats: int):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, p, generator=g)
    y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    prob = dl.GLProblem(X, y, Logistic())
    theta = torch.zeros(p)
    steps = 50

    def grad():
        for _ in range(steps):
            prob.grad(theta)

    def dpgd():
        dp_gd(prob, theta, n=n, steps=steps, lr=0.1, clip_norm=0.5, noise_multiplier=1.0, seed=0,
              keep_iterates=False, progress=False)

    t = interleaved({"full gradient": grad, "DP-GD step": dpgd}, repeats, inner=1)
    return {k: [x / steps for x in v] for k, v in t.items()}


def breast_cancer_glp():
    from dpclip_lab import data
    ds = data.breast_cancer(dtype=torch.float32)
    return dl.GLProblem(ds.X_train, ds.y_train, Logistic())


def synthetic_glp(n, p):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, p, generator=g) / p ** 0.5
    y = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    return dl.GLProblem(X, y, Logistic())


def bench_sweep(prob, steps: int, loop_runs: int, rounds: int, batch_size: int | None = None):
    """Seconds for the 1,024-run sweep (64 clip norms x 16 seeds), per round, three ways:

    * ``loop``: one ``dp_sgd`` call per run, clip norm ``Cs[c]`` and ``seed=s`` (timed on
      ``loop_runs`` runs spread over the grid, scaled to 1,024);
    * ``batched (seed groups)``: one call with ``seed=range(16)``: run ``16 c + s`` *is* the loop's
      run (``Cs[c]``, seed ``s``) — the same batches and noise, checked here on one run — and the GLP
      oracle gathers each seed's batch once for its 64 clip norms;
    * ``batched (independent runs)``: one call with ``seed=0``: every run its own batches and noise
      from one stream (the same law per run; no run equals a loop's).

    Both batched ways draw Poisson batches as sorted member positions (geometric gaps): O(nq) random
    numbers per run, as in the loop.
    """
    n, p = prob.n, prob.p
    Cs = torch.logspace(-2, 1, 64)
    grid = sweep_grid(Cs, 16, dtype=torch.float32)
    b = n // 10 if batch_size is None else batch_size
    kw = dict(n=n, steps=steps, lr=0.5, noise_multiplier=1.0, batch_size=b, keep_iterates=False, progress=False)
    stride = 1024 // loop_runs
    z = torch.zeros(p)

    def grouped():
        return dp_sgd(prob, z, clip_norm=grid, seed=range(16), **kw)

    def independent():
        res = dp_sgd(prob, z, clip_norm=grid, seed=0, **kw)
        assert res.theta.shape == (1024, p)

    def loop():  # loop_runs of the 1,024 runs, spread over the clip norms and the seeds
        for j, r in enumerate(range(0, 1024, stride)):
            dp_sgd(prob, z, clip_norm=float(grid[r]), seed=j % 16, **kw)

    r = 16 * 40 + 3  # run (Cs[40], seed 3) of the grouped sweep, and the same run alone (float32: 1e-4)
    torch.testing.assert_close(grouped().theta[r], dp_sgd(prob, z, clip_norm=float(grid[r]), seed=3, **kw).theta,
                               rtol=1e-4, atol=1e-5)
    t = interleaved({"batched (seed groups)": grouped, "batched (independent runs)": independent, "loop": loop},
                    rounds, inner=1)
    t["loop"] = [x * stride for x in t["loop"]]
    return t


def main(quick: bool = False, threads: int = 1):
    # One intra-op thread by default: on a shared 2-core machine, OpenMP threads that
    # spin-wait for a busy core slow every contender 10-30x, and not alike.
    torch.set_num_threads(threads)
    reps = 5 if quick else 11
    rows = []
    for side, batch in ((8, 64), (8, 256), (28, 64), (28, 256)):
        t = bench_cnn(side, batch, reps)
        ours, base = median(t["ours DP-SGD"]), median(t["plain SGD"])
        rows.append((f"CNN {side}x{side}, batch {batch}: ours DP-SGD / plain SGD", paired_ratio(t, "ours DP-SGD", "plain SGD"),
                     "<= 1.3", f"{ours * 1e3:.1f} ms vs {base * 1e3:.1f} ms"))
        rows.append((f"CNN {side}x{side}, batch {batch}: ours DP-SGD (torch.func) / plain SGD",
                     paired_ratio(t, "ours DP-SGD (torch.func)", "plain SGD"), "-",
                     f"{median(t['ours DP-SGD (torch.func)']) * 1e3:.1f} ms vs {base * 1e3:.1f} ms"))
        if "Opacus DP-SGD" in t:
            rows.append((f"CNN {side}x{side}, batch {batch}: ours DP-SGD / Opacus DP-SGD",
                         paired_ratio(t, "ours DP-SGD", "Opacus DP-SGD"), "<= 0.6",
                         f"{ours * 1e3:.1f} ms vs {median(t['Opacus DP-SGD']) * 1e3:.1f} ms"))
    for n, p in ((10_000, 50), (100_000, 100)):
        t = bench_glp_step(n, p, reps)
        rows.append((f"GLP n={n} p={p}: DP-GD step / full gradient", paired_ratio(t, "DP-GD step", "full gradient"), "<= 3",
                     f"{median(t['DP-GD step']) * 1e6:.0f} us vs {median(t['full gradient']) * 1e6:.0f} us"))
    loop_runs = 32 if quick else 128
    for label, prob, b in (("breast cancer", breast_cancer_glp(), None), ("synthetic", synthetic_glp(2000, 20), None),
                           ("synthetic", synthetic_glp(100_000, 20), 256)):
        t = bench_sweep(prob, 100, loop_runs, rounds=1 if quick else 3, batch_size=b)
        b = prob.n // 10 if b is None else b
        for way, aim in (("seed groups", ">= 20"), ("independent runs", "-")):
            key = f"batched ({way})"
            rows.append((f"GLP sweep 64 C x 16 seeds ({label} n={prob.n} p={prob.p} b={b}, 100 Poisson steps): "
                         f"loop / batched, {way}", paired_ratio(t, "loop", key), aim,
                         f"{median(t[key]):.2f} s batched vs {median(t['loop']):.1f} s loop "
                         f"(timed on {loop_runs} runs, x{1024 // loop_runs})"))

    w = max(len(r[0]) for r in rows)
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s), CPU, float32\n")
    print(f"{'measurement'.ljust(w)} | ratio  | aim    | timings")
    print(f"{'-' * w}-|--------|--------|{'-' * 40}")
    for name, ratio, aim, detail in rows:
        print(f"{name.ljust(w)} | {ratio:6.2f} | {aim:6} | {detail}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    args = ap.parse_args()
    main(args.quick, args.threads)
