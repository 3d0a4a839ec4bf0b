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
from pathlib import Path

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


API = Path(__file__).resolve().parents[1] / "book" / "api"


def _api_pages() -> dict[str, str]:
    """``{page name: text}`` of the API reference: ``book/api/index.md`` and one page per part of the lab."""
    return {p.stem: p.read_text() for p in sorted(API.glob("*.md"))}


def test_every_module_is_in_the_api_reference():
    """Each public module of the lab (or its package) has an ``automodule`` on a page of ``book/api/``,
    so that the chapters' ``**In the lab:**`` links resolve (issue #10, item 11)."""
    text = "\n".join(_api_pages().values())
    documented = re.findall(r"^\.\.\s+(?:automodule|py:module)::\s+(\S+)", text, re.M)
    assert len(documented) == len(set(documented)), f"a module documented twice: {sorted(documented)}"
    missing = []
    for mod in _modules()[1:]:
        name = mod.__name__
        if hasattr(mod, "__path__"):      # a package: documented through its modules, or itself
            continue
        parent = name.rpartition(".")[0]
        if name not in documented and parent not in documented:
            missing.append(name)
    assert not missing, f"modules with no automodule in book/api/: {missing}"


def test_the_api_reference_is_split_like_the_book():
    """One page per part of the lab under a short index (issue #28, item 11: one page was
    188,000 px tall): the index documents no module itself and links every page, and every page
    is in ``_toc.yml`` under ``book/api/index`` (a page outside the table of contents is not built)."""
    import yaml

    pages = _api_pages()
    index = pages.pop("index")
    assert not re.search(r"^\.\.\s+automodule::", index, re.M), "book/api/index.md documents modules itself"
    assert len(pages) >= 8, f"the API reference has {len(pages)} pages under its index"
    linked = set(re.findall(r"\{doc\}`(?:[^`<]*<)?([\w/]+)>?`", index))
    assert set(pages) <= linked, f"API pages the index does not link: {sorted(set(pages) - linked)}"
    toc = yaml.safe_load((API.parents[1] / "_toc.yml").read_text())
    api = next(c for part in toc["parts"] for c in part["chapters"] if c["file"] == "book/api/index")
    in_toc = [s["file"] for s in api.get("sections", [])]
    assert sorted(in_toc) == sorted(f"book/api/{p}" for p in pages), \
        f"_toc.yml lists {in_toc} under book/api/index; book/api/ holds {sorted(pages)}"


# --------------------------------------------------------------------------- how the docstrings render

def _rendered_docstrings() -> dict[str, str]:
    """``{qualified name: docstring}`` of what autodoc renders in the API reference: every module's
    docstring, every public function and class, and each class's own public methods and properties."""
    out: dict[str, str] = {}
    for mod in _modules():
        if mod.__doc__:
            out[mod.__name__] = mod.__doc__
    for qual, obj in _public_objects().items():
        if obj.__doc__:
            out[qual] = obj.__doc__
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if name.startswith("_"):
                    continue
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if callable(member) and getattr(member, "__doc__", None):
                    out[f"{qual}.{name}"] = member.__doc__
    return out


#: A reference by the number of some list instead of author and year: "[003] Theorem 7" (the
#: papers' numbers in the lab's own notes), "Wang et al. (paper 003)", "[35] Wu et al.". Inline
#: literals are left out (``x[0]``, ``[B]`` are code, not citations).
NUMBERED_CITATION = re.compile(r"(?<![\w\])(])\[\d{1,3}\](?![\w(\[=])|\bpaper\s+\d{3}\b")
_CODE = re.compile(r"``.*?``|(?::[\w:.+-]+:)?`[^`]*`", re.S)


def numbered_citations(doc: str | None) -> list[str]:
    text = _CODE.sub(" ", inspect.cleandoc(doc or ""))
    return [text[max(0, m.start() - 30):m.end() + 30].replace("\n", " ") for m in NUMBERED_CITATION.finditer(text)]


def test_the_citation_rule_can_fail():
    old = "Wang et al. Thm 7.\n\nReferences\n----------\n[003] Theorem 7, Remark 1.\n"
    assert numbered_citations(old)
    assert numbered_citations("Lemma 2 of Wang et al. (paper 003).")
    assert numbered_citations("[000] Song, Thakkar, Thakurta (2021). Characterizing ...")
    assert not numbered_citations("References\n----------\nWang, Lei, Ying & Zhang (2022), Theorem 7, Remark 1.")
    assert not numbered_citations("The first row ``X[0]``, a batch ``[B]``, ``x[3]``, an interval [0, 1], y[2].")


def test_docstrings_cite_author_year():
    """The API reference printed "References [003] Theorem 7" 17 times: the lab's own numbering of
    the four papers. Every citation names its authors and year, as the book cites (issue #28, item 11)."""
    bad = [f"{q}: ...{hit}..." for q, doc in _rendered_docstrings().items() for hit in numbered_citations(doc)]
    assert not bad, "docstrings that cite by a list number instead of author-year:\n  " + "\n  ".join(bad)


#: napoleon's section names (numpy style); the field sections among them.
_SECTIONS = {"args", "arguments", "attention", "attributes", "caution", "danger", "error", "example",
             "examples", "hint", "important", "keyword args", "keyword arguments", "methods", "note",
             "notes", "other parameters", "parameters", "receive", "receives", "return", "returns",
             "raise", "raises", "references", "see also", "tip", "todo", "warning", "warnings", "warn",
             "warns", "yield", "yields"}
_NAMED = {"parameters", "other parameters", "attributes", "receive", "receives", "keyword args",
          "keyword arguments", "args", "arguments"}
_TYPED = {"return", "returns", "yield", "yields"}
_EXCEPTIONS = {"raise", "raises", "warn", "warns"}
_UNDERLINE = re.compile(r"^[=\-`:'\"~^_*+#<>]{2,}\s*$")
_NAMES = re.compile(r"\*{0,2}[A-Za-z_][\w.]*(?:\s*,\s*\*{0,2}[A-Za-z_][\w.]*)*")
_EXCEPTION_NAMES = re.compile(r"[A-Za-z_][\w.]*(?:\s*(?:,|\bor\b)\s*[A-Za-z_][\w.]*)*")
#: Words that make a "type" a sentence: the description was written on the type's line.
_PROSE = re.compile(r"\b(?:the|which|when|if|whose)\b|—")


def _numpy_sections(doc: str | None) -> list[tuple[str, list[str]]]:
    """``[(section name, its lines)]`` of a numpy-style docstring, as napoleon splits it."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: list[tuple[str, list[str]]] = []
    body = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if (i + 1 < len(lines) and line == line.lstrip() and line.strip().lower() in _SECTIONS
                and _UNDERLINE.match(lines[i + 1])):
            body = []
            out.append((line.strip().lower(), body))
            i += 2
            continue
        if body is not None:
            body.append(line)
        i += 1
    return out


def field_problems(doc: str | None) -> list[str]:
    """Entries of the Parameters / Returns / Yields / Raises sections that napoleon cannot read as
    numpy fields. napoleon takes every unindented line of such a section for a new entry and splits it
    at its first colon into name and type, the indented lines below being its description. A
    description wrapped onto unindented lines becomes a list of italic "return values" (``clip()``'s
    Returns); one written on the type's line becomes the type (``eta : float   constant step size``)."""
    bad = []
    for section, body in _numpy_sections(doc):
        kind = "named" if section in _NAMED else "typed" if section in _TYPED else \
            "exception" if section in _EXCEPTIONS else None
        if kind is None:
            continue
        heads = [line.strip() for line in body if line.strip() and line == line.lstrip()]
        for head in heads:
            bare = _CODE.sub("x", head)
            name, sep, typ = bare.partition(" : ")
            where = f"{section.title()}: {head[:90]!r}"
            if kind == "exception":
                if not _EXCEPTION_NAMES.fullmatch(bare):
                    bad.append(f"{where} is not an exception name (its description goes below, indented)")
                continue
            if ":" in (typ if sep else bare) or (sep and ":" in name):
                bad.append(f"{where} has a colon besides ' : ' (napoleon splits the entry there)")
                continue
            if kind == "named" and not _NAMES.fullmatch(name.strip()):
                bad.append(f"{where} does not start with a parameter name ('name : type')")
                continue
            t = (typ if sep else bare).strip()
            if "  " in t or ". " in t or re.search(r"[.;,:]$", t) or _PROSE.search(t):
                bad.append(f"{where} holds a description (put it on the lines below, indented)")
                continue
            if kind == "typed" and len(heads) > 1 and not sep:
                bad.append(f"{where}: one of several unindented lines, each of which napoleon makes a "
                           "return value (name them 'x : type', or indent the text under one type)")
    return bad


_OLD_CLIP_RETURNS = """Clip each vector.

Returns
-------
Tensor of shape ``broadcast(g.shape[:-1], clip_norm.shape) + (p,)``:
``g_i * min(1, C / ||g_i||)``. Vectors inside the ball are returned
unchanged; zero vectors stay exactly zero; the direction is never changed.
"""
_NEW_CLIP_RETURNS = """Clip each vector.

Returns
-------
Tensor
    ``g_i * min(1, C / ||g_i||)`` for every vector ``g_i``, of shape
    ``broadcast(g.shape[:-1], clip_norm.shape) + (p,)``.
"""


def test_the_field_rule_can_fail():
    """The forms that rendered wrong fail; numpy fields pass. napoleon confirms both: the old
    Returns becomes a bulleted list of italic fragments, the new one a description and a type."""
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import NumpyDocstring

    assert field_problems(_OLD_CLIP_RETURNS)
    assert not field_problems(_NEW_CLIP_RETURNS)
    config = Config(napoleon_use_param=True, napoleon_use_rtype=True)
    assert ":returns: * " in str(NumpyDocstring(_OLD_CLIP_RETURNS, config))
    rendered = str(NumpyDocstring(_NEW_CLIP_RETURNS, config))
    assert ":returns: ``g_i" in rendered and ":rtype: Tensor" in rendered
    assert field_problems("Parameters\n----------\neta : float           constant step size (< 1/L).\n")
    assert field_problems("Parameters\n----------\nX : Tensor[N, p], y : Tensor[N]\n    Data.\n")
    assert field_problems("Parameters\n----------\nepsilon, delta : the common privacy level.\n")
    assert field_problems("Returns\n-------\nfloat (the largest over runs when the norms are tensors).\n")
    assert field_problems("Returns\n-------\nLongTensor ``[runs, K]``: sorted indices per run.\n")
    assert field_problems("Raises\n------\nIf the input is wrong.\n")
    assert not field_problems("Parameters\n----------\nsteps, n : int\n    T and n.\nq : float in [1, 2], optional\n"
                              "clip_norm : float or Tensor broadcasting against ``g.shape[:-1]``\n")
    assert not field_problems("Returns\n-------\nt : ndarray of int, shape (m,)\n    Steps.\n"
                              "epsilon : ndarray\n    ε.\n\nRaises\n------\nValueError\n    If bad.\n")


def test_numpy_fields_render_as_fields():
    """``clip()``'s Returns rendered as broken italic bullets (issue #28, item 11): every Parameters,
    Returns, Yields and Raises entry of the API reference is a numpy field that napoleon reads as one."""
    bad = [f"{q}: {p}" for q, doc in _rendered_docstrings().items() for p in field_problems(doc)]
    assert not bad, f"{len(bad)} docstring entries napoleon cannot read as fields:\n  " + "\n  ".join(bad)


def _api_docs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("api_docs_ext", API.parents[1] / "_ext" / "api_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_reference_list_renders_one_work_per_paragraph():
    """A References section that lists several works became one run-on paragraph; ``_ext/api_docs.py``
    gives each work its own paragraph, joins hanging continuation lines, and leaves a single
    reference wrapped over several lines in one piece."""
    clean = _api_docs().clean_docstring
    listed = ["Summary.", "", "References", "----------",
              "Mironov, I. (2017). Rényi differential privacy. CSF.",
              "Balle, B., Barthe, G. (2020). Hypothesis testing",
              "interpretations and Rényi differential privacy. AISTATS.",
              "Chen, Wu & Hong (2020). Understanding gradient clipping in private SGD: a",
              "    geometric perspective."]
    assert clean(listed)[4:] == ["Mironov, I. (2017). Rényi differential privacy. CSF.", "",
                                 "Balle, B., Barthe, G. (2020). Hypothesis testing",
                                 "interpretations and Rényi differential privacy. AISTATS.", "",
                                 "Chen, Wu & Hong (2020). Understanding gradient clipping in private SGD: a "
                                 "geometric perspective."]
    wrapped = ["References", "----------",
               "Abadi et al. (2016); Mironov, Talwar, Zhang (2019); Koskela et al. (2020);",
               "Doroshenko et al. (2022).", "", "Notes", "-----", "A note. |S_t| (2019)."]
    assert clean(wrapped) == wrapped[:-1] + [r"A note. \|S_t\| (2019)."]


def test_a_first_line_with_a_colon_stays_prose():
    """napoleon reads the first line of a data, attribute or property docstring as ``type: text``:
    "Wang et al. Table 1: (reference, loss, ...)" printed "Type: Wang et al. Table 1". ``_ext/api_docs.py``
    puts the line back after napoleon; a first line without a colon outside code is left alone."""
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import NumpyDocstring

    ext = _api_docs()
    config = Config(napoleon_use_param=True, napoleon_use_rtype=True)
    for first in ("Wang et al. Table 1: (reference, loss, method).", "``rank(M)``: the dimension of the span.",
                  "Methods of :func:`tune_step_size`: noise-free training, DPSGD-GC and DiceSGD."):
        lines = ext.clean_docstring([first, "More about it."])
        napoleon = str(NumpyDocstring(list(lines), config, what="data", name="x")).splitlines()
        assert napoleon[-1].startswith(":type: "), napoleon          # what the page printed
        assert ext.restore_first_line(lines, napoleon) == [first, "More about it."]
    plain = ["A table, ``x[0]: y`` in code.", "More."]
    assert ext.restore_first_line(plain, str(NumpyDocstring(list(plain), config, what="data", name="x"))
                                  .splitlines()) == plain
