"""A model turn of several calls through the whole loop: replayed answers, real tools, real subprocesses, a real
git repository. Pure calls run at once, calls that write run alone in the model's order, results come back in
the order the model wrote the calls, and the trajectory holds every call so that a saved session resumes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult

from harness.approval import Answer, ApprovalPolicy
from harness.engine.recorded import ReplayEngine, Recording, Turn
from harness.events import (Event, LLMEnd, SpecLaunch, SpecPromote, ToolCall, ToolResult, TrajectoryWriter,
                            read_trajectory)
from harness.protocol import ParsedCall
from harness.session import Session
from harness.speculation.prediction.state import SessionState
from harness.together import groups
from sandbox import Workspace, WorkspaceView
from tests.helpers import make_calc_repo
from tests.test_speculation_scheduler import ScriptedAnalyzer
from tools import default_tools
from tools.base import Effect, Observation, Tool
from tui.widgets.conversation.pane import CallEntry, ConversationPane
from tui.widgets.status.bar import StatusBar

FINISH = '<tool_call>{"name": "finish", "arguments": {"summary": "done"}}</tool_call>'
WAIT = ('touch "$1"; i=0; while [ ! -e "$2" ]; do i=$((i+1)); [ "$i" -gt 3000 ] && exit 1; sleep 0.01; done; '
        'echo met')


class Rendezvous:
    """A pure tool made for these tests: its run makes one file and waits (at most 30 s) for another one. Two
    calls that wait on each other's files both meet only if they run at the same time; run one after the other,
    the first gives up and says so."""

    name = "rendezvous"
    description = "Make a file and wait for another."
    parameters = {"type": "object", "properties": {"mine": {"type": "string"}, "theirs": {"type": "string"}},
                  "required": ["mine", "theirs"]}
    effect = Effect.PURE

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        """`met` when the other file appeared, else an error after 30 s."""
        process = await asyncio.create_subprocess_exec(
            "sh", "-c", WAIT, "sh", str(self.folder / args["mine"]), str(self.folder / args["theirs"]),
            stdout=asyncio.subprocess.PIPE)
        try:
            out, _ = await process.communicate()
        except asyncio.CancelledError:
            process.kill()  # stopped with its turn: leave no waiting shell behind
            await process.wait()
            raise
        met = process.returncode == 0
        return Observation(out.decode() if met else f"{args['mine']} waited alone", is_error=not met)


def text_call(name: str, **arguments: Any) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def native(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def session(repo: Path, turns: list[Turn], events: list[Event], tools: list[Tool] | None = None,
            **options: Any) -> Session:
    return Session("look around", ReplayEngine(Recording(turns)), Workspace(repo), tools or default_tools(),
                   sinks=[events.append], **options)


def of(events: list[Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def where(events: list[Event], kind: type, call_id: str) -> int:
    return next(i for i, e in enumerate(events) if isinstance(e, kind) and e.call_id == call_id)


async def test_pure_calls_written_as_two_tool_call_blocks_run_at_the_same_time(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (meet := tmp_path / "meet").mkdir()
    answer = ("Both at once.\n" + text_call("rendezvous", mine="a", theirs="b")
              + text_call("rendezvous", mine="b", theirs="a"))
    events: list[Event] = []
    run = session(repo, [Turn(answer), Turn(FINISH)], events, [*default_tools(), Rendezvous(meet)])
    end = await run.run()
    assert end.status == "finished"
    results = of(events, ToolResult)
    assert [(r.call_id, r.output) for r in results] == [("call_1_0", "met\n"), ("call_1_1", "met\n")]
    # The results follow the answer in the order the model wrote its calls, each in its own message.
    assert [m["content"] for m in run.messages[-3:-1]] == [
        '<tool_result name="rendezvous">\nmet\n\n</tool_result>'] * 2


async def test_native_calls_read_together_then_write_one_by_one_each_approved_in_order(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    asked: list[str] = []

    async def ask(command: str) -> Answer:
        asked.append(command)
        return Answer("once" if len(asked) == 1 else "deny")

    calls = [native("c1", "read_file", path="calc/ops.py"), native("c2", "list_files", path="."),
             native("c3", "write_file", path="new.txt", content="hello\n"), native("c4", "read_file", path="new.txt"),
             native("c5", "write_file", path="other.txt", content="x\n")]
    events: list[Event] = []
    run = session(repo, [Turn("", calls), Turn("", [native("c6", "finish", summary="done")])], events,
                  approval=ApprovalPolicy(mode="ask", ask=ask))
    end = await run.run()
    assert end.status == "finished"
    results = {r.call_id: r for r in of(events, ToolResult)}
    assert list(results) == ["c1", "c2", "c3", "c4", "c5"]  # the model's order
    assert "new.txt" not in results["c2"].output  # listed before the write the model wrote after it
    assert "hello" in results["c4"].output  # read after the write it was written after
    assert results["c5"].is_error and not (repo / "other.txt").exists()
    assert asked == ["write_file new.txt", "write_file other.txt"]  # each mutating call asked, in order
    # The two reads started before either ended; the write started after both had ended.
    assert where(events, ToolCall, "c2") < where(events, ToolResult, "c1")
    assert where(events, ToolCall, "c3") > max(where(events, ToolResult, "c1"), where(events, ToolResult, "c2"))
    assert [r.workspace_version for r in results.values()] == [0, 0, 1, 1, 1]
    assert [m["tool_call_id"] for m in run.messages if m["role"] == "tool"] == ["c1", "c2", "c3", "c4", "c5"]


async def test_a_saved_session_with_a_turn_of_several_calls_resumes_with_the_same_conversation(
        tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    path = tmp_path / "run.jsonl"
    writer = TrajectoryWriter(path)
    calls = [native("c1", "read_file", path="calc/ops.py"), native("c2", "grep", pattern="def "),
             native("c3", "write_file", path="new.txt", content="hello\n")]
    first = session(repo, [Turn("Three.", calls), Turn("", [native("c4", "finish", summary="done")])], [],
                    approval=None)
    first.sinks.append(writer.write)
    await first.run()
    writer.close()
    saved = read_trajectory(path)
    [answer, _] = of(saved, LLMEnd)
    assert answer.tool_calls == calls
    assert [e.call_id for e in of(saved, ToolCall)] == ["c1", "c2", "c3", "c4"]
    assert [e.call_id for e in of(saved, ToolResult)] == ["c1", "c2", "c3"]
    second = session(repo, [Turn("", [native("c5", "finish", summary="again")])], [])
    second.restore(saved)
    assert second.messages[1:] == first.messages[1:] and second.steps == 2


async def test_each_call_of_a_turn_is_served_by_its_own_speculation(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    reads = [("read_file", {"path": "calc/ops.py"}), ("read_file", {"path": "tests/test_ops.py"})]
    answer = "Both files.\n" + "".join(text_call(name, **arguments) for name, arguments in reads)
    events: list[Event] = []
    run = session(repo, [Turn(answer), Turn(FINISH)], events, analyzer=ScriptedAnalyzer(*reads))
    end = await run.run()
    assert end.status == "finished"
    assert sorted(p.call_id for p in of(events, SpecPromote)) == ["call_1_0", "call_1_1"]
    plain: list[Event] = []
    await session(repo, [Turn(answer), Turn(FINISH)], plain).run()
    assert [r.output for r in of(events, ToolResult)] == [r.output for r in of(plain, ToolResult)]


async def test_an_interrupt_keeps_the_result_of_a_call_that_ended_beside_one_still_running(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (meet := tmp_path / "meet").mkdir()
    answer = text_call("read_file", path="calc/ops.py") + text_call("rendezvous", mine="a", theirs="never")
    events: list[Event] = []
    run = session(repo, [Turn(answer), Turn(FINISH)], events, [*default_tools(), Rendezvous(meet)],
                  interactive=True)
    running = asyncio.create_task(run.run())
    for _ in range(3000):  # the read has ended and the rendezvous waits (a hang fails here, not forever)
        if "call_1_0" in run._ran and (meet / "a").exists():
            break
        await asyncio.sleep(0.01)
    assert run.interrupt()
    while not any(e.type == "turn_end" for e in events):
        await asyncio.sleep(0.01)
    run.stop()
    await running
    read, waiting = of(events, ToolResult)
    assert read.call_id == "call_1_0" and "def add" in read.output and not read.is_error
    assert waiting.call_id == "call_1_1" and waiting.output == "[interrupted by the user]"


def test_consecutive_pure_calls_form_a_group_and_every_other_call_stands_alone() -> None:
    effects = {"read_file": Effect.PURE, "grep": Effect.PURE, "finish": Effect.PURE, "edit_file": Effect.MUTATING,
               "run_tests": Effect.SANDBOXED}
    names = ["read_file", "grep", "edit_file", "read_file", "run_tests", "grep", "read_file", "teleport", "finish"]
    entries: list[tuple[ParsedCall, str | None]] = [(ParsedCall(f"c{i}", n, {}), None) for i, n in enumerate(names)]
    entries.insert(1, (ParsedCall("bad", "", {}), "not JSON"))  # a malformed call only needs its answer
    cut = groups(entries, lambda name: effects.get(name, Effect.UNKNOWN))
    assert [[call.name or "bad" for call, _ in group] for group in cut] == [
        ["read_file", "bad", "grep"], ["edit_file"], ["read_file"], ["run_tests"], ["grep", "read_file"],
        ["teleport"], ["finish"]]


class TurnApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ConversationPane()
        yield StatusBar(masked=True)


async def test_the_tui_shows_every_call_of_a_turn_and_what_still_runs() -> None:
    events = [ToolCall(0.1, 1, "c1", "read_file", {"path": "a.py"}, "pure"),
              ToolCall(0.1, 1, "c2", "grep", {"pattern": "def"}, "pure"),
              ToolResult(0.3, 1, "c1", "read_file", "1 | x = 1"),
              ToolResult(0.3, 1, "c2", "grep", "a.py:1: def", is_error=True)]
    app = TurnApp()
    async with app.run_test(size=(100, 30)) as pilot:
        pane, bar = app.query_one(ConversationPane), app.query_one(StatusBar)
        shown = []
        for event in events:
            pane.apply(event)
            bar.apply(event, 0.0)
            shown.append(bar.gauges.activity)
        await pilot.pause()
        assert shown == ["running read_file", "running 2 calls (read_file, grep)", "running grep", "working"]
        first, second = pane.query_one("#call-c1", CallEntry), pane.query_one("#call-c2", CallEntry)
        assert str(first.title).startswith("✔") and str(second.title).startswith("✘")


def test_the_analyzer_gives_each_result_of_a_group_to_its_own_call() -> None:
    state = SessionState()
    state.observe(ToolCall(0.0, 1, "c1", "read_file", {"path": "a.py"}, "pure"))
    state.observe(ToolCall(0.0, 1, "c2", "read_file", {"path": "b.py"}, "pure"))
    state.observe(ToolResult(0.1, 1, "c1", "read_file", "1 | x = 1"))
    state.observe(ToolResult(0.1, 1, "c2", "read_file", "Error: no such file", is_error=True))
    assert [(step.call_id, step.ok) for step in state.steps] == [("c1", True), ("c2", False)]


async def test_calls_written_out_in_full_start_before_the_answer_ends_and_serve_the_turn(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    reads = [("read_file", {"path": "calc/ops.py"}), ("grep", {"pattern": "def add"}), ("list_files", {})]
    answer = "Three at once.\n" + "\n".join(text_call(name, **arguments) for name, arguments in reads)
    events: list[Event] = []
    slow = ReplayEngine(Recording([Turn(answer), Turn(FINISH)]), seconds_per_token=0.002)  # the answer streams
    run = Session("look around", slow, Workspace(repo), default_tools(), sinks=[events.append],
                  analyzer=ScriptedAnalyzer())  # it predicts nothing: only the written calls start early
    assert (await run.run()).status == "finished"
    launches = of(events, SpecLaunch)
    assert [(s.name, s.arguments) for s in launches] == [(name, arguments) for name, arguments in reads]
    assert all(s.reason.startswith("streamed") for s in launches)
    answered = next(e for e in events if isinstance(e, LLMEnd))
    assert events.index(launches[-1]) < events.index(answered)  # all started while the answer still streamed
    assert sorted(p.call_id for p in of(events, SpecPromote)) == ["call_1_0", "call_1_1", "call_1_2"]
    plain: list[Event] = []
    await session(repo, [Turn(answer), Turn(FINISH)], plain).run()
    assert [r.output for r in of(events, ToolResult)] == [r.output for r in of(plain, ToolResult)]


async def test_a_lone_call_is_not_started_early_and_a_read_after_an_edit_sees_the_edit(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    edit = text_call("edit_file", path="calc/ops.py", old='sum of a and b."""\n    return a - b',
                     new='sum of a and b."""\n    return a + b')
    read = text_call("read_file", path="calc/ops.py", start_line=4, end_line=7)
    turns = [Turn(text_call("list_files")), Turn(read + edit + read), Turn(FINISH)]
    events: list[Event] = []
    assert (await session(repo, turns, events, analyzer=ScriptedAnalyzer()).run()).status == "finished"
    # the lone list_files ends its answer: nothing to overlap, so nothing starts early for it
    assert [s.step for s in of(events, SpecLaunch)] == [2]  # the first read, once the edit began; the second
    # read is the same call, already running at the older version: it runs for real after the edit, as serially
    first, edited, second = [r for r in of(events, ToolResult) if r.step == 2]
    assert "a - b" in first.output and not edited.is_error and "a + b" in second.output
    plain: list[Event] = []
    await session(make_calc_repo(tmp_path / "plain"), turns, plain).run()
    assert [r.output for r in of(events, ToolResult)] == [r.output for r in of(plain, ToolResult)]
