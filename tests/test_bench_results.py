"""Benchmark results are data: every bench appends a record (its tables, commit, date, the
machine's CPU and cores, the command) through bench/record.py, and docs/benchmarks.md is
what bench/report.py writes from the latest record of each results file, so the page
cannot drift from the records or from the benches' docstrings."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import record  # noqa: E402
import report  # noqa: E402

RECORD_KEYS = {"bench", "date", "commit", "machine", "command", "source", "tables", "notes"}


def test_the_committed_page_is_what_the_report_writes() -> None:
    assert (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8") == report.render(), (
        "docs/benchmarks.md is stale: run `python bench/report.py`"
    )


def test_every_committed_record_has_its_provenance() -> None:
    for path in sorted((BENCH / "results").glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            entry = json.loads(line)
            where = f"{path.name}:{number}"
            assert RECORD_KEYS <= entry.keys(), where
            assert entry["bench"] == path.stem, where
            assert entry["source"] in ("measured", "recorded from docs"), where
            assert entry["command"] and entry["tables"], where
            for table in entry["tables"]:
                assert all(len(row) == len(table["columns"]) for row in table["rows"]), where


@pytest.mark.parametrize("path", sorted(p for p in BENCH.glob("*.py") if p.stem not in report.HELPERS), ids=str)
def test_every_bench_records_its_figures_and_fits_a_screen(path: Path) -> None:
    """Each bench calls bench/record.py's `record` (so a run leaves its figures as data)
    and its docstring, what it measures and how to read it, fits one screen."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "record"
        for alias in node.names
        if alias.name == "record"
    }
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert names & called, f"{path.name} never calls bench/record.py's record"
    docstring = ast.get_docstring(tree) or ""
    assert docstring and len(docstring.splitlines()) <= 40, (path.name, len(docstring.splitlines()))


def test_a_record_keeps_a_rich_table_and_the_report_shows_the_latest(tmp_path: Path) -> None:
    from rich.table import Table

    results, bench = tmp_path / "results", tmp_path / "bench"
    bench.mkdir()
    (bench / "probe.py").write_text('"""A probe: what it measures."""\n')
    for value in ("1.0", "2.5"):
        console = record.RecordingConsole(file=open(tmp_path / "out.txt", "w"))
        table = Table(title="[b]figures[/b]")
        table.add_column("what")
        table.add_column("seconds")
        table.add_row("a call", value)
        console.print(table)
        console.print("ratio [dim]0.5x[/dim]")
        record.record(str(bench / "probe.py"), console.tables, console.lines, command="probe", results=results)
    lines = (results / "probe.jsonl").read_text().splitlines()
    assert len(lines) == 2
    entry = json.loads(lines[-1])
    assert entry["tables"] == [{"title": "figures", "columns": ["what", "seconds"], "rows": [["a call", "2.5"]]}]
    assert entry["notes"] == ["ratio 0.5x"] and entry["source"] == "measured"
    assert entry["machine"]["cores"] >= 1 and entry["date"] and entry["commit"]
    page = report.render(bench, results)
    assert "| a call | 2.5 |" in page and "| a call | 1.0 |" not in page
    assert "### `bench/probe.py`" in page and "A probe: what it measures." in page


def test_the_report_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(report.render() + "a figure edited by hand\n")
    monkeypatch.setattr(report, "PAGE", page)
    assert report.main(["--check"]) == 1
    assert report.main([]) == 0 and report.main(["--check"]) == 0
