"""Sphinx extension: glued numbers read as prose prints them (issue #28, item 8).

myst-nb pastes a glued value as Python formats it (``{glue:text}`gap:.1e``` prints ``2.1e-03``,
a negative value ``-0.94`` with a hyphen). After a chapter is parsed, every pasted number
(``<span class="pasted-text">``) is rewritten by :func:`dpclip_lab.numbers.readable`:
``2.1 × 10⁻³``, ``−0.94``. The reader copies apply the same function
(``_ext/reader_copies.py``, ``glue_value``), so Jupyter shows the numbers the HTML book shows.
Registered in ``_config.yml`` (``sphinx: local_extensions``).
"""
from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

from dpclip_lab.numbers import readable


def rewrite_pasted_numbers(app: Sphinx, doctree: nodes.document) -> None:
    for node in list(doctree.findall(nodes.inline)):
        if "pasted-text" not in node.get("classes", ()):
            continue
        text = node.astext()
        new = readable(text)
        if new != text:
            node.children = [nodes.Text(new)]


def setup(app: Sphinx) -> dict:
    app.connect("doctree-read", rewrite_pasted_numbers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
