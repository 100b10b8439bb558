"""Slash commands and @file mentions in the TUI, driven through Textual's pilot on replayed sessions and real repos."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from harness.events import Attached, Checkpointed, ContextCleared, Undone, UserMessage, read_trajectory
from tests.helpers import git
from tests.test_tui_support import TASK, call, event_types, isolated, session_options, until  # noqa: F401
from tui.app import TaoApp
from tui.commands import is_command
from tui.screens.diff import DiffScreen
from tui.screens.keys import KeysScreen
from tui.widgets.conversation.pane import ConversationPane

OPS = '    """Return the sum of a and b."""\n    return a - b'
FIXED = '    """Return the sum of a and b."""\n    return a + b'
# Turn 1 (the task) edits a file, creates one and deletes one; turn 2 (a follow-up) creates another.
EDITS = [
    call("edit_file", "Fix add.", path="calc/ops.py", old=OPS, new=FIXED),
    call("write_file", "A helper.", path="calc/helper.py", content="HELP = 1\n"),
    call("bash", "The issue is fixed.", command="rm ISSUE.md"),
    call("finish", "Done.", summary="fixed"),
    call("write_file", "Notes.", path="NOTES.md", content="notes\n"),
    call("finish", "Done.", summary="noted"),
    call("finish", "Seen.", summary="the notes are gone"),
]


def said(app: TaoApp) -> str:
    """Everything the conversation pane shows, as text."""
    return "\n".join(str(static.content) for static in app.query_one(ConversationPane).query(Static))


async def type_line(pilot, text: str) -> None:  # noqa: ANN001 - Textual's Pilot
    await pilot.press(*text, "enter")
    await pilot.pause()


async def test_undo_goes_back_turn_by_turn_and_diff_shows_the_session(isolated: Path) -> None:
    options = session_options(isolated, EDITS, "--yolo", "--no-speculation")
    repo = options.repo
    status, head, stash = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"), git(repo, "stash", "list")
    original = (repo / "calc" / "ops.py").read_text()
    app = TaoApp(options, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await type_line(pilot, "/undo")
        assert "No session yet" in said(app)
        await pilot.press(*TASK, "enter")
        await until(pilot, lambda: "turn_end" in event_types(app), "the first turn's end")
        await type_line(pilot, "note it")
        await until(pilot, lambda: event_types(app).count("turn_end") == 2, "the second turn's end")
        assert (repo / "NOTES.md").exists() and (repo / "calc" / "helper.py").exists()

        await type_line(pilot, "/diff")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen), "the session's diff")
        await until(pilot, lambda: "NOTES.md" in str(app.screen.query_one("#diff", Static).content), "the diff read")
        shown = str(app.screen.query_one("#diff", Static).content)
        assert "calc/helper.py" in shown and "ISSUE.md" in shown and "+    return a + b" in shown
        await pilot.press("escape")

        await type_line(pilot, "/undo")
        await until(pilot, lambda: "undo" in event_types(app), "the first undo")
        assert not (repo / "NOTES.md").exists() and (repo / "calc" / "helper.py").exists()
        assert "undid turn 2 (note it): removed NOTES.md" in said(app)
        await type_line(pilot, "go on")  # the model hears of the undo with this message; this turn changes nothing
        await until(pilot, lambda: event_types(app).count("turn_end") == 3, "the third turn's end")
        told = app.live.session.messages[-2]["content"]
        assert told.startswith("go on") and 'The user undid the file changes of turn 2, "note it"' in told
        await type_line(pilot, "/undo")
        await until(pilot, lambda: event_types(app).count("undo") == 2, "the second undo")
        assert (repo / "calc" / "ops.py").read_text() == original and (repo / "ISSUE.md").exists()
        assert not (repo / "calc" / "helper.py").exists()
        assert "restored calc/ops.py; removed calc/helper.py; brought back ISSUE.md" in said(app)
        await type_line(pilot, "/undo")
        await until(pilot, lambda: "Nothing to undo" in said(app), "nothing left to undo")
        await pilot.press("ctrl+q")

    assert git(repo, "status", "--porcelain") == status and git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "stash", "list") == stash
    saved = read_trajectory(isolated / "session.jsonl")
    assert [e.turn for e in saved if isinstance(e, Checkpointed)] == [1, 2, 3]
    assert [e.turn for e in saved if isinstance(e, Undone)] == [2, 1]
    assert not any(isinstance(e, UserMessage) and e.text.startswith("/") for e in saved)  # commands stay here


async def test_clear_model_compact_help_and_unknown_commands(isolated: Path) -> None:
    turns = [call("list_files", "Looking."), call("finish", "Done.", summary="looked"),
             call("finish", "Fresh.", summary="new task done")]
    options = session_options(isolated, turns, "--no-speculation")
    app = TaoApp(options, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await type_line(pilot, "/model")
        assert "Engine: replay (--engine replay" in said(app) and "--base-url" in said(app)
        await type_line(pilot, "/frobnicate now")
        assert ("Unknown command /frobnicate. Commands: /help, /diff, /undo, /clear, /model, /compact, /resume"
                in said(app))
        await pilot.press(*"/he", "tab")  # Tab completes a command
        assert app.query_one("#prompt").value == "/help"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, KeysScreen), "the help screen")
        await pilot.press("escape")

        await pilot.press(*TASK, "enter")
        await until(pilot, lambda: "turn_end" in event_types(app), "the first turn's end")
        session = app.live.session
        before = list(session.messages)
        await type_line(pilot, "/compact")  # two turns: every result is a recent one, so nothing goes
        assert "Nothing to compact" in said(app) and session.messages == before

        await type_line(pilot, "/clear")
        await until(pilot, lambda: "context_clear" in event_types(app), "the cleared context")
        assert len(session.messages) == 1 and session.messages[0]["role"] == "system"
        assert "conversation cleared" in said(app) and "looked" not in said(app)
        await type_line(pilot, "a new task")
        await until(pilot, lambda: event_types(app).count("turn_end") == 2, "the new task's end")
        assert [m["content"] for m in session.messages[1:2]] == ["a new task"]
        await pilot.press("ctrl+q")

    saved = read_trajectory(isolated / "session.jsonl")
    [cleared] = [e for e in saved if isinstance(e, ContextCleared)]
    assert cleared.dropped >= 3
    assert [e.text for e in saved if isinstance(e, UserMessage)] == ["a new task"]


async def test_a_mentioned_file_reaches_the_model_and_the_pane_shows_the_mention(isolated: Path) -> None:
    options = session_options(isolated, [call("finish", "Done.", summary="read it")], "--no-speculation")
    app = TaoApp(options, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press(*"why does @calc/ops.py subtract? and @nope.py", "enter")
        await until(pilot, lambda: "turn_end" in event_types(app), "the turn's end")
        first = app.live.session.messages[1]["content"]
        assert first.startswith("why does @calc/ops.py") and '<file path="calc/ops.py">' in first
        assert "return a - b" in first
        pane = said(app)
        assert "why does @calc/ops.py subtract?" in pane and "attached calc/ops.py" in pane
        assert "@nope.py: no such file" in pane
        assert "return a - b" not in pane  # the mention shows, not the file
        await pilot.press("ctrl+q")
    [attached] = [e for e in read_trajectory(isolated / "session.jsonl") if isinstance(e, Attached)]
    assert attached.files == ["calc/ops.py"]


def test_what_counts_as_a_command() -> None:
    assert is_command("/undo") and is_command("/foo bar") and is_command("/")
    assert not is_command("/etc/hosts is missing") and not is_command("fix /undo") and not is_command("")


async def test_undo_and_clear_wait_for_the_turn_to_end(isolated: Path) -> None:
    turns = [call("bash", "Waiting.", command="sleep 30"), call("finish", "Done.", summary="waited")]
    options = session_options(isolated, turns, "--yolo", "--no-speculation")
    app = TaoApp(options, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press(*TASK, "enter")
        await until(pilot, lambda: "tool_call" in event_types(app), "the running command")
        await type_line(pilot, "/undo")
        await type_line(pilot, "/clear")
        assert said(app).count("The agent is working: wait for the turn to end, or interrupt it with Ctrl+C") == 2
        assert "undo" not in event_types(app) and "context_clear" not in event_types(app)
        await pilot.press("ctrl+c")
        await until(pilot, lambda: "turn_end" in event_types(app), "the interrupted turn")
        await type_line(pilot, "/undo")
        await until(pilot, lambda: "Nothing to undo" in said(app), "nothing to undo: sleep changed no file")
        await pilot.press("ctrl+q")
