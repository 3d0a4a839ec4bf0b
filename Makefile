# Two commands:
#   make book   build the HTML book (executes every notebook; warnings fail)
#   make test   run every test (pytest: lab tests, notebooks via nbval, the book
#               build with -W and the headless-browser check of the built HTML)
# Both create .venv/ from requirements.txt first if it is missing.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dpclip-installed

.PHONY: help book test venv clean assignments course reader

help:
	@echo "make book   build the HTML book into _build/html (creates .venv/ if missing)"
	@echo "make test   run all tests, including the book build and the browser check"
	@echo "make assignments  student + autograder copies of the exercises in _build/assignments"
	@echo "make course  the course edition for instructors in _build/course: site/ (no solutions), student/, autograder/"
	@echo "make reader  the chapters as a reader opens them in Jupyter (what Binder shows) in reader/"
	@echo "make clean  remove _build/"

# PyTorch: the CPU build by default. PyPI's Linux torch wheel is the CUDA build (several GB of GPU
# libraries), so torch comes from PyTorch's CPU index -- unless pip already finds the pinned release
# without any index (a local wheel, as on the CI machines, which have no route to that index; its
# dependencies then come with requirements.txt).
# For a GPU:  make book TORCH_INDEX=https://download.pytorch.org/whl/cu128  (or TORCH_INDEX=pypi).
TORCH_VERSION := $(shell sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.txt)
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu

# The stamp records that requirements.txt and the package were installed; it is
# redone only when requirements.txt or pyproject.toml change.
$(STAMP): requirements.txt pyproject.toml
	@if [ ! -x $(BIN)/python ]; then \
	    echo "creating $(VENV)/ with $(PYTHON) ($$($(PYTHON) --version))"; \
	    $(PYTHON) -m venv $(VENV); \
	fi
	@if $(BIN)/python -m pip install --disable-pip-version-check -q --no-index --no-deps "torch==$(TORCH_VERSION)" 2>/dev/null; then \
	    echo "torch $(TORCH_VERSION): found without an index"; \
	elif [ "$(TORCH_INDEX)" = "pypi" ]; then \
	    $(BIN)/python -m pip install --disable-pip-version-check "torch==$(TORCH_VERSION)"; \
	else \
	    $(BIN)/python -m pip install --disable-pip-version-check "torch==$(TORCH_VERSION)" --index-url $(TORCH_INDEX); \
	fi
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements.txt -e .
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	    git config filter.strip-outputs.clean "$(BIN)/python tools/strip_outputs.py"; \
	    echo "git: notebooks are committed without outputs (filter strip-outputs, .gitattributes)"; \
	fi
	@touch $@

venv: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --all -W --keep-going
	@echo
	@echo "The book is built. Open $(CURDIR)/_build/html/index.html"

# Two workers (the machine has 2 cores). conftest.py's scheduler keeps each file on one
# worker (a notebook's cells share one kernel; the book is built once) but gives each
# classroom grading its own unit, and queues work longest first, the book build last (it
# reuses the chapters nbval executed). --no-loadscope-reorder keeps that queue order.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

assignments: $(STAMP)
	$(BIN)/python tools/assign.py --check

# The course edition (README, "Classroom"): the book without solutions in _build/course/site
# (publish it), the student notebooks in _build/course/student, the autograder zips (every test,
# hidden ones included: keep them private) in _build/course/autograder. Reuses the chapters that
# the last `make book` executed (_build/jupyter_execute) where they are unchanged.
course: $(STAMP)
	$(BIN)/python tools/assign.py --course _build/course

# The reader copies (tools/reader.py; README, "Jupyter, locally"): what Binder's postBuild writes.
reader: $(STAMP)
	$(BIN)/python tools/reader.py --out reader

clean:
	rm -rf _build
