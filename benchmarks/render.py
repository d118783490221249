"""Render benchmarks/results/*.csv into benchmarks/RESULTS.md and the README's headline block.

    python benchmarks/render.py            # rewrite both
    python benchmarks/render.py --check    # exit 1 if either differs from what would be written

The CSV rows are the data; RESULTS.md and the README block are views of them. Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

COLUMNS = [
    "id",
    "headline",
    "benchmark",
    "claim",
    "figure",
    "unit",
    "against",
    "model",
    "setting",
    "machine",
    "software",
    "date",
    "command",
]
REQUIRED = ["id", "benchmark", "claim", "figure", "unit", "machine", "date", "command"]
# Sections in this order; a CSV not named here comes after them, by name.
ORDER = [
    "demo",
    "cpu_inference",
    "cpu_deployment",
    "cpu_kernels",
    "scaling",
    "memory",
    "gpu",
    "checkpoint_parity",
    "input_pipeline",
    "distributed",
    "reliability",
    "hybrid_demo",
    "masked_patch",
    "transfer",
    "paper",
    "own_images",
    "recipes",
    "families",
]
# Sections drawn as a table of things measured by model (`render_matrix`)
MATRICES = {"families"}
START = "<!-- headline:start -->"
END = "<!-- headline:end -->"
MAX_HEADLINES = 8
MAX_RESULTS_BYTES = 40 * 1024  # one row per figure, room for a few more: older figures live in git history


def load(results_dir: Path) -> dict[str, list[dict[str, str]]]:
    """Every CSV's rows, by file stem, in section order; raises ValueError on a malformed row."""
    stems = sorted(p.stem for p in results_dir.glob("*.csv"))
    stems = [s for s in ORDER if s in stems] + [s for s in stems if s not in ORDER]
    tables, seen = {}, set()
    for stem in stems:
        path = results_dir / f"{stem}.csv"
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path.name}: missing columns {', '.join(missing)}")
            rows = list(reader)
        for n, row in enumerate(rows, start=2):
            empty = [c for c in REQUIRED if not (row.get(c) or "").strip()]
            if empty:
                raise ValueError(f"{path.name} line {n}: empty {', '.join(empty)}")
            if row["id"] in seen:
                raise ValueError(f"{path.name} line {n}: id {row['id']} used twice")
            seen.add(row["id"])
        tables[stem] = rows
    clash = seen & {section_id(stem) for stem in tables}
    if clash:
        raise ValueError(f"row ids equal to a section's anchor: {', '.join(sorted(clash))}")
    return tables


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def with_unit(row: dict[str, str]) -> str:
    """The figure with its unit; a figure of several parts with a unit for each ("0.9152 / 429", "top-1 / s") takes
    each part's own ("0.9152 top-1 / 429 s")."""
    figures, units = row["figure"].split(" / "), row["unit"].split(" / ")
    if len(units) > 1 and len(units) == len(figures):
        return " / ".join(with_unit({"figure": f, "unit": u}) for f, u in zip(figures, units))
    unit = row["unit"]
    return row["figure"] + (unit if unit in ("x", "%") else f" {unit}")


def section_id(stem: str) -> str:
    """A section's anchor: its CSV's name (`gpu.csv` -> `#gpu`), stable when its title changes."""
    return stem.replace("_", "-")


def render_results(tables: dict[str, list[dict[str, str]]]) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `python benchmarks/render.py` from `benchmarks/results/`, one CSV per section (`#cpu-kernels` is",
        "`cpu_kernels.csv`): edit the CSV. A row is one figure with its machine, date and command; older ones are in",
        "git history. Rows have anchors: `benchmarks/RESULTS.md#demo-test-top1-xeon`.",
        "",
        "## Contents",
        "",
    ]
    titles = {stem: rows[0]["benchmark"] for stem, rows in tables.items() if rows}
    # the software most sections ran is said once here; a section says its own only where it differs
    sections = Counter(sw for rows in tables.values() for sw in {r["software"] for r in rows if r["software"]})
    usual = max(sections, key=lambda sw: sections[sw] * len(sw), default="")  # the most text said once
    if usual:
        lines[-2:-2] = [f"Software, unless a section says otherwise: {usual}.", ""]
    lines += [f"- [{titles[s]}](#{section_id(s)})" for s in titles]
    for stem, title in titles.items():
        rows = tables[stem]
        lines += [
            "",
            f'<a id="{section_id(stem)}"></a>',
            "",
            f"## {title}",
            "",
        ]
        if stem in MATRICES:
            lines += render_matrix(rows)
        else:
            lines += render_table(rows)
        software = list(dict.fromkeys(r["software"] for r in rows if r["software"] and r["software"] != usual))
        if software:
            lines += ["Software: " + "; ".join(software) + "."]
        lines += ["", "```sh"]
        lines += list(dict.fromkeys(r["command"] for r in rows))
        lines += ["```"]
    return "\n".join(lines) + "\n"


def render_table(rows: list[dict[str, str]]) -> list[str]:
    """A section's rows, one a line; a column every row shares (one machine, one date) is said once, under it."""
    columns = ["claim", "figure", "unit", "against", "model", "setting", "machine", "date"]
    shared = [c for c in ("model", "setting", "machine", "date") if len(rows) > 1 and len({r[c] for r in rows}) == 1]
    shown = [c for c in columns if c not in shared]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for r in rows:
        lines.append(f'| <a id="{r["id"]}"></a>' + " | ".join(cell(r[c]) or "-" for c in shown) + " |")
    return lines + ["", *(f"{c.capitalize()}: {cell(rows[0][c])}." for c in shared if rows[0][c].strip())]


def render_matrix(rows: list[dict[str, str]]) -> list[str]:
    """A section of many figures of one unit as a table: a line for each thing measured (the claim's words before its
    first colon), a column for each model; each line anchored by the id of its row that compares (with `against`),
    whose claim and setting follow the table; the machine and the dates once."""
    things = list(dict.fromkeys(r["claim"].split(":", 1)[0] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    at = {(r["claim"].split(":", 1)[0], r["model"]): r for r in rows}
    says = {r["claim"].split(":", 1)[0]: r for r in rows if r["against"]}
    lines = [
        f"{rows[0]['unit']}:",
        "",
        "| | " + " | ".join(cell(m) for m in models) + " |",
        "|---|" + "---|" * len(models),
    ]
    for thing in things:
        label = f'<a id="{says[thing]["id"]}"></a>{cell(thing)}' if thing in says else cell(thing)
        lines.append(
            f"| {label} | " + " | ".join(r["figure"] if (r := at.get((thing, m))) else "-" for m in models) + " |"
        )
    lines += ["", *(f"- {cell(r['claim'])} ({cell(r['setting'])})" for r in says.values())]
    dates = sorted({r["date"] for r in rows})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return lines + ["", f"Machine: {'; '.join(sorted({r['machine'] for r in rows}))}. Date: {when}."]


def render_headline(tables: dict[str, list[dict[str, str]]]) -> str:
    rows = [r for rs in tables.values() for r in rs if r["headline"].strip()]
    if len(rows) > MAX_HEADLINES:
        raise ValueError(f"{len(rows)} headline rows, at most {MAX_HEADLINES}")
    lines = ["| claim | figure | against what | machine | link |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r["headline"], with_unit(r), r["against"] or "-", r["machine"]]
        link = f"[{r['date'].split()[0]}](benchmarks/RESULTS.md#{r['id']})"
        lines.append("| " + " | ".join(cell(c) for c in cells) + f" | {link} |")
    return "\n".join(lines) + "\n"


def with_block(readme: str, block: str) -> str:
    """README text with the headline block between the markers replaced."""
    head, sep, rest = readme.partition(START + "\n")
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"README.md lacks the lines {START} and {END}")
    return head + START + "\n" + block + END + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if RESULTS.md or README.md would change")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="repository root")
    args = parser.parse_args(argv)
    results_md = args.root / "benchmarks" / "RESULTS.md"
    readme = args.root / "README.md"
    try:
        tables = load(args.root / "benchmarks" / "results")
        wanted = {
            results_md: render_results(tables),
            readme: with_block(readme.read_text(encoding="utf-8"), render_headline(tables)),
        }
    except ValueError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 2
    if len(wanted[results_md].encode()) > MAX_RESULTS_BYTES:
        print(
            f"render.py: RESULTS.md would be {len(wanted[results_md].encode())} bytes, over {MAX_RESULTS_BYTES}",
            file=sys.stderr,
        )
        return 2
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            print(
                f"render.py: {p.relative_to(args.root)} differs from benchmarks/results/; run python benchmarks/render.py",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p], encoding="utf-8")
        print(f"wrote {p.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
