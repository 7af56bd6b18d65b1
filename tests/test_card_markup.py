"""Text from data never becomes live markup in a dataset card, checked with a real CommonMark renderer.

Labels, names, concepts, source descriptions and push messages go into the card through
``commonlink.formats.card.markdown_text`` / ``code_span`` / ``markdown_table``. Each card is rendered with
markdown-it-py (CommonMark, plus GFM tables and strikethrough as the Hub renders them) and its tokens are
inspected: no raw HTML, no link, no image but the build's own figures, no heading the template did not write.
"""

from __future__ import annotations

import json

import pytest

from commonlink.formats.card import code_span, markdown_table, markdown_text

HOSTILE = [
    "q ```a`b <img src=x onerror=alert(3)>",
    "<script>alert(1)</script>",
    "[click](https://evil.example)",
    "![x](https://evil.example/p.png)",
    "mug\n## Versions\n| 9.9.9 | 2026-01-01 | main: 1 | forged |",
    "\u202egnp.exe",
    "~~~\nfenced",
    "<https://evil.example>",
    "**bold** _em_ `code`",
    "&lt;b&gt; &amp;",
    "1. item",
    "- item",
    "> quote",
    "a\\\\|b|c",
    "x\r\n---",
]


def render_tokens(markdown: str) -> list:
    """Every token (children included) of ``markdown`` as markdown-it-py parses it."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens, stack = [], md.parse(markdown)
    while stack:
        token = stack.pop(0)
        tokens.append(token)
        stack[:0] = token.children or []
    return tokens


def render_html(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def live_markup(card: str, *, allowed_images: tuple[str, ...] = ("figures/",)) -> list[str]:
    """What in ``card``'s body a renderer turns into HTML, links or foreign images (empty: nothing)."""
    body = card.split("\n---\n", 1)[1] if card.startswith("---\n") else card
    found = []
    for token in render_tokens(body):
        if token.type in ("html_block", "html_inline"):
            found.append(f"{token.type}: {token.content!r}")
        elif token.type == "link_open":
            found.append(f"link: {token.attrs.get('href')!r}")
        elif token.type == "image" and not str(token.attrs.get("src", "")).startswith(allowed_images):
            found.append(f"image: {token.attrs.get('src')!r}")
    return found


def headings(card: str) -> list[str]:
    tokens = render_tokens(card.split("\n---\n", 1)[1])
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_renders_as_exactly_the_text(text):
    from html import escape

    from commonlink.formats.card import one_line

    rendered = render_html(f"Label: {markdown_text(text)}")
    assert not live_markup(f"Label: {markdown_text(text)}")
    assert rendered == f"<p>Label: {escape(one_line(text), quote=True)}</p>\n"  # the text, shown as written
    span = render_html(f"Source: {code_span(text)}")
    assert not live_markup(f"Source: {code_span(text)}") and span.count("<code>") == 1


def test_a_table_cell_from_data_cannot_add_columns_or_rows():
    table = markdown_table(["label", "n"], [[text, i] for i, text in enumerate(HOSTILE)])
    tokens = render_tokens(table)
    assert not live_markup(table)
    assert sum(t.type == "tr_open" for t in tokens) == len(HOSTILE) + 1  # header + one row per label
    assert all(sum(t.type == "td_open" for t in tokens[i:j]) == 2 for i, j in _row_spans(tokens))


def _row_spans(tokens):
    starts = [i for i, t in enumerate(tokens) if t.type == "tr_open" and i > 0]
    ends = [i for i, t in enumerate(tokens) if t.type == "tr_close"]
    return [(s, next(e for e in ends if e > s)) for s in starts if any(t.type == "td_open" for t in tokens[s : s + 3])]


def test_a_common_o_card_with_hostile_labels_and_name_has_no_live_markup_and_no_forged_version(tmp_path):
    from commonlink.release.build import build_release
    from commonlink.release.hub import read_versions_table
    from tests.fixtures.catalogs import write_tiny_catalog, write_tiny_pairs

    specs = [
        {"objects": [HOSTILE[i % len(HOSTILE)], HOSTILE[(i + 3) % len(HOSTILE)], "mug"], "seed": i, "scene_id": f"s{i}"}
        for i in range(12)
    ]
    records = write_tiny_catalog(tmp_path / "cat", specs)
    pairs = tmp_path / "main.jsonl"
    write_tiny_pairs(pairs, tmp_path / "cat", records, 10)
    out = tmp_path / "rel"
    build_release([pairs], out, name="Set <img src=x onerror=alert(1)> [x](y) \u202egnp.exe", progress=False)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert live_markup(card) == []
    assert "\u202e" not in card
    assert read_versions_table(card) == []  # the label holding a Versions table forged nothing
    # only the template's headings: a label holding "## Versions" is text
    assert "Versions" not in headings(card) and headings(card)[0].startswith("Set")
    html = render_html(card.split("\n---\n", 1)[1])
    assert "&lt;img src=x onerror=alert(3)&gt;" in html  # the label is shown, as text


def test_an_association_card_with_hostile_concepts_and_source_has_no_live_markup():
    from commonlink.kinds.association.card import render_association_card
    from commonlink.kinds.association.format import association_features

    configs = {c: {"rows": 2, "num_bytes": 10, "download_size": 10, "files": []} for c in ("single_step", "images")}
    stats = {
        "concepts": [{"name": h, "pool_size": 3, "negative_pool_size": 4} for h in HOSTILE],
        "pairs": [{"concepts": [HOSTILE[0], HOSTILE[2]], "bridge_pool_size": 1}],
        "concept_kind": "<b>kind</b>",
        "counts": {"single_step": 2},
        "images": 3,
        "source": {"source_type": "[folder](x)", "source": "a ``` <img src=x>\n# H", "read": "<i>", "kept": 1},
        "construction": {"negatives": "chain`<b>", "preset": "![p](q)", "note": "<script>x</script>"},
        "verification": {
            "model": {"model": "m`<b>`", "backend": "<i>b</i>"},
            "claims": 1,
            "rejected": 0,
            "prompt": "Is [x](y) <b>here</b>?",
        },
    }
    card = render_association_card(
        name="A <b>set</b>",
        version="1.0.0",
        license="mit",
        configs=configs,
        features={c: association_features(c) for c in configs},
        stats=stats,
        seed="<s>",
        toolkit_version="t",
        card_info={"maintainers": "Lab [site](https://x.example) <b>hi</b>\n\n## Versions"},
    )
    assert live_markup(card) == []
    assert "Versions" not in headings(card)
    assert "Lab [site](https://x.example) &lt;b&gt;hi&lt;/b&gt;" in render_html(card.split("\n---\n", 1)[1])


def test_push_message_cannot_forge_a_versions_row_and_reads_back_as_written():
    from commonlink.release.hub import card_with_version, read_versions_table

    message = "fix <b>x</b> | 9.9.9 | forged\n| 8.8.8 | 2026 | x | y |"
    rows = [{"version": "1.0.0", "date": "2026-01-02", "rows": "main: 6", "message": message}]
    card = card_with_version("---\nlicense: mit\n---\n\n# Set\n", rows)
    assert live_markup(card) == []
    back = read_versions_table(card)
    assert [r["version"] for r in back] == ["1.0.0"]
    assert back[0]["message"] == message.replace("\n", " ") and back[0]["rows"] == "main: 6"
    again = card_with_version(card, back)  # a second push reads the table and writes it again unchanged
    assert again == card


def test_card_json_blocks_keep_data_inside_the_fence(tmp_path):
    """File names in the Build section's JSON block cannot end the fence (JSON strings hold no line break)."""
    text = "```json\n" + json.dumps({"file": "a\n```\n<script>x</script>"}, indent=2) + "\n```\n"
    assert live_markup(text) == []
