"""A chapter whose kernel never came up is executed again (at most ``ATTEMPTS`` times in all).

A kernel start normally takes under 1.5 s here, even with both cores busy. Once in CI
(stop 19) one kernel never answered ``kernel_info`` and its chapter failed after 60 s
without running a cell. Such a hang belongs to that one kernel process, so a fresh one
is the cure. The test suite restarts nbval's kernels (``conftest.py`` at the root) and
otter's gradings (``tests/test_assignments.py``). This extension does the same for the
book build, so ``make book`` and the test suite's build are not lost to one bad start.

Only a kernel that did not start is retried: nothing of the chapter ran, so running it
again changes nothing but the outcome of the start. A cell error, a timeout or a dead
kernel during execution is reported as before. The wrapper sits around
``single_nb_execution`` (jupyter-cache), which myst-nb calls for every chapter it
executes, in its ``force`` mode (``make book``) and in its ``cache`` mode (the test
suite's build, for chapters nbval did not leave in the cache).
"""
from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sphinx.application import Sphinx

#: jupyter_client's errors for a kernel that never answered: the chapter did not run at all.
KERNEL_START_FAILURES = ("Kernel didn't respond in", "Kernel died before replying to kernel_info")
#: Executions tried per chapter when the kernel does not come up.
ATTEMPTS = 3


def is_kernel_start_failure(err) -> bool:
    """True when ``err`` is jupyter_client's error for a kernel that never came up."""
    return isinstance(err, RuntimeError) and any(s in str(err) for s in KERNEL_START_FAILURES)


def _check_attempts(attempts: int) -> int:
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    return attempts


def with_retries(start, attempts: int, what: str, retry_if=is_kernel_start_failure):
    """``start()``, tried up to ``attempts`` times while the error it raises satisfies ``retry_if``
    (default: a kernel that did not start); the last such error, and any other at once, propagate.
    Shared by the book build (:func:`retrying`), nbval's chapters (root ``conftest.py``) and otter's
    gradings (``tests/test_assignments.py``)."""
    _check_attempts(attempts)
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception as exc:
            if attempt == attempts or not retry_if(exc):
                raise
            print(f"{what}: start {attempt} of {attempts} failed ({exc}); starting a new kernel",
                  file=sys.stderr, flush=True)


def retrying(execute, attempts: int = ATTEMPTS):
    """``execute`` (jupyter-cache's ``single_nb_execution``, through which a kernel that did not start
    raises jupyter_client's ``RuntimeError``), run again while its kernel did not start, at most
    ``attempts`` times; the last such error propagates, and every other outcome at once."""
    _check_attempts(attempts)

    @functools.wraps(execute)
    def run(nb, *args, **kwargs):
        return with_retries(lambda: execute(nb, *args, **kwargs), attempts, "book build")

    run.dpclip_retries = attempts
    return run


def install() -> None:
    """Wrap the ``single_nb_execution`` that myst-nb's direct and cache executors call (once)."""
    from myst_nb.core.execute import cache, direct
    for module in (direct, cache):
        if not hasattr(module.single_nb_execution, "dpclip_retries"):
            module.single_nb_execution = retrying(module.single_nb_execution)


def setup(app: Sphinx):
    install()
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
