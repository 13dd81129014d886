"""The README is a front page and docs/ holds the rest: every relative link resolves to a file and, with
an anchor, to a heading of it (GitHub's slugs); every page of docs/ is reachable from the front page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # https:, mailto: are not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination.relative_to(ROOT)}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, broken


def test_the_front_page_is_short_and_reaches_every_page() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_bytes()) < 12 * 1024, "the README is a front page: move detail to docs/"
    reached = {(readme.parent / target.partition("#")[0]).resolve() for target in links(readme)}
    assert not [p.name for p in PAGES[1:] if p.resolve() not in reached]


def test_the_slug_rule_matches_githubs() -> None:
    assert slug("A real cluster on this machine: the demo and the test bed") == (
        "a-real-cluster-on-this-machine-the-demo-and-the-test-bed"
    )
    assert slug("Offline: `gangkeeper mutate`") == "offline-gangkeeper-mutate"
