"""The README is a front door and the docs are task guides: sizes bounded, every relative link resolves."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_at_most_8_kb_and_each_guide_at_most_12_kb():
    assert (ROOT / "README.md").stat().st_size <= 8192
    big = [p.name for p in (ROOT / "docs").glob("*.md") if p.stat().st_size > 12 * 1024]
    assert not big, f"docs pages over 12 KB: {big}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links inside code blocks are examples
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files: {broken}"


def _table_lines(text: str, ends: str) -> list[tuple[int, str]]:
    """(line number, line) of every line Markdown reads as part of a table: from a header row above a `|---|` row to
    the next blank line or line matching `ends` (the start of another block), outside code blocks."""
    lines, found, fenced, inside = text.splitlines(), [], False, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced, inside = not fenced, False
        elif not fenced and (not line.strip() or re.match(ends, line)):
            inside = False
        elif not fenced and not inside and i and re.fullmatch(r"\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*", line):
            inside = True
            found.append((i, lines[i - 1]))
        if inside:
            found.append((i + 1, line))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sentence_is_rendered_as_a_table_row(page):
    """A sentence directly under a table (no blank line between) is read as one more row of it, and a strict mkdocs
    build passes: every line of a table starts and ends with a pipe."""
    # GitHub (README, CONTRIBUTING, CHANGELOG) ends a table where another block starts (a list item, an HTML comment);
    # mkdocs (docs/) only at a blank line
    ends = r"\s*(<!--|[-*+] |\d+\. |#|>)" if page.parent == ROOT else r"(?!)"
    prose = [
        f"line {n}: {line[:60]}"
        for n, line in _table_lines(page.read_text(), ends)
        if not re.fullmatch(r"\s*\|.*\|\s*", line)
    ]
    assert not prose, f"{page.name}: lines read as table rows that are not rows: {prose}"
