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
    """Hidden code folds under "Show the plotting code" or (solutions only) "Show a solution";
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
        elif hidden and label != PLOT_LABEL:
            bad.append(f"cell {i}: hidden code must fold under {PLOT_LABEL!r} (got {label or 'the default'!r})")
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
    """Modules that ``book/api/index.md`` documents (``automodule`` or ``py:module``)."""
    text = (BOOK / "api" / "index.md").read_text()
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
                              f"book/api/index.md (the link would not resolve): {undocumented}")
    docs = [(path.parent / d).resolve() for d in API_DOC.findall(para)]
    assert (BOOK / "api" / "index").resolve() in docs, \
        f"{_rel(path)}: '**In the lab:**' must link the API page, e.g. {{doc}}`API reference <../api/index>`"
