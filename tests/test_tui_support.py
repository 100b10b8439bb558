"""What the TUI tests share (no tests here): a replayed session script, options, and waiting on the app."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from harness.cli import build_parser
from harness.launch import SessionOptions
from tests.helpers import make_calc_repo
from tui.app import TaoApp

TASK = "add() subtracts; make it add"


def call(name: str, text: str = "", **arguments: object) -> str:
    """One recorded answer: some words, then one tool call."""
    return f"{text}\n<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


# Pure calls, an edit and shell commands that need approval; no test run, so that no sandboxed
# speculation is waited on (the tests stay fast on a busy machine). `sleep 30 ...` is there to be interrupted.
TURNS = [
    call("grep", "Let me find add.", pattern="def add"),
    call("read_file", "", path="calc/ops.py"),
    call("edit_file", "add subtracts instead of adding.", path="calc/ops.py",
         old='    """Return the sum of a and b."""\n    return a - b',
         new='    """Return the sum of a and b."""\n    return a + b'),
    call("bash", "Let me wait for the build.", command="sleep 30 && touch LATER"),
    call("bash", "Let me leave a note.", command="touch NOTES"),
    call("finish", "Done.", summary="add() now returns a + b"),
]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Config, cache (learned patterns) and state (trajectories) under tmp_path, so runs do not vary."""
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    return tmp_path


def session_options(tmp_path: Path, turns: list[str] = TURNS, *flags: str) -> SessionOptions:
    """Options as `tao tui --engine replay` builds them, on a fresh calc repository."""
    repo = make_calc_repo(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"task": TASK, "turns": turns}))
    args = build_parser().parse_args(["tui", "--repo", str(repo), "--engine", "replay", "--replay", str(script),
                                      "--trajectory", str(tmp_path / "session.jsonl"), *flags])
    return SessionOptions.from_args(args, repo)


async def until(pilot: Pilot, done: Callable[[], bool], what: str, tries: int = 600) -> None:
    """Let the app run until `done()` holds; fail saying `what` was awaited."""
    for _ in range(tries):
        if done():
            return
        await pilot.pause(0.05)
    shown = getattr(pilot.app, "shown", [])
    raise AssertionError(f"the app never reached: {what}; last events: {[e.type for e in shown[-8:]]}")


def event_types(app: TaoApp) -> list[str]:
    """Types of the events the app has shown so far, in order."""
    return [event.type for event in app.shown]
