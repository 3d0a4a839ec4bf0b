"""Git clean filter: a notebook leaves the working tree without outputs (README, set-up).

Reads a notebook on stdin and writes it to stdout with every code cell's outputs and execution
count cleared, in nbformat's own layout (sorted keys, one-space indent), so a notebook that has
no outputs passes through byte for byte. ``make venv`` (and so ``make book``/``make test``)
registers it for ``*.ipynb`` (``.gitattributes``): running a chapter in Jupyter no longer puts a
megabyte of outputs into ``git diff``. By hand::

    git config filter.strip-outputs.clean ".venv/bin/python tools/strip_outputs.py"
"""
from __future__ import annotations

import json
import sys


def strip(nb: dict) -> dict:
    """The notebook with its code cells' outputs and execution counts cleared (in place)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def main() -> int:
    text = sys.stdin.read()
    try:
        nb = json.loads(text)
    except json.JSONDecodeError:      # not a notebook git can parse: pass it through untouched
        sys.stdout.write(text)
        return 0
    sys.stdout.write(json.dumps(strip(nb), sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
