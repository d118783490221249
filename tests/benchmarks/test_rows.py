"""benchmarks/rows.py: benchmark scripts upsert their figures into benchmarks/results/*.csv, which render.py renders."""

import csv
import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # rows.py imports render by name
    spec.loader.exec_module(module)
    return module


render = _load("render")
rows = _load("rows")


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A repository root holding copies of what render.py reads and writes; rows.py writes into its results."""
    (tmp_path / "benchmarks").mkdir()
    shutil.copytree(BENCHMARKS / "results", tmp_path / "benchmarks" / "results")
    shutil.copy(BENCHMARKS / "RESULTS.md", tmp_path / "benchmarks" / "RESULTS.md")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.setattr(rows, "RESULTS_DIR", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(rows, "machine_slug", lambda: "testbox")
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "demo_bench.py"), "--steps", "3"])
    return tmp_path / "benchmarks" / "results"


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), list(reader)


ROW = {
    "id": "demo-test-top1",
    "benchmark": "Fashion-MNIST demo (`make demo`)",
    "claim": "test top-1 on the 10,000 test images",
    "figure": "0.9001",
    "unit": "top-1",
    "model": "configs/fashion_mnist.yaml",
}


def test_a_new_row_is_added_with_machine_software_date_and_command_filled(results):
    before_columns, before = _read(results / "demo.csv")
    rows.write_rows("demo", [ROW])
    columns, after = _read(results / "demo.csv")
    assert columns == before_columns == render.COLUMNS
    assert after[: len(before)] == before  # the others untouched, in their order
    assert len(after) == len(before) + 1
    new = after[-1]
    assert new["id"] == "demo-test-top1-testbox"  # the machine kind in the id
    assert new["figure"] == "0.9001" and new["model"] == "configs/fashion_mnist.yaml"
    assert new["machine"] == rows.machine() and "cores" in new["machine"]
    assert new["software"].startswith("python ") and "torch " in new["software"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", new["date"])
    assert new["command"] == "python benchmarks/demo_bench.py --steps 3"  # relative to the repository root
    assert new["headline"] == new["against"] == ""


def test_a_row_with_the_same_id_replaces_the_old_one_in_place(results):
    rows.write_rows("demo", [ROW, {**ROW, "id": "demo-train-time", "claim": "training wall time", "figure": "500"}])
    _, first = _read(results / "demo.csv")
    rows.write_rows("demo", [{**ROW, "figure": "0.9123", "machine": "given box", "date": "2026-01-01"}])
    columns, second = _read(results / "demo.csv")
    assert columns == render.COLUMNS
    assert len(second) == len(first)
    assert [r["id"] for r in second] == [r["id"] for r in first]
    (replaced,) = [r for r in second if r["id"] == "demo-test-top1-testbox"]
    assert replaced["figure"] == "0.9123"
    assert (replaced["machine"], replaced["date"]) == ("given box", "2026-01-01")  # given values are kept
    assert [r for r in second if r["id"] != "demo-test-top1-testbox"] == [
        r for r in first if r["id"] != "demo-test-top1-testbox"
    ]


def test_an_id_that_already_names_the_machine_is_kept_and_other_machines_rows_stay(results):
    _, before = _read(results / "demo.csv")
    assert any(r["id"] == "demo-test-top1-xeon" for r in before)
    rows.write_rows("demo", [{**ROW, "id": "demo-test-top1-testbox"}])
    _, after = _read(results / "demo.csv")
    assert [r["id"] for r in after].count("demo-test-top1-testbox") == 1
    assert [r for r in after if r["id"] == "demo-test-top1-xeon"] == [
        r for r in before if r["id"] == "demo-test-top1-xeon"
    ]


def test_slug_false_keeps_the_id_of_a_figure_any_machine_gives(results):
    rows.write_rows("memory", [{**ROW, "id": "checkpointing-vit-l16", "figure": "81"}], slug=False)
    _, after = _read(results / "memory.csv")
    assert [r["figure"] for r in after if r["id"] == "checkpointing-vit-l16"] == ["81"]
    assert not any(r["id"].startswith("checkpointing-vit-l16-") for r in after)


def test_a_new_file_gets_render_columns(results):
    rows.write_rows("brand_new", [ROW])
    columns, got = _read(results / "brand_new.csv")
    assert columns == render.COLUMNS and len(got) == 1


def test_a_row_missing_a_required_field_or_with_an_unknown_column_is_refused(results):
    text = (results / "demo.csv").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="figure"):
        rows.write_rows("demo", [{**ROW, "figure": ""}])
    with pytest.raises(ValueError, match="colour"):
        rows.write_rows("demo", [{**ROW, "colour": "red"}])
    assert (results / "demo.csv").read_text(encoding="utf-8") == text


def test_written_rows_render(results):
    rows.write_rows("demo", [ROW])
    rows.write_rows("demo", [{**ROW, "figure": "0.9321"}])
    root = results.parents[1]
    tables = render.load(results)
    text = render.render_results(tables)
    assert '<a id="demo-test-top1-testbox"></a>' in text
    assert "0.9321" in text and "0.9001" not in text
    assert "python benchmarks/demo_bench.py --steps 3" in text
    assert render.main(["--check", "--root", str(root)]) == 1  # RESULTS.md is now stale
    assert render.main(["--root", str(root)]) == 0
    assert render.main(["--check", "--root", str(root)]) == 0


def test_rewriting_nothing_leaves_every_published_csv_byte_for_byte(results):
    before = {p.name: p.read_bytes() for p in results.glob("*.csv")}
    for name in before:
        rows.write_rows(Path(name).stem, [])
    assert {p.name: p.read_bytes() for p in results.glob("*.csv")} == before


def test_machine_slug_names_the_kind_of_machine(monkeypatch):
    monkeypatch.setattr(rows, "gpu_name", lambda: None)
    monkeypatch.setattr(rows, "cpu_name", lambda: "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz")
    monkeypatch.setattr(rows, "cores", lambda: 2)
    assert rows.machine_slug() == "xeon"
    monkeypatch.setattr(rows, "cores", lambda: 16)
    assert rows.machine_slug() == "xeon16"
    monkeypatch.setattr(rows, "cpu_name", lambda: "AMD EPYC 9R14 96-Core Processor")
    monkeypatch.setattr(rows, "cores", lambda: 2)
    assert rows.machine_slug() == "epyc"
    monkeypatch.setattr(rows, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    assert rows.machine_slug() == "h100"
    assert rows.machine().startswith("NVIDIA H100 80GB HBM3, ")


def test_the_demo_script_writes_top1_and_time_in_one_row_and_keeps_its_headline(tmp_path, monkeypatch):
    """benchmarks/fashion_mnist.py wrote demo-test-top1 (top-1 alone) and demo-train-time rows, the shape the results
    dropped, and a rewritten row lost the README headline it carried."""
    demo = _load("fashion_mnist")
    monkeypatch.setattr(demo, "machine_slug", lambda: "epyc")
    monkeypatch.setattr(rows, "machine_slug", lambda: "epyc")
    shutil.copy(BENCHMARKS / "results" / "demo.csv", tmp_path / "demo.csv")
    summary = {"wall_time_s": 421.4, "img_s": 4250.2, "steps": 7000, "threads": 2, "batch_size": 256}
    monkeypatch.setattr(demo, "trained", lambda *a: (summary, {"top1": 0.91516}, 0.3))
    monkeypatch.setattr(sys, "argv", ["fashion_mnist.py", "--results-dir", str(tmp_path), "--out", "x"])
    before = {r["id"]: r for r in _read(tmp_path / "demo.csv")[1]}["demo-test-top1-epyc"]
    assert demo.main() == 0
    written = {r["id"]: r for r in _read(tmp_path / "demo.csv")[1]}
    row = written["demo-test-top1-epyc"]
    assert (row["figure"], row["unit"]) == ("0.9152 / 421", "top-1 / s")
    assert row["headline"] == before["headline"] and row["against"] == before["against"]
    assert row["setting"].startswith("7,000 steps x 256, 2 threads, 4,250 img/s, load 0.3")
    assert not any(i.startswith("demo-train-time") for i in written)
    monkeypatch.setattr(sys, "argv", ["fashion_mnist.py", "--results-dir", str(tmp_path), "train.steps=5"])
    with pytest.raises(SystemExit):  # a row is of the config as it ships
        demo.main()
