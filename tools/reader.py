"""Write the reader copies of the book's chapters (``make reader``; Binder's ``postBuild``).

A reader copy is a chapter as a reader opens it in Jupyter (``_ext/reader_copies.py``): for
a chapter with exercises the student copy (never the master with otter's markup, solutions
and hidden tests), every chapter with the book's numbers, citations and cross-references
written into its prose, which JupyterLab cannot render from the roles.

Usage::

    python tools/reader.py                      # every notebook chapter of _toc.yml -> reader/
    python tools/reader.py --out DIR [NOTEBOOK ...]
    python tools/reader.py --save-numbers       # make book: keep the build's numbers for Binder

The copies keep the book's folder layout (``reader/book/part1/huberization.ipynb``), so the
links between chapters work. The numbers come from the last book build
(``_build/jupyter_execute/<chapter>.glue.json``) where there is one, else from
``book/glued_numbers.json``, which ``make book`` refreshes (``--save-numbers``) and which is
committed: Binder builds no book. A number neither has shows as its name, and the copy says so.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUE_DIR = ROOT / "_build" / "jupyter_execute"


def _load(name: str, path: Path):
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


rc = _load("dpclip_reader_copies", ROOT / "_ext" / "reader_copies.py")
assign_tool = _load("dpclip_assign_tool_reader", ROOT / "tools" / "assign.py")


def docname_of(path: Path) -> str:
    return str(Path(path).resolve().relative_to(ROOT).with_suffix("")).replace("\\", "/")


def write_reader_copies(notebooks: list[Path], out: Path, *, glue_dir: Path = GLUE_DIR,
                        numbers: Path = rc.NUMBERS_FILE, jobs: int | None = None) -> dict[str, dict]:
    """Write ``out/<docname>.ipynb`` for each chapter in ``notebooks``; return a report per chapter:
    ``{"path", "master", "cited", "unresolved_glue", "leftover"}``."""
    import nbformat

    out = Path(out).resolve()
    bib = rc.book_bibliography(ROOT)
    index = rc.BookIndex.from_toc(ROOT)
    saved = rc.load_numbers(numbers)
    notebooks = [Path(p).resolve() for p in notebooks]
    masters = [p for p in notebooks if assign_tool.assignment_config(p) is not None]
    report = {}
    with tempfile.TemporaryDirectory(prefix="dpclip-reader-") as tmp:
        # otter assign runs in a subprocess per master: a few at a time
        workers = jobs or min(4, os.cpu_count() or 1)

        def student(master: Path) -> Path:
            glue_json = Path(glue_dir) / f"{docname_of(master)}.glue.json"
            result = assign_tool.assign(master, Path(tmp), glue_json=glue_json, warn_glue=False, autograder=False)
            return result / "student" / master.name

        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            students = dict(zip(masters, pool.map(student, masters)))
        for path in notebooks:
            doc = docname_of(path)
            glue_json = Path(glue_dir) / f"{doc}.glue.json"
            glue = json.loads(glue_json.read_text()) if glue_json.is_file() else {}
            lookup = rc.glue_lookup(glue, saved.get(doc))
            nb = nbformat.read(students.get(path, path), as_version=4)
            rendered = rc.reader_notebook(nb, doc, lookup=lookup, bib=bib, index=index)
            target = out / f"{doc}.ipynb"
            rc.write_notebook(rendered.notebook, target)
            report[doc] = {"path": str(target), "master": path in students, "cited": rendered.cited,
                           "unresolved_glue": rendered.unresolved_glue,
                           "leftover": rc.leftover_markup(rendered.notebook)}
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: every notebook of _toc.yml)")
    ap.add_argument("--out", type=Path, default=ROOT / rc.READER_DIR, help="output folder (default: reader/)")
    ap.add_argument("--glue-dir", type=Path, default=GLUE_DIR,
                    help="the book build's executed notebooks with <chapter>.glue.json (default: %(default)s)")
    ap.add_argument("--numbers", type=Path, default=rc.NUMBERS_FILE,
                    help="saved numbers, for chapters without a build (default: %(default)s)")
    ap.add_argument("--save-numbers", action="store_true",
                    help="write the numbers of the last build into --numbers and stop (make book)")
    ap.add_argument("--jobs", type=int, default=None, help="otter assign runs at a time")
    args = ap.parse_args(argv)
    notebooks = args.notebooks or rc.toc_notebooks(ROOT)
    if args.save_numbers:
        changed = rc.save_numbers(args.glue_dir, rc.toc_notebooks(ROOT), args.numbers, ROOT)
        print(f"{args.numbers}: {'updated (commit it: Binder reads it)' if changed else 'up to date'}")
        return 0
    report = write_reader_copies(notebooks, args.out, glue_dir=args.glue_dir, numbers=args.numbers, jobs=args.jobs)
    bad = {d: r["leftover"] for d, r in report.items() if r["leftover"]}
    missing = {d: r["unresolved_glue"] for d, r in report.items() if r["unresolved_glue"]}
    print(f"{len(report)} reader copies in {args.out}")
    for doc, names in missing.items():
        print(f"warning: {doc}: {len(names)} numbers unknown (no build, not in {args.numbers}): "
              f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''}", file=sys.stderr)
    for doc, found in bad.items():
        print(f"error: {doc}: the reader copy holds markup a reader must not see: {found[:5]}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
