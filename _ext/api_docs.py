"""Sphinx extension: the lab's docstrings as the API reference (``book/api/``).

The docstrings are written for ``help()`` first: plain-text formulas such as ``|S_t|``
and reference lists with hanging indents. reStructuredText reads ``|x|`` as a
substitution and a hanging indent as a block quote, which the book (built with ``-W``)
would turn into errors, and it runs the lines of a reference list together into one
paragraph. Before napoleon converts a docstring (numpy style), this extension

* escapes ``|`` outside inline literals and code blocks, so ``|S_t|`` prints as written;
* joins the continuation lines of each entry of a ``References`` section onto the entry;
* starts a new paragraph at each entry of a ``References`` section that lists several
  works (a line that opens with an author and a year, after a line that ends an entry),
  so that each work is a paragraph of its own instead of one run-on paragraph.

A data, attribute or property docstring whose first line holds a colon ("Wang et al. Table 1:
(reference, loss, ...)", "``rank(M)``: the dimension of ...") is prose: napoleon would print the
words before the colon as the object's *type*. This extension puts such a first line back
after napoleon has run, and drops the type napoleon made of it.

A reference to a lab object by a name it is not documented under — the package's re-export
``dpclip_lab.train`` of ``dpclip_lab.training.train``, ``dpclip_lab.algorithms.loop.run`` documented
as ``dpclip_lab.algorithms.run`` — links to the page that documents the object (Sphinx would print
it as bare code, with no warning).

Module-level data is printed with its value only when the value reads as one (at most
:data:`MAX_VALUE_CHARS` characters, no ``<function ...>``): ``stability.WANG_TABLE1`` printed
1,400 characters of tuples and lambdas, ``accountants.DEFAULT_ORDERS`` a 200-entry array.

The docstrings themselves cite author–year ("Wang, Lei, Ying & Zhang (2022), Theorem 7"), never
by a number of some list ("[003] Theorem 7"); and their Parameters / Returns entries are numpy
fields (``name : type`` with the description indented below it), which napoleon renders as
such. ``tests/test_docstrings.py`` checks both.
"""
from __future__ import annotations

import importlib
import inspect
import re

from sphinx.application import Sphinx
from sphinx.ext.autodoc import DataDocumenter
from sphinx.util.inspect import object_description

_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_SECTION = re.compile(r"^\s*-{3,}\s*$")
#: A line that opens a reference: an author (surname first) and, soon after, a year:
#: "Mironov, I. (2017). ...", "Balle & Wang (2018), Theorem 8", "Nasr, Song, ... (2021), ...".
_ENTRY_START = re.compile(r"^[A-Z][\w'’\-À-ÿ.]*[,&\s].{0,160}?\b(?:19|20)\d\d[a-z]?\b")
#: A line that ends a reference: a full stop (or ? !), perhaps inside quotes or parentheses.
_ENTRY_END = re.compile(r"[.?!][\"'”’)]*\s*$")


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
        if in_refs and out and stripped and indent == 0 and out[-1].strip() \
                and not _SECTION.match(out[-1]) and _ENTRY_END.search(out[-1]) \
                and _ENTRY_START.match(stripped):
            out.append("")                                       # the next work: its own paragraph
        out.append(line if in_code else _escape_bars(line))
        if stripped.endswith("::"):
            in_code, code_indent = True, indent
    return out


#: The longest value printed after a data name (``COLORS``, 203 characters, still prints).
MAX_VALUE_CHARS = 300


class ReadableValueDataDocumenter(DataDocumenter):
    """autodoc's module-level data, its value printed only when a reader can read it."""

    def should_suppress_value_header(self) -> bool:
        if super().should_suppress_value_header():
            return True
        try:
            text = object_description(self.object)
        except ValueError:
            return True
        return len(text) > MAX_VALUE_CHARS or "<function" in text or " at 0x" in text


#: Inline literals and roles (napoleon's ``_partition_field_on_colon`` splits at a colon outside them).
_CODE = re.compile(r"``.*?``|(?::[\w:.+-]+:)?`[^`]*`")
_INLINE_TYPED = ("data", "attribute", "property")


def _prose_colon(what: str, lines: list[str]) -> str | None:
    """The words before the first colon of ``lines[0]`` when napoleon would print them as a type."""
    if what not in _INLINE_TYPED or not lines:
        return None
    first = lines[0]
    bare = _CODE.sub(lambda m: "x" * len(m.group(0)), first)
    k = next((i for i, ch in enumerate(bare) if ch == ":" and bare[i - 1:i] != ":" and bare[i + 1:i + 2] != ":"), -1)
    return first[:k].strip() if k > 0 and first[k + 1:].strip() else None


def restore_first_line(original: list[str], lines: list[str]) -> list[str]:
    """``lines`` (napoleon's output for a data/attribute/property docstring whose ``original`` first
    line held a colon) with that first line back and without the ``:type:`` made of its start."""
    prefix = _prose_colon("data", original)
    if prefix is None or not lines or lines[-1].strip() != f":type: {prefix}":
        return lines
    out = lines[:-1]
    while out and not out[-1].strip():
        out.pop()
    k = next((i for i, line in enumerate(out) if line.strip()), None)
    if k is not None:
        out[k] = original[0]
    return out


def _process(app, what, name, obj, options, lines):
    lines[:] = clean_docstring(lines)
    if _prose_colon(what, lines) is not None:
        app.env.temp_data.setdefault("api_docs_first_lines", {})[name] = list(lines)


def _after_napoleon(app, what, name, obj, options, lines):
    original = app.env.temp_data.get("api_docs_first_lines", {}).pop(name, None)
    if original is not None:
        lines[:] = restore_first_line(original, lines)


def _lab_object(name: str):
    """The Python object ``dpclip_lab....`` names (a module, then attributes), or None."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


_LINKED = ("function", "class", "exception", "method", "classmethod", "staticmethod")
_DOCUMENTED: dict = {}


def _documented_names(env) -> dict[int, str]:
    """``{id(function or class): the name the API reference documents it under}``."""
    domain = env.get_domain("py")
    key = (id(env), len(domain.objects))       # ids of objects of this process: never pickled with env
    if _DOCUMENTED.get("key") != key:
        names: dict[int, str] = {}
        for fullname, entry in sorted(domain.objects.items()):
            if entry.objtype in _LINKED and fullname.startswith("dpclip_lab."):
                obj = _lab_object(fullname)
                if inspect.isfunction(obj) or inspect.isclass(obj):
                    names.setdefault(id(obj), fullname)
        _DOCUMENTED.update(key=key, names=names)
    return _DOCUMENTED["names"]


def _resolve_lab_alias(app, env, node, contnode):
    """missing-reference: ``dpclip_lab.X`` that names a documented function or class by another name."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("dpclip_lab."):
        return None
    obj = _lab_object(target)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return None
    name = _documented_names(env).get(id(obj))
    if name is None or name == target:
        return None
    return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, node["reftype"], name, node, contnode)


def setup(app: Sphinx):
    app.setup_extension("sphinx.ext.autodoc")
    app.add_autodocumenter(ReadableValueDataDocumenter, override=True)
    app.connect("autodoc-process-docstring", _process, priority=100)          # before napoleon (500)
    app.connect("autodoc-process-docstring", _after_napoleon, priority=900)   # after it
    app.connect("missing-reference", _resolve_lab_alias)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
