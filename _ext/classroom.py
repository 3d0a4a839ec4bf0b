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
  from the master) with the **student** copy; puts the student copy and the
  **autograder zip** under ``_assignments/`` and links both from the chapter's
  Exercises section;
* writes the numbers of the book's prose into the student copy: each
  ``{glue:text}`key:fmt``` (and ``{glue}`key```) becomes the value the build
  computed, as plain text. JupyterLab — even with ``jupyterlab-myst`` — does not
  render glue roles, so a student would otherwise read raw markup.

A solution cell is a code cell whose ``mystnb.code_prompt_show`` mentions
"solution" (the book's convention: "Show a solution"), or any code cell between
``# BEGIN SOLUTION`` / ``# END SOLUTION`` raw cells.

``tests/test_book_html.py`` checks the result on the built site: no otter marker
in any page, the download of every master is the student copy, the zip exists.
"""
from __future__ import annotations

import html
import importlib.util
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


def _assign_tool(srcdir: Path):
    spec = importlib.util.spec_from_file_location("dpclip_assign_tool", srcdir / "tools" / "assign.py")
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
        for node in self.document.findall(nodes.container):
            if node.get("nb_element") != "cell_code":
                continue
            metadata = node.get("cell_metadata") or {}
            solution = is_solution_cell(metadata)
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
        tool = _assign_tool(Path(app.srcdir))
        found = {}
        for path in tool.find_masters(Path(app.srcdir) / "book"):
            docname = str(path.relative_to(app.srcdir).with_suffix("")).replace("\\", "/")
            found[docname] = path
        app.env.dpclip_masters = found
    return app.env.dpclip_masters


def _classroom_box(pathto, stem: str) -> str:
    student = pathto(f"{ASSIGNMENTS_DIR}/{stem}/{stem}.ipynb", 1)
    zip_ = pathto(f"{ASSIGNMENTS_DIR}/{stem}/{stem}-autograder.zip", 1)
    return (
        f'<div class="admonition note {CLASSROOM_CLASS}">\n'
        '<p class="admonition-title">Doing the exercises</p>\n'
        f'<p>Download the <a class="reference download" href="{html.escape(student)}" download>'
        f'student notebook</a> (also the page\'s download button): the exercises without '
        'their solutions, with a <code>grader.check("q1")</code> cell after each one that '
        'runs the public tests. <b>Instructors:</b> the '
        f'<a class="reference download" href="{html.escape(zip_)}" download>autograder zip</a> '
        'holds every test, hidden ones included, for <code>otter run</code> '
        '(see the README, "Classroom").</p>\n</div>\n'
    )


def _page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if doctree is None or pagename not in _masters(app):
        return
    body = context.get("body", "")
    box = _classroom_box(context["pathto"], Path(pagename).name)
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
    tool = _assign_tool(Path(app.srcdir))
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
        shutil.copyfile(student, dest / master.name)
        shutil.copyfile(tool.autograder_zip(result), dest / f"{stem}-autograder.zip")
        # the page's download button serves _sources/<docname>.ipynb: make it the student copy
        for source in (outdir / "_sources").glob(f"{docname}.ipynb*"):
            shutil.copyfile(student, source)


def setup(app: Sphinx):
    app.add_post_transform(FoldSolutions)
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("build-finished", _build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
