"""Accountants at the ends of the float range: never a crash, a NaN or an ε below the truth.

Issue items 5, 6, 7 and 9:

* ``get_noise_multiplier`` keeps its contract (target − tol < ε(z) ≤ target) for huge
  targets, searching downward as far as needed, and says so when no z meets it (5);
* RDP, PLD and the without-replacement RDP bound give, for every noise multiplier
  z > 0, a finite ε ≥ 0, inf, or a ValueError naming ``noise_multiplier`` — never a
  crash or NaN — non-increasing in z, PLD ≤ RDP, and never below the exact ε (6);
* ``dpclip-lab epsilon -z 1e300`` prints no stray numpy warning (7);
* the analytic Gaussian calibration rounds the safe way at every input: δ(σ) ≤ target
  with δ computed in as many mpmath digits as its cancellation needs (9).
"""
import ast
import math
import warnings
from pathlib import Path

import mpmath
import numpy as np
import pytest

from dpclip_lab import cli
from dpclip_lab.accountants import (GaussianEvent, PLDAccountant, RDPAccountant,
                                    SampledWithoutReplacementEvent, SelfComposedEvent,
                                    analytic_gaussian_delta, analytic_gaussian_epsilon,
                                    analytic_gaussian_sigma, calibration, get_epsilon,
                                    get_noise_multiplier, rdp_gaussian,
                                    rdp_poisson_subsampled_gaussian,
                                    rdp_sampled_without_replacement_gaussian)
from dpclip_lab.accountants.pld import PLDFallbackWarning

ACCOUNTANTS = Path(__file__).resolve().parent.parent / "dpclip_lab" / "accountants"


def _true_delta(sigma, eps, sensitivity=1.0):
    """δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8) at z = σ/Δ (exactly, for the
    float inputs), in enough digits for the cancellation of Φ(a) − e^ε Φ(b) (a − b = 1/z: up
    to ~log10(z) + log10(εz²) digits)."""
    z = sigma / sensitivity
    digits = 100 + int(abs(math.log10(z))) + int(max(0.0, math.log10(max(eps * z * z, 1.0))))
    with mpmath.workdps(digits):
        z, eps = mpmath.mpf(sigma) / mpmath.mpf(sensitivity), mpmath.mpf(eps)
        a, b = 1 / (2 * z) - eps * z, -1 / (2 * z) - eps * z
        return mpmath.ncdf(a) - mpmath.exp(eps) * mpmath.ncdf(b)


# ----------------------------------------------------------------------------------------
# Item 5: get_noise_multiplier at huge targets
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("target, q", [(1e9, 0.01), (1e9, 1.0), (1e300, 0.01)])
def test_huge_target_epsilon_keeps_the_contract(target, q):
    """target 1e9 returned z = 1.0 (ε = 1.21; z/2 also met the target): the downward search
    stopped at 1e-3 and a for…else returned the upper end."""
    z = get_noise_multiplier(target_epsilon=target, target_delta=1e-5, sample_rate=q, steps=100)
    e = get_epsilon(noise_multiplier=z, sample_rate=q, steps=100, delta=1e-5)
    assert target - 0.01 <= e <= target
    assert z < 1e-3


def test_pld_huge_target_searches_past_the_old_crash():
    """``get_noise_multiplier(1000, ..., q=0.01, T=100, "pld")`` evaluated PLD at z = 4^-3 and
    crashed there (ValueError: cannot convert float NaN to integer); T = 10 takes the same
    path (a wide tolerance keeps the bisection short)."""
    z = get_noise_multiplier(target_epsilon=1000, target_delta=1e-5, sample_rate=0.01, steps=10,
                             accountant="pld", epsilon_tolerance=200)
    e = get_epsilon(noise_multiplier=z, sample_rate=0.01, steps=10, delta=1e-5, accountant="pld")
    assert 800 <= e <= 1000


def test_unreachable_tolerance_is_an_error_not_a_wrong_z(monkeypatch):
    """An ε that jumps over the tolerance window between two adjacent floats: the old
    bisection stopped at 1e-9 relative width and returned a z outside the contract."""
    def jumpy(*, noise_multiplier, **_):
        return 10.0 if noise_multiplier < 0.3 else 1.0
    monkeypatch.setattr(calibration, "get_epsilon", jumpy)
    with pytest.raises(ValueError, match="epsilon_tolerance"):
        calibration.get_noise_multiplier(target_epsilon=5.0, target_delta=1e-5, sample_rate=0.01,
                                         steps=10)


# ----------------------------------------------------------------------------------------
# Item 6: every accountant at extreme noise multipliers
# ----------------------------------------------------------------------------------------
ZS = (1e-300, 1e-200, 1e-160, 1e-4, 0.01, 0.035, 1e8, 1e300)
QS = (1e-3, 0.01, 0.5, 1.0)
WOR = {1e-3: (1000, 1), 0.01: (100, 1), 0.5: (2, 1), 1.0: (1, 1)}   # q -> (n, sample_size)
T, DELTA = 10, 1e-5


def _valid(f):
    """f() as a float: finite and >= 0, or inf; or None for a ValueError naming noise_multiplier."""
    try:
        e = f()
    except ValueError as err:
        assert "noise_multiplier" in str(err), err
        return None
    assert isinstance(e, float) and not math.isnan(e) and e >= 0, e
    return e


def _non_increasing(values):
    finite = [v for v in values if v is not None]
    assert all(a >= b for a, b in zip(finite, finite[1:])), finite


@pytest.mark.parametrize("q", QS)
def test_extreme_noise_multipliers_give_valid_bounds(q):
    """NaN, OverflowError, ZeroDivisionError and "rdp must be non-negative ... got nan" at
    z = 1e-300 ... 1e300 (PLD: q < 1 and z <= 0.035, z <= 1e-4, z = 1e300; RDP: z <= 1e-160;
    the WOR bound: z = 1e-300 and 1e300)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # no stray numpy warnings either
        warnings.simplefilter("ignore", PLDFallbackWarning)
        rdp = [_valid(lambda: get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=DELTA))
               for z in ZS]
        pld = [_valid(lambda: get_epsilon(noise_multiplier=z, sample_rate=q, steps=T, delta=DELTA,
                                          accountant="pld")) for z in ZS]
        n, m = WOR[q]
        wor = [_valid(lambda: RDPAccountant().compose(
            SampledWithoutReplacementEvent(n, m, GaussianEvent(z)), T).get_epsilon(DELTA)) for z in ZS]
    for eps in (rdp, pld, wor):
        _non_increasing(eps)
    for z, r, p in zip(ZS, rdp, pld):
        if r is not None and p is not None and math.isfinite(r):
            assert p <= r * (1 + 1e-9) + 1e-12, (z, p, r)    # PLD is tight or falls back to RDP
    assert rdp[-1] < 2e-3 and pld[-1] < 2e-3 and wor[-1] < 2e-3  # z = 1e300: ε ≈ 0, no crash
    if q == 1.0:                                             # T Gaussians = one at z / √T, exactly
        for z, r, p in zip(ZS, rdp, pld):
            try:
                exact = analytic_gaussian_epsilon(z / math.sqrt(T), DELTA)
            except ValueError:                               # ε beyond 1e12 (or unresolvable)
                exact = 1e12 if z < 1 else None
            if exact is not None:
                for e in (r, p):
                    assert e is None or e >= exact * (1 - 1e-12), (z, e, exact)


def test_dicesgd_style_self_composed_gaussian_at_tiny_multiplier():
    """DiceSGDResult.epsilon(accountant="pld") composes SelfComposedEvent(GaussianEvent(z_eff), T);
    at large batch sizes z_eff is tiny and PLD crashed."""
    for z in (1e-4, 1e-160, 1e-300):
        acc = PLDAccountant().compose(SelfComposedEvent(GaussianEvent(z), 100))
        with pytest.warns(PLDFallbackWarning, match="noise_multiplier"):
            e = acc.get_epsilon(1e-5)
        assert acc.last_query["method"] == "rdp"
        assert e == math.inf or e >= 1e9
        with pytest.warns(PLDFallbackWarning):
            assert acc.get_delta(1.0) == 1.0


def test_rdp_curves_at_huge_multiplier_are_positive_and_quiet():
    """z = 1e300: 0·inf NaNs and log(0) warnings in the series; an underflowed ρ = 0 would
    make the accountant report ε = 0 for a private run."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rho in (rdp_gaussian(1e300), rdp_poisson_subsampled_gaussian(0.01, 1e300),
                    rdp_sampled_without_replacement_gaussian(0.01, 1e300)):
            assert np.all(rho > 0) and np.all(np.isfinite(rho))


def test_rdp_and_conversions_do_not_import_each_other():
    """House rule: imports go downwards; rdp ↔ conversions was a lazy circle."""
    def imported(name):
        tree = ast.parse((ACCOUNTANTS / f"{name}.py").read_text(encoding="utf-8"))
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "rdp" not in imported("conversions")
    assert "conversions" in imported("rdp")


# ----------------------------------------------------------------------------------------
# Item 7: the CLI at z = 1e300
# ----------------------------------------------------------------------------------------
def test_cli_epsilon_at_huge_multiplier_prints_no_stray_warning(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["epsilon", "-z", "1e300", "-d", "1e-5", "-q", "0.01", "-T", "100",
                         "-a", "both"]) == 0
    out, err = capsys.readouterr()
    assert not caught, [str(w.message) for w in caught]
    assert err == ""
    assert "epsilon = 0.0014" in out and "nan" not in out.lower()


def test_cli_reports_the_pld_fallback_once_as_a_warning_line(capsys):
    assert cli.main(["epsilon", "-z", "1e-4", "-d", "1e-5", "-q", "0.01", "-T", "100", "-a", "pld"]) == 0
    out, err = capsys.readouterr()
    assert "epsilon = 5049954633" in out
    assert err.count("warning:") == 1 and "rdp" in err


# ----------------------------------------------------------------------------------------
# Item 9: analytic Gaussian calibration, rounded the safe way
# ----------------------------------------------------------------------------------------
SIGMA_CASES = [  # (ε, δ): σ ≥ 1e8, ε ≈ 1e-9, ε large, δ near 0 and near 1
    (1e-9, 1e-9), (1e-8, 1e-12), (1e-9, 1e-100), (1e-9, 1e-300), (1e-6, 1e-9), (1e-9, 1e-5),
    (0.1, 1e-12), (1.0, 1e-100), (1.0, 1e-5), (50.0, 1e-300), (1e3, 1e-5), (1e6, 1e-9),
    (0.5, 1 - 1e-9), (1e-9, 0.5),
]


@pytest.mark.parametrize("eps, delta", SIGMA_CASES)
def test_analytic_sigma_meets_delta_exactly(eps, delta):
    """Old: δ(σ) above the target by 1e-15 … 0.18 relative (σ ≥ 1e8, ε ≈ 1e-9, tiny δ)."""
    for sens in (1.0, 3.0):
        s = analytic_gaussian_sigma(eps, delta, sens)
        true = _true_delta(s, eps, sens)
        assert true <= delta, (s, float(true / delta - 1))
        assert true >= delta * (1 - 1e-5)     # and not wastefully large
        assert analytic_gaussian_delta(s, eps, sens) >= true


def test_analytic_sigma_at_epsilon_beyond_float_resolution_is_still_valid():
    """ε = 1e20: δ(σ) cannot be resolved in floats (1/(2z) − εz cancels); σ is rounded up
    against the cruder bound δ ≤ Φ(1/(2z) − εz) — valid, not an error or a guess."""
    s = analytic_gaussian_sigma(1e20, 1e-5)
    assert _true_delta(s, 1e20) <= 1e-5
    assert analytic_gaussian_delta(s, 1e20) <= 1e-5


@pytest.mark.parametrize("z", [1e8, 1e10, 1e12, 1e15, 1e-2, 0.5, 1e4])
def test_analytic_epsilon_is_never_below_the_truth(z):
    """Old: δ(ε) above δ by up to 4e90 relative (z = 1e12, δ = 1e-300): ε under-reported."""
    for delta in (1e-300, 1e-100, 1e-12, 1e-5, 0.5, 1 - 1e-9):
        e = analytic_gaussian_epsilon(z, delta)
        true = _true_delta(z, e)
        assert true <= delta, (z, delta, e, float(true / delta - 1))
        if e > 0:                              # the smallest such ε, to ~1e-9
            assert _true_delta(z, e * (1 - 1e-9)) > delta or true >= delta * (1 - 1e-6)
        assert analytic_gaussian_delta(z, e) >= true
