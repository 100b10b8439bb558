"""`tao bench cosched-error`: the simulator's error against the real engine from two result files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.cosched_error import compare, load
from harness.errors import UsageError


def result(path: Path, modes_by_level: dict[int, dict[str, tuple[float, float, float]]], partial: bool = False) -> Path:
    """A `tao bench cosched --json` result (or a --partial file) with (mean, p99, engine s/step) per mode."""
    levels = [{"sessions": n,
               "modes": {m: {"mean": a, "p99": b, "engine_s_per_step": c} for m, (a, b, c) in modes.items()}}
              for n, modes in modes_by_level.items()]
    path.write_text(json.dumps({"levels": levels} if partial else {"config": {}, "levels": levels, "ratios": []}))
    return path


def test_each_shared_point_gets_its_error_and_the_ones_past_twenty_percent_are_counted(tmp_path: Path) -> None:
    real = result(tmp_path / "real.json", {8: {"fcfs": (400.0, 500.0, 20.0), "tao": (200.0, 300.0, 10.0)},
                                           16: {"fcfs": (900.0, 1000.0, 40.0)}})
    sim = result(tmp_path / "sim.json", {8: {"fcfs": (300.0, 550.0, 18.0), "tao": (220.0, 300.0, 10.0),
                                             "cap": (1.0, 1.0, 1.0)}}, partial=True)
    out = compare(load(real), load(sim))

    assert [(p["sessions"], p["mode"]) for p in out["points"]] == [(8, "fcfs"), (8, "tao")]  # shared ones only
    fcfs, tao = out["points"]
    assert fcfs["mean"]["error"] == -0.25 and fcfs["p99"]["error"] == 0.1 and fcfs["engine_s_per_step"]["error"] == -0.1
    assert tao["mean"]["error"] == 0.1
    assert (out["within"], out["outside"], out["worst_mean_error"]) == (1, 1, -0.25)


def test_results_with_nothing_in_common_or_not_results_are_refused(tmp_path: Path) -> None:
    real = result(tmp_path / "real.json", {8: {"fcfs": (1.0, 1.0, 1.0)}})
    sim = result(tmp_path / "sim.json", {16: {"fcfs": (1.0, 1.0, 1.0)}})
    with pytest.raises(UsageError, match="share no level and mode"):
        compare(load(real), load(sim))
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="not a `tao bench cosched --json` result"):
        load(tmp_path / "bad.json")


def test_the_command_prints_the_table(tmp_path: Path) -> None:
    real = result(tmp_path / "real.json", {8: {"tao": (200.0, 300.0, 10.0)}})
    sim = result(tmp_path / "sim.json", {8: {"tao": (100.0, 150.0, 5.0)}})
    done = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "cosched-error", str(real), str(sim)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "-50%" in shown and "within 20%: 0 of 1 points" in shown
