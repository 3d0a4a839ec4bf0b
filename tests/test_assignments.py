"""The classroom copies of the chapters (``tools/assign.py``, otter-grader 7).

For every master notebook under ``book/`` (a notebook with a ``# ASSIGNMENT CONFIG``
raw cell): otter assign runs offline into a temporary folder, then

1. the student copy holds no solution and no hidden test;
2. the untouched student copy runs from top to bottom and fails every question. For the
   masters in ``SOLUTION_SMOKE``, ``otter run`` (local, no Docker) grades it: the whole
   notebook executes without an error and scores 0. For every master, the student copy is
   checked against the master that nbval executed (:func:`student_copy_breaks`): it differs
   from the master only in its answer cells, dropped cells and tests, so it runs if every cell
   parses, every name a cell reads is defined by a cell above it, and no cell outside the
   answers and checks reads an answer (``...`` in an untouched copy). Executing every student
   copy once more cost ~15 minutes of worker time, half the test run;
3. grading the solution notebook passes every test, public and hidden — graded by otter
   for the masters in ``SOLUTION_SMOKE`` (the pipeline), and for every master by nbval,
   which runs the master's solution cells and then its (public and hidden) assert cells;
4. the public tests mean something (issue #32): graded with them alone, the solution
   passes, an unanswered question fails on a message, and every wrong answer kept in
   ``tests/wrong_answers/<chapter>.py`` fails with the message it should get. This runs only
   the statements of the chapter that the exercises need (:func:`chapter_slice`), not the
   chapter: a few seconds for most masters, ~20 s for those whose exercises read a sweep.

About 10 s per chapter on 2 cores (otter assign ~8 s), and ~1 min for the otter gradings of
the smoke master.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import dill
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("assign_tool", ROOT / "tools" / "assign.py")
assign_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assign_tool)

MASTERS = assign_tool.find_masters()


def _blocks(master: Path):
    """Solution cells and (test source, hidden) pairs of a master, per question."""
    nb = nbformat.read(master, as_version=4)
    stack, solutions, tests = [], [], []
    for cell in nb.cells:
        src = cell.source.strip()
        if cell.cell_type == "raw":
            m = re.match(r"#\s+(BEGIN|END)\s+(QUESTION|SOLUTION|TESTS|PROMPT)", src, re.I)
            if m:
                if m.group(1).upper() == "BEGIN":
                    stack.append(m.group(2).upper())
                else:
                    assert stack and stack[-1] == m.group(2).upper(), f"unbalanced {src!r} in {master}"
                    stack.pop()
            continue
        if stack and stack[-1] == "SOLUTION":
            solutions.append(cell)
        elif stack and stack[-1] == "TESTS":
            config = re.search(r"BEGIN TEST CONFIG(.*?)END TEST CONFIG", src, re.S)
            hidden = bool(config and re.search(r"^\s*hidden:\s*true\s*$", config.group(1), re.M | re.I))
            body = src[config.end():].split("\n", 1)[1] if config else src
            tests.append((body.strip(), hidden))
    assert not stack, f"unclosed block(s) {stack} in {master}"
    return solutions, tests


def _is_solution_cell(cell, solutions) -> bool:
    return any(cell.source == c.source and cell.cell_type == c.cell_type for c in solutions)


def _solution_fragments(cell) -> list[str]:
    """Pieces of solution code that must not survive into the student copy."""
    if cell.cell_type == "markdown":
        return [line.strip() for line in cell.source.splitlines() if len(line.strip()) > 20]
    out, inside = [], False
    for line in cell.source.splitlines():
        s = line.rstrip()
        if s.endswith("# END SOLUTION"):
            inside = False
        elif re.match(r"\s*# BEGIN SOLUTION", s):
            inside = True
        elif inside and s.strip():
            out.append(s.strip())
        elif re.search(r"# ?SOLUTION$", s):
            code = re.sub(r"\s*# ?SOLUTION$", "", s).strip()
            rhs = code.split("=", 1)[1].strip() if "=" in code and "==" not in code.split("=", 1)[0] else code
            out.append(rhs)
    return [f for f in out if f and f != "..."]


#: Seconds one grading may take (normally 20-40 s alone, up to ~120 s on a loaded 2-core machine).
GRADING_TIMEOUT = 420


def _start_grading(notebook: Path, result: Path, workdir: Path):
    """Start ``otter run --debug`` on ``notebook`` in a subprocess (collect with :func:`_finish`).

    A subprocess in its own session, so a timeout kills otter and its kernel and nothing
    else. ``--debug`` makes an error in any cell fail the run instead of being swallowed.
    ``DPCLIP_HEADLESS=1``: the chapters' live controls draw no ipywidgets, which is what
    used to hang nbclient (see ``tools/assign.py``, ``HEADLESS_ENV``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "otter", "run", "--no-logo", "--debug", "--pickle-results",
           "-a", str(assign_tool.autograder_zip(result)), "-o", str(workdir), str(notebook)]
    env = {**os.environ, **assign_tool.HEADLESS_ENV}
    log = open(workdir / "otter-run.log", "w")
    proc = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, (notebook, result, workdir), log


def _kill_session(proc) -> None:
    """Kill otter's session and the kernel it started (the kernel has a session of its own)."""
    kernels = []
    try:
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
        kernels = [int(p) for p in out.split()]
    except (OSError, ValueError):
        pass
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in kernels:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


_retry_spec = importlib.util.spec_from_file_location("kernel_start_retry", ROOT / "_ext" / "kernel_start_retry.py")
kernel_start = importlib.util.module_from_spec(_retry_spec)
_retry_spec.loader.exec_module(kernel_start)


class KernelStartFailed(AssertionError):
    """otter's kernel did not start (``_ext/kernel_start_retry.py``: ``KERNEL_START_FAILURES``); nothing was graded."""


def _finish(job):
    """Wait for a grading, at most ``GRADING_TIMEOUT`` seconds; no retry: a hang is a failure.

    A run whose kernel never started raises :class:`KernelStartFailed` (``_grade`` starts
    it once more, as nbval does for the chapters; root ``conftest.py``)."""
    proc, args, log = job
    try:
        rc = proc.wait(timeout=GRADING_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        log.close()
        raise AssertionError(f"otter run on {args[0]} took more than {GRADING_TIMEOUT} s:\n"
                             f"{(args[2] / 'otter-run.log').read_text()[-3000:]}") from None
    log.close()
    workdir = args[2]
    if rc != 0:
        text = (workdir / "otter-run.log").read_text()
        error = KernelStartFailed if any(s in text for s in kernel_start.KERNEL_START_FAILURES) else AssertionError
        raise error(f"otter run failed:\n{text[-4000:]}")
    with open(workdir / "results.pkl", "rb") as f:
        return dill.load(f)


@pytest.fixture(scope="module", params=MASTERS, ids=lambda p: p.stem)
def made(request, tmp_path_factory):
    """otter assign into a temporary folder: (master, result folder)."""
    master = request.param
    return master, assign_tool.assign(master, tmp_path_factory.mktemp("assignments"))


#: Masters whose *solution* copy is also graded by otter (a smoke test of the autograder
#: pipeline: zip, hidden tests, scoring). For every master, the solutions passing every
#: public and hidden test is already checked by nbval: the master notebook's test cells
#: are plain ``assert`` cells that run after its solution cells (``make test`` executes
#: every notebook under book/). Grading each solution copy again would cost one more
#: execution of every chapter.
SOLUTION_SMOKE = [p for p in MASTERS if p.stem == "no_gradient_field"]


def _grade(made, which):
    master, result = made
    args = (result / which / master.name, result, result / f"graded-{which}")
    return kernel_start.with_retries(lambda: _finish(_start_grading(*args)), 2, f"otter run on {master.name} ({which})",
                                     retry_if=lambda exc: isinstance(exc, KernelStartFailed))


@pytest.fixture(scope="module", params=SOLUTION_SMOKE, ids=lambda p: p.stem)
def graded(request, tmp_path_factory):
    """GradingResults of the untouched student copy and of the solution notebook (smoke masters)."""
    master = request.param
    made = (master, assign_tool.assign(master, tmp_path_factory.mktemp("assignments")))
    return {which: _grade(made, which) for which in ("student", "autograder")}


def test_there_is_a_master_notebook():
    assert any(p.stem == "no_gradient_field" for p in MASTERS) and SOLUTION_SMOKE


def test_masters_are_offline():
    for master in MASTERS:
        assign_tool.check_offline(master, assign_tool.assignment_config(master))
    with pytest.raises(SystemExit, match="offline"):
        assign_tool.check_offline(Path("x.ipynb"), {"requirements": "requirements.txt"})
    with pytest.raises(SystemExit, match="generate.token"):
        assign_tool.check_offline(Path("x.ipynb"), {"generate": {"token": "abc"}})


def test_student_copy_has_no_solutions(made):
    master, result = made
    student = result / "student" / master.name
    text = student.read_text()
    nb = nbformat.read(student, as_version=4)
    sources = "\n".join(c.source for c in nb.cells)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    solutions, tests = _blocks(master)
    assert solutions and tests
    # A fragment that the chapter itself shows outside its solutions (e.g. a `glue(...)` line the
    # solution repeats) gives nothing away.
    public = "\n".join(c.source for c in nbformat.read(master, as_version=4).cells if c.cell_type != "raw"
                       and not _is_solution_cell(c, solutions))
    for cell in solutions:
        for fragment in _solution_fragments(cell):
            if fragment in public:
                continue
            where = sources if cell.cell_type == "markdown" else code
            assert fragment not in where, f"solution left in the student copy: {fragment!r}"
    for marker in ("# SOLUTION", "BEGIN SOLUTION", "BEGIN QUESTION", "ASSIGNMENT CONFIG", "BEGIN TESTS"):
        assert marker not in sources, marker
    assert not [c for c in nb.cells if c.cell_type == "raw"]
    # hidden tests are nowhere in the student copy (neither cells nor metadata); they are in the zip
    with zipfile.ZipFile(assign_tool.autograder_zip(result)) as zf:
        zipped = "\n".join(zf.read(n).decode("utf-8", "replace") for n in zf.namelist() if n.endswith(".py"))
    hidden_lines = [line.strip() for body, hidden in tests if hidden for line in body.splitlines() if line.strip()]
    assert hidden_lines
    for line in hidden_lines:
        assert line not in text and json.dumps(line)[1:-1] not in text, f"hidden test in the student copy: {line!r}"
    assert any(name in zipped for name in ("hidden=True", "'hidden': True", '"hidden": true'))
    # each question: answer cells with "..." and a check cell; no book-only markup left
    n_questions = len(nb.metadata["otter"]["tests"])
    assert n_questions >= 1
    checks = [c for c in nb.cells if c.cell_type == "code" and re.fullmatch(r'grader\.check\("\w+"\)', c.source.strip())]
    assert len(checks) == n_questions
    assert all("..." in c.source for c in nb.cells if "otter_answer_cell" in c.metadata.get("tags", []))
    assert not any(set(c.metadata.get("tags", [])) & assign_tool.BOOK_TAGS for c in nb.cells)


# --------------------------------------------------------------------------- graded use must not leak (#28 item 6)

#: A prose or code fragment shorter than this (normalized) is boilerplate, not an answer.
LEAK_MIN_CHARS = 25
#: The "Why" block of an exercise: ```{dropdown} Why, or an admonition "Why" of class dropdown.
WHY_DROPDOWN = re.compile(r"(?:```|:::)\{dropdown\}\s+Why\b|(?:```|:::)\{admonition\}\s+Why\s*\n(?::\w+:.*\n)*?"
                          r":class:\s*dropdown")
_DROPDOWN = re.compile(r"(?:```|:::)\{dropdown\}|:class:\s*dropdown")
_EXERCISES_HEADING = re.compile(r"^#{1,6}\s+Exercises?\b", re.M | re.I)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]*\w)")
_OPERATOR = re.compile(r"[=+\-−*/^√<>≤≥]")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _questions(master: Path) -> list[dict]:
    """Per question of a master: its name, prompt (Markdown), solution cells and explanations.

    An explanation is a Markdown cell inside the question's SOLUTION block, or a dropdown
    (any title) between the end of its SOLUTION block and the next question: what the book
    folds away after the exercise. Hint dropdowns sit in the prompt, before the solution.
    """
    nb = nbformat.read(master, as_version=4)
    out, stack, current = [], [], None
    for cell in nb.cells:
        src = cell.source.strip()
        if cell.cell_type == "raw":
            m = re.match(r"#\s+(BEGIN|END)\s+(QUESTION|SOLUTION|TESTS|PROMPT)", src, re.I)
            if m and m.group(1).upper() == "BEGIN":
                stack.append(m.group(2).upper())
                if m.group(2).upper() == "QUESTION":
                    name = re.search(r"name:\s*(\S+)", src)
                    current = {"name": name.group(1) if name else "?", "prompt": [], "solution": [],
                               "explanations": [], "solved": False}
                    out.append(current)
            elif m:
                block = stack.pop()
                if block == "SOLUTION" and current is not None:
                    current["solved"] = True
            continue
        if current is None:
            continue
        if stack and stack[-1] == "SOLUTION":
            (current["explanations"] if cell.cell_type == "markdown" else current["solution"]).append(cell)
        elif cell.cell_type == "markdown" and current["solved"] and stack[-1:] != ["TESTS"]:
            if _DROPDOWN.search(src):
                current["explanations"].append(cell)
            elif not stack and re.match(r"#{1,6}\s", src):
                current = None          # a new section: what follows belongs to no question
        elif cell.cell_type == "markdown" and not current["solved"]:
            current["prompt"].append(cell)
    return out


def _solution_lines(cell) -> list[str]:
    """The code lines of a solution cell that the student copy replaces (``# SOLUTION`` suffix or
    between ``# BEGIN SOLUTION`` / ``# END SOLUTION`` comment lines), without the markers."""
    out, inside = [], False
    for line in cell.source.splitlines():
        s = line.strip()
        if re.match(r"# ?END SOLUTION\b", s):
            inside = False
        elif re.match(r"# ?BEGIN SOLUTION\b", s):
            inside = True
        elif inside and s:
            out.append(s)
        elif re.search(r"# ?SOLUTION$", s):
            out.append(re.sub(r"\s*# ?SOLUTION$", "", s))
    return out


def _sentences(markdown: str) -> list[str]:
    """Normalized sentences (and pieces between glue roles and directive fences) of some Markdown."""
    text = re.sub(r"\{glue(?::\w+)?\}`[^`]*`|(?:```|:::)\{?[\w-]*\}?[^\n]*|^:\w+:.*$", "\n\n", markdown, flags=re.M)
    pieces = re.split(r"(?<=[.!?;])\s+|\n\s*\n", text)
    return [_norm(p) for p in pieces if len(_norm(p)) >= LEAK_MIN_CHARS]


def _comments(code: str) -> list[str]:
    """The comments of a code cell (tokenize; a cell that does not tokenize: text after '#')."""
    import io
    import tokenize

    try:
        return [tok.string.lstrip("#").strip() for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [line.split("#", 1)[1].strip() for line in code.splitlines() if "#" in line]


def _numbers(text: str) -> set[str]:
    return {repr(float(n)) for n in _NUMBER.findall(text)}


def _expressions(text: str) -> set[str]:
    """Formula-like pieces of a comment (split at , ; :), spaces removed, with an operator."""
    pieces = (re.sub(r"\s+", "", p) for p in re.split(r"[,;:]|\s(?:and|so|then|i\.e\.)\s", text))
    return {p for p in pieces if len(p) >= 5 and _OPERATOR.search(p)}


def student_copy_leaks(master: Path, student: Path) -> list[str]:
    """What the student copy of ``master`` gives away: each item names the question and the leak.

    * text of the master's solutions: a normalized sentence (Markdown explanations and
      dropdowns, :func:`_questions`) or solution code line of at least ``LEAK_MIN_CHARS``
      characters that the chapter does not also show outside its solutions;
    * a "Why" dropdown, anywhere;
    * a comment in an answer stub that carries a number or a formula of the question's
      solution (its code lines and explanations) which its prompt does not state.
    """
    master_nb = nbformat.read(master, as_version=4)
    nb = nbformat.read(student, as_version=4)
    questions = _questions(master)
    hidden = {c.source for q in questions for c in q["solution"] + q["explanations"]}
    public = _norm("\n".join(c.source for c in master_nb.cells if c.cell_type != "raw" and c.source not in hidden))
    shown = _norm("\n".join(c.source for c in nb.cells))
    leaks = []
    for q in questions:
        texts = [s for c in q["explanations"] for s in _sentences(c.source)]
        texts += [_norm(line) for c in q["solution"] for line in _solution_lines(c)
                  if len(_norm(line)) >= LEAK_MIN_CHARS]
        leaks += [f"{q['name']}: solution text in the student copy: {t[:90]!r}"
                  for t in dict.fromkeys(texts) if t not in public and t in shown]
    leaks += [f"a 'Why' dropdown in the student copy: {_norm(c.source)[:70]!r}"
              for c in nb.cells if c.cell_type == "markdown" and WHY_DROPDOWN.search(c.source)]
    # answer stubs, per question: the answer cells before each grader.check("qN")
    stubs, pending = {}, []
    for c in nb.cells:
        check = re.fullmatch(r'grader\.check\("(\w+)"\)', c.source.strip()) if c.cell_type == "code" else None
        if check:
            stubs[check.group(1)], pending = pending, []
        elif c.cell_type == "code" and "otter_answer_cell" in c.metadata.get("tags", []):
            pending.append(c)
    for q in questions:
        answer = "\n".join(line for c in q["solution"] for line in _solution_lines(c))
        answer += "\n" + "\n".join(c.source for c in q["explanations"])
        stated = "\n".join(c.source for c in q["prompt"])
        for cell in stubs.get(q["name"], []):
            code = "\n".join(line.split("#", 1)[0] for line in cell.source.splitlines())
            for comment in _comments(cell.source):
                numbers = (_numbers(comment) & _numbers(answer)) - _numbers(stated + "\n" + code)
                formulas = {e for e in _expressions(comment) if e in re.sub(r"\s+", "", answer)}
                if numbers or formulas:
                    leaks.append(f"{q['name']}: the stub comment {comment!r} states "
                                 f"{', '.join(sorted(numbers | formulas))} of the solution")
    return leaks


def test_student_copy_gives_no_answer_away(made):
    """No solution text, "Why" explanation or answer-revealing stub comment in the student copy
    (issue #28, item 6). Reuses the otter assign output of ``made``: no extra grading."""
    master, result = made
    leaks = student_copy_leaks(master, result / "student" / master.name)
    assert not leaks, f"{master.name}: the student copy gives answers away:\n" + "\n".join(leaks)


def test_every_chapter_with_exercises_is_a_master():
    """A chapter with an Exercises section is an otter master, so the book serves a student copy
    and an autograder zip for it (issue #28, item 6)."""
    chapters = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    with_exercises = [p for p in chapters if any(c.cell_type == "markdown" and _EXERCISES_HEADING.search(c.source)
                                                 for c in nbformat.read(p, as_version=4).cells)]
    assert with_exercises
    missing = [str(p.relative_to(ROOT)) for p in with_exercises if p not in MASTERS]
    assert not missing, f"chapters with exercises that are not otter masters (no student copy, no zip): {missing}"


def _toy_master(tmp_path: Path) -> Path:
    """A two-question master: a Why inside q1's SOLUTION block, a Why after q2's END QUESTION,
    a tagged explanation, a Hint dropdown in a prompt, and a dropdown outside the exercises."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

    nb = new_notebook(cells=[
        new_markdown_cell("# Toy\n\n```{admonition} What you should have seen\n:class: dropdown\nThe curve is a valley.\n```"),
        new_markdown_cell("## Exercises"),
        new_raw_cell("# BEGIN QUESTION\nname: q1"),
        new_markdown_cell("**Exercise 1.** Store the stall point as `x_q1`.\n\n```{admonition} Hint\n:class: dropdown\n"
                          "Solve it by hand.\n```"),
        new_raw_cell("# BEGIN SOLUTION"),
        new_code_cell("x_q1 = -2.0  # SOLUTION"),
        new_markdown_cell("```{dropdown} Why\nThe two near examples pull with their full gradient, so x = c/2 - 3.\n```"),
        new_raw_cell("# END SOLUTION"),
        new_raw_cell("# END QUESTION"),
        new_raw_cell("# BEGIN QUESTION\nname: q2"),
        new_markdown_cell("**Exercise 2.** Store the interval for c = 0.5 as `interval_q2`."),
        new_raw_cell("# BEGIN SOLUTION"),
        new_code_cell("# both gradients are clipped, so the interval is symmetric\ninterval_q2 = (-2.5, 2.5)  # SOLUTION"),
        new_raw_cell("# END SOLUTION"),
        new_raw_cell("# END QUESTION"),
        new_markdown_cell(":::{admonition} Why\n:class: dropdown\nEvery x in [-(3 - c), 3 - c] is stationary, here [-2.5, 2.5].\n:::"),
        new_markdown_cell("The smear grows as c shrinks, as the reader now knows.", metadata={"tags": ["solution-explanation"]}),
        new_markdown_cell("## Summary"),
    ])
    path = tmp_path / "toy.ipynb"
    nbformat.write(nb, path)
    return path


def test_explanations_are_left_out_of_the_student_copy(tmp_path):
    """Unit test of tools/assign.py's explanation step: Markdown inside SOLUTION blocks, "Why" dropdowns
    wherever they stand and cells tagged solution-explanation go; prompts, hints and the rest stay."""
    master = _toy_master(tmp_path)
    found = assign_tool.answer_explanations(master)
    assert len(found) == 3 and all("Why" in s or "smear" in s for s in found)
    student = tmp_path / "student.ipynb"
    student.write_bytes(master.read_bytes())
    assert assign_tool.drop_explanations(student, found) == 3
    text = "\n".join(c.source for c in nbformat.read(student, as_version=4).cells)
    assert "c/2 - 3" not in text and "[-2.5, 2.5]" not in text and "smear" not in text
    assert "Solve it by hand" in text and "The curve is a valley" in text and "Exercise 2" in text


def test_the_leak_check_can_fail(tmp_path):
    """The leak check flags a Why left in, solution text, and a stub comment with a value of the
    solution; it passes the same copy once they are gone."""
    from nbformat.v4 import new_code_cell

    master = _toy_master(tmp_path)
    nb = nbformat.read(master, as_version=4)
    stub = new_code_cell("# the answer is symmetric, -2.5 to 2.5\ninterval_q2 = ...", metadata={"tags": ["otter_answer_cell"]})
    nb.cells = [c for c in nb.cells if c.cell_type != "raw" and "SOLUTION" not in c.source]
    nb.cells[4:4] = [new_code_cell("x_q1 = ...", metadata={"tags": ["otter_answer_cell"]}),
                     new_code_cell('grader.check("q1")')]
    nb.cells[-2:-2] = [stub, new_code_cell('grader.check("q2")')]
    student = tmp_path / "student.ipynb"
    nbformat.write(nb, student)
    leaks = "\n".join(student_copy_leaks(master, student))
    assert "'Why' dropdown" in leaks and "q1: solution text" in leaks and "q2: solution text" in leaks
    assert "q2: the stub comment" in leaks and "2.5" in leaks
    stub.source = "# the stationary interval (lo, hi), floats\ninterval_q2 = ..."
    nbformat.write(nb, student)
    assign_tool.drop_explanations(student, assign_tool.answer_explanations(master))
    assert student_copy_leaks(master, student) == []


def test_untouched_student_copy_fails_cleanly(graded):
    res = graded["student"]
    assert not res.has_catastrophic_failure()
    assert res.possible > 0 and res.total == 0
    for name, qres in res.results.items():
        assert qres.score == 0, f"{name} passes with no answer"


#: Names a notebook cell may read without defining them: IPython's kernel namespace.
_KERNEL_NAMES = {"display", "get_ipython", "In", "Out", "exit", "quit"}


def _answer_cell(cell) -> bool:
    return "otter_answer_cell" in cell.metadata.get("tags", [])


def _stubbed(source: str) -> set[str]:
    """Names an answer cell leaves as ``...`` (``x = ...``, ``x, y = ..., ...``)."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(isinstance(v, ast.Constant) and v.value is Ellipsis
                                                for v in ast.walk(node.value)):
            out |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def student_copy_breaks(student: Path) -> list[str]:
    """Why the untouched student copy would not run from top to bottom (empty: it runs).

    Every code cell parses; every name a cell reads from the notebook's scope is defined by a
    cell above it (or by the cell itself, Python's builtins, IPython's namespace); no cell other
    than the answer cells and ``grader.check`` reads a name that an answer cell leaves ``...``.
    The master, whose cells are the same but for answers, tests and dropped explanation cells,
    has run under nbval; so this is what can break the copy alone.
    """
    import builtins

    problems, defined, stubs = [], set(dir(builtins)) | _KERNEL_NAMES, {}
    for k, cell in enumerate(nbformat.read(student, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        try:
            defines, reads, _ = _names(cell.source)
        except SyntaxError as exc:
            problems.append(f"cell {k} does not parse: {exc}")
            continue
        if re.fullmatch(r'grader\.check\("\w+"\)', cell.source.strip()):
            continue
        undefined = sorted(reads - defined - defines)
        if undefined:
            problems.append(f"cell {k} reads {', '.join(undefined)}, which no cell above defines")
        if _answer_cell(cell):
            stubs.update(dict.fromkeys(_stubbed(cell.source), k))
        else:
            read_stubs = sorted(n for n in reads & stubs.keys() if n not in defines)
            if read_stubs:
                problems.append(f"cell {k} reads {', '.join(read_stubs)}, left '...' by answer cell "
                                f"{stubs[read_stubs[0]]}: it fails in an untouched copy")
            for name in defines:
                stubs.pop(name, None)
        defined |= defines
    return problems


def test_untouched_student_copy_runs(made):
    master, result = made
    student = result / "student" / master.name
    assert student_copy_breaks(student) == []
    assert any(_answer_cell(c) and _stubbed(c.source) for c in nbformat.read(student, as_version=4).cells)


def test_the_run_check_can_fail(tmp_path):
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell("a_q1 = ...\nb_q1 = 2")
    answer.metadata["tags"] = ["otter_answer_cell"]
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np\nx = np.ones(3)"), answer,
                nbformat.v4.new_code_cell('grader.check("q1")'),
                nbformat.v4.new_code_cell("y = x + b_q1"),          # fine: b_q1 is given, not '...'
                nbformat.v4.new_code_cell("z = a_q1 * 2"),          # reads the unanswered a_q1
                nbformat.v4.new_code_cell("w = dropped + 1"),       # a cell that defined it was dropped
                nbformat.v4.new_code_cell("v = (1,")]               # does not parse
    path = tmp_path / "student.ipynb"
    nbformat.write(nb, path)
    problems = student_copy_breaks(path)
    assert len(problems) == 3, problems
    assert "a_q1" in problems[0] and "'...'" in problems[0]
    assert "dropped" in problems[1] and "no cell above" in problems[1]
    assert "does not parse" in problems[2]
    nb.cells = nb.cells[:4]
    nbformat.write(nb, path)
    assert student_copy_breaks(path) == []


def test_solutions_pass_every_test(graded):
    res = graded["autograder"]
    assert not res.has_catastrophic_failure()
    assert res.total == res.possible > 0, res.summary()
    n_hidden = 0
    for name, qres in res.results.items():
        cases = qres.test_case_results
        assert cases and all(tc.passed for tc in cases), f"{name}: {qres}"
        n_hidden += sum(tc.test_case.hidden for tc in cases)
    assert n_hidden >= len(res.results)   # every question has a hidden test, and it ran


# --------------------------------------------------------------------------- the student copy carries numbers

def test_render_glue_into_writes_the_numbers(tmp_path):
    """Unit test of tools/assign.py's glue step: roles become the glued values, formatted."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("ε = {glue:text}`eps:.2f` after {glue:text}`steps` steps; "
                                              "{glue:text}`unknown`"),
                nbformat.v4.new_code_cell('glue("eps", 1.23456)')]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    glue = tmp_path / "x.glue.json"
    glue.write_text(json.dumps({"eps": {"data": {"text/plain": "1.23456"}}, "steps": {"data": {"text/plain": "3000"}}}))
    assert assign_tool.render_glue_into(path, glue) == 1            # the unknown key is left, and counted
    text = nbformat.read(path, as_version=4).cells[0].source
    assert text.startswith("ε = 1.23 after 3000 steps;") and "{glue:text}`unknown`" in text
    assert assign_tool.render_glue_into(path, tmp_path / "missing.glue.json") == 1   # no build: counted, untouched
    assert assign_tool.glue_json_for(ROOT / "book" / "part1" / "huberization.ipynb") == \
        ROOT / "_build" / "jupyter_execute" / "book" / "part1" / "huberization.glue.json"


def test_student_copy_has_no_glue_roles(tmp_path):
    """JupyterLab (even with jupyterlab-myst) shows ``{glue:text}`` roles raw: the student copy that
    ``make assignments`` writes carries the book's numbers instead (issue #10, item 2)."""
    master = SOLUTION_SMOKE[0]
    roles = {m for c in nbformat.read(master, as_version=4).cells if c.cell_type == "markdown"
             for m in re.findall(r"\{glue(?::\w+)?\}`([^`:]+)", c.source)}
    assert roles, f"{master.name} glues no number: pick a master that does"
    glue = tmp_path / "book.glue.json"
    glue.write_text(json.dumps({k: {"data": {"text/plain": "0.5"}} for k in roles}))
    result = assign_tool.assign(master, tmp_path / "out", glue_json=glue)
    student = nbformat.read(result / "student" / master.name, as_version=4)
    prose = "\n".join(c.source for c in student.cells if c.cell_type == "markdown")
    assert "{glue" not in prose, "glue roles left in the student copy"
    assert "0.5" in prose


def _failed_run(tmp_path: Path, printed: str):
    """A finished grading job whose process printed ``printed`` and exited with status 1."""
    log = open(tmp_path / "otter-run.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", f"print({printed!r}); raise SystemExit(1)"], stdout=log,
                            stderr=subprocess.STDOUT)
    return proc, (tmp_path / "chapter.ipynb", tmp_path, tmp_path), log


@pytest.mark.parametrize("printed, start_failed", [
    ("RuntimeError: Kernel didn't respond in 60 seconds", True),
    ("RuntimeError: Kernel died before replying to kernel_info", True),
    ("AssertionError: q1 failed", False),
], ids=["no-reply", "died", "test-failed"])
def test_a_kernel_that_never_started_is_told_apart(tmp_path, printed, start_failed):
    with pytest.raises(AssertionError, match="otter run failed") as info:
        _finish(_failed_run(tmp_path, printed))
    assert isinstance(info.value, KernelStartFailed) is start_failed


def test_grading_is_retried_once_only_when_the_kernel_did_not_start(tmp_path, monkeypatch):
    made = (tmp_path / "chapter.ipynb", tmp_path)
    outcomes = []
    monkeypatch.setattr(sys.modules[__name__], "_start_grading", lambda *args: args)

    def finish(job):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(sys.modules[__name__], "_finish", finish)
    outcomes[:] = [KernelStartFailed("no kernel"), "graded"]
    assert _grade(made, "student") == "graded"
    outcomes[:] = [KernelStartFailed("no kernel"), KernelStartFailed("no kernel again")]
    with pytest.raises(KernelStartFailed, match="again"):
        _grade(made, "student")
    outcomes[:] = [AssertionError("q1 failed"), "graded"]
    with pytest.raises(AssertionError, match="q1 failed"):
        _grade(made, "student")
    assert outcomes == ["graded"]  # a real failure is not graded twice


# --------------------------------------------------------------------------- public tests that mean something (#32)
#
# A wrong answer must not see "All test cases passed!": the public tests (what ``grader.check``
# runs in the student copy) catch the common mistakes with a message that says what is wrong.
# ``tests/wrong_answers/<chapter>.py`` keeps plausible wrong answers per question; the test below
# grades each one with the public tests of the student copy (otter's own OK-test runner) and
# checks that they reject it with that message, that the solution passes them, and that an
# unanswered question fails on a message, not on a crash.
#
# Fast on purpose: no chapter is executed whole. Only the statements of the chapter that the
# exercise needs run, in order, in one namespace (a backward slice over top-level statements:
# the names that the prompt code, the solution, the tests and the wrong answers read, and the
# statements that define or change them); then per question each answer runs on a copy of that
# namespace. The chapter's expensive cells (figures, sweeps an exercise does not read) are skipped.

WRONG_ANSWERS_DIR = ROOT / "tests" / "wrong_answers"
_MARK = re.compile(r"#\s+(BEGIN|END)\s+(QUESTION|SOLUTION|TESTS|PROMPT)\b", re.I)
#: Calls with a global side effect that a kept statement may rely on (always kept).
_SIDE_EFFECT = re.compile(r"\b(manual_seed|set_default_dtype|set_num_threads|filterwarnings|simplefilter)\s*\(")
#: Top-level calls that only show something: left out of solutions and prompt code.
_OUTPUT_CALLS = {"print", "display", "glue"}
#: Exceptions a public test may raise on a wrong or missing answer: an assert with a message.
_RAISED = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b(:?)(.*)$", re.M)


def wrong_answers(master: Path) -> dict:
    """``{question: [{mistake, code, message}, ...]}`` from ``tests/wrong_answers/<chapter>.py``."""
    path = WRONG_ANSWERS_DIR / f"{master.stem}.py"
    if not path.is_file():
        return {}
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["WRONG_ANSWERS"]


def _code_cells(master: Path) -> list[dict]:
    """Code cells of a master in order: source, role (CHAPTER, QUESTION, SOLUTION, TESTS) and question."""
    out, stack, question = [], [], None
    for cell in nbformat.read(master, as_version=4).cells:
        src = cell.source.strip()
        if cell.cell_type == "raw":
            m = _MARK.match(src)
            if m and m.group(1).upper() == "BEGIN":
                stack.append(m.group(2).upper())
                if m.group(2).upper() == "QUESTION":
                    question = re.search(r"name:\s*(\S+)", src).group(1)
            elif m:
                if stack.pop() == "QUESTION":
                    question = None
            continue
        if cell.cell_type == "code":
            out.append({"source": cell.source, "role": stack[-1] if stack else "CHAPTER", "question": question})
    return out


def _statements(source: str) -> list[tuple]:
    """The top-level statements of some code: (ast node, its source lines, decorators included)."""
    import ast

    lines = source.splitlines()
    return [(node, "\n".join(lines[min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1:
                                   node.end_lineno]))
            for node in ast.parse(source).body]


def _without_output(source: str) -> str:
    """The code without its top-level ``print``/``display``/``glue`` calls."""
    import ast

    return "\n".join(s for node, s in _statements(source)
                     if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                             and isinstance(node.value.func, ast.Name) and node.value.func.id in _OUTPUT_CALLS))


def _base_name(node):
    import ast

    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _changed(statements) -> set[str]:
    """Names whose objects the statements change: ``x[...] = ``, ``x.a = ``, ``x.f(...)`` as a statement."""
    import ast

    out = set()
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
                out.add(_base_name(node))
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Attribute):
                out.add(_base_name(node.value.func))
    return out - {None}


def _names(source: str) -> tuple[set, set, set]:
    """(names a statement defines, names it reads from the module scope, names whose objects it changes)."""
    import ast
    import symtable

    top = symtable.symtable(source, "<cell>", "exec")
    defines = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    reads = set()

    def walk(table, is_top):
        reads.update(s.get_name() for s in table.get_symbols() if s.is_referenced() and (is_top or s.is_global()))
        for child in table.get_children():
            walk(child, False)

    walk(top, True)
    tree = ast.parse(source)
    changes = _changed(tree.body)
    for stmt in tree.body:   # ``for P in problems: P.x = ...`` changes the items of ``problems``
        if isinstance(stmt, ast.For) and {n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name)} & _changed(stmt.body):
            changes |= {n.id for n in ast.walk(stmt.iter) if isinstance(n, ast.Name)}
    return defines, reads, changes


def chapter_slice(master: Path, extra_code=()) -> list[tuple[int, str]]:
    """The chapter's top-level statements that the exercises need, in order: ``(cell number, source)``.

    A backward slice: starting from the names that the exercises' code cells and ``extra_code``
    (wrong answers) read, keep every statement that defines one of the needed names or changes
    its object (not a module's), and add the names it reads. Statements with a global side
    effect (``torch.set_default_dtype``, seeds) are always kept.
    """
    import ast

    cells = _code_cells(master)
    modules = {(a.asname or a.name).split(".")[0] for c in cells for node in ast.walk(ast.parse(c["source"]))
               if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    need = set()
    for code in [_without_output(c["source"]) for c in cells if c["role"] != "CHAPTER"] + list(extra_code):
        need |= _names(code)[1]
    units = [(k, s, node) for k, c in enumerate(cells) if c["role"] == "CHAPTER" for node, s in _statements(c["source"])]
    keep = []
    for k, source, node in reversed(units):
        defines, reads, changes = _names(source)
        side_effect = _SIDE_EFFECT.search(source) and not isinstance(node, (ast.FunctionDef, ast.ClassDef))
        if (defines | (changes - modules)) & need or side_effect:
            keep.append((k, source))
            need |= reads
    return keep[::-1]


def _public_specs(student: Path) -> dict:
    """The OK-format tests of a student copy (notebook metadata), per question: the public tests."""
    tests = nbformat.read(student, as_version=4).metadata["otter"]["tests"]
    for name, spec in tests.items():
        assert not any(case.get("hidden") for suite in spec["suites"] for case in suite["cases"]), \
            f"{student.name}: a hidden test of {name} is in the student copy"
    return tests


def _run_public(spec: dict, env: dict) -> tuple[bool, str]:
    """Grade ``env`` with otter's OK-test runner (what ``grader.check`` does): (passed, its report)."""
    from otter.test_files.ok_test import OKTestFile

    test = OKTestFile.from_spec(spec)
    test.run(env)
    return test.passed_all, test.summary()


def _only_assertions(report: str) -> list[str]:
    """The exceptions in a failed test's report that are not an AssertionError with a message."""
    return [m.group(0).strip() for m in _RAISED.finditer(report)
            if m.group(1) != "AssertionError" or not m.group(3).strip()]


def _answer_stubs(student: Path) -> dict[str, list[str]]:
    """The answer cells of a student copy per question (the code a student starts from)."""
    stubs, pending = {}, []
    for cell in nbformat.read(student, as_version=4).cells:
        check = re.fullmatch(r'grader\.check\("(\w+)"\)', cell.source.strip()) if cell.cell_type == "code" else None
        if check:
            stubs[check.group(1)], pending = pending, []
        elif cell.cell_type == "code" and "otter_answer_cell" in cell.metadata.get("tags", []):
            pending.append(cell.source)
    return stubs


def check_public_tests(master: Path, student: Path, answers: dict) -> tuple[list[str], int]:
    """Run the exercises of ``master`` on a slice of the chapter; return (problems found, answers graded).

    Per question, each on a copy of the namespace the chapter has built so far: the solution
    must pass the public tests of the ``student`` copy, the unanswered question (the student
    copy's answer cells) must fail them on an assert message, and each wrong answer (run after
    those answer cells) must fail them with its ``message``.
    """
    import contextlib
    import io

    specs, stubs = _public_specs(student), _answer_stubs(student)
    cells = _code_cells(master)
    keep = chapter_slice(master, [w["code"] for ws in answers.values() for w in ws])
    run = lambda code, env, name: exec(compile(code, name, "exec"), env)  # noqa: E731
    ns, problems, graded, done = {"__name__": "__main__"}, [], 0, set()
    with contextlib.redirect_stdout(io.StringIO()):
        for k, cell in enumerate(cells):
            q = cell["question"]
            if cell["role"] == "CHAPTER":
                for _, source in (s for s in keep if s[0] == k):
                    run(source, ns, f"{master.stem}, cell {k}")
            elif cell["role"] == "QUESTION":
                run(_without_output(cell["source"]), ns, f"{master.stem}, {q}, prompt")
            elif cell["role"] == "SOLUTION" and q not in done:
                done.add(q)
                solution = [c["source"] for c in cells if c["question"] == q and c["role"] == "SOLUTION"]
                if q not in specs or q not in stubs:
                    problems.append(f"{q}: no public test or no answer cell in the student copy")
                    continue
                stub = [_without_output(s) for s in stubs[q]]
                env = dict(ns)
                for s in solution:
                    run(_without_output(s), env, f"{master.stem}, {q}, solution")
                passed, report = _run_public(specs[q], env)
                graded += 1
                if not passed:
                    problems.append(f"{q}: the solution fails the public tests:\n{report[-1500:]}")
                env = dict(ns)
                for s in stub:
                    run(s, env, f"{master.stem}, {q}, unanswered")
                passed, report = _run_public(specs[q], env)
                if passed or _only_assertions(report):
                    problems.append(f"{q}: unanswered, the public tests {'pass' if passed else 'crash'}: "
                                    f"{_only_assertions(report)[:3]}")
                for wrong in answers.get(q, []):
                    env = dict(ns)
                    for s in stub:
                        run(s, env, f"{master.stem}, {q}, unanswered")
                    run(wrong["code"], env, f"{master.stem}, {q}, wrong answer")
                    passed, report = _run_public(specs[q], env)
                    graded += 1
                    if passed:
                        problems.append(f"{q}: the public tests pass a wrong answer ({wrong['mistake']})")
                    elif _only_assertions(report):
                        problems.append(f"{q}: the public tests crash on a wrong answer ({wrong['mistake']}) instead "
                                        f"of saying what is wrong: {_only_assertions(report)[:3]}")
                    elif wrong["message"] not in report:
                        problems.append(f"{q}: a wrong answer ({wrong['mistake']}) is rejected, but not with "
                                        f"{wrong['message']!r}:\n{report[-1500:]}")
                for s in solution:   # the chapter goes on with the solution, as in the master
                    run(_without_output(s), ns, f"{master.stem}, {q}, solution")
    return problems, graded


def test_public_tests_reject_wrong_answers(made, monkeypatch):
    """The public tests of every question (issue #32, item 1): the solution passes them, an
    unanswered question and every wrong answer of ``tests/wrong_answers/`` fail them, each wrong
    answer with a message that says what is wrong. Graded with the student copy's own tests."""
    import gc
    import warnings

    import torch

    master, result = made
    answers = wrong_answers(master)
    monkeypatch.chdir(master.parent)
    for key, value in assign_tool.HEADLESS_ENV.items():
        monkeypatch.setenv(key, value)
    dtype, rng, threads = torch.get_default_dtype(), torch.get_rng_state(), torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problems, graded = check_public_tests(master, result / "student" / master.name, answers)
    finally:
        torch.set_default_dtype(dtype)   # the chapters set these for themselves: not for the next test
        torch.set_rng_state(rng)
        torch.set_num_threads(threads)
        gc.collect()
    assert not problems, f"{master.name}:\n" + "\n".join(problems)
    assert graded > len(answers) > 0


def test_every_exercise_has_a_wrong_answer():
    """Each question of each master keeps at least one wrong answer in ``tests/wrong_answers/``, and
    no wrong answer belongs to a question that does not exist."""
    missing, stray = [], []
    for master in MASTERS:
        questions = {c["question"] for c in _code_cells(master) if c["question"]}
        answers = wrong_answers(master)
        missing += [f"{master.stem} {q}" for q in sorted(questions) if not answers.get(q)]
        stray += [f"{master.stem} {q}" for q in answers if q not in questions]
        for q, ws in answers.items():
            assert all(set(w) == {"mistake", "code", "message"} and w["message"].strip() for w in ws), (master.stem, q)
    assert not missing, f"questions without a wrong answer in tests/wrong_answers/: {missing}"
    assert not stray, f"wrong answers for questions that do not exist: {stray}"


def test_every_public_assert_says_what_is_wrong():
    """Every ``assert`` of a public test carries a message (a string): a student who fails it reads
    what is wrong, not a bare ``AssertionError`` (issue #32, item 1)."""
    import ast

    bare = []
    for master in MASTERS:
        _, tests = _blocks(master)
        for body, hidden in tests:
            if hidden:
                continue
            for node in ast.walk(ast.parse(body)):
                if isinstance(node, ast.Assert) and not (isinstance(node.msg, ast.Constant) and str(node.msg.value).strip()
                                                         or isinstance(node.msg, ast.JoinedStr)):
                    bare.append(f"{master.stem}: {ast.unparse(node)[:100]}")
    assert not bare, "public asserts without a message:\n" + "\n".join(bare)


def test_the_slice_keeps_what_an_exercise_reads():
    """Unit test of :func:`chapter_slice`: definitions, changes of an object (also through a loop
    variable) and seeds are kept; statements the exercise does not read are not."""
    from nbformat.v4 import new_code_cell, new_notebook, new_raw_cell

    import tempfile

    nb = new_notebook(cells=[
        new_code_cell("import torch\ntorch.manual_seed(0)\nA = 1\nunused = expensive()"),
        new_code_cell("class P:\n    pass\n\nitems = [P(), P()]\nfor it in items:\n    it.value = A\nfig = plot(items)"),
        new_code_cell("B = A + 1\nB_table = {}\nB_table['x'] = B"),
        new_raw_cell("# BEGIN QUESTION\nname: q1"), new_raw_cell("# BEGIN SOLUTION"),
        new_code_cell("answer = items[0].value + B_table['x']  # SOLUTION\nprint(fig)"),
        new_raw_cell("# END SOLUTION"), new_raw_cell("# END QUESTION"),
    ])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "toy.ipynb"
        nbformat.write(nb, path)
        kept = [s for _, s in chapter_slice(path)]
    assert kept == ["import torch", "torch.manual_seed(0)", "A = 1", "class P:\n    pass",
                    "items = [P(), P()]", "for it in items:\n    it.value = A", "B = A + 1", "B_table = {}",
                    "B_table['x'] = B"]


def test_the_student_copy_defines_every_answer(tmp_path):
    """Unit test of ``tools/assign.py``'s ``declare_answers``: a solution written as one
    ``# BEGIN SOLUTION`` block leaves the student ``...`` only; the copy then ends the answer
    cell with ``x = ...`` for each variable the tests read, so an unanswered question fails on
    the tests' messages and not on a NameError. Answers the stub already defines are not repeated."""
    from nbformat.v4 import new_code_cell, new_notebook, new_raw_cell

    test = '""" # BEGIN TEST CONFIG\npoints: 1\n""" # END TEST CONFIG\n'
    master = tmp_path / "toy.ipynb"
    nbformat.write(new_notebook(cells=[
        new_raw_cell("# BEGIN QUESTION\nname: q1"), new_raw_cell("# BEGIN SOLUTION"),
        new_code_cell("C_q1 = 0.5\n# BEGIN SOLUTION\n_h = 2\ntheta_q1, rest_q1 = float(_h), 1\n# END SOLUTION"),
        new_raw_cell("# END SOLUTION"), new_raw_cell("# BEGIN TESTS"),
        new_code_cell(test + 'assert isinstance(theta_q1, float), "theta_q1 must be a float"\nassert C_q1 == 0.5, "C"'),
        new_raw_cell("# END TESTS"), new_raw_cell("# END QUESTION"),
        new_raw_cell("# BEGIN QUESTION\nname: q2"), new_raw_cell("# BEGIN SOLUTION"),
        new_code_cell("y_q2 = 3.0  # SOLUTION"), new_raw_cell("# END SOLUTION"), new_raw_cell("# BEGIN TESTS"),
        new_code_cell(test + 'assert y_q2 > 0, "y_q2 must be positive"'), new_raw_cell("# END TESTS"),
        new_raw_cell("# END QUESTION"),
    ]), master)
    assert assign_tool.answer_names(master) == {"q1": ["C_q1", "theta_q1"], "q2": ["y_q2"]}
    answer = {"tags": ["otter_answer_cell"]}
    student = tmp_path / "student.ipynb"
    nbformat.write(new_notebook(cells=[
        new_code_cell("C_q1 = 0.5\n...", metadata=answer), new_code_cell('grader.check("q1")'),
        new_code_cell("y_q2 = ...", metadata=answer), new_code_cell('grader.check("q2")'),
    ]), student)
    assert assign_tool.declare_answers(student, master) == 1
    cells = nbformat.read(student, as_version=4).cells
    assert cells[0].source == "C_q1 = 0.5\n...\ntheta_q1 = ..." and cells[2].source == "y_q2 = ..."
