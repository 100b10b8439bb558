"""The real `tao` binary in a real pseudo-terminal: type a task, read the screen, quit."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pexpect

from harness.events import read_trajectory
from tests.helpers import ROOT, make_calc_repo
from tests.test_tui_support import TASK, TURNS

TAO = ROOT / ".venv" / "bin" / "tao"


def screen_text(raw: str) -> str:
    """What was written to the terminal, without escape sequences (enough to find words on the screen)."""
    return re.sub(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[\]P_^].*?(?:\x07|\x1b\\)|\x1b.", "", raw)


def test_tao_in_a_terminal_runs_a_typed_task(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [TURNS[0], TURNS[1], TURNS[2], TURNS[-1]]}))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "150", "LINES": "45",
           **{name: str(tmp_path / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")}}
    env.pop("TEXTUAL", None)
    child = pexpect.spawn(str(TAO), ["--repo", str(repo), "--engine", "replay", "--replay", str(script)],
                          env=env, dimensions=(45, 150), encoding="utf-8", timeout=90, cwd=str(tmp_path))
    child.logfile_read = log = io.StringIO()  # everything drawn, to read the screen from
    try:
        child.expect("Describe the task")
        child.send(TASK)
        child.send("\r")
        child.expect("Approve once")  # the edit asks (mode "ask"); its keys show once the modal's guard is over
        child.send("y")
        child.expect("finished: add\\(\\) now returns a \\+ b")
        seen = screen_text(log.getvalue())
        # Textual redraws only what changed, so a line's words may come in pieces: look for short ones.
        assert "grep(pattern='def add')" in seen and "instead of adding" in seen
        assert "promoted" in seen and "discarded" in seen  # the speculation pane, live
        child.send("\x11")  # Ctrl+Q
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen_text(child.before or "")
    assert "tao --resume" in screen_text(child.before)
    [trajectory] = (tmp_path / "xdg_state_home" / "tao" / "trajectories").glob("*.jsonl")
    events = read_trajectory(trajectory)
    assert events[0].task == TASK and events[-1].type == "session_end"
    assert (repo / "calc" / "ops.py").read_text().count("return a + b") == 1
    [approval] = [e for e in events if e.type == "approval"]
    assert approval.decision == "allow" and approval.by == "user"
