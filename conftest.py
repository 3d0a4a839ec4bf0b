"""Test-session plumbing shared by ``tests/`` and the notebooks under ``book/`` (nbval).

One execution of each chapter serves two checks
-----------------------------------------------
``make test`` validates every chapter with nbval *and* builds the book with ``-W``. Both
used to execute every chapter, and an execution is most of what a test run costs. Here,
nbval runs each chapter in the environment of the book build (the variables that
``_ext/offline_assets.py`` gives the build's kernels: ``DPCLIP_HTML_ONLY=1``, the Binder
link), and when every code cell of a chapter passed, the executed notebook (nbval's
outputs, cell by cell) is written to :data:`EXECUTED`. The book-build test
(``tests/test_book_html.py``) puts those notebooks into a jupyter-cache that the build
reads (``_ext/reuse_executions.py``): a chapter whose code is unchanged is not executed
again; any other is executed by the build as usual.

Only executions of this session are reused: each pytest session keeps them in a folder of its
own under :data:`EXECUTED` (:func:`session_dir`, named by the controller's process id), so a
second pytest started while a full run goes on can neither delete nor overwrite the first
one's (it once did: the build then waited 15 minutes for two chapters whose executions a small
second session had emptied). The same holds for ``otter assign``: the classroom tests and the
book build (which writes the student copies the pages link) share its output per master
through :data:`ASSIGN_CACHE` (``DPCLIP_ASSIGN_CACHE``, ``tools/assign.py``). A chapter that failed under nbval leaves a ``.failed`` marker (so the
build does not wait for it) and is executed by the build, which fails on it too.

Scheduling (``make test``: ``-n 2 --dist loadfile --no-loadscope-reorder``)
----------------------------------------------------------------------------
Each test file is one unit of xdist work (a notebook's cells share one kernel), except
``tests/test_assignments.py``, which is one unit per master notebook (each grading is an
execution of a whole chapter: as one unit they were a long serial block on one worker);
:func:`pytest_xdist_make_scheduler`. (Not ``--dist loadgroup``: with pytest 9.2 and
pytest-xdist 3.8 its group marks are silently ignored — xdist rewrites ``item._nodeid``,
which pytest no longer reads.)
Groups are queued longest first — the classroom gradings and the chapters, then the lab's
test files — and the book-build test last: it waits for the chapters nbval is running in
this session (:func:`wait_for_executions`) and then reuses them.
"""
from __future__ import annotations

import copy
import functools
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
#: Executed chapters, one folder per session: ``<session>/<path under book/>.ipynb`` or ``….failed``.
EXECUTED = ROOT / "_build" / ".nbval-executed"
#: ``otter assign`` outputs, one folder per session (``tools/assign.py``), reused by the book build.
ASSIGN_CACHE = ROOT / "_build" / ".assign-cache"
#: Environment variable naming this pytest session (the controller's process id); workers inherit it.
SESSION_ENV = "DPCLIP_TEST_SESSION"
BOOK_TEST = "tests/test_book_html.py"
ASSIGNMENT_TEST = "tests/test_assignments.py"


def _is_nbval_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and str(getattr(item, "path", "")).endswith(".ipynb")


def book_kernel_env() -> dict[str, str]:
    """The environment variables the book build gives its kernels (``_ext/offline_assets.py``)."""
    import importlib.util

    from jupyter_book.config import get_final_config

    spec = importlib.util.spec_from_file_location("_dpclip_offline_assets", ROOT / "_ext" / "offline_assets.py")
    assets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(assets)
    sphinx_config, _ = get_final_config(user_yaml=ROOT / "_config.yml", cli_config={"latex_individualpages": False}, sourcedir=ROOT)
    env = {"DPCLIP_HTML_ONLY": "1"}
    binder = assets.binder_tree_url(dict(sphinx_config.get("html_theme_options") or {}))
    if binder:
        env.update({"DPCLIP_BINDER_URL": binder, "DPCLIP_BOOK_ROOT": str(ROOT)})
    return env


@contextmanager
def _environ(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def session_dir(base: Path) -> Path:
    """This pytest session's folder under ``base`` (:data:`EXECUTED` or :data:`ASSIGN_CACHE`)."""
    return base / os.environ.get(SESSION_ENV, str(os.getpid()))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _start_session() -> None:
    """Name this session and remove the folders of sessions whose controller is gone."""
    os.environ[SESSION_ENV] = str(os.getpid())
    for base in (EXECUTED, ASSIGN_CACHE):
        if not base.is_dir():
            continue
        for old in base.iterdir():
            running = (old.is_dir() and old.name.isdigit() and old.name != str(os.getpid())
                       and _pid_alive(int(old.name)))
            if running:
                continue  # another pytest session's, still going
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def executed_path(notebook: Path, suffix: str = ".ipynb") -> Path:
    """Where this session's nbval execution of ``notebook`` is written."""
    rel = Path(notebook).resolve().relative_to(ROOT)
    return session_dir(EXECUTED) / rel.with_suffix(suffix)


# --------------------------------------------------------------------------- session

#: Variables that size the thread pools of torch, OpenMP and the BLAS libraries.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _share_the_cores(workers: int) -> None:
    """Give each xdist worker (and every kernel, grading and build it starts) its share of the cores.

    Each worker's process and the kernels it starts would otherwise each run one thread per
    core: with ``-n 2`` on two cores, four busy threads on two cores. Measured (four chapters under
    nbval, ``-n 2``, 2 cores): 67 s with the default pools, 50 s with one thread each. A variable the
    caller set is kept.
    """
    threads = max(1, (os.cpu_count() or 1) // workers)
    for name in THREAD_VARS:
        os.environ.setdefault(name, str(threads))
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        _start_session()
    else:
        os.environ[SESSION_ENV] = config.workerinput.get(SESSION_ENV) or os.environ.get(SESSION_ENV, "")
        _share_the_cores(int(config.workerinput.get("workercount", 1)))
    # otter assign's output per master, shared by the classroom tests and the book build
    # (tools/assign.py, ASSIGN_CACHE_ENV); subprocesses inherit it.
    os.environ["DPCLIP_ASSIGN_CACHE"] = str(session_dir(ASSIGN_CACHE))
    config._dpclip_kernel_env = None
    _retry_kernel_starts()


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_configure_node(node):
    """Tell each worker the session's name (it also inherits the controller's environment)."""
    node.workerinput[SESSION_ENV] = os.environ[SESSION_ENV]


def _rank(item) -> int:
    """Queue rank of a test: gradings, then chapters, then the lab's tests, the book build last."""
    rel = _rel(str(item.path))
    if rel == BOOK_TEST:
        return 3
    if rel == ASSIGNMENT_TEST:
        return 0 if getattr(getattr(item, "callspec", None), "params", {}).get("made") is not None else 2
    return 1 if _is_nbval_cell(item) else 2


def _rel(path: str) -> str:
    p = Path(path).resolve()
    return p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else p.as_posix()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    ranked = sorted(enumerate(items), key=lambda r: (_rank(r[1]), r[0]))  # stable within a rank
    items[:] = [item for _, item in ranked]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest -p no:xdist must still start
def pytest_xdist_make_scheduler(config, log):
    """Each test file is one unit of work, except one per master notebook in the classroom tests."""
    from xdist.scheduler import LoadScopeScheduling

    class ChapterScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file, _, rest = nodeid.partition("::")
            if file == ASSIGNMENT_TEST and "[" in rest:
                params = rest[rest.index("[") + 1:rest.rindex("]")]
                return f"{file}::{params.split('-')[0]}"  # the master (the first parameter, ``made``)
            return file

    return ChapterScheduling(config, log)


# --------------------------------------------------------------------------- nbval

#: Kernel starts nbval tries per chapter before the chapter errors. A start normally takes
#: under 1.5 s here, even with both cores busy; once in CI (stop 19) one kernel never
#: answered ``kernel_info`` and nbval gave up after its 60 s, failing every cell of the
#: chapter. A hung start is a property of that one kernel process, so a fresh one is
#: the cure; each try waits ``--nbval-kernel-startup-timeout`` seconds (pyproject.toml).
KERNEL_START_ATTEMPTS = 3


@functools.lru_cache(maxsize=None)
def _load_kernel_start_retry():
    """``_ext/kernel_start_retry.py`` (the book build's extension; its retry loop is shared)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kernel_start_retry", ROOT / "_ext" / "kernel_start_retry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_retries(start, attempts: int, what: str):
    """``start()``, tried up to ``attempts`` times while it raises ``RuntimeError`` (jupyter_client's
    error for a kernel that died or did not answer, and nbval's own start errors); the last error
    propagates."""
    return _load_kernel_start_retry().with_retries(start, attempts, what,
                                                   retry_if=lambda exc: isinstance(exc, RuntimeError))


def _retry_kernel_starts() -> None:
    """Make nbval's per-notebook setup (which starts the kernel) use :func:`with_retries`."""
    try:
        from nbval.plugin import IPyNbFile
    except ImportError:  # nbval not installed: no notebooks are collected
        return
    if getattr(IPyNbFile.setup, "_dpclip_retries", False):
        return
    start_kernel = IPyNbFile.setup

    def setup(self):
        # nbval's start_new_kernel shuts a kernel down itself when it fails to answer
        return with_retries(lambda: start_kernel(self), KERNEL_START_ATTEMPTS, f"nbval kernel for {self.path.name}")

    setup._dpclip_retries = True
    IPyNbFile.setup = setup


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Start a chapter's kernel (nbval does it in the first cell's setup) in the book's environment."""
    if not _is_nbval_cell(item):
        yield
        return
    config = item.config
    if config._dpclip_kernel_env is None:
        config._dpclip_kernel_env = book_kernel_env()
    with _environ(config._dpclip_kernel_env):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not _is_nbval_cell(item) or call.when != "call":
        return
    report = outcome.get_result()
    runs = item.parent.__dict__.setdefault("_dpclip_runs", {})
    runs[item.cell_num] = (report.passed, copy.deepcopy(getattr(item, "test_outputs", None)))


def pytest_runtest_teardown(item, nextitem):
    if not _is_nbval_cell(item) or (nextitem is not None and nextitem.parent is item.parent):
        return
    _write_execution(item.parent)


def _write_execution(nbfile) -> None:
    """The executed notebook, if every code cell ran and passed; else a ``.failed`` marker."""
    import nbformat

    runs = nbfile.__dict__.get("_dpclip_runs", {})
    nb = copy.deepcopy(nbfile.nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    ok = len(runs) == len(code) and all(passed and outs is not None for passed, outs in runs.values())
    target = executed_path(Path(str(nbfile.path)))
    target.parent.mkdir(parents=True, exist_ok=True)
    if not ok:
        missing = [i for i in range(len(code)) if i not in runs]
        bad = sorted(i for i, (passed, outs) in runs.items() if not passed or outs is None)
        target.with_suffix(".failed").write_text(
            f"nbval: cells that did not run: {missing}; failed or skipped: {bad} (of {len(code)} code cells)\n")
        return
    for count, cell in enumerate(code, start=1):
        _, outs = runs[count - 1]
        cell.outputs = [nbformat.from_dict(dict(o)) for o in outs]
        cell.execution_count = count  # one execute_request per cell, in order
    tmp = target.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(target)  # atomic: the book-build test never reads half a notebook


def wait_for_executions(session, timeout: float) -> dict[Path, Path]:
    """Wait until nbval has finished every chapter it runs in this session; {notebook: executed copy}.

    Chapters not run by nbval in this session, failed ones, and those still unfinished
    at ``timeout`` are left out (the book build executes them itself).
    """
    notebooks = sorted({Path(str(item.path)).resolve() for item in session.items if _is_nbval_cell(item)})
    deadline = time.monotonic() + timeout
    pending = list(notebooks)
    while pending and time.monotonic() < deadline:
        pending = [nb for nb in pending
                   if not (executed_path(nb).is_file() or executed_path(nb, ".failed").is_file())]
        if pending:
            time.sleep(2.0)
    return {nb: executed_path(nb) for nb in notebooks if executed_path(nb).is_file()}


#: Seconds the book-build test waits for chapters still running under nbval on another worker.
WAIT_FOR_EXECUTIONS_S = 900
#: The jupyter-cache the book-build test fills with this session's executions.
TEST_CACHE = ROOT / "_build" / ".jupyter_cache_tests"


@pytest.fixture(scope="session")
def execution_cache(request) -> tuple[Path, list[Path]]:
    """A jupyter-cache holding this session's nbval executions: (cache folder, chapters in it).

    The book-build test passes the folder to the build (``DPCLIP_EXECUTION_CACHE``,
    read by ``_ext/reuse_executions.py``).
    """
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    executed = wait_for_executions(request.session, WAIT_FOR_EXECUTIONS_S)
    shutil.rmtree(TEST_CACHE, ignore_errors=True)
    cache = get_cache(TEST_CACHE)
    for notebook, copy_ in executed.items():
        nb = nbformat.read(copy_, as_version=4)
        cache.cache_notebook_bundle(CacheBundleIn(nb, str(notebook), data={"executed_by": "nbval"}),
                                    check_validity=False, overwrite=True)
    return TEST_CACHE, sorted(executed)
