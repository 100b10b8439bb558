"""The TUI driven through Textual's headless pilot: a whole replayed session on a real repository."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from harness.events import Approval, Interrupt, ToolResult, TurnEnd, read_trajectory
from harness.vocabulary import SpecState
from tests.test_tui_support import TASK, TURNS, call, event_types, isolated, session_options, until  # noqa: F401
from tui.app import TaoApp
from tui.screens.approve import ApprovalScreen
from tui.widgets.conversation.pane import CallEntry
from tui.widgets.speculation.pane import SpeculationPane


def armed(app: TaoApp, command: str) -> bool:
    """Whether the approval modal for `command` is up and past its guard, so its keys work."""
    return isinstance(app.screen, ApprovalScreen) and app.screen.command == command and app.screen.ready


async def test_a_session_typed_interrupted_approved_and_denied(isolated: Path) -> None:
    options = session_options(isolated)
    app = TaoApp(options, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press(*TASK, "enter")
        await until(pilot, lambda: armed(app, "edit_file calc/ops.py"), "the approval of the edit")  # edits ask too
        await pilot.press("y")
        await until(pilot, lambda: armed(app, "sleep 30 && touch LATER"), "the approval of `sleep 30 ...`")
        calls = [entry.summary.plain for entry in app.query(CallEntry)]
        assert calls[0].startswith("grep(pattern='def add')") and calls[2].startswith("edit_file(")
        book = app.query_one(SpeculationPane).book
        settled = (SpecState.PROMOTED, SpecState.DISCARDED)
        assert book.launched > 0 and any(entry.state in settled for entry in book.entries.values())

        await pilot.press("y")  # approve once; the command runs, then Ctrl+C stops it
        await until(pilot, lambda: "approval" in event_types(app), "the approved command running")
        await pilot.press("ctrl+c")
        await until(pilot, lambda: "turn_end" in event_types(app), "the interrupted turn's end")
        interrupt = next(e for e in app.shown if isinstance(e, Interrupt))
        assert interrupt.stage == "tool"
        assert "interrupted" in next(e for e in app.shown if isinstance(e, TurnEnd)).status

        await pilot.press("ctrl+t")  # speculation off for the rest of the session
        await until(pilot, lambda: not app.query_one(SpeculationPane).book.enabled, "speculation off")
        launched = book.launched
        await pilot.press(*"go on", "enter")  # the same session goes on: the next turn asks for `touch NOTES`
        await until(pilot, lambda: armed(app, "touch NOTES"), "the approval of `touch NOTES`")
        await pilot.click("#deny-message")
        await pilot.press(*"no notes please", "enter")  # Enter in the message field denies with it
        await until(pilot, lambda: event_types(app).count("turn_end") == 2, "the finished turn")
        assert book.launched == launched  # nothing ran ahead while speculation was off
        await pilot.press("ctrl+q")

    approvals = [e for e in app.shown if isinstance(e, Approval)]
    assert [(a.command, a.decision, a.by, a.message) for a in approvals] == [
        ("edit_file calc/ops.py", "allow", "user", ""), ("sleep 30 && touch LATER", "allow", "user", ""),
        ("touch NOTES", "deny", "user", "no notes please")]
    denied = [e for e in app.shown if isinstance(e, ToolResult) and e.name == "bash"][-1]
    assert denied.is_error and "no notes please" in denied.output
    assert not (options.repo / "NOTES").exists()
    assert (options.repo / "calc" / "ops.py").read_text().count("return a + b") == 1
    saved = read_trajectory(isolated / "session.jsonl")
    assert [e.type for e in saved if e.type in ("user_message", "turn_end", "session_end", "spec_toggle")] == [
        "turn_end", "spec_toggle", "user_message", "turn_end", "session_end"]
    assert "llm_delta" not in {e.type for e in saved}  # streamed pieces are for the screen only


async def test_keys_typed_as_the_approval_opens_do_not_answer_it(isolated: Path) -> None:
    turns = [call("bash", "Let me touch it.", command="touch a1"), call("finish", "Done.", summary="touched")]
    options = session_options(isolated, turns, "--no-speculation")
    app = TaoApp(options, masked=True)
    app.approval_guard = 3600  # the guard never ends by itself here; `arm` ends it
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press(*TASK, "enter")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval of `touch a1`")
        await pilot.press(*"and a", "enter")  # the follow-up the user was typing as the modal opened
        await pilot.pause()
        assert isinstance(app.screen, ApprovalScreen) and "approval" not in event_types(app)
        assert not (options.repo / "a1").exists()
        app.screen.arm()
        await pilot.press("y")
        await until(pilot, lambda: "turn_end" in event_types(app), "the finished turn")
        await pilot.press("ctrl+q")
    [approval] = [e for e in app.shown if isinstance(e, Approval)]
    assert (approval.command, approval.decision, approval.by) == ("touch a1", "allow", "user")
    assert (options.repo / "a1").exists()


async def test_resume_reopens_the_last_session_with_its_conversation(isolated: Path) -> None:
    from tui.app import resolve_resume

    first = session_options(isolated, [TURNS[0], TURNS[-1]])
    state = isolated / "xdg_state_home" / "tao" / "trajectories"
    first = replace(first, trajectory=state / "first.jsonl")
    app = TaoApp(first, task=TASK, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: "turn_end" in event_types(app), "the first session's end")
        await pilot.press("ctrl+q")

    trajectory = resolve_resume("last", first.repo)
    assert trajectory == state / "first.jsonl"
    script = isolated / "more.json"
    script.write_text(json.dumps([call("list_files"), call("finish", summary="listed")]))
    again = replace(first, engine=replace(first.engine, replay=script))
    app = TaoApp(again, resume=trajectory, masked=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: "session_resume" in event_types(app), "the resumed session")
        assert [entry.summary.plain for entry in app.query(CallEntry)] == ["grep(pattern='def add')"]
        await pilot.press(*"list the files", "enter")
        await until(pilot, lambda: event_types(app).count("turn_end") == 2, "the follow-up's end")
        assert [entry.summary.plain for entry in app.query(CallEntry)] == ["grep(pattern='def add')",
                                                                           "list_files()"]
        await pilot.press("ctrl+q")
    saved = [e.type for e in read_trajectory(trajectory)]
    assert saved.count("session_start") == 1 and saved.count("session_resume") == 1
    assert saved[-1] == "session_end" and saved.index("session_resume") < saved.index("user_message")
