"""Every public function and class of the lab names its source (house rule; issue #10, item 11).

A public name is one listed in the ``__all__`` of ``dpclip_lab`` or of any of its submodules
(walked with ``pkgutil``, as ``tests/test_properties_api.py`` walks them). Its own docstring
(not an inherited one) must either

* name a **paper** — author(s) and year, e.g. "Chen, Wu & Hong (2020)", "Zhang et al. (2024)",
  "Mironov (2017)" — **and** the part of it implemented — an algorithm, theorem, lemma,
  proposition, definition, equation, section, remark, appendix or table ("Alg. 2", "Thm 3.8",
  "eq. (5)", "§4", "Sec. 3.3") — or
* start with ``Lab utility:`` when no paper is behind it.

The test fails with the list of offenders, each as ``module.qualname``, so that whoever owns
the module can fix it in one pass.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import dpclip_lab

#: Author(s) and a year: "Mironov (2017)", "Chen, Wu & Hong (2020)", "Zhang et al. 2024",
#: "Balle & Wang, 2018", "Wang, Lei, Ying and Zhang (2022)".
_NAME = r"[A-Z][A-Za-zÀ-ÿ'\-]+"
PAPER = re.compile(
    rf"\b{_NAME}(?:\s+et\s+al\.?|(?:\s*,\s*|\s+&\s+|\s+and\s+){_NAME})*\s*,?\s*\(?(?:19|20)\d\d[a-z]?\b")
#: A place in a paper: "Alg. 2", "Algorithm 1", "Thm 3.8", "Theorem 2", "Lemma 3.1", "Prop. 3",
#: "Cor. 1", "Def. 2.2", "eq. (5)", "Eq. 3", "equation (4)", "§4", "Sec. 3.3", "Section 5",
#: "Remark 4", "App. D", "Appendix A.2", "Table 1", "Fig. 2".
LOCATOR = re.compile(
    r"(?:\b(?:Alg(?:orithm)?s?|Thms?|Theorems?|Lemmas?|Props?|Propositions?|Cor|Corollary|Defs?|Definitions?|"
    r"[Ee]qs?|[Ee]quations?|Secs?|Sections?|Remarks?|App|Appendix|Tables?|Figs?|Figures?|Examples?|Claims?|Steps?)"
    r"\.?\s*\(?(?:[A-Z](?:\.?\d|\b)|\d)|§\s*[A-Z]?\d)")
LAB_UTILITY = "Lab utility:"


def _modules():
    """``dpclip_lab`` and every importable submodule (private ones, ``_x``, and ``__main__`` skipped)."""
    mods = [dpclip_lab]
    for info in pkgutil.walk_packages(dpclip_lab.__path__, prefix="dpclip_lab."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts[1:]):
            continue
        mods.append(importlib.import_module(info.name))
    return mods


def _public_objects():
    """``{id: (qualified name, object)}`` of every function and class in some ``__all__``."""
    seen: dict[int, tuple[str, object]] = {}
    for mod in _modules():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
                continue   # modules, constants, dicts, strings: no docstring of their own
            home = getattr(obj, "__module__", mod.__name__) or mod.__name__
            qual = f"{home}.{getattr(obj, '__qualname__', name)}"
            seen.setdefault(id(obj), (qual, obj))
    return dict(sorted(seen.values()))


def cites_its_source(doc: str | None) -> bool:
    """True when ``doc`` starts with "Lab utility:" or names a paper and a place in it."""
    if not doc or not doc.strip():
        return False
    text = inspect.cleandoc(doc)
    if text.startswith(LAB_UTILITY):
        return True
    return bool(PAPER.search(text)) and bool(LOCATOR.search(text))


def test_the_rule_can_fail():
    assert cites_its_source("Clip each row.\n\nChen, Wu & Hong (2020), eq. (3).")
    assert cites_its_source("DiceSGD (Zhang et al. 2024, Alg. 2).")
    assert cites_its_source("Lab utility: a table of numbers.")
    assert cites_its_source("RDP of the Gaussian, Mironov (2017) Prop. 7.")
    assert cites_its_source("Analytic Gaussian mechanism (Balle & Wang 2018, Thm 8).")
    assert cites_its_source("Local DP: Song, Thakkar & Thakurta (2021), Thm D.2 and App. D.")
    assert not cites_its_source("Clip each row to norm C.")                  # no source at all
    assert not cites_its_source("As in Abadi et al. (2016).")                # paper, but where in it?
    assert not cites_its_source("Implements Alg. 2.")                        # which paper?
    assert not cites_its_source("Song, Thakkar & Thakurta (2021), see the Appendix.")   # no place in it
    assert not cites_its_source("A helper. Lab utility: not at the start.")
    assert not cites_its_source(None)


def test_public_names_are_enumerated():
    objs = _public_objects()
    names = set(objs)
    # a few names that must be walked, from the package root, a subpackage and a leaf module
    for expected in ("dpclip_lab.clipping.clip", "dpclip_lab.accountants.calibration.get_epsilon",
                     "dpclip_lab.algorithms.dice_sgd.dice_sgd", "dpclip_lab.plotting.slider_figure"):
        assert expected in names, f"{expected} not enumerated"
    assert len(objs) > 100


@pytest.mark.parametrize("package", sorted({q.split(".")[1] for q in _public_objects()}))
def test_every_public_docstring_names_its_source(package):
    """Per top-level module of the lab, so that one owner's offenders do not hide another's."""
    offenders = [q for q, obj in _public_objects().items()
                 if q.split(".")[1] == package and not cites_its_source(obj.__doc__)]
    assert not offenders, (
        f"{len(offenders)} public docstrings in dpclip_lab.{package} name neither a paper (author(s) + year) "
        "and an algorithm/theorem/equation/section, nor start with 'Lab utility:':\n  " + "\n  ".join(offenders))


def test_every_module_is_in_the_api_reference():
    """Each public module of the lab (or its package) has an ``automodule`` in ``book/api/index.md``,
    so that the chapters' ``**In the lab:**`` links resolve (issue #10, item 11)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "book" / "api" / "index.md").read_text()
    documented = set(re.findall(r"^\.\.\s+(?:automodule|py:module)::\s+(\S+)", text, re.M))
    missing = []
    for mod in _modules()[1:]:
        name = mod.__name__
        if hasattr(mod, "__path__"):      # a package: documented through its modules, or itself
            continue
        parent = name.rpartition(".")[0]
        if name not in documented and parent not in documented:
            missing.append(name)
    assert not missing, f"modules with no automodule in book/api/index.md: {missing}"
