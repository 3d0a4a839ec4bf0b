"""Sphinx extension: markup that assistive technology reads right (issue #29, WCAG 2.1 AA).

Registered in ``_config.yml`` (``sphinx: local_extensions``). After the HTML is written it
replaces ARIA roles that Sphinx 7 / docutils emit but WAI-ARIA 1.2 deprecates: the bibliography
entries' ``role="doc-biblioentry"`` (inside a ``role="list"``) become ``role="listitem"``, so a
screen reader announces the References as a list of n items (axe-core rules
``aria-deprecated-role`` and ``aria-required-children``).

It also writes the code highlighting for both colour modes. Jupyter Book sets Sphinx's
``pygments_style = "sphinx"`` for every mode, and sphinx-book-theme does not run the pydata
theme's light/dark rewrite of ``pygments.css``: code was drawn in one style on the light and
the dark background alike (names #0e84b5 at 3.1:1 on the dark code background, keywords #007020
at 2.1:1). ``pygments.css`` becomes the pydata theme's two-mode stylesheet with the
accessible-pygments high-contrast styles (:data:`CODE_STYLES`, at least 4.5:1 by design).
``tests/test_book_html.py`` runs axe-core on every page at 1280 and 400 px in light and dark mode.
"""
from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx

#: Code highlighting per colour mode (accessible-pygments, a dependency of the pydata theme).
CODE_STYLES = {"light": "a11y-high-contrast-light", "dark": "a11y-high-contrast-dark"}

_ROLES = ((re.compile(r'\brole="doc-biblioentry"'), 'role="listitem"'),
          (re.compile(r'\brole="doc-backlink"'), ""))


def fix_roles(html: str) -> str:
    """``html`` with the deprecated roles replaced (see the module docstring)."""
    for pattern, repl in _ROLES:
        html = pattern.sub(repl, html)
    return html


def code_stylesheet() -> str:
    """``pygments.css`` for both colour modes (``html[data-theme=...] .highlight ...`` rules)."""
    from pydata_sphinx_theme.pygments import get_pygments_stylesheet

    return get_pygments_stylesheet(CODE_STYLES["light"], CODE_STYLES["dark"])


def _build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    (Path(app.outdir) / "_static" / "pygments.css").write_text(code_stylesheet(), encoding="utf-8")
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = fix_roles(text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app: Sphinx):
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
