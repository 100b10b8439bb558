"""The TUI's context gauge and session picker, driven through Textual's headless pilot on replayed sessions."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.paths import state_dir
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.errors import UsageError
from harness.events import ContextCompact, LLMEnd, TrajectoryWriter, read_trajectory
from harness.history import LAST
from harness.saved import PICK
from harness.session import Session
from sandbox import Workspace
from tests.test_tui_support import TASK, call, event_types, isolated, session_options, until  # noqa: F401
from tools import default_tools
from tui.app import TaoApp, resolve_resume, sessions_to_pick
from tui.screens.sessions import SessionPicker
from tui.widgets.prompt.box import PromptBox
from tui.widgets.status.bar import StatusBar

READS = [call("read_file", "Let me read it.", path="calc/ops.py")] * 4 + [call("finish", "Done.", summary="read")]


async def gauge_after_a_session(isolated: Path, *flags: str) -> tuple[str, list[str], TaoApp]:
    """The status line after a replayed session, the conversation's notes of compaction, and the app."""
    app = TaoApp(session_options(isolated, READS, "--no-speculation", *flags), task=TASK, masked=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: "turn_end" in event_types(app), "the session's end")
        line = app.query_one(StatusBar).line().plain
        notes = [str(note.render()) for note in app.query(".note") if "context compacted" in str(note.render())]
        await pilot.press("ctrl+q")
    return line, notes, app


async def test_the_status_bar_shows_how_full_the_window_is(isolated: Path) -> None:
    line, notes, app = await gauge_after_a_session(isolated, "--max-model-len", "2000")
    compactions = [e for e in app.shown if isinstance(e, ContextCompact)]
    assert compactions and notes and "tokens freed" in notes[0]
    last_answer = [e for e in app.shown if isinstance(e, LLMEnd)][-1]
    share = compactions[-1].tokens_after if compactions and compactions[-1].t > last_answer.t else \
        last_answer.prompt_tokens
    assert f"ctx {share / 2000:.0%}" in line


async def test_an_engine_that_does_not_know_its_window_shows_no_gauge(isolated: Path) -> None:
    line, _, _ = await gauge_after_a_session(isolated)
    assert "ctx" not in line


async def saved(repo: Path, name: str, task: str, turns: list[str], mtime: float, killed: bool = False) -> Path:
    """A saved session of `repo` in the state folder, as a run would leave it (its session_end cut if killed)."""
    path = state_dir() / "trajectories" / f"{name}.jsonl"
    writer = TrajectoryWriter(path)
    session = Session(task, ReplayEngine(Recording([Turn(t) for t in turns])), Workspace(repo), default_tools(),
                      sinks=[writer.write])
    await session.run()
    writer.close()
    if killed:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:-1]))
    os.utime(path, (mtime, mtime))
    return path


async def two_sessions(isolated: Path) -> tuple[Path, Path, Path]:
    repo = session_options(isolated).repo
    older = await saved(repo, "older", "list the files\nand more", [call("list_files"), call("finish", summary="ok")],
                        1_000_000, killed=True)
    newer = await saved(repo, "newer", "say done", [call("finish", summary="done")], 2_000_000)
    return repo, older, newer


async def test_resume_lists_this_repositorys_sessions_and_enter_resumes_one(isolated: Path) -> None:
    repo, older, newer = await two_sessions(isolated)
    choices = sessions_to_pick(repo)
    assert [(c.path, c.task, c.steps, c.ended) for c in choices] == [
        (newer, "say done", 1, "finished"), (older, "list the files", 2, "killed")]
    options = session_options(isolated / "again", [call("finish", summary="more")])
    app = TaoApp(options, choices=choices, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SessionPicker), "the session picker")
        await pilot.press("down", "enter")
        await until(pilot, lambda: "session_resume" in event_types(app), "the resumed session")
        assert app.resume == older and not isinstance(app.screen, SessionPicker)
        await pilot.press("ctrl+q")
    assert [e.type for e in read_trajectory(older)].count("session_resume") == 1
    assert "session_resume" not in [e.type for e in read_trajectory(newer)]


async def test_escape_leaves_the_picker_for_a_new_session(isolated: Path) -> None:
    repo, older, newer = await two_sessions(isolated)
    app = TaoApp(session_options(isolated / "again", [call("finish", summary="new")]), choices=sessions_to_pick(repo),
                 masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SessionPicker), "the session picker")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SessionPicker), "the picker closed")
        assert app.resume is None and app.worker is None
        assert app.focused is app.query_one(PromptBox)
        await pilot.press(*"a new task", "enter")
        await until(pilot, lambda: "turn_end" in event_types(app), "the new session's end")
        await pilot.press("ctrl+q")
    assert "session_start" in event_types(app) and "session_resume" not in event_types(app)


async def test_continue_takes_the_last_session_and_resume_without_one_says_so(isolated: Path) -> None:
    repo, _, newer = await two_sessions(isolated)
    parser = build_parser()
    assert parser.parse_args(["tui", "--resume"]).resume == PICK
    assert parser.parse_args(["tui", "--continue"]).resume == LAST
    assert parser.parse_args(["run", "--resume"]).resume == PICK
    assert resolve_resume(LAST, repo) == newer and resolve_resume(PICK, repo) is None
    elsewhere = isolated / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(UsageError, match="no saved session of"):
        sessions_to_pick(elsewhere)


async def test_the_picker_opens_from_the_app_before_a_session_starts(isolated: Path) -> None:
    repo, older, newer = await two_sessions(isolated)
    options = session_options(isolated / "again", [call("finish", summary="more")])
    app = TaoApp(replace(options, repo=repo), masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press(*"/resume", "enter")
        await until(pilot, lambda: isinstance(app.screen, SessionPicker), "the session picker")
        await pilot.press("enter")
        await until(pilot, lambda: "session_resume" in event_types(app), "the resumed session")
        assert app.resume == newer
        app.action_pick_session()  # a session is open now: it says how to switch instead
        await pilot.pause()
        assert not isinstance(app.screen, SessionPicker)
        await pilot.press("ctrl+q")
