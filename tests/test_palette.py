"""The book's colours stay apart for readers who do not see red and green apart (issue #29).

Each role colour of ``dpclip_lab.plotting.COLORS`` is simulated for protanopia, deuteranopia and
tritanopia (Machado, Oliveira & Fernandes 2009, severity 1, in linear RGB) and every pair of roles
must stay at least :data:`MIN_DELTA_E` apart in CIEDE2000 (Sharma, Wu & Dalal 2005), a difference
seen at a glance. Line styles and markers (and the HTML legend's swatches) add a second cue.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpclip_lab.plotting import COLOR_NAMES, COLORS, PALETTE, color_name

#: The smallest CIEDE2000 difference between two role colours, with normal vision and each
#: simulated dichromacy (the Okabe–Ito palette with the book's greys reaches 10.8).
MIN_DELTA_E = 10.0

MACHADO = {
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _to_linear(c):
    c = np.asarray(c, float)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _to_srgb(c):
    c = np.clip(c, 0, 1)
    return np.where(c <= 0.0031308, 12.92 * c, 1.055 * c ** (1 / 2.4) - 0.055)


def _rgb(hexcode: str) -> np.ndarray:
    h = hexcode.lstrip("#")
    return np.array([int(h[i:i + 2], 16) for i in (0, 2, 4)]) / 255


def simulate(rgb, kind: str | None) -> np.ndarray:
    return rgb if kind is None else _to_srgb(MACHADO[kind] @ _to_linear(rgb))


def lab(rgb) -> np.ndarray:
    """CIE L*a*b* (D65) of an sRGB colour in [0, 1]."""
    m = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]])
    xyz = m @ _to_linear(rgb) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def ciede2000(lab1, lab2) -> float:
    """CIEDE2000 colour difference (Sharma, Wu & Dalal 2005), kL = kC = kH = 1."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    cbar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(cbar ** 7 / (cbar ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p, h2p = np.degrees(np.arctan2(b1, a1p)) % 360, np.degrees(np.arctan2(b2, a2p)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2p - h1p + 180) % 360 - 180
    dhp = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    lbar, cbarp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hbar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hbar = (h1p + h2p) / 2
    else:
        hbar = (h1p + h2p + (360 if h1p + h2p < 360 else -360)) / 2
    t = (1 - 0.17 * np.cos(np.radians(hbar - 30)) + 0.24 * np.cos(np.radians(2 * hbar))
         + 0.32 * np.cos(np.radians(3 * hbar + 6)) - 0.20 * np.cos(np.radians(4 * hbar - 63)))
    rc = 2 * np.sqrt(cbarp ** 7 / (cbarp ** 7 + 25 ** 7))
    sl = 1 + 0.015 * (lbar - 50) ** 2 / np.sqrt(20 + (lbar - 50) ** 2)
    sc, sh = 1 + 0.045 * cbarp, 1 + 0.015 * cbarp * t
    rt = -np.sin(np.radians(60 * np.exp(-((hbar - 275) / 25) ** 2))) * rc
    dl, dc, dhh = (l2 - l1) / sl, (c2p - c1p) / sc, dhp / sh
    return float(np.sqrt(dl ** 2 + dc ** 2 + dhh ** 2 + rt * dc * dhh))


def closest_pairs(colors: dict[str, str]) -> list[tuple[float, str, str, str]]:
    out = []
    for kind in (None, *MACHADO):
        labs = {k: lab(simulate(_rgb(v), kind)) for k, v in colors.items()}
        out += [(ciede2000(labs[a], labs[b]), kind or "normal vision", a, b)
                for a, b in itertools.combinations(colors, 2)]
    return sorted(out)


def test_ciede2000_matches_sharma_et_al():
    # Sharma, Wu & Dalal (2005), Table 1, pairs 1, 7 and 17
    assert ciede2000((50, 2.6772, -79.7751), (50, 0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)
    assert ciede2000((50, 0, 0), (50, -1, 2)) == pytest.approx(2.3669, abs=1e-4)
    assert ciede2000((50, 2.5, 0), (73, 25, -18)) == pytest.approx(27.1492, abs=1e-4)


def test_role_colours_stay_apart_for_colour_blind_readers():
    worst = closest_pairs(COLORS)[:3]
    d, kind, a, b = worst[0]
    assert d >= MIN_DELTA_E, (f"roles {a!r} and {b!r} are only ΔE00 = {d:.1f} apart with {kind} "
                              f"(bound {MIN_DELTA_E}); the closest pairs: {worst}")


def test_the_palette_check_can_fail():
    # red and green of a traffic light: apart for most readers, one colour with deuteranopia
    d, kind, _, _ = closest_pairs({"a": "#D62728", "b": "#2CA02C", "c": "#1F77B4"})[0]
    assert d < MIN_DELTA_E and kind in ("protanopia", "deuteranopia")


def test_every_role_and_palette_colour_has_a_name():
    for role in COLORS:
        assert color_name(role) in set(COLOR_NAMES.values())
    for hexcode in PALETTE:
        assert hexcode.upper() in COLOR_NAMES
    with pytest.raises(ValueError, match="role_or_hex"):
        color_name("mauve")
