"""The chapters as a reader opens them in Jupyter (issue #32, items 4, 5 and 7).

What a reader opens from the book — the page's download button, the Binder button, ``make
reader`` — is a **reader copy** (``_ext/reader_copies.py``), never the otter master: the student
copy of a chapter with exercises, with the book's numbers, author-year citations and
cross-references written into the prose, which JupyterLab (even with ``jupyterlab-myst``)
cannot render from the roles.

* The rendering, fast: every role the book uses becomes the text the HTML book shows (the
  citations checked against the built book's own), on every chapter of the table of contents;
  a raw master fails the check; the build's downloads and the saved numbers (Binder's) agree
  with the last build, where there is one.
* ``tools/reader.py`` (what Binder's ``postBuild`` and ``make reader`` run) on one chapter.
* A real JupyterLab (this environment's, as ``make venv`` set it up: ``jupyterlab-myst``, and
  jupytext pinned to a release whose Lab extension fits) serving that reader copy, driven by Debian's chromium
  with Playwright: no console error while the notebook loads and renders, and the rendered
  Markdown shows the numbers and the citations — no "Citation Not Found", no raw role.

Without chromium or JupyterLab the browser test skips, except under CI (``CI`` set), where it
fails.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
GLUE_DIR = BUILD / "jupyter_execute"


_spec = importlib.util.spec_from_file_location("dpclip_reader_tool", ROOT / "tools" / "reader.py")
reader_tool = sys.modules.setdefault("dpclip_reader_tool", importlib.util.module_from_spec(_spec))
if not hasattr(reader_tool, "rc"):
    _spec.loader.exec_module(reader_tool)
rc = reader_tool.rc        # _ext/reader_copies.py, as tools/reader.py loads it (its _load)
TOC_NOTEBOOKS = rc.toc_notebooks(ROOT)
#: The chapter opened in JupyterLab: the smallest master with glued numbers, both kinds of citation
#: and a {doc} link.
LAB_CHAPTER = ROOT / "book" / "part1" / "no_gradient_field.ipynb"


def _complete_build() -> dict:
    """The manifest of the last *complete* book build (``_ext/classroom.py`` writes it when every
    reader copy is written and removes it when a build starts); skip without one."""
    manifest = BUILD / "reader-copies.json"
    if not manifest.is_file():
        pytest.skip("no complete book build with reader copies in _build (make book), or a build is running")
    return json.loads(manifest.read_text())


def _doc(path: Path) -> str:
    return str(path.relative_to(ROOT).with_suffix("")).replace("\\", "/")


def _lookup(doc: str):
    glue_json = GLUE_DIR / f"{doc}.glue.json"
    glue = json.loads(glue_json.read_text()) if glue_json.is_file() else {}
    return rc.glue_lookup(glue, rc.load_numbers().get(doc))


@pytest.fixture(scope="module")
def bib():
    return rc.book_bibliography(ROOT)


@pytest.fixture(scope="module")
def index():
    return rc.BookIndex.from_toc(ROOT)


# --------------------------------------------------------------------------- the rendering

def test_roles_become_the_text_the_html_book_shows(bib, index):
    glue = {"n": {"data": {"text/plain": "426"}}, "acc": {"data": {"text/plain": "0.94412"}}}
    source = ("{cite:t}`song2021evading` and {cite}`koskela2020computing,gopi2021numerical`; "
              "{cite:p}`dwork2014algorithmic`. n = {glue:text}`n`, {glue:text}`acc:.1%`, {glue}`n`. "
              "See {doc}`../foundations/accounting`, the {doc}`API reference <../api/index>`, "
              "{prf:ref}`the Gaussian mechanism <thm-gaussian-knob>`, {prf:ref}`thm-gaussian-knob`; "
              "{func}`dpclip_lab.optima.minimize`, {class}`~dpclip_lab.losses.Squared`, "
              "{mod}`dpclip_lab.accountants`. [API](../api/index.md), [next](../part2/pre_clip_noise.ipynb).")
    cited = []
    out = rc.render_markdown(source, "book/part1/huberization", lookup=rc.glue_lookup(glue), bib=bib,
                             index=index, cited=cited)
    assert out == (
        r"Song et al. \[2020\] and \[Gopi et al., 2021, Koskela et al., 2020\]; \[Dwork and Roth, 2014\]. "
        "n = 426, 94.4%, 426. See [Accounting: watching ε evolve](../foundations/accounting.ipynb), the "
        "API reference, the Gaussian mechanism, Gaussian mechanism; `dpclip_lab.optima.minimize()`, "
        "`Squared`, `dpclip_lab.accountants`. API, [next](../part2/pre_clip_noise.ipynb).")
    assert sorted(set(cited)) == ["dwork2014algorithmic", "gopi2021numerical", "koskela2020computing",
                                  "song2021evading"]
    refs = bib.references_cell(cited)
    assert refs.startswith("## References\n\n- \\[Dwork & Roth 2014\\] Cynthia Dwork and Aaron Roth")
    assert refs.count("\n- ") == 4
    # a copy that lives in a folder of its own (the classroom copies) names chapters, links none
    flat = rc.render_markdown("{doc}`../foundations/accounting`", "book/part1/huberization",
                              lookup=rc.glue_lookup({}), bib=bib, index=index, links=False)
    assert flat == "Accounting: watching ε evolve"
    # without a build a number shows as its name, never as the role
    assert rc.render_markdown("{glue:text}`zz:.2f`", "book/x", lookup=rc.glue_lookup({}), bib=bib,
                              index=index) == "`zz`"


class _Citations(HTMLParser):
    """The text of each sphinxcontrib-bibtex citation on a page, with the entry it links to."""

    def __init__(self):
        super().__init__()
        self.depth, self.text, self.titles, self.found = 0, [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.depth:
            self.depth += tag == "span"
            if tag == "a" and attrs.get("title"):
                self.titles.append(attrs["title"])
        elif tag == "span" and "bibtex-citation" in (attrs.get("class") or "").split():
            self.depth, self.text, self.titles = 1, [], []

    def handle_endtag(self, tag):
        if self.depth and tag == "span":
            self.depth -= 1
            if not self.depth:
                self.found.append(("".join(self.text), list(self.titles)))

    def handle_data(self, data):
        if self.depth:
            self.text.append(data)


def test_citations_read_as_in_the_built_book(bib):
    """Every one-work citation of the built book (``_build/html``) reads the same in a reader copy:
    same names, same year, same brackets (the entry found from the link's tooltip)."""
    _complete_build()
    pages = [BUILD / "html" / f"{_doc(p)}.html" for p in TOC_NOTEBOOKS]
    pages = [p for p in pages if p.is_file()]
    by_tooltip = {bib.formatted[k].text.render_as("text").replace("\\url ", ""): k for k in bib.formatted}
    checked, bad = 0, []
    for page in pages:
        parser = _Citations()
        parser.feed(page.read_text(encoding="utf-8"))
        for text, titles in parser.found:
            keys = [by_tooltip.get(t) for t in titles]
            if len(keys) != 1 or keys[0] is None:
                continue
            role = "p" if text.startswith("[") else "t"
            ours = bib.cite(role, keys)
            checked += 1
            if ours != text:
                bad.append(f"{page.relative_to(BUILD)}: the book shows {text!r}, a reader copy {ours!r}")
    assert checked > 50, f"only {checked} citations found in the built book"
    assert not bad, "\n".join(sorted(set(bad)))


def test_a_master_is_no_reader_copy():
    """The check that every reader copy passes fails on what JupyterLab showed before: the master."""
    master = nbformat.read(LAB_CHAPTER, as_version=4)
    found = "\n".join(rc.leftover_markup(master))
    for what in ("a raw cell", "# ASSIGNMENT CONFIG", "{cite}`", "{glue:text}`", "# SOLUTION"):
        assert what in found, f"the check misses {what!r} in the master"


@pytest.mark.parametrize("path", TOC_NOTEBOOKS, ids=lambda p: _doc(p))
def test_every_chapter_renders_without_raw_markup(path, bib, index):
    """Each chapter's Markdown, rendered as its reader copy renders it: no glue, citation, {doc},
    cross-reference or Python role left, and every cited key is in the bibliography."""
    doc = _doc(path)
    nb = nbformat.read(path, as_version=4)
    lookup, cited, bad = _lookup(doc), [], []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        out = rc.render_markdown(cell.source, doc, lookup=lookup, bib=bib, index=index, cited=cited)
        bad += [f"cell {i}: {out[m.start():m.start() + 60]!r}" for m in rc.LEFTOVER.finditer(out)]
        for m in re.finditer(r"\]\(([^)#\s]+\.ipynb)\)", out):
            target = (ROOT / Path(doc).parent / m.group(1)).resolve()
            if not target.is_file():
                bad.append(f"cell {i}: a link to {m.group(1)}, which is no chapter")
    assert not bad, f"{doc}: raw markup in the reader copy:\n" + "\n".join(bad)
    keys = set(cited)
    assert all(k in bib for k in keys)


def test_the_built_downloads_are_reader_copies():
    """The page's download of every notebook chapter (``_build/html/_sources/<chapter>.ipynb``) is
    its reader copy: no master, no raw role, no otter marker, no hidden test (last build)."""
    built = _complete_build()["downloads"]
    bad = [f"{_doc(p)}: the last build wrote its page but no reader copy of it" for p in TOC_NOTEBOOKS
           if (BUILD / "html" / f"{_doc(p)}.html").is_file() and _doc(p) not in built]
    copies = {}
    for path in TOC_NOTEBOOKS:
        source = BUILD / "html" / "_sources" / f"{_doc(path)}.ipynb"
        if _doc(path) in built and source.is_file():
            copies[path] = nbformat.read(source, as_version=4)
    for path, nb in copies.items():
        if not (nb.metadata.get("dpclip") or {}).get("reader_copy"):
            bad.append(f"{_doc(path)}: the download is no reader copy")
        bad += [f"{_doc(path)}: {f}" for f in rc.leftover_markup(nb)]
        masterful = nbformat.read(path, as_version=4)
        if any(c.cell_type == "raw" for c in masterful.cells) and \
                not any('grader.check("' in c.source for c in nb.cells):
            bad.append(f"{_doc(path)}: a master whose download is not the student copy")
    assert not bad, "\n".join(bad[:40])


# --------------------------------------------------------------------------- tools/reader.py (Binder)

@pytest.fixture(scope="module")
def reader_copies(tmp_path_factory):
    """The reader copies of every chapter of the table of contents, as Binder's postBuild and
    ``make reader`` write them (``tools/reader.py``: ``otter assign`` for each chapter with
    exercises, which ``make test`` shares with tests/test_assignments.py)."""
    _WRITTEN.update(reader_tool.write_reader_copies(TOC_NOTEBOOKS, tmp_path_factory.mktemp("reader")))
    return _WRITTEN


#: The reader copies this module wrote (the browser test alone writes only its chapter's).
_WRITTEN: dict[str, dict] = {}


@pytest.fixture(scope="module")
def reader_copy(tmp_path_factory):
    """The reader copy of :data:`LAB_CHAPTER`: its path and its report."""
    if _doc(LAB_CHAPTER) not in _WRITTEN:
        _WRITTEN.update(reader_tool.write_reader_copies([LAB_CHAPTER], tmp_path_factory.mktemp("reader")))
    report = _WRITTEN[_doc(LAB_CHAPTER)]
    return Path(report["path"]), report


@pytest.mark.parametrize("path", TOC_NOTEBOOKS, ids=lambda p: _doc(p))
def test_every_chapter_gets_a_clean_reader_copy(path, reader_copies):
    """Every chapter of the table of contents gets a reader copy, in the book's layout, with no
    glue, citation, {doc} or other role, no otter marker or raw cell, no output and no hidden
    test; a chapter with exercises gets its student copy."""
    report = reader_copies[_doc(path)]
    copy = Path(report["path"])
    assert copy.as_posix().endswith(f"{_doc(path)}.ipynb") and copy.is_file()
    nb = nbformat.read(copy, as_version=4)
    assert not rc.leftover_markup(nb), rc.leftover_markup(nb)
    assert (nb.metadata.get("dpclip") or {}).get("reader_copy")
    if report["master"]:
        assert any('grader.check("' in c.source for c in nb.cells), "not the student copy"
    if report["cited"]:
        assert nb.cells[-1].source.startswith(rc.REFERENCES_HEADING)


def test_tools_reader_writes_the_student_copy_with_numbers_and_references(reader_copy, bib):
    path, report = reader_copy
    assert path == path.parent / LAB_CHAPTER.name and _doc(LAB_CHAPTER) in str(path)   # the book's layout
    nb = nbformat.read(path, as_version=4)
    assert report["master"] and not report["leftover"], report["leftover"]
    assert not rc.leftover_markup(nb)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert 'grader.check("q1")' in code, "a master's reader copy is its student copy"
    assert "Show a solution" not in json.dumps(nb.metadata) + code
    assert not report["unresolved_glue"], f"numbers missing: {report['unresolved_glue']}"
    numbers = rc.load_numbers().get(_doc(LAB_CHAPTER)) or {}
    assert numbers and all(v in prose for v in numbers.values())
    assert r"Song et al. \[2020\]" in prose and r"\[Song et al., 2020\]" in prose
    assert nb.cells[-1].source.startswith(rc.REFERENCES_HEADING)
    assert "Shuang Song, Om Thakkar, and Abhradeep Thakurta" in nb.cells[-1].source


def test_make_assignments_writes_citations_into_the_student_copy(tmp_path):
    """``make assignments`` (``tools/assign.py``) renders a student copy's citations and references as
    the course edition does: JupyterLab would show "Citation Not Found" for a ``{cite}`` role."""
    _spec = importlib.util.spec_from_file_location("dpclip_assign_tool_jl", ROOT / "tools" / "assign.py")
    assign_tool = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(assign_tool)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("As {cite:t}`song2021evading` show, and {cite:p}`dwork2014algorithmic`; "
                                      "see {doc}`../part1/huberization`."),
        nbformat.v4.new_code_cell("x = ...")])
    path = tmp_path / LAB_CHAPTER.name
    nbformat.write(nb, path)
    left = assign_tool.render_citations_into(path, LAB_CHAPTER)
    out = nbformat.read(path, as_version=4)
    prose = "\n".join(c.source for c in out.cells if c.cell_type == "markdown")
    assert not left and not rc.leftover_markup(out), left
    assert r"Song et al. \[2020\]" in prose and r"\[Dwork and Roth, 2014\]" in prose, prose
    assert out.cells[-1].source.startswith(rc.REFERENCES_HEADING)
    assert out.cells[1].source == "x = ..."   # code untouched


def test_binder_opens_reader_copies():
    """Binder runs ``postBuild`` (the reader copies into ``reader/``, as ``make reader``), and the
    book's Binder buttons and "run this live" links open ``reader/``, never ``book/``."""
    post = ROOT / "postBuild"
    assert post.is_file() and os.access(post, os.X_OK), "postBuild must be an executable at the root"
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists(), \
        "with a binder/ folder repo2docker ignores the root's environment.yml and postBuild"
    lines = [line.strip() for line in post.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert f"python tools/reader.py --out {rc.READER_DIR}" in lines
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["path_to_book"] == rc.READER_DIR
    offline = reader_tool._load("dpclip_offline_assets_lab", ROOT / "_ext" / "offline_assets.py")
    url = offline.binder_tree_url({"repository_url": config["repository"]["url"],
                                   "launch_buttons": config["launch_buttons"],
                                   "repository_branch": config["repository"]["branch"],
                                   "path_to_docs": config["repository"]["path_to_book"]})
    assert url.endswith(f"?urlpath=lab/tree/{rc.READER_DIR}/"), url
    assert f"/{rc.READER_DIR}/" in (ROOT / ".gitignore").read_text().splitlines()
    assert f"tools/reader.py --out {rc.READER_DIR}" in (ROOT / "Makefile").read_text()


def test_jupytext_is_pinned_to_a_release_built_for_this_jupyterlab():
    """jupytext (a dependency of jupyter-book and otter-grader) ships a JupyterLab extension; from
    1.19.5 on it is built for JupyterLab 4.6 and throws on every load of 4.5 ("The getter for the
    shared module is not a function"), and disabling it does not help (JupyterLab still loads its
    code). pip and Binder get the pinned release; the browser test below checks it in JupyterLab."""
    from importlib.metadata import version

    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
    assert pins.get("jupytext") == "1.19.4" and pins.get("jupyterlab", "").startswith("4.5.")
    assert re.search(r"^\s*-\s*jupytext==1\.19\.4\b", (ROOT / "environment.yml").read_text(), re.M)
    assert version("jupytext") == pins["jupytext"], "this environment is not the pinned one (make venv)"


# --------------------------------------------------------------------------- JupyterLab in a browser

def _need(what: str, msg: str):
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI is set, so this is a failure, not a skip)")
    pytest.skip(msg)


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    _need("chromium", "the JupyterLab check needs Debian's chromium: apt-get update && apt-get install -y chromium")


@pytest.fixture(scope="module")
def jupyter_lab(reader_copy, tmp_path_factory):
    """``jupyter lab`` (this environment's) serving a folder with the reader copy; its base URL."""
    for module in ("jupyterlab", "jupyterlab_myst", "playwright"):
        if importlib.util.find_spec(module) is None:
            _need(module, f"the JupyterLab check needs {module} (make venv)")
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    shutil.copytree(reader_copy[0].parents[2], root)   # reader/book/part1/<chapter>.ipynb: the book's layout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "dpclip-test"
    # a fresh user: no settings, workspace or extension of whoever runs the tests; the
    # environment's own extensions and configuration apply
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_DATA_DIR": str(tmp / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "DPCLIP_HEADLESS": "1"}
    log = open(tmp / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.user_settings_dir={tmp / 'settings'}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("jupyter lab did not start:\n" + (tmp / "lab.log").read_text()[-3000:])
                time.sleep(0.3)
        yield {"url": base, "token": token, "path": str(reader_copy[0].relative_to(reader_copy[0].parents[2]))}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def _open_in_lab(chromium: str, url: str, markdown_cells: int) -> tuple[list[str], list[str]]:
    """Open ``url`` in JupyterLab; return the rendered text of each Markdown cell, and the errors:
    console errors, uncaught exceptions, failed requests, and what jupyterlab-myst flags."""
    from playwright.async_api import async_playwright

    errors = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(f"Uncaught {e}"))
            page.on("console", lambda m: errors.append(f"console.error: {m.text} ({m.location.get('url') or ''})")
                    if m.type == "error" else None)
            page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
            await page.goto(url, wait_until="load", timeout=60_000)
            # jupyterlab-myst renders each Markdown cell into a .myst element
            await page.wait_for_function(
                "n => document.querySelectorAll('.jp-Notebook .jp-MarkdownCell .myst').length >= n",
                arg=markdown_cells, timeout=60_000)
            await page.wait_for_timeout(2000)   # late errors: what the rendered links and roles fetch
            texts = await page.evaluate(
                "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-MarkdownCell'))"
                ".map(c => { const m = c.querySelector('.myst'); return m ? m.textContent : null; })")
            # what jupyterlab-myst flags in the text: "Citation Not Found" (a tooltip), unknown roles ...
            flagged = await page.evaluate(
                "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-MarkdownCell .myst [title]'))"
                ".map(e => e.getAttribute('title') + ': ' + e.textContent.slice(0, 60))"
                ".filter(t => /not found|unknown|error|could not/i.test(t))")
        finally:
            await browser.close()
    return texts, errors + [f"jupyterlab-myst flags {f!r}" for f in flagged]


def test_reader_copy_in_jupyterlab(jupyter_lab, chromium, reader_copy):
    """The reader copy in a real JupyterLab: loads without a console error (jupyterlab-jupytext
    threw one on every load), and the Markdown shows the glued numbers and the author-year
    citations, no "Citation Not Found", no raw role."""
    nb = nbformat.read(reader_copy[0], as_version=4)
    markdown = [c for c in nb.cells if c.cell_type == "markdown"]
    url = f"{jupyter_lab['url']}/lab/tree/{jupyter_lab['path']}?token={jupyter_lab['token']}"
    texts, errors = asyncio.run(_open_in_lab(chromium, url, len(markdown)))
    assert not errors, "JupyterLab logged errors while the reader copy loaded:\n" + "\n".join(errors[:10])
    assert len(texts) == len(markdown) and all(t is not None for t in texts), "not every Markdown cell rendered"
    shown = "\n".join(texts)
    assert "Citation Not Found" not in shown
    for raw in ("{glue", "{cite", "{doc}", "{prf:ref}", "{func}"):
        assert raw not in shown, f"raw {raw} in the rendered notebook"
    numbers = rc.load_numbers().get(_doc(LAB_CHAPTER)) or {}
    missing = sorted({v for v in numbers.values() if v not in shown})
    assert numbers and not missing, f"glued numbers not shown: {missing}"
    for cite in ("Song et al. [2020]", "[Song et al., 2020]", "References",
                 "Shuang Song, Om Thakkar, and Abhradeep Thakurta"):
        assert cite in shown, f"{cite!r} not shown"
    words = Counter(re.findall(r"[A-Za-z]{4,}", shown))
    assert words["Song"] >= 3
