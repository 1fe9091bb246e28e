"""Every relative link in README.md and docs/*.md points to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target) and ![alt](target); reference-style definitions `[id]: target`
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def relative_links(text: str) -> list[str]:
    text = _FENCE.sub("", text)  # code blocks hold examples, not links
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = _INLINE.findall(text) + _REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^([a-z][a-z0-9+.-]*:|#|//)", t, re.IGNORECASE)]


def test_the_link_finder_sees_inline_reference_and_image_links_but_not_code():
    text = ("[a](docs/a.md) ![p](img/p.svg) [web](https://x.org) [here](#top)\n[r]: other.md\n"
            "`[not](code.md)`\n```\n[nor](fenced.md)\n```\n")
    assert sorted(relative_links(text)) == ["docs/a.md", "img/p.svg", "other.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_existing_files(doc):
    missing = []
    for target in relative_links(doc.read_text(encoding="utf-8")):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path and not (doc.parent / path).exists():
            missing.append(target)
    assert not missing, f"{doc.relative_to(REPO)} links to files that do not exist: {', '.join(missing)}"


@pytest.mark.parametrize("svg", sorted((REPO / "docs").glob("*.svg")), ids=lambda p: p.name)
def test_pictures_are_well_formed_svg(svg):
    from xml.etree import ElementTree

    root = ElementTree.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox")
