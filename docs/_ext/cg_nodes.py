"""Small docutils helpers the two generators share: inline text with `code` spans, and
anchors, built as nodes so that no help string or OpenAPI description is parsed as markup
(a stray `*` or `|` in one would otherwise be a build warning, or worse, silently eaten)."""

from __future__ import annotations

import re

from docutils import nodes

_CODE = re.compile(r"`([^`]+)`")


def inline(text: str) -> list[nodes.Node]:
    """`text` as Text nodes, with each backquoted span a literal."""
    out: list[nodes.Node] = []
    pos = 0
    for match in _CODE.finditer(text):
        if match.start() > pos:
            out.append(nodes.Text(text[pos:match.start()]))
        out.append(nodes.literal(match.group(1), match.group(1)))
        pos = match.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


def paragraphs(text: str) -> list[nodes.Node]:
    """Blank-line separated paragraphs of `text`, each with its code spans."""
    chunks = [" ".join(c.split()) for c in re.split(r"\n\s*\n", text or "")]
    return [nodes.paragraph("", "", *inline(c)) for c in chunks if c]


def slug(*parts: str) -> str:
    """An HTML id from parts: lower case, anything but letters and digits a dash."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")
