"""`tao bench cosched-plot`: runs of one engine setup made one level at a time draw one curve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.bench.cosched_plot import panels
from harness.cli import main


def run(engine: str, kv_tokens: int, levels: dict[int, float], workload: str = "traces/mini") -> dict[str, Any]:
    """A `tao bench cosched --json` result with these levels' fcfs means (the rest as the command writes it)."""
    return {"config": {"engine": engine, "profile": f"{engine}-profile", "workload": workload, "steps": 5,
                       "holdout": 0.3, "caps": [2], "repeat": 2, "pacing": {"kv_tokens": kv_tokens}},
            "levels": [{"sessions": n, "modes": {"fcfs": {"mean": mean, "p99": 2 * mean}}}
                       for n, mean in levels.items()]}


def means(panel: dict[str, Any]) -> dict[int, float]:
    return {row["sessions"]: row["modes"]["fcfs"]["mean"] for row in panel["levels"]}


def test_levels_of_one_setup_join_and_other_setups_keep_their_own_panel() -> None:
    real_k2, real_k = run("embedded", 12544, {2: 160.0}), run("embedded", 12544, {4: 75.0}, "../shared/traces/mini")
    sim = run("sim", 12416, {2: 175.0, 4: 69.0})
    other_workload = run("embedded", 12544, {8: 200.0}, workload="examples/sessions")
    other_calibration = run("sim", 12416, {4: 80.0})
    other_calibration["config"]["pacing"]["batch_cost"] = 8.6
    partial = {"levels": [{"sessions": 16, "modes": {"fcfs": {"mean": 300.0, "p99": 400.0}}}]}

    drawn = panels([real_k2, sim, real_k, other_workload, other_calibration, partial, dict(partial)])

    assert [means(panel) for panel in drawn] == [{2: 160.0, 4: 75.0}, {2: 175.0, 4: 69.0}, {8: 200.0}, {4: 80.0},
                                                 {16: 300.0}, {16: 300.0}]
    assert real_k2["levels"] == [{"sessions": 2, "modes": {"fcfs": {"mean": 160.0, "p99": 320.0}}}]  # inputs untouched


def test_a_rerun_of_a_level_replaces_the_earlier_row() -> None:
    first, rerun = run("embedded", 12544, {2: 280.0, 8: 342.0}), run("embedded", 12544, {2: 164.0})
    assert means(panels([first, rerun])[0]) == {8: 342.0, 2: 164.0}


def test_the_command_refuses_a_file_that_is_not_a_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "calibration.json"
    wrong.write_text(json.dumps({"profile": "cpu"}), encoding="utf-8")
    assert main(["bench", "cosched-plot", str(wrong), "--out", str(tmp_path / "c.png")]) != 0
    error = capsys.readouterr().err
    assert "calibration.json: not a `tao bench cosched --json` result" in error and "--partial" in error
    assert not (tmp_path / "c.png").exists()


def test_the_command_draws_the_joined_runs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the optional `plot` extra
    files = []
    for name, result in (("k2", run("embedded", 12544, {2: 160.0})), ("k", run("embedded", 12544, {4: 75.0}))):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(result), encoding="utf-8")
    out = tmp_path / "plots" / "cosched.png"
    assert main(["bench", "cosched-plot", *map(str, files), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
