"""`tao bench first-call`: the real `tao` in a pseudo-terminal, a task typed at launch, timed to its first tool call
(here on the replay engine, so it is quick; docs/BENCHMARKS.md has it on the embedded engine)."""

from __future__ import annotations

import json
import subprocess

from tests.helpers import EXAMPLES, ROOT
from tests.test_tui_pty import TAO


def test_a_typed_task_is_timed_to_its_first_tool_call() -> None:
    out = subprocess.run([str(TAO), "bench", "first-call", "--runs", "1", "--json", "--", "--engine", "replay",
                          "--replay", str(EXAMPLES / "calc.replay.json")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    [run] = json.loads(out.stdout)["runs"]
    assert 0 < run["frame"] <= run["first_token"] <= run["first_call"]
    assert "first tool call after" in out.stderr
    assert any(line.split()[:2] == ["1", f"{run['frame']:.1f}"] for line in out.stderr.splitlines())  # run 1's row


def test_a_wrong_run_count_is_a_usage_error() -> None:
    out = subprocess.run([str(TAO), "bench", "first-call", "--runs", "0"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "--runs must be at least 1" in out.stderr
