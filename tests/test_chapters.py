"""Every chapter follows the book's template (issue #10, items 6-8), checked on the notebook sources.

The template (README, "Authoring chapters"):

* a title ``# ...`` and a ```` ```{admonition} Learning objectives ```` block;
* before each main figure a ```` ```{admonition} Predict, then look ```` box with
  ``:class: tip``, and after it a "What you should have seen" heading or bold lead;
* a ``## Checking the claims`` section whose ``assert`` cells are each preceded by
  a sentence saying what they check;
* chapters with exercises (otter masters): a ``## Exercises`` section and, after
  each exercise's solution, a ```` ```{dropdown} Why ```` block;
* a ``## Summary`` and, last, ``**Next:** [Title](relative/path.ipynb)`` pointing to
  the next chapter of the table of contents;
* hidden code folds under one of two labels: "Show the plotting code" (plotting
  code that is not in the lab) and "Show a solution" (solutions only); a visible
  code cell that builds a figure trace by trace is plotting code and must fold.

Every failure names the chapter and what it lacks. These checks cover every notebook
under ``book/``, whoever wrote it.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = sorted(p for p in BOOK.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
PLOT_LABEL = "Show the plotting code"
SOLUTION_LABEL = "Show a solution"
#: The fold of a computation whose results visible code goes on to use (``views``, ``kink_gap``).
COMPUTE_LABEL = "Show how it is computed"
#: an assert of "Checking the claims": the sentence before it says what is checked, the code folds
CHECK_LABEL = "Show the check"
#: A visible code cell with this many plotly trace/layout calls is plotting code.
MAX_VISIBLE_PLOT_CALLS = 3


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _toc_order() -> list[str]:
    """Files of ``_toc.yml`` in reading order (``book/part1/huberization``, ...)."""
    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    yield node[key]
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or []:
                    yield from walk(child)
        elif isinstance(node, list):
            for child in node:
                yield from walk(child)
    return [str(Path(f).with_suffix("")) for f in walk(yaml.safe_load((ROOT / "_toc.yml").read_text()))]


#: The "Why" block after a solution: ```{dropdown} Why, or an admonition "Why" of class dropdown.
WHY = re.compile(r"(?:```|:::)\{dropdown\}\s+Why\b|(?:```|:::)\{admonition\}\s+Why\s*\n(?::\w+:.*\n)*?:class:\s*dropdown")


def _is_master(nb) -> bool:
    return any(c.cell_type == "raw" and c.source.lstrip().upper().startswith("# ASSIGNMENT CONFIG")
               for c in nb.cells)


def _md(nb) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]


def _prompt(cell) -> str:
    return str(((cell.metadata.get("mystnb") or {}).get("code_prompt_show")) or "")


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags") or [])


@pytest.fixture(scope="module", params=CHAPTERS, ids=lambda p: _rel(p))
def chapter(request):
    return request.param, nbformat.read(request.param, as_version=4)


def test_title_and_learning_objectives(chapter):
    path, nb = chapter
    md = _md(nb)
    assert md and re.match(r"#\s+\S", md[0][1].lstrip()), f"{_rel(path)}: the first cell must be the title '# ...'"
    assert any(re.search(r"(?:```|:::)\{admonition\}\s+Learning objectives", s) for _, s in md), \
        f"{_rel(path)}: no ```{{admonition}} Learning objectives block"


def test_predict_then_look(chapter):
    """Every prediction box is a tip, and each is answered by a "What you should have seen"."""
    path, nb = chapter
    events = []
    for i, src in _md(nb):
        for m in re.finditer(r"(?:```|:::)\{admonition\}\s+Predict, then look\s*\n((?::\w+:.*\n)*)", src):
            if not re.search(r":class:\s*tip", m.group(1)):
                pytest.fail(f"{_rel(path)} cell {i}: the 'Predict, then look' box needs ':class: tip'")
            events.append((i, m.start(), "predict"))
        for m in re.finditer(r"(^#+\s*What you should have seen|\*\*What you should have seen|"
                             r"\{admonition\}\s+What you should have seen)", src, re.M):
            events.append((i, m.start(), "seen"))
    events = [(kind, i) for i, _, kind in sorted(events)]
    predicts = [i for kind, i in events if kind == "predict"]
    assert predicts, f"{_rel(path)}: no ```{{admonition}} Predict, then look box before a figure"
    pending = None
    for kind, i in events:
        if kind == "predict":
            assert pending is None, (f"{_rel(path)} cell {pending}: prediction never answered by a "
                                     "'What you should have seen' before the next one")
            pending = i
        else:
            pending = None
    assert pending is None, f"{_rel(path)} cell {pending}: prediction never answered by 'What you should have seen'"


def test_checking_the_claims(chapter):
    """A ``## Checking the claims`` section with assert cells, each introduced by a sentence."""
    path, nb = chapter
    start = next((i for i, s in _md(nb) if re.search(r"^##\s+Checking the claims\s*$", s, re.M)), None)
    assert start is not None, f"{_rel(path)}: no '## Checking the claims' section"
    asserts = 0
    for j in range(start + 1, len(nb.cells)):
        cell = nb.cells[j]
        if cell.cell_type == "markdown" and re.search(r"^##\s", cell.source, re.M):
            break
        if cell.cell_type == "code" and re.search(r"^\s*assert\b", cell.source, re.M) \
                and "remove-cell" not in _tags(cell):
            asserts += 1
            prev = nb.cells[j - 1]
            assert prev.cell_type == "markdown" and len(prev.source.strip()) > 20, \
                f"{_rel(path)} cell {j}: an assert cell in 'Checking the claims' with no sentence before it"
    assert asserts, f"{_rel(path)}: 'Checking the claims' holds no assert cell"


def test_exercises_have_why(chapter):
    path, nb = chapter
    if not _is_master(nb):
        return
    assert any(re.search(r"^##\s+Exercises\s*$", s, re.M) for _, s in _md(nb)), \
        f"{_rel(path)}: an otter master with no '## Exercises' section"
    questions, current, has_why = [], None, False
    for cell in nb.cells:
        src = cell.source.strip()
        if cell.cell_type == "raw" and re.match(r"#\s*BEGIN QUESTION", src):
            current = re.search(r"name:\s*(\S+)", src)
            current, has_why = (current.group(1) if current else "?"), False
        elif cell.cell_type == "raw" and re.match(r"#\s*END QUESTION", src):
            questions.append((current, has_why))
            current = None
        elif cell.cell_type == "markdown" and WHY.search(src):
            if current is not None:
                has_why = True
            elif questions:
                questions[-1] = (questions[-1][0], True)   # the Why right after END QUESTION
    missing = [q for q, why in questions if not why]
    assert questions, f"{_rel(path)}: an otter master with no question"
    assert not missing, f"{_rel(path)}: exercises with no ```{{dropdown}} Why block: {missing}"


def test_summary_and_next(chapter):
    """``## Summary``, then a last line ``**Next:** [Title](path.ipynb)`` that follows the TOC."""
    path, nb = chapter
    md = _md(nb)
    assert any(re.search(r"^##\s+Summary\s*$", s, re.M) for _, s in md), f"{_rel(path)}: no '## Summary'"
    last = [line.strip() for line in nb.cells[-1].source.strip().splitlines() if line.strip()]
    assert nb.cells[-1].cell_type == "markdown" and last and last[-1].startswith("**Next:**"), \
        f"{_rel(path)}: the last line must be '**Next:** [Title](relative/path.ipynb)'"
    line = last[-1]
    order = [d for d in _toc_order() if (ROOT / (d + ".ipynb")).is_file() or (ROOT / (d + ".md")).is_file()]
    doc = str(path.relative_to(ROOT).with_suffix(""))
    chapters_in_toc = [d for d in order if (ROOT / (d + ".ipynb")).is_file()]
    following = None
    if doc in chapters_in_toc and chapters_in_toc.index(doc) + 1 < len(chapters_in_toc):
        following = chapters_in_toc[chapters_in_toc.index(doc) + 1]
    m = re.match(r"\*\*Next:\*\*\s*\[([^\]]+)\]\(([^)#]+)(#[^)]*)?\)", line)
    if m is None:
        assert "TBD-by-lead" in line and following is None, \
            f"{_rel(path)}: 'Next:' must link the next chapter ({following}), got {line!r}"
        return
    target = (path.parent / m.group(2)).resolve()
    assert target.is_file(), f"{_rel(path)}: 'Next:' points to a missing file {m.group(2)}"
    if following is not None:
        assert str(target.relative_to(ROOT).with_suffix("")) == following, \
            f"{_rel(path)}: 'Next:' points to {m.group(2)}, but the table of contents continues with {following}"
        title = next((line for c in nbformat.read(target, as_version=4).cells if c.cell_type == "markdown"
                      for line in c.source.splitlines()
                      if line.startswith("# ")), "")[2:].strip() if target.suffix == ".ipynb" else None
        if title:
            assert m.group(1).strip() == title, \
                f"{_rel(path)}: 'Next:' says {m.group(1)!r}; the chapter's title is {title!r}"


def test_hidden_code_labels(chapter):
    """Hidden code folds under "Show the plotting code", "Show how it is computed" or (solutions
    only) "Show a solution";
    plotting code is folded or in the lab."""
    path, nb = chapter
    bad = []
    inside_solution = False
    in_exercises = False     # a chapter without otter exercises may fold a solution in its Exercise section
    master = _is_master(nb)
    for i, cell in enumerate(nb.cells):
        src = cell.source.strip()
        if cell.cell_type == "markdown":
            for heading in re.findall(r"^##\s+(.*)$", src, re.M):
                in_exercises = heading.strip().lower().startswith("exercise")
        if cell.cell_type == "raw":
            if re.match(r"#\s*BEGIN SOLUTION", src):
                inside_solution = True
            elif re.match(r"#\s*END SOLUTION", src):
                inside_solution = False
            continue
        if cell.cell_type != "code":
            continue
        tags, label = _tags(cell), _prompt(cell)
        hidden = bool(tags & {"hide-input", "hide-cell"})
        if inside_solution:
            if label != SOLUTION_LABEL or not hidden:
                bad.append(f"cell {i}: a solution must be tagged hide-input with {SOLUTION_LABEL!r}")
            continue
        if label == SOLUTION_LABEL and not master and in_exercises and hidden:
            continue
        if label == SOLUTION_LABEL:
            bad.append(f"cell {i}: {SOLUTION_LABEL!r} on a cell that is not a solution")
        elif hidden and label not in (PLOT_LABEL, COMPUTE_LABEL, CHECK_LABEL):
            bad.append(f"cell {i}: hidden code must fold under {PLOT_LABEL!r}, {COMPUTE_LABEL!r} or {CHECK_LABEL!r} "
                       f"(got {label or 'the default'!r})")
        if not hidden and "remove-cell" not in tags and "remove-input" not in tags:
            calls = len(re.findall(r"\bgo\.(Scatter|Bar|Heatmap|Contour|Histogram|Surface|Scattergl)\(|"
                                   r"\.add_(trace|shape|annotation|hline|vline)\(|\.update_(layout|xaxes|yaxes)\(",
                                   src))
            if calls > MAX_VISIBLE_PLOT_CALLS:
                bad.append(f"cell {i}: {calls} plotly calls in a visible cell: move the plotting code to "
                           f"dpclip_lab.plotting or fold it under {PLOT_LABEL!r}")
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


def test_no_raw_numbers_in_glue_prose(chapter):
    """Glued prose shows math as math: no raw caret powers or ``-0.0000`` in Markdown text."""
    path, nb = chapter
    bad = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for m in re.finditer(r"Markdown\(\s*f?[\"']{1,3}(.*?)[\"']{1,3}\s*\)", cell.source, re.S):
            text = re.sub(r"\$[^$]*\$", "", m.group(1))   # math is fine
            if re.search(r"\w\^[\w({]", text):
                bad.append(f"cell {i}: raw caret outside $...$ in Markdown output: {m.group(0)[:80]!r}")
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


def test_notebooks_are_committed_without_outputs(chapter):
    path, nb = chapter
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{_rel(path)}: cells with outputs or execution counts: {dirty[:10]}"


#: ``**In the lab:**`` names the lab's functions and classes with roles that resolve into the API page.
LAB_ROLE = re.compile(r"\{(func|class|mod|meth|data|attr)\}`(?:[^`<]*<)?~?(dpclip_lab[\w.]*)>?`")
API_DOC = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")


def _api_modules() -> set[str]:
    """Modules that the API reference documents (``automodule`` or ``py:module``), on its index
    ``book/api/index.md`` or one of its pages ``book/api/*.md``."""
    text = "\n".join(p.read_text() for p in sorted((BOOK / "api").glob("*.md")))
    return set(re.findall(r"^\.\.\s+(?:automodule|py:module)::\s+(\S+)", text, re.M))


def _resolves(name: str) -> bool:
    import importlib

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
            return False
        return True
    return False


def test_summary_links_the_lab(chapter):
    """The Summary holds a paragraph ``**In the lab:** {func}`dpclip_lab....`, ... — see the
    {doc}`API reference <../api/index>`.`` naming what the chapter used (house rule)."""
    path, nb = chapter
    cells = [c.source for c in nb.cells if c.cell_type == "markdown"]
    start = next((i for i, s in enumerate(cells) if re.search(r"^##\s+Summary\s*$", s, re.M)), None)
    assert start is not None, f"{_rel(path)}: no '## Summary'"
    summary = "\n".join([cells[start][re.search(r"^##\s+Summary\s*$", cells[start], re.M).start():]] + cells[start + 1:])
    paras = [p for p in re.split(r"\n\s*\n", summary) if p.lstrip().startswith("**In the lab:**")]
    assert paras, f"{_rel(path)}: the Summary has no paragraph starting '**In the lab:**'"
    para = paras[0]
    roles = [name for _, name in LAB_ROLE.findall(para)]
    assert roles, f"{_rel(path)}: '**In the lab:**' names no {{func}}/{{class}}/{{mod}} role of dpclip_lab"
    documented = _api_modules()
    bad = [n for n in roles if not _resolves(n)]
    assert not bad, f"{_rel(path)}: '**In the lab:**' names what the lab does not have: {bad}"
    undocumented = [n for n in roles if not any(n == m or n.startswith(m + ".") for m in documented)]
    assert not undocumented, (f"{_rel(path)}: '**In the lab:**' names objects in no module of "
                              f"book/api/ (the link would not resolve): {undocumented}")
    docs = [(path.parent / d).resolve() for d in API_DOC.findall(para)]
    assert (BOOK / "api" / "index").resolve() in docs, \
        f"{_rel(path)}: '**In the lab:**' must link the API page, e.g. {{doc}}`API reference <../api/index>`"


_LIST_LINE = re.compile(r"^\s{0,3}(?:[-+*]|\d+[.)])\s")


def _math_split_by_a_list(text: str) -> list[str]:
    """Lines that start a Markdown list item (``+ x``, ``- x``, ``1. x``) while a ``$...$``
    formula of the same paragraph is still open: Markdown starts a list there, the formula is cut
    in two, and MathJax pairs the wrong dollars (a whole paragraph of prose set as math)."""
    hits, open_dollars = [], 0
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("```", ":::", "$$")):
            open_dollars = 0
            continue
        if open_dollars % 2 and _LIST_LINE.match(line):
            hits.append(line.strip()[:80])
        open_dollars += len(re.findall(r"(?<![\\$])\$(?!\$)", line))
    return hits


def test_no_list_marker_cuts_a_formula(chapter):
    _, nb = chapter
    hits = [f"cell {i}: {h}" for i, src in _md(nb) for h in _math_split_by_a_list(src)]
    assert not hits, "a line inside a $...$ formula starts with a list marker (move it to the line before):\n" \
        + "\n".join(hits)


def test_the_list_marker_check_can_fail():
    assert _math_split_by_a_list("a $x\n+ y$ b") == ["+ y$ b"]
    assert _math_split_by_a_list("a $x$ b\n+ item") == []
    assert _math_split_by_a_list("a $x +\ny$ b") == []


# --------------------------------------------------------------------------- issue #28: what the page shows
# Items 10, 12, 13 and 14 of issue #28, checked on the notebook sources: bookkeeping code off the
# page, prose written for a reader of the book, theorem boxes titled by the paper's own numbers, no
# repeated or contradictory scaffolding, and "run this live" cells that show one line.

_OFF_PAGE = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
#: A visible code cell longer than this (lines, as the page shows them) is plumbing: it belongs in the lab,
#: behind ``remove-input``, or folded. "Checking the claims" too: a long block of asserts is split
#: into one cell per claim, each after the sentence it checks (#28's fourth reading: 51 lines).
MAX_VISIBLE_CODE_LINES = 30
_GLUE_CALL = re.compile(r"(?<![\w.])glue\(")
_LIVE_CALL = re.compile(r"(?<![\w])(?:\w+\.)?live\(")


def _walk(nb):
    """(index, cell, current ``##`` section in lower case, inside an otter solution)."""
    section, solution = "", False
    for i, cell in enumerate(nb.cells):
        src = cell.source.strip()
        if cell.cell_type == "markdown":
            heads = re.findall(r"^##\s+(.*)$", src, re.M)
            if heads:
                section = heads[-1].strip().lower()
        elif cell.cell_type == "raw":
            if re.match(r"#\s*BEGIN SOLUTION", src):
                solution = True
            elif re.match(r"#\s*END SOLUTION", src):
                solution = False
        yield i, cell, section, solution


def _visible_code(nb):
    """Code cells whose input the page shows (not folded, not removed, not a solution)."""
    for i, cell, section, solution in _walk(nb):
        if cell.cell_type == "code" and not solution and not (_tags(cell) & _OFF_PAGE):
            yield i, cell, section


_REMOVED = {"remove-input", "remove-cell"}


def _tree(source: str):
    """A code cell's syntax tree (its ``%`` and ``!`` lines left out), or None where it does not parse."""
    import ast
    import warnings

    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        with warnings.catch_warnings():   # a cell's regex "\s" in a plain string: the chapter's business
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except SyntaxError:
        return None


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell defines, names it reads) — module level and inside functions alike."""
    import ast

    tree = _tree(source)
    if tree is None:
        return set(), set()
    defined, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return defined, read


def _functions(source: str) -> set[str]:
    """Names of the functions and classes a cell defines at its top level."""
    import ast

    tree = _tree(source)
    return set() if tree is None else \
        {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def names_from_removed_cells(nb) -> list[str]:
    """Code a reader sees unfolded that reads names only code off the page defines: a removed cell
    (``remove-input``, ``remove-cell``: "assert kink_gap < 1e-9" where no page shows what ``kink_gap``
    is) or a folded one (``hide-input``: ``NAMES`` defined under "Show the plotting code", read by a
    visible cell; the reader who does not unfold sees an undefined name)."""
    unseen_def, shown, bad = {}, set(), []
    for i, cell, _section, solution in _walk(nb):
        if cell.cell_type != "code":
            continue
        defined, read = _names(cell.source)
        tags = _tags(cell)
        folded = bool(tags & {"hide-input", "hide-cell"}) or solution
        if tags & _REMOVED or folded:
            how = "removed" if tags & _REMOVED else "folded"
            # a function folded under its label reads like a call into the lab: its name says what it
            # does and the fold above shows how; data (NAMES, emp, fixed) computed out of sight does not
            named = set() if how == "removed" else _functions(cell.source)
            for name in defined - shown - named:
                unseen_def.setdefault(name, how)
            continue
        unseen = sorted((read - defined) & set(unseen_def))
        if unseen:
            where = ", ".join(f"{n} ({unseen_def[n]})" for n in unseen)
            bad.append(f"cell {i} reads {where}, which only cells off the page define: show the computation, "
                       f"or fold this cell too (hide-input, {COMPUTE_LABEL!r} or {CHECK_LABEL!r})")
        shown |= defined
        for name in defined:
            unseen_def.pop(name, None)
    return bad


def test_visible_code_reads_only_what_the_page_shows(chapter):
    """A third reading of #28: visible asserts read names (``kink_gap``, ``e_peak``) computed in cells
    the page removed; the reader could not see what was checked. Such a computation is folded."""
    path, nb = chapter
    bad = names_from_removed_cells(nb)
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


def test_the_removed_names_check_can_fail():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("kink_gap = 0.0\nglue('g', kink_gap)", metadata={"tags": ["remove-input"]}),
        nbformat.v4.new_code_cell("e_peak = 1.0", metadata={"tags": ["hide-input"]}),
        nbformat.v4.new_code_cell("assert kink_gap < 1e-9 and e_peak > 0"),
        nbformat.v4.new_code_cell("kink_gap = 2.0\nassert kink_gap > 1")])
    bad = names_from_removed_cells(nb)
    assert len(bad) == 1 and bad[0].startswith("cell 2 reads e_peak (folded), kink_gap (removed)"), bad


def test_no_bookkeeping_on_the_page(chapter):
    """Issue #28, item 10: ``glue(...)`` blocks and long plumbing cells are not on the page."""
    path, nb = chapter
    bad = []
    for i, cell, _section in _visible_code(nb):
        if _GLUE_CALL.search(cell.source):
            bad.append(f"cell {i}: glue(...) calls on the page — tag the cell 'remove-input' (its outputs and "
                       "glued values stay), or move the glue calls to a cell of their own that is")
        lines = cell.source.strip().splitlines()      # as the page shows them, blank lines included
        if len(lines) > MAX_VISIBLE_CODE_LINES:
            bad.append(f"cell {i}: {len(lines)} visible lines of code (at most {MAX_VISIBLE_CODE_LINES}): keep the "
                       "call that teaches visible and take the plumbing off the page ('remove-input') or into the lab")
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


#: What a reader of the book cannot see: the repository's tests and README, analyses that are not
#: in the book, the text copy of a paper the book was written from; chapters have names, not numbers.
_UNSEEN = [
    (re.compile(r"\btests? (?:of|in) this chapter\b", re.I), "the chapter's tests"),
    (re.compile(r"\bthe lab's tests\b", re.I), "the lab's tests"),
    (re.compile(r"\btests/"), "a file of the repository's tests"),
    (re.compile(r"\bREADME\b"), "the README"),
    (re.compile(r"privacy-safety analysis", re.I), "an analysis that is not in the book"),
    (re.compile(r"\bchapters? \d+\b", re.I), "a chapter number (name the chapter and link it with {doc})"),
    (re.compile(r"\bour copy\b", re.I), "our copy of a paper"),
    (re.compile(r"\bPDF\b|\bgarbled\b", re.I), "the state of a copy of the paper"),
    (re.compile(r"\bthe tests (?:check|show|verify)\b", re.I), "tests the reader does not see"),
]


def _page_text(nb):
    """(where, text) of everything a reader reads: Markdown cells, Markdown(...) outputs built in
    code, and the comments of visible code cells."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            yield f"cell {i}", cell.source
        elif cell.cell_type == "code":
            for m in re.finditer(r"Markdown\(\s*f?[\"']{1,3}(.*?)[\"']{1,3}\s*\)", cell.source, re.S):
                yield f"cell {i} (Markdown output)", m.group(1)
    for i, cell, _ in _visible_code(nb):
        comments = "\n".join(m.group(1) for m in re.finditer(r"#(.*)$", cell.source, re.M))
        yield f"cell {i} (a comment on the page)", comments


def test_prose_is_written_for_a_reader_of_the_book(chapter):
    """Issue #28, item 10: no reference to what the reader of the book cannot see."""
    path, nb = chapter
    bad = [f"{where}: {what}: {m.group(0)!r}" for where, text in _page_text(nb)
           for pattern, what in _UNSEEN for m in pattern.finditer(text)]
    assert not bad, f"{_rel(path)}: the page refers to what its reader cannot see:\n" + "\n".join(bad)


_PRF_BOX = re.compile(r"^[ \t]*(?P<fence>`{3,}|:{3,})\{prf:(?P<kind>\w+)\}[ \t]*(?P<title>[^\n]*)\n"
                      r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)", re.M)
_PRF_REF = re.compile(r"\{prf:ref\}`([^`]*)`")
#: The paper's own name for what it numbers, in full.
_PAPER_KINDS = ("Theorem", "Theorems", "Lemma", "Corollary", "Definition", "Proposition", "Example", "Algorithm",
                "Remark", "Assumption", "Appendix", "Section", "Equation", "Figure")
_CITED_TITLE = re.compile(r"^\{cite:t\}`[\w-]+`, (?:%s) (?:[A-Z]\.?)?\d" % "|".join(_PAPER_KINDS))


def _prf_boxes(nb):
    for i, src in _md(nb):
        for m in _PRF_BOX.finditer(src):
            if m.group("kind") != "proof":
                yield i, m


def _title_problems(title: str, options: str) -> list[str]:
    problems = []
    if not re.search(r"^\s*:nonumber:", options, re.M):
        problems.append("no ':nonumber:' (boxes carry the paper's number, not a book-wide counter)")
    text = re.sub(r"\$[^$]*\$", "", title)            # math may hold parentheses
    if re.search(r"[()]", text):
        problems.append("parentheses in the title (the box already sets its title in parentheses)")
    if "{cite" in title and not _CITED_TITLE.match(title.strip()):
        problems.append("a paper statement is titled '{cite:t}`key`, Theorem 6' (the paper's own kind and "
                        f"number: {', '.join(_PAPER_KINDS)})")
    if re.search(r"\b(?:19|20)\d\d\b", re.sub(r"\{cite(?::\w+)?\}`[^`]*`", "", text)):
        problems.append("a typed year: cite the paper with {cite:t}")
    return problems


def test_proof_boxes_are_titled_by_the_papers_numbers(chapter):
    """Issue #28, item 12: every sphinx-proof box is unnumbered and a paper's statement is titled
    '{cite:t}`key`, Theorem 6' (one citation form; the year comes from references.bib)."""
    path, nb = chapter
    bad = [f"cell {i}: {{prf:{m.group('kind')}}} {m.group('title')!r}: {p}"
           for i, m in _prf_boxes(nb) for p in _title_problems(m.group("title"), m.group("options"))]
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


def test_proof_references_resolve_with_text():
    """Every {prf:ref} names a box of the book and carries its own link text: a reference to an
    unnumbered box without text renders as a bare "Theorem " (sphinx-proof 0.4)."""
    labels, refs = set(), []
    for path in CHAPTERS:
        nb = nbformat.read(path, as_version=4)
        for _, m in _prf_boxes(nb):
            labels.update(re.findall(r":label:\s*(\S+)", m.group("options")))
        refs += [(path, i, r) for i, src in _md(nb) for r in _PRF_REF.findall(src)]
    for md in BOOK.rglob("*.md"):
        refs += [(md, 0, r) for r in _PRF_REF.findall(md.read_text())]
    bad = []
    for path, i, ref in refs:
        m = re.fullmatch(r"\s*(.*?\S)\s*<([^<>]+)>\s*", ref)
        if m is None:
            bad.append(f"{_rel(path)} cell {i}: {{prf:ref}}`{ref}` has no link text ('Theorem 6 <label>')")
        elif m.group(2) not in labels:
            bad.append(f"{_rel(path)} cell {i}: {{prf:ref}}`{ref}` names no box of the book")
    assert not bad, "\n".join(bad)


def _bib_years() -> dict[str, set[int]]:
    """First author's surname -> the years of the references.bib entries that author leads."""
    years: dict[str, set[int]] = {}
    for entry in re.split(r"\n@", (ROOT / "references.bib").read_text()):
        authors = re.search(r"\bauthor\s*=\s*\{(.*?)\}\s*,?\s*\n\s*\w+\s*=", entry, re.S)
        year = re.search(r"\byear\s*=\s*\{(\d{4})\}", entry)
        if authors and year:
            first = re.split(r"\s+and\s+", authors.group(1))[0]
            surname = re.sub(r"[{}\\'\"`]", "", first.split(",")[0]).strip()
            years.setdefault(surname, set()).add(int(year.group(1)))
    return years


def test_typed_citations_match_the_bibliography():
    """Issue #28, item 12: a paper cited by hand ("Song, Thakkar, Thakurta (2021)") carries the year
    of references.bib (the entries its first author leads), so that the same paper never appears
    with two years."""
    years = _bib_years()
    names = "|".join(sorted(map(re.escape, years), key=len, reverse=True))
    typed = re.compile(r"\b(%s)\b((?:,? (?:and |& )?[A-Z][\w'-]+)*(?: et al\.)?),? \(?((?:19|20)\d\d)\b" % names)
    bad = []
    for path in CHAPTERS:
        nb = nbformat.read(path, as_version=4)
        for where, text in _page_text(nb):
            text = re.sub(r"\{cite(?::\w+)?\}`[^`]*`", "", text)
            for m in typed.finditer(text):
                if int(m.group(3)) not in years[m.group(1)]:
                    bad.append(f"{_rel(path)} {where}: {m.group(0)!r}, but references.bib has "
                               f"{m.group(1)} in {sorted(years[m.group(1)])}")
    assert not bad, "\n".join(bad)


def test_one_next_line(chapter):
    """Issue #28, item 13: one '**Next:**' line per chapter (the one that follows the TOC)."""
    path, nb = chapter
    lines = [f"cell {i}: {line.strip()[:70]}" for i, src in _md(nb) for line in src.splitlines()
             if line.strip().startswith("**Next:**")]
    assert len(lines) <= 1, f"{_rel(path)}: more than one 'Next:' line:\n" + "\n".join(lines)


#: Said once, in the intro's classroom note and the box the build puts under each "Exercises".
_INSTRUCTORS_ONLY = re.compile(r"make assignments|classroom copy|student copy|hidden for grading|autograder", re.I)


def test_exercises_do_not_repeat_the_classroom_note(chapter):
    """Issue #28, item 13: the instructors' paragraph about student copies and hidden tests is said
    once (book/intro.md, and the 'Doing the exercises' box the build injects), not in every chapter."""
    path, nb = chapter
    bad = [f"cell {i}: {m.group(0)!r}" for i, src in _md(nb) for m in _INSTRUCTORS_ONLY.finditer(src)]
    assert not bad, f"{_rel(path)}: classroom note repeated in the chapter:\n" + "\n".join(bad)


def test_doc_links_name_their_target(chapter):
    """Issue #28, item 13: 'see the {doc}`../intro`' renders as 'see the Clipping in Private
    Optimization'; a link that follows 'the' says in its own text what it links."""
    path, nb = chapter
    bad = [f"cell {i}: {m.group(0)!r}" for i, src in _md(nb)
           for m in re.finditer(r"\bthe \{doc\}`[^`<]*`", src)]
    assert not bad, f"{_rel(path)}: a bare {{doc}} link read as a title after 'the':\n" + "\n".join(bad)


_PREDICTION = re.compile(r"(?:```|:::)\{admonition\}\s+Predict\b|^\*\*Predict\b|^Predict first\b", re.M)
_ANSWER = re.compile(r"(^#+\s*What you should have seen|\*\*What you should have seen|"
                     r"\{admonition\}\s+What you should have seen|^#{1,6}\s)", re.M)


def test_no_prediction_prompts_back_to_back(chapter):
    """Issue #28, item 13: two prediction prompts with no answer and no new section between them
    ask the reader to predict twice before looking once."""
    path, nb = chapter
    events = []
    for i, src in _md(nb):
        events += [(i, m.start(), "predict") for m in _PREDICTION.finditer(src)]
        events += [(i, m.start(), "answer") for m in _ANSWER.finditer(src)]
    events.sort()
    bad, pending = [], None
    for i, _, kind in events:
        if kind == "predict" and pending is not None:
            bad.append(f"cells {pending} and {i}")
        pending = i if kind == "predict" else None
    assert not bad, f"{_rel(path)}: prediction prompts back to back (merge them): {bad}"


#: Abbreviations a chapter defines before it uses them (where the first use is, the paragraph or an
#: earlier one spells them out).
_ABBREVIATIONS = {
    "RDP": r"R[ée]nyi",
    "PLD": r"privacy[-\s]loss[-\s]distribution",
    "GLP": r"generalized\s+linear\s+problem",
    "LDP": r"local(?:ly)?\s+(?:differential(?:ly)?\s+)?privacy|locally\s+private|local\s+DP",
}


def _reader_text(nb) -> str:
    """The chapter's prose in reading order: Markdown cells, and the string literals of code cells
    (table headers, labels and sentences that the outputs show), code spans left out."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(re.sub(r"`[^`]*`", "", cell.source))
        elif cell.cell_type == "code" and "remove-cell" not in _tags(cell):
            parts += [m.group(2) for m in re.finditer(r"([\"'])((?:(?!\1).)*)\1", cell.source)]
    return "\n\n".join(parts)


def test_abbreviations_are_defined_before_use(chapter):
    """Issue #28, item 13: RDP, PLD, GLP, LDP are spelled out where a chapter first uses them."""
    path, nb = chapter
    prose = _reader_text(nb)
    bad = []
    for abbr, spelled in _ABBREVIATIONS.items():
        m = re.search(r"(?<![\w-])%ss?(?![\w-])" % abbr, prose)
        if m is None:
            continue
        end = prose.find("\n\n", m.end())
        if not re.search(spelled, prose[: end if end >= 0 else len(prose)], re.I):
            bad.append(f"{abbr} is used before it is spelled out: ...{prose[max(0, m.start() - 60):m.end() + 20]!r}")
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


def test_live_cells_show_one_line(chapter):
    """Issue #28, item 14: a cell that calls ``live(...)`` does nothing in the HTML book but show the
    'run this live' box; its code stays in the notebook and off the page ('remove-input'): the box
    shows the one line that the cell runs and the link."""
    path, nb = chapter
    bad = [f"cell {i}: a live(...) cell with {len(cell.source.strip().splitlines())} lines on the page: "
           "tag it 'remove-input'"
           for i, cell in enumerate(nb.cells)
           if cell.cell_type == "code" and _LIVE_CALL.search(cell.source)
           and len(cell.source.strip().splitlines()) > 1 and not (_tags(cell) & {"remove-input", "remove-cell"})]
    assert not bad, f"{_rel(path)}:\n" + "\n".join(bad)


def test_live_placeholder_shows_one_line_of_code_and_the_link(monkeypatch):
    import ipywidgets as widgets
    import plotly.graph_objects as go

    from dpclip_lab import plotting as dp

    monkeypatch.delenv(dp.HEADLESS_ENV, raising=False)
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")

    def live_demo(C, k):
        return go.Figure(go.Scatter(y=[C, k]))

    for fn, expected in ((live_demo, "dp.live(live_demo, C=…, k=…)"),
                         (lambda C, k: live_demo(C, k), "dp.live(lambda C, k: …, C=…, k=…)")):
        html = dp.live(fn, C=widgets.FloatSlider(value=1.0, min=0.1, max=2.0, description="clip norm C"),
                       k=(0, 10))._repr_html_()
        codes = re.findall(r"<code>(.*?)</code>", html, re.S)
        assert expected in [c.replace("&#x27;", "'") for c in codes], (expected, codes)
        assert all("\n" not in c for c in codes)
        assert "Binder" in html and dp.LIVE_PLACEHOLDER_CLASS in html


def test_the_unseen_reference_check_can_fail():
    """Each pattern of :data:`_UNSEEN` finds the kind of sentence a reader met (#28, item 10)."""
    examples = ["the tests of this chapter show", "the lab's tests", "see tests/test_x.py", "see the README",
                "the privacy-safety analysis", "as in chapter 2", "our copy of the paper", "the PDF is garbled",
                "the tests check it against the simplex"]
    for pattern, what in _UNSEEN:
        assert any(pattern.search(e) for e in examples), what
    assert not any(p.search("the test accuracy, a chapter about tests, the paper's Figure 2") for p, _ in _UNSEEN)
