"""Sphinx extension: the bibliography lists its entries the way the text cites them.

The text cites author–year (``bibtex_reference_style: author_year``, set under
``sphinx: config`` in ``_config.yml``: Jupyter Book 1 does not pass the top-level key
on). The bibliography's own labels come from the pybtex style; the default "alpha"
prints keys such as ``[KJalkoH20]`` that appear nowhere in the text. This registers the
pybtex style ``dpclip``: pybtex's "plain" formatting with author–year labels
("Song et al. 2021"; "a", "b" suffixes when two entries share one).
"""
from __future__ import annotations

import re
from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx


def _plain(text: str) -> str:
    text = re.sub(r"\\[a-zA-Z]+\s*", "", text)            # LaTeX commands
    return re.sub(r"[{}]", "", text).strip()


def author_year(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    lasts = [_plain(" ".join(p.prelast_names + p.last_names)) for p in persons]
    if not lasts:
        who = _plain(entry.fields.get("organization") or entry.fields.get("title", "Anonymous")).split(":")[0]
    elif len(lasts) == 1:
        who = lasts[0]
    elif len(lasts) == 2:
        who = f"{lasts[0]} & {lasts[1]}"
    else:
        who = f"{lasts[0]} et al."
    return f"{who} {_plain(entry.fields.get('year', 'n.d.'))}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                seen[label] += 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            else:
                yield label


_TEXT_COMMANDS = re.compile(r"\\(?:texttt|textit|textbf|emph|url)\s*\{([^{}]*)\}")


def detex(value: str) -> str:
    r"""``\texttt{load\_breast\_cancer}`` -> ``load_breast_cancer`` (pybtex prints text commands raw)."""
    value = _TEXT_COMMANDS.sub(r"\1", value)
    return value.replace(r"\_", "_").replace(r"\&", "&").replace(r"\%", "%")


class AuthorYearStyle(PlainStyle):
    default_label_style = AuthorYearLabelStyle

    def format_entry(self, label, entry, bib_data=None):
        for key in ("howpublished", "note", "title", "booktitle", "journal", "publisher"):
            if key in entry.fields:
                entry.fields[key] = detex(entry.fields[key])
        return super().format_entry(label, entry, bib_data=bib_data)


register_plugin("pybtex.style.labels", "dpclip_author_year", AuthorYearLabelStyle)
register_plugin("pybtex.style.formatting", "dpclip", AuthorYearStyle)


def setup(app: Sphinx):
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
