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
* sets ``DPCLIP_HTML_ONLY=1`` for the notebook kernels it starts, so the book's
  plotly renderer (``dpclip_lab.plotting``) emits only ``text/html``: myst-nb
  warns about every ``application/vnd.plotly.v1+json`` output it cannot render,
  and we keep that warning (the book builds with ``-W``) because it is the only
  sign of a figure that was shown without the book's renderer and vanished.
"""
from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError

ORDER = ("require.js", "embed-amd.js", "plotly.min.js")
#: Served from _static but loaded by something else (MathJax by sphinx.ext.mathjax).
NOT_SCRIPTS = ("mathjax/",)


def _copy_plotly(srcdir: Path) -> None:
    import plotly

    src = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not src.is_file():
        raise ConfigError(f"plotly.min.js not found in the plotly package at {src}")
    dst = srcdir / "_static" / "plotly.min.js"
    dst.parent.mkdir(exist_ok=True)
    if not dst.is_file() or not filecmp.cmp(src, dst, shallow=False):
        shutil.copyfile(src, dst)


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
    missing = [n for n in ORDER if n not in first]
    if missing:
        raise ConfigError(f"html_js_files must list {', '.join(missing)} (see _config.yml)")
    config.html_js_files = [first[n] for n in ORDER] + rest


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


def _config_inited(app: Sphinx, config: Config) -> None:
    _copy_plotly(Path(app.srcdir))
    _order_js(config)
    _check_offline(config)


def setup(app: Sphinx):
    os.environ["DPCLIP_HTML_ONLY"] = "1"  # inherited by the kernels myst-nb starts
    app.connect("config-inited", _config_inited)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
