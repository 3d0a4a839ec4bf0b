"""Benchmark: dpclip_lab accountants side by side with Opacus and dp_accounting.

Run:  python benchmarks/bench_accountants.py [--repeat N]

For each setting (q, z, T, δ) it prints ε (or z) and the median wall time of
* RDP: ours vs Opacus's RDPAccountant, cold (our RDP cache cleared before every call;
  Opacus has none), and ours warm as in a δ/T slider;
* PLD: ours (grid aiming at 1e-3, and the default 1e-4) vs dp_accounting's PLD at the coarsest grid among
  1e-3 … 1e-5 whose ε is within 1e-3 relative of the reference (our PLD at h = 1e-5,
  an upper bound converged to ~1e-6);
* get_noise_multiplier: ours (RDP, cold) vs Opacus, for target ε = the RDP ε of the setting.

The machine may be shared, so the two sides are timed *interleaved* (ours, theirs, ours,
theirs, … with the order alternating) and the medians compared: the speedup column is a
ratio measured under the same load. A last table times ``epsilon_curve`` (ours only).
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

SETTINGS = [(256 / 60000, 1.1, 10000, 1e-5), (0.01, 1.0, 1000, 1e-5),
            (0.1, 0.8, 500, 1e-6), (1.0, 10.0, 100, 1e-5)]


def interleaved(ours, theirs, repeat, setup=lambda: None):
    """Median times of ``ours`` and ``theirs``, called alternately ``repeat`` times each.

    ``setup`` runs (untimed) before every call of ``ours`` (e.g. to clear a cache).
    Returns (value ours, t ours, value theirs, t theirs).
    """
    t_o, t_t = [], []
    v_o = v_t = None
    for r in range(repeat):
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            if side == 0:
                setup()
                t = time.perf_counter()
                v_o = ours()
                t_o.append(time.perf_counter() - t)
            else:
                t = time.perf_counter()
                v_t = theirs()
                t_t.append(time.perf_counter() - t)
    return v_o, statistics.median(t_o), v_t, statistics.median(t_t)


def main(repeat: int = 15):
    from dp_accounting import dp_event
    from dp_accounting.pld import PLDAccountant as DpPLD
    from opacus.accountants import RDPAccountant as OpacusRDP
    from opacus.accountants.utils import get_noise_multiplier as opacus_gnm

    from dpclip_lab import accountants as acc_module
    from dpclip_lab.accountants import (GaussianEvent, PLDAccountant, PoissonSampledEvent,
                                        get_epsilon, get_noise_multiplier)
    from dpclip_lab.accountants import pld as pld_module
    from dpclip_lab.accountants.rdp import _rdp_psg_cached

    slow = max(3, repeat // 5)
    rows, curve_rows = [], []
    for q, z, T, d in SETTINGS:
        tag = f"q={q:.4g} z={z} T={T} δ={d:g}"

        def ours_rdp():
            return get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=d)

        def opacus_rdp():
            acc = OpacusRDP()
            acc.history = [(z, q, T)]
            return acc.get_epsilon(d)

        rows.append((tag, "ε rdp (cold)",
                     *interleaved(ours_rdp, opacus_rdp, repeat, setup=_rdp_psg_cached.cache_clear)))
        ours_rdp()
        rows.append((tag, "ε rdp (warm cache)", *interleaved(ours_rdp, opacus_rdp, repeat)))
        e_rdp = rows[-1][2]

        ref = PLDAccountant(1e-5).compose(PoissonSampledEvent(q, GaussianEvent(z)), T).get_epsilon(d)
        for h in (1e-3, 5e-4, 2e-4, 1e-4, 5e-5, 2e-5, 1e-5):
            def dp_pld(h=h):
                acc = DpPLD(value_discretization_interval=h)
                acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), T)
                return acc.get_epsilon(d)
            if abs(dp_pld() / ref - 1) <= 1e-3:
                break

        def ours_pld_3():
            return PLDAccountant(target_relative_error=1e-3).compose(
                PoissonSampledEvent(q, GaussianEvent(z)), T).get_epsilon(d)

        def ours_pld_4():
            return get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=d, accountant="pld")
        rows.append((tag, f"ε pld 1e-3 (dp_acc h={h:g}); ref {ref:.6g}",
                     *interleaved(ours_pld_3, dp_pld, slow, setup=pld_module._DISC_CACHE.clear)))
        rows.append((tag, "ε pld default 1e-4 (same dp_acc)",
                     *interleaved(ours_pld_4, dp_pld, slow, setup=pld_module._DISC_CACHE.clear)))

        target = round(e_rdp, 2)
        rows.append((tag, f"z for ε={target} (rdp, cold)", *interleaved(
            lambda: get_noise_multiplier(target_epsilon=target, target_delta=d, sample_rate=q, steps=T),
            lambda: opacus_gnm(target_epsilon=target, target_delta=d, sample_rate=q, steps=T,
                               epsilon_tolerance=0.01),
            slow, setup=_rdp_psg_cached.cache_clear)))

        if hasattr(acc_module, "epsilon_curve"):
            for accountant in ("rdp", "pld"):
                def curve(accountant=accountant):
                    return acc_module.epsilon_curve(noise_multiplier=z, sample_rate=q, steps=T,
                                                    delta=d, accountant=accountant)
                _, t_c, _, _ = interleaved(curve, lambda: None, slow,
                                           setup=_rdp_psg_cached.cache_clear)
                steps, eps = curve()
                curve_rows.append((tag, accountant, len(steps), float(eps[-1]), t_c))

    head = f"{'setting':34s} {'quantity':40s} {'ours':>10s} {'t ours':>9s} {'theirs':>10s} " \
           f"{'t theirs':>9s} {'val ratio':>10s} {'speedup':>8s}"
    print(head)
    print("-" * len(head))
    for tag, what, vo, to, vr, tr in rows:
        print(f"{tag:34s} {what:40s} {vo:10.5g} {to * 1e3:7.2f}ms {vr:10.5g} {tr * 1e3:7.2f}ms "
              f"{vo / vr:10.6f} {tr / to:7.1f}x")
    print("\ntheirs = Opacus 1.6 (rdp, get_noise_multiplier), dp_accounting 0.6 PLD (pld).")
    print("val ratio = ours / theirs; speedup = t theirs / t ours (medians, timed interleaved).")
    if curve_rows:
        print(f"\n{'setting':34s} {'epsilon_curve':14s} {'points':>7s} {'ε at T':>9s} {'time':>10s}")
        for tag, accountant, n, e, t in curve_rows:
            print(f"{tag:34s} {accountant:14s} {n:7d} {e:9.5g} {t * 1e3:8.1f}ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed calls per side (fast rows)")
    main(parser.parse_args().repeat)
