"""Numbers written for a reader (prose and tables): :func:`fmt`, :func:`readable`.

A core module (no plotting dependency): the lab's table helpers (:mod:`dpclip_lab.comparison`)
and the book's figures (:mod:`dpclip_lab.plotting`, which re-exports it as ``dp.fmt``) share it.
"""
from __future__ import annotations

import math
import re

__all__ = ["fmt", "readable"]

_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_EXPONENT_FORM = re.compile(r"([+\-]?)(\d+(?:\.\d*)?)[eE]([+\-]?\d+)")


def _power_form(mantissa: str, exponent: str) -> str:
    """``"2.1", "-03"`` as ``"2.1 × 10⁻³"`` (a mantissa of 1 as ``"10⁻³"``)."""
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    return power if mantissa in ("1", "1.") else f"{mantissa} × {power}"


#: What :func:`fmt` prints for a value it is told is rounding error (``zero_below``).
ROUNDING_ZERO = "0 (rounding error)"


def fmt(value: float, spec: str = ".3g", *, zero_below: float | None = None) -> str:
    """Lab utility: a number for prose and tables, as ``format(value, spec)`` but written for a reader.

    * Never ``-0``: a small negative value rounded to zero prints ``"-0.0000"`` with ``format``;
      here it prints ``"0.0000"`` (the sign of a value that rounds to zero says nothing).
    * Integers of five or more digits get thousands separators with the default ``spec``
      (``928,441``, not ``928441``).
    * No exponent form: where ``format`` writes ``3.65e+03`` or ``1.5e-09``, this writes
      ``3.65 × 10³`` and ``1.5 × 10⁻⁹`` (``1e+06`` becomes ``10⁶``).
    * Infinity as ``∞`` (an ε with no bound), not ``inf``.
    * ``zero_below``: a value smaller in magnitude is floating-point rounding of an exact zero
      (an asymmetry of 1.1 × 10⁻¹⁶ where the theory says 0) and prints :data:`ROUNDING_ZERO`.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(f"value must be a number, got {type(value).__name__}")
    if zero_below is not None and not (isinstance(zero_below, (int, float)) and zero_below > 0):
        raise ValueError(f"zero_below must be a positive number or None, got {zero_below!r}")
    v = value if isinstance(value, int) else float(value)   # an int keeps integer specs ("d")
    if zero_below is not None and math.isfinite(v) and abs(v) < zero_below:
        return ROUNDING_ZERO
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"   # a privacy loss with no bound (a NaN stays "nan": a bug to see)
    if spec == ".3g" and math.isfinite(v) and v == int(v) and abs(v) >= 1e4 and abs(v) < 1e15:
        out = f"{int(v):,}"
    else:
        out = format(v, spec)
    if out.startswith("-") and math.isfinite(v):
        digits = out.lstrip("-").replace(",", "")
        mantissa = digits.split("e")[0].split("E")[0].rstrip("%")
        if mantissa and set(mantissa) <= set("0."):
            out = out[1:]
    m = _EXPONENT_FORM.fullmatch(out)
    if m:
        sign, mantissa, exponent = m.groups()
        out = sign + _power_form(mantissa, exponent)
    return out


_PLAIN_NUMBER = re.compile(r"\s*([+\-−]?)(\d[\d,]*(?:\.\d*)?(?:[eE][+\-]?\d+)?%?)\s*")


def readable(text: str) -> str:
    """Lab utility: ``text`` as prose prints it, if ``text`` is one number in Python's notation.

    The book's glued numbers (``{glue:text}`name:.2e```) are Python's formatting of a value:
    ``"2.1e-03"`` becomes ``"2.1 × 10⁻³"``, ``"1e-05"`` becomes ``"10⁻⁵"``, and a negative
    number gets a true minus sign (``"-0.94"`` becomes ``"−0.94"``; ``"-0.00"`` becomes ``"0.00"``).
    Any other text (a word, a sentence, a range) is returned unchanged.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    m = _PLAIN_NUMBER.fullmatch(text)
    if not m:
        return text
    sign, body = m.groups()
    e = _EXPONENT_FORM.fullmatch(body)
    if e:
        _, mantissa, exponent = e.groups()
        body = _power_form(mantissa, exponent)
    zero = set(body.split(" ")[0].rstrip("%").replace(",", "")) <= set("0.")
    return ("" if zero or not sign else "+" if sign == "+" else "−") + body
