"""The test plumbing that restarts a chapter's kernel when its start hangs (root ``conftest.py``)."""
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
