"""benchmarks/RESULTS.md and the README's headline block are what benchmarks/render.py writes from benchmarks/results/."""

import csv
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _render():
    spec = importlib.util.spec_from_file_location("render", ROOT / "benchmarks" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _render()


def _rows():
    for path in sorted(RESULTS.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as f:
            for n, row in enumerate(csv.DictReader(f), start=2):
                yield path.name, n, row


def _copy(tmp_path: Path) -> Path:
    """A repository root holding copies of what render.py reads and writes."""
    (tmp_path / "benchmarks").mkdir()
    shutil.copytree(RESULTS, tmp_path / "benchmarks" / "results")
    shutil.copy(ROOT / "benchmarks" / "RESULTS.md", tmp_path / "benchmarks" / "RESULTS.md")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return tmp_path


def test_results_md_and_readme_block_are_what_render_writes():
    assert render.main(["--check", "--root", str(ROOT)]) == 0


def test_every_row_has_its_required_columns_filled():
    rows = list(_rows())
    assert rows
    for name, n, row in rows:
        assert set(render.COLUMNS) <= set(row), name
        for column in ("figure", "unit", "machine", "date", "command", "claim", "id"):
            assert (row[column] or "").strip(), f"{name} line {n}: empty {column}"
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", row["id"]), f"{name} line {n}: id {row['id']!r}"


def test_results_md_is_small():
    assert (
        ROOT / "benchmarks" / "RESULTS.md"
    ).stat().st_size <= render.MAX_RESULTS_BYTES - 1024  # room for a new section's rows


def test_every_headline_link_points_at_an_anchor_of_results_md():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(render.START, 1)[1].split(render.END, 1)[0]
    links = re.findall(r"\(benchmarks/RESULTS\.md#([^)]+)\)", block)
    assert 1 <= len(links) <= 8
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")))
    assert set(links) <= anchors


def test_a_changed_figure_makes_check_fail_and_render_repairs_it(tmp_path):
    root = _copy(tmp_path)
    path = root / "benchmarks" / "results" / "demo.csv"
    text = path.read_text(encoding="utf-8")
    shown = next(r for r in render.load(path.parent)["demo"] if r["headline"].strip())  # a figure the README shows
    assert f",{shown['figure']}," in text and "0.1234" not in text
    path.write_text(text.replace(f",{shown['figure']},", ",0.1234,", 1), encoding="utf-8")
    assert render.main(["--check", "--root", str(root)]) == 1
    assert render.main(["--root", str(root)]) == 0
    assert render.main(["--check", "--root", str(root)]) == 0
    assert "0.1234" in (root / "README.md").read_text(encoding="utf-8")


def test_a_hand_edit_of_results_md_makes_check_fail(tmp_path):
    root = _copy(tmp_path)
    md = root / "benchmarks" / "RESULTS.md"
    md.write_text(md.read_text(encoding="utf-8") + "\nA figure typed by hand.\n", encoding="utf-8")
    assert render.main(["--check", "--root", str(root)]) == 1


@pytest.mark.parametrize("column", ["figure", "machine", "date", "command"])
def test_a_row_without_a_required_column_is_refused(tmp_path, column):
    root = _copy(tmp_path)
    path = root / "benchmarks" / "results" / "demo.csv"
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rows[0][column] = ""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=render.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    assert render.main(["--check", "--root", str(root)]) == 2


def test_the_readme_needs_its_markers(tmp_path):
    root = _copy(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace(render.START, ""), encoding="utf-8")
    assert render.main(["--check", "--root", str(root)]) == 2


def test_every_link_into_results_md_from_the_readme_and_docs_finds_its_anchor():
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")))
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for anchor in re.findall(r"RESULTS\.md#([A-Za-z0-9_-]+)", path.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{path.relative_to(ROOT)}: RESULTS.md#{anchor}"


def test_a_matrix_section_gives_each_figure_its_cell_and_each_line_its_anchor():
    """Many figures of one unit (a kind of data by a model) are drawn as a table; each line is linkable by the id of
    its row that compares, whose claim follows the table."""
    base = {"unit": "val top-1", "setting": "s", "machine": "m", "date": "d", "against": ""}
    rows = [
        {**base, "id": f"f-{kind}-{model}", "claim": f"{kind}: {model}", "model": model, "figure": f"0.{i}{j}"}
        for i, kind in enumerate(("icons", "digits"))
        for j, model in enumerate(("fitted", "forest"))
    ]
    rows[0]["against"] = "forest 0.01"
    lines = render.render_matrix(rows)
    assert lines[2] == "| | fitted | forest |"
    assert lines[4] == '| <a id="f-icons-fitted"></a>icons | 0.00 | 0.01 |'
    assert lines[5] == "| digits | 0.10 | 0.11 |"
    assert lines[7:] == ["- icons: fitted (s)", "", "Machine: m. Date: d."]


@pytest.mark.parametrize(
    "figure, unit, shown",
    [
        ("0.9152 / 429", "top-1 / s", "0.9152 top-1 / 429 s"),
        ("1.25 / 1.80", "x", "1.25 / 1.80x"),
        ("286 / 2,604", "images", "286 / 2,604 images"),
        ("55.9", "%", "55.9%"),
    ],
)
def test_a_figure_of_several_parts_takes_each_part_s_unit(figure, unit, shown):
    assert render.with_unit({"figure": figure, "unit": unit}) == shown
