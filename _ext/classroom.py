"""Sphinx extension: graded use must not leak (the chapters are otter-grader masters).

Registered in ``_config.yml`` under ``sphinx: local_extensions``. For every chapter
notebook with a ``# ASSIGNMENT CONFIG`` raw cell (an otter *master*, see
``tools/assign.py``) it

* folds each solution cell whole — code *and* printed output — behind its
  "Show a solution" button (myst-nb's ``hide-input`` alone leaves the output
  visible), and strips otter's markers (``# BEGIN SOLUTION``, ``# END SOLUTION``,
  ``# SOLUTION``, prompt blocks) from the code a reader sees;
* after the build, runs ``otter assign`` (offline, ``--no-run-tests``) and
  replaces the page's download (``_sources/<chapter>.ipynb``, which Sphinx copies
  from the master) with the **student** copy; puts the student copy under
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
* writes the numbers of the book's prose into the student copy: each
  ``{glue:text}`key:fmt``` (and ``{glue}`key```) becomes the value the build
  computed, as plain text. JupyterLab — even with ``jupyterlab-myst`` — does not
  render glue roles, so a student would otherwise read raw markup.

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
             "<b>Instructors:</b> <code>make course</code> builds a course edition of this book "
             "without the solutions, and the autograder of every chapter (the introduction, "
             "\"For instructors\", says how).")
    return (
        f'<div class="admonition note {CLASSROOM_CLASS}">\n'
        '<p class="admonition-title">Doing the exercises</p>\n'
        f'<p>Download the <a class="reference download" href="{html.escape(student)}" download>'
        f'student notebook</a> (also the page\'s download button): the exercises without '
        'their solutions, with a <code>grader.check("q1")</code> cell after each one that '
        f'runs the public tests. {after}</p>\n</div>\n'
    )


def _page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is None or pagename not in _masters(app):
        return
    body = context.get("body", "")
    box = _classroom_box(context["pathto"], Path(pagename).name, app.config.dpclip_edition)
    # after the "Exercises" heading if there is one, else at the end of the page
    m = re.search(r'<section id="exercises">\s*<h2>.*?</h2>', body, re.S)
    context["body"] = body[:m.end()] + box + body[m.end():] if m else body + box


_GLUE_ROLE = re.compile(r"\{glue(?::text|:md)?\}`([^`:]+)(?::([^`]*))?`")


def _glue_value(output: dict, fmt: str) -> str | None:
    text = (output.get("data") or {}).get("text/plain")
    if text is None:
        return None
    try:
        from myst_nb.core.variables import format_plain_text

        return format_plain_text(text, fmt or "")
    except (ValueError, TypeError):
        return None


def render_glue(source: str, glue: dict) -> str:
    """Replace glue roles in Markdown by the glued values (left alone when unknown)."""
    def repl(m):
        out = glue.get(m.group(1))
        value = _glue_value(out, m.group(2) or "") if out else None
        return value if value is not None else m.group(0)
    return _GLUE_ROLE.sub(repl, source)


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


def _build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    masters = {d: p for d, p in _masters(app).items() if d in app.env.found_docs}
    if not masters:
        return
    tool = _assign_tool()
    outdir = Path(app.outdir)
    work = Path(app.outdir).parent / "assignments"
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
        shutil.copyfile(student, dest / master.name)   # the autograder zip stays out of the site
        # the page's download button serves _sources/<docname>.ipynb: make it the student copy
        for source in (outdir / "_sources").glob(f"{docname}.ipynb*"):
            shutil.copyfile(student, source)


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
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
