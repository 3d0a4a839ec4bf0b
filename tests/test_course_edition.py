"""The course edition and the autograder zip (issue #32, items 2 and 3).

* The self-study book (``make book``) folds the solutions and never links or ships an
  autograder zip (checked on the real build by ``tests/test_book_html.py``).
* The course edition (``make course``, ``tools/assign.py --course``): the pages without
  solutions, worked answers or tests, the student notebooks and the autograder zips, each
  in a folder of its own. Checked here on a small course build of a two-question master
  (a few seconds, no chapter executed) and, for every master of the book, on the notebook
  the course edition renders.
* The autograder zip grades anywhere: one fixed name, an ``environment.yml`` with the
  book's Python, the lab's pinned CPU dependencies and the lab itself (a wheel in the zip).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


assign_tool = _load("assign_tool_course", ROOT / "tools" / "assign.py")
MASTERS = assign_tool.find_masters()
#: The master whose zip is checked (the smallest chapter; test_assignments.py assigns it too).
ZIP_MASTER = next(p for p in MASTERS if p.stem == "no_gradient_field")


# --------------------------------------------------------------------------- the autograder zip (item 3)

@pytest.fixture(scope="module")
def assigned(tmp_path_factory):
    return assign_tool.assign(ZIP_MASTER, tmp_path_factory.mktemp("assignments"))


def _pins(section: str) -> dict[str, str]:
    return {re.split(r"[=<>\[ ]", r, 1)[0].lower(): r for r in assign_tool._requirement_sections()[section]}


def test_the_zip_has_one_fixed_name(assigned):
    zips = sorted(p.name for p in (assigned / "autograder").glob("*.zip"))
    assert zips == [f"{ZIP_MASTER.stem}-autograder.zip"], zips
    assert assign_tool.autograder_zip(assigned).name == f"{ZIP_MASTER.stem}-autograder.zip"


def test_the_zip_environment_lists_the_lab_and_its_pinned_cpu_dependencies(assigned):
    """``otter grade`` (Docker) and Gradescope install what the zip's ``environment.yml`` lists: the
    book's Python, every pin of requirements.txt's lab section (torch as its CPU build, from
    PyTorch's CPU index), what grading a chapter needs from the book section, and the lab."""
    with zipfile.ZipFile(assign_tool.autograder_zip(assigned)) as zf:
        names = zf.namelist()
        env = yaml.safe_load(zf.read("environment.yml"))
        run = zf.read("run_autograder").decode()
        wheels = [n for n in names if re.fullmatch(r"dpclip_lab-[^/]+\.whl", n)]
        assert len(wheels) == 1, f"the lab's wheel is not in the zip: {names}"
        with zipfile.ZipFile(zf.open(wheels[0])) as wheel:
            assert "dpclip_lab/__init__.py" in wheel.namelist()
    assert env["name"] == "otter-env", "run_autograder activates otter's environment by this name"
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    book_python = re.search(r"^\s*-\s*python\s*=+\s*([\d.]+)", (ROOT / "environment.yml").read_text(), re.M).group(1)
    assert f"python={book_python}" in conda, f"not the book's Python {book_python}: {conda}"
    assert sys.version.startswith(book_python + "."), "the virtual environment runs another Python than the book's"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert f"--extra-index-url {assign_tool.TORCH_CPU_INDEX}" in pip
    for name, pin in _pins("the lab").items():
        want = pin + "+cpu" if name == "torch" and "+" not in pin else pin
        assert want in pip, f"the zip's environment does not pin {want}: {pip}"
    book = _pins("the book")
    for name in assign_tool.AUTOGRADER_BOOK_PACKAGES:
        version = book[name].split("==", 1)[1]
        assert any(re.fullmatch(rf"{re.escape(name)}(\[[\w,]+\])?=={re.escape(version)}", p) for p in pip), (name, pip)
    assert f"{assign_tool.AUTOGRADER_SOURCE}/{wheels[0]}" in pip, "the environment does not install the lab's wheel"
    assert "export DPCLIP_HEADLESS=1" in run, "grading must run headless (no ipywidgets: nbclient can hang)"


# --------------------------------------------------------------------------- the course edition (item 2)

def test_course_notebooks_keep_the_code_and_drop_the_worked_answers():
    """For every master: the notebook the course edition renders has none of the Markdown that
    explains an answer, and exactly the master's code cells (so the execution cache of the book
    serves the course build, and the solution cells are there to be dropped from the page)."""
    classroom = _load("classroom_course", ROOT / "_ext" / "classroom.py")
    for master in MASTERS:
        text = master.read_text()
        course = nbformat.reads(classroom.course_notebook(text, master), as_version=4)
        original = nbformat.reads(text, as_version=4)
        explanations = assign_tool.answer_explanations(master)
        left = [c.source[:60] for c in course.cells if c.cell_type == "markdown" and c.source.strip() in explanations]
        assert not left, f"{master.name}: worked answers left in the course edition: {left}"
        code = lambda nb: [(c.source, c.metadata) for c in nb.cells if c.cell_type == "code"]  # noqa: E731
        assert code(course) == code(original), f"{master.name}: the course edition changed a code cell"


def _toy_book(src: Path) -> Path:
    """A small Sphinx project with one two-question master under book/ (no execution)."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

    solution_meta = {"tags": ["hide-input"], "mystnb": {"code_prompt_show": "Show a solution",
                                                        "code_prompt_hide": "Hide the solution"}}
    hidden = '""" # BEGIN TEST CONFIG\nhidden: true\npoints: 2\n""" # END TEST CONFIG\n'
    public = '""" # BEGIN TEST CONFIG\npoints: 1\n""" # END TEST CONFIG\n'
    nb = new_notebook(cells=[
        new_raw_cell("# ASSIGNMENT CONFIG\nname: toy\ninit_cell: true\nexport_cell: false\ncheck_all_cell: false\n"
                     "generate: true\ntests: {files: false, ok_format: true}", metadata={"tags": ["remove-cell"]}),
        new_markdown_cell("# Toy chapter\n\nThe text every edition shows."),
        new_code_cell("import math\nBASE = 3.0"),
        new_markdown_cell("## Exercises"),
        new_raw_cell("# BEGIN QUESTION\nname: q1", metadata={"tags": ["remove-cell"]}),
        new_markdown_cell("**Exercise 1.** Store the square root of `BASE` as the float `root_q1`."),
        new_raw_cell("# BEGIN SOLUTION", metadata={"tags": ["remove-cell"]}),
        new_code_cell("root_q1 = math.sqrt(BASE) * 1.0000  # SOLUTION", metadata=solution_meta),
        new_markdown_cell("```{admonition} Why\n:class: dropdown\nSquaring undoes the SECRET_EXPLANATION.\n```"),
        new_raw_cell("# END SOLUTION", metadata={"tags": ["remove-cell"]}),
        new_raw_cell("# BEGIN TESTS", metadata={"tags": ["remove-cell"]}),
        new_code_cell(public + 'assert isinstance(root_q1, float), "root_q1 must be a Python float PUBLIC_CHECK"',
                      metadata={"tags": ["remove-cell"]}),
        new_code_cell(hidden + "assert abs(root_q1 - 1.7320508) < 1e-6  # HIDDEN_CHECK", metadata={"tags": ["remove-cell"]}),
        new_raw_cell("# END TESTS", metadata={"tags": ["remove-cell"]}),
        new_raw_cell("# END QUESTION", metadata={"tags": ["remove-cell"]}),
        new_markdown_cell("More text after the exercises.", metadata={"tags": ["solution-explanation"]}),
        new_markdown_cell("## Summary\n\nThe end of the toy chapter."),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (src / "book").mkdir(parents=True)
    nbformat.write(nb, src / "book" / "toy.ipynb")
    (src / "index.md").write_text("# Toy book\n\n```{toctree}\nbook/toy\n```\n")
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['myst_nb', 'classroom']\n"
        "nb_execution_mode = 'off'\n"
        "myst_enable_extensions = ['colon_fence']\n"
        "exclude_patterns = ['_build']\n"
        "html_theme = 'basic'\n"
        "html_sourcelink_suffix = ''\n")   # as Jupyter Book: the page's download is _sources/<doc>.ipynb
    return src


def _text(path: Path) -> str:
    """A file of the site as a reader (or a search) sees it: HTML without its tags (highlighted
    code is split into spans), entities resolved."""
    import html

    text = path.read_text(errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if path.suffix == ".html" else text


@pytest.fixture(scope="module")
def course_build(tmp_path_factory):
    """The toy book built as the course edition (``DPCLIP_EDITION=course``) and assembled as
    ``make course`` assembles it: ``<tmp>/course/{site,student,autograder}``."""
    tmp = tmp_path_factory.mktemp("course")
    src = _toy_book(tmp / "src")
    out = tmp / "build" / "html"
    env = {**os.environ, "DPCLIP_EDITION": "course", **assign_tool.HEADLESS_ENV}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", str(src), str(out)],
                          capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return assign_tool.assemble_course(out, out.parent / "assignments", tmp / "course")


def test_course_edition_has_no_solution_and_no_hidden_test(course_build):
    site = course_build / "site"
    page = (site / "book" / "toy.html").read_text()
    assert "The text every edition shows" in page and "Store the square root" in page
    assert "Doing the exercises" in page and "_assignments/toy/toy.ipynb" in page
    texts = "\n".join(_text(p) for p in site.rglob("*") if p.is_file() and p.suffix in (".html", ".js", ".txt", ".ipynb"))
    for secret in ("math.sqrt(BASE) * 1.0000", "Show a solution", "SECRET_EXPLANATION", "More text after the exercises",
                   "HIDDEN_CHECK", "1.7320508"):
        assert secret not in texts, f"the course site holds {secret!r}"
    assert not list(site.rglob("*.zip")), "the course site ships an autograder zip"
    download = nbformat.read(site / "_sources" / "book" / "toy.ipynb", as_version=4)   # the page's download
    assert any('grader.check("q1")' in c.source for c in download.cells), "the page's download is not the student copy"


def test_course_edition_folders(course_build):
    """``student/`` holds the student notebook (public tests only), ``autograder/`` the zip with
    the hidden test, under its fixed name; a README says which folder to publish."""
    assert sorted(p.name for p in course_build.iterdir()) == ["README.md", "autograder", "site", "student"]
    student = course_build / "student" / "toy.ipynb"
    text = student.read_text()
    assert "PUBLIC_CHECK" in text and "1.7320508" not in text and "math.sqrt(BASE)" not in text
    assert [p.name for p in (course_build / "autograder").iterdir()] == ["toy-autograder.zip"]
    with zipfile.ZipFile(course_build / "autograder" / "toy-autograder.zip") as zf:
        tests = zf.read("tests/q1.py").decode()
    assert "1.7320508" in tests and "PUBLIC_CHECK" in tests   # the hidden test and the public one
    readme = (course_build / "README.md").read_text()
    assert "publish" in readme and "otter run" in readme and "otter grade" in readme and "Gradescope" in readme


def test_course_assembly_refuses_a_site_with_a_zip(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "x-autograder.zip").write_bytes(b"")
    (tmp_path / "assignments").mkdir()
    with pytest.raises(SystemExit, match="must not ship"):
        assign_tool.assemble_course(tmp_path / "site", tmp_path / "assignments", tmp_path / "course")


def test_make_course_builds_the_course_edition():
    """``make course`` runs ``tools/assign.py --course _build/course``, which builds with
    ``DPCLIP_EDITION=course`` (read by ``_ext/classroom.py``)."""
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^course:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert target and "tools/assign.py --course _build/course" in target.group(1)
    assert '"DPCLIP_EDITION": "course"' in (ROOT / "tools" / "assign.py").read_text()
    assert "course" in _load("classroom_editions", ROOT / "_ext" / "classroom.py").EDITIONS
