"""Benchmark: dpclip_lab accountants side by side with Opacus and dp_accounting.

Run:  python benchmarks/bench_accountants.py

For each setting (q, z, T, δ) it prints ε and wall time for
* RDP: ours vs Opacus's RDPAccountant (cold cache, and ours warm as in a δ/T slider);
* PLD: ours (grid aiming at 1e-3, and the default 1e-4) vs dp_accounting's PLD at the coarsest grid among
  1e-3 … 1e-5 whose ε is within 1e-3 relative of the reference (our PLD at h = 1e-5,
  an upper bound converged to ~1e-6);
* get_noise_multiplier: ours (RDP) vs Opacus, for target ε = the RDP ε of the setting.
"""
from __future__ import annotations

import time
import warnings

warnings.filterwarnings("ignore")

SETTINGS = [(256 / 60000, 1.1, 10000, 1e-5), (0.01, 1.0, 1000, 1e-5),
            (0.1, 0.8, 500, 1e-6), (1.0, 10.0, 100, 1e-5)]


def timed(f, repeat=1):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return out, best


def main():
    from dp_accounting import dp_event
    from dp_accounting.pld import PLDAccountant as DpPLD
    from opacus.accountants import RDPAccountant as OpacusRDP
    from opacus.accountants.utils import get_noise_multiplier as opacus_gnm

    from dpclip_lab.accountants import (GaussianEvent, PLDAccountant, PoissonSampledEvent,
                                        get_epsilon, get_noise_multiplier)
    from dpclip_lab.accountants import pld as pld_module
    from dpclip_lab.accountants.rdp import _rdp_psg_cached

    rows = []
    for q, z, T, d in SETTINGS:
        tag = f"q={q:.4g} z={z} T={T} δ={d:g}"

        def ours_rdp():
            return get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=d)

        def opacus_rdp():
            acc = OpacusRDP()
            acc.history = [(z, q, T)]
            return acc.get_epsilon(d)
        _rdp_psg_cached.cache_clear()
        e1, t1 = timed(ours_rdp)
        e1w, t1w = timed(ours_rdp, 5)
        e2, t2 = timed(opacus_rdp, 3)
        rows.append((tag, "ε rdp (cold)", e1, t1, e2, t2))
        rows.append((tag, "ε rdp (warm cache)", e1w, t1w, e2, t2))

        ref = PLDAccountant(1e-5).compose(PoissonSampledEvent(q, GaussianEvent(z)), T).get_epsilon(d)
        pld_module._DISC_CACHE.clear()          # cold: no discretization reused
        ep, tp = timed(lambda: PLDAccountant(target_relative_error=1e-3).compose(
            PoissonSampledEvent(q, GaussianEvent(z)), T).get_epsilon(d))
        pld_module._DISC_CACHE.clear()
        ep4, tp4 = timed(lambda: get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=d,
                                             accountant="pld"))
        for h in (1e-3, 5e-4, 2e-4, 1e-4, 5e-5, 2e-5, 1e-5):
            def dp_pld():
                acc = DpPLD(value_discretization_interval=h)
                acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), T)
                return acc.get_epsilon(d)
            ed, td = timed(dp_pld)
            if abs(ed / ref - 1) <= 1e-3:
                break
        rows.append((tag, f"ε pld 1e-3 (dp_acc h={h:g}); ref {ref:.6g}", ep, tp, ed, td))
        rows.append((tag, "ε pld default 1e-4 (same dp_acc)", ep4, tp4, ed, td))

        target = round(e1, 2)
        zo, tz = timed(lambda: get_noise_multiplier(target_epsilon=target, target_delta=d,
                                                    sample_rate=q, steps=T))
        zr, tzr = timed(lambda: opacus_gnm(target_epsilon=target, target_delta=d,
                                           sample_rate=q, steps=T, epsilon_tolerance=0.01))
        rows.append((tag, f"z for ε={target} (rdp)", zo, tz, zr, tzr))

    head = f"{'setting':34s} {'quantity':40s} {'ours':>10s} {'t ours':>9s} {'theirs':>10s} " \
           f"{'t theirs':>9s} {'val ratio':>10s} {'speedup':>8s}"
    print(head)
    print("-" * len(head))
    for tag, what, vo, to, vr, tr in rows:
        print(f"{tag:34s} {what:40s} {vo:10.5g} {to * 1e3:7.1f}ms {vr:10.5g} {tr * 1e3:7.1f}ms "
              f"{vo / vr:10.6f} {tr / to:7.1f}x")
    print("\ntheirs = Opacus 1.6 (rdp, get_noise_multiplier), dp_accounting 0.6 PLD (pld).")
    print("val ratio = ours / theirs; speedup = t theirs / t ours.")


if __name__ == "__main__":
    main()
