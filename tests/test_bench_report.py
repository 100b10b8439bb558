"""A benchmark's Report: the JSON on stdout exactly as measured, the tables on stderr (or alone on stdout)."""

from __future__ import annotations

import json

import pytest

from harness.bench.report import Report, Table, cell

RESULT = {"benchmark": "x", "rows": [{"name": "first", "ms": 1.25}, {"name": "second", "ms": None}]}


def report() -> Report:
    rows = [[r["name"], cell(r["ms"], ".1f", " ms")] for r in RESULT["rows"]]
    return Report(RESULT, [Table(["name", "time"], rows, title="the title", caption="the caption")], ["a note"],
                  heading=["a heading"])


def test_json_on_stdout_as_measured_and_the_table_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    report().emit()
    out, err = capsys.readouterr()
    assert out == json.dumps(RESULT, indent=2) + "\n"
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    assert lines[0] == "a heading" and lines[1] == "the title" and lines[-1] == "a note"
    assert [line.split() for line in lines if line.startswith(("first", "second"))] == [
        ["first", "1.2", "ms"], ["second", "-"]]


def test_without_json_the_table_alone_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    report().emit(as_json=False)
    out, err = capsys.readouterr()
    assert err == "" and "the caption" in out and "{" not in out
    assert report().text() == out
