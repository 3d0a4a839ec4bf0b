"""Let the test suite's book build reuse the chapter executions nbval has just done.

With ``DPCLIP_EXECUTION_CACHE=<folder>`` in the environment, the build reads executed
notebooks from that jupyter-cache (myst-nb's ``cache`` mode) instead of executing every
chapter: a chapter whose code cells match a cached execution gets its outputs from
there; any other chapter is executed as usual. Only ``make test`` sets the variable
(``conftest.py`` at the repository root fills the cache from nbval's runs of the same
session, in the book build's kernel environment); ``make book`` executes everything
(``execute_notebooks: force`` in ``_config.yml``).
"""
from __future__ import annotations

import os

from sphinx.application import Sphinx
from sphinx.config import Config

ENV = "DPCLIP_EXECUTION_CACHE"


def _config_inited(app: Sphinx, config: Config) -> None:
    path = os.environ.get(ENV)
    if path:  # myst-nb reads these at builder-inited, after this
        config.nb_execution_mode = "cache"
        config.nb_execution_cache_path = path


def setup(app: Sphinx):
    app.connect("config-inited", _config_inited)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
