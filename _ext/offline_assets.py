"""Sphinx extension: make the book readable with no network.

Registered in ``_config.yml`` under ``sphinx: local_extensions``, so a plain
``jupyter-book build .`` runs it. It

* copies ``plotly.min.js`` from the installed plotly package into
  ``_static/`` (git-ignored: 4.8 MB, and it must match the plotly version that
  wrote the figures);
* puts ``html_js_files`` in the order that draws both widgets and figures
  (``require.js``, ``embed-amd.js``, ``plotly.min.js``) and removes the
  duplicates that Jupyter Book 1 adds (it appends every ``*.js`` under
  ``_static/``, which would load require.js and MathJax twice);
* fails the build if a page would load a script from a CDN (``nb_ipywidgets_js``
  must be ``{}``, ``mathjax_path`` must be local);
* loads on each page only the scripts that page uses (issue #10, page weight):
  plotly only on pages that draw a plotly figure — the vendored
  ``plotly-cartesian.min.js`` (1.5 MB: bar, box, contour, heatmap, histogram(2d),
  image, pie, scatter, violin) when every trace type on the page is in it, else
  the full ``plotly.min.js`` (4.8 MB); require.js, the widget embedder
  ``embed-amd.js`` (4.4 MB) and its MathJax shim only on pages that embed
  ipywidgets state (the book shows none: ``dpclip_lab.plotting.live`` draws a
  "run this live" box instead while the book is built);
* checks that the vendored cartesian bundle is the plotly.js version of the
  installed plotly package (a figure written for another version may not draw);
* sets ``DPCLIP_HTML_ONLY=1`` for the notebook kernels it starts, so the book's
  plotly renderer (``dpclip_lab.plotting``) emits only ``text/html``: myst-nb
  warns about every ``application/vnd.plotly.v1+json`` output it cannot render,
  and we keep that warning (the book builds with ``-W``) because it is the only
  sign of a figure that was shown without the book's renderer and vanished.
"""
from __future__ import annotations

import filecmp
import functools
import json
import os
import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError

ORDER = ("require.js", "embed-amd.js", "plotly.min.js", "plotly-cartesian.min.js")
WIDGET_SCRIPTS = ("require.js", "embed-amd.js", "mathjax2-hub-shim.js")
PLOTLY_FULL, PLOTLY_CARTESIAN = "plotly.min.js", "plotly-cartesian.min.js"
#: The book's figure behaviour (HTML legend, ...): on pages that draw a plotly figure.
FIGURES_JS = "dpclip-figures.js"
#: Trace types in plotly.js-cartesian-dist-min (its README).
CARTESIAN_TRACES = frozenset({"bar", "box", "contour", "heatmap", "histogram", "histogram2d",
                              "histogram2dcontour", "image", "pie", "scatter", "scatterternary",
                              "violin"})
#: Dropped from every written page: pydata-sphinx-theme's Font Awesome JS (1.5 MB, written by its
#: template, not through html_js_files) turns the icons into SVGs, but the theme's stylesheet
#: already draws every icon it uses from the webfonts it ships (_static/vendor/fontawesome/).
_FONTAWESOME_JS = re.compile(r'\s*<script\b[^>]*\bsrc="[^"]*/scripts/fontawesome\.js[^"]*"[^>]*></script>')
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
_TYPE = re.compile(r'"type"\s*:\s*"([a-z0-9]+)"')
#: Served from _static but loaded by something else (MathJax by sphinx.ext.mathjax).
NOT_SCRIPTS = ("mathjax/",)
#: Appended to the page's MathJax configuration (sphinx.ext.mathjax writes it as JSON, which holds
#: no function). MathJax 4's assistive-MathML component records its setting for the right-click
#: menu, which the book does not load, and MathJax then warned 'Invalid option "menuOptions"' in
#: the console of every page with math. Before the page is typeset, core's option checker drops
#: that one message; every other option error still reaches the console.
MATHJAX_QUIET_MENU = (
    "window.MathJax.startup = Object.assign(window.MathJax.startup || {}, {ready: function () {"
    " var util = MathJax._.util, options = util && util.Options && util.Options.OPTIONS;"
    " if (options) { var warn = options.optionError;"
    " options.optionError = function (message, key) { if (key !== 'menuOptions') warn(message, key); }; }"
    " MathJax.startup.defaultReady(); }});")


def _copy_plotly(srcdir: Path) -> None:
    import plotly

    src = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not src.is_file():
        raise ConfigError(f"plotly.min.js not found in the plotly package at {src}")
    dst = srcdir / "_static" / "plotly.min.js"
    dst.parent.mkdir(exist_ok=True)
    if not dst.is_file() or not filecmp.cmp(src, dst, shallow=False):
        shutil.copyfile(src, dst)


def _plotly_version(path: Path) -> str:
    m = re.search(r"plotly\.js(?: \([^)]*\))? v(\d+\.\d+\.\d+)", path.read_text(errors="replace")[:400])
    return m.group(1) if m else "?"


def _check_cartesian(srcdir: Path) -> None:
    full = srcdir / "_static" / PLOTLY_FULL
    cart = srcdir / "_static" / PLOTLY_CARTESIAN
    if not cart.is_file():
        raise ConfigError(f"{cart} is missing (vendored; see _static/VENDORED.md)")
    if _plotly_version(full) != _plotly_version(cart):
        raise ConfigError(
            f"_static/{PLOTLY_CARTESIAN} is plotly.js {_plotly_version(cart)} but the plotly package "
            f"ships plotly.js {_plotly_version(full)}: re-vendor it with "
            f"`npm pack plotly.js-cartesian-dist-min@{_plotly_version(full)}` (see _static/VENDORED.md)")


@functools.lru_cache(maxsize=1)
def all_trace_types() -> frozenset[str]:
    """Every plotly trace type (``scatter``, ``scatter3d``, ...) the installed plotly knows."""
    import inspect

    import plotly.graph_objects as go
    from plotly.basedatatypes import BaseTraceType

    return frozenset(c().type for c in (getattr(go, n) for n in dir(go))
                     if inspect.isclass(c) and issubclass(c, BaseTraceType) and c is not BaseTraceType)


_NEWPLOT = re.compile(r"""Plotly\.newPlot\(\s*["'][^"']*["']\s*,\s*""")
_ADDFRAMES = re.compile(r"""Plotly\.addFrames\(\s*["'][^"']*["']\s*,\s*""")


def _json_at(text: str, pos: int):
    try:
        return json.JSONDecoder().raw_decode(text, pos)[0]
    except ValueError:
        return None


def page_trace_types(body: str) -> set[str]:
    """The plotly trace types a page's figures draw (``Plotly.newPlot`` data and frames).

    Only the traces count: every figure also carries its template, whose defaults
    name every trace type. A figure whose JSON cannot be read counts as "unknown"
    (returned as ``{"?"}``), so the page gets the full bundle.
    """
    types: set[str] = set()
    for m in _NEWPLOT.finditer(body):
        data = _json_at(body, m.end())
        if not isinstance(data, list):
            return types | {"?"}
        types.update(str(t.get("type", "scatter")) for t in data if isinstance(t, dict))
        types.add("scatter") if not data else None
    for m in _ADDFRAMES.finditer(body):
        frames = _json_at(body, m.end())
        if not isinstance(frames, list):
            return types | {"?"}
        for frame in frames:
            for t in (frame or {}).get("data") or []:
                if isinstance(t, dict):
                    types.add(str(t.get("type", "scatter")))
    return types


def scripts_for_page(body: str) -> set[str]:
    """Which of the book's optional scripts a page needs (the rest are dropped from it).

    Widgets count only when the page shows one (a widget *view*): a notebook that
    merely created widget objects still saves their state, which draws nothing.
    """
    need = set()
    types = page_trace_types(body)
    if types:
        need.add(PLOTLY_CARTESIAN if types <= CARTESIAN_TRACES else PLOTLY_FULL)
        need.add(FIGURES_JS)
    if WIDGET_VIEW_MIME in body:
        need.update(WIDGET_SCRIPTS)
        if types and PLOTLY_CARTESIAN in need:   # widgets may draw any figure
            need.discard(PLOTLY_CARTESIAN)
            need.add(PLOTLY_FULL)
    return need


def _page_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    files = context.get("script_files")
    if not files:
        return
    need = scripts_for_page(context.get("body", ""))
    optional = set(WIDGET_SCRIPTS) | {PLOTLY_FULL, PLOTLY_CARTESIAN, FIGURES_JS}
    kept, seen = [], set()
    for js in files:
        # sphinx-thebe adds its inline config script once per reading pass (twice in a build):
        # the second copy throws "Identifier 'THEBE_JS_URL' has already been declared"
        attributes = getattr(js, "attributes", {}) or {}
        key = getattr(js, "filename", None) or ("body", attributes.get("body"), attributes.get("type"))
        if key in seen:
            continue
        seen.add(key)
        if getattr(js, "attributes", {}).get("type") == WIDGET_STATE_MIME and "embed-amd.js" not in need:
            continue   # widget state with no view on the page: nothing would read it
        name = Path(str(getattr(js, "filename", None) or js).split("?")[0]).name
        if name in optional and name not in need:
            continue
        body = attributes.get("body") or ""
        if body.startswith("window.MathJax = ") and MATHJAX_QUIET_MENU not in body:
            js = type(js)(js.filename, priority=js.priority, **{**attributes, "body": body + ";\n" + MATHJAX_QUIET_MENU})
        kept.append(js)
    context["script_files"] = kept


def _name(entry) -> str:
    return entry[0] if isinstance(entry, (tuple, list)) else entry


def _order_js(config: Config) -> None:
    seen, first, rest = set(), {}, []
    for entry in config.html_js_files:
        name = _name(entry)
        if name in seen or name.startswith(NOT_SCRIPTS):
            continue
        seen.add(name)
        if name in ORDER:
            first[name] = entry
        else:
            rest.append(entry)
    missing = [n for n in ORDER if n not in first and n != PLOTLY_CARTESIAN]
    if missing:
        raise ConfigError(f"html_js_files must list {', '.join(missing)} (see _config.yml)")
    config.html_js_files = [first[n] for n in ORDER if n in first] + rest


def _check_offline(config: Config) -> None:
    if getattr(config, "nb_ipywidgets_js", None) != {}:
        raise ConfigError("set nb_ipywidgets_js: {} in _config.yml; otherwise myst-nb "
                          "loads require.js and the widget manager from a CDN")
    path = getattr(config, "mathjax_path", "") or ""
    if "://" in path or path.startswith("//"):
        raise ConfigError(f"mathjax_path must point into _static/, got {path!r}")
    for entry in config.html_js_files:
        if "://" in _name(entry):
            raise ConfigError(f"html_js_files must be local, got {_name(entry)!r}")


def binder_tree_url(theme_options: dict) -> str | None:
    """``<binderhub>/v2/gh/<org>/<repo>/<branch>?urlpath=lab/tree/`` from the theme options.

    The repository is the one setting ``repository.url`` in ``_config.yml`` (README,
    "Binder"); None when there is no GitHub repository or no BinderHub.
    """
    url = (theme_options.get("repository_url") or "").rstrip("/")
    hub = ((theme_options.get("launch_buttons") or {}).get("binderhub_url") or "").rstrip("/")
    m = re.match(r"https?://github\.com/([^/]+)/([^/]+?)(?:\.git)?$", url)
    if not (m and hub):
        return None
    branch = theme_options.get("repository_branch") or "main"
    prefix = (theme_options.get("path_to_docs") or "").strip("/")
    return f"{hub}/v2/gh/{m.group(1)}/{m.group(2)}/{branch}?urlpath=lab/tree/" + (prefix + "/" if prefix else "")


def _config_inited(app: Sphinx, config: Config) -> None:
    binder = binder_tree_url(dict(getattr(config, "html_theme_options", {}) or {}))
    if binder:  # read by dpclip_lab.plotting.live_placeholder in the kernels
        os.environ["DPCLIP_BINDER_URL"] = binder
        os.environ["DPCLIP_BOOK_ROOT"] = str(Path(app.srcdir).resolve())
    # pydata-sphinx-theme reads the colour mode from localStorage or this default; Jupyter Book
    # leaves it empty, and every page logged "Got invalid theme mode". auto: the reader's OS choice
    context = dict(getattr(config, "html_context", None) or {})
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    config.html_context = context
    _copy_plotly(Path(app.srcdir))
    _check_cartesian(Path(app.srcdir))
    _order_js(config)
    _check_offline(config)


def _drop_fontawesome_js(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        slim = _FONTAWESOME_JS.sub("", text)
        if slim != text:
            page.write_text(slim, encoding="utf-8")


def setup(app: Sphinx):
    os.environ["DPCLIP_HTML_ONLY"] = "1"  # inherited by the kernels myst-nb starts
    app.connect("config-inited", _config_inited)
    app.connect("html-page-context", _page_scripts, priority=950)
    app.connect("build-finished", _drop_fontawesome_js)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
