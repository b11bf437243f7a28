"""Every relative link of the README, CONTRIBUTING.md and docs/**/*.md leads somewhere: the file exists, and a
``#anchor`` names a heading of it by GitHub's slug rule (or an explicit ``<a id=...>``). leaderboard.md's headings
come from zoo/board_render.py, so a link to one of its tables fails here when the board stops writing it."""
import re
from pathlib import Path

import pytest

from conftest import ROOT

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if p.is_file()]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link or heading inside one is code, not markdown)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation dropped (letters, digits,
    ``_``, ``-`` and spaces kept), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one gets -1, -2, ...) and explicit ids."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text()):
        out.update(EXPLICIT.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    lines = prose_lines(path.read_text())
    return [target for line in lines for target in LINK.findall(re.sub(r"`[^`]*`", "", line))]


def broken(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check offline
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


def test_the_slug_rule_is_githubs():
    assert slug("digits · test_accuracy · reference runs · every machine") == \
        "digits--test_accuracy--reference-runs--every-machine"
    assert slug("bbbp:split=scaffold · test_roc_auc · reference runs · every machine") == \
        "bbbpsplitscaffold--test_roc_auc--reference-runs--every-machine"
    assert slug("Use a trained run: `zoo predict`, `zoo export`") == "use-a-trained-run-zoo-predict-zoo-export"
    assert slug("[The board](leaderboard.md) rules") == "the-board-rules"


def test_the_docs_exist():
    names = {str(p.relative_to(ROOT)) for p in pages()}
    assert {"README.md", "CONTRIBUTING.md", "docs/LOG.md"} <= names, names


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    bad = broken(page)
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)
