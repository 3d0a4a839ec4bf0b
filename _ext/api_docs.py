"""Sphinx extension: the lab's docstrings as the API reference (``book/api/index.md``).

The docstrings are written for ``help()`` first: plain-text formulas such as ``|S_t|``
and reference lists with hanging indents. reStructuredText reads ``|x|`` as a
substitution and a hanging indent as a block quote, which the book (built with ``-W``)
would turn into errors. Before napoleon converts a docstring (numpy style), this
extension

* escapes ``|`` outside inline literals and code blocks, so ``|S_t|`` prints as written;
* joins the continuation lines of each entry of a ``References`` section onto the entry.
"""
from __future__ import annotations

import re

from sphinx.application import Sphinx

_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_SECTION = re.compile(r"^\s*-{3,}\s*$")


def _escape_bars(line: str) -> str:
    parts = _LITERAL.split(line)
    return "".join(p if i % 2 else p.replace("|", r"\|") for i, p in enumerate(parts))


def clean_docstring(lines: list[str]) -> list[str]:
    out: list[str] = []
    in_refs = False
    in_code = False
    code_indent = 0
    for k, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if in_code and stripped and indent <= code_indent:
            in_code = False
        if k + 1 < len(lines) and _SECTION.match(lines[k + 1]) and stripped:
            in_refs = stripped.lower() == "references"
        if in_refs and out and stripped and indent > 0 and not _SECTION.match(line) \
                and out[-1].strip() and not _SECTION.match(out[-1]):
            out[-1] = out[-1].rstrip() + " " + stripped          # a hanging continuation line
            continue
        out.append(line if in_code else _escape_bars(line))
        if stripped.endswith("::"):
            in_code, code_indent = True, indent
    return out


def _process(app, what, name, obj, options, lines):
    lines[:] = clean_docstring(lines)


def setup(app: Sphinx):
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("autodoc-process-docstring", _process, priority=100)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
