"""The intro describes exactly the book that the table of contents holds (the house rule)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _entries(entries: list[dict]) -> list[str]:
    """The files of ``entries`` and of their ``sections``, depth first (the order of the book)."""
    return [f for e in entries for f in [e["file"]] + _entries(e.get("sections", []))]


def _toc_files() -> list[str]:
    """Every page of the table of contents: the chapters of each part and their sections (the API
    reference's pages sit under ``book/api/index``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [f for part in toc["parts"] for f in _entries(part["chapters"])]


def test_every_toc_chapter_is_introduced_and_every_intro_link_is_in_the_toc():
    intro = (ROOT / "book" / "intro.md").read_text()
    linked = {f"book/{m}" for m in re.findall(r"\{doc\}`([^`<>]+)`", intro)}
    chapters = set(_toc_files())
    assert chapters <= linked, f"chapters in _toc.yml that book/intro.md does not describe: {sorted(chapters - linked)}"
    assert linked <= chapters, f"book/intro.md links pages that are not in _toc.yml: {sorted(linked - chapters)}"


def test_toc_files_exist_and_every_chapter_is_in_the_toc():
    files = _toc_files()
    for f in files:
        assert any((ROOT / f"{f}{ext}").is_file() for ext in (".ipynb", ".md")), f"{f} in _toc.yml does not exist"
    notebooks = {str(p.relative_to(ROOT).with_suffix("")) for p in (ROOT / "book").rglob("*.ipynb")
                 if ".ipynb_checkpoints" not in p.parts}
    assert notebooks <= set(files), f"notebooks missing from _toc.yml: {sorted(notebooks - set(files))}"
