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
