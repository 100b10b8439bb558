"""`tao bench cosched` on the bundled sessions: their books are recorded with the real tools, on the real clock.

The simulated engine runs on a virtual clock; the books must not. Recorded there, every subprocess
wait jumped the clock past the session's time limit, and empty books were cached and replayed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench import cosched
from harness.bench import recordings as recorded
from harness.bench.simtools import book_path


def test_a_bundled_session_is_recorded_with_its_real_tool_answers(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = cosched.run([1], "sim", "cpu", ["calc-fix-add"], None, 1, progress=False)
    session = recorded.load_sessions(recorded.SESSIONS_DIR, ["calc-fix-add"])[0]
    book = json.loads(book_path(session, cosched.cache_dir()).read_text(encoding="utf-8"))
    calls = book["calls"]
    assert [c["name"] for c in calls] == ["run_tests", "grep", "read_file", "edit_file", "run_tests", "run_tests"]
    assert "1 failed" in calls[0]["output"] and "passed" in calls[-1]["output"]  # pytest really ran
    modes = result["levels"][0]["modes"]
    assert all(mode["not_finished"] == 0 for mode in modes.values())
    assert all(mode["process_cpu_s"] >= 0 for mode in modes.values())  # Tao's own CPU, reported per mode
