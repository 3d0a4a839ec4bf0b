"""Make the classroom copies of the book's chapters with otter-grader (``make assignments``).

Every chapter notebook that holds exercises is an otter-grader 7 *master notebook*
(otter assign, format v1). The book renders the master itself: exercises with their
solutions folded away. This script turns each master into

* ``_build/assignments/<chapter>/student/<chapter>.ipynb`` — solutions replaced by
  ``...``, an otter init cell at the top, a ``grader.check("qN")`` cell after each
  exercise (public tests only);
* ``_build/assignments/<chapter>/autograder/`` — the solution notebook, and
  ``<chapter>-autograder.zip`` (one fixed name) with all tests, public and hidden.

The zip grades anywhere: ``otter run`` (locally, in this virtual environment, no Docker),
``otter grade`` (Docker) and Gradescope build their grading environment from its
``environment.yml``, which this script writes (:func:`autograder_environment`): the
book's Python, the lab's pinned CPU dependencies from ``requirements.txt`` (torch from
PyTorch's CPU index), and the lab itself, as a wheel inside the zip. Its
``run_autograder`` sets ``DPCLIP_HEADLESS=1`` (see :data:`HEADLESS_ENV`).

Usage::

    python tools/assign.py                 # every master under book/
    python tools/assign.py --check         # ... and grade the solutions (must score 100%)
    python tools/assign.py book/part1/no_gradient_field.ipynb --out /tmp/assignments
    python tools/assign.py --course _build/course   # make course: the course edition

``--course DIR`` (``make course``) builds the **course edition** for instructors into
``DIR/site`` (the book without solutions, ``_ext/classroom.py``), ``DIR/student`` (the
student notebooks) and ``DIR/autograder`` (the zips: keep them private). It reuses the
executions of the last ``make book`` (``_build/jupyter_execute``) where the chapters are
unchanged, and executes the others.

Offline by construction: the masters set no ``requirements``/``environment`` and no
Gradescope ``token``/``course_id``, so otter assign installs nothing and needs no
network (the environment of the zip is text, installed only where the zip is used);
grading with ``otter run`` runs the notebook in this virtual environment. The script
refuses a master whose config would need the network.

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

6. Public tests say what is wrong. A public test (no ``hidden``) catches the common
   mistakes — a sanity value, a monotonicity, a known limit — and every ``assert`` in it
   carries a message a student understands, with no expected value in it: first one
   assert on the types (``x must be a Python float``), then the checks of the values
   inside ``if <types are right>:``, so that a wrong type is one clear message. Keep
   at least one plausible wrong answer per question in ``tests/wrong_answers/<chapter>.py``:
   the public tests must reject it with its message. Every variable the tests read is
   defined in the student copy (``x = ...``; :func:`declare_answers` adds the missing ones).

``tests/test_assignments.py`` checks every master: no solution, explanation or
answer-stating stub comment left in the student copy, the untouched student copy fails
cleanly, the solutions pass every test, the public tests reject the wrong answers; and
that every chapter with an Exercises section is a master. ``tests/test_course_edition.py``
checks the course edition and the zip's environment.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
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


def _assigned_names(source: str) -> list[str]:
    """The names that code assigns at its top level (in order), or none if it does not parse."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for stmt in tree.body:
        targets = (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                   if isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For)) else [])
        out += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id not in out]
    return out


def answer_names(master: Path) -> dict[str, list[str]]:
    """Per question of ``master``: the names its tests read that its solution assigns, in order."""
    import ast

    nb = nbformat.read(master, as_version=4)
    solutions, tests, stack, question = {}, {}, [], None
    for cell in nb.cells:
        src = cell.source.strip()
        if cell.cell_type == "raw":
            m = _BLOCK_MARK.match(src)
            if m and m.group(1).upper() == "BEGIN":
                stack.append(m.group(2).upper())
                if m.group(2).upper() == "QUESTION":
                    name = re.search(r"name:\s*(\S+)", src)
                    question = name.group(1) if name else "?"
            elif m and stack and stack.pop() == "QUESTION":
                question = None
            continue
        if cell.cell_type == "code" and question and stack[-1:] == ["SOLUTION"]:
            solutions.setdefault(question, []).extend(_assigned_names(cell.source))
        elif cell.cell_type == "code" and question and stack[-1:] == ["TESTS"]:
            try:
                tests.setdefault(question, set()).update(
                    n.id for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Name))
            except SyntaxError:
                pass
    return {q: [n for n in dict.fromkeys(names) if n in tests.get(q, set()) and not n.startswith("_")]
            for q, names in solutions.items()}


def declare_answers(nb_path: Path, master: Path) -> int:
    """End each question's last answer cell of a student copy with ``name = ...`` for every answer
    (:func:`answer_names`) that its stubs do not assign; return how many were added.

    A solution written as one ``# BEGIN SOLUTION`` block leaves the student only ``...``: the
    student copy then says which variables to define, and an unanswered question fails its
    public tests on their messages (``x must be a Python float``), not on a ``NameError``.
    """
    nb = nbformat.read(nb_path, as_version=4)
    wanted, pending, added = answer_names(master), [], 0
    for cell in nb.cells:
        check = re.fullmatch(r'grader\.check\("(\w+)"\)', cell.source.strip()) if cell.cell_type == "code" else None
        if check and pending:
            have = {n for c in pending for n in _assigned_names(c.source)}
            missing = [n for n in wanted.get(check.group(1), []) if n not in have]
            if missing:
                pending[-1].source = pending[-1].source.rstrip("\n") + "\n" + "\n".join(f"{n} = ..." for n in missing)
                added += len(missing)
            pending = []
        elif cell.cell_type == "code" and "otter_answer_cell" in cell.metadata.get("tags", []):
            pending.append(cell)
    if added:
        nbformat.write(nb, nb_path)
    return added


def assign(master: Path, out: Path = DEFAULT_OUT, *, check: bool = False, glue_json: Path | None = None,
           warn_glue: bool = True, autograder: bool = True) -> Path:
    """Run ``otter assign`` on one master; return ``out/<chapter>`` (with student/ and autograder/).

    ``check=True`` lets otter grade the solution notebook with every test (slow:
    it executes the chapter) and fail unless it scores 100%. The student copy gets the
    book's glued numbers as plain text (:func:`render_glue_into`) from ``glue_json``
    (default: the book build's, :func:`glue_json_for`); run ``make book`` first, or the
    copy keeps ``{glue:text}`` roles and a warning says so (``warn_glue=False``: no warning, for
    ``tools/reader.py``, which takes the numbers from ``book/glued_numbers.json`` then).
    ``autograder=False`` leaves otter's zip as it wrote it (``tools/reader.py`` needs only the
    student copy, and skips building the lab's wheel for the zip).
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
    declare_answers(result / "student" / master.name, master)
    if autograder:
        fix_autograder_zip(result, master)
    left = render_glue_into(result / "student" / master.name,
                            glue_json if glue_json is not None else glue_json_for(master))
    if left and warn_glue:
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
    """The autograder zip of an assignment: ``result/autograder/<chapter>-autograder.zip``."""
    path = Path(result) / "autograder" / f"{Path(result).name}-autograder.zip"
    if not path.is_file():
        raise FileNotFoundError(f"no autograder zip {path}")
    return path


#: The packages of ``requirements.txt``'s "the book" section that grading a chapter needs
#: besides the lab's: ``myst_nb`` (the chapters' ``glue``), the kernel, otter itself.
AUTOGRADER_BOOK_PACKAGES = ("jupyter-book", "ipykernel", "otter-grader")
#: Where Gradescope and ``otter grade`` unpack the zip.
AUTOGRADER_SOURCE = "/autograder/source"
#: PyTorch's index of CPU wheels (PyPI's Linux torch wheel is the CUDA build).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _requirement_sections(path: Path = ROOT / "requirements.txt") -> dict[str, list[str]]:
    """The pinned lines of ``requirements.txt`` per ``# --- <section> ---`` heading."""
    sections, current = {}, ""
    for line in path.read_text().splitlines():
        heading = re.match(r"#\s*---\s*(.+?)\s*---", line)
        if heading:
            current = heading.group(1)
        elif line.strip() and not line.lstrip().startswith("#"):
            sections.setdefault(current, []).append(line.split("#", 1)[0].strip())
    return sections


def book_python(path: Path = ROOT / "environment.yml") -> str:
    """The Python version of the book's environment (``python=3.11`` in ``environment.yml``)."""
    m = re.search(r"^\s*-\s*python\s*=+\s*([\d.]+)", path.read_text(), re.M)
    if not m:
        raise SystemExit(f"{path} names no python version")
    return m.group(1)


def autograder_environment(wheel_name: str, otter_environment: str | None = None) -> str:
    """The ``environment.yml`` of an autograder zip: everything a chapter needs to be graded.

    The book's Python (:func:`book_python`); the lab's pinned dependencies (the "the lab"
    section of ``requirements.txt``), torch as its CPU build from PyTorch's index; the
    pins of :data:`AUTOGRADER_BOOK_PACKAGES`; and the lab itself, the wheel ``wheel_name``
    inside the zip. Conda channels and packages other than Python come from otter's own
    ``environment.yml`` (``otter_environment``), whose environment name
    ``run_autograder`` activates.
    """
    import yaml

    env = yaml.safe_load(otter_environment) if otter_environment else {
        "name": "otter-env", "channels": ["conda-forge"], "dependencies": ["python", "pip", "jupyter_server"]}
    sections = _requirement_sections()
    book = {re.split(r"[=<>\[ ]", r, 1)[0].lower(): r for r in sections.get("the book", [])}
    missing = [p for p in AUTOGRADER_BOOK_PACKAGES if p not in book]
    if missing or not sections.get("the lab"):
        raise SystemExit(f"requirements.txt: no pin for {missing or 'the lab section'}")
    pins = []
    for req in sections["the lab"]:
        if req.startswith("torch=="):
            req = req if "+" in req else req + "+cpu"
        pins.append(req)
    pins += [book[p].replace("otter-grader==", "otter-grader[grading,plugins]==") for p in AUTOGRADER_BOOK_PACKAGES]
    conda = [d for d in env["dependencies"] if isinstance(d, str) and not re.match(r"python\b", d) and d != "pip"]
    env["dependencies"] = [f"python={book_python()}", "pip", *conda,
                           {"pip": [f"--extra-index-url {TORCH_CPU_INDEX}", *pins, f"{AUTOGRADER_SOURCE}/{wheel_name}"]}]
    header = ("# The grading environment of a dpclip-lab chapter (tools/assign.py): the book's Python, the lab's\n"
              "# pinned CPU dependencies (requirements.txt) and the lab, a wheel in this zip.\n")
    return header + yaml.safe_dump(env, sort_keys=False)


@functools.lru_cache(maxsize=None)
def lab_wheel() -> Path:
    """A wheel of the lab, built once per process from a copy of its sources (the tree stays clean)."""
    import atexit

    tmp = Path(tempfile.mkdtemp(prefix="dpclip-wheel-"))
    atexit.register(shutil.rmtree, tmp, True)
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "dpclip_lab", src / "dpclip_lab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    wheels = sorted((tmp / "dist").glob("dpclip_lab-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise SystemExit(f"could not build the lab's wheel:\n{proc.stdout}\n{proc.stderr}")
    return wheels[0]


def fix_autograder_zip(result: Path, master: Path) -> Path:
    """Give the zip that otter wrote its fixed name and make it grade anywhere; return its path.

    ``<chapter>-autograder.zip`` (otter names it ``..._<timestamp>.zip``), with
    :func:`autograder_environment` as its ``environment.yml``, the lab's wheel, and
    ``DPCLIP_HEADLESS=1`` exported by ``run_autograder``.
    """
    folder = Path(result) / "autograder"
    fixed = folder / f"{Path(result).name}-autograder.zip"
    written = sorted(folder.glob("*-autograder_*.zip"))
    if not written:
        if fixed.is_file():
            return fixed
        raise FileNotFoundError(f"otter assign wrote no autograder zip for {master} under {folder}")
    wheel = lab_wheel()
    with zipfile.ZipFile(written[-1]) as src, zipfile.ZipFile(fixed, "w", zipfile.ZIP_DEFLATED) as dst:
        names = src.namelist()
        for name in names:
            data = src.read(name)
            if name == "environment.yml":
                data = autograder_environment(wheel.name, data.decode()).encode()
            elif name == "run_autograder":
                lines = data.decode().splitlines(keepends=True)
                data = "".join(lines[:1] + [f"export {k}={v}\n" for k, v in HEADLESS_ENV.items()] + lines[1:]).encode()
            dst.writestr(src.getinfo(name), data)
        if "environment.yml" not in names:
            dst.writestr("environment.yml", autograder_environment(wheel.name))
        dst.write(wheel, wheel.name)
    for path in written:
        path.unlink()
    return fixed


# --------------------------------------------------------------------------- the course edition

#: What ``make course`` writes next to the folders (``DIR/README.md``).
COURSE_README = """\
# Course edition of "Clipping in Private Optimization"

Made by `make course` (tools/assign.py --course) from the book's sources.

- `site/` — the book without solutions: publish this folder as the course's web site.
  A chapter with exercises links its student notebook; no page links an autograder.
- `student/` — the student notebooks (one per chapter with exercises; also linked from the
  site): the exercises without solutions, a `grader.check("qN")` cell after each one
  (public tests only). Students hand in the notebook, answered and run.
- `autograder/` — one `<chapter>-autograder.zip` per chapter, with every test, hidden
  ones included. Keep it private. Grade with it:
  - locally, in the lab's environment: `DPCLIP_HEADLESS=1 otter run -a autograder/<chapter>-autograder.zip <submission>.ipynb`;
  - with Docker, many submissions at once: `otter grade -a autograder/<chapter>-autograder.zip -p <folder of submissions>`;
  - on Gradescope: upload the zip as the assignment's autograder.

The README of the repository (section "Classroom") has the details.
"""


def seed_execution_cache(cache: Path, executed: Path = ROOT / "_build" / "jupyter_execute") -> int:
    """Put the chapters executed by the last ``make book`` into a jupyter-cache; return how many.

    The course build reads them (``DPCLIP_EXECUTION_CACHE``, ``_ext/reuse_executions.py``):
    a chapter whose code is unchanged is not executed again.
    """
    if not executed.is_dir():
        return 0
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    store, count = get_cache(cache), 0
    for notebook in sorted(executed.rglob("*.ipynb")):
        source = ROOT / notebook.relative_to(executed)
        if not source.is_file():
            continue
        nb = nbformat.read(notebook, as_version=4)
        for cell in nb.cells:   # the cache key includes cell metadata: drop the executor's timings
            cell.metadata.pop("execution", None)
        store.cache_notebook_bundle(CacheBundleIn(nb, str(source), data={"executed_by": "make book"}),
                                    check_validity=False, overwrite=True)
        count += 1
    return count


def assemble_course(site: Path, assignments: Path, out: Path) -> Path:
    """Put a course build's site, student copies and autograder zips into ``out``; return ``out``.

    ``site`` is the built HTML (``DPCLIP_EDITION=course``), ``assignments`` the folder where
    its build wrote ``<chapter>/{student,autograder}``. Refuses a site that holds a zip.
    """
    site, assignments, out = Path(site), Path(assignments), Path(out)
    zips = sorted(str(p.relative_to(site)) for p in site.rglob("*.zip"))
    if zips:
        raise SystemExit(f"the course site must not ship autograder zips: {zips}")
    for name in ("site", "student", "autograder"):
        shutil.rmtree(out / name, ignore_errors=True)
    shutil.copytree(site, out / "site")
    (out / "student").mkdir(parents=True)
    (out / "autograder").mkdir()
    for result in sorted(p for p in assignments.iterdir() if (p / "student").is_dir()):
        shutil.copyfile(result / "student" / f"{result.name}.ipynb", out / "student" / f"{result.name}.ipynb")
        shutil.copyfile(autograder_zip(result), out / "autograder" / f"{result.name}-autograder.zip")
    (out / "README.md").write_text(COURSE_README)
    return out


def build_course(out: Path) -> Path:
    """``make course``: build the course edition and assemble it in ``out`` (see the module docstring)."""
    out = Path(out).resolve()
    build, cache = out / ".build", out / ".jupyter_cache"
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    reused = seed_execution_cache(cache)
    print(f"course edition: {reused} chapters executed by the last `make book` can be reused")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(ROOT), "--all", "-W", "--keep-going",
           "--path-output", str(build)]
    env = {**os.environ, "DPCLIP_EDITION": "course", "DPCLIP_EXECUTION_CACHE": str(cache)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"the course build failed (exit {proc.returncode}): {' '.join(cmd)}")
    assemble_course(build / "_build" / "html", build / "_build" / "assignments", out)
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    print(f"course edition in {out}: site/ (publish), student/ (hand out), autograder/ (keep private)")
    return out


def render_citations_into(nb_path: Path, master: Path) -> list[str]:
    """Write the book's citations and cross-references into the student copy ``nb_path`` as the
    course edition's copies have them (``_ext/classroom.py``): JupyterLab shows "Citation Not
    Found" for a ``{cite}`` role. Uses the reader copies' renderer (``_ext/reader_copies.py``,
    without links to other chapters: the copy sits in a folder of its own). Returns the roles left."""
    import nbformat

    rc = _reader_copies()
    docname = str(Path(master).resolve().relative_to(ROOT).with_suffix("")).replace("\\", "/")
    glue_json = glue_json_for(master)
    glue = json.loads(glue_json.read_text()) if glue_json.is_file() else {}
    lookup = rc.glue_lookup(glue, rc.load_numbers().get(docname))
    nb = nbformat.read(nb_path, as_version=4)
    rendered = rc.reader_notebook(nb, docname, lookup=lookup, bib=rc.book_bibliography(ROOT),
                                  index=rc.BookIndex.from_toc(ROOT), links=False).notebook
    rc.write_notebook(rendered, Path(nb_path))
    return rc.leftover_markup(rendered)


def _reader_copies():
    """``_ext/reader_copies.py`` (the renderer of the reader copies; it imports nothing of tools/)."""
    import importlib.util

    name = "dpclip_reader_copies"   # the name tools/reader.py gives it: one instance
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "_ext" / "reader_copies.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path,
                    help="master notebooks (default: every notebook under book/ with an ASSIGNMENT CONFIG)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    ap.add_argument("--check", action="store_true",
                    help="grade each solution notebook with all tests; fail unless it scores 100%%")
    ap.add_argument("--course", type=Path, metavar="DIR",
                    help="build the course edition into DIR: site/, student/, autograder/ (make course)")
    args = ap.parse_args(argv)
    if args.course:
        build_course(args.course)
        return 0
    masters = args.notebooks or find_masters()
    if not masters:
        print("no master notebooks found")
        return 0
    summary = {}
    for master in masters:
        result = assign(master, args.out, check=args.check)
        left = render_citations_into(result / "student" / Path(master).name, master)
        if left:
            print(f"warning: markup left in the student copy of {master}: {left[:5]}", file=sys.stderr)
        summary[str(Path(master).resolve().relative_to(ROOT))] = str(result.relative_to(ROOT)
                                                                   if result.is_relative_to(ROOT) else result)
        print(f"{master}: student and autograder copies in {result}")
    (Path(args.out) / "index.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
