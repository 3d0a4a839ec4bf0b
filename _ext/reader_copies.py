"""Reader copies: each chapter as a reader opens it in Jupyter (issue #32, items 4 and 5).

The chapters are MyST notebooks written for the HTML book. JupyterLab, even with
``jupyterlab-myst``, renders none of the book's Sphinx roles: a glued number shows as the
variable's name, a citation as "Citation Not Found", a ``{doc}`` link as a dead link, a
``{prf:ref}`` as an error in the console. And a chapter with exercises is an otter-grader
*master*, whose raw cells, solutions and hidden tests a reader must never open.

A **reader copy** is the notebook a reader gets — the page's download button
(``_sources/<chapter>.ipynb``), the Binder button and ``make reader`` (``reader/``, see
``tools/reader.py``) all serve one:

* no outputs; for an otter master, the **student copy** (``tools/assign.py``: solutions
  replaced by ``...``, public tests only, no otter markup);
* ``{glue:text}`key:fmt``` and ``{glue}`key``` become the number the book build computed
  (formatted as the book formats it), or, without a build, the number saved from the last
  build (``book/glued_numbers.json``, :func:`save_numbers`);
* ``{cite}``, ``{cite:p}``, ``{cite:t}`` (every role of sphinxcontrib-bibtex) become the
  author-year text the HTML book prints (``Song et al. [2020]``, ``[Dwork and Roth,
  2014]``): the same bibliography style (``_ext/bibstyle.py``) and reference style, so the
  same names, years, "a"/"b" suffixes and order; a "References" cell at the end lists the
  works the chapter cites, labelled as in the book's bibliography;
* ``{doc}`` becomes the linked chapter's title, linked to that chapter's reader copy
  (the copies keep the book's folder layout); ``{prf:ref}``, ``{ref}``, ``{numref}`` and
  ``{eq}`` become their text (or the target's title); ``{func}``, ``{class}``, ``{mod}``
  ... become inline code as Sphinx prints them (``minimize()``); a Markdown link to a page
  of the book that is no notebook (``../api/index.md``) keeps its text only.

This module is plain Python (no Sphinx object needed): ``_ext/classroom.py`` calls it when
the build finishes, ``tools/reader.py`` for Binder and ``make reader``.
"""
from __future__ import annotations

import copy
import functools
import importlib.util
import json
import posixpath
import re
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
#: Where Binder's postBuild and ``make reader`` write the reader copies (``reader/<docname>.ipynb``);
#: ``_config.yml``'s ``repository.path_to_book`` points the Binder buttons there.
READER_DIR = "reader"
#: The glued numbers of the last book build, for reader copies made without one (Binder).
NUMBERS_FILE = ROOT / "book" / "glued_numbers.json"
#: Notebook metadata of a reader copy (how a test tells one from a master or a student copy).
READER_METADATA = {"reader_copy": True}
#: The heading of the References cell a reader copy ends with.
REFERENCES_HEADING = "## References"

# --------------------------------------------------------------------------- roles

#: ``{glue}`key``` / ``{glue:text}`key:fmt``` (``{glue:md}`` too).
GLUE_ROLE = re.compile(r"\{glue(?::text|:md)?\}`([^`:]+)(?::([^`]*))?`")
#: Any citation role of sphinxcontrib-bibtex: ``{cite}``, ``{cite:p}``, ``{cite:t}``, ``{cite:ps}``, ...
CITE_ROLE = re.compile(r"\{cite(?::(\w+))?\}`([^`]+)`")
DOC_ROLE = re.compile(r"\{doc\}`([^`]+)`")
XREF_ROLE = re.compile(r"\{(prf:ref|ref|numref|eq|term|any|std:ref)\}`([^`]+)`")
#: Sphinx's Python roles (``{func}``, ``{py:class}``, ...), which print the target as code.
PY_ROLE = re.compile(r"\{(?:py:)?(func|meth|class|mod|attr|data|exc|obj|const)\}`([^`]+)`")
#: ``text <target>`` inside a role.
EXPLICIT = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.S)
#: A Markdown link ``[text](target)`` (no image).
MD_LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s]+)\)")
#: What no reader copy may hold: raw roles that JupyterLab cannot render, otter markup.
LEFTOVER = re.compile(r"\{(?:glue[:\w]*|cite[:\w]*|doc|prf:ref|ref|numref|eq"
                      r"|func|meth|class|mod|attr|data|exc|obj)\}`")
OTTER_MARKERS = ("# ASSIGNMENT CONFIG", "# BEGIN QUESTION", "# END QUESTION", "# BEGIN SOLUTION",
                 "# END SOLUTION", "# BEGIN TESTS", "# END TESTS", "BEGIN TEST CONFIG", "# SOLUTION")


def _split_explicit(text: str) -> tuple[str | None, str]:
    m = EXPLICIT.match(text.strip())
    return (m.group(1).strip(), m.group(2).strip()) if m else (None, text.strip())


def _md_escape(text: str) -> str:
    """Text that Markdown (and MyST) shows as it is: brackets and emphasis marks escaped."""
    return re.sub(r"([\[\]*_`\\])", r"\\\1", text)


# --------------------------------------------------------------------------- glue

def glue_value(output: dict, fmt: str) -> str | None:
    """The text the book prints for a glued ``output`` with format spec ``fmt`` (myst-nb's rule)."""
    text = (output.get("data") or {}).get("text/plain")
    if text is None:
        return None
    try:
        from myst_nb.core.variables import format_plain_text

        from dpclip_lab.numbers import readable

        return readable(format_plain_text(text, fmt or ""))   # as _ext/readable_numbers.py prints it
    except (ValueError, TypeError):
        return None


def render_glue(source: str, glue: dict) -> str:
    """Replace glue roles in Markdown by the glued values (left alone when unknown).

    ``glue`` is a ``<chapter>.glue.json`` of the build: key -> the glued output.
    """
    def repl(m):
        out = glue.get(m.group(1))
        value = glue_value(out, m.group(2) or "") if out else None
        return value if value is not None else m.group(0)
    return GLUE_ROLE.sub(repl, source)


def glue_role_target(m: re.Match) -> str:
    """``key:fmt`` (or ``key``): how :data:`NUMBERS_FILE` names one glued number."""
    return m.group(1) + (f":{m.group(2)}" if m.group(2) is not None else "")


def glued_numbers(markdown: Iterable[str], glue: dict) -> dict[str, str]:
    """``key:fmt`` -> the printed number, for every glue role in ``markdown`` that ``glue`` resolves."""
    found = {}
    for source in markdown:
        for m in GLUE_ROLE.finditer(source):
            out = glue.get(m.group(1))
            value = glue_value(out, m.group(2) or "") if out else None
            if value is not None:
                found[glue_role_target(m)] = value
    return found


# --------------------------------------------------------------------------- citations

def _load_bibstyle():
    """``_ext/bibstyle.py`` registers the book's pybtex style ``dpclip`` when imported."""
    import sys

    if "bibstyle" in sys.modules:
        return sys.modules["bibstyle"]
    spec = importlib.util.spec_from_file_location("dpclip_bibstyle", Path(__file__).with_name("bibstyle.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Bibliography:
    """The book's bibliography, formatted as sphinxcontrib-bibtex formats it for the HTML book.

    ``style`` is ``bibtex_default_style`` (the entries and their labels), ``reference_style``
    ``bibtex_reference_style`` (the text of a citation), both from ``_config.yml``.
    """

    def __init__(self, bibfiles: Iterable[Path], style: str = "dpclip", reference_style: str = "author_year"):
        import pybtex.plugin
        from pybtex.database import BibliographyData, parse_file
        from sphinxcontrib.bibtex.plugin import find_plugin

        _load_bibstyle()
        data = BibliographyData()
        for path in bibfiles:
            for key, entry in parse_file(str(path)).entries.items():
                data.entries.setdefault(key, entry)
        self.style = pybtex.plugin.find_plugin("pybtex.style.formatting", style)()
        # the book's bibliography lists every entry (references.md, :all:): labels over all of them
        self.entries = list(self.style.sort(data.entries.values()))
        formatted = list(self.style.format_entries(self.entries))
        self.formatted = {e.key: f for e, f in zip(self.entries, formatted)}
        self.rank = {e.key: i for i, e in enumerate(self.entries)}
        self.reference_style = find_plugin("sphinxcontrib.bibtex.style.referencing", reference_style)()

    def __contains__(self, key: str) -> bool:
        return key in self.formatted

    def cite(self, role: str, keys: Iterable[str]) -> str:
        """The text of ``{cite:<role>}`keys```, as the HTML book prints it (plain text)."""
        from sphinxcontrib.bibtex.style.referencing import format_references
        from sphinxcontrib.bibtex.style.template import SphinxReferenceInfo

        known = sorted({k for k in keys if k in self.formatted}, key=self.rank.__getitem__)
        if not known:
            raise KeyError(f"no entry for {list(keys)} in the bibliography")
        refs = [(self.entries[self.rank[k]], self.formatted[k],
                 SphinxReferenceInfo(builder=None, fromdocname="", todocname="", citation_id="", title=None,
                                     pre_text="", post_text=""))
                for k in known]
        return str(format_references(self.reference_style, role, refs))

    def label(self, key: str) -> str:
        return self.formatted[key].label

    def entry_markdown(self, key: str) -> str:
        """One entry of the bibliography in Markdown, as the book's References page lists it."""
        text = self.formatted[key].text.render_as("markdown")
        return re.sub(r"\s*\n\s*", " ", text).strip()

    def references_cell(self, keys: Iterable[str]) -> str:
        """The Markdown of the "References" cell: the cited works, in the bibliography's order."""
        lines = [REFERENCES_HEADING, ""]
        for key in sorted(set(keys), key=self.rank.__getitem__):
            lines.append(f"- \\[{_md_escape(self.label(key))}\\] {self.entry_markdown(key)}")
        return "\n".join(lines)


@functools.lru_cache(maxsize=4)
def bibliography(bibfiles: tuple[str, ...] = (str(ROOT / "references.bib"),), style: str = "dpclip",
                 reference_style: str = "author_year") -> Bibliography:
    return Bibliography([Path(p) for p in bibfiles], style, reference_style)


def book_bibliography(root: Path = ROOT) -> Bibliography | None:
    """The bibliography as the book's ``_config.yml`` sets it (bib files, style, reference style);
    ``None`` when the book cites nothing."""
    import yaml

    config = yaml.safe_load((Path(root) / "_config.yml").read_text()) or {}
    sphinx = (config.get("sphinx") or {}).get("config") or {}
    files = tuple(str(Path(root) / f) for f in config.get("bibtex_bibfiles") or [])
    if not files:
        return None
    return bibliography(files, sphinx.get("bibtex_default_style", "alpha"),
                        sphinx.get("bibtex_reference_style", "label"))


def render_cites(source: str, bib: Bibliography, cited: list | None = None) -> str:
    """Replace citation roles by their author-year text; append the cited keys to ``cited``.

    Brackets are escaped, so that ``[Song et al., 2020]`` never reads as a Markdown link.
    A role with a key that is not in the bibliography is left alone (the build warns of it).
    """
    def repl(m):
        role = m.group(1) or "p"
        keys = [k.strip() for k in m.group(2).split(",") if k.strip()]
        if not keys or any(k not in bib for k in keys):
            return m.group(0)
        if cited is not None:
            cited.extend(keys)
        return _md_escape(bib.cite(role, keys))
    return CITE_ROLE.sub(repl, source)


# --------------------------------------------------------------------------- cross-references

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
_TARGET = re.compile(r"^\(([^()\s]+)\)=\s*\n+\s{0,3}#{1,6}\s+(.+?)\s*$", re.M)
_DIRECTIVE_LABEL = re.compile(r"^(?:```+|:::+)\{(?:prf:)?(\w+)\}[ \t]*(.*)\n((?::[\w-]+:.*\n)*)", re.M)


def _sources_of(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in nb.get("cells", []) if c.get("cell_type") == "markdown"]
    return [path.read_text(encoding="utf-8")]


class BookIndex:
    """What the cross-references of the book point at: titles of documents, labels of boxes
    and sections, and which documents have a reader copy (the notebooks)."""

    def __init__(self):
        self.titles: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.notebooks: set[str] = set()

    @classmethod
    def from_files(cls, srcdir: Path, docnames: Iterable[str]) -> "BookIndex":
        index = cls()
        srcdir = Path(srcdir)
        for doc in docnames:
            path = next((srcdir / f"{doc}{ext}" for ext in (".ipynb", ".md", ".rst")
                         if (srcdir / f"{doc}{ext}").is_file()), None)
            if path is None:
                continue
            if path.suffix == ".ipynb":
                index.notebooks.add(doc)
            sources = _sources_of(path)
            for text in sources:
                m = _HEADING.search(text)
                if m and doc not in index.titles and len(m.group(1)) == 1:
                    index.titles[doc] = m.group(2).strip()
                for t in _TARGET.finditer(text):
                    index.labels.setdefault(t.group(1), t.group(2).strip())
                for d in _DIRECTIVE_LABEL.finditer(text):
                    lab = re.search(r"^:label:\s*(\S+)", d.group(3), re.M)
                    if lab:
                        kind, title = d.group(1), d.group(2).strip()
                        index.labels.setdefault(lab.group(1), title or kind.capitalize())
            if doc not in index.titles:
                index.titles[doc] = Path(doc).name.replace("_", " ")
        return index

    @classmethod
    def from_toc(cls, root: Path = ROOT, toc: Path | None = None) -> "BookIndex":
        return cls.from_files(root, toc_docnames(root, toc))


def toc_docnames(root: Path = ROOT, toc: Path | None = None) -> list[str]:
    """Every document in ``_toc.yml`` (root first), as docnames (``book/part1/huberization``)."""
    import yaml

    data = yaml.safe_load(Path(toc or Path(root) / "_toc.yml").read_text())
    found = [str(data["root"])]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(str(Path(node["file"]).with_suffix("")) if Path(node["file"]).suffix
                             in (".md", ".ipynb", ".rst") else str(node["file"]))
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(data)
    return found


def toc_notebooks(root: Path = ROOT, toc: Path | None = None) -> list[Path]:
    """The notebook chapters of the table of contents (each gets a reader copy)."""
    return [Path(root) / f"{d}.ipynb" for d in toc_docnames(root, toc) if (Path(root) / f"{d}.ipynb").is_file()]


def _resolve_doc(target: str, docname: str) -> str:
    target = target.strip()
    if target.startswith("/"):
        return posixpath.normpath(target.lstrip("/"))
    return posixpath.normpath(posixpath.join(posixpath.dirname(docname), target))


def _relative_link(target_doc: str, docname: str) -> str:
    return posixpath.relpath(f"{target_doc}.ipynb", posixpath.dirname(docname) or ".")


def render_xrefs(source: str, docname: str, index: BookIndex, links: bool = True) -> str:
    """``{doc}`` -> the title (a link to the chapter's reader copy when ``links``); ``{prf:ref}``,
    ``{ref}``, ``{numref}``, ``{eq}`` -> their text or the target's title; Markdown links to a
    page of the book that has no reader copy (``../api/index.md``) -> their text."""
    def doc(m):
        text, target = _split_explicit(m.group(1))
        target_doc = _resolve_doc(target, docname)
        title = text or index.titles.get(target_doc) or Path(target_doc).name.replace("_", " ")
        if links and target_doc in index.notebooks:
            return f"[{title}]({_relative_link(target_doc, docname)})"
        return title

    def xref(m):
        role = m.group(1)
        text, target = _split_explicit(m.group(2))
        if role == "eq":
            return f"({text or target})"
        title = index.labels.get(target, target.replace("-", " "))
        if text:
            return text.replace("{name}", title).replace("{number}", "").replace("  ", " ").strip()
        return title

    def md_link(m):
        text, target = m.group(1), m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target, re.I):
            return m.group(0)   # absolute URLs, anchors
        path, _, anchor = target.partition("#")
        if not path.endswith((".md", ".rst", ".ipynb")):
            return m.group(0)
        target_doc = _resolve_doc(str(Path(path).with_suffix("")), docname)
        if target_doc in index.notebooks:
            return m.group(0) if links else text
        return text

    source = DOC_ROLE.sub(doc, source)
    source = XREF_ROLE.sub(xref, source)
    return MD_LINK.sub(md_link, source)


def render_py_roles(source: str) -> str:
    """``{func}`~a.b.minimize``` -> `` `minimize()` ``, as Sphinx prints the Python roles."""
    def repl(m):
        role, body = m.group(1), m.group(2).strip()
        text, target = _split_explicit(body)
        if text:
            return f"`{text}`"
        target = target.lstrip("!")
        if target.startswith("~"):
            target = target[1:].rsplit(".", 1)[-1]
        if role in ("func", "meth") and not target.endswith(")"):
            target += "()"
        return f"`{target}`"
    return PY_ROLE.sub(repl, source)


# --------------------------------------------------------------------------- the notebook

GlueLookup = Callable[[str, str | None], "str | None"]


def glue_lookup(glue: dict | None = None, numbers: dict | None = None) -> GlueLookup:
    """A lookup ``(key, fmt) -> printed number``: from a build's ``.glue.json`` (``glue``),
    else from saved numbers (``numbers``: ``key:fmt`` -> text, :data:`NUMBERS_FILE`)."""
    def look(key, fmt):
        out = (glue or {}).get(key)
        if out:
            value = glue_value(out, fmt or "")
            if value is not None:
                return value
        return (numbers or {}).get(key + (f":{fmt}" if fmt is not None else ""))
    return look


class Rendered(NamedTuple):
    notebook: object
    cited: list
    unresolved_glue: list


def render_markdown(source: str, docname: str, *, lookup: GlueLookup, bib: Bibliography | None,
                    index: BookIndex, links: bool = True, cited: list | None = None,
                    unresolved: list | None = None) -> str:
    """One Markdown cell of a chapter as its reader copy shows it (see the module docstring)."""
    def glue(m):
        value = lookup(m.group(1), m.group(2))
        if value is None:
            if unresolved is not None:
                unresolved.append(glue_role_target(m))
            return f"`{m.group(1)}`"   # no build to take the number from: its name, as code
        return value

    source = GLUE_ROLE.sub(glue, source)
    if bib is not None:
        source = render_cites(source, bib, cited)
    source = render_xrefs(source, docname, index, links=links)
    return render_py_roles(source)


def reader_notebook(nb, docname: str, *, lookup: GlueLookup, bib: Bibliography | None, index: BookIndex,
                    links: bool = True) -> Rendered:
    """The reader copy of ``nb`` (a master's *student copy*, or a chapter without exercises).

    Outputs are cleared, raw cells dropped (otter's markup; the book shows no raw cell), the
    Markdown rendered (:func:`render_markdown`) and a References cell appended. ``nb`` is not
    changed.
    """
    import nbformat

    nb = copy.deepcopy(nb)
    cited, unresolved = [], []
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "raw":
            continue
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            if cell.source.strip().startswith(REFERENCES_HEADING):
                continue   # made again below
            cell.source = render_markdown(cell.source, docname, lookup=lookup, bib=bib, index=index,
                                          links=links, cited=cited, unresolved=unresolved)
        cells.append(cell)
    if cited and bib is not None:
        cells.append(nbformat.v4.new_markdown_cell(bib.references_cell(cited)))
    if unresolved:
        note = ("```{note}\nSome numbers that the chapter's code computes, and that the HTML book prints "
                "in its text, were not known when this copy was made (no book build had computed them): "
                "each shows as its name in code font (`" + unresolved[0].split(":")[0] + "`, ...). Run the "
                "chapter to compute them.\n```")
        at = next((i + 1 for i, c in enumerate(cells) if c.cell_type == "markdown"), 0)
        cells.insert(at, nbformat.v4.new_markdown_cell(note))
    nb.cells = cells
    nb.metadata.setdefault("dpclip", {}).update(READER_METADATA)
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 5), 5)
    from nbformat.corpus.words import generate_corpus_id

    for cell in nb.cells:   # nbformat 4.5: every cell has an id (the new cells have one)
        cell.setdefault("id", generate_corpus_id())
    return Rendered(nb, sorted(set(cited)), unresolved)


def leftover_markup(nb) -> list[str]:
    """What a reader copy must not hold, as readable findings (empty: a clean reader copy)."""
    bad = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "raw":
            bad.append(f"cell {i}: a raw cell ({cell.source[:40]!r})")
        if cell.cell_type == "markdown":
            for m in LEFTOVER.finditer(cell.source):
                bad.append(f"cell {i}: {cell.source[m.start():m.start() + 50]!r}")
        for marker in OTTER_MARKERS:
            if marker in cell.source:
                bad.append(f"cell {i}: otter marker {marker!r}")
        if cell.cell_type == "code" and cell.get("outputs"):
            bad.append(f"cell {i}: outputs")
    tests = ((nb.metadata.get("otter") or {}).get("tests") or {})
    for name, test in tests.items():
        suites = (test.get("suites") or []) if isinstance(test, dict) else []
        cases = [c for suite in suites for c in (suite.get("cases") or [])]
        if any(c.get("hidden") for c in cases):
            bad.append(f"hidden test in {name}")
    return bad


def write_notebook(nb, *paths: Path) -> None:
    import nbformat

    text = nbformat.writes(nb) + "\n"
    for path in paths:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- saved numbers (Binder)

def load_numbers(path: Path = NUMBERS_FILE) -> dict[str, dict[str, str]]:
    """docname -> {``key:fmt`` -> printed number}, as saved by :func:`save_numbers` ({} if none)."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def build_numbers(glue_dir: Path, notebooks: Iterable[Path], root: Path = ROOT) -> dict[str, dict[str, str]]:
    """The printed numbers of every glue role in ``notebooks``, from the build's ``glue_dir``
    (``_build/jupyter_execute``); chapters that the build has not executed are left out."""
    numbers = {}
    for path in notebooks:
        doc = str(Path(path).resolve().relative_to(Path(root).resolve()).with_suffix("")).replace("\\", "/")
        glue_json = Path(glue_dir) / f"{doc}.glue.json"
        if glue_json.is_file():
            numbers[doc] = glued_numbers(_sources_of(Path(path)), json.loads(glue_json.read_text()))
    return numbers


def save_numbers(glue_dir: Path, notebooks: Iterable[Path], path: Path = NUMBERS_FILE, root: Path = ROOT) -> bool:
    """Write the numbers of the last build into ``path`` (chapters it did not execute keep their
    saved numbers); return whether the file changed."""
    old = load_numbers(path)
    numbers = {**old, **build_numbers(glue_dir, notebooks, root)}
    keep = {str(Path(p).resolve().relative_to(Path(root).resolve()).with_suffix("")).replace("\\", "/")
            for p in notebooks}
    numbers = {d: dict(sorted(v.items())) for d, v in sorted(numbers.items()) if d in keep}
    text = json.dumps(numbers, indent=1, ensure_ascii=False) + "\n"
    if Path(path).is_file() and Path(path).read_text(encoding="utf-8") == text:
        return False
    Path(path).write_text(text, encoding="utf-8")
    return True
