"""The book as a reader sees it.

1. Builds the book once per test session, exactly as ``make book`` does
   (``jupyter-book build . --all -W --keep-going``: every notebook executed,
   any warning or cell error fails). Set ``DPCLIP_REUSE_BUILD=1`` to test an
   existing ``_build/html`` instead (for quick iterations after ``make book``).
2. Checks the HTML for anything that would need the network at read time.
3. Serves ``_build/html`` on 127.0.0.1 and loads pages in headless Chromium
   (Debian's ``chromium``; no browser download): plotly figures drew, sliders
   exist, widgets rendered, MathJax typeset the equations, no JavaScript error,
   and no request left localhost.

Without chromium the browser tests skip (``apt-get install chromium``), except
under CI (``CI`` set), where they fail.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTER = "book/clipping_in_one_picture.html"
BUILD_TIMEOUT_S = 25 * 60
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
#: Chromium's own services (update checks, accounts, time) that it contacts by
#: itself despite the flags; they are not initiated by the page.
BROWSER_OWN_HOSTS = re.compile(r"(^|\.)(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)$")
#: Known, harmless console errors from the Jupyter Book 1 stack itself.
KNOWN_CONSOLE_ERRORS = (
    # sphinx-thebe 0.3 adds its config script twice; the first copy works.
    "Identifier 'THEBE_JS_URL' has already been declared",
)
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


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
def built_book() -> Path:
    if os.environ.get("DPCLIP_REUSE_BUILD") == "1" and (HTML / "index.html").is_file():
        return HTML
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(ROOT), "--all", "-W", "--keep-going"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the book build took more than {BUILD_TIMEOUT_S} s")
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr)[-8000:]
        reports = "\n".join(p.read_text()[-3000:] for p in (ROOT / "_build/html/reports").rglob("*.log")) \
            if (ROOT / "_build/html/reports").is_dir() else ""
        pytest.fail(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{out}\n{reports}")
    return HTML


def test_book_builds_with_warnings_as_errors(built_book):
    assert (built_book / "index.html").is_file()
    assert (built_book / CHAPTER).is_file()


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


def test_scripts_are_served_from_static_in_order(built_book):
    page = (built_book / CHAPTER).read_text()
    srcs = re.findall(r"<script[^>]*\bsrc=\"([^\"?]+)", page)
    names = [Path(s).name for s in srcs]
    order = [names.index(n) for n in ("require.js", "embed-amd.js", "plotly.min.js")]
    assert order == sorted(order), f"script order: {names}"
    assert names.count("require.js") == 1 and names.count("tex-chtml-full.js") == 1
    import plotly
    shipped = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert (built_book / "_static" / "plotly.min.js").read_bytes() == shipped.read_bytes()
    assert (built_book / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


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


class Page:
    """What Chromium saw: the DOM after scripts ran, its requests, its console."""

    def __init__(self, dom: str, requests: list[tuple[str, str]], console: list[str]):
        self.dom, self.requests, self.console = dom, requests, console

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.dom))


def _requests_from_netlog(path: Path) -> list[tuple[str, str]]:
    """``(url, initiator)`` of every URL request in a Chromium NetLog file."""
    log = json.loads(path.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    out = []
    for event in log["events"]:
        if event.get("type") == start_job and "url" in event.get("params", {}):
            out.append((event["params"]["url"], event["params"].get("initiator", "")))
    return out


@pytest.fixture(scope="module")
def load(chromium, server):
    cache: dict[str, Page] = {}

    def _load(page: str) -> Page:
        if page not in cache:
            with tempfile.TemporaryDirectory() as tmp:
                tmp = Path(tmp)
                cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
                       f"--log-net-log={tmp / 'net.json'}", "--enable-logging=stderr", "--v=0",
                       "--virtual-time-budget=15000", "--dump-dom", f"{server}/{page}"]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                                      stdin=subprocess.DEVNULL)
                assert proc.returncode == 0, f"chromium failed on {page}:\n{proc.stderr[-3000:]}"
                console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
                cache[page] = Page(proc.stdout, _requests_from_netlog(tmp / "net.json"), console)
        return cache[page]

    return _load


def _js_errors(page: Page) -> list[str]:
    """Uncaught exceptions and rejected promises (Chromium logs them as "Uncaught ...")."""
    return [line for line in page.console
            if "Uncaught" in line and not any(k in line for k in KNOWN_CONSOLE_ERRORS)]


PAGES = sorted({str(Path(f).with_suffix(".html")) for f in _toc_files()})


def test_chapter_plotly_figures_drew_with_a_slider(load, built_book):
    page = load(CHAPTER)
    n_figures = len(re.findall(r'class="plotly-graph-div"', (built_book / CHAPTER).read_text()))
    assert n_figures >= 1, "the chapter has no plotly figure"
    assert page.count(r'class="main-svg"') >= n_figures, "plotly did not draw (no .main-svg)"
    drawn = page.count(r'class="[^"]*\bjs-plotly-plot\b')
    assert drawn >= n_figures, f"{drawn} of {n_figures} figures drawn"
    assert page.count(r'class="slider-container"') >= 1, "no plotly slider drawn"


def test_chapter_widget_rendered(load, built_book):
    static = (built_book / CHAPTER).read_text()
    n_views = static.count('type="application/vnd.jupyter.widget-view+json"')
    if n_views == 0:
        pytest.skip("the chapter has no ipywidget")
    page = load(CHAPTER)
    assert page.count(r'class="[^"]*\bjupyter-widgets\b[^"]*\bwidget-(?:slider|hslider|dropdown|box|vbox)') >= 1, \
        "ipywidgets did not render (require.js / embed-amd.js missing?)"


@pytest.mark.parametrize("page_name", PAGES)
def test_math_typeset_and_no_errors(load, built_book, page_name):
    page = load(page_name)
    if 'class="math' in (built_book / page_name).read_text():
        assert page.count(r"<mjx-container") >= 1, "MathJax did not typeset (served from _static/mathjax?)"
        assert page.count(r"<mjx-merror") == 0, "MathJax reported a TeX error"
    errors = _js_errors(page)
    assert not errors, "JavaScript errors:\n" + "\n".join(errors)


@pytest.mark.parametrize("page_name", PAGES)
def test_no_request_leaves_localhost(load, page_name):
    page = load(page_name)
    assert page.requests, "the NetLog recorded no request"
    leaked, internal = [], []
    for url, initiator in page.requests:
        host = urlparse(url).hostname
        if url.startswith(("data:", "blob:")) or host in LOCAL_HOSTS:
            continue
        if initiator.startswith("http") or not BROWSER_OWN_HOSTS.search(host or ""):
            leaked.append(f"{url[:120]} (initiator {initiator})")
        else:
            internal.append(url)
    assert not leaked, "requests to the network:\n" + "\n".join(leaked)
