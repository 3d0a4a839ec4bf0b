"""The book as a reader sees it.

1. Builds the book once per test session as ``make book`` does
   (``jupyter-book build . --all -W --keep-going``: any warning or cell error
   fails), except that a chapter nbval has executed in this session is not executed
   again: its outputs come from that run, made in the build's kernel environment
   (``conftest.py`` at the root, ``_ext/reuse_executions.py``). Set
   ``DPCLIP_REUSE_BUILD=1`` to test an existing ``_build/html`` instead (for quick
   iterations after ``make book``).
2. Checks the HTML for anything that would need the network at read time, the
   weight of every page (plotly and the widget embedder only where used), and
   graded use (no otter marker anywhere, downloads are student copies, solutions
   fold with their output, no autograder zip is linked or shipped), no frozen widget, and a
   bibliography labelled as it is cited.
3. Serves ``_build/html`` on 127.0.0.1 and loads every page at 1280 and 400 px in
   headless Chromium (Playwright driving Debian's ``chromium``; no browser download),
   as a reader meets it (``tests/reader_checks.js``): plotly figures drew, MathJax
   typeset the equations, no console error or failed request, no request left
   localhost, no page wider than a phone and nothing cut off in a theorem box, no
   slider step that leaves a panel blank, no legend/slider/title/axis title/plot area
   on another, hover labels that show whole names and values.

Without chromium the browser tests skip (``apt-get install chromium``), except
under CI (``CI`` set), where they fail.
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTER = "book/clipping_in_one_picture.html"
BUILD_TIMEOUT_S = 25 * 60
#: The output of the session's build (not written with DPCLIP_REUSE_BUILD=1).
BUILD_LOG = ROOT / "_build" / "book-build.log"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


# --------------------------------------------------------------------------- build

def _toc_files(toc=None) -> list[str]:
    toc = toc if toc is not None else yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = []
    if isinstance(toc, dict):
        for key, value in toc.items():
            if key in ("root", "file") and isinstance(value, str):
                files.append(value)
            elif isinstance(value, (list, dict)):
                files += _toc_files(value)
    elif isinstance(toc, list):
        for item in toc:
            files += _toc_files(item)
    return files


@pytest.fixture(scope="session")
def built_book(request) -> Path:
    if os.environ.get("DPCLIP_REUSE_BUILD") == "1" and (HTML / "index.html").is_file():
        return HTML
    cache, _ = request.getfixturevalue("execution_cache")  # this session's nbval executions
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(ROOT), "--all", "-W", "--keep-going"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env={**os.environ, "DPCLIP_EXECUTION_CACHE": str(cache)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"the book build took more than {BUILD_TIMEOUT_S} s")
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr)[-8000:]
        reports = "\n".join(p.read_text()[-3000:] for p in (ROOT / "_build/html/reports").rglob("*.log")) \
            if (ROOT / "_build/html/reports").is_dir() else ""
        pytest.fail(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{out}\n{reports}")
    BUILD_LOG.write_text(proc.stdout + proc.stderr)
    return HTML


def test_book_builds_with_warnings_as_errors(built_book):
    assert (built_book / "index.html").is_file()
    assert (built_book / CHAPTER).is_file()


def test_the_build_reused_this_sessions_executions(built_book, execution_cache):
    """Chapters nbval executed in this session are not executed again by the build; the others are."""
    if os.environ.get("DPCLIP_REUSE_BUILD") == "1":
        pytest.skip("DPCLIP_REUSE_BUILD=1: no build in this session")
    _, reused = execution_cache
    log = BUILD_LOG.read_text()
    def docs(pattern):  # myst-nb names the notebook by its absolute path or its docname
        names = re.findall(r"^(\S+?)(?:\.ipynb)?: " + pattern, log, re.M)
        return {n[len(str(ROOT)) + 1:] if n.startswith(str(ROOT) + "/") else n for n in names}

    executed, cached = docs("Executing notebook"), docs("Using cached notebook")
    chapters = {str(Path(f).with_suffix("")) for f in _toc_files() if (ROOT / f).with_suffix(".ipynb").is_file()}
    expected = {nb.relative_to(ROOT).with_suffix("").as_posix() for nb in reused}
    assert cached == expected, f"reused {sorted(cached)}, expected {sorted(expected)}"
    assert executed == chapters - expected


def test_every_toc_page_is_built(built_book):
    files = _toc_files()
    assert files, "_toc.yml lists no pages"
    missing = [f for f in files if not (built_book / (str(Path(f).with_suffix("")) + ".html")).is_file()]
    assert not missing, f"pages in _toc.yml with no HTML: {missing}"


# --------------------------------------------------------------------------- offline, statically

_ASSET_ATTR = re.compile(
    r"<(script|link|img|iframe|source|embed|object|audio|video)\b[^>]*?\b(src|href|data)\s*=\s*[\"']([^\"']+)[\"']",
    re.I)
_CSS_URL = re.compile(r"(?:url\(\s*[\"']?|@import\s+[\"'])((?:https?:)?//[^\"')\s]+)", re.I)


def _remote(url: str) -> bool:
    if url.startswith("//"):
        return True
    parsed = urlparse(url)
    return parsed.scheme in ("http", "https") and parsed.hostname not in LOCAL_HOSTS


def test_html_loads_no_remote_assets(built_book):
    """Scripts, styles, images and frames all come from the book itself.

    ``<a href>`` links (bibliography DOIs, the Binder and repository buttons) are
    fine: they are followed only when a reader clicks them. ``<link rel=...>``
    entries that fetch nothing (canonical, next, prev, search...) are skipped.
    """
    bad = []
    for page in built_book.rglob("*.html"):
        text = page.read_text(errors="replace")
        for m in _ASSET_ATTR.finditer(text):
            tag, url = m.group(0), m.group(3)
            if m.group(1).lower() == "link" and not re.search(
                    r"rel\s*=\s*[\"'][^\"']*(stylesheet|preload|icon|modulepreload|prefetch)", tag, re.I):
                continue
            if _remote(url):
                bad.append(f"{page.relative_to(built_book)}: {url}")
    for css in built_book.rglob("*.css"):
        for url in _CSS_URL.findall(css.read_text(errors="replace")):
            if _remote(url):
                bad.append(f"{css.relative_to(built_book)}: {url}")
    assert not bad, "remote assets in the built book:\n" + "\n".join(sorted(set(bad))[:40])


def _page_assets(built_book: Path, page: Path) -> list[Path]:
    """Local scripts and stylesheets a page loads (``<script src>``, ``<link rel=stylesheet>``)."""
    text = page.read_text(errors="replace")
    urls = re.findall(r"<script[^>]*\bsrc=\"([^\"?#]+)", text)
    for tag in re.findall(r"<link\b[^>]*>", text):
        if re.search(r"rel=\"[^\"]*stylesheet", tag):
            m = re.search(r"href=\"([^\"?#]+)", tag)
            if m:
                urls.append(m.group(1))
    out = []
    for url in urls:
        if _remote(url):
            continue
        path = (page.parent / url).resolve()
        if path.is_file():
            out.append(path)
            if path.name == "startup.js" and path.parent.name == "mathjax":
                # the components the MathJax loader fetches next (_config.yml, mathjax3_config.loader)
                out += [p for p in (path.parent / "core.js", path.parent / "input" / "tex.js",
                                    path.parent / "output" / "chtml.js", path.parent / "a11y" / "assistive-mml.js",
                                    path.parent / "fonts" / "mathjax-tex-font" / "chtml.js") if p.is_file()]
    return out


def _script_names(page: Path) -> list[str]:
    return [Path(s).name for s in re.findall(r"<script[^>]*\bsrc=\"([^\"?]+)", page.read_text())]


def test_scripts_are_served_from_static_in_order(built_book):
    """A chapter loads one plotly bundle (the vendored cartesian one when its traces fit), MathJax
    by component, and no widget embedder (the static book shows no ipywidget)."""
    names = _script_names(built_book / CHAPTER)
    assert names.count("startup.js") == 1, f"MathJax not loaded once: {names}"
    assert ("plotly-cartesian.min.js" in names) != ("plotly.min.js" in names), names
    assert "embed-amd.js" not in names and "require.js" not in names, names
    import plotly
    shipped = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert (built_book / "_static" / "plotly.min.js").read_bytes() == shipped.read_bytes()
    version = re.search(r"v(\d+\.\d+\.\d+)", shipped.read_text()[:200]).group(1)
    cart = (built_book / "_static" / "plotly-cartesian.min.js").read_text()[:300]
    assert f"v{version}" in cart, "the vendored cartesian bundle is not the installed plotly.js version"
    assert (built_book / "_static" / "mathjax" / "fonts" / "mathjax-tex-font" / "chtml" / "woff2").is_dir()
    assert (built_book / "_static" / "mathjax" / "input" / "tex" / "extensions" / "boldsymbol.js").is_file()


#: Page weight budgets (bytes of the HTML plus every local script and stylesheet it loads, MathJax's
#: components included; fonts and MathJax's autoloaded TeX packages come on demand and are not counted).
TEXT_PAGE_BUDGET = 3_000_000
CHAPTER_BUDGET = 5_000_000


#: Anything of Font Awesome's JavaScript (1.5 MB: it redraws the icons as SVG). The theme's stylesheet
#: draws the icons a page shows from the webfonts it ships, which a browser fetches only for the
#: glyphs on the page (``_ext/offline_assets.py`` drops the script the theme's template writes).
_FONTAWESOME_JS = re.compile(r"""<(?:script|link)\b[^>]*(?:src|href)="[^"]*fontawesome[^"]*\.js""")
#: Math that MathJax typesets: Sphinx's math nodes (``\(...\)``, ``\[...\]`` in ``span.math`` /
#: ``div.math``), or MyST's dollar math in a notebook's Markdown output.
_HAS_MATH = re.compile(r'class="math[ "]|\\\(|\\\[')


def test_page_weight(built_book):
    """Text pages stay under 3 MB, pages with figures under 5 MB (issue #10, item 4):
    plotly and the widget embedder load only on pages that use them; no page loads Font
    Awesome's JavaScript, and a text page without math (the References page) loads no MathJax
    (issue #28, item 11)."""
    over, wrong = [], []
    for page in sorted(built_book.rglob("*.html")):
        if "_assignments" in page.parts or "reports" in page.parts:
            continue
        text = page.read_text(errors="replace")
        has_fig = "Plotly.newPlot" in text
        has_widget = "application/vnd.jupyter.widget-view+json" in text
        names = _script_names(page)
        if _FONTAWESOME_JS.search(text):
            wrong.append(f"{page.relative_to(built_book)}: loads Font Awesome's JavaScript (the webfonts draw the icons)")
        # (a page with a table of contents loads MathJax when a page under it has math: Sphinx's rule)
        if "startup.js" in names and not (has_fig or has_widget or _HAS_MATH.search(text)
                                          or "toctree-wrapper" in text):
            wrong.append(f"{page.relative_to(built_book)}: loads MathJax but has no math")
        weight = page.stat().st_size + sum(p.stat().st_size for p in _page_assets(built_book, page))
        budget = CHAPTER_BUDGET if has_fig else TEXT_PAGE_BUDGET
        rel = page.relative_to(built_book)
        if weight > budget:
            over.append(f"{rel}: {weight / 1e6:.2f} MB > {budget / 1e6:.0f} MB")
        if not has_fig and {"plotly.min.js", "plotly-cartesian.min.js"} & set(names):
            wrong.append(f"{rel}: loads plotly but draws no figure")
        if not has_widget and {"embed-amd.js", "require.js"} & set(names):
            wrong.append(f"{rel}: loads the widget embedder but shows no widget")
    assert not over, "pages over their weight budget:\n" + "\n".join(over)
    assert not wrong, "\n".join(wrong)


def test_references_read_as_they_are_cited(built_book):
    """The bibliography labels entries author-year, as the text cites them; no raw LaTeX."""
    page = (built_book / "book" / "references.html").read_text()
    assert "texttt" not in page, "raw LaTeX in the bibliography"
    labels = [re.sub(r"<[^>]+>", "", m) for m in
              re.findall(r'<span class="label">(.*?)</span>\s*</span>', page, re.S)]
    assert labels, "no bibliography entries"
    bad = [lab for lab in labels if not re.search(r"\b(1[6-9]|20)\d\d[a-z]?\]$", lab.strip())]
    assert not bad, f"bibliography labels that are not author-year: {bad[:5]}"


# --------------------------------------------------------------------------- graded use must not leak

OTTER_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "# SOLUTION", "BEGIN QUESTION", "END QUESTION",
                 "BEGIN TESTS", "END TESTS", "ASSIGNMENT CONFIG", "BEGIN TEST CONFIG", "BEGIN PROMPT")


def _masters():
    import importlib.util

    spec = importlib.util.spec_from_file_location("assign_tool_html", ROOT / "tools" / "assign.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    toc = {str(Path(f).with_suffix("")) for f in _toc_files()}
    return tool, [m for m in tool.find_masters() if str(m.relative_to(ROOT).with_suffix("")) in toc]


def _classroom():
    import importlib.util

    spec = importlib.util.spec_from_file_location("classroom_ext", ROOT / "_ext" / "classroom.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_solution_code_shows_no_otter_marker():
    """What a reader sees of a solution: the code, without otter's markers (unit test of _ext/classroom.py)."""
    cr = _classroom()
    code = ("C_q1 = 0.07\n# BEGIN SOLUTION\nx = f(C_q1)\n# END SOLUTION\ny = g(x)  # SOLUTION\n"
            "# BEGIN PROMPT\ny = ...\n# END PROMPT\nprint(y)")
    assert cr.strip_otter_markers(code) == "C_q1 = 0.07\nx = f(C_q1)\ny = g(x)\nprint(y)"
    assert cr.is_solution_cell({"mystnb": {"code_prompt_show": "Show a solution"}})
    assert not cr.is_solution_cell({"mystnb": {"code_prompt_show": "Show the plotting code"}})


def test_glue_is_written_into_the_student_copy():
    cr = _classroom()
    glue = {"n": {"data": {"text/plain": "426"}}, "acc": {"data": {"text/plain": "94.41"}}}
    text = "n = {glue:text}`n`, accuracy {glue:text}`acc:.1f}`%, {glue}`n`; unknown {glue:text}`zz`"
    assert cr.render_glue(text.replace(".1f}`", ".1f`"), glue) == "n = 426, accuracy 94.4%, 426; unknown {glue:text}`zz`"


def test_no_otter_marker_reaches_the_site(built_book):
    """No page and no downloadable notebook shows an otter marker or a solution line."""
    bad = []
    for path in sorted(built_book.rglob("*")):
        if path.suffix not in (".html", ".ipynb", ".txt") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for marker in OTTER_MARKERS:
            if marker in text:
                bad.append(f"{path.relative_to(built_book)}: {marker!r}")
    assert not bad, "otter markers in the built book:\n" + "\n".join(bad[:40])


def test_downloads_are_student_copies_and_no_zip_is_shipped(built_book):
    """The page's download button serves the student copy of every chapter with exercises, and
    the chapter links the student copy (issue #10, item 1). The autograder zip (hidden tests
    included) is neither linked nor shipped: it belongs to the course edition (issue #32, item 2)."""
    import nbformat

    tool, masters = _masters()
    assert masters, "no otter master notebook in the table of contents"
    for master in masters:
        doc = master.relative_to(ROOT).with_suffix("")
        sources = list((built_book / "_sources").glob(f"{doc}.ipynb*"))
        assert sources, f"{doc}: no downloadable notebook under _sources/"
        for src in sources:
            nb = nbformat.reads(src.read_text(), as_version=4)
            code = "\n".join(c.source for c in nb.cells)
            assert 'grader.check("' in code, f"{src}: the download is not the student copy"
            assert not [c for c in nb.cells if c.cell_type == "raw"], f"{src}: raw otter cells"
            # JupyterLab (even with jupyterlab-myst) does not render glue roles: the numbers are written in
            prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
            assert "{glue" not in prose, f"{src}: glue roles left in the student copy (raw in JupyterLab)"
        page = (built_book / (str(doc) + ".html")).read_text()
        stem = master.stem
        target = f"_assignments/{stem}/{stem}.ipynb"
        assert (built_book / target).is_file(), f"{target} missing"
        assert target in page, f"{doc}.html does not link {target}"
        links = re.findall(r'href="([^"]+\.zip)"', page)
        assert not links and "-autograder.zip" not in page, f"{doc}.html links an autograder zip: {links}"
    zips = sorted(str(p.relative_to(built_book)) for p in built_book.rglob("*.zip"))
    assert not zips, f"the book ships zips (autograder zips hold the hidden tests): {zips}"


_CELL = re.compile(r'<div class="cell [^"]*docutils container">(.*?)(?=<div class="cell |</section>|\Z)', re.S)


def test_solution_output_folds_with_its_code(built_book):
    """A "Show a solution" button hides the whole cell: nothing the solution prints is visible
    while it is folded."""
    bad = []
    for page in sorted(built_book.rglob("*.html")):
        text = page.read_text(errors="replace")
        if "Show a solution" not in text:
            continue
        for m in _CELL.finditer(text):
            cell = m.group(1)
            if "Show a solution" not in cell:
                continue
            end = cell.find("</details>")
            out = cell.find('class="cell_output')
            if end < 0 or (out >= 0 and out > end):
                bad.append(f"{page.relative_to(built_book)}: a solution's output is outside its fold")
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- links, figures, numbers

def _chapter_pages(built_book: Path) -> list[Path]:
    """The HTML of every notebook chapter in the table of contents."""
    out = []
    for f in _toc_files():
        stem = str(Path(f).with_suffix(""))
        if (ROOT / (stem + ".ipynb")).is_file() and (built_book / (stem + ".html")).is_file():
            out.append(built_book / (stem + ".html"))
    return out


_PY_XREF = re.compile(r'<code class="xref py py-(\w+)[^"]*">(.*?)</code>', re.S)


def test_lab_references_resolve_into_the_api_page(built_book):
    """Every ``{func}``/``{class}``/``{mod}`` role in a chapter became a link into the API reference,
    to the page of ``book/api/`` that documents it (Sphinx leaves an unresolved Python reference as
    bare code, with no warning)."""
    bad, api_pages = [], {}
    for page in _chapter_pages(built_book):
        text = page.read_text(errors="replace")
        for m in _PY_XREF.finditer(text):
            before = text[max(0, m.start() - 400):m.start()]
            link = re.search(r'<a class="reference internal" href="([^"]*)"[^>]*>\s*$', before)
            name = re.sub(r"<[^>]+>", "", m.group(2))
            target = link and re.search(r"api/([\w-]+)\.html#(.+)$", link.group(1))
            if not target:
                bad.append(f"{page.relative_to(built_book)}: {{{m.group(1)}}}`{name}` does not link the API reference")
                continue
            api = built_book / "book" / "api" / f"{target.group(1)}.html"
            if api not in api_pages:
                api_pages[api] = api.read_text(errors="replace") if api.is_file() else ""
            if f'id="{target.group(2)}"' not in api_pages[api]:
                bad.append(f"{page.relative_to(built_book)}: {{{m.group(1)}}}`{name}` links {link.group(1)}, "
                           "where nothing has that id")
    assert not bad, "unresolved lab references:\n" + "\n".join(bad[:40])


def _plotly_figures(text: str) -> list[dict]:
    """``{"data": ..., "layout": ...}`` of every ``Plotly.newPlot(id, data, layout, config)`` in a page."""
    dec = json.JSONDecoder()
    figs = []
    for m in re.finditer(r"Plotly\.newPlot\(\s*", text):
        try:
            i = m.end()
            _, i = dec.raw_decode(text, i)                     # the div id
            i = re.compile(r"\s*,\s*").match(text, i).end()
            data, i = dec.raw_decode(text, i)
            i = re.compile(r"\s*,\s*").match(text, i).end()
            layout, i = dec.raw_decode(text, i)
        except (ValueError, AttributeError):
            continue
        fig = {"data": data, "layout": layout}
        f = re.compile(r"\s*,\s*[^)]*?\)\.then\(function\(\)\{\s*Plotly\.addFrames\(\s*'[^']*'\s*,\s*").match(text, i)
        if f:       # the slider's frames: pio writes them after the figure
            try:
                fig["frames"], _ = dec.raw_decode(text, f.end())
            except (ValueError, AttributeError):
                pass
        figs.append(fig)
    return figs


def _figures_without_words(html: str) -> list[str]:
    """Plotly figures that are not inside a ``<figure aria-label=...>`` with a "Show the numbers" fold."""
    out = []
    for m in re.finditer(r'<div id="([^"]+)" class="plotly-graph-div"', html):
        opened = html.rfind('<figure class="dpclip-figure"', 0, m.start())
        closed = html.rfind("</figure>", 0, m.start())
        if opened < 0 or closed > opened:
            out.append(f"{m.group(1)}: not inside a <figure> with words")
            continue
        label = re.match(r'<figure class="dpclip-figure" aria-label="([^"]*)"', html[opened:])
        if not label or len(label.group(1).strip()) < 10:
            out.append(f"{m.group(1)}: no accessible name")
        end = html.find("</figure>", m.start())
        if "<summary>Show the numbers</summary><table>" not in html[m.start():end]:
            out.append(f"{m.group(1)}: no 'Show the numbers' table")
    return out


def test_every_figure_has_words(built_book):
    """Each figure is named for a screen reader and shows its data as a table on request
    (``dpclip_lab.plotting.figure_label`` / ``numbers_table``, added by the book's renderer)."""
    problems = []
    for page in _chapter_pages(built_book):
        problems += [f"{page.relative_to(built_book)}: {p}" for p in _figures_without_words(page.read_text())]
    assert not problems, "\n".join(problems[:20])


def test_the_figure_words_check_can_fail():
    bare = '<div><div id="f1" class="plotly-graph-div"></div></div>'
    assert _figures_without_words(bare) == ["f1: not inside a <figure> with words"]
    named = ('<figure class="dpclip-figure" aria-label="A figure of things"><div id="f2" class="plotly-graph-div">'
             "</div><details><summary>Show the numbers</summary><table></table></details></figure>")
    assert _figures_without_words(named) == []
    assert _figures_without_words(named.replace("<table>", "<p>")) == ["f2: no 'Show the numbers' table"]


def test_every_figure_titles_its_axes(built_book):
    """Every cartesian axis that carries data has a title (issue #10, item 7), checked on the
    figures as the pages draw them (``dpclip_lab.plotting.missing_axis_titles``)."""
    from dpclip_lab.plotting import missing_axis_titles

    bad, seen = [], 0
    for page in _chapter_pages(built_book):
        for k, fig in enumerate(_plotly_figures(page.read_text(errors="replace"))):
            seen += 1
            missing = missing_axis_titles(fig)
            if missing:
                title = (fig["layout"].get("title") or {})
                title = title.get("text", "") if isinstance(title, dict) else str(title)
                bad.append(f"{page.relative_to(built_book)} figure {k + 1} {title[:40]!r}: no title on {missing}")
    assert seen, "no plotly figure found in the chapters"
    assert not bad, "figures with untitled axes:\n" + "\n".join(bad)


def _prose(html: str) -> str:
    """The text a reader reads: no code, no printed output, no figures or scripts; math is "MATH"."""
    t = re.sub(r'<div class="highlight.*?</div>', " ", html, flags=re.S)
    t = re.sub(r"<(script|style|pre|code|textarea)\b.*?</\1>", " ", t, flags=re.S)
    t = re.sub(r'<div class="plotly-graph-div.*?</div>', " ", t, flags=re.S)
    # math: a word in the sentence ("$qT = 1$ is not Gaussian" reads "MATH is not Gaussian")
    t = re.sub(r'\\\(.*?\\\)|\\\[.*?\\\]|\$\$.*?\$\$', " MATH ", t, flags=re.S)
    t = re.sub(r'<a class="reference external"[^>]*>.*?</a>', " ", t, flags=re.S)   # URLs, DOIs
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", t))


#: A number the prose must not show: a negative zero ("-0.0000"), an unformatted float with seven
#: or more significant digits ("1.6666667"), a five-or-more-digit integer without separators
#: ("928441"; years are fine).
BAD_NUMBERS = re.compile(r"(?<![\w.,])(?:[-−]0(?:\.0+)?(?![\d.])|[1-9]\d*\.\d{6,}|0\.0*[1-9]\d{6,}|(?!(?:19|20)\d\d\b)\d{5,})(?![\w])")
#: Two glued numbers that print the same in "A and B", "A vs B", "A–B": the text compares numbers
#: the reader cannot tell apart (e.g. "7 and 7"); show more digits or say they agree.
_PASTED = r'<span class="pasted-text">([^<]+)</span>'
SAME_PAIR = re.compile(_PASTED + r"\s*(?:and|vs\.?|versus|–|-|to)\s*" + _PASTED)


#: A colour named in the prose (not "Green's theorem", not "black-box").
COLOUR_WORD = re.compile(r"\b(sky[ -]blue|blue|orange|green|purple|red|yellow|black|gr[ae]y)\b(?![’'-])", re.I)


def _rgb(color) -> tuple[int, int, int] | None:
    color = str(color).strip()
    m = re.fullmatch(r"#([0-9a-fA-F]{6})", color)
    if m:
        return tuple(int(m.group(1)[k:k + 2], 16) for k in (0, 2, 4))
    m = re.fullmatch(r"rgba?\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+).*\)", color)
    return tuple(int(v) for v in m.groups()) if m else None


def _colour_words_drawn(figures: list[dict]) -> set[str]:
    """The book's colour words (``dpclip_lab.plotting.COLOR_NAMES``) of what the figures draw."""
    from dpclip_lab.plotting import COLOR_NAMES, PALETTE

    named = {_rgb(h): w for h, w in COLOR_NAMES.items()}
    words = set()

    def add(color):
        if isinstance(color, (list, tuple)):
            for c in color:
                add(c)
            return
        rgb = _rgb(color) if isinstance(color, str) else None
        if rgb is None:
            return
        best = min(named, key=lambda n: sum((a - b) ** 2 for a, b in zip(n, rgb)))
        if sum((a - b) ** 2 for a, b in zip(best, rgb)) <= 40 ** 2:
            words.add(named[best])

    for fig in figures:
        layout = fig.get("layout") or {}
        colorway = layout.get("colorway") or ((layout.get("template") or {}).get("layout") or {}).get("colorway") or PALETTE
        for i, tr in enumerate(fig.get("data") or []):
            explicit = [c for c in ((tr.get("line") or {}).get("color"), (tr.get("marker") or {}).get("color"),
                                    tr.get("fillcolor")) if c is not None]
            for c in explicit:
                add(c)
            if not explicit:
                add(colorway[i % len(colorway)])
        for ann in layout.get("annotations") or []:
            add(ann.get("arrowcolor"))
        for shape in layout.get("shapes") or []:
            add((shape.get("line") or {}).get("color"))
            add(shape.get("fillcolor"))
    return words


def _colours_named_not_drawn(html: str) -> list[str]:
    drawn = _colour_words_drawn(_plotly_figures(html))
    prose = _prose(html)
    out = []
    for m in COLOUR_WORD.finditer(prose):
        word = m.group(1).lower().replace("-", " ").replace("gray", "grey")
        if word not in drawn:
            out.append(f"'{word}' in \"…{prose[max(0, m.start() - 50):m.end() + 20]}…\" (drawn: {sorted(drawn)})")
    return out


def test_colours_named_in_the_prose_are_drawn(built_book):
    """A colour the text names ("the orange curve") is one the page's figures draw, by the book's
    own colour words (``dpclip_lab.plotting.COLOR_NAMES``; glue ``color_name(role)`` into the text)."""
    problems = []
    for page in _chapter_pages(built_book):
        problems += [f"{page.relative_to(built_book)}: {p}" for p in _colours_named_not_drawn(page.read_text())]
    assert not problems, "colours named in the prose that no figure on the page draws:\n" + "\n".join(problems)


def test_the_colour_check_can_fail():
    fig = ('<script>Plotly.newPlot("a", [{"x": [1], "y": [1], "line": {"color": "#E69F00"}}], {}, {})</script>'
           "<p>The orange curve and the green one.</p>")
    assert [p.split("'")[1] for p in _colours_named_not_drawn(fig)] == ["green"]


def _alike_curves(fig: dict) -> list[str]:
    """Curves of one figure with different legend names drawn alike (one colour, dash, marker and
    fill): the legend lists them, the reader cannot tell them apart (#28: three seeds, one colour)."""
    looks: dict[tuple, set] = {}
    for t in fig.get("data") or []:
        if not t.get("name") or t.get("showlegend") is False or t.get("visible") == "legendonly":
            continue
        line, marker = t.get("line") or {}, t.get("marker") or {}
        color = line.get("color") or marker.get("color") or t.get("fillcolor")
        if color is None or not isinstance(color, str):
            continue          # plotly's colour cycle gives each its own
        mode = t.get("mode") or _default_mode(t)
        key = (t.get("type", "scatter"), mode, color.lower(), line.get("dash") or "solid",
               marker.get("symbol") if "markers" in mode else None, t.get("fill"))
        looks.setdefault(key, set()).add(t["name"])
    return [f"{sorted(names)} are drawn alike ({key[2]}, {key[1] or key[0]})" for key, names in looks.items() if len(names) > 1]


def _default_mode(t: dict) -> str:
    """plotly's mode for a scatter trace that sets none: markers too under 20 points."""
    from dpclip_lab.plotting import _array

    x = _array(t.get("y")) if t.get("y") is not None else _array(t.get("x"))
    return "lines+markers" if x is not None and len(x) < 20 else "lines"


def _hidden_curves(fig: dict) -> list[str]:
    """Named curves drawn exactly on top of another one, in the same style, so that the one below
    never shows (a fifth reading of #28: "Wang et al.: Output" lay under "…: Gradient" in every
    frame, and at q = 1 one bound under the other), in the figure as loaded and in every frame."""
    import numpy as np

    from dpclip_lab.plotting import _array

    base = list(fig.get("data") or [])
    states = [("as loaded", base)]
    for fr in fig.get("frames") or []:
        data, targets = fr.get("data") or [], fr.get("traces") or range(len(fr.get("data") or []))
        merged = [dict(t) for t in base]
        for k, t in zip(targets, data):
            if 0 <= k < len(merged):
                merged[k] = {**merged[k], **t}
        states.append((f"frame {fr.get('name')}", merged))
    out = []
    for where, traces in states:
        seen = []
        for t in traces:
            if not t.get("name") or t.get("visible") in (False, "legendonly") or t.get("type", "scatter") != "scatter":
                continue
            x, y = _array(t.get("x")), _array(t.get("y"))
            if x is None or y is None or len(x) != len(y) or len(x) < 2:
                continue
            mode = t.get("mode") or _default_mode(t)
            look = ((t.get("xaxis") or "x"), (t.get("yaxis") or "y"), (t.get("line") or {}).get("dash") or "solid",
                    "lines" in mode)
            # a curve under another shows as a rim where it is drawn wider (the book's arrows and bands)
            size = float((t.get("line") or {}).get("width", 2) if "lines" in mode else (t.get("marker") or {}).get("size", 6))
            for name, other, (ox, oy), below in seen:
                if other == look and below <= size + 0.5 and len(ox) == len(x) and name != t["name"] \
                        and np.allclose(ox, x, rtol=1e-6, equal_nan=True) and np.allclose(oy, y, rtol=1e-6, atol=0, equal_nan=True):
                    out.append(f"{where}: {name!r} lies exactly under {t['name']!r} (same line style)")
            seen.append((t["name"], look, (x, y), size))
    return sorted(set(out))


def test_no_named_curve_hides_under_another(built_book):
    bad = [f"{page.relative_to(built_book)}, figure {k}: {p}" for page in _chapter_pages(built_book)
           for k, fig in enumerate(_plotly_figures(page.read_text(errors="replace"))) for p in _hidden_curves(fig)]
    assert not bad, "\n".join(bad[:30])


def test_the_hidden_curve_check_can_fail():
    x = [1.0, 2.0, 3.0]
    fig = {"data": [{"name": "gradient", "x": x, "y": [1, 2, 3]}, {"name": "output", "x": x, "y": [1, 2, 3]},
                    {"name": "dashed twin", "x": x, "y": [1, 2, 3], "line": {"dash": "dash"}},
                    {"name": "wide rim", "x": x, "y": [3, 2, 1], "line": {"width": 5}},
                    {"name": "other", "x": x, "y": [3, 2, 1]}],
           "frames": [{"name": "q=1", "traces": [4], "data": [{"y": [1, 2, 3.0]}]}]}
    found = _hidden_curves(fig)
    assert "as loaded: 'gradient' lies exactly under 'output' (same line style)" in found
    assert "frame q=1: 'output' lies exactly under 'other' (same line style)" in found
    assert not any("dashed twin" in p or "wide rim" in p for p in found)


def test_curves_a_legend_names_apart_look_apart(built_book):
    bad = [f"{page.relative_to(built_book)}, figure {k}: {p}" for page in _chapter_pages(built_book)
           for k, fig in enumerate(_plotly_figures(page.read_text(errors="replace"))) for p in _alike_curves(fig)]
    assert not bad, "\n".join(bad)


def test_the_alike_check_can_fail():
    fig = {"data": [{"name": f"seed {r}", "mode": "lines", "line": {"color": "#CC79A7"}} for r in range(3)]
           + [{"name": "x", "line": {"color": "#CC79A7", "dash": "dash"}}, {"name": "y"}, {"name": "z"}]}
    assert len(_alike_curves(fig)) == 1 and "seed 2" in _alike_curves(fig)[0]


def test_numbers_in_prose_are_formatted(built_book):
    """No "-0.0000", no "928441", no "7 and 7" in a chapter's text (issue #10, item 6)."""
    bad = []
    for page in _chapter_pages(built_book):
        html = page.read_text(errors="replace")
        for m in BAD_NUMBERS.finditer(_prose(html)):
            bad.append(f"{page.relative_to(built_book)}: {m.group(0)!r} in ...{_prose(html)[max(0, m.start() - 60):m.end() + 20]}...")
        for m in SAME_PAIR.finditer(html):
            if m.group(1).strip() == m.group(2).strip():
                bad.append(f"{page.relative_to(built_book)}: two glued numbers print the same: {m.group(0)[:160]!r}")
    assert not bad, "numbers in the prose:\n" + "\n".join(bad[:40])


def test_the_number_checks_can_fail():
    assert BAD_NUMBERS.search(" was -0.0000 here") and BAD_NUMBERS.search("a factor of 928441 (median")
    assert BAD_NUMBERS.search("ratio 0.123456789 ") and BAD_NUMBERS.search(" is −0.00 ")
    assert not BAD_NUMBERS.search("in 2016, 60,000 examples, ε = 0.25, -0.5 and 1e-5, 10,000 steps")
    assert not BAD_NUMBERS.search("arXiv:1808.00087 and -1.50 and 0.0004935")
    assert BAD_NUMBERS.search("it is 1.6666667 ")
    html = '<span class="pasted-text">7</span> and <span class="pasted-text">7</span>'
    m = SAME_PAIR.search(html)
    assert m and m.group(1) == m.group(2)


#: Generated sentences that read wrong (issue #28, item 8): a bound that is "at most 0", a number in
#: Python's e+ form ("1e+09"), a sentence run on after a period ("numerically. on a fine grid"), and a
#: count of zero followed by its empty list ("0 of the 20 ...: none"). Checked in sentences, not in
#: tables (tables of large numbers still print "3.65e+03": #28 keeps that open).
BAD_SENTENCES = {
    "a bound of 'at most 0'": re.compile(r"\bat most [-−]?0(?:\.0+)?(?:e[+\-−]?0+)?(?![\d.])"),
    # Python's exponent form ("1e+09", "2.1e-03", "1e-05"); a hand-written "1e-5" is left alone
    "a number in Python's exponent form": re.compile(r"(?<![\w.])\d(?:\.\d+)?e(?:\+\d|-\d{2,})"),
    # a hyphen for a minus sign: " -0.94", "(-3" (prose writes −0.94; math is MATH here)
    "a hyphen as a minus sign": re.compile(r"(?:^|(?<=[\s(\[=]))-\d"),
    "a lower-case word after a period": re.compile(
        r"\b(?!(?:resp|approx|etc|cf|vs|al|e\.g|i\.e)\.)[a-z]{4,}\. (?:on|in|at|the|and|of|for|with|to|is) "),
    "a zero count with an empty list": re.compile(r"(?<![\d.])0 of (?:the )?\d+\b[^.]{0,120}?:\s*none\b"),
}


def test_generated_sentences_read_right(built_book):
    """Glued sentences are written for every branch of their numbers: no "at most 0", no "1e+09", no
    "numerically. on", no "0 of the 20 ...: none" in a chapter's prose (issue #28, item 8)."""
    bad = []
    for page in _chapter_pages(built_book):
        prose = _prose(re.sub(r"<table\b.*?</table>", " ", page.read_text(errors="replace"), flags=re.S))
        for what, pattern in BAD_SENTENCES.items():
            for m in pattern.finditer(prose):
                bad.append(f"{page.relative_to(built_book)}: {what}: ...{prose[max(0, m.start() - 60):m.end() + 30]}...")
    assert not bad, "sentences that read wrong:\n" + "\n".join(bad[:40])


#: A number in Python's exponent form ("3.65e+03", "1.5e-09", "1e+06", "δ = 1e-5"): a reader's table
#: writes 3.65 × 10³ (``dpclip_lab.plotting.fmt``) and δ = 10⁻⁵ (a fifth reading met "δ = 1e-5").
PYTHON_EXPONENT = re.compile(r"(?<![\w.])\d(?:\.\d+)?e[+-]?\d+(?![\w.])")

#: Code's notation where the book typesets: "<=" for ≤, "P_D" and "Δ_SGD" for subscripts, "C1" for
#: C₁, "sigma1" for σ₁, "[35]" for a paper's own reference number (the book cites author-year).
ASCII_NOTATION = {
    "Python's exponent form": PYTHON_EXPONENT,
    "an ASCII relation": re.compile(r"&lt;=|&gt;=|(?<![<>=!])(?:<=|>=)(?!=)"),
    "an underscore for a subscript": re.compile(r"(?<![\w/.])[A-Za-zΔσεδμαβγλ]_(?:\{[^}]*\}|[A-Za-z0-9]{1,3})(?![\w])"),
    "a digit for a subscript": re.compile(r"(?<![\w])(?:C[12]|sigma\d?|σ[12](?=\w))(?![\w])"),
    "a paper's reference number": re.compile(r"(?<![\w\]])\[\d{1,3}(?:\s*,\s*\d{1,3})*\](?![(\w])"),
}


def ascii_notation(html: str) -> list[str]:
    """Code's notation in the tables and figures of a page (its math and code left out)."""
    texts = _table_texts(re.sub(r"<code\b.*?</code>|\\\(.*?\\\)", " ", html, flags=re.S))
    texts += [json.loads(f'"{m.group(1)}"') for m in _FIGURE_TEXT.finditer(html)]
    return [f"{what}: ...{t[max(0, m.start() - 40):m.end() + 20]}..." for t in texts
            for what, p in ASCII_NOTATION.items() for m in p.finditer(t)]


def test_tables_and_figures_write_notation_as_the_text_does(built_book):
    """A fifth reading of #28 met "hypothesis: sigma1 >= 8 C1 / B", "P_D(S > s)", "Δ_SGD" and a legend
    citing "[35] Wu et al." beside prose that typesets σ₁ ≥ 8C₁/B and cites Wu et al. [2017]."""
    bad = _on_chapter_pages(built_book, lambda html: list(dict.fromkeys(ascii_notation(html))))
    assert not bad, "\n".join(bad[:40])


def test_the_notation_check_can_fail():
    page = ("<table><tr><td>hypothesis: sigma1 >= 8 C1 / B</td><td>P_D(S &gt; s)</td><td>Δ_SGD</td><td>δ = 10⁻⁵</td>"
            "<td><code>dp_event</code> and \\(c_2\\) and dp_accounting</td><td>σ₁ ≥ 8C₁/B</td></tr></table>"
            '{"name":"[35] Wu et al.: Output"} {"name":"Wu et al. [2017]"} {"text":"ε at δ = 1e-5"}')
    found = [p.split(":")[0] for p in ascii_notation(page)]
    assert sorted(found) == sorted(["an ASCII relation", "an underscore for a subscript", "an underscore for a subscript",
                                    "a digit for a subscript", "a digit for a subscript",
                                    "a paper's reference number", "Python's exponent form"]), ascii_notation(page)


def _table_texts(html: str) -> list[str]:
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", t)) for t in re.findall(r"<table\b.*?</table>", html, flags=re.S)]


#: A cell that prints Python's not-a-number or infinity ("nan", "inf"): a reader's table says what is missing.
NOT_A_NUMBER = re.compile(r"(?<![\w.])[-−]?(?:nan|NaN|inf|Infinity)(?![\w])")


def test_tables_print_numbers_for_readers(built_book):
    """Tables in chapters show 3.65 × 10³, not Python's 3.65e+03, and never "nan" (issue #28, item 8:
    tables too; a fourth reading met "nan" three times in a table of noise levels)."""
    bad = [f"{page.relative_to(built_book)}: {m.group(0)} in ...{t[max(0, m.start() - 50):m.end() + 20]}..."
           for page in _chapter_pages(built_book) for t in _table_texts(page.read_text(errors="replace"))
           for pattern in (PYTHON_EXPONENT, NOT_A_NUMBER) for m in pattern.finditer(t)]
    assert not bad, "numbers in Python's exponent form in tables:\n" + "\n".join(bad[:40])


def repeated_headers(html: str) -> list[str]:
    """Tables (a figure's "Show the numbers" fold included) with two columns, or two row headers
    of the trace list, of the same name: a reader cannot tell which is which (#28's fourth reading:
    "E⟨∇f, g⟩" twice, one per panel, with no d = 1 / d = 10)."""
    from bs4 import BeautifulSoup

    bad = []
    for table in BeautifulSoup(html, "html.parser").select("table"):
        cols = [th.get_text(" ", strip=True) for th in table.select("thead th")]
        rows = [th.get_text(" ", strip=True) for th in table.select("tbody th[scope=row]")]
        for kind, names in (("columns", cols), ("rows", rows if cols[:1] == ["trace"] else [])):
            twice = sorted({n for n in names if n and names.count(n) > 1})
            if twice:
                bad.append(f"{kind} named alike: {twice[:3]}")
    return bad


def test_no_table_names_two_columns_alike(built_book):
    bad = _on_chapter_pages(built_book, repeated_headers)
    assert not bad, "\n".join(bad[:20])


def test_the_repeated_header_check_can_fail():
    twice = "<table><thead><tr><th>x</th><th>E</th><th>E</th></tr></thead><tbody></tbody></table>"
    apart = "<table><thead><tr><th>x</th><th>E (d = 1)</th><th>E (d = 10)</th></tr></thead></table>"
    traces = ("<table><thead><tr><th>trace</th><th>points</th></tr></thead><tbody><tr><th scope='row'>a</th>"
              "</tr><tr><th scope='row'>a</th></tr></tbody></table>")
    assert repeated_headers(twice) == ["columns named alike: ['E']"]
    assert repeated_headers(apart) == []
    assert repeated_headers(traces) == ["rows named alike: ['a']"]


def test_the_table_number_check_can_fail():
    found = [m.group(0) for t in _table_texts("<table><tr><td>3.65e+03</td><td>1.5e-09</td><td>1e+06</td>"
                                              "<td>δ = 1e-5</td><td>3.65 × 10³</td><td>1e-5</td></tr></table>")
             for m in PYTHON_EXPONENT.finditer(t)]
    assert found == ["3.65e+03", "1.5e-09", "1e+06", "1e-5", "1e-5"], found
    assert [m.group(0) for t in _table_texts("<table><td>nan</td><td>−inf</td><td>financial</td><td>—</td></table>")
            for m in NOT_A_NUMBER.finditer(t)] == ["nan", "−inf"]


#: A MyST role or directive that reached the page as text: the parser did not take it (e.g. a
#: backtick fence whose title holds backticks — CommonMark forbids them in a backtick info string).
RAW_MYST = re.compile(r"\{(?:prf:[\w-]+|cite(?::\w+)?|glue(?::\w+)?|doc|ref|numref|eq|func|class|mod|meth|attr|"
                      r"admonition|note|tip|hint|warning|dropdown|math|figure|code-cell)\}"
                      r"|\$")   # a math delimiter shown as text ("satisfies $ MATH $": $$ not on its own line)


#: Text of a figure (trace names, titles, annotations, slider labels) in plotly's JSON on a page.
_FIGURE_TEXT = re.compile(r'"(?:name|text|prefix|label)":"((?:[^"\\]|\\.){1,200})"')
#: A figure's table row named by plotly's default ("scatter 2", "trace 3") or by a number ("unlabelled
#: histogram 3", the renderer's last resort): it says nothing (a third reading of #28 met the second).
_DEFAULT_NAME = re.compile(r"<th scope='(?:row|col)'>(?:unlabelled )?(?:scatter|trace|bar|histogram|heatmap) \d+</th>")


def _figure_text_problems(html: str) -> list[str]:
    from dpclip_lab.plotting import _TEX_SCRIPT

    out = []
    for m in _FIGURE_TEXT.finditer(html):
        text = json.loads(f'"{m.group(1)}"')
        if _TEX_SCRIPT.search(text):
            out.append(f"TeX-like script shown as typed: {text[:80]!r}")
    out += [f"a numbers table names a curve {m.group(0)[16:-5]!r}" for m in _DEFAULT_NAME.finditer(html)]
    return out


def test_figure_text_reads_as_text(built_book):
    """No figure shows "x_t" or "F_{c,k}" as typed (the renderer writes x<sub>t</sub>), and no
    "Show the numbers" table names a curve "scatter 2" (#28, item 9: a reader met both)."""
    bad = [f"{page.relative_to(built_book)}: {p}" for page in _chapter_pages(built_book)
           for p in dict.fromkeys(_figure_text_problems(page.read_text(errors="replace")))]
    assert not bad, "\n".join(bad[:30])


def test_the_figure_text_check_can_fail():
    page = ('{"name":"iterate x_t","type":"scatter"} {"text":"F_{c,k}(x)"} {"name":"x<sub>t</sub>"} '
            "{\"name\":\"per_example\"} <th scope='col'>scatter 2</th> <th scope='row'>unlabelled histogram 4</th>")
    assert len(_figure_text_problems(page)) == 4, _figure_text_problems(page)


def test_no_raw_myst_markup_on_a_page(built_book):
    """No page shows a role or directive as text, e.g. '```{prf:theorem} Song et al., Theorem 3.3' (#28)."""
    bad = [f"{page.relative_to(built_book)}: ...{text[max(0, m.start() - 40):m.end() + 60]}..."
           for page in sorted(built_book.rglob("book/**/*.html"))
           for text in [_prose(page.read_text(errors="replace"))] for m in RAW_MYST.finditer(text)]
    assert not bad, "MyST markup shown as text:\n" + "\n".join(bad[:20])


def test_the_raw_markup_check_can_fail():
    page = ("<p>```{prf:theorem} {cite:t}`song2021evading`, Theorem 3.3</p><pre>{glue:text}`x` in code</pre>"
            '<p>satisfies $<span class="math notranslate nohighlight">\\(x\\)</span>$</p>')
    assert [m.group(0) for m in RAW_MYST.finditer(_prose(page))] == ["{prf:theorem}", "{cite:t}", "$", "$"]


#: An abbreviation: two or more capitals, digits and hyphens ("DP-SGD", "GLP", "CNNs").
ABBREVIATION = re.compile(r"(?<![\w-])([A-Z][A-Z0-9]*[A-Z](?:-[A-Z0-9]+)*)(s?)(?![\w-])")
#: Capitalised words a reader meets as names, not as abbreviations to spell out: data sets, models,
#: file formats, libraries, hardware, venues, the book's own words (MATH stands for a formula here;
#: "Part II").
NAMES = {"MATH", "II", "III", "IV", "MNIST", "CIFAR", "CIFAR-10", "CIFAR-100", "GPT-2", "E2E", "IDX", "NCCL",
         "NVIDIA", "GPU", "CPU", "HTML", "PDF", "URL", "API", "JSON", "CSS", "ICLR", "ICML", "USENIX",
         "CCS", "PETS", "CSF", "JRSS", "UCI", "H100", "H200", "TF", "RNG"}


def _article(html: str) -> str:
    """The chapter's own text: its article, without the page's navigation."""
    m = re.search(r'<article class="bd-article".*?</article>', html, flags=re.S)
    return m.group(0) if m else html


def _spelled_out(abbr: str, text: str, at: int) -> bool:
    """Whether ``abbr`` at ``text[at]`` is written out there: "privacy-loss distribution (PLD)",
    "DP-GD (DP gradient descent ...)", "generalized linear problems (GLPs, whose ...)". The words
    written out start with the abbreviation's letter ("POT (the metric sees ...)" does not say
    what POT is)."""
    a, first = re.escape(abbr), abbr[0].lower()
    before = text[max(0, at - 2):at]
    if before.endswith("(") and re.match(a + r"s?\s*[),;]", text[at:]):
        words = re.findall(r"[^\W\d_]+", text[max(0, at - 80):at])[-6:]
        return any(w[0].lower() == first for w in words)
    inner = re.match(a + r"s?\s*\(\s*([^\W\d_][\w-]*)", text[at:at + len(abbr) + 40])
    return bool(inner) and inner.group(1)[0].lower() == first and inner.group(1) not in ("see", "cf")


def unexplained_abbreviations(pages: list[tuple[str, str]]) -> list[str]:
    """Abbreviations whose first use in the book (pages in reading order) does not spell them out."""
    seen, bad = set(), []
    for name, html in pages:
        prose = _prose(re.sub(r"<table\b.*?</table>", " ", _article(html), flags=re.S))
        for m in ABBREVIATION.finditer(prose):
            abbr = m.group(1)
            if abbr in NAMES or abbr in seen:
                continue
            seen.add(abbr)
            if _spelled_out(abbr, prose, m.start()):
                seen.update(abbr.split("-"))   # "DP-SGD" written out also says what DP and SGD are
            else:
                bad.append(f"{name}: {abbr} first used without being spelled out: "
                           f"...{prose[max(0, m.start() - 70):m.end() + 40]}...")
    return bad


def test_abbreviations_are_spelled_out_at_first_use(built_book):
    """The first time the book uses an abbreviation (in reading order) it says what it stands for
    (#28, item 13: PLD/RDP before they were defined; a third reading met "POT" never expanded)."""
    pages = [(f, (built_book / Path(f).with_suffix(".html")).read_text(errors="replace")) for f in _toc_files()
             if "/api" not in f and not f.endswith("references")
             and (built_book / Path(f).with_suffix(".html")).is_file()]
    bad = unexplained_abbreviations(pages)
    assert not bad, "\n".join(bad)


def test_the_abbreviation_check_can_fail():
    pages = [("a", '<article class="bd-article"><p>Run DP-SGD with the privacy-loss distribution (PLD).</p>'
                   "<p>Generalized linear problems (GLPs, whose loss sees margins), solved with POT (the "
                   "metric sees one scalar).</p></article>"),
             ("b", '<article class="bd-article"><p>The PLD and a GLP; the ERM and MNIST; FFT (fast Fourier '
                   "transform); GDP (Gaussian DP) and RDP (see (3)).</p></article>")]
    found = [line.split(": ")[1].split()[0] for line in unexplained_abbreviations(pages)]
    assert found == ["DP-SGD", "POT", "ERM", "DP", "RDP"], found
    # written out, a compound also says what its parts are
    spelled = [("c", '<article class="bd-article"><p>Differentially private stochastic gradient descent '
                     "(DP-SGD) is SGD with noise; DP-GD (DP gradient descent) too.</p></article>")]
    assert unexplained_abbreviations(spelled) == []


#: Floating-point rounding printed as a number ("1.1102230246251565e-16", "-8.0e-17"): a reader
#: reads a value; ``dp.fmt(x, zero_below=1e-12)`` prints "0 (rounding error)" (#28, a third reading).
ROUNDING_NOISE = re.compile(r"(?<![\w.])[-−]?\d(?:\.\d+)?e-(?:1[3-9]|[2-9]\d|\d{3})(?![\w])")


def _printed_outputs(html: str) -> list[str]:
    """The text of a page's cell outputs (printed text and HTML tables), not its figures' data."""
    html = re.sub(r"<script\b.*?</script>", " ", html, flags=re.S)
    html = re.sub(r'<div class="plotly-graph-div.*?</div>', " ", html, flags=re.S)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", m.group(0))) for m in
            re.finditer(r'<div class="cell_output.*?(?=<div class="cell |<section|</article)', html, flags=re.S)]


def test_no_rounding_error_printed_as_a_number(built_book):
    bad = [f"{page.relative_to(built_book)}: ...{t[max(0, m.start() - 60):m.end() + 10]}..."
           for page in _chapter_pages(built_book) for t in _printed_outputs(page.read_text(errors="replace"))
           for m in ROUNDING_NOISE.finditer(t)]
    assert not bad, "rounding error printed as a number:\n" + "\n".join(bad[:20])


_SUPER = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_BOOK_NUMBER = re.compile(r"[-−]?\d[\d,]*(?:\.\d+)?(?![\d⁻⁰¹²³⁴⁵⁶⁷⁸⁹])(?: × 10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+))?"
                          r"|(?<![\d.])10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)")


def _book_numbers(text: str) -> list[float]:
    """The numbers in a table cell as the book prints them: 12.5, −0.08, 6.163 × 10⁻³³, 10⁻¹²."""
    out = []
    for m in _BOOK_NUMBER.finditer(text):
        if m.group(2):
            out.append(10.0 ** int(m.group(2).translate(_SUPER)))
            continue
        mant = m.group(0).split(" × ")[0].replace("−", "-").replace(",", "")
        out.append(float(mant) * (10.0 ** int(m.group(1).translate(_SUPER)) if m.group(1) else 1.0))
    return out


def rounding_noise_in_figure_tables(html: str) -> list[str]:
    """A figure's "Show the numbers" column (or row) that holds both a value ≥ 10⁻⁶ and a nonzero
    value under 10⁻¹²: rounding error printed as data (#28's fourth reading: "6.163 × 10⁻³³ to
    12.5" for a loss whose minimum is 0)."""
    from bs4 import BeautifulSoup

    bad = []
    for table in BeautifulSoup(html, "html.parser").select("details.dpclip-numbers table"):
        grid = [[_book_numbers(td.get_text(" ", strip=True)) for td in tr.select("td")] for tr in table.select("tbody tr")]
        lines = grid + [[row[j] for row in grid if j < len(row)] for j in range(max(map(len, grid), default=0))]
        for line in lines:
            vals = [abs(v) for cell in line for v in cell]
            tiny = [v for v in vals if 0 < v < 1e-12]
            if tiny and max(vals) >= 1e-6:
                bad.append(f"{min(tiny):.3g} beside {max(vals):.3g} in a figure's numbers table")
                break
    return bad


def test_no_rounding_error_in_a_figures_numbers(built_book):
    bad = _on_chapter_pages(built_book, rounding_noise_in_figure_tables)
    assert not bad, "\n".join(bad[:20])


def test_the_figure_rounding_check_can_fail():
    table = ("<details class='dpclip-numbers'><table><tbody><tr><th>f</th><td>6.163 × 10⁻³³ to 12.5</td></tr>"
             "<tr><th>g</th><td>0 to 1.455</td></tr></tbody></table></details>")
    assert len(rounding_noise_in_figure_tables(table)) == 1
    log = ("<details class='dpclip-numbers'><table><tbody><tr><td>2.4 × 10⁻¹¹</td><td>10⁻¹²</td></tr>"
           "</tbody></table></details>")
    assert rounding_noise_in_figure_tables(log) == []
    assert _book_numbers("−2.5 × 10⁻³ to 1,200 and 10⁻¹²") == [-2.5e-3, 1200.0, 1e-12]


def test_the_rounding_check_can_fail():
    page = ('<div class="cell_output docutils container"><pre>change with v_perp: 1.1102230246251565e-16 '
            "unclipped -8.0e-17, δ = 1e-05, 2e-9, 0 (rounding error)</pre></div><section>")
    assert [m.group(0) for t in _printed_outputs(page) for m in ROUNDING_NOISE.finditer(t)] == [
        "1.1102230246251565e-16", "-8.0e-17"]


def _on_chapter_pages(built_book: Path, check) -> list[str]:
    """``check(html) -> [problem]`` on every chapter page, each problem prefixed with its page."""
    return [f"{page.relative_to(built_book)}: {b}" for page in _chapter_pages(built_book)
            for b in check(page.read_text(errors="replace"))]


def spoiled_predictions(html: str) -> list[str]:
    """"Predict, then look" boxes that come right after a cell whose output already shows the answer.

    A prompt asks the reader to commit before looking; the table or figure it is about follows it.
    A table or figure printed by the cells directly above a prompt (no prose between them) is what
    the prompt asks about (#28's fourth reading: *DiceSGD in practice* asked which arm would win
    under the table listing every arm's accuracy).
    """
    from bs4 import BeautifulSoup

    bad = []
    for box in BeautifulSoup(html, "html.parser").select("div.admonition"):
        title = box.select_one(".admonition-title")
        if not title or not title.get_text().strip().startswith("Predict"):
            continue
        for cell in box.find_previous_siblings():
            if "cell" not in (cell.get("class") or []):
                break
            out = cell.select_one(".cell_output")
            shown = [what for what, sel in (("a table", "table"), ("a figure", ".plotly-graph-div, img"))
                     if out is not None and out.select(sel)]
            if shown:
                text = re.sub(r"\s+", " ", box.get_text(" ", strip=True))[:110]
                bad.append(f"{' and '.join(shown)} printed right above the prompt: {text}")
                break
    return bad


def test_no_prediction_prompt_comes_after_its_answer(built_book):
    bad = _on_chapter_pages(built_book, spoiled_predictions)
    assert not bad, "\n".join(bad)


def test_the_spoiled_prediction_check_can_fail():
    prompt = ('<div class="admonition tip"><p class="admonition-title">Predict, then look</p>'
              "<p>Which arm wins?</p></div>")
    table = '<div class="cell docutils container"><div class="cell_output"><table><tr><td>1</td></tr></table></div></div>'
    code = '<div class="cell docutils container"><div class="cell_input"><pre>x = 1</pre></div></div>'
    assert len(spoiled_predictions(f"<section>{table}{code}{prompt}</section>")) == 1
    assert spoiled_predictions(f"<section>{table}<p>Now the figure.</p>{prompt}{table}</section>") == []
    assert spoiled_predictions(f"<section>{code}{prompt}{table}</section>") == []


def test_the_sentence_checks_can_fail():
    found = {what for what, p in BAD_SENTENCES.items()
             for text in ("the left side is at most 0.0e+00 — no", "sits 1e+09 times or more below",
                          "Lemma 3.1, numerically. on a fine grid", "0 of the 20 printed values lie further: none.",
                          "at δ = 1e-05 it is 2.1e-03 away", "the slope is -2.01 here")
             if p.search(text)}
    assert found == set(BAD_SENTENCES), found
    clean = ("at most 0.05 apart, δ = 1e-5 and 2.4e-3 and 10⁻⁵, Zhang et al. in 2024, e.g. the bound, "
             "pre-clip noise, slope −2.01, rows 3-4, a well-known (1 − q) factor, "
             "it is at most 10⁻⁹; 3 of the 20 values: (k, d) = (1, 10).")
    assert not any(p.search(clean) for p in BAD_SENTENCES.values()), [w for w, p in BAD_SENTENCES.items()
                                                                      if p.search(clean)]
    # a formula that starts a sentence is a word of it, not a gap
    clean_math = _prose(r"<p>The audit meets the accountant.</p><p>\(qT = 1\) is not Gaussian.</p>")
    assert "accountant. MATH is" in clean_math and not any(p.search(clean_math) for p in BAD_SENTENCES.values())


# --------------------------------------------------------------------------- Binder's numbers (#32 item 4)

#: Glued values that measure the machine (wall-clock times, and which method was slowest), not results
#: of the book: never compared.
MEASURED_GLUE = {"book/beyond/taking_it_to_your_model": {"launch_s", "one_s"},
                 "book/closing/which_remedy": {"sk_slowest", "bc_slowest", "cnn_ms_lo", "cnn_ms_hi",
                                               "sk_ms_slow", "sk_ms_dp", "sk_pre_time_ratio",
                                               "bc_ms_slow", "bc_ms_dp", "bc_pre_time_ratio"}}
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def _as_number(text: str) -> tuple[float, float] | None:
    """A printed number and the unit of its last digit ("6,794" -> (6794, 1); "3.65 × 10³" -> (3650, 10)), or None."""
    t = text.strip().replace(",", "").replace("−", "-").rstrip("%").strip()
    m = re.fullmatch(r"(-?\d+(?:\.(\d+))?)(?:\s*×\s*10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+))?", t)
    if not m:
        return None
    exponent = int(m.group(3).translate(_SUPERSCRIPTS)) if m.group(3) else 0
    return float(m.group(1)) * 10.0 ** exponent, 10.0 ** (exponent - len(m.group(2) or ""))


def stale_numbers(built: dict, committed: dict, measured=MEASURED_GLUE) -> list[str]:
    """Numbers a build printed that the committed file lacks or holds differently (beyond 2 % and a
    unit of the last digit: a last digit that flips between machines is not staleness)."""
    bad = []
    for doc, numbers in built.items():
        for key, value in numbers.items():
            if key.split(":")[0] in measured.get(doc, ()):
                continue
            saved = committed.get(doc, {}).get(key)
            a, b = _as_number(value), _as_number(saved) if saved is not None else None
            same = saved == value or (a is not None and b is not None
                                      and abs(a[0] - b[0]) <= 0.02 * max(abs(a[0]), abs(b[0])) + max(a[1], b[1]))
            if not same:
                bad.append(f"{doc}: {key} = {value!r} in the build, {saved!r} committed")
    return bad


def test_committed_numbers_are_the_builds(built_book):
    """Binder builds no book: its reader copies take their numbers from the committed
    ``book/glued_numbers.json``. Every number this build printed must be in the committed file (the
    one in git's HEAD, not the copy the build just rewrote), with the same value."""
    spec = importlib.util.spec_from_file_location("dpclip_reader_copies", ROOT / "_ext" / "reader_copies.py")
    rc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rc)
    shown = subprocess.run(["git", "show", "HEAD:book/glued_numbers.json"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        pytest.skip("not a git checkout with a commit: nothing committed to compare")
    built = rc.build_numbers(ROOT / "_build" / "jupyter_execute", rc.toc_notebooks(ROOT), ROOT)
    assert built, "the build glued no number"
    stale = stale_numbers(built, json.loads(shown.stdout))
    assert not stale, ("book/glued_numbers.json in the last commit is not this build's: commit the file the "
                       "build rewrote\n" + "\n".join(stale[:20]))


def test_the_stale_number_check_can_fail():
    built = {"a": {"x:.2f": "0.51", "y": "6,794", "z:.3g": "3.65 × 10³", "w": "yes", "launch_s:.0f": "9"}}
    assert stale_numbers(built, {"a": {"x:.2f": "0.52", "y": "6,794", "z:.3g": "3.66 × 10³", "w": "yes",
                                       "launch_s:.0f": "3"}}, {"a": {"launch_s"}}) == []
    found = stale_numbers(built, {"a": {"x:.2f": "0.61", "z:.3g": "3.65 × 10⁴", "w": "no"}}, {"a": {"launch_s"}})
    assert [f.split(":")[1].split("=")[0].strip() for f in found] == ["x", "y", "z", "w"], found


# --------------------------------------------------------------------------- no dead controls

def test_no_frozen_widget_in_the_static_book(built_book):
    """The static book shows no ipywidget (it would look live and do nothing); where a chapter
    has a live control, the page shows the "run this live" box instead."""
    frozen, missing = [], []
    for f in _toc_files():
        page = built_book / (str(Path(f).with_suffix("")) + ".html")
        if not page.is_file():
            continue
        text = page.read_text(errors="replace")
        if "application/vnd.jupyter.widget-view+json" in text:
            frozen.append(str(page.relative_to(built_book)))
        nb = ROOT / (str(Path(f).with_suffix("")) + ".ipynb")
        if nb.is_file() and re.search(r"\blive\(", nb.read_text()) and 'class="admonition tip dpclip-live"' not in text:
            missing.append(str(page.relative_to(built_book)))
    assert not frozen, f"pages with a frozen widget: {frozen}"
    assert not missing, f"chapters with a live control but no 'run this live' box: {missing}"


# --------------------------------------------------------------------------- in a browser

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _chromium()
    if path is None:
        msg = ("headless-browser check needs Debian's chromium: "
               "apt-get update && apt-get install -y chromium")
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set, so this is a failure, not a skip)")
        pytest.skip(msg)
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def server(built_book):
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


#: The widths a reader meets the book at: a laptop and a phone.
WIDTHS = (1280, 400)
#: The theme's colour modes (pydata-sphinx-theme: data-theme on <html>).
THEMES = ("light", "dark")
READER_JS = Path(__file__).with_name("reader_checks.js")
#: A slider figure's state: step, announced value, a signature of the drawn data, the focus ring.
_SLIDER_STATE = """ctl => {
    const el = document.getElementById(ctl.dataset.figure);
    const s = el._fullLayout.sliders[0];
    const flat = v => (v && v.length !== undefined ? Array.from(v).flatMap(r => (r && r.length !== undefined && typeof r !== 'string' ? Array.from(r) : [r])) : []);
    const sig = el._fullData.map(t => { const y = flat(t.z).concat(flat(t.y), flat(t.x)); let a = 0;
        for (let i = 0; i < y.length; i += Math.max(1, Math.floor(y.length / 200))) a += (Number(y[i]) || 0) * (1 + i % 7);
        return a.toPrecision(10) + ':' + y.length; }).join('|');
    return {now: ctl.getAttribute('aria-valuenow'), active: s.active, n: s.steps.length,
            text: ctl.getAttribute('aria-valuetext'), sig, outline: getComputedStyle(ctl).outlineStyle};
}"""
#: WCAG 2.0 and 2.1, levels A and AA (axe-core's tags).
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_RUN = ("axe.run(document, {runOnly: {type: 'tag', values: %s}, resultTypes: ['violations']})"
           % json.dumps(AXE_TAGS))
#: Selected rules of the WCAG tags (``rules`` list), on a context (``document``, or a JSON context).
AXE_RULES = "axe.run(%s, {runOnly: {type: 'rule', values: %s}, resultTypes: ['violations']})"
#: The page around the chapter's text (header, navigation, footer): what a phone lays out differently.
_CHROME = json.dumps({"exclude": [[".bd-article"]]})
#: axe-core's WCAG A/AA rules that read colours: the others (names, roles, labels, landmarks, focus,
#: scrolling regions...) see the same DOM in both colour modes -- the mode only switches stylesheets --
#: and give the same result in both, so at each width they run once, in one mode.
COLOUR_RULES = ("color-contrast", "link-in-text-block")
#: Every WCAG A/AA rule on every element at both widths and in both colour modes, with two savings:
#: (1) a rule that reads no colour runs in one mode per width (light at 1280 px, dark at 400 px),
#: the rules that read colours in both; (2) contrast is the costly rule (seconds a page), and the
#: chapter's text has the same colours at every width (no stylesheet of the book changes a colour with
#: the width), so the article's contrast is checked once per colour mode -- light at 1280 px, dark at
#: 400 px -- and the page chrome (header, sidebars, footer: laid out differently on a phone) in both
#: modes at both widths. Measured: the two runs of every non-colour rule in the other mode were 110 s
#: of the browser pass (two cores, serial in effect: chromium's page work keeps both busy).
AXE_PLAN = {   # width: ((what, colour mode, axe call), ...)
    1280: (("every WCAG rule", "light", AXE_RUN),
           ("links told apart from text", "dark", AXE_RULES % ("document", json.dumps(["link-in-text-block"]))),
           ("contrast of the page chrome", "dark", AXE_RULES % (_CHROME, json.dumps(["color-contrast"])))),
    400: (("links told apart from text", "light", AXE_RULES % ("document", json.dumps(["link-in-text-block"]))),
          ("contrast of the page chrome", "light", AXE_RULES % (_CHROME, json.dumps(["color-contrast"]))),
          ("every WCAG rule", "dark", AXE_RUN)),
}


def test_the_colour_rules_are_axes_own():
    """The rules :data:`AXE_PLAN` runs in both modes are every WCAG A/AA rule of the pinned axe-core that
    reads colours (a new one in a new axe-core would run in one mode only: this test then fails)."""
    import axe_playwright_python

    source = (Path(axe_playwright_python.__file__).with_name("axe.min.js")).read_text()
    colour_ids = set(re.findall(r'id:"([\w-]+)"[^{}]{0,400}?tags:\[[^\]]*"cat\.color"', source))
    wcag = {rid for rid in colour_ids if re.search(r'id:"%s"[^{}]{0,400}?tags:\[[^\]]*"wcag2(?:1)?aa?"' % re.escape(rid), source)}
    assert wcag and wcag <= set(COLOUR_RULES), (wcag, COLOUR_RULES)


def _axe_script() -> str:
    """axe-core's script, as the pinned axe-playwright-python package ships it (offline)."""
    try:
        import axe_playwright_python
    except ImportError:
        pytest.fail("the accessibility checks need axe-playwright-python (requirements.txt)")
    return (Path(axe_playwright_python.__file__).with_name("axe.min.js")).read_text()


class Page:
    """What Chromium saw on one page at one width: the DOM after scripts ran, the requests the
    page made, its console errors, and the reader checks of ``tests/reader_checks.js``."""

    def __init__(self, dom, requests, console, failed, layout, figures, math, axe, keys=()):
        self.dom, self.requests, self.console, self.failed = dom, requests, console, failed
        self.layout, self.figures, self.math, self.axe = layout, figures, math, axe
        self.keys = list(keys)

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.dom))


PAGES = sorted({str(Path(f).with_suffix(".html")) for f in _toc_files()})


@pytest.fixture(scope="module")
def reader(chromium, server, built_book):
    """Every page of the book at every width in :data:`WIDTHS`, loaded once in headless Chromium
    (Playwright driving Debian's chromium: no browser download). At 1280 px every slider of every
    figure is moved through every step; at 400 px through its first and last. The widths run side
    by side (the book build is the last test: the other core is free by then)."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("the browser checks need playwright (requirements.txt)")
    import asyncio

    script = READER_JS.read_text()
    axe_js = _axe_script()
    seen: dict[tuple[str, int], Page] = {}

    async def visit(context, name: str, width: int) -> None:
        page = await context.new_page()
        requests, console, failed = [], [], []
        page.on("request", lambda r: requests.append((r.url, "")))
        page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
        page.on("pageerror", lambda e: console.append(f"Uncaught {e}"))
        # errors, and MathJax's warnings (an option it does not know, a component of another version)
        page.on("console", lambda m: console.append(f"{m.text} ({m.location.get('url') or 'no URL'})")
                if m.type == "error" or (m.type == "warning" and "MathJax" in m.text) else None)
        page.on("response", lambda r: failed.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None)
        await page.goto(f"{server}/{name}", wait_until="load", timeout=120_000)
        await page.evaluate(axe_js)
        math = await page.evaluate("""async () => {
            const mj = window.MathJax;
            if (mj && mj.startup && mj.startup.promise) await mj.startup.promise;
            return {typeset: document.querySelectorAll('mjx-container').length,
                    assistive: document.querySelectorAll('mjx-container mjx-assistive-mml').length,
                    errors: document.querySelectorAll('mjx-merror').length};
        }""")
        await page.wait_for_timeout(200)   # dpclip-page.js fits wide formulas after typesetting
        await page.add_script_tag(content=script)
        layout = await page.evaluate("window.dpclipReader.page()")
        figures = await page.evaluate("o => window.dpclipReader.figures(o)", {"allSteps": width == WIDTHS[0]})
        keys = await press_slider_keys(page) if width == WIDTHS[0] else []
        dom = await page.content()
        axe, n_console, n_failed, n_requests = {}, len(console), len(failed), len(requests)
        for what, theme, run in AXE_PLAN[width]:
            await page.evaluate("t => { const d = document.documentElement.dataset; d.mode = t; d.theme = t; }", theme)
            await page.wait_for_timeout(50)
            result = await page.evaluate(run)
            axe[f"{what}, {theme}"] = [f"{v['id']} ({v['impact']}): {v['help']} — {len(v['nodes'])} node(s), e.g. "
                          + "; ".join(", ".join(map(str, n["target"])) + (" " + n.get("failureSummary", "").split("\n")[-1][:140])
                                      for n in v["nodes"][:2])
                          for v in result["violations"]]
        # axe-core's full run re-reads the page's stylesheets (its CSSOM preload) and resolves their
        # @import ("../basic.css" in the theme's styles/theme.css) against the *page's* URL: a 404 the
        # checking tool makes, not the reader's browser. Only those are dropped: a stylesheet the page
        # itself requested, and any other error while axe ran, still count.
        own_css = {url for url, _ in requests[:n_requests]}
        tool_made = re.compile(r"\((https?://[^)\s]+\.css)\b")
        console[n_console:] = [m for m in console[n_console:]
                               if not ((u := tool_made.search(m)) and "404" in m and u.group(1) not in own_css)]
        failed[n_failed:] = [m for m in failed[n_failed:]
                             if not (m.split(" ")[0].endswith(".css") and "404" in m and m.split(" ")[0] not in own_css)]
        seen[(name, width)] = Page(dom, requests, console, failed, layout, figures, math, axe, keys)
        await page.close()

    async def press_slider_keys(page) -> list[str]:
        """Each slider figure by keyboard: focus it, press End, Home, ArrowRight; the slider's step,
        its announced value and the drawn data follow; a focus ring shows."""
        problems = []
        sliders = page.locator(".dpclip-slider-keys[role=slider]")
        total = await page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
        with_slider = await page.evaluate(
            "Array.from(document.querySelectorAll('.js-plotly-plot')).filter(g => g._fullLayout && "
            "(g._fullLayout.sliders || []).length && g._fullLayout.sliders[0].steps.length > 1).length")
        if await sliders.count() != with_slider:
            problems.append(f"{with_slider} of {total} figures have a slider, {await sliders.count()} take the keyboard")
        for k in range(await sliders.count()):
            gd = sliders.nth(k)
            if await gd.get_attribute("tabindex") != "0":
                problems.append(f"slider figure {k}: not a tab stop")
            await gd.focus()
            for key, want in (("End", "last"), ("Home", 0), ("ArrowRight", 1)):
                before = await gd.evaluate(_SLIDER_STATE)
                target = before["n"] - 1 if want == "last" else want
                await page.keyboard.press(key)
                try:
                    await page.wait_for_function(
                        "([c, t]) => c.getAttribute('aria-valuenow') === String(t) && "
                        "document.getElementById(c.dataset.figure)._fullLayout.sliders[0].active === t",
                        arg=[await gd.element_handle(), target], timeout=5000)
                except Exception:
                    state = await gd.evaluate(_SLIDER_STATE)
                    problems.append(f"slider figure {k}: {key} should go to step {target}, it shows {state}")
                    break
                after = await gd.evaluate(_SLIDER_STATE)
                if before["now"] != after["now"] and before["sig"] == after["sig"] and before["n"] > 1:
                    problems.append(f"slider figure {k}: {key} moved the slider but not the drawn data")
                if not after["text"]:
                    problems.append(f"slider figure {k}: no aria-valuetext announces the value")
                if after["outline"] == "none":
                    problems.append(f"slider figure {k}: no visible focus ring")
        return problems

    async def one_width(browser, width: int) -> None:
        context = await browser.new_context(viewport={"width": width, "height": 900})
        for name in PAGES:
            await visit(context, name, width)
        await context.close()

    async def main() -> None:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            try:
                await asyncio.gather(*(one_width(browser, w) for w in WIDTHS))
            finally:
                await browser.close()

    asyncio.run(main())
    return seen


def test_chapter_plotly_figures_drew_with_a_slider(reader, built_book):
    page = reader[(CHAPTER, WIDTHS[0])]
    n_figures = len(re.findall(r'class="plotly-graph-div"', (built_book / CHAPTER).read_text()))
    assert n_figures >= 1, "the chapter has no plotly figure"
    assert page.count(r'class="main-svg"') >= n_figures, "plotly did not draw (no .main-svg)"
    drawn = page.count(r'class="[^"]*\bjs-plotly-plot\b')
    assert drawn >= n_figures, f"{drawn} of {n_figures} figures drawn"
    assert page.count(r'class="slider-container"') >= 1, "no plotly slider drawn"
    assert page.count(r'class="dpclip-legend"') >= 1, "no figure legend drawn (_static/dpclip-figures.js)"


@pytest.mark.parametrize("page_name", PAGES)
def test_math_typeset_and_no_errors(reader, built_book, page_name):
    for width in WIDTHS:
        page = reader[(page_name, width)]
        if 'class="math' in (built_book / page_name).read_text():
            assert page.math["typeset"] >= 1, "MathJax did not typeset (served from _static/mathjax?)"
            assert page.math["errors"] == 0, "MathJax reported a TeX error"
            assert page.math["assistive"] == page.math["typeset"], (
                f"{page.math['typeset'] - page.math['assistive']} formulas without the MathML that screen "
                "readers read aloud (MathJax component a11y/assistive-mml)")
        uncaught = [c for c in page.console if c.startswith("Uncaught")]
        assert not uncaught, f"JavaScript errors at {width} px:\n" + "\n".join(uncaught)
    untypeset = _raw_math_in_prose(reader[(page_name, WIDTHS[0])].dom)
    assert not untypeset, "math left as raw TeX in the prose:\n" + "\n".join(untypeset[:5])


@pytest.mark.parametrize("page_name", PAGES)
def test_the_page_fits_a_phone(reader, page_name):
    """At 400 px nothing makes the page scroll sideways (a wide table, equation or figure scrolls
    in its own box), and nothing is cut off at the edge of a theorem or admonition box."""
    for width in WIDTHS:
        layout = reader[(page_name, width)].layout
        assert layout["scrollWidth"] <= layout["clientWidth"], (
            f"at {width} px the page is {layout['scrollWidth']} px wide:\n" + "\n".join(layout["wide"]))
        assert not layout["wide"], f"at {width} px, wider than the page:\n" + "\n".join(layout["wide"])
        assert not layout["clipped"], f"at {width} px, cut off:\n" + "\n".join(layout["clipped"])


@pytest.mark.parametrize("page_name", PAGES)
def test_no_formula_or_figure_hides_behind_a_sideways_scroll(reader, page_name):
    """A reader sees every formula, every panel of a figure and every column of a table without
    scrolling a box sideways, at 1280 and at 400 px. A table wider than its column is set as one
    block per row (``_static/dpclip-page.js``, stackWideTables: a fifth reading of #28 met tables
    whose right-hand columns, the ones the text quoted, lay off a phone's screen). At
    400 px side-by-side panels stand one above the other (``_static/dpclip-figures.js``) and
    MathJax 4 breaks a formula at the width of its column (``_config.yml``, ``displayOverflow:
    linebreak``). #28's fourth reading: readers called the 72 formulas that scrolled inside their
    box on a phone (MathJax 3 broke no lines) cut off, shade or not."""
    problems = [f"{width} px: {s}" for width in WIDTHS for s in reader[(page_name, width)].layout["sideways"]]
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_no_line_starts_with_the_punctuation_after_a_formula(reader, page_name):
    """A fifth reading of #28 met lines starting ", the feedback…" and ". The lab's…": the line
    broke between a formula and its comma. The page keeps them together
    (``_static/dpclip-page.js``, gluePunctuation)."""
    problems = [f"{width} px: {s}" for width in WIDTHS for s in reader[(page_name, width)].layout["orphans"]]
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_no_markup_shows_as_text(reader, page_name):
    """What the page's scripts write (a slider's keyboard control, a legend) reads as text, not as
    markup: a fifth reading of #28 met "G = ‖g<sub>1</sub>‖" under a slider."""
    problems = [f"{width} px: {s!r}" for width in WIDTHS for s in reader[(page_name, width)].layout["markup"]]
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_no_formula_is_broken_into_a_narrow_column(reader, page_name):
    """MathJax 4 breaks a formula only where its column is too narrow: no displayed formula is cut
    into lines whose widest is under half its column (a fifth reading of #28: with the theme's flex
    ``div.math`` MathJax measured no width and set Theorem 6 one symbol per line at 1280 px)."""
    problems = [f"{width} px: {s}" for width in WIDTHS for s in reader[(page_name, width)].layout["squeezed"]]
    assert not problems, "\n".join(problems[:12])


def _figure_problems(reader, page_name, width, keep) -> list[str]:
    return [f"{fig['id']}: {p}" for fig in reader[(page_name, width)].figures for p in fig["problems"] if keep(p)]


_BLANK = re.compile(r"blank|none inside the axes|mostly outside its axes")
_HOVER = re.compile(r"^hover: ")
_CHECK_BROKE = re.compile(r"the check itself failed")


@pytest.mark.parametrize("page_name", PAGES)
def test_no_slider_step_leaves_a_figure_blank(reader, page_name):
    """At every step of every slider, each panel shows its data inside its axes (plotly does not
    rescale while animating: a frame drawn on another frame's ranges goes blank), and each named
    curve has most of its points inside them (#28's fourth reading: a bound drawn as a stub below
    the axis, two descents that left the top of their panel)."""
    problems = _figure_problems(reader, page_name, WIDTHS[0], lambda p: bool(_BLANK.search(p) or _CHECK_BROKE.search(p)))
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_figure_parts_do_not_overlap(reader, page_name):
    """Legend, slider, plot areas, titles and axis titles do not sit on one another, at 1280 and 400 px."""
    problems = []
    for width in WIDTHS:
        problems += [f"{width} px, {p}" for p in _figure_problems(
            reader, page_name, width, lambda p: not (_BLANK.search(p) or _HOVER.search(p)))]
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_hover_reads_values(reader, page_name):
    """Pointing at a curve shows its whole name and its values; bands draw no corner markers."""
    problems = _figure_problems(reader, page_name, WIDTHS[0], lambda p: bool(_HOVER.search(p)))
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_no_console_error_and_no_failed_request(reader, page_name):
    for width in WIDTHS:
        page = reader[(page_name, width)]
        assert not page.console, f"console errors at {width} px:\n" + "\n".join(page.console)
        assert not page.failed, f"failed requests at {width} px:\n" + "\n".join(page.failed)


@pytest.mark.parametrize("page_name", PAGES)
def test_sliders_move_by_keyboard(reader, page_name):
    """Every figure with a slider has a keyboard control (a tab stop with a focus ring, outside the
    figure's SVG); End, Home and ArrowRight move the slider (step, announced value, drawn frame)."""
    problems = reader[(page_name, WIDTHS[0])].keys
    assert not problems, "\n".join(problems[:12])


@pytest.mark.parametrize("page_name", PAGES)
def test_wcag_21_aa(reader, page_name):
    """axe-core finds no WCAG 2.0/2.1 A or AA violation at 1280 and 400 px in light and dark mode:
    every rule on every element, the article's contrast once per colour mode (:data:`AXE_PLAN`)."""
    problems = [f"{width} px, {what}: {v}" for width in WIDTHS
                for what, violations in reader[(page_name, width)].axe.items() for v in violations]
    assert not problems, "\n".join(problems[:16])


def test_the_reader_checks_can_fail(chromium, tmp_path):
    """Each figure and page check flags a page built to fail it (and passes a clean one)."""
    from playwright.sync_api import sync_playwright
    import plotly.graph_objects as go
    import plotly.io as pio
    import numpy as np

    x = np.linspace(0, 1, 30)
    fig = go.Figure([go.Scatter(x=x, y=x, name="a"), go.Scatter(x=x, y=1 - x, name="b")])
    fig.frames = [go.Frame(name="0", data=[go.Scatter(x=x, y=x), go.Scatter(x=x, y=1 - x)]),
                  go.Frame(name="1", data=[go.Scatter(x=x, y=100 + x), go.Scatter(x=x, y=101 - x)])]
    fig.update_layout(
        xaxis=dict(range=[0, 1], title="x"), yaxis=dict(range=[0, 1], title="y"), hovermode="closest",
        legend=dict(x=0.5, y=0.5),                                              # legend on the data
        sliders=[dict(steps=[dict(method="animate", label=k, args=[[k]]) for k in "01"], pad=dict(t=0))],
    )
    band = go.Figure([go.Scatter(x=[0, 1, 1, 0], y=[0, 0, 1, 1], fill="toself", mode="lines+markers",
                                 name="a band with a long, long name"),
                      go.Scatter(x=[0, 1], y=[0.5, 0.5], name="a line with a long, long name")])
    # a title wider than the phone, and a bottom axis title drawn on the subplot title below it
    band.update_layout(title="A title far too long to fit on a phone, which plotly draws on one line and cuts",
                       xaxis=dict(domain=[0, 1], title="x of the top panel"), yaxis=dict(domain=[0.55, 1]),
                       xaxis2=dict(anchor="y2"),
                       # plotly's own log labels over two decades: "2x10" for 20
                       yaxis2=dict(domain=[0, 0.5], type="log", range=[1, 3], exponentformat="power",
                                   minorloglabels="complete"),
                       annotations=[dict(text="the lower panel, its title under the axis title", x=0.5, y=0.42,
                                         xref="paper", yref="paper", showarrow=False, yanchor="middle")])
    band.add_trace(go.Scatter(x=[0, 1], y=[12, 600], xaxis="x2", yaxis="y2", name="lower"))
    for f in (fig, band):   # plotly's own template (the book's shows whole hover names)
        f.update_layout(template="plotly_white")
    # a figure of the book's renderer (meta.dpclip_legend) whose HTML legend was never built
    unlisted = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], name="DiceSGD"), go.Scatter(x=[0, 1], y=[1, 0], name="DPSGD-GC")],
                         layout=dict(meta={"dpclip_legend": None}, showlegend=False, template="plotly_white",
                                     # two tick labels drawn on each other
                                     yaxis=dict(tickvals=[0, 0.02], ticktext=["zero point", "near zero"])))
    # category labels that leave the bars no room on a phone
    squeezed = go.Figure(go.Bar(y=["a category label far too long for a phone, " * 2 + str(k) for k in range(3)],
                                x=[1, 2, 3], orientation="h"), layout=dict(template="plotly_white", showlegend=False))
    div = (pio.to_html(fig, include_plotlyjs=False, full_html=False) + pio.to_html(band, include_plotlyjs=False, full_html=False)
           + pio.to_html(unlisted, include_plotlyjs=False, full_html=False)
           + pio.to_html(squeezed, include_plotlyjs=False, full_html=False))
    plotly_js = ROOT / "_static" / "plotly.min.js"
    if not plotly_js.is_file():
        pytest.skip("_static/plotly.min.js is copied by the book build")
    (tmp_path / "plotly.min.js").write_bytes(plotly_js.read_bytes())
    wide = '<p>' + "x" * 30 + '<code class="literal" style="white-space:nowrap">' + "y" * 200 + "</code></p>"
    (tmp_path / "index.html").write_text(
        '<!doctype html><html><head><script src="plotly.min.js"></script></head><body><main>'
        + div + wide + '<div class="proof" style="width:100px;overflow:hidden"><span style="display:inline-block;width:300px">long</span></div>'
        # a formula and a figure row a reader sees only by scrolling their boxes sideways
        + '<mjx-container display="true" style="display:block;overflow-x:auto;width:200px"><span style="display:inline-block;width:500px">x = 1</span></mjx-container>'
        + '<div style="overflow-x:auto;width:200px"><div class="plotly-graph-div" style="width:600px;height:10px"></div></div>'
        + '<div style="overflow-x:auto;width:200px"><table style="width:600px"><tr><td>a wide table</td></tr></table></div>'
        + '<p>G = ‖g&lt;sub&gt;1&lt;/sub&gt;‖ = 500</p><pre>display(HTML("&lt;br&gt;"))</pre>'
        # a caption squeezed beside a table's block rows
        + '<table style="display:block;width:300px"><caption style="display:table-cell;width:40px">a caption of some length here</caption></table>'
        # a comma that starts a line after a formula
        + '<p style="width:60px">a <span class="math"><mjx-container style="display:inline-block;width:58px">x</mjx-container></span>, then</p>'
        # a formula cut into lines in a column four times its width
        + '<mjx-container display="true" style="display:block;width:380px"><mjx-math style="display:inline-block;width:90px">'
        + '<mjx-linebox>a</mjx-linebox><mjx-linebox>b</mjx-linebox></mjx-math></mjx-container>'
        + "</main></body></html>")
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 400, "height": 900})
            page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/index.html", wait_until="load")
            page.add_script_tag(content=READER_JS.read_text())
            layout = page.evaluate("window.dpclipReader.page()")
            figures = page.evaluate("o => window.dpclipReader.figures(o)", {"allSteps": True})
            browser.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert layout["scrollWidth"] > 400 and layout["wide"], "a page wider than the phone was not flagged"
    assert layout["clipped"], "content cut off at a box's edge was not flagged"
    assert any("squeezed to" in c for c in layout["clipped"]), layout["clipped"]
    assert [s.split(":")[0] for s in layout["sideways"]] == ["formula", "figure", "table"], layout["sideways"]
    assert len(layout["squeezed"]) == 1 and "broken into 2 lines" in layout["squeezed"][0], layout["squeezed"]
    assert len(layout["markup"]) == 1 and "g<sub>1</sub>" in layout["markup"][0], layout["markup"]
    assert len(layout["orphans"]) == 1 and layout["orphans"][0].startswith('", then"'), layout["orphans"]
    first, second, third, fourth = (f["problems"] for f in figures)
    assert any("no room for its data" in p for p in fourth) and not any("no room" in p for p in first), fourth
    assert any('the legend has no entry for "DiceSGD"' in p for p in third), third
    assert any("tick labels on each other" in p for p in third) and not any("tick labels" in p for p in first), third
    assert any("legend overlaps plot area" in p for p in first), first
    assert any("blank" in p for p in first), first
    assert any('curve "a" lies mostly outside its axes' in p for p in first), first
    assert not any("mostly outside" in p for p in second + third), second + third
    assert any("band trace" in p for p in second), second
    assert any("hover label cuts" in p for p in second), second
    assert any("cut at the figure's edge" in p for p in second), second
    assert any("an axis title on a title" in p for p in second), second
    assert any("20 written as 2×10" in p for p in second) and not any("written as" in p for p in first + third), second


def _raw_math_in_prose(dom: str) -> list[str]:
    """Pieces of prose that still show ``$...\\command...$`` or a bare ``x^y`` after MathJax ran."""
    t = re.sub(r'<div class="highlight.*?</div>', "", dom, flags=re.S)       # code and printed output
    t = re.sub(r"<mjx-container.*?</mjx-container>", " ", t, flags=re.S)     # typeset math
    t = re.sub(r"<(script|style|pre|code|textarea)\b.*?</\1>", " ", t, flags=re.S)
    t = re.sub(r'<div class="plotly-graph-div.*?</div>', " ", t, flags=re.S)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", t))
    hits = [m.group(0) for m in re.finditer(r".{0,40}\$[^$]{0,80}\\[a-zA-Z]+[^$]{0,80}\$.{0,20}", text)]
    hits += [m.group(0) for m in re.finditer(r".{0,40}\b[a-zA-Z]+\^\d[.\d]*.{0,20}", text)]
    return hits


@pytest.mark.parametrize("page_name", PAGES)
def test_no_request_leaves_localhost(reader, page_name):
    leaked = []
    for width in WIDTHS:
        page = reader[(page_name, width)]
        assert page.requests, "the browser recorded no request"
        for url, _frame in page.requests:
            if url.startswith(("data:", "blob:")) or urlparse(url).hostname in LOCAL_HOSTS:
                continue
            leaked.append(f"{url[:120]} ({width} px)")
    assert not leaked, "requests to the network:\n" + "\n".join(leaked)
