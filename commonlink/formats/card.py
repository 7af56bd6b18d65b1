"""Hub dataset cards: YAML metadata header + Markdown body, and the metadata blocks ``datasets`` reads.

Reusable by every release kind (Common-O and association releases)::

    metadata = {
        "license": "cc-by-nc-4.0", "pretty_name": "My split", "task_categories": ["visual-question-answering"],
        "size_categories": [size_category(n_rows)],
        "configs": [configs_entry({"main": "data/main-*"})],
        "dataset_info": dataset_info_entry(features, {"main": (n_rows, n_bytes)}),
    }
    text = render_card(metadata, body_markdown)   # validated: parses back with yaml and huggingface_hub

``configs`` tells ``datasets.load_dataset`` which files make each split; ``dataset_info`` gives the feature
types (so images decode to PIL and strings stay strings) and split sizes (shown on the Hub).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from commonlink.errors import SchemaError

#: Where a card's usage examples name the dataset; ``release push`` writes the repo id in its place.
REPO_PLACEHOLDER = "REPO_OR_FOLDER"

#: Hub size buckets (``size_categories`` values the Hub accepts), by upper bound.
_SIZE_BUCKETS: tuple[tuple[int, str], ...] = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"),
    (100_000_000_000, "10B<n<100B"),
    (1_000_000_000_000, "100B<n<1T"),
)


def size_category(n: int) -> str:
    """The Hub ``size_categories`` bucket of ``n`` rows, e.g. ``size_category(10_426) == "10K<n<100K"``."""
    if n < 0:
        raise ValueError(f"row count must be >= 0, got {n}")
    for upper, label in _SIZE_BUCKETS:
        if n < upper:
            return label
    return "n>1T"


def configs_entry(data_files: Mapping[str, str | Sequence[str]], config_name: str = "default") -> dict:
    """One item of the card's ``configs:`` list: ``{config_name, data_files: [{split, path}, ...]}``."""
    return {
        "config_name": config_name,
        "data_files": [
            {"split": split, "path": path if isinstance(path, str) else list(path)}
            for split, path in data_files.items()
        ],
    }


def dataset_info_entry(
    features: Any,
    splits: Mapping[str, tuple[int, int]],
    *,
    config_name: str | None = None,
    download_size: int | None = None,
) -> dict:
    """One ``dataset_info`` block: feature types (``datasets.Features``) and ``{split: (rows, bytes)}``."""
    entry: dict[str, Any] = {}
    if config_name is not None:
        entry["config_name"] = config_name
    entry["features"] = features._to_yaml_list()  # the exact YAML form datasets writes in push_to_hub
    entry["splits"] = [
        {"name": name, "num_bytes": int(nbytes), "num_examples": int(rows)} for name, (rows, nbytes) in splits.items()
    ]
    if download_size is not None:
        entry["download_size"] = int(download_size)
    entry["dataset_size"] = int(sum(nbytes for _, nbytes in splits.values()))
    return entry


#: Invisible characters that reorder the text around them (e.g. U+202E makes "gnp.exe" read "exe.png").
BIDI_CONTROLS = dict.fromkeys(map(ord, "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"))


def neutralise_text(text: str) -> str:
    """Text safe to show on a Hub page: bidirectional controls removed, ``<`` and ``>`` as HTML entities, so a
    name or label like ``<script>`` is shown as written instead of being read as markup."""
    return text.translate(BIDI_CONTROLS).replace("<", "&lt;").replace(">", "&gt;")


#: Characters that open or close markup anywhere in a line, backslash-escaped in text from data (CommonMark:
#: "any ASCII punctuation character may be backslash-escaped"): raw HTML and autolinks (``< >``), entities
#: (``&``), links and images (``[ ]``; ``!`` and ``( )`` mean nothing without them), emphasis (``*``), code
#: (`` ` ``), table cells (``|``), strikethrough (``~``), headings (``#``), escapes (``\\``), GFM autolinks
#: (``: @``), and GFM's extended autolinks (``www.example.org``, ``example.com`` as linkify-it finds them): a
#: ``.`` that joins two words, unless it sits between two digits (``1.5`` keeps its plain form), so no domain is
#: left whole. ``_`` is escaped unless it sits between two letters or digits (where it cannot open or close
#: emphasis); ``+ - =`` and ``1.`` / ``1)`` only mean something at the start of a line, so they are escaped there.
_ALWAYS_ESCAPED = re.compile(r"[\\`*\[\]<>#|~&:@]|(?<![^\W_])_|_(?![^\W_])|(?<=[^\W\d])\.(?=\w)|(?<=\w)\.(?=[^\W\d])")
_LINE_START = re.compile(r"^(\s*)([+=-]|\d+[.)])")


def one_line(text: str) -> str:
    """``text`` on one line: bidirectional controls removed; line breaks, tabs and other control characters
    (Unicode ``Cc``, line and paragraph separators) become spaces, so a value can never start a Markdown block."""
    text = str(text).translate(BIDI_CONTROLS)
    return "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)


def markdown_text(value: Any, *, at_line_start: bool = True) -> str:
    """Text from data (a label, name, concept, source description, message) as Markdown that renders exactly
    that text and nothing else: on one line (:func:`one_line`) and every character that could start markup
    there escaped, so no raw HTML, link, image, emphasis, code span, table cell break, heading or list can come
    from it (checked against markdown-it-py, a CommonMark renderer, in the tests)."""
    text = _ALWAYS_ESCAPED.sub(lambda m: "\\" + m.group(0), one_line(str(value)))
    if not at_line_start:  # e.g. a table cell: what only starts a block at the start of a line is left as written
        return text
    return _LINE_START.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], text, count=1)


def code_span(value: Any) -> str:
    """``value`` as an inline code span (literal text, never markup): on one line, delimited by a backtick run
    longer than any inside it (CommonMark's rule for code spans holding backticks)."""
    text = one_line(str(value))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _neutral_metadata(value: Any, key: str = "") -> Any:
    if isinstance(value, Mapping):
        return {k: _neutral_metadata(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_neutral_metadata(v, key) for v in value]
    if isinstance(value, str):
        # size categories are Hub vocabulary written with '<' ("1K<n<10K")
        return value.translate(BIDI_CONTROLS) if key == "size_categories" else neutralise_text(value)
    return value


def render_card(metadata: Mapping[str, Any], body_markdown: str) -> str:
    """``---\\n<YAML>---\\n\\n<body>``; raises :class:`SchemaError` if the result does not read back.

    Names and labels come from users' files: every metadata string is passed through :func:`neutralise_text`;
    in the body, each value from data must be inserted through :func:`markdown_text` or :func:`code_span` (or a
    :func:`markdown_table` cell) by the card's renderer; bidirectional controls are removed from the whole body.
    """
    metadata = _neutral_metadata(dict(metadata))
    header = yaml.safe_dump(dict(metadata), sort_keys=False, allow_unicode=True, width=120)
    text = f"---\n{header}---\n\n{body_markdown.strip().translate(BIDI_CONTROLS)}\n"
    validate_card(text, expected=metadata)
    return text


def read_card_metadata(text: str) -> dict:
    """The YAML header of a card (``{}`` when there is none); raises :class:`SchemaError` when it is broken."""
    if not text.startswith("---"):
        return {}
    lines = text.splitlines()
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SchemaError(
            "Dataset card: the YAML header opened with '---' is never closed.", "Add a '---' line after the metadata."
        ) from None
    try:
        data = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        raise SchemaError(
            f"Dataset card: the YAML header does not parse ({exc}).", "Fix the YAML between the '---' lines."
        ) from exc
    if not isinstance(data, dict):
        raise SchemaError(
            "Dataset card: the YAML header is not a mapping.", "Write 'key: value' lines between the '---' lines."
        )
    return data


def validate_card(text: str, *, expected: Mapping[str, Any] | None = None) -> dict:
    """Check a card reads back with ``yaml.safe_load`` and ``huggingface_hub.DatasetCard``; return its metadata."""
    from huggingface_hub import DatasetCard

    data = read_card_metadata(text)
    if expected is not None and data != dict(expected):
        raise SchemaError(
            "Dataset card: the YAML header does not read back as written.", "Report this as a bug in commonlink."
        )
    try:
        card = DatasetCard(text)
        card_data = card.data.to_dict()
    except Exception as exc:  # huggingface_hub raises ValueError and friends for bad metadata
        raise SchemaError(f"Dataset card: huggingface_hub cannot read it ({exc}).", "Fix the card metadata.") from exc
    for key in ("license", "configs", "dataset_info"):
        if key in data and card_data.get(key) != data[key]:
            raise SchemaError(f"Dataset card: huggingface_hub reads {key!r} differently from what was written.")
    return data


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; every cell is :func:`markdown_text` (labels, names and the
    ``--message`` of the Versions table come from users: none becomes markup, a line break or a new row)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            value = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        elif isinstance(value, int):
            value = f"{value:,}"
        return markdown_text(value, at_line_start=False)

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return "\n".join(lines)
