"""Sphinx extension: graded use must not leak (the chapters are otter-grader masters).

Registered in ``_config.yml`` under ``sphinx: local_extensions``. For every chapter
notebook with a ``# ASSIGNMENT CONFIG`` raw cell (an otter *master*, see
``tools/assign.py``) it

* folds each solution cell whole — code *and* printed output — behind its
  "Show a solution" button (myst-nb's ``hide-input`` alone leaves the output
  visible), and strips otter's markers (``# BEGIN SOLUTION``, ``# END SOLUTION``,
  ``# SOLUTION``, prompt blocks) from the code a reader sees;
* after the build, runs ``otter assign`` (offline, ``--no-run-tests``) and
  makes the page's download (``_sources/<chapter>.ipynb``, which Sphinx copies
  from the master) the **student** copy (as a reader copy, below); puts it under
  ``_assignments/`` and links it from the chapter's Exercises section. The
  **autograder zip** (every test, hidden ones included) never goes into the site:
  instructors get it from the course edition (``make course``, README "Classroom");
* with ``DPCLIP_EDITION=course`` in the environment (config value ``dpclip_edition``,
  set by ``make course``, ``tools/assign.py --course``), builds the **course edition**:
  the same pages without the solutions (solution cells are dropped, not folded) and
  without the worked answers (Markdown inside a SOLUTION block, "Why" dropdowns,
  cells tagged ``solution-explanation``: :func:`course_notebook`). Tests never reach a
  page in either edition (their cells are tagged ``remove-cell``). Only Markdown is
  removed from the source and code cells keep their metadata, so the jupyter-cache
  key of a chapter is the same as the book's: a cached execution serves both;
* makes the page's download of **every** notebook chapter its **reader copy**
  (``_ext/reader_copies.py``): the student copy of a master, the notebook without
  outputs otherwise, with the numbers of the build written into the prose (each
  ``{glue:text}`key:fmt``` becomes the value the build computed), citations as the
  author-year text the page shows plus a References cell, ``{doc}``/``{prf:ref}``/
  ``{func}`` ... as readable text. JupyterLab — even with ``jupyterlab-myst`` — renders
  none of these roles, so a reader would otherwise read raw markup. The classroom copies
  (``_assignments/``, the course edition's student notebooks) get the same rendering.

A solution cell is a code cell whose ``mystnb.code_prompt_show`` mentions
"solution" (the book's convention: "Show a solution"), or any code cell between
``# BEGIN SOLUTION`` / ``# END SOLUTION`` raw cells.

``tests/test_book_html.py`` checks the result on the built site: no otter marker
in any page, the download of every master is the student copy, no autograder zip;
``tests/test_course_edition.py`` builds a small course edition and checks that it holds
no solution and no hidden test.
"""
from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

LOG = logging.getLogger(__name__)
#: Where the classroom copies go in the built site.
ASSIGNMENTS_DIR = "_assignments"
#: Lines that are otter markers (never shown to a reader).
MARKER_LINE = re.compile(r"^\s*#\s*(BEGIN|END)\s+(SOLUTION|PROMPT)\b.*$")
TRAILING_SOLUTION = re.compile(r"\s*#\s*SOLUTION\s*$")
CLASSROOM_CLASS = "dpclip-classroom"
#: Written next to the site (``_build/reader-copies.json``) when the build has written every reader
#: copy, removed when a build starts: tests read the downloads of a *complete* build only.
READER_MANIFEST = "reader-copies.json"
#: The environment variable that picks the edition: ``book`` (default) or ``course``.
EDITION_ENV = "DPCLIP_EDITION"
EDITIONS = ("book", "course")
#: ``tools/assign.py`` (the classroom tool) sits next to this extension's folder.
ASSIGN_TOOL = Path(__file__).resolve().parents[1] / "tools" / "assign.py"


def _assign_tool():
    spec = importlib.util.spec_from_file_location("dpclip_assign_tool", ASSIGN_TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def strip_otter_markers(code: str) -> str:
    """The solution code as a reader should see it: no otter marker lines or suffixes.

    Prompt blocks (``# BEGIN PROMPT`` ... ``# END PROMPT``: what the student copy shows
    instead of the solution) are dropped whole.
    """
    out, in_prompt = [], False
    for line in code.splitlines():
        m = MARKER_LINE.match(line)
        if m:
            if m.group(2) == "PROMPT":
                in_prompt = m.group(1) == "BEGIN"
            continue
        if in_prompt:
            continue
        out.append(TRAILING_SOLUTION.sub("", line))
    return "\n".join(out)


def is_solution_cell(metadata) -> bool:
    prompt = ((metadata or {}).get("mystnb") or {}).get("code_prompt_show") or ""
    return "solution" in str(prompt).lower()


class FoldSolutions(SphinxPostTransform):
    """Fold solution cells whole (input + output) and strip otter markers from their code.

    Runs before myst-nb's ``HideInputCells`` (priority 199), which does the folding.
    """

    default_priority = 190
    formats = ("html",)

    def run(self, **kwargs):
        course = self.config.dpclip_edition == "course"
        for node in list(self.document.findall(nodes.container)):
            if node.get("nb_element") != "cell_code":
                continue
            metadata = node.get("cell_metadata") or {}
            solution = is_solution_cell(metadata)
            if solution and course:   # the course edition shows no solution, folded or not
                node.parent.remove(node)
                continue
            for block in node.findall(nodes.literal_block):
                text = block.astext()
                if not (solution or MARKER_LINE.search(text) or "# SOLUTION" in text):
                    continue
                clean = strip_otter_markers(text)
                if clean != text:
                    block.children = [nodes.Text(clean)]
                    block.rawsource = clean
            if solution and node.get("hide_mode") in ("input", "output", "input+output", None):
                node["hide_mode"] = "all"
                node.setdefault("prompt_show", "Show a solution")
                node.setdefault("prompt_hide", "Hide the solution")
                if not node.get("prompt_hide") or "{type}" in str(node.get("prompt_hide")):
                    node["prompt_hide"] = "Hide the solution"


def _masters(app: Sphinx) -> dict[str, Path]:
    """docname -> master notebook path, for every otter master in the build."""
    if not hasattr(app.env, "dpclip_masters"):
        tool = _assign_tool()
        found = {}
        for path in tool.find_masters(Path(app.srcdir) / "book"):
            docname = str(path.relative_to(app.srcdir).with_suffix("")).replace("\\", "/")
            found[docname] = path
        app.env.dpclip_masters = found
    return app.env.dpclip_masters


def _classroom_box(pathto, stem: str, edition: str = "book") -> str:
    """The "Doing the exercises" box: a link to the student notebook, never to the autograder."""
    student = pathto(f"{ASSIGNMENTS_DIR}/{stem}/{stem}.ipynb", 1)
    after = ("Your instructor grades the notebook you hand in with further tests."
             if edition == "course" else
             "In this book each solution is folded under its exercise: try the exercise first.")
    return (
        f'<div class="admonition note {CLASSROOM_CLASS}">\n'
        '<p class="admonition-title">Doing the exercises</p>\n'
        f'<p>Download the <a class="reference download" href="{html.escape(student)}" download>'
        f'student notebook</a> (also the page\'s download button): the exercises without '
        'their solutions. Opened in Jupyter, it has a <code>grader.check("q1")</code> cell after '
        f'each exercise that tests your answer. {after}</p>\n</div>\n'
    )


def _page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is None or pagename not in _masters(app):
        return
    body = context.get("body", "")
    box = _classroom_box(context["pathto"], Path(pagename).name, app.config.dpclip_edition)
    # after the "Exercises" heading if there is one, else at the end of the page
    m = re.search(r'<section id="exercises">\s*<h2>.*?</h2>', body, re.S)
    context["body"] = body[:m.end()] + box + body[m.end():] if m else body + box


def _reader_copies():
    """``_ext/reader_copies.py`` (beside this file): the chapters as a reader opens them in Jupyter."""
    import sys

    mod = sys.modules.get("dpclip_reader_copies")
    if mod is None:
        spec = importlib.util.spec_from_file_location("dpclip_reader_copies",
                                                      Path(__file__).with_name("reader_copies.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules["dpclip_reader_copies"] = mod
        spec.loader.exec_module(mod)
    return mod


def render_glue(source: str, glue: dict) -> str:
    """Replace glue roles in Markdown by the glued values (left alone when unknown)."""
    return _reader_copies().render_glue(source, glue)


def _glue_student_copy(student: Path, glue_json: Path) -> None:
    import json

    import nbformat

    if not glue_json.is_file():
        return
    glue = json.loads(glue_json.read_text())
    nb = nbformat.read(student, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = render_glue(cell.source, glue)
    nbformat.write(nb, student)


def _bibliography(app: Sphinx):
    """The book's bibliography as sphinxcontrib-bibtex formats it (None without one)."""
    files = [Path(app.srcdir) / f for f in (getattr(app.config, "bibtex_bibfiles", None) or [])]
    if not files:
        return None
    return _reader_copies().bibliography(
        tuple(str(f) for f in files), getattr(app.config, "bibtex_default_style", "alpha") or "alpha",
        getattr(app.config, "bibtex_reference_style", "label") or "label")


def _write_reader_copies(app: Sphinx, students: dict[str, Path]) -> None:
    """The page's download (``_sources/<docname>.ipynb``) of every notebook chapter is its
    reader copy (``_ext/reader_copies.py``); a master's classroom copies (``_assignments/``, the
    student notebook the course edition hands out) get the same rendering, without links to
    other chapters (they sit in a folder of their own)."""
    import hashlib
    import json

    import nbformat

    rc = _reader_copies()
    outdir = Path(app.outdir)
    written = {}
    folder = Path(app.env.mystnb_config.output_folder)
    docs = sorted(d for d in app.env.found_docs if Path(app.env.doc2path(d)).suffix == ".ipynb")
    index = rc.BookIndex.from_files(Path(app.srcdir), sorted(app.env.found_docs))
    bib = _bibliography(app)
    for docname in docs:
        source = students.get(docname) or Path(app.env.doc2path(docname))
        glue_json = folder.joinpath(*docname.split("/")[:-1]) / f"{Path(docname).name}.glue.json"
        glue = json.loads(glue_json.read_text()) if glue_json.is_file() else {}
        lookup = rc.glue_lookup(glue)   # the numbers of this build
        nb = nbformat.read(source, as_version=4)
        reader = rc.reader_notebook(nb, docname, lookup=lookup, bib=bib, index=index)
        if reader.unresolved_glue:
            LOG.warning(f"{docname}: no number for the glue roles {reader.unresolved_glue[:5]} in the "
                        "reader copy", type="dpclip", subtype="reader_copy")
        targets = list((outdir / "_sources").glob(f"{docname}.ipynb*")) or [outdir / "_sources" / f"{docname}.ipynb"]
        rc.write_notebook(reader.notebook, *targets)
        written[docname] = {str(t.relative_to(outdir)): hashlib.sha256(t.read_bytes()).hexdigest() for t in targets}
        if docname in students:
            flat = rc.reader_notebook(nb, docname, lookup=lookup, bib=bib, index=index, links=False).notebook
            stem = Path(docname).name
            rc.write_notebook(flat, students[docname], outdir / ASSIGNMENTS_DIR / stem / f"{stem}.ipynb")
    # Binder builds no book: its reader copies (tools/reader.py) take the numbers saved here
    numbers = Path(app.srcdir) / rc.NUMBERS_FILE.relative_to(rc.ROOT)
    if app.config.dpclip_edition == "book" and numbers.parent.is_dir():
        notebooks = [Path(app.env.doc2path(d)) for d in docs]
        if rc.save_numbers(folder, notebooks, numbers, root=Path(app.srcdir)):
            LOG.info(f"{numbers.relative_to(app.srcdir)}: the numbers of this build saved for Binder (commit it)")
    (outdir.parent / READER_MANIFEST).write_text(json.dumps({"downloads": written}, indent=1) + "\n")


def _builder_inited(app: Sphinx) -> None:
    (Path(app.outdir).parent / READER_MANIFEST).unlink(missing_ok=True)   # a build is running


def _build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    masters = {d: p for d, p in _masters(app).items() if d in app.env.found_docs}
    outdir = Path(app.outdir)
    work = Path(app.outdir).parent / "assignments"
    students = {}
    tool = _assign_tool() if masters else None
    for docname, master in sorted(masters.items()):
        LOG.info(f"classroom copies: otter assign {master.name}")
        result = tool.assign(master, work)
        stem = master.stem
        dest = outdir / ASSIGNMENTS_DIR / stem
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        student = result / "student" / master.name
        folder = Path(app.env.mystnb_config.output_folder)
        _glue_student_copy(student, folder.joinpath(*docname.split("/")[:-1]) / f"{Path(docname).name}.glue.json")
        students[docname] = student   # the autograder zip stays out of the site
    # the page's download button serves _sources/<docname>.ipynb: the reader copy, never the master
    _write_reader_copies(app, students)


def course_notebook(text: str, master: Path) -> str:
    """The notebook JSON ``text`` of ``master`` without the Markdown that explains its answers.

    What the course edition renders: the cells of :func:`tools.assign.answer_explanations`
    (Markdown inside a SOLUTION block, "Why" dropdowns, cells tagged ``solution-explanation``)
    are left out. Code cells stay as they are (the solution cells are dropped from the page
    by :class:`FoldSolutions`): the chapter executes, and hashes for the execution cache, as
    in the book.
    """
    import nbformat

    explanations = _assign_tool().answer_explanations(master)
    nb = nbformat.reads(text, as_version=4)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "markdown" and c.source.strip() in explanations)]
    return nbformat.writes(nb)


def _source_read(app: Sphinx, docname: str, source: list) -> None:
    if app.config.dpclip_edition == "course" and docname in _masters(app):
        source[0] = course_notebook(source[0], _masters(app)[docname])


def _config_inited(app: Sphinx, config) -> None:
    if config.dpclip_edition not in EDITIONS:
        raise ValueError(f"{EDITION_ENV}={config.dpclip_edition!r}: the edition is one of {EDITIONS}")


def setup(app: Sphinx):
    app.add_config_value("dpclip_edition", os.environ.get(EDITION_ENV, "book"), "env")
    app.connect("config-inited", _config_inited)
    app.add_post_transform(FoldSolutions)
    app.connect("source-read", _source_read)
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("builder-inited", _builder_inited)
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
