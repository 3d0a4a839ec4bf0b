"""A tight numerical accountant: privacy-loss distributions composed by FFT.

For a pair of output distributions (P, Q) (the mechanism on D and on a neighbour D')
the *privacy profile* δ(ε) = sup_S P(S) − e^ε Q(S) = E_{L∼P}[(1 − e^{ε−L})_+] is the
tightest (ε, δ) curve, where L = log(P/Q) is the privacy loss. Composition adds
independent privacy losses, so the T-fold profile follows from the T-fold convolution
of the loss distribution — computed here with one FFT.

How this module stays an *upper bound* (every approximation is rounded the safe way):

1. **Connect the dots** (Doroshenko et al. 2022). On the grid ε_i = i·h the exact
   δ(ε_i) of one step is computed in closed form; a discrete loss distribution is built
   whose profile is the piecewise-linear interpolation of these values in e^ε. The
   profile is convex in e^ε, so the chords lie above it: the discrete pair dominates
   the true one, and domination survives composition. The error is second order in h.
2. Loss beyond the top grid point goes to an "infinite loss" mass (= δ(ε_top)).
3. The FFT composes on a window [a, b] of the total loss chosen by Chernoff bounds on
   the discrete distribution; mass above b is bounded by the Chernoff bound and added
   to δ; mass below a wraps around into the window, which can only increase δ.
4. A floating-point error bound for the FFT is added to δ.
5. ε is the exact root of the discrete profile (piecewise closed form), and add/remove
   neighbours are accounted separately and the worse one is reported.

Reported accuracy: the returned ε is never below the truth; its excess is
``PLDAccountant.error_bound`` style — we test ≤ 1e-3 relative against the analytic
Gaussian (q = 1) and dp_accounting's PLD at fine discretization.

References
----------
Koskela, A., Jälkö, J., Honkela, A. (2020). Computing tight differential privacy
guarantees using FFT. AISTATS.
Doroshenko, V., Ghazi, B., Kamath, P., Kumar, R., Manurangsi, P. (2022). Connect the
dots: tighter discrete approximations of privacy loss distributions. PETS.
Zhu, Y., Dong, J., Wang, Y.-X. (2022). Optimal accounting of differential privacy via
characteristic function. AISTATS (dominating pairs, add/remove).
Balle, B., Barthe, G., Gaboardi, M. (2018). Privacy amplification by subsampling:
tight analyses via couplings and divergences. NeurIPS (δ of a subsampled pair).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft
from scipy import special   # scipy.signal is imported where it is used: 0.9 s at import otherwise

from .._validation import check_int, check_nonnegative, check_open_unit, check_positive
from .gaussian import gaussian_delta_for_epsilon

__all__ = ["PLDAccountant", "PLDFallbackWarning", "privacy_profile", "discretize_connect_the_dots"]

_TAIL_SIGMAS = 10.0          # Gaussian tails beyond 10 std (7.6e-24) go to the infinite mass
_WINDOW_TAIL = 1e-15         # Chernoff tail mass allowed outside the FFT window
_MAX_FFT = 1 << 23
_MAX_GRID = 1 << 19          # points of one step's discretized loss (memory: ~4 MB per array)
#: The coarsest grid spacing used. A privacy loss too wide for 2^19 points at this spacing
#: (a Gaussian step with noise multiplier below ~1.4e-3, whose loss spans ~1/z²) is accounted
#: by the RDP accountant instead (``get_epsilon``; a PLDFallbackWarning says so). Coarser
#: grids would stay valid upper bounds in exact arithmetic, but e^h overflows at h ≈ 710.
_MAX_SPACING = 1.0


class PLDFallbackWarning(UserWarning):
    """Lab utility: The PLD accountant could not certify a finite ε on its grid and reports another bound.

    Raised (as a warning) when the FFT composition gives ε = inf — its float error
    bound or the infinite-loss mass exceeds δ (tiny δ, very long runs) — and the
    accountant answers with a coarser grid or with the RDP accountant on the same
    events instead (both are valid upper bounds; see ``PLDAccountant.last_query``);
    and when the privacy loss is too wide for any grid (noise multiplier below ~1.4e-3:
    the loss of one step spans ~1/z²), where ``get_epsilon`` reports the RDP bound and
    ``get_delta`` the trivial bound δ = 1.
    """


# ----------------------------------------------------------------------------------------
# Privacy profiles δ(ε) of single steps
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Profile:
    """δ(ε) of one step in one direction, and the loss range outside which δ is ~0/linear."""

    delta: callable
    lo: float
    hi: float


def _base_profile(event):
    """(δ(ε), loss_lo, loss_hi) of a symmetric base mechanism (δ_{P,Q} = δ_{Q,P})."""
    from .events import EpsilonDeltaEvent, GaussianEvent, LaplaceEvent, unsupported
    if isinstance(event, GaussianEvent):
        z = event.noise_multiplier
        if z == 0:
            return None
        zz = z * z
        r = _TAIL_SIGMAS / z + 0.5 / zz if zz > 0 else math.inf   # inf: too wide for a grid
        return (lambda e: gaussian_delta_for_epsilon(z, e)), -r, r
    if isinstance(event, LaplaceEvent):
        a = 1.0 / event.noise_multiplier

        def laplace_delta(e):
            e = np.asarray(e, dtype=float)
            return np.where(e >= a, 0.0,                 # (branches clamped where not selected)
                            np.where(e <= -a, -np.expm1(np.minimum(e, 0.0)),
                                     -np.expm1(np.minimum(e - a, 0.0) / 2.0)))
        return laplace_delta, -a, a
    if isinstance(event, EpsilonDeltaEvent):
        e0, d0 = event.epsilon, event.delta

        def eps_delta_delta(e):
            e = np.asarray(e, dtype=float)
            hi = np.exp(e0) * np.maximum(-np.expm1(np.minimum(e - e0, 0.0)), 0.0)
            lo = np.maximum(-np.expm1(np.minimum(e + e0, 0.0)), 0.0)
            return d0 + (1.0 - d0) * (hi + lo) / (1.0 + np.exp(e0))
        return eps_delta_delta, -e0, e0
    raise unsupported(event, "PLDAccountant")


def privacy_profile(event):
    """The two privacy profiles (remove, add) of one step, as ``_Profile`` objects.

    For ``PoissonSampledEvent(q, base)`` with base profile δ_b (Balle, Barthe, Gaboardi
    2018, Thm 8 / Zhu, Dong, Wang 2022, Prop. 30):

    * remove, (P, Q) = ((1−q)Q_b + qP_b, Q_b):
      δ(ε) = q · δ_b(log(1 + (e^ε − 1)/q)) for ε > log(1−q), else 1 − e^ε;
    * add, (P, Q) = (Q_b, (1−q)Q_b + qP_b):
      δ(ε) = (1 − (1−q)e^ε) · δ_b(−log(1 + (e^{−ε} − 1)/q)) for ε < −log(1−q), else 0.

    Returns ``None`` for a mechanism without noise (ε = inf).
    """
    from .events import PoissonSampledEvent
    if isinstance(event, PoissonSampledEvent):
        base = _base_profile(event.event)
        if base is None:
            return None
        d_b, lo, hi = base
        q = event.sample_rate
        if q == 1.0:
            p = _Profile(d_b, lo, hi)
            return p, p
        l1q, lq = math.log1p(-q), math.log(q)

        # log(1 + (e^x − 1)/q) for x > log(1 − q); where (e^x − 1)/q would overflow (x − log q
        # > 709, a loss range of hundreds: noise multiplier below ~0.04) as the equal
        # x − log q + log1p(−(1 − q) e^{−x}).
        def log_mix(x):
            big = x - lq > 709.0
            with np.errstate(invalid="ignore", divide="ignore"):
                small_x = np.log1p(np.expm1(np.where(big, 0.0, x)) / q)
                big_x = x - lq + np.log1p(-(1.0 - q) * np.exp(-np.where(big, x, 709.0)))
            return np.where(big, big_x, small_x)

        def remove(e):
            e = np.asarray(e, dtype=float)
            with np.errstate(invalid="ignore", divide="ignore"):
                out = q * d_b(np.where(e > l1q, log_mix(np.where(e > l1q, e, 0.0)), 0.0))
            return np.where(e > l1q, out, -np.expm1(np.minimum(e, l1q)))

        def add(e):
            e = np.asarray(e, dtype=float)
            ok = e < -l1q
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                inner = -log_mix(-np.where(ok, e, 0.0))
                pref = -np.expm1(np.where(ok, e, 0.0)) + q * np.exp(np.where(ok, e, 0.0))
                out = pref * d_b(inner)
            return np.where(ok, out, 0.0)

        lmix = lambda l: float(np.logaddexp(l1q, math.log(q) + l))  # noqa: E731
        return (_Profile(remove, lmix(lo), lmix(hi)), _Profile(add, -lmix(hi), -lmix(lo)))
    base = _base_profile(event)
    if base is None:
        return None
    p = _Profile(*base)
    return p, p


def discretize_connect_the_dots(profile: _Profile, h: float):
    """Discrete loss distribution on the grid i·h dominating ``profile`` (connect the dots).

    Parameters
    ----------
    profile : _Profile
        δ(ε) of the step and its loss range [lo, hi].
    h : float > 0
        Grid spacing (``value_discretization_interval``).

    Returns
    -------
    i0 : int
        Grid index of the first mass (its loss is i0·h).
    masses : ndarray
        Non-negative masses μ_j at losses (i0 + j)·h, with
        μ_j = [(δ_{j+1} − δ_j) − e^h (δ_j − δ_{j−1})] / (e^h − 1), the jumps of the
        slopes of the chords of δ as a function of e^ε (δ_{−1} := 1 at e^ε = 0,
        slope 0 after the last point).
    inf_mass : float
        δ(ε_top), the mass given infinite loss.

    References
    ----------
    Doroshenko et al. (2022), Algorithm 1 ("connect the dots").
    """
    i0 = math.floor(profile.lo / h) - 1
    i1 = math.ceil(profile.hi / h) + 1
    eps = np.arange(i0, i1 + 1) * h
    d = np.asarray(profile.delta(eps), dtype=float)
    em1 = math.expm1(h)
    diff = np.diff(d)                                  # δ_{j+1} − δ_j (≤ 0)
    right = np.append(diff, 0.0) / em1                 # y_j · s_j
    y0_s_left = (d[0] - 1.0) / 1.0                     # chord from (0, 1) to (y_0, δ_0): y_0·s_{-1}
    left = np.concatenate([[y0_s_left], math.exp(h) * diff / em1])
    masses = np.maximum(right - left, 0.0)             # round tiny negatives (float) up to 0
    return i0, masses, float(d[-1])


# ----------------------------------------------------------------------------------------
# Composition by FFT
# ----------------------------------------------------------------------------------------
class _Composed:
    """Composed discrete loss distribution of one direction, on a window of the grid."""

    def __init__(self, parts, h):
        # parts: list of (i0, masses, inf_mass, count)
        self.h = h
        finite_log = 0.0
        for _, _, inf_mass, c in parts:
            finite_log += c * math.log1p(-min(inf_mass, 1.0 - 1e-300))
        self.inf_mass = -math.expm1(finite_log)
        # Chernoff window: Λ(t) = Σ c_j log Σ_k μ_jk e^{t l_k}
        ts = np.logspace(-3, 3, 61)

        def cgf(sign):
            tot = np.zeros_like(ts)
            for i0, m, _, c in parts:
                l = (i0 + np.arange(len(m))) * h
                with np.errstate(divide="ignore"):
                    lm = np.log(m)
                # one t at a time: a [len(ts), len(m)] temporary is GBs for fine grids
                tot += c * np.array([special.logsumexp(lm + sign * t * l) for t in ts])
            return tot
        self._ts, self._cgf_up = ts, cgf(+1.0)
        log_tau = math.log(_WINDOW_TAIL)
        b = np.min((self._cgf_up - log_tau) / ts)
        a = -np.min((cgf(-1.0) - log_tau) / ts)
        lo_idx = math.floor(a / h) - 1
        n = max(math.ceil(b / h) + 2 - lo_idx, 16)
        if n > _MAX_FFT:
            raise _TooFine(n)
        n = sfft.next_fast_len(n, real=True)
        self.lo_idx, self.n = lo_idx, n
        spec = np.ones(n // 2 + 1, dtype=complex)
        n_mult = 0
        for i0, m, _, c in parts:
            pos = (i0 + np.arange(len(m))) % n          # absolute grid index mod n
            arr = np.bincount(pos, weights=m, minlength=n)
            spec *= sfft.rfft(arr) ** c
            n_mult += c
        # position r holds the total index I ≡ r (mod n); unroll to I = lo_idx + k
        pmf = np.roll(sfft.irfft(spec, n=n), -(lo_idx % n))
        # Float error of the FFT route, bounded in ℓ1 via Parseval (Koskela et al. 2020):
        # ||err||_1 <= sqrt(n)||err||_2 = ||E||_2 with |E| <~ eps (π n_mult + 4 log2 n)|spec|.
        # δ(ε), ε >= 0, only reads the n_pos positions with positive loss, and
        # Σ_{k∈S} |err_k| <= sqrt(|S|) ||err||_2 = sqrt(|S|/n) ||E||_2 (Parseval): the
        # slack is that, not the whole ℓ1 norm (which made every δ <= 1e-9 query at
        # T >= 1e4 return inf).
        self.losses = (lo_idx + np.arange(n)) * h
        n_pos = max(int(np.count_nonzero(self.losses > 0)), 1)
        full_norm = math.sqrt(2.0 * float(np.sum(np.abs(spec) ** 2)))
        self.fft_slack = 8 * np.finfo(float).eps * (math.pi * n_mult + 4 * math.log2(n) + 8) \
            * max(full_norm * math.sqrt(n_pos / n), 1.0)
        self.pmf = np.maximum(pmf, 0.0)
        # Chernoff bound on the finite mass above the window (added to δ).
        top = (lo_idx + n) * h
        self.upper_tail = float(np.exp(min(0.0, np.min(self._cgf_up - ts * top))))
        # Suffix sums over positive losses for δ(ε), ε >= 0:
        # s1_j = Σ_{k>=j} c_k and u_j = Σ_{k>=j} c_k e^{l_j - l_k} = c_j + e^{-h} u_{j+1}
        # (a first-order recursion, run as an IIR filter; no overflow for large losses).
        pos = self.losses > 0
        self._l = self.losses[pos]
        c = self.pmf[pos]
        self._s1 = np.cumsum(c[::-1])[::-1]
        from scipy import signal

        self._u = signal.lfilter([1.0], [1.0, -math.exp(-h)], c[::-1])[::-1]
        self.extra = self.inf_mass + self.upper_tail + self.fft_slack

    def delta(self, eps: float) -> float:
        """δ(ε) for ε ≥ 0 (upper bound)."""
        j = int(np.searchsorted(self._l, eps, side="right"))   # first loss > ε
        if j >= len(self._l):
            return min(1.0, self.extra)
        val = self._s1[j] - math.exp(eps - self._l[j]) * self._u[j]
        return min(1.0, max(val, 0.0) + self.extra)

    def epsilon(self, delta: float) -> float:
        """Smallest ε ≥ 0 with δ(ε) ≤ delta (exact for the discrete distribution)."""
        budget = delta - self.extra
        if budget <= 0:
            return math.inf
        if self.delta(0.0) <= delta:
            return 0.0
        # δ at the grid losses: δ(l_j) = s1_{j+1} − e^{-h} u_{j+1}
        dg = np.append(self._s1[1:] - math.exp(-self.h) * self._u[1:], 0.0)
        j = int(np.argmax(dg <= budget))              # first grid loss meeting the budget
        # On (l_{j-1}, l_j]: δ(ε) = s1_j − e^{ε − l_j} u_j; solve δ(ε) = budget.
        s1, u = self._s1[j], self._u[j]
        lo = self._l[j - 1] if j > 0 else 0.0
        if u <= 0 or s1 <= budget:
            return max(lo, 0.0)
        eps = self._l[j] + math.log((s1 - budget) / u)
        eps = min(max(eps, lo), self._l[j])
        return eps + 1e-12 * (1 + abs(eps))           # round up past float error


class _TooFine(Exception):
    pass


class _TooWide(Exception):
    """The privacy loss cannot be put on a grid of spacing ≤ _MAX_SPACING (see there)."""


class PLDAccountant:
    """Tight accountant: privacy-loss distributions, connect-the-dots, FFT composition.

    Source: Zhu, Dong & Wang (2022), Prop. 30 (the Gaussian's privacy loss), composed by FFT as in Koskela, Jälkö & Honkela (2020) and Gopi, Lee & Wutschitz (2021).

    Same interface as :class:`~dpclip_lab.accountants.RDPAccountant`: ``compose(event,
    count)`` then ``get_epsilon(delta)`` / ``get_delta(epsilon)``.

    Supported events: ``GaussianEvent``, ``LaplaceEvent``, ``EpsilonDeltaEvent`` (as its
    exact dominating pair), each optionally inside ``PoissonSampledEvent``;
    ``ComposedEvent``, ``SelfComposedEvent``, ``NoOpEvent``, ``NonPrivateEvent``
    (ε = inf). Not supported: ``SampledWithoutReplacementEvent`` (use RDP).

    Parameters
    ----------
    value_discretization_interval : float > 0, optional
        Grid spacing h of the privacy loss. Default ``None`` picks h per query for about
        ``target_relative_error`` (see ``_auto_h``). If the FFT window would exceed 2^23
        points, h is doubled until it fits (looser, still an upper bound); the spacing
        used last is in ``h_used``.

    Notes
    -----
    Error statement: every step of the computation rounds towards a larger δ (see the
    module docstring), so ``get_epsilon`` is an upper bound on the true ε of the
    composed mechanism (up to the float error bound we add). Its excess over the truth
    comes from the connect-the-dots interpolation (second order in h) and is below
    1e-3 relative in all our tests (``tests/test_accountants_pld.py``).
    """

    def __init__(self, value_discretization_interval=None, target_relative_error=1e-4):
        self.target_relative_error = check_positive(target_relative_error, "target_relative_error")
        if value_discretization_interval is not None:
            value_discretization_interval = check_positive(
                value_discretization_interval, "value_discretization_interval")
        self.value_discretization_interval = value_discretization_interval
        self._leaves = []            # (event, count)
        self.non_private = False
        self._cache = None
        self.last_query = None
        self.h_used = None

    def compose(self, event, count: int = 1) -> "PLDAccountant":
        """Account for ``event`` run ``count`` times; returns ``self``.

        Raises ``ValueError`` naming the event if it is unsupported (nothing is added).
        """
        from .events import NonPrivateEvent, NoOpEvent, flatten
        count = check_int(count, "count", minimum=0)
        new, nonpriv = [], False
        for leaf, c in flatten(event, count):
            if isinstance(leaf, NoOpEvent):
                continue
            if isinstance(leaf, NonPrivateEvent):
                nonpriv = True
                continue
            prof = privacy_profile(leaf)         # raises for unsupported events
            if prof is None:
                nonpriv = True
                continue
            new.append((leaf, c))
        self._leaves.extend(new)
        self.non_private |= nonpriv
        self._cache = None
        return self

    def _grid_points(self, h: float) -> int:
        """Points of the largest one-step discretization at spacing h (before building it)."""
        most = 0.0
        for ev, _ in self._leaves:
            for prof in privacy_profile(ev):
                span = prof.hi - prof.lo
                most = max(most, span / h + 3 if math.isfinite(span) else math.inf)
        return int(min(most, 1e18))

    def _composed(self, h: float):
        """Both directions composed on the grid of spacing h (cached per h).

        The grid is coarsened (h doubled; the result stays an upper bound) until one
        step's discretization has at most 2^19 points and the FFT window at most 2^23,
        *before* anything of that size is allocated. The spacing used is ``h_used``.
        Raises ``_TooWide`` if that needs a spacing above ``_MAX_SPACING``.
        """
        if self._cache is None:
            self._cache = {}
        if h in self._cache:
            self.h_used = self._cache[h][1]
            return self._cache[h][0]
        merged = {}
        for ev, c in self._leaves:                 # merge equal events: one power each
            merged[ev] = merged.get(ev, 0) + c
        h_req = h
        while self._grid_points(h) > _MAX_GRID:
            h *= 2.0
            if h > _MAX_SPACING:
                raise _TooWide(h)
        while True:
            try:
                out = [_Composed([(*_discretize_cached(ev, d, h), c) for ev, c in merged.items()], h)
                       for d in (0, 1)]
                break
            except _TooFine:
                h *= 2.0                             # coarser grid: still an upper bound
                if h > _MAX_SPACING:
                    raise _TooWide(h) from None
        self._cache[h_req] = (out, h)
        self.h_used = h
        return out

    def _auto_h(self, query) -> float:
        """Grid spacing aiming at ``target_relative_error`` (r) when none was given.

        The connect-the-dots excess is second order: about c · n · h² in ε for n composed
        steps, with c ≲ 2 in our tests — and, when ε is only a few grid steps wide
        (tiny ε), about 20 (h/ε)² relative. A first, cheap pass at
        h0 = max(1e-3, range/2^15) (range: the widest one-step loss range) gives ε0; then
        h = min(h_prev, sqrt(r/2 · ε/n), sqrt(r/50) · ε), at least 1e-7, refined while it
        shrinks by more than 4x (ε from a coarse grid overestimates; at most 4 passes),
        rounded down to 1e-3 / 2^k.
        No floor on ε, so ε below 1e-3 is resolved too (the grid-size cap of
        :meth:`_composed` bounds the cost).
        """
        if self.value_discretization_interval is not None:
            return self.value_discretization_interval
        n = sum(c for _, c in self._leaves)
        r = self.target_relative_error
        h = min(max(1e-3, self._grid_points(1.0) / 2.0 ** 15), _MAX_SPACING)
        for _ in range(4):
            eps = query(h)
            if not math.isfinite(eps):
                return h
            eps = max(eps, 1e-9)
            h_new = max(min(h, math.sqrt(r / 2 * eps / n), math.sqrt(r / 50) * eps), 1e-7)
            if h_new < 1e-3:   # 1e-3 / 2^k: grids nest, and kinks at round ε stay on the grid
                h_new = 1e-3 * 2.0 ** math.floor(math.log2(h_new / 1e-3))
            if h_new > h / 4:
                return h_new
            h = h_new
        return h

    def _rdp_epsilon(self, delta: float) -> float:
        """ε of the same events by the RDP accountant (inf if one of them is not RDP-supported)."""
        from .rdp import RDPAccountant
        acc = RDPAccountant()
        try:
            for ev, c in self._leaves:
                acc.compose(ev, c)
        except ValueError:
            return math.inf
        return acc.get_epsilon(delta)

    def get_epsilon(self, delta) -> float:
        """ε of the composed run at ``delta`` (an upper bound; max over add and remove).

        If the FFT composition cannot certify a finite ε (its float-error bound or
        infinite-loss mass reaches δ: tiny δ, very long runs), the accountant tries
        coarser grids and the RDP accountant on the same events, returns the smallest
        of these valid upper bounds, and warns with :class:`PLDFallbackWarning`. What
        was used is recorded in ``last_query`` (``method``: ``"pld"``,
        ``"pld (coarser grid)"`` or ``"rdp"``; ``h``; ``pld_epsilon``; ``rdp_epsilon``).

        If the privacy loss of a step is too wide for a grid (spacing above 1: a Gaussian
        with noise multiplier below ~1.4e-3), the RDP accountant's ε is reported (inf if
        an event has no RDP bound), with the same warning and ``last_query["method"] ==
        "rdp"``, ``last_query["h"] is None``.
        """
        delta = check_open_unit(delta, "delta")
        if self.non_private:
            self.last_query = {"method": "non-private", "epsilon": math.inf}
            return math.inf
        if not self._leaves:
            self.last_query = {"method": "none", "epsilon": 0.0}
            return 0.0
        query = lambda h: max(c.epsilon(delta) for c in self._composed(h))  # noqa: E731
        try:
            eps = query(self._auto_h(query))
        except _TooWide:
            rdp = self._rdp_epsilon(delta)
            self.last_query = {"method": "rdp", "h": None, "epsilon": rdp, "pld_epsilon": math.inf,
                               "rdp_epsilon": rdp}
            warnings.warn(PLDFallbackWarning(
                f"the privacy loss of one step spans more than a PLD grid of {_MAX_GRID} points at "
                f"spacing {_MAX_SPACING:g} covers (noise_multiplier below ~1.4e-3); reporting "
                f"ε = {rdp:.6g} from rdp instead (an upper bound)"), stacklevel=2)
            return rdp
        self.last_query = {"method": "pld", "h": self.h_used, "epsilon": eps}
        if math.isfinite(eps):
            return eps
        best, method, h_best = math.inf, "pld", self.h_used
        h = self.h_used
        for _ in range(4):                         # coarser grids: smaller FFT, smaller error bound
            h *= 8.0
            if h > 0.5:
                break
            try:
                e = query(h)
            except _TooWide:
                break
            if e < best:
                best, method, h_best = e, "pld (coarser grid)", self.h_used
            if math.isfinite(e):
                break
        rdp = self._rdp_epsilon(delta)
        if rdp < best:
            best, method = rdp, "rdp"
        self.last_query = {"method": method, "h": h_best, "epsilon": best, "pld_epsilon": eps,
                           "rdp_epsilon": rdp}
        if math.isfinite(best):
            warnings.warn(PLDFallbackWarning(
                f"PLD accounting on the grid h={self.last_query['h']:.3g} gives ε = inf at δ={delta:g} "
                f"(its float-error bound or tail mass exceeds δ); reporting ε = {best:.6g} from "
                f"{method} instead (an upper bound, possibly looser than a tight PLD)"), stacklevel=2)
        return best

    def get_delta(self, epsilon) -> float:
        """δ of the composed run at ``epsilon`` ≥ 0 (an upper bound).

        Where the privacy loss is too wide for a grid (see :meth:`get_epsilon`), the trivial
        bound δ = 1 is returned, with a :class:`PLDFallbackWarning`.
        """
        epsilon = check_nonnegative(epsilon, "epsilon")
        if self.non_private:
            return 1.0
        if not self._leaves:
            return 0.0
        try:
            h = self._auto_h(lambda h: epsilon)
            return max(c.delta(epsilon) for c in self._composed(h))
        except _TooWide:
            warnings.warn(PLDFallbackWarning(
                f"the privacy loss of one step spans more than a PLD grid of {_MAX_GRID} points at "
                f"spacing {_MAX_SPACING:g} covers (noise_multiplier below ~1.4e-3); reporting the "
                "trivial bound δ = 1"), stacklevel=2)
            return 1.0


_DISC_CACHE: dict = {}


def _discretize_cached(event, direction, h):
    key = (event, direction, h)
    if key not in _DISC_CACHE:
        if len(_DISC_CACHE) > 256:
            _DISC_CACHE.clear()
        prof = privacy_profile(event)[direction]
        _DISC_CACHE[key] = discretize_connect_the_dots(prof, h)
    return _DISC_CACHE[key]
