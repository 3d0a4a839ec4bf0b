"""What restarts a kernel whose start hangs: nbval's chapters (root ``conftest.py``) and the book build
(``_ext/kernel_start_retry.py``)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plumbing(request):
    """The root ``conftest.py`` as pytest loaded it (``tests/conftest.py`` shares its module name)."""
    module = request.config.pluginmanager.get_plugin(str(ROOT / "conftest.py"))
    assert module is not None and hasattr(module, "with_retries")
    return module


class FlakyStart:
    """A start that raises ``error`` for its first ``failures`` calls, then returns ``"kernel"``."""

    def __init__(self, failures: int, error: Exception | None = None):
        self.failures, self.calls = failures, 0
        self.error = error or RuntimeError("Kernel didn't respond in 45 seconds")

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "kernel"


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_a_failed_start_is_retried_with_a_new_kernel(plumbing, failures, capsys):
    start = FlakyStart(failures)
    assert plumbing.with_retries(start, 3, "chapter") == "kernel"
    assert start.calls == failures + 1
    assert capsys.readouterr().err.count("starting a new kernel") == failures


def test_the_last_failure_propagates(plumbing):
    start = FlakyStart(5)
    with pytest.raises(RuntimeError, match="didn't respond"):
        plumbing.with_retries(start, 3, "chapter")
    assert start.calls == 3


def test_other_errors_are_not_retried(plumbing):
    start = FlakyStart(1, error=FileNotFoundError("sanitize file"))
    with pytest.raises(FileNotFoundError):
        plumbing.with_retries(start, 3, "chapter")
    assert start.calls == 1
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        plumbing.with_retries(start, 0, "chapter")


def _fake_notebook(tmp_path: Path, startup_timeout: int):
    """What nbval's ``IPyNbFile.setup`` reads from a notebook collector, and nothing else."""
    option = SimpleNamespace(nbval_current_env=False, nbval_kernel_name=None,
                             nbval_kernel_startup_timeout=startup_timeout)
    config = SimpleNamespace(option=option)
    return SimpleNamespace(parent=SimpleNamespace(config=config), config=config, nb=SimpleNamespace(metadata={}),
                           fspath=SimpleNamespace(dirname=str(tmp_path)), path=tmp_path / "chapter.ipynb",
                           setup_sanitize_files=lambda: None, kernel=None)


@pytest.mark.parametrize("failures, started", [(2, True), (3, False)])
def test_nbvals_kernel_start_is_retried(plumbing, monkeypatch, tmp_path, request, failures, started):
    """nbval's own setup, as this session runs it: two hung starts are survived, a third is not."""
    import nbval.plugin

    assert getattr(nbval.plugin.IPyNbFile.setup, "_dpclip_retries", False)
    timeout = request.config.option.nbval_kernel_startup_timeout
    assert 0 < float(timeout) * plumbing.KERNEL_START_ATTEMPTS <= 300  # a hung chapter costs minutes, not the run
    seen = []
    flaky = FlakyStart(failures)
    monkeypatch.setattr(nbval.plugin, "RunningKernel", lambda name, cwd, startup_timeout: seen.append(startup_timeout) or flaky())
    notebook = _fake_notebook(tmp_path, timeout)
    if started:
        nbval.plugin.IPyNbFile.setup(notebook)
        assert notebook.kernel == "kernel"
    else:
        with pytest.raises(RuntimeError):
            nbval.plugin.IPyNbFile.setup(notebook)
    assert seen == [timeout] * min(failures + 1, plumbing.KERNEL_START_ATTEMPTS)


# -- the book build's side: _ext/kernel_start_retry.py ------------------------------------------------

@pytest.fixture(scope="module")
def build_retry():
    import importlib.util
    spec = importlib.util.spec_from_file_location("kernel_start_retry", ROOT / "_ext" / "kernel_start_retry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("err, start_failed", [
    (RuntimeError("Kernel didn't respond in 60 seconds"), True),
    (RuntimeError("Kernel died before replying to kernel_info"), True),
    (RuntimeError("Kernel died"), False),                 # during execution (nbclient's DeadKernelError text)
    (TimeoutError("Kernel didn't respond in 60 seconds"), False),
    (None, False),
])
def test_only_a_kernel_that_never_came_up_counts(build_retry, err, start_failed):
    assert build_retry.is_kernel_start_failure(err) is start_failed


def _execution(*errors):
    """A fake ``single_nb_execution`` raising these errors in turn (None: it returns "executed"); its calls."""
    calls = []

    def execute(nb, **kwargs):
        calls.append(nb)
        if errors[len(calls) - 1] is not None:
            raise errors[len(calls) - 1]
        return "executed"
    return execute, calls


def test_the_build_executes_a_chapter_again_only_when_its_kernel_did_not_start(build_retry):
    hung = RuntimeError("Kernel didn't respond in 60 seconds")
    execute, calls = _execution(hung, hung, None)
    assert build_retry.retrying(execute)("nb", cwd=".") == "executed" and calls == ["nb"] * 3
    execute, calls = _execution(hung, hung, hung, None)
    with pytest.raises(RuntimeError) as info:
        build_retry.retrying(execute)("nb")
    assert info.value is hung and len(calls) == build_retry.ATTEMPTS == 3
    dead = RuntimeError("Kernel died")  # during execution: reported, not retried
    execute, calls = _execution(dead, None)
    with pytest.raises(RuntimeError, match="Kernel died"):
        build_retry.retrying(execute)("nb")
    assert len(calls) == 1
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        build_retry.retrying(execute, attempts=0)


def test_the_build_retries_a_real_execution(build_retry, monkeypatch, tmp_path):
    """myst-nb's own executors get the wrapper, once; a notebook whose first kernel start fails runs
    on the second (a real kernel through jupyter-cache's single_nb_execution and nbclient)."""
    import nbformat
    from myst_nb.core.execute import cache, direct
    from nbclient.client import NotebookClient

    for module in (direct, cache):
        monkeypatch.setattr(module, "single_nb_execution", module.single_nb_execution)  # restored afterwards
    unwrapped = direct.single_nb_execution
    build_retry.install()
    build_retry.install()  # idempotent: one wrapper, not two
    assert direct.single_nb_execution.dpclip_retries == cache.single_nb_execution.dpclip_retries == 3
    assert direct.single_nb_execution.__wrapped__ is unwrapped

    starts = []
    real_start = NotebookClient.async_start_new_kernel_client

    async def flaky_start(self):
        starts.append(1)
        if len(starts) == 1:
            raise RuntimeError("Kernel didn't respond in 60 seconds")
        return await real_start(self)
    monkeypatch.setattr(NotebookClient, "async_start_new_kernel_client", flaky_start)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    result = direct.single_nb_execution(nb, cwd=str(tmp_path), timeout=60, allow_errors=False)
    assert result.err is None and len(starts) == 2
    assert nb.cells[0].outputs[0]["text"].strip() == "42"
