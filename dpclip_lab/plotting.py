"""Plotly figures that survive into the static HTML book, and the book's look.

Importing this module does three things:

1. registers a plotly template ``"dpclip"`` (one palette, white background) and
   makes it the default, so every chapter looks the same;
2. registers a plotly renderer ``"dpclip"`` and makes it the default. It emits
   the plotly JSON (``application/vnd.plotly.v1+json``, drawn by JupyterLab,
   VS Code and Binder) *and* ``text/html`` that calls ``Plotly.newPlot`` on the
   plotly.js that the book serves from ``_static/``. With plotly >= 6 the
   default renderer emits only the JSON, which the book builder (myst-nb)
   drops, so the figure would silently vanish from the HTML book;
3. defines the colours that mean the same thing in every chapter
   (:data:`COLORS`: unclipped per-example gradients are always blue, clipped
   ones always orange, the true gradient always black, ...).

Every "vary it and watch" demo in the book is made twice:

* :func:`slider_figure` — a plotly slider over *precomputed* frames. It runs in
  the browser with no kernel, so it moves in the static HTML book.
* :func:`live` — an ipywidgets control that recomputes the figure in a running
  kernel (Jupyter, Binder). While the static book is built it is replaced by one
  clear "run this live in Jupyter / Binder" box: a drawn widget with no kernel
  behind it would show sliders that look real and do nothing.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.base_renderers import MimetypeRenderer

from .numbers import fmt  # noqa: F401  (re-exported: dp.fmt)

__all__ = [
    "COLORS",
    "PALETTE",
    "TEMPLATE_NAME",
    "RENDERER_NAME",
    "HTML_ONLY_ENV",
    "HEADLESS_ENV",
    "BookRenderer",
    "show",
    "slider_figure",
    "figure_from",
    "live",
    "live_placeholder",
    "LIVE_PLACEHOLDER_CLASS",
    "plane_basis",
    "gradient_cloud",
    "cloud_extent",
    "clipped_cloud",
    "norm_histogram",
    "error_curves",
    "error_markers",
    "lines",
    "nice_number",
    "arrows",
    "ARROW_WIDTHS",
    "missing_axis_titles",
    "fmt",
    "COLOR_NAMES",
    "color_name",
    "figure_label",
    "numbers_table",
    "plot_text",
]

TEMPLATE_NAME = "dpclip"
RENDERER_NAME = "dpclip"
#: Set to "1" by the book build (``_ext/offline_assets.py``): emit text/html only.
HTML_ONLY_ENV = "DPCLIP_HTML_ONLY"
#: Set to "1" when a notebook is executed with no frontend (grading with otter, ``make
#: assignments``): :func:`live` then draws its placeholder instead of widgets. See :func:`live`.
HEADLESS_ENV = "DPCLIP_HEADLESS"

#: The book's palette (colour-blind friendly; Okabe & Ito 2008), in colorway order.
PALETTE = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#000000",  # black
)

#: What a colour means, in every chapter: one role per colour, one colour per role
#: (``tests/test_plotting.py`` checks that no two roles share a colour). Colour by role
#: (``COLORS["optimum"]``), not by palette index: an index says nothing about meaning, and
#: the same green once meant both "optimum" and "error feedback".
COLORS = {
    "unclipped": PALETTE[0],      # raw per-example gradients, non-private runs
    "clipped": PALETTE[1],        # clipped per-example gradients, clipped runs
    "true": "#222222",            # the true (full, unclipped mean) gradient
    "clipped_mean": PALETTE[5],   # mean of the clipped gradients
    "noisy": PALETTE[3],          # what a private algorithm releases (clip + noise)
    "feedback": PALETTE[2],       # error feedback / bias-corrected methods (DiceSGD)
    "optimum": PALETTE[4],        # theta*, the non-private optimum (sky blue; never the feedback green)
    "threshold": "#707070",       # the clipping norm C drawn as a line or circle
    "neutral": "#BBBBBB",
}

#: Room (px) between the plot area and the slider: the x tick labels and the x-axis title sit there.
_SLIDER_PAD = 70

#: What the prose calls each colour of the book (one source of truth: a chapter that names a
#: colour uses this word, and ``tests/test_book_html.py`` checks that a colour named on a page is
#: one its figures draw). Vermillion reads as red, reddish purple as purple.
COLOR_NAMES = {
    "#0072B2": "blue",
    "#E69F00": "orange",
    "#009E73": "green",
    "#CC79A7": "purple",
    "#56B4E9": "sky blue",
    "#D55E00": "red",
    "#F0E442": "yellow",
    "#000000": "black",
    "#222222": "black",
    "#707070": "grey",
    "#7F7F7F": "grey",
    "#BBBBBB": "grey",
}


def color_name(role_or_hex: str) -> str:
    """Lab utility: the word for a colour of the book: ``color_name("optimum")`` is ``"sky blue"``.

    Takes a role of :data:`COLORS` or a colour of :data:`PALETTE`; chapters glue it into the
    prose so that the text names the colour the figure draws.
    """
    hexcode = COLORS.get(role_or_hex, role_or_hex)
    try:
        return COLOR_NAMES[str(hexcode).upper()]
    except KeyError:
        raise ValueError(f"role_or_hex must be a role of COLORS ({', '.join(COLORS)}) or a colour of "
                         f"COLOR_NAMES, got {role_or_hex!r}") from None


_FONT = "Inter, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"

pio.templates[TEMPLATE_NAME] = go.layout.Template(
    layout=dict(
        colorway=list(PALETTE),
        font=dict(family=_FONT, size=13, color="#222222"),
        paper_bgcolor="white",
        plot_bgcolor="white",
        margin=dict(l=60, r=20, t=60, b=50),
        hovermode="closest",
        # hover labels show a trace's whole name (plotly cuts it at 15 characters: "DPSGD-GC (sa…")
        hoverlabel=dict(namelength=-1),
        legend=dict(bgcolor="rgba(255,255,255,0.7)"),
        # exponentformat "power": a log axis over small numbers reads 10⁻⁵, not "10μ" (SI prefixes
        # mean units, and these axes have none)
        xaxis=dict(showgrid=True, gridcolor="#EEEEEE", zeroline=False, exponentformat="power",
                   linecolor="#888888", ticks="outside", mirror=False, automargin=True),
        yaxis=dict(showgrid=True, gridcolor="#EEEEEE", zeroline=False, exponentformat="power",
                   linecolor="#888888", ticks="outside", mirror=False, automargin=True),
        sliders=[dict(currentvalue=dict(font=dict(size=13)), pad=dict(t=_SLIDER_PAD))],
    )
)
pio.templates.default = "plotly_white+" + TEMPLATE_NAME

_DEFAULT_HEIGHT = 460
_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
_counter = itertools.count()


class BookRenderer(MimetypeRenderer):
    """Lab utility: Plotly renderer that works both in Jupyter and in the static HTML book.

    Returns a mime bundle with

    * ``application/vnd.plotly.v1+json`` — for JupyterLab / VS Code / Binder;
    * ``text/html`` — a ``<div>`` and a ``Plotly.newPlot`` call, *without*
      plotly.js (the book serves one copy from ``_static/plotly.min.js``), without
      MathJax, and with ``auto_play=False`` (else animation frames play on load).

    The ``<div>`` id is derived from the figure's content (plus a counter), so
    rebuilding the book gives the same HTML.

    While the book is being built, ``_ext/offline_assets.py`` sets the
    environment variable ``DPCLIP_HTML_ONLY=1`` (the kernels inherit it) and
    the JSON is left out: myst-nb cannot render it and warns about every
    figure, and the book builds with ``-W``. Keeping that warning on means a
    figure shown *without* this renderer (JSON only) fails the build instead of
    silently vanishing from the book.
    """

    def __init__(self, config: Mapping[str, Any] | None = None):
        self.config = dict(_PLOTLY_CONFIG if config is None else config)

    def to_mimebundle(self, fig_dict):
        fig_dict = _reader_defaults(json.loads(pio.to_json(fig_dict, validate=False, remove_uids=False)))
        if self.config:
            fig_dict["config"] = dict(self.config)
        as_json = pio.to_json(fig_dict, validate=False, remove_uids=False)
        digest = hashlib.sha1(as_json.encode("utf-8")).hexdigest()[:12]
        height = (fig_dict.get("layout") or {}).get("height") or _DEFAULT_HEIGHT
        html_dict = _compact(fig_dict)
        layout = dict(html_dict.get("layout") or {})
        # a fixed width is cut off on a phone: the page figure always fills its column
        layout.pop("width", None)
        # the page draws the legend in HTML under the figure (_static/dpclip-figures.js), where it
        # never covers the slider, the data or a title, and wraps on a phone; meta says whether
        # the figure asked for one (None: plotly's default, a legend for two or more named traces)
        meta = layout.get("meta") if isinstance(layout.get("meta"), dict) else {}
        layout["meta"] = dict(meta, dpclip_legend=layout.get("showlegend"))
        layout["showlegend"] = False
        html_dict = dict(html_dict, layout=layout)
        columns = _subplot_columns(layout)
        html = pio.to_html(
            html_dict,
            config=self.config,
            include_plotlyjs=False,
            include_mathjax=False,
            full_html=False,
            auto_play=False,
            default_height=f"{int(height)}px",
            validate=False,
            div_id=f"dpclip-fig-{digest}-{next(_counter)}",
        )
        if columns > 1:
            # side-by-side panels keep a readable width; where the column is narrower, the page
            # stacks them one above the other (_static/dpclip-figures.js, stackPanels), and without
            # its script the row scrolls sideways in its own box (the page never does)
            html = html.replace('class="plotly-graph-div" style="', 'class="plotly-graph-div" style="min-width:'
                                f'{_PANEL_MIN_WIDTH * columns}px; ', 1)
            html = ('<div class="dpclip-figure-scroll" tabindex="0" role="region" '
                    f'aria-label="figure with {columns} panels side by side">'
                    f"{html}</div>")
        html = _with_words(html, fig_dict)
        if os.environ.get(HTML_ONLY_ENV) == "1":
            return {"text/html": html}
        return {
            "application/vnd.plotly.v1+json": json.loads(as_json),
            "text/html": html,
        }


#: The narrowest a panel of a multi-panel figure gets (px); in a narrower column the page stacks the
#: panels (``PANEL_MIN`` of ``_static/dpclip-figures.js``: the same number).
_PANEL_MIN_WIDTH = 220


def _subplot_columns(layout: Mapping[str, Any]) -> int:
    """How many panels sit side by side (distinct x-axis domains of the figure's x axes)."""
    starts = set()
    for key, axis in layout.items():
        if re.fullmatch(r"xaxis\d*", key) and isinstance(axis, Mapping) and axis.get("domain") is not None:
            if axis.get("overlaying") or axis.get("anchor") == "free":
                continue
            starts.add(round(float(axis["domain"][0]), 3))
    return max(1, len(starts))


#: The room between neighbouring panels (paper units) for the tick labels and title of the
#: next panel's axis, so that no axis title sits on a neighbour's data (1280 and 400 px).
_GAP_WITH_TITLE = {"x": 0.14, "y": 0.2}
_GAP_TICKS_ONLY = {"x": 0.08, "y": 0.1}


def _panels_apart(layout: dict, letter: str) -> dict:
    """``layout`` with its panels moved apart along ``letter`` ("x": columns, "y": rows) where
    the gap between two neighbours is too small for the axis labels between them.

    Panel widths keep their proportions; the subplot titles (paper annotations at a panel's
    centre or top) move with their panels.
    """
    other = "y" if letter == "x" else "x"
    axes = {k: v for k, v in layout.items() if re.fullmatch(letter + r"axis\d*", k) and isinstance(v, Mapping)
            and v.get("domain") is not None and not v.get("overlaying") and v.get("anchor") != "free"}
    spans = sorted({(round(float(a["domain"][0]), 6), round(float(a["domain"][1]), 6)) for a in axes.values()})
    if len(spans) < 2 or any(b[0] < a[1] - 1e-9 for a, b in zip(spans, spans[1:])):
        return layout        # one panel, or overlapping panels: nothing to do
    # between two columns sit the y tick labels (and y title) of the right one; between two rows
    # the x tick labels (and x title) of the upper one and the subplot title of the lower one
    def titled(span):
        for a in axes.values():
            if (round(float(a["domain"][0]), 6), round(float(a["domain"][1]), 6)) != span:
                continue
            partner = layout.get(other + "axis" + (a.get("anchor") or other)[1:]) or {}
            title = (partner if letter == "x" else a).get("title")
            if isinstance(title, Mapping) and title.get("text") or isinstance(title, str) and title:
                return True
        return False
    need = []
    for k, (a, b) in enumerate(zip(spans, spans[1:])):
        side = b if letter == "x" else a
        need.append(max(b[0] - a[1], (_GAP_WITH_TITLE if titled(side) else _GAP_TICKS_ONLY)[letter]))
    old_gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    if all(n <= g + 1e-9 for n, g in zip(need, old_gaps)):
        return layout
    lo, hi = spans[0][0], spans[-1][1]
    widths = [b - a for a, b in spans]
    scale = (hi - lo - sum(need)) / sum(widths)
    if scale <= 0.3:
        return layout        # no room: leave the figure as it was drawn
    new, at = {}, lo
    for k, (span, w) in enumerate(zip(spans, widths)):
        new[span] = (at, at + w * scale)
        at += w * scale + (need[k] if k < len(need) else 0)
    layout = dict(layout)
    for key, axis in axes.items():
        span = (round(float(axis["domain"][0]), 6), round(float(axis["domain"][1]), 6))
        layout[key] = dict(axis, domain=list(new[span]))
    moved = []
    for ann in layout.get("annotations") or []:
        ann = dict(ann)
        if ann.get(letter + "ref", "paper") == "paper" and isinstance(ann.get(letter), (int, float)):
            v = float(ann[letter])
            for span, (a, b) in new.items():
                if letter == "x" and abs(v - (span[0] + span[1]) / 2) < 1e-6:
                    ann["x"] = (a + b) / 2
                elif letter == "y" and abs(v - span[1]) < 1e-6:
                    ann["y"] = b
        moved.append(ann)
    if moved:
        layout["annotations"] = moved
    return layout


def _array(value) -> "np.ndarray | None":
    """A trace attribute (list, or plotly's base64 typed array) as a numpy array, else None."""
    import base64

    import numpy as np

    if isinstance(value, Mapping) and isinstance(value.get("bdata"), str):
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value.get("dtype", "f8")).newbyteorder("<"))
        shape = value.get("shape")
        if shape:
            arr = arr.reshape([int(k) for k in str(shape).split(",")])
        return arr
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) or v is None for v in value):
        return np.array([np.nan if v is None else v for v in value], dtype=float)
    return None


_SUBSCRIPTS = str.maketrans("0123456789aehijklmnoprstuvx+-=()", "₀₁₂₃₄₅₆₇₈₉ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ₊₋₌₍₎")
_SUPERSCRIPTS = str.maketrans("0123456789+-=()inpT*", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿᵖᵀ*")


def _plain_scripts(text: str) -> str:
    """``<sub>i</sub>`` as ``ᵢ`` (``<sup>p</sup>`` as ``ᵖ``) where Unicode has the letters, else ``_i``."""
    def sub(m, table, mark):
        inner = m.group(1)
        out = inner.translate(table)
        return out if all(o != c for c, o in zip(inner, out) if c not in " *") else f"{mark}{inner}"
    text = re.sub(r"<sub>(.*?)</sub>", lambda m: sub(m, _SUBSCRIPTS, "_"), text)
    return re.sub(r"<sup>(.*?)</sup>", lambda m: sub(m, _SUPERSCRIPTS, "^"), text)


def _text(value) -> str:
    """Plain text of a plotly title or name (no HTML tags; sub- and superscripts as characters)."""
    if isinstance(value, Mapping):
        value = value.get("text")
    text = re.sub(r"\s*<br\s*/?>\s*", " ", _plain_scripts(str(value or "")))   # a line break is a space
    return re.sub(r"<[^>]+>", "", text).strip()


#: TeX-like scripts written in a figure's text ("x_t", "F_{c,k}", "ℝ^p"): plotly shows them as typed.
#: The base is one letter (not the end of a word: ``per_example`` is a name, not a subscript) or a
#: closing bracket, norm bar, ℝ, ∇, * or prime.
_TEX_SCRIPT = re.compile(r"((?<![A-Za-z\u0370-\u03ff_])[A-Za-z\u0370-\u03ff][\u0300-\u036f]?|[)\]}‖|ℝ∇*'′])"
                         r"([_^])(\{[^{}]{1,20}\}|[A-Za-z0-9\u0370-\u03ff\u0300-\u036f]+)(?![A-Za-z0-9_])")


def plot_text(text):
    """Lab utility: a figure's text with TeX-like sub- and superscripts as plotly draws them.

    Plotly draws its text as typed: ``"x_t"``, ``"F_{c,k}(x)"`` and ``"ℝ^p"`` would show the
    underscore and the braces. Here they become ``x<sub>t</sub>``, ``F<sub>c,k</sub>(x)`` and
    ``ℝ<sup>p</sup>``, which plotly renders. The book's renderer applies it to every trace name,
    title, axis title, annotation and slider label. Non-strings are returned unchanged.
    """
    if not isinstance(text, str) or ("_" not in text and "^" not in text):
        return text

    def repl(m):
        inner = m.group(3)[1:-1] if m.group(3).startswith("{") else m.group(3)
        tag = "sub" if m.group(2) == "_" else "sup"
        return f"{m.group(1)}<{tag}>{inner}</{tag}>"
    return _TEX_SCRIPT.sub(repl, text)


def _scripts_in(obj, key=None):
    """``obj`` (a layout or a trace) with :func:`plot_text` applied to its text fields."""
    if isinstance(obj, Mapping):
        return {k: _scripts_in(v, k) for k, v in obj.items()}
    if isinstance(obj, list) and key in ("annotations", "sliders", "steps"):
        return [_scripts_in(v) for v in obj]
    if key in ("name", "text", "prefix", "label") and isinstance(obj, str):
        return plot_text(obj)
    return obj


def _num(v: float) -> str:
    import numpy as np

    if not np.isfinite(v):
        return "–"
    if v == 0:
        v = 0.0          # no "−0"
    return fmt(v, ".4g").replace("-", "−")      # 1.131 × 10⁹, not 1.131e9 or 1.455e+33


#: Relative to the largest value on its linear axis, a value below this is rounding error (drawn at 0).
_ROUNDING = 1e-12
#: Rows of a figure's "Show the numbers" table when its curves share their x values.
_TABLE_ROWS = 12
#: A grid of at most this many x values is shown whole (a reader missed c = 0.3162 of sixteen).
_TABLE_ALL_ROWS = 20


def figure_label(fig_dict: Mapping[str, Any]) -> str:
    """Lab utility: the words that name a figure for a screen reader: its title, what its axes
    show, and what its slider moves (``aria-label`` of the figure in the book)."""
    layout = fig_dict.get("layout") or {}
    parts = [_text(layout.get("title")) or "Figure"]
    axes, seen = [], set()
    for key in sorted(k for k in layout if re.fullmatch(r"[xy]axis\d*", k)):
        title = _text((layout[key] or {}).get("title"))
        if title and (key[0], title) not in seen:
            seen.add((key[0], title))
            axes.append(f"{key[0]}: {title}")
    if axes:
        parts.append("axes " + "; ".join(axes))
    for slider in layout.get("sliders") or []:
        prefix = _text((slider.get("currentvalue") or {}).get("prefix")).rstrip(" =:")
        steps = slider.get("steps") or []
        if prefix and steps:
            parts.append(f"a slider over {prefix} from {steps[0].get('label')} to {steps[-1].get('label')}")
    names = [_text(t.get("name")) for t in fig_dict.get("data") or [] if t.get("name") and t.get("showlegend", True)]
    if names:
        shown = list(dict.fromkeys(names))
        parts.append("curves: " + ", ".join(shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else ""))
    return ". ".join(parts) + "."


def numbers_table(fig_dict: Mapping[str, Any]) -> str:
    """Lab utility: the figure's data as a small HTML table (what the figure shows, in numbers).

    Curves that share their x values: one row per x (at most twelve, evenly spaced) and one
    column per curve. Otherwise one row per trace: its points, its x range and y range. For a
    figure with a slider this is the step shown when the page loads.
    """
    import html as _html

    import numpy as np

    rows, refs = [], []           # refs: each row's (x axis, y axis) references, "x2", "y2"
    data = list(fig_dict.get("data") or [])
    layout = fig_dict.get("layout") or {}
    bars = _category_table(data, layout)
    if bars:
        return bars
    for k, tr in enumerate(data):
        x, y = _array(tr.get("x")), _array(tr.get("y"))
        if y is None and x is None:
            continue
        if y is not None and y.ndim != 1 or x is not None and x.ndim != 1:
            continue
        name = _html_scripts(tr.get("name")) or _html_scripts(_unnamed(data, k, x, y, fig_dict.get("layout")))
        if x is None:
            x = np.arange(len(y), dtype=float)
        if y is None:
            y = np.full(len(x), np.nan)
        rows.append((name, x.astype(float), y.astype(float)))
        refs.append((tr.get("xaxis") or "x", tr.get("yaxis") or "y"))
    if not rows:
        return ""
    # rounding error drawn as data: on a linear y axis a value under 10⁻¹² of the axis's largest is
    # drawn at zero, and the table says 0 (a fourth reading met "6.163 × 10⁻³³ to 12.5")
    scale: dict[str, float] = {}
    for (_, _, y), (_, yref) in zip(rows, refs):
        fin = np.abs(y[np.isfinite(y)])
        if fin.size and (layout.get(_axis_key(yref)) or {}).get("type") != "log":
            scale[yref] = max(scale.get(yref, 0.0), float(fin.max()))
    rows = [(n, x, np.where(np.abs(y) < _ROUNDING * scale[yref], 0.0, y) if yref in scale else y)
            for (n, x, y), (_, yref) in zip(rows, refs)]
    # the first x axis may carry no title where it shares the x of a panel below it
    xt = next((t for key in sorted((k for k in layout if re.fullmatch(r"xaxis\d*", k)), key=lambda k: int(k[5:] or 1))
               for t in [_text((layout[key] or {}).get("title"))] if t), "x")
    # curves that share a name say which is which: one per value of x (a column of seeds) its x;
    # one per panel (the same quantity drawn in d = 1 and in d = 10) its panel's title, or the
    # quantity its y axis shows; otherwise (several runs of one panel) its place, "2 of 5"
    names = [r[0] for r in rows]

    def x_axis(ref):
        return layout.get(_axis_key(ref[0])) or {}

    def which(k, n, x, ref):
        axis = x_axis(ref)
        group = [j for j, m in enumerate(names) if m == n]
        if len(group) < 2:
            return n
        if len(x) and np.all(x == x[0]):
            return f"{n}, {_html.escape(_text(axis.get('title')) or xt)} = {_tick(axis, float(x[0]))}"
        for said in (lambda r: _panel_title(layout, *r), lambda r: _text((layout.get(_axis_key(r[1])) or {}).get("title"))):
            words = [said(refs[j]) for j in group]
            if all(words) and len(set(words)) == len(group):
                return f"{n} ({_html.escape(words[group.index(k)])})"
        return f"{n} ({group.index(k) + 1} of {len(group)})"

    rows = [(which(k, n, x, ref), x, y) for k, ((n, x, y), ref) in enumerate(zip(rows, refs))]
    esc = _html.escape
    same_x = len(rows) > 1 and all(len(r[1]) == len(rows[0][1]) and np.allclose(r[1], rows[0][1], equal_nan=True)
                                   for r in rows) and len(rows) <= 8
    if same_x or len(rows) == 1 and len(rows[0][1]) <= 4 * _TABLE_ROWS:
        x0 = rows[0][1]
        # every row of a short grid (a slider's 16 clip norms: none skipped); twelve of a long one
        rows_shown = len(x0) if len(x0) <= _TABLE_ALL_ROWS else _TABLE_ROWS
        pick = np.unique(np.linspace(0, len(x0) - 1, rows_shown).round().astype(int)) if len(x0) else []
        head = "".join(f"<th scope='col'>{r[0]}</th>" for r in rows)
        body = "".join("<tr><th scope='row'>" + _tick(x_axis(refs[0]), float(x0[i])) + "</th>" + "".join(f"<td>{_num(r[2][i])}</td>" for r in rows)
                       + "</tr>" for i in pick)
        return f"<table><thead><tr><th scope='col'>{esc(xt)}</th>{head}</tr></thead><tbody>{body}</tbody></table>"
    body = ""
    for name, x, y in rows:
        fx, fy = x[np.isfinite(x)], y[np.isfinite(y)]
        xr = f"{_num(fx.min())} to {_num(fx.max())}" if fx.size else "–"
        yr = f"{_num(fy.min())} to {_num(fy.max())}" if fy.size else "–"
        body += f"<tr><th scope='row'>{name}</th><td>{len(x)}</td><td>{xr}</td><td>{yr}</td></tr>"
    return ("<table><thead><tr><th scope='col'>trace</th><th scope='col'>points</th>"
            f"<th scope='col'>x range</th><th scope='col'>y range</th></tr></thead><tbody>{body}</tbody></table>")


def _tick(axis: Mapping[str, Any], v: float) -> str:
    """``v`` as the axis labels it: its tick text where the axis names its ticks (k = 0 drawn at
    0.3 on a log axis reads "0"), else the number."""
    import html as _html

    vals, texts = axis.get("tickvals"), axis.get("ticktext")
    if isinstance(vals, (list, tuple)) and isinstance(texts, (list, tuple)):
        for tv, tt in zip(vals, texts):
            if isinstance(tv, (int, float)) and abs(float(tv) - v) <= 1e-9 * max(1.0, abs(v)):
                return _html.escape(_text(tt))
    return _num(v)


def _category_table(data: list, layout: Mapping[str, Any]) -> str:
    """A bar chart over named categories as a table: one row per category, one column per bar
    trace (its value); "" when the figure has no such bars."""
    import html as _html

    bars = [t for t in data if t.get("type") == "bar"]
    if not bars:
        return ""
    cols = []
    for tr in bars:
        horizontal = tr.get("orientation") == "h"
        cats, vals = (tr.get("y"), tr.get("x")) if horizontal else (tr.get("x"), tr.get("y"))
        vals = _array(vals)
        if not (isinstance(cats, (list, tuple)) and cats and all(isinstance(c, str) for c in cats)) or vals is None:
            return ""
        axis = layout.get("xaxis" if horizontal else "yaxis") or {}
        cols.append((_html_scripts(tr.get("name")) or _html.escape(_text(axis.get("title")) or "value"),
                     dict(zip(cats, vals.astype(float)))))
    cats = list(dict.fromkeys(c for _, col in cols for c in col))
    side = _text((layout.get("yaxis" if bars[0].get("orientation") == "h" else "xaxis") or {}).get("title"))
    head = "".join(f"<th scope='col'>{name}</th>" for name, _ in cols)
    body = "".join("<tr><th scope='row'>" + _html_scripts(c) + "</th>"
                   + "".join(f"<td>{_num(col[c]) if c in col else '–'}</td>" for _, col in cols) + "</tr>" for c in cats)
    return (f"<table><thead><tr><th scope='col'>{_html.escape(side or 'category')}</th>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _html_scripts(value) -> str:
    """A trace name for an HTML table: escaped, with its sub- and superscripts (:func:`plot_text`)
    kept as ``<sub>``/``<sup>`` (other tags dropped)."""
    import html as _html

    text = plot_text(value.get("text") if isinstance(value, Mapping) else str(value or ""))
    text = re.sub(r"<(?!/?(?:sub|sup)>)[^>]+>", "", re.sub(r"\s*<br\s*/?>\s*", " ", text)).strip()
    parts = re.split(r"(</?(?:sub|sup)>)", text)
    return "".join(p if re.fullmatch(r"</?(?:sub|sup)>", p) else _html.escape(p) for p in parts)


def _axis_key(ref: str) -> str:
    """The layout key of a trace's axis reference: ``"x2"`` -> ``"xaxis2"``, ``"y"`` -> ``"yaxis"``."""
    return ref[0] + "axis" + ref[1:]


def _panel_title(layout: Mapping[str, Any], xref: str, yref: str) -> str:
    """The title of the subplot on axes ``xref``/``yref`` ("x2", "y2"): the annotation that plotly's
    ``make_subplots`` centres above the panel; "" if there is none."""
    xdom = (layout.get(_axis_key(xref)) or {}).get("domain") or [0, 1]
    ydom = (layout.get(_axis_key(yref)) or {}).get("domain") or [0, 1]
    centre, top = (float(xdom[0]) + float(xdom[1])) / 2, float(ydom[1])
    for ann in layout.get("annotations") or []:
        if (ann.get("xref") == "paper" and ann.get("yref") == "paper" and ann.get("yanchor") == "bottom"
                and isinstance(ann.get("x"), (int, float)) and isinstance(ann.get("y"), (int, float))
                and abs(float(ann["x"]) - centre) < 0.02 and abs(float(ann["y"]) - top) < 0.02):
            return _text(ann.get("text"))
    return ""


def _described(tr: Mapping[str, Any], layout: Mapping[str, Any], data: list) -> str:
    """Words for an unnamed trace from what the figure says about it: the fixed text of its hover
    label ("DPSGD-GC: chosen η"), the quantity its axis shows (a histogram *of* its x axis, a
    heatmap's colour bar, a curve's y axis) and its panel's title; "" if the figure says nothing."""
    hover = re.sub(r"%\{[^}]*\}|<extra>.*?</extra>|<[^>]+>", "", str(tr.get("hovertemplate") or ""))
    hover = re.sub(r"\s*[=:]\s*$", "", re.sub(r"\s+", " ", hover)).strip(" ,;")
    if len(re.sub(r"[\W\d_]", "", hover)) >= 3 and "=" not in hover:
        return _text(hover)
    text = tr.get("text")
    text = text[0] if isinstance(text, (list, tuple)) and len(text) == 1 else text
    if isinstance(text, str) and len(re.sub(r"[\W\d_]", "", text)) >= 3:
        return _text(text)      # a marked point that says what it is ("Thm 2.2 breaks at ε = 0.53")
    xref, yref = tr.get("xaxis") or "x", tr.get("yaxis") or "y"
    xt = _text((layout.get(_axis_key(xref)) or {}).get("title"))
    yt = _text((layout.get(_axis_key(yref)) or {}).get("title"))
    panel = _panel_title(layout, xref, yref)
    kind = tr.get("type", "scatter")
    if kind == "histogram":
        what = f"histogram of {xt or yt}" if (xt or yt) else "histogram"
    elif kind in ("heatmap", "contour"):
        bar = _text(((tr.get("colorbar") or {}).get("title")))
        what = bar or (f"colour over {xt} and {yt}" if xt and yt else "")
    elif kind == "bar":
        what = f"bars of {xt if tr.get('orientation') == 'h' else yt}".strip() if (xt or yt) else ""
    elif tr.get("mode") == "markers":
        return f"points ({panel})" if panel else ""
    else:
        # a curve is its panel's, or says what its y axis shows where the figure has more than one
        several = len({t.get("yaxis") or "y" for t in data}) > 1
        return panel or (yt if several else "")
    if panel and what and panel not in what:
        return f"{what} ({panel})"
    return what or panel


def _unnamed(data: list, k: int, x, y, layout: Mapping[str, Any] | None = None) -> str:
    """What an unnamed trace of a figure is, for its row of the numbers table: the edge of a band
    (named after the curve it shades), a reference line, what the figure's axes, panel titles and
    hover labels say it is (:func:`_described`), or, last, an unlabelled curve ("scatter 2" says
    nothing to a reader; the book's checks fail on "unlabelled" too: a chapter then names it)."""
    import numpy as np

    tr = data[k]
    group = tr.get("legendgroup")
    kin = next((_text(t.get("name")) for t in data if group and t.get("legendgroup") == group and t.get("name")), "")
    nxt = data[k + 1] if k + 1 < len(data) else {}
    partner = nxt if nxt.get("fill") == "tonexty" else data[k - 1] if tr.get("fill") == "tonexty" and k > 0 else None
    if partner is not None or tr.get("fill") not in (None, "none"):
        other = _array(partner.get("y")) if partner is not None else None
        mine = y[np.isfinite(y)] if y is not None else np.array([])
        theirs = other[np.isfinite(other)] if other is not None and other.ndim == 1 else np.array([])
        edge = ("upper" if mine.mean() >= theirs.mean() else "lower") if mine.size and theirs.size else "one"
        return f"band around {kin}, {edge} edge" if kin else f"shaded band, {edge} edge"
    for vals, axis in ((y, "y"), (x, "x")):
        v = None if vals is None else vals[np.isfinite(vals)] if vals.dtype.kind == "f" else None
        if v is not None and v.size >= 2 and np.all(v == v[0]):
            return f"reference line {axis} = {_num(float(v[0]))}"
    said = _described(tr, layout or {}, data)
    if said:
        return said
    if group and kin:
        return f"{kin} (a second curve)"
    return f"unlabelled {tr.get('type', 'scatter')} {k + 1}"


def _with_words(html: str, fig_dict: Mapping[str, Any]) -> str:
    """The figure's HTML inside a ``<figure>`` named for screen readers (:func:`figure_label`), with
    a "Show the numbers" fold holding :func:`numbers_table`."""
    import html as _html

    label = _html.escape(figure_label(fig_dict), quote=True)
    table = numbers_table(fig_dict)
    fold = (f'<details class="dpclip-numbers"><summary>Show the numbers</summary>{table}</details>' if table else "")
    return f'<figure class="dpclip-figure" aria-label="{label}">{html}{fold}</figure>'


def _reader_trace(trace: Mapping[str, Any], named: bool = False) -> dict:
    """One trace with the defaults a reader needs (see :func:`_reader_defaults`); ``named``: the
    figure trace that a frame's trace updates has a name."""
    trace = dict(trace)
    for key in ("name", "legendgrouptitle"):
        if key in trace:
            trace[key] = _scripts_in(trace[key], key if key == "name" else None)
    if (trace.get("type") == "histogram" and trace.get("nbinsx") and not trace.get("xbins")
            and trace.get("x") is not None and trace.get("y") is None):
        # plotly would pick its own "nice" bins near nbinsx, taller than the ones the figure's
        # fixed ranges were computed with (_histogram_extent): its tallest bar could leave the panel
        import numpy as np

        arr = np.asarray(trace["x"], dtype=float) if isinstance(trace["x"], np.ndarray) else _array(trace["x"])
        vals = arr[np.isfinite(arr)] if arr is not None and arr.dtype.kind in "fiu" else np.array([])
        if vals.size >= 2 and vals.max() > vals.min():
            size = float(vals.max() - vals.min()) / int(trace["nbinsx"])
            trace["xbins"] = dict(start=float(vals.min()), end=float(vals.max()) + 1e-6 * size, size=size)
    fill = trace.get("fill")
    if fill not in (None, "none") and "mode" not in trace and trace.get("type", "scatter") == "scatter":
        # a band: plotly's default mode for < 20 points is lines+markers, which puts markers
        # at the band's corners that look like data
        trace["mode"] = "lines"
    if not named and not trace.get("name") and "hovertemplate" not in trace and trace.get("hoverinfo") in (None, "all"):
        # an unnamed trace shows its values on hover, not "trace 3"
        trace["hoverinfo"] = "x+y+text"
    return trace


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def log_tick_text(v: float, *, plain: bool = True) -> str:
    """A log axis's tick label as the book writes numbers: 0.002, 20 and 5000 plainly (``plain``,
    for an axis whose ticks all lie in [10⁻³, 10⁴)), 10⁻⁵ and 2×10⁻⁵ otherwise (1 and 10 stay
    plain). plotly's "power" labels read "2x10" for 20 and "5x10⁻¹" for 0.5."""
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"v must be a positive finite number, got {v!r}")
    if plain and 1e-3 <= v < 1e4:
        return f"{v:.3g}" if v < 1 else f"{v:.4g}"
    e = math.floor(math.log10(v) + 1e-9)
    m = round(v / 10 ** e, 2)
    if m == 1 and e in (0, 1):
        return "1" if e == 0 else "10"
    power = "10" + str(e).translate(_SUPERSCRIPT)
    return power if m == 1 else f"{m:g}×{power}"


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values of a log axis spanning 10**lo to 10**hi: 1, 2, 5 per decade over up to 2.5
    decades (every digit over a fraction of one), every decade up to 8, and every 2nd, 3rd, 5th,
    10th or 20th decade beyond (at most about 8 labels)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        raise ValueError(f"lo and hi must be finite with lo <= hi, got {lo!r}, {hi!r}")
    span = hi - lo

    def ticks_of(mantissas, step):
        out = []
        for e in range(math.floor(lo / step) * step, math.ceil(hi) + 1, step):
            for m in mantissas:
                v = float(f"{m * 10.0 ** e:.6g}")
                if 10 ** (lo - 1e-9) <= v <= 10 ** (hi + 1e-9):
                    out.append(v)
        return out

    if span > 8:
        return ticks_of((1,), next((k for k in (2, 3, 5, 10, 20) if span / k <= 8), 50))
    if span > 2.5:
        return ticks_of((1,), 1)
    ticks = ticks_of((1, 2, 5), 1)
    return ticks if len(ticks) >= 3 else ticks_of((1, 2, 3, 4, 5, 6, 7, 8, 9), 1)


def _log_axis_extents(fig_dict: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Per log axis of ``fig_dict``: (log10 min, log10 max) of its positive data, frames included."""
    layout = fig_dict.get("layout") or {}
    traces = list(fig_dict.get("data") or [])
    for frame in fig_dict.get("frames") or []:
        traces += list(frame.get("data") or [])
    out: dict[str, tuple[float, float]] = {}
    for t in traces:
        if not isinstance(t, Mapping):
            continue
        for coord in ("x", "y"):
            key = _axis_key(t.get(coord + "axis") or coord)
            if (layout.get(key) or {}).get("type") != "log":
                continue
            arr = _array(t.get(coord))       # plotly writes numpy data as base64 typed arrays
            vals = [float(v) for v in arr.ravel() if v > 0 and math.isfinite(v)] if arr is not None and \
                arr.dtype.kind in "fiu" else []
            if vals:
                lo, hi = out.get(key, (math.inf, -math.inf))
                out[key] = (min(lo, math.log10(min(vals))), max(hi, math.log10(max(vals))))
    return out


def _whole_log_labels(layout: dict, fig_dict: Mapping[str, Any] | None = None) -> dict:
    """``layout`` with every log axis labelled as the book writes numbers (:func:`log_tick_text` at
    :func:`log_ticks`), over its range or, without one, its data's. plotly's own labels read "2x10"
    for 20 ("power") or a bare "5" for 0.5 ("small digits"). An axis that names its ticks (tickvals,
    dtick) keeps them; where neither range nor data is known, plotly labels every number in full."""
    extents = _log_axis_extents(fig_dict) if fig_dict is not None else {}
    ours = []
    for key, axis in list(layout.items()):
        if not (re.fullmatch(r"[xy]axis\d*", key) and isinstance(axis, Mapping) and axis.get("type") == "log"):
            continue
        axis = dict(axis)
        if "minorloglabels" not in axis:
            axis["minorloglabels"] = "complete"
        named = any(axis.get(k) is not None for k in ("tickvals", "dtick", "ticktext"))
        rng = axis.get("range")
        if not named and isinstance(rng, (list, tuple)) and len(rng) == 2 and all(
                isinstance(r, (int, float)) for r in rng):
            lo, hi = sorted(map(float, rng))
        elif not named and key in extents:
            lo, hi = extents[key]
        else:
            layout[key] = axis
            continue
        ticks = log_ticks(lo, hi)
        if len(ticks) >= 2:
            plain = all(1e-3 <= v < 1e4 for v in ticks)
            axis.update(tickmode="array", tickvals=ticks, ticktext=[log_tick_text(v, plain=plain) for v in ticks])
            ours.append(key)
        layout[key] = axis
    if ours and isinstance(layout.get("meta", {}), Mapping):
        # the page may thin these labels where a panel is narrow (_static/dpclip-figures.js, thinTicks);
        # ticks a chapter named itself it leaves alone
        layout["meta"] = dict(layout.get("meta") or {}, dpclip_log_ticks=ours)
    return layout


def _reader_defaults(fig_dict: dict) -> dict:
    """``fig_dict`` with every trace (and every frame's traces) as :func:`_reader_trace` makes it."""
    if fig_dict.get("data"):
        fig_dict["data"] = [_reader_trace(t) for t in fig_dict["data"]]
    if isinstance(fig_dict.get("layout"), Mapping):
        fig_dict["layout"] = _whole_log_labels(_scripts_in(_panels_apart(_panels_apart(dict(fig_dict["layout"]), "x"), "y")),
                                               fig_dict)
    named = [bool(t.get("name")) for t in fig_dict.get("data") or []]
    frames = []
    for frame in fig_dict.get("frames") or []:
        data = frame.get("data") or []
        targets = list(frame.get("traces") or range(len(data)))
        frames.append(dict(frame, data=[
            _reader_trace(t, named=0 <= k < len(named) and named[k]) for t, k in zip(data, targets)]))
    if frames:
        fig_dict["frames"] = frames
    return fig_dict


def _compact(obj):
    """``obj`` with float64 numpy arrays stored as float32 (half the page weight of a figure).

    Plotly writes numpy arrays into the page as base64 typed arrays; float32 keeps seven
    significant digits, far more than a screen shows. Arrays with finite values outside
    float32's normal range (below 1e-30 or above 1e30 in magnitude, e.g. on log axes) stay
    float64.
    """
    import base64

    import numpy as np

    if isinstance(obj, dict):
        if obj.get("dtype") == "f8" and isinstance(obj.get("bdata"), str):   # plotly's typed array
            arr = np.frombuffer(base64.b64decode(obj["bdata"]), dtype="<f8")
            small = _compact(arr)
            if small.dtype == np.float32:
                return dict(obj, dtype="f4", bdata=base64.b64encode(small.astype("<f4").tobytes()).decode("ascii"))
            return obj
        return {k: _compact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_compact(v) for v in obj)
    if isinstance(obj, np.ndarray) and obj.dtype == np.float64 and obj.size:
        finite = np.abs(obj[np.isfinite(obj)])
        nonzero = finite[finite > 0]
        if nonzero.size == 0 or (nonzero.min() >= 1e-30 and nonzero.max() <= 1e30):
            return obj.astype(np.float32)
    return obj


pio.renderers[RENDERER_NAME] = BookRenderer()
pio.renderers.default = RENDERER_NAME


def show(fig: go.Figure) -> None:
    """Lab utility: Display ``fig`` with the book's renderer (JSON for Jupyter + HTML for the book)."""
    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    pio.show(fig, renderer=RENDERER_NAME)


# --------------------------------------------------------------------------- sliders

def _label(value: Any, spec: str | None) -> str:
    if spec is not None:
        return fmt(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else format(value, spec)
    if isinstance(value, float):
        return fmt(value)
    return str(value)


def _numeric(values) -> list[float]:
    out = []
    if values is None:
        return out
    values = _numeric_array(values)
    if isinstance(values, dict):  # plotly's base64 typed-array form
        return []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            return []  # categorical axis: leave it alone
        if math.isfinite(f):
            out.append(f)
    return out


def _histogram_extent(t: Mapping[str, Any]) -> tuple[tuple[float, float], float] | None:
    """x extent and the largest bin count of a vertical histogram trace (None if not computable)."""
    import numpy as np

    if t.get("y") is not None or t.get("histfunc") not in (None, "count") or t.get("histnorm"):
        return None
    vals = np.asarray(_numeric(t.get("x")), dtype=float)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return None
    bins = t.get("xbins") or {}
    lo, hi = float(bins.get("start", vals.min())), float(bins.get("end", vals.max()))
    if bins.get("size"):
        edges = np.arange(lo, hi + float(bins["size"]), float(bins["size"]))
    else:
        edges = np.linspace(vals.min(), vals.max(), int(t.get("nbinsx") or 30) + 1)
    if edges.size < 2 or edges[-1] <= edges[0]:
        return (float(vals.min()), float(vals.max())), float(vals.size)
    counts, _ = np.histogram(vals, bins=edges)
    # plotly picks "nice" bins near nbinsx: leave room for a fuller bin than numpy's
    return (float(min(lo, vals.min())), float(max(hi, vals.max()))), float(counts.max()) * 1.25


def _extents(traces: Sequence[Any]) -> dict[str, tuple[float, float, float]]:
    """Per axis: (min, max, min positive) of x/y over scatter traces, for fixed ranges.

    Plotly does not autorange during an animation, so a frame whose data leave
    the first frame's range would be cut off. x/y of scatter-like traces are used, and
    for a histogram of counts its x extent and its tallest bin; an axis that also carries
    another trace type (a bar, a heatmap: whose extent is not in the data) is left alone.
    """
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    pos: dict[str, float] = {}
    skip: set[str] = set()

    def extend(axis, vals):
        lo[axis] = min(lo.get(axis, math.inf), min(vals))
        hi[axis] = max(hi.get(axis, -math.inf), max(vals))
        positive = [v for v in vals if v > 0]
        if positive:
            pos[axis] = min(pos.get(axis, math.inf), min(positive))

    for tr in traces:
        t = tr.to_plotly_json() if hasattr(tr, "to_plotly_json") else dict(tr)
        kind = t.get("type", "scatter")
        axes = {"x": _axis_key(t.get("xaxis") or "x"), "y": _axis_key(t.get("yaxis") or "y")}
        if kind == "histogram":
            extent = _histogram_extent(t)
            if extent is None:
                skip.update(axes.values())
            else:
                (x0, x1), top = extent
                extend(axes["x"], [x0, x1])
                extend(axes["y"], [0.0, top])
            continue
        if kind not in ("scatter", "scattergl"):
            skip.update(axes.values())
            continue
        for coord, axis in axes.items():
            vals = _numeric(t.get(coord))
            if not vals:
                if t.get(coord) is not None:
                    skip.add(axis)
                continue
            extend(axis, vals)
    return {a: (lo[a], hi[a], pos.get(a, math.nan)) for a in lo if a not in skip}


def _ranges(fig: go.Figure, traces: Sequence[Any]) -> dict[str, dict]:
    """Axis ranges covering ``traces``, for the axes of ``fig`` without an explicit range."""
    out = {}
    for axis, (lo, hi, lo_pos) in _extents(traces).items():
        ax = fig.layout[axis]
        if ax.range is not None:  # explicit range in `layout` or `base` wins
            continue
        if ax.type == "log":
            if not lo_pos > 0:
                continue
            out[axis] = dict(range=_padded(math.log10(lo_pos), math.log10(hi)), autorange=False)
        else:
            r = _padded(lo, hi)
            if lo == 0 and hi > 0:
                r[0] = 0.0     # counts and other data that start at zero: the axis starts there too
            out[axis] = dict(range=r, autorange=False)
    return out


def _padded(lo: float, hi: float, pad: float = 0.05) -> list[float]:
    span = hi - lo
    margin = pad * span if span > 0 else max(abs(hi) * pad, 1e-12)
    return [lo - margin, hi + margin]


def _numeric_array(values):
    try:
        import numpy as np

        if isinstance(values, np.ndarray):
            return values.astype(float).ravel().tolist()
    except ImportError:  # pragma: no cover
        pass
    return values


def slider_figure(
    frames: Mapping[Any, Sequence[Any]],
    *,
    slider_label: str,
    layout: Mapping[str, Any] | go.Layout | None = None,
    active: int | None = None,
    value_format: str | None = None,
    fix_axes: bool = True,
    base: go.Figure | None = None,
    static: Sequence[Any] = (),
    on_top: Sequence[Any] = (),
) -> go.Figure:
    """Lab utility: A figure with a slider over precomputed frames (moves with no kernel).

    Parameters
    ----------
    frames : mapping ``value -> list of traces``
        One entry per slider position, in slider order. Every entry must hold
        the same number of traces, in the same roles (trace ``i`` of each frame
        replaces trace ``i`` of the figure).
    slider_label : str
        What the slider moves, e.g. ``"clip norm C"``; shown as
        ``"<slider_label> = <value>"`` above the slider.
    layout : dict or ``go.Layout``, optional
        Extra layout (title, axis titles, explicit ranges...). Explicit axis
        ranges here win over the automatic ones.
    active : int, optional
        Index of the initially shown frame (default: the first).
    value_format : str, optional
        ``format()`` spec for the value labels (default ``.3g`` for floats).
    fix_axes : bool
        True (default): each x/y axis range covers all frames, so that frames compare on
        one scale. False: each frame brings its own ranges (for data whose scale changes
        by orders of magnitude over the slider). Either way no frame is drawn on another
        frame's ranges: plotly does not autorange during an animation. Axes with an
        explicit range keep it; log axes get a range in log10 units over the positive
        values; histograms of counts are ranged by their data and tallest bin.
    base : ``go.Figure``, optional
        A figure to start from (for subplots, via ``plotly.subplots.make_subplots``);
        its traces are replaced by ``static`` and the active frame's.
    static : list of traces, optional
        Traces drawn once, under the moving ones, and not repeated in every frame
        (what does not depend on the slider: keeps the page light).
    on_top : list of traces, optional
        Like ``static``, but drawn over the moving ones: reference lines (an optimum, a fixed
        point) that the moving curves would otherwise hide where they meet.

    Returns
    -------
    go.Figure
        A figure with ``len(frames)`` plotly frames and one slider step per frame.
        There is no play button and nothing plays on load.
    """
    if not isinstance(frames, Mapping) or len(frames) == 0:
        raise ValueError("frames must be a non-empty mapping value -> list of traces")
    if not isinstance(slider_label, str) or not slider_label:
        raise ValueError("slider_label must be a non-empty string")
    values = list(frames.keys())
    traces = [list(frames[v]) for v in values]
    counts = {len(t) for t in traces}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(
            "every frame must hold the same (non-zero) number of traces; got "
            + ", ".join(f"{_label(v, value_format)}: {len(t)}" for v, t in zip(values, traces))
        )
    active = 0 if active is None else int(active)
    if not 0 <= active < len(values):
        raise ValueError(f"active must lie in [0, {len(values) - 1}], got {active}")

    names = [_label(v, value_format) for v in values]
    if len(set(names)) != len(names):
        raise ValueError("slider values must have distinct labels; pass a finer value_format")

    static, on_top = list(static), list(on_top)
    fig = go.Figure(base) if base is not None else go.Figure()
    fig.data = []
    fig.add_traces(static + traces[active] + on_top)
    moving = list(range(len(static), len(static) + len(traces[active])))
    fig.frames = [go.Frame(name=name, data=t, traces=moving) for name, t in zip(names, traces)]

    steps = [
        dict(
            method="animate",
            label=name,
            args=[[name], dict(mode="immediate", frame=dict(duration=0, redraw=True),
                               transition=dict(duration=0))],
        )
        for name in names
    ]
    fig.update_layout(
        sliders=[dict(
            active=active,
            steps=steps,
            currentvalue=dict(prefix=f"{slider_label} = "),
            pad=dict(t=_SLIDER_PAD),
            len=1.0,
            x=0.0,
        )],
    )
    if layout is not None:
        fig.update_layout(layout)
    if fix_axes:
        fig.update_layout(_ranges(fig, static + on_top + list(itertools.chain.from_iterable(traces))))
    else:
        # each frame brings its own ranges (plotly does not autorange while it animates: a
        # frame drawn on another frame's ranges can go blank)
        per_frame = [_ranges(fig, static + on_top + t) for t in traces]
        fig.frames = [go.Frame(name=f.name, data=f.data, traces=f.traces, layout=r)
                      for f, r in zip(fig.frames, per_frame)]
        fig.update_layout(per_frame[active])
    return fig


# --------------------------------------------------------------------------- live widgets

_LIVE_NOTE = (
    "<small><b>Live control</b> &mdash; recomputes the figure in this running kernel "
    "each time you let go of a control.</small>"
)
#: CSS class of the box that stands in for a live control in the static book.
LIVE_PLACEHOLDER_CLASS = "dpclip-live"
#: Set by the book build (``_ext/offline_assets.py``): the Binder URL up to ``urlpath=...tree/``
#: and the repository root, so the box can link to this chapter's folder on Binder.
BINDER_URL_ENV = "DPCLIP_BINDER_URL"
BOOK_ROOT_ENV = "DPCLIP_BOOK_ROOT"


def _initial_value(control):
    """The value ``ipywidgets.interactive`` starts a control at, without creating a widget."""
    import numbers

    import ipywidgets as widgets
    from ipywidgets.widgets.interaction import _get_min_max_value

    if isinstance(control, (widgets.Widget, widgets.fixed)):
        return control.value
    if isinstance(control, tuple) and 2 <= len(control) <= 3 and all(isinstance(v, numbers.Real) for v in control):
        lo, hi, *step = control
        return _get_min_max_value(lo, hi, step=step[0] if step else None)[2]
    if isinstance(control, (list, tuple)) and control:  # options: the first, or the value of a (label, value) pair
        first = control[0]
        return first[1] if isinstance(first, tuple) and len(first) == 2 else first
    if isinstance(control, dict) and control:
        return next(iter(control.values()))
    return control


def _control_name(key: str, control) -> str:
    desc = getattr(control, "description", "") or ""
    return str(desc).rstrip(": ").strip() or key


def live_placeholder(controls: Sequence[str] = (), call: str | None = None):
    """Lab utility: The box the static book shows instead of a live control (an ``IPython.display.HTML``).

    One line: the code that the cell runs in a notebook (``call``, e.g.
    ``dp.live(live_audit, z=…, q=…, C=…)``; the cell itself is kept off the page; without a
    call, the names of the ``controls``) and how to get it: run the chapter in Jupyter, or on
    Binder (the page's rocket button; a direct link when the build knows the repository,
    see ``_config.yml`` ``repository.url``). What the control shows is said by the chapter's
    sentence before the cell, not repeated here.
    """
    from html import escape

    from IPython.display import HTML

    names = ", ".join(f"<b>{escape(str(c))}</b>" for c in controls)
    # one line: the call names its controls, and the sentence before the cell says what they do
    what = f"runs <code>{escape(call)}</code>" if call else \
        "shows a live control" + (f" for {names}" if names else "")
    link = ""
    base, root = os.environ.get(BINDER_URL_ENV), os.environ.get(BOOK_ROOT_ENV)
    if base and root:
        try:
            rel = os.path.relpath(os.getcwd(), root).replace(os.sep, "/")
        except ValueError:  # pragma: no cover - other drive on Windows
            rel = ""
        if not rel.startswith(".."):
            href = base + ("" if rel in ("", ".") else rel)
            link = (f' <a class="reference external" href="{escape(href)}">Open this chapter\'s '
                    "folder on Binder</a>.")
    return HTML(
        f'<div class="admonition tip {LIVE_PLACEHOLDER_CLASS}">'
        '<p class="admonition-title">Run this live</p>'
        f"<p>In Jupyter, or on Binder (the rocket button at the top of the page), this cell {what}.{link}</p></div>"
    )


def live(fn: Callable[..., go.Figure], *, note: bool = True, **controls):
    """Lab utility: An ipywidgets control that recomputes ``fn(**values)`` and shows the figure.

    Parameters
    ----------
    fn : callable
        ``fn(**values) -> go.Figure``; called once at creation and again each
        time a control moves.
    note : bool
        Put a one-line note above the controls saying that they need a kernel.
    **controls
        Anything ``ipywidgets.interactive`` accepts: widgets
        (``ipywidgets.FloatLogSlider(...)``), ``(min, max, step)`` tuples, lists
        of options, or fixed values.

    Returns
    -------
    ipywidgets.VBox
        The note, the controls and an ``Output`` showing the figure (displayed
        with :class:`BookRenderer`). While the book is built (``DPCLIP_HTML_ONLY=1``)
        it returns :func:`live_placeholder` instead (a widget with no kernel behind it
        would look live and do nothing), after calling ``fn`` once at the controls'
        initial values and checking it returns a figure, so that a live control that
        would fail in Jupyter fails the build.

    Notes
    -----
    Headless execution (``DPCLIP_HEADLESS=1``, set by ``tools/assign.py`` and the
    grading tests) also gets the placeholder. Why: nbclient — which otter-grader and
    ``jupyter nbconvert --execute`` use — imitates a browser for ipywidgets' ``Output``
    widget (the one ``ipywidgets.interactive`` draws into): each output captured into it
    is echoed back to the kernel as a ``comm_msg`` *sent on the shell socket*, from the
    coroutine that reads iopub, while another coroutine awaits the cell's
    ``execute_reply`` on that same socket with no timeout. A send on a ZeroMQ socket can
    consume its edge-triggered "readable" notification; when the reply arrived in that
    window it is never read, and the run waits forever on an idle kernel (about one
    grading in four under load; always on the cell that shows a live control). With no
    widget there is no ``comm_msg`` and no race.
    """
    import ipywidgets as widgets
    from IPython.display import display

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    def _figure(**values):
        fig = fn(**values)
        if not isinstance(fig, go.Figure):
            raise TypeError(f"fn must return a plotly Figure, got {type(fig).__name__}")
        return fig

    if os.environ.get(HTML_ONLY_ENV) == "1" or os.environ.get(HEADLESS_ENV) == "1":
        if os.environ.get(HEADLESS_ENV) != "1":
            # The book build (and nbval, which runs in its environment) still draws the
            # control's first figure once, unseen: a live control that would fail in
            # Jupyter fails the build instead of reaching a reader.
            _figure(**{k: _initial_value(c) for k, c in controls.items()})
        # the one line the cell runs, as the book writes it: dp.live(live_audit, z=…, q=…)
        name = getattr(fn, "__name__", "") or "fn"
        if name == "<lambda>" or not name.isidentifier():
            import inspect

            try:
                params = ", ".join(inspect.signature(fn).parameters)
            except (TypeError, ValueError):  # pragma: no cover - callables without a signature
                params = ""
            name = f"lambda {params}: …" if params else "lambda: …"
        return live_placeholder([_control_name(k, c) for k, c in controls.items()
                                 if isinstance(c, widgets.Widget) or isinstance(c, (tuple, list))],
                                call=f"dp.live({', '.join([name] + [f'{k}=…' for k in controls])})")

    def _draw(**values):
        display(_figure(**values))

    ui = widgets.interactive(_draw, **controls)
    for child in ui.children[:-1]:
        if hasattr(child, "continuous_update"):
            child.continuous_update = False
        if hasattr(child, "style") and hasattr(child.style, "description_width"):
            child.style.description_width = "initial"
    parts = [widgets.HTML(_LIVE_NOTE)] if note else []
    return widgets.VBox(parts + list(ui.children), layout=widgets.Layout(width="100%"))


# --------------------------------------------------------------------------- views

def figure_from(traces: Sequence[Any], *, base: go.Figure | None = None,
                layout: Mapping[str, Any] | go.Layout | None = None) -> go.Figure:
    """Lab utility: A plain figure from a list of traces (the one-frame twin of :func:`slider_figure`)."""
    fig = go.Figure(base) if base is not None else go.Figure()
    fig.data = []
    fig.add_traces(list(traces))
    if layout is not None:
        fig.update_layout(layout)
    return fig


def plane_basis(G, direction):
    """Lab utility: An orthonormal basis ``[2, p]`` of the plane used to draw per-example gradients.

    The first axis is ``direction`` (usually the true gradient); the second is the
    top principal direction (uncentered) of the gradients' components orthogonal
    to it, i.e. the direction in which the per-example gradients spread most
    besides the one that matters for descent. Its sign is fixed so that the
    largest-magnitude entry is positive (deterministic pictures).

    Parameters
    ----------
    G : Tensor ``[n, p]``
        Per-example gradients.
    direction : Tensor ``[p]``
        A non-zero vector (need not be unit).
    """
    import torch

    if G.dim() != 2 or direction.dim() != 1 or G.shape[1] != direction.shape[0]:
        raise ValueError(f"G must be [n, p] and direction [p]; got {tuple(G.shape)} "
                         f"and {tuple(direction.shape)}")
    norm = torch.linalg.vector_norm(direction)
    if not norm > 0:
        raise ValueError("direction must be non-zero")
    e1 = direction / norm
    R = G - (G @ e1).unsqueeze(-1) * e1
    _, _, Vh = torch.linalg.svd(R, full_matrices=False)
    e2 = Vh[0] - (Vh[0] @ e1) * e1
    e2 = e2 / torch.linalg.vector_norm(e2)
    e2 = e2 * torch.sign(e2[e2.abs().argmax()])
    return torch.stack([e1, e2])


def _np32(t):
    """float32 numpy (plotly writes it as compact base64 in the page)."""
    return t.detach().cpu().double().numpy().astype("float32")


#: Line widths of arrows drawn on top of one another, bottom first: each is narrower than the
#: one under it, so an arrow that coincides with another (the clipped mean when nothing is
#: clipped) shows as a core inside a wider band instead of hiding it. :func:`gradient_cloud`
#: draws the true gradient at ``ARROW_WIDTHS[0]``; :func:`clipped_cloud` the clipped mean at
#: ``ARROW_WIDTHS[1]`` (it is drawn later, on top).
ARROW_WIDTHS = (7.0, 3.0, 1.5)


def _arrow(vec2, *, name, color, scale, xaxis, yaxis, dash=None, legendgroup=None, layer=1):
    x, y = float(vec2[0]) * scale, float(vec2[1]) * scale
    width = ARROW_WIDTHS[min(layer, len(ARROW_WIDTHS) - 1)]
    return go.Scatter(
        x=[0.0, x], y=[0.0, y], mode="lines+markers", name=name,
        line=dict(color=color, width=width, dash=dash),
        marker=dict(size=[0, 6 + 2.2 * width], symbol="diamond", color=color),
        opacity=0.55 if layer == 0 else 1.0,
        xaxis=xaxis, yaxis=yaxis, legendgroup=legendgroup, hoverinfo="name",
    )


def arrows(vectors: Mapping[str, tuple[Any, str]], *, scale: float = 1.0, xaxis: str = "x",
           yaxis: str = "y"):
    """Lab utility: arrows from the origin, bottom first, none hidden under another.

    ``vectors`` maps a legend name to ``(vec2, colour)``; the first is drawn widest and
    half-transparent, each next one narrower (:data:`ARROW_WIDTHS`), so arrows that coincide
    stay visible as nested bands. ``scale`` multiplies every vector (say so in the text).
    """
    if not isinstance(vectors, Mapping) or not vectors:
        raise ValueError("vectors must be a non-empty mapping name -> (vec2, colour)")
    if len(vectors) > len(ARROW_WIDTHS):
        raise ValueError(f"at most {len(ARROW_WIDTHS)} arrows can be nested visibly, got {len(vectors)}")
    return [_arrow(v, name=name, color=color, scale=scale, xaxis=xaxis, yaxis=yaxis, layer=i)
            for i, (name, (v, color)) in enumerate(vectors.items())]


def cloud_extent(G, basis, *, quantile: float = 0.9, pad: float = 1.3) -> float:
    """Lab utility: Half-width of a square view of the projected gradients that shows their bulk.

    Per-example gradient norms are heavy-tailed (at a trained model the longest can be 50
    times the median): a view that fits every point shrinks the bulk, and the turn of the
    clipped mean, to a dot. This is ``pad`` times the ``quantile`` of the projected
    points' largest coordinate; the few longer gradients fall outside (zoom out with the
    figure's toolbar). Use it for the axis ranges (with ``scaleanchor`` so circles stay round).
    """
    import torch

    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must lie in (0, 1], got {quantile!r}")
    if not pad > 0:
        raise ValueError(f"pad must be > 0, got {pad!r}")
    P = (G @ basis.T).abs().amax(dim=-1)
    q = float(torch.quantile(P.double(), quantile))
    return pad * q if q > 0 else float(P.max()) or 1.0


def gradient_cloud(G, basis, *, arrow_scale: float = 1.0, xaxis: str = "x", yaxis: str = "y"):
    """Lab utility: Traces for the per-example gradients and their mean, projected on ``basis``.

    Returns ``[points, mean arrow]``: the unclipped gradients (``COLORS["unclipped"]``)
    and the true gradient, drawn ``arrow_scale`` times longer (say so in the text), as the
    wide bottom arrow of :data:`ARROW_WIDTHS` so that the clipped mean drawn over it never hides it.
    """
    P = G @ basis.T
    label = "true gradient" + (f" (×{arrow_scale:.3g})" if arrow_scale != 1 else "")
    return [
        go.Scatter(x=_np32(P[:, 0]), y=_np32(P[:, 1]), mode="markers", name="per-example gradients",
                   # a size larger than the clipped points': where clipping changes nothing, the
                   # unclipped point stays visible as a rim around its clipped copy
                   marker=dict(color=COLORS["unclipped"], size=8, opacity=0.35),
                   xaxis=xaxis, yaxis=yaxis, hoverinfo="skip"),
        _arrow(G.mean(0) @ basis.T, name=label, color=COLORS["true"], scale=arrow_scale,
               xaxis=xaxis, yaxis=yaxis, layer=0),
    ]


def clipped_cloud(G, clip_norm: float, basis, *, arrow_scale: float = 1.0,
                  xaxis: str = "x", yaxis: str = "y"):
    """Lab utility: Traces for the clipped gradients, the clipping circle and the clipped mean.

    Returns ``[clipped points, circle of radius C, clipped-mean arrow]``. Clipping
    happens in all ``p`` dimensions; the picture shows its projection, so the
    clipped points lie *inside* the circle of radius ``C`` (on it only when the
    gradient lies in the plane).
    """
    import torch

    from .clipping import clip, clipped_fraction

    Gc = clip(G, clip_norm)
    P = Gc @ basis.T
    t = torch.linspace(0, 2 * math.pi, 121, dtype=torch.float64)
    frac = float(clipped_fraction(G, clip_norm))
    label = "clipped mean" + (f" (×{arrow_scale:.3g})" if arrow_scale != 1 else "")
    return [
        go.Scatter(x=_np32(P[:, 0]), y=_np32(P[:, 1]), mode="markers",
                   name=f"clipped ({frac:.0%} of examples changed)",
                   marker=dict(color=COLORS["clipped"], size=5, opacity=0.6),
                   xaxis=xaxis, yaxis=yaxis, hoverinfo="skip"),
        go.Scatter(x=_np32(clip_norm * torch.cos(t)), y=_np32(clip_norm * torch.sin(t)),
                   mode="lines", name="‖g‖ = C", line=dict(color=COLORS["threshold"], dash="dot"),
                   xaxis=xaxis, yaxis=yaxis, hoverinfo="skip"),
        _arrow(Gc.mean(0) @ basis.T, name=label, color=COLORS["clipped_mean"], scale=arrow_scale,
               xaxis=xaxis, yaxis=yaxis, layer=1),
    ]


def norm_histogram(norms, clip_norm: float, edges, *, xaxis: str = "x", yaxis: str = "y"):
    """Lab utility: Two stacked bar traces: counts of ``log10 ||g_i||`` at most / above ``log10 C``.

    ``edges`` are bin edges in ``log10`` units (fixed across slider frames).
    """
    import numpy as np

    logn = np.log10(np.maximum(norms.detach().cpu().double().numpy(), 1e-300))
    edges = np.asarray(edges, dtype=float)
    kept = np.histogram(logn[logn <= math.log10(clip_norm)], bins=edges)[0]
    cut = np.histogram(logn[logn > math.log10(clip_norm)], bins=edges)[0]
    centers, width = (edges[1:] + edges[:-1]) / 2, float(np.diff(edges).mean())
    common = dict(x=centers.astype("float32"), width=width, xaxis=xaxis, yaxis=yaxis, showlegend=False)
    return [
        go.Bar(y=kept, marker_color=COLORS["unclipped"], name="norm ≤ C (unchanged)", **common),
        go.Bar(y=cut, marker_color=COLORS["clipped"], name="norm > C (clipped)", **common),
    ]


def nice_number(x: float) -> float:
    """Lab utility: The largest of 1, 2, 5 × 10^k that is at most ``x`` (for magnification factors)."""
    if not x > 0 or not math.isfinite(x):
        raise ValueError(f"x must be a positive finite number, got {x!r}")
    k = math.floor(math.log10(x))
    for m in (5, 2, 1):
        if m * 10 ** k <= x * (1 + 1e-12):
            return float(m * 10 ** k)
    return float(10 ** k)  # pragma: no cover


def lines(x, ys: Mapping[str, Any], *, colors: Sequence[str] | None = None,
          xaxis: str = "x", yaxis: str = "y", dash: str | None = None):
    """Lab utility: One line trace per entry of ``ys`` (``name -> y``) against the common ``x``."""
    colors = list(colors) if colors is not None else list(PALETTE)
    return [go.Scatter(x=_np32(torch_like(x)), y=_np32(torch_like(y)), mode="lines", name=name,
                       line=dict(color=colors[i % len(colors)], width=2.5, dash=dash),
                       xaxis=xaxis, yaxis=yaxis)
            for i, (name, y) in enumerate(ys.items())]


def torch_like(v):
    """``v`` as a torch tensor (accepts tensors, numpy arrays and lists).

    A read-only numpy array (e.g. the lab's cached RDP vectors, ``DEFAULT_ORDERS``) is
    copied first: torch cannot share memory with it and would print a "non-writable"
    warning into the page.
    """
    import numpy as np
    import torch

    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, np.ndarray) and not v.flags.writeable:
        v = v.copy()
    return torch.as_tensor(v, dtype=torch.float64)


def error_curves(clip_norms, rel_bias, cosine, *, cos_limit: float | None = None,
                 xaxis: str = "x", yaxis: str = "y"):
    """Lab utility: Static traces: relative bias and cosine of the clipped mean against ``C``.

    ``rel_bias = ||mean clip_C(g_i) − g|| / ||g||`` and ``cosine`` its cosine with ``g``,
    on a grid ``clip_norms``; ``cos_limit`` (the cosine of the mean of normalized
    gradients, the ``C → 0`` limit) is drawn dashed.
    """
    out = lines(clip_norms, {"bias ‖ḡ_C − g‖ / ‖g‖": rel_bias},
                colors=[COLORS["clipped_mean"]], xaxis=xaxis, yaxis=yaxis)
    out += lines(clip_norms, {"cosine(ḡ_C, g)": cosine}, colors=[COLORS["unclipped"]],
                 xaxis=xaxis, yaxis=yaxis)
    if cos_limit is not None:
        c = torch_like(clip_norms)
        out.append(go.Scatter(x=[float(c.min()), float(c.max())], y=[cos_limit, cos_limit],
                              mode="lines", name="cosine as C → 0",
                              line=dict(color=COLORS["threshold"], dash="dash"),
                              xaxis=xaxis, yaxis=yaxis))
    return out


def error_markers(clip_norm: float, clipped_mean, true_grad, *, xaxis: str = "x", yaxis: str = "y"):
    """Lab utility: Moving traces for :func:`error_curves`: a vertical line at ``C`` and the two values."""
    import torch

    rel = float((clipped_mean - true_grad).norm() / true_grad.norm())
    cos = float(torch.nn.functional.cosine_similarity(clipped_mean, true_grad, dim=0))
    common = dict(xaxis=xaxis, yaxis=yaxis, showlegend=False)
    return [
        go.Scatter(x=[clip_norm, clip_norm], y=[0.0, 1.0], mode="lines", hoverinfo="skip",
                   line=dict(color=COLORS["threshold"], dash="dot"), **common),
        go.Scatter(x=[clip_norm], y=[rel], mode="markers", name="bias",
                   marker=dict(color=COLORS["clipped_mean"], size=11), **common),
        go.Scatter(x=[clip_norm], y=[cos], mode="markers", name="cosine",
                   marker=dict(color=COLORS["unclipped"], size=11), **common),
    ]


# --------------------------------------------------------------------------- checks

#: Trace types drawn on cartesian (x/y) axes.
CARTESIAN_TRACES = frozenset({"scatter", "scattergl", "bar", "histogram", "heatmap", "heatmapgl", "contour",
                              "box", "violin", "histogram2d", "histogram2dcontour", "image", "waterfall",
                              "funnel", "candlestick", "ohlc"})


def missing_axis_titles(fig) -> list[str]:
    """Lab utility: the cartesian axes of ``fig`` that carry data but no title.

    ``fig`` is a ``go.Figure`` or its dict (as in a page's ``Plotly.newPlot`` call). An axis
    counts when a cartesian trace is drawn on it; it is excused when it is hidden
    (``visible=False``) or shows no tick labels (``showticklabels=False``, e.g. the upper
    panel of ``make_subplots(shared_xaxes=True)``, whose shared axis is titled below).
    Returns the axis names (``"xaxis2"``, ...) that need a title.
    """
    d = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else dict(fig)
    layout = d.get("layout") or {}
    used: set[str] = set()
    for tr in d.get("data") or []:
        tr = tr.to_plotly_json() if hasattr(tr, "to_plotly_json") else tr
        if tr.get("type", "scatter") not in CARTESIAN_TRACES:
            continue
        used.update((_axis_key(tr.get("xaxis") or "x"), _axis_key(tr.get("yaxis") or "y")))
    missing = []
    for axis in sorted(used):
        ax = layout.get(axis) or {}
        if ax.get("visible") is False or ax.get("showticklabels") is False:
            continue
        title = ax.get("title")
        text = title.get("text") if isinstance(title, dict) else title
        if not (isinstance(text, str) and text.strip()):
            missing.append(axis)
    return missing


