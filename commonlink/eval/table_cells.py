"""Cells of the tables commonlink writes (``eval compare`` in markdown and CSV, ``results.md``): a value from a
results file (a run name, a model id, a concept) is shown as written and never becomes markup, a row or a formula.

Markdown cells are :func:`commonlink.formats.card.markdown_text` (one line, markup characters escaped, so a ``|``
cannot end the cell nor a line break start a row). CSV cells that a spreadsheet would run as a formula (text
starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return: OWASP's list) get a leading ``'``, which
spreadsheets show as text; numbers are written as they are.
"""

from __future__ import annotations

from typing import Any

from commonlink.formats.card import markdown_text

__all__ = ["FORMULA_PREFIXES", "csv_cell", "md_cell"]

#: What makes a spreadsheet read a CSV cell as a formula.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def md_cell(value: Any) -> str:
    """``value`` as the text of a Markdown table cell (shown as written, on one line)."""
    return markdown_text(value, at_line_start=False)


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: text a spreadsheet would evaluate is prefixed with ``'``; other values unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value
