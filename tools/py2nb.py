"""Convert a percent-format script (``# %%`` / ``# %% [markdown]`` cells) to an output-free notebook.

A tiny, predictable stand-in for jupytext, which merges cells around fenced MyST
directives. ``# %% [raw] tags=["remove-cell"]`` makes an (otter) raw cell;
``# %% tags=["hide-input"]`` a solution cell folded behind "Show a solution".
Chapters are committed as ``.ipynb``; this is an authoring aid:

    python tools/py2nb.py chapter.py book/part1/chapter.ipynb
"""
import re
import sys

import nbformat


def convert(src: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    blocks = re.split(r"^# %%(.*)$", src, flags=re.M)
    for header, body in zip(blocks[1::2], blocks[2::2]):
        tags = re.findall(r"tags=\[([^\]]*)\]", header)
        meta = {"tags": [t.strip().strip("'\"") for t in tags[0].split(",")]} if tags else {}
        body = body.strip("\n")
        if "[markdown]" in header:
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            nb.cells.append(nbformat.v4.new_markdown_cell(text, metadata=meta))
        elif "[raw]" in header:  # verbatim (otter's "# BEGIN QUESTION" markers keep their "#")
            nb.cells.append(nbformat.v4.new_raw_cell(body, metadata=meta))
        else:
            if "hide-input" in meta.get("tags", []):  # an exercise solution: fold it behind a button
                meta["mystnb"] = {"code_prompt_show": "Show a solution", "code_prompt_hide": "Hide the solution"}
            nb.cells.append(nbformat.v4.new_code_cell(body, metadata=meta))
    return nb


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    nb = convert(open(src, encoding="utf-8").read())
    nbformat.write(nb, dst)
    print(f"{dst}: {len(nb.cells)} cells")
