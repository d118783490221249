"""The README is a front door and the docs are task guides: sizes bounded, every relative link resolves."""

import importlib.util
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


def _reference_page_module():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_page_is_what_the_parsers_make():
    import argparse

    from vitkit.cli import build_parser

    page = _reference_page_module()
    assert page.PAGE.read_text() == page.render(), "docs/reference/cli.md is stale: run python scripts/cli_reference.py"
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    text = page.PAGE.read_text()
    for name, parser in commands.items():  # every command and flag is on the page, in its own section
        section = text.split(f"\n## vitkit {name}\n", 1)[1].split("\n## ", 1)[0]
        flags = {flag for action in parser._actions for flag in action.option_strings if flag not in ("-h", "--help")}
        assert all(f"`{flag}" in section or f", {flag}" in section for flag in flags), name


def test_every_name_importable_from_vitkit_is_in_the_api_reference_at_its_home():
    """`from vitkit import X` names X of the module vitkit loads it from; the reference documents that object (the
    create_model with pretrained=, not only the models' one), and every `::: name` on a page is a real object."""
    import vitkit

    pages = "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "reference").glob("*.md")))
    documented = re.findall(r"^::: ([\w.]+)", pages, flags=re.M)
    missing = [f"{home}.{name}" for name, home in vitkit._LAZY.items() if f"{home}.{name}" not in documented]
    assert not missing, f"importable from vitkit, not in docs/reference: {missing}"
    for identifier in documented:
        module, _, name = identifier.rpartition(".")
        try:
            importlib.import_module(identifier)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), name), identifier


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
