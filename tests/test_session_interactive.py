"""An interactive session: follow-up messages, interrupts that keep the session, resuming a saved one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness.approval import Answer, ApprovalPolicy
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.events import (Event, Interrupt, SessionEnd, SessionResume, ToolResult, TrajectoryWriter, TurnEnd,
                            UserMessage, read_trajectory)
from harness.session import Session
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tests.test_tui_support import call
from tools import default_tools

GREP = call("grep", "Looking.", pattern="def add")
FINISH = call("finish", "Done.", summary="done")


def interactive(repo: Path, turns: list[str], sinks: list, seconds_per_token: float = 0.0) -> Session:
    engine = ReplayEngine(Recording([Turn(text) for text in turns]), seconds_per_token)
    return Session("find add", engine, Workspace(repo), default_tools(), sinks=sinks, interactive=True)


async def until(events: list[Event], kind: str, count: int = 1) -> None:
    """Wait until `count` events of type `kind` were emitted."""
    for _ in range(1000):
        if sum(e.type == kind for e in events) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {count} {kind} events; got {[e.type for e in events]}")


async def test_follow_ups_go_on_in_the_same_conversation(tmp_path: Path) -> None:
    events: list[Event] = []
    session = interactive(make_calc_repo(tmp_path), [GREP, FINISH, call("list_files"), FINISH], [events.append])
    running = asyncio.create_task(session.run())
    await until(events, "turn_end")
    session.send("now list the files")
    await until(events, "turn_end", 2)
    session.stop()
    end = await running
    assert [e.type for e in events if e.type in ("turn_end", "user_message", "session_end")] == [
        "turn_end", "user_message", "turn_end", "session_end"]
    assert end.status == "finished" and end.steps == 4
    assert {"role": "user", "content": "now list the files"} in session.messages
    assert session.messages.index({"role": "user", "content": "now list the files"}) > 3


async def test_interrupting_the_model_keeps_the_session(tmp_path: Path) -> None:
    events: list[Event] = []
    long_answer = "Let me think about this for a long while. " * 200 + GREP
    session = interactive(make_calc_repo(tmp_path), [long_answer, GREP, FINISH], [events.append], 0.005)
    running = asyncio.create_task(session.run())
    await until(events, "llm_first_token")
    assert session.interrupt()
    await until(events, "turn_end")
    [interrupt] = [e for e in events if isinstance(e, Interrupt)]
    turn_end = next(e for e in events if isinstance(e, TurnEnd))
    assert interrupt.stage == "model" and turn_end.status == "interrupted"
    assert not session.interrupt()  # nothing runs while the session waits for the user
    session.send("go on")
    await until(events, "turn_end", 2)
    session.stop()
    end = await running
    assert end.status == "finished"
    assert [e.name for e in events if isinstance(e, ToolResult)] == ["grep"]


async def test_interrupting_a_tool_answers_the_open_call(tmp_path: Path) -> None:
    events: list[Event] = []
    session = interactive(make_calc_repo(tmp_path), [call("bash", command="sleep 30"), FINISH], [events.append])
    running = asyncio.create_task(session.run())
    await until(events, "tool_call")
    await asyncio.sleep(0.2)
    assert session.interrupt()
    await until(events, "turn_end")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error and "interrupted" in result.output
    assert next(e for e in events if isinstance(e, Interrupt)).stage == "tool"
    session.stop()
    assert (await running).status == "interrupted"


async def test_a_saved_session_resumes_where_it_stopped(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    path = tmp_path / "session.jsonl"
    writer = TrajectoryWriter(path)
    first = interactive(repo, [GREP, FINISH], [writer.write])
    running = asyncio.create_task(first.run())
    await asyncio.sleep(0)
    while not any(line for line in path.read_text().splitlines() if '"turn_end"' in line):
        await asyncio.sleep(0.01)
    first.stop()
    await running
    writer.close()
    saved = read_trajectory(path)

    events: list[Event] = []
    writer = TrajectoryWriter(path)
    second = interactive(repo, [call("list_files"), FINISH], [writer.write, events.append])
    second.restore(saved)
    assert second.messages[1:] == first.messages[1:] and second.steps == 2
    running = asyncio.create_task(second.run())
    await until(events, "session_resume")
    second.send("list the files too")
    await until(events, "turn_end")
    second.stop()
    end = await running
    writer.close()
    assert isinstance(events[0], SessionResume) and events[0].session_id == first.session_id
    assert end.steps == 4 and end.status == "finished"
    assert events[0].t >= saved[-1].t  # the clock goes on from the saved session
    whole = read_trajectory(path)
    assert [e.type for e in whole if isinstance(e, (SessionEnd, SessionResume, UserMessage))] == [
        "session_end", "session_resume", "user_message", "session_end"]


async def test_interrupting_an_unanswered_approval_refuses_nothing_and_runs_nothing(tmp_path: Path) -> None:
    asked = asyncio.Event()

    async def never_answered(command: str) -> Answer:
        asked.set()
        await asyncio.Event().wait()  # the user looks away; Ctrl+C comes instead
        raise AssertionError("unreachable")

    events: list[Event] = []
    repo = make_calc_repo(tmp_path)
    session = interactive(repo, [call("bash", command="touch NOTES"), FINISH], [events.append])
    session.approval = ApprovalPolicy().with_ask(never_answered)
    running = asyncio.create_task(session.run())
    await asyncio.wait_for(asked.wait(), 30)
    assert session.interrupt()
    await until(events, "turn_end")
    session.stop()
    await running
    assert not (repo / "NOTES").exists()
    assert not any(e.type == "approval" for e in events)  # nobody decided
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error and "interrupted" in result.output
