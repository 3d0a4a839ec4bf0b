"""Make the classroom copies of the book's chapters with otter-grader (``make assignments``).

Every chapter notebook that holds exercises is an otter-grader 7 *master notebook*
(otter assign, format v1). The book renders the master itself: exercises with their
solutions folded away. This script turns each master into

* ``_build/assignments/<chapter>/student/<chapter>.ipynb`` — solutions replaced by
  ``...``, an otter init cell at the top, a ``grader.check("qN")`` cell after each
  exercise (public tests only);
* ``_build/assignments/<chapter>/autograder/`` — the solution notebook, and
  ``<chapter>-autograder_<timestamp>.zip`` with all tests, public and hidden, for
  ``otter run`` (local grading, no Docker).

Usage::

    python tools/assign.py                 # every master under book/
    python tools/assign.py --check         # ... and grade the solutions (must score 100%)
    python tools/assign.py book/part1/no_gradient_field.ipynb --out /tmp/assignments

Offline by construction: the masters set no ``requirements``/``environment`` and no
Gradescope ``token``/``course_id``, so otter assign writes its default
``environment.yml``/``requirements.txt`` into the zip as text and installs nothing;
grading runs the notebook in this virtual environment. The script refuses a master
whose config would need the network.

How to write a chapter with exercises (the pattern)
---------------------------------------------------
Cells of the master notebook, in order (raw cells are invisible in the book:
myst-nb skips raw cells without a ``format``; tag them ``remove-cell`` as well):

1. A raw cell ``# ASSIGNMENT CONFIG`` (YAML) near the top, e.g.::

       # ASSIGNMENT CONFIG
       name: <chapter>
       init_cell: true
       export_cell: false
       check_all_cell: false
       generate: true
       tests: {files: false, ok_format: true}

2. Per exercise: raw ``# BEGIN QUESTION`` with ``name: q1``; a Markdown prompt;
   raw ``# BEGIN SOLUTION``; the solution code cell(s); raw ``# END SOLUTION``;
   raw ``# BEGIN TESTS``; one code cell per test; raw ``# END TESTS``; raw
   ``# END QUESTION``. The worked answer, a Markdown "Why" dropdown (```` ```{dropdown} Why ````
   or an admonition "Why" of ``:class: dropdown``), goes after the solution code inside
   the SOLUTION block or right after ``# END QUESTION``: the book folds it away, and the
   student copy never holds it. A student copy leaves out every Markdown cell inside a
   SOLUTION block, every "Why" dropdown, and every Markdown cell tagged
   ``solution-explanation`` (for an explanation of another shape); the autograder's
   solution notebook keeps them. Prose *before* an exercise must not state its answer.
3. Solution lines end in ``# SOLUTION`` (``x = f(y)  # SOLUTION`` becomes ``x = ...``)
   or sit between ``# BEGIN SOLUTION`` / ``# END SOLUTION`` comment lines. Lines that
   the student keeps must not use a removed value, or the student copy crashes. A comment
   the student keeps (on a line without ``# SOLUTION``) says what to compute, never the
   value or the formula of the answer: derivations go inside the solution or into "Why".
   Tag the solution cell ``hide-input`` and give it the metadata
   ``{"mystnb": {"code_prompt_show": "Show a solution", "code_prompt_hide": "Hide the solution"}}``:
   in the book the code folds behind that button.
4. Tests are plain ``assert`` lines (OK format: a test fails if it raises or prints;
   the master is committed without outputs, so a test must print nothing). A test
   cell that begins with::

       \"\"\" # BEGIN TEST CONFIG
       hidden: true
       points: 2
       \"\"\" # END TEST CONFIG

   is hidden: only in the autograder zip. Name helper variables in tests with a
   leading underscore (tests run in the notebook's namespace). Tag every test cell
   ``remove-cell``: the book does not show tests; the master still executes them, so
   they double as checks of the solutions in ``make test`` (nbval) and the book build.
5. Exercises are deterministic: seed every random draw with an explicit
   ``torch.Generator().manual_seed(...)``.

``tests/test_assignments.py`` checks every master: no solution, explanation or
answer-stating stub comment left in the student copy, the untouched student copy fails
cleanly, the solutions pass every test; and that every chapter with an Exercises section
is a master.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "_build" / "assignments"
#: Cell tags and metadata that only mean something to the book (myst-nb).
BOOK_TAGS = {"hide-input", "hide-output", "hide-cell", "remove-input", "remove-output", "remove-cell"}
#: Config keys that would make otter reach the network (installing or Gradescope).
NETWORK_KEYS = ("requirements", "environment")
NETWORK_GENERATE_KEYS = ("token", "course_id", "assignment_id")
CONFIG_MARK = "# ASSIGNMENT CONFIG"
#: Tag of a Markdown cell that explains an exercise's answer: the student copy leaves it out.
EXPLANATION_TAG = "solution-explanation"
#: The book's worked answer to an exercise: ```{dropdown} Why, or an admonition "Why" of class dropdown.
WHY_DROPDOWN = re.compile(r"(?:```|:::)\{dropdown\}\s+Why\b|(?:```|:::)\{admonition\}\s+Why\s*\n(?::\w+:.*\n)*?"
                          r":class:\s*dropdown")
_BLOCK_MARK = re.compile(r"#\s+(BEGIN|END)\s+(QUESTION|SOLUTION|TESTS|PROMPT)\b", re.I)
#: Seconds one ``otter assign`` may take (with ``--check`` it executes the chapter once).
ASSIGN_TIMEOUT = 600
#: Environment for every execution without a browser: ``dpclip_lab.plotting.live`` then draws
#: no ipywidgets. nbclient (inside otter) answers ipywidgets' Output widget with messages on
#: the shell socket while it awaits the cell's reply on that socket, and can miss the reply
#: and wait forever (see the docstring of ``dpclip_lab.plotting.live``).
HEADLESS_ENV = {"DPCLIP_HEADLESS": "1"}
#: Where the book build (myst-nb) writes each chapter's glued values: ``<chapter>.glue.json``.
GLUE_DIR = ROOT / "_build" / "jupyter_execute"


def glue_json_for(master: Path) -> Path:
    """The ``.glue.json`` of the book build for ``master`` (it may not exist yet)."""
    master = Path(master).resolve()
    rel = master.relative_to(ROOT) if master.is_relative_to(ROOT) else Path(master.name)
    return GLUE_DIR / rel.parent / f"{master.stem}.glue.json"


def render_glue_into(nb_path: Path, glue_json: Path) -> int:
    """Write the glued numbers into the Markdown of ``nb_path``; return how many roles are left.

    JupyterLab does not render MyST ``{glue:text}`` roles (not even with ``jupyterlab-myst``),
    so a student copy must carry the numbers as plain text. The values come from the book
    build's ``glue_json`` and are formatted as the book formats them (``_ext/classroom.py``,
    ``render_glue``). Without a build (no ``glue_json``) the roles stay, and the count says so.
    """
    import importlib.util
    import re

    nb = nbformat.read(nb_path, as_version=4)
    if Path(glue_json).is_file():
        spec = importlib.util.spec_from_file_location("dpclip_classroom", ROOT / "_ext" / "classroom.py")
        classroom = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(classroom)
        glue = json.loads(Path(glue_json).read_text())
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = classroom.render_glue(cell.source, glue)
        nbformat.write(nb, nb_path)
    return sum(len(re.findall(r"\{glue(?::\w+)?\}`", c.source)) for c in nb.cells if c.cell_type == "markdown")


def assignment_config(path: Path) -> dict | None:
    """The ``# ASSIGNMENT CONFIG`` of a notebook (a dict), or None if it is not a master."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        src = cell.source.lstrip()
        if cell.cell_type == "raw" and src.upper().startswith(CONFIG_MARK):
            return yaml.safe_load(src) or {}
    return None


def find_masters(root: Path = ROOT / "book") -> list[Path]:
    """Every notebook under ``root`` with a ``# ASSIGNMENT CONFIG`` raw cell, sorted."""
    return sorted(p for p in root.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and assignment_config(p) is not None)


def check_offline(path: Path, config: dict) -> None:
    bad = [k for k in NETWORK_KEYS if config.get(k)]
    gen = config.get("generate")
    if isinstance(gen, dict):
        bad += [f"generate.{k}" for k in NETWORK_GENERATE_KEYS if gen.get(k)]
    if bad:
        raise SystemExit(f"{path}: ASSIGNMENT CONFIG sets {', '.join(bad)}; the assignments must be "
                         "made offline (the course environment is this repository's requirements.txt)")


def strip_book_markup(nb_path: Path) -> None:
    """Remove the book-only tags and myst-nb metadata from an output notebook."""
    nb = nbformat.read(nb_path, as_version=4)
    for cell in nb.cells:
        tags = [t for t in cell.metadata.get("tags", []) if t not in BOOK_TAGS]
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        cell.metadata.pop("mystnb", None)
    nbformat.write(nb, nb_path)


def answer_explanations(master: Path) -> set[str]:
    """The Markdown of ``master`` that explains answers (stripped sources).

    A Markdown cell inside a ``# BEGIN SOLUTION`` / ``# END SOLUTION`` block (otter itself
    leaves those out of an autograded question's student copy), a "Why" dropdown
    (:data:`WHY_DROPDOWN`, wherever it stands: the Part II and III chapters put it after
    ``# END QUESTION``, where otter keeps it), or a cell tagged :data:`EXPLANATION_TAG`.
    """
    nb = nbformat.read(master, as_version=4)
    found, stack = set(), []
    for cell in nb.cells:
        src = cell.source.strip()
        if cell.cell_type == "raw":
            m = _BLOCK_MARK.match(src)
            if m and m.group(1).upper() == "BEGIN":
                stack.append(m.group(2).upper())
            elif m and stack:
                stack.pop()
            continue
        if cell.cell_type == "markdown" and src and (
                stack[-1:] == ["SOLUTION"] or WHY_DROPDOWN.search(cell.source)
                or EXPLANATION_TAG in cell.metadata.get("tags", [])):
            found.add(src)
    return found


def drop_explanations(nb_path: Path, explanations: set[str]) -> int:
    """Remove from ``nb_path`` the Markdown cells whose source is one of ``explanations``; return
    how many went (the student copy: :func:`answer_explanations` of its master)."""
    nb = nbformat.read(nb_path, as_version=4)
    keep = [c for c in nb.cells if not (c.cell_type == "markdown" and c.source.strip() in explanations)]
    dropped = len(nb.cells) - len(keep)
    if dropped:
        nb.cells = keep
        nbformat.write(nb, nb_path)
    return dropped


def assign(master: Path, out: Path = DEFAULT_OUT, *, check: bool = False, glue_json: Path | None = None) -> Path:
    """Run ``otter assign`` on one master; return ``out/<chapter>`` (with student/ and autograder/).

    ``check=True`` lets otter grade the solution notebook with every test (slow:
    it executes the chapter) and fail unless it scores 100%. The student copy gets the
    book's glued numbers as plain text (:func:`render_glue_into`) from ``glue_json``
    (default: the book build's, :func:`glue_json_for`); run ``make book`` first, or the
    copy keeps ``{glue:text}`` roles and a warning says so.
    """
    master = Path(master).resolve()
    config = assignment_config(master)
    if config is None:
        raise SystemExit(f"{master} has no '{CONFIG_MARK}' raw cell: not an otter master notebook")
    check_offline(master, config)
    result = (Path(out) / master.stem).resolve()
    if result.exists():
        shutil.rmtree(result)
    cached = _cached_assign(master, check)
    if cached is not None and cached.is_dir():  # otter's output for this exact master, this session
        shutil.copytree(cached, result)
        log = (cached / "assign.log").read_text() if (cached / "assign.log").is_file() else ""
    else:
        result.mkdir(parents=True)
        log = _otter_assign(master, result, check)
        if cached is not None:
            (result / "assign.log").write_text(log)
            tmp = cached.with_name(cached.name + f".{os.getpid()}.tmp")
            shutil.copytree(result, tmp)
            try:
                tmp.rename(cached)  # atomic; another process may have filled it first
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("student", "autograder"):
        nb_path = result / sub / master.name
        if not nb_path.is_file():
            raise SystemExit(f"otter assign wrote no {sub} notebook for {master}")
        strip_book_markup(nb_path)
    # the worked answers stay in the master (the book folds them) and in the solution notebook
    drop_explanations(result / "student" / master.name, answer_explanations(master))
    left = render_glue_into(result / "student" / master.name,
                            glue_json if glue_json is not None else glue_json_for(master))
    if left:
        print(f"warning: {left} glue roles left in the student copy of {master.name} "
              "(no book build to take the numbers from: run `make book` first)", file=sys.stderr)
    (result / "assign.log").write_text(log)
    return result


#: Environment variable: a folder where :func:`assign` keeps otter's raw output per master
#: (keyed by the master's bytes, otter's version and ``check``). ``make test`` sets it for one
#: session (``conftest.py``), so the book build reuses what ``tests/test_assignments.py``
#: assigned instead of running ``otter assign`` on every master again.
ASSIGN_CACHE_ENV = "DPCLIP_ASSIGN_CACHE"


def _cached_assign(master: Path, check: bool) -> Path | None:
    root = os.environ.get(ASSIGN_CACHE_ENV)
    if not root:
        return None
    import hashlib
    from importlib.metadata import version

    key = hashlib.sha256(master.read_bytes() + f"|otter {version('otter-grader')}|check={check}".encode())
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root) / f"{master.stem}-{key.hexdigest()[:16]}"


def _otter_assign(master: Path, result: Path, check: bool) -> str:
    """Run ``otter assign`` (offline) into ``result``; return its output."""
    cmd = [sys.executable, "-m", "otter", "assign", "--no-pdfs", str(master), str(result)]
    if not check:
        cmd.insert(5, "--no-run-tests")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=master.parent,
                              env={**os.environ, **HEADLESS_ENV}, timeout=ASSIGN_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"otter assign on {master} took more than {ASSIGN_TIMEOUT} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"otter assign failed on {master}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr


def autograder_zip(result: Path) -> Path:
    """The autograder zip that ``otter assign`` wrote under ``result/autograder``."""
    zips = sorted((Path(result) / "autograder").glob("*-autograder_*.zip"))
    if not zips:
        raise FileNotFoundError(f"no autograder zip under {result}/autograder")
    return zips[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path,
                    help="master notebooks (default: every notebook under book/ with an ASSIGNMENT CONFIG)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    ap.add_argument("--check", action="store_true",
                    help="grade each solution notebook with all tests; fail unless it scores 100%%")
    args = ap.parse_args(argv)
    masters = args.notebooks or find_masters()
    if not masters:
        print("no master notebooks found")
        return 0
    summary = {}
    for master in masters:
        result = assign(master, args.out, check=args.check)
        summary[str(Path(master).resolve().relative_to(ROOT))] = str(result.relative_to(ROOT)
                                                                   if result.is_relative_to(ROOT) else result)
        print(f"{master}: student and autograder copies in {result}")
    (Path(args.out) / "index.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
