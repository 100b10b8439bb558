"""What goes into the model's context: the project's AGENTS.md / CLAUDE.md, the context gauge, and compaction.

Sessions run on the replay engine (recorded answers, real tools, a real git repository). The replay engine is
given a context window (`max_model_len`), refusing a longer prompt with ContextTooLong as vLLM's check does.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from harness import protocol
from harness.context import MAX_INSTRUCTIONS_CHARS, STUB_MARK, project_instructions
from harness.engine.api import LLMRequest
from harness.engine.recorded import ForcedReplayEngine, Recording, ReplayEngine, Turn
from harness.events import ContextCompact, Event, LLMEnd, SessionEnd, TrajectoryWriter, comparable, read_trajectory
from harness.history import rebuild
from harness.log import HumanLog
from harness.session import Session
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tools import default_tools, tool_specs

NOTES = "".join(f"line {i}: what the calculator does and why\n" for i in range(60))


def turn(name: str, arguments: dict) -> Turn:
    return Turn(f"Next I call {name}.\n<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")


class Recorder(ReplayEngine):
    """The replay engine, keeping each request it was sent (the test is about what the model receives)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[LLMRequest] = []

    def stream(self, request: LLMRequest):
        self.requests.append(request)
        return super().stream(request)


def reading(times: int) -> Recording:
    return Recording([turn("read_file", {"path": "notes.txt"}) for _ in range(times)]
                     + [turn("finish", {"summary": "read"})])


async def run(repo: Path, engine: ReplayEngine, speculate: bool = False,
              trajectory: Path | None = None) -> tuple[SessionEnd, list[Event], Session]:
    events: list[Event] = []
    sinks = [events.append]
    writer = TrajectoryWriter(trajectory) if trajectory else None
    if writer:
        sinks.append(writer.write)
    session = Session("read the notes", engine, Workspace(repo), default_tools(), sinks=sinks,
                      analyzer=Analyzer(PatternModel()) if speculate else None)
    end = await session.run()
    if writer:
        writer.close()
    return end, events, session


# -- AGENTS.md and CLAUDE.md -------------------------------------------------------------------------------

async def test_agents_md_reaches_the_system_prompt_the_engine_receives(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / "AGENTS.md").write_text("Run the tests with `make check` before finishing.\n")
    (repo / "CLAUDE.md").write_text("Never touch calc/legacy.py.\n")
    engine = Recorder(Recording([turn("finish", {"summary": "ok"})]))
    await run(repo, engine)
    system = engine.requests[0].messages[0]["content"]
    assert "# Project instructions" in system
    assert "## AGENTS.md\nRun the tests with `make check` before finishing." in system
    assert system.index("## AGENTS.md") < system.index("## CLAUDE.md\nNever touch calc/legacy.py.")


async def test_without_instruction_files_the_system_prompt_is_unchanged(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    engine = Recorder(Recording([turn("finish", {"summary": "ok"})]))
    await run(repo, engine)
    expected = protocol.render_system_prompt(tool_specs(default_tools()), str(repo), False)
    assert engine.requests[0].messages[0]["content"] == expected


def test_long_instructions_are_cut_and_say_so(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * (MAX_INSTRUCTIONS_CHARS + 500))
    (tmp_path / "CLAUDE.md").write_text("never shown: the budget is spent\n")
    text = project_instructions(tmp_path)
    assert text is not None
    assert "[AGENTS.md truncated: 500 more characters not shown]" in text
    assert "[CLAUDE.md truncated: 33 more characters not shown]" in text
    assert len(text) < MAX_INSTRUCTIONS_CHARS + 400


def test_a_linked_claude_md_is_read_once_and_a_fifo_never_blocks(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.\n")
    (tmp_path / "CLAUDE.md").symlink_to("AGENTS.md")
    text = project_instructions(tmp_path)
    assert text is not None and text.count("Use tabs.") == 1 and "CLAUDE.md" not in text
    other = tmp_path / "other"
    other.mkdir()
    os.mkfifo(other / "AGENTS.md")
    (other / "CLAUDE.md").write_text("   \n")
    assert project_instructions(other) is None


# -- the context gauge and compaction ------------------------------------------------------------------------

async def test_llm_end_reports_the_window_only_when_the_engine_knows_it(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    _, unknown, _ = await run(repo, ReplayEngine(reading(1)))
    _, known, _ = await run(repo, ReplayEngine(reading(1), max_model_len=9000))
    assert {e.context_window for e in unknown if isinstance(e, LLMEnd)} == {None}
    assert {e.context_window for e in known if isinstance(e, LLMEnd)} == {9000}


async def test_a_session_near_its_window_compacts_and_goes_on(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / "notes.txt").write_text(NOTES)
    engine = Recorder(reading(8), max_model_len=3000)
    end, events, session = await run(repo, engine)
    assert end.status == "finished", end.reason
    compactions = [e for e in events if isinstance(e, ContextCompact)]
    assert compactions and all(e.reason == "auto" and e.freed > 0 for e in compactions)
    assert all(e.tokens_after == e.tokens_before - e.freed and e.context_window == 3000 for e in compactions)
    last = engine.requests[-1].messages
    assert last[0] == engine.requests[0].messages[0] and last[1]["content"] == "read the notes"
    assert sum(m["role"] == "assistant" for m in last) == 8  # every answer stays, word for word
    stubbed = [m for m in last if STUB_MARK in m["content"]]
    assert stubbed and all(m["content"].startswith('<tool_result name="read_file">') for m in stubbed)
    assert "60\tline 59: what the calculator" in last[-1]["content"]  # the newest observation is whole


async def test_the_headless_log_says_when_the_context_was_compacted(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / "notes.txt").write_text(NOTES)
    stream = io.StringIO()
    session = Session("read the notes", ReplayEngine(reading(4), max_model_len=3000), Workspace(repo),
                      default_tools(), sinks=[HumanLog(stream)])
    await session.run()
    assert "context compacted (auto): 1 older tool result stubbed, about " in stream.getvalue()


async def test_without_room_to_compact_the_error_stays(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    end, events, _ = await run(repo, ReplayEngine(reading(1), max_model_len=200))
    assert end.status == "error" and "context holds 200" in end.reason
    assert not any(isinstance(e, ContextCompact) for e in events)


async def test_compaction_is_the_same_with_speculation_on_and_off(tmp_path: Path) -> None:
    recording = reading(6)
    trajectories = []
    for speculate in (False, True):  # both runs at the same path, which the system prompt names
        repo = make_calc_repo(tmp_path / "work")
        (repo / "notes.txt").write_text(NOTES)
        _, events, _ = await run(repo, ReplayEngine(recording, max_model_len=3000), speculate)
        trajectories.append(events)
        (tmp_path / "work").rename(tmp_path / str(speculate))
    off, on = trajectories
    assert any(isinstance(e, ContextCompact) for e in off)
    assert any(e.type == "spec_promote" for e in on)
    assert comparable(on) == comparable(off)


async def test_a_resumed_session_rebuilds_the_compacted_conversation(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / "notes.txt").write_text(NOTES)
    trajectory = tmp_path / "run.jsonl"
    _, _, session = await run(repo, ReplayEngine(reading(6), max_model_len=3000), trajectory=trajectory)
    history = rebuild(read_trajectory(trajectory), native_tools=False)
    # the session's own conversation, but for the finish call's answer, which got no result
    assert history.messages == session.messages[1:]


async def test_compact_on_request_stubs_all_but_the_recent_turns(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / "notes.txt").write_text(NOTES)
    _, _, session = await run(repo, ReplayEngine(reading(5)))  # no window: never compacts by itself
    assert not any(STUB_MARK in m["content"] for m in session.messages)
    event = session.compact()
    assert event is not None and event.reason == "user" and event.context_window is None
    assert event.messages == [3, 5, 7]  # results of answers 1-3; answers 4, 5 and the finish keep theirs
    assert session.compact() is None  # nothing left to shorten


@pytest.mark.engine
async def test_the_real_engine_near_its_window_compacts_and_goes_on(tmp_path: Path, vllm_engine) -> None:
    """Forced answers through the embedded model, its window narrowed to 4,096 tokens (a full 8,192 costs minutes of
    prefill on a CPU): four reads of a long file would overflow it; the session compacts by the real tokenizer's
    counts, so every real prompt fits."""

    class Narrow(ForcedReplayEngine):
        max_model_len = 4096  # what the session sees as the window; the engine itself holds 8,192

    repo = make_calc_repo(tmp_path)
    (repo / "notes.txt").write_text("".join(f"line {i}: what the calculator does and why\n" for i in range(100)))
    engine = Narrow(vllm_engine, reading(4))
    end, events, _ = await run(repo, engine)
    assert end.status == "finished", end.reason
    answers = [e for e in events if isinstance(e, LLMEnd)]
    assert {e.context_window for e in answers} == {4096}
    assert max(e.prompt_tokens for e in answers) < 4096  # every real prompt fitted the window it was given
    assert any(isinstance(e, ContextCompact) and e.reason == "auto" for e in events)
