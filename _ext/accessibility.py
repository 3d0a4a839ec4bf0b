"""Sphinx extension: markup that assistive technology reads right (issue #29, WCAG 2.1 AA).

Registered in ``_config.yml`` (``sphinx: local_extensions``). After the HTML is written it
replaces ARIA roles that Sphinx 7 / docutils emit but WAI-ARIA 1.2 deprecates: the bibliography
entries' ``role="doc-biblioentry"`` (inside a ``role="list"``) become ``role="listitem"``, so a
screen reader announces the References as a list of n items (axe-core rules
``aria-deprecated-role`` and ``aria-required-children``). ``tests/test_book_html.py`` runs
axe-core on every page at 1280 and 400 px in light and dark mode.
"""
from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx

_ROLES = ((re.compile(r'\brole="doc-biblioentry"'), 'role="listitem"'),
          (re.compile(r'\brole="doc-backlink"'), ""))


def fix_roles(html: str) -> str:
    """``html`` with the deprecated roles replaced (see the module docstring)."""
    for pattern, repl in _ROLES:
        html = pattern.sub(repl, html)
    return html


def _build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = fix_roles(text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app: Sphinx):
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
