"""Observation speculation and KV pre-warming (AOSpec) on the real vLLM engine with the embedded model.

Sessions replay scripted turns through the real engine (each answer forced to the script's text), so
the prefix cache and the engine's timing are real while the conversation is fixed.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness import protocol
from harness.engine.api import Chunk, LLMRequest
from harness.engine.recorded import ForcedReplayEngine, Recording, Turn
from harness.events import Event, LLMEnd, SpecObsSettle, SpecObsWarm, comparable
from harness.session import Session, SessionConfig
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.running.observation import WARM_CHUNK_TOKENS, WARM_PRIORITY, ObservationSpeculator
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.running.records import Budget
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tools import default_tools, tool_specs

pytestmark = pytest.mark.engine

SPECS = tool_specs(default_tools())
# Action speculation off (no candidate is likely enough), observation speculation on: a promoted re-run
# would make warming moot, and which candidates the analyzer offers is not what these tests are about.
NO_ACTIONS = Budget(min_probability=2.0)
FIX = {"path": "calc/ops.py", "old": "    return a - b\n\n\ndef subtract", "new": "    return a + b\n\n\ndef subtract"}
BREAK = {"path": "calc/ops.py", "old": "    return a + b\n\n\ndef subtract",
         "new": "    return a * b\n\n\ndef subtract"}
TEST = ("run_tests", {"command": "python -m pytest -q -p no:asyncio -p no:hypothesispytest tests"})


class Recorder:
    """The real engine, with every request it was sent and every abort written down."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.native_tools, self.prefix_cache = inner, inner.name, False, True
        self.requests: list[LLMRequest] = []
        self.aborted: list[str] = []

    async def stream(self, request: LLMRequest) -> AsyncIterator[Chunk]:
        self.requests.append(request)
        async for chunk in self.inner.stream(request):
            yield chunk

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        await self.inner.abort(request_id)

    async def close(self) -> None:
        pass


def turn(name: str, arguments: dict) -> Turn:
    return Turn(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")


# A passing run, a change that cannot alter its output, the same run again: a guess that proves right.
PASSING_RERUN = [turn("edit_file", FIX), turn(*TEST), turn("write_file", {"path": "NOTES.md", "content": "checked\n"}),
                 turn(*TEST), turn("finish", {"summary": "looked"})]


async def run(engine, repo: Path, turns: list[Turn], *, warm: bool,
              provisional: bool = False) -> tuple[list[Event], Recorder]:
    recorder = Recorder(engine)
    events: list[Event] = []
    session = Session("fix calc.add", ForcedReplayEngine(recorder, Recording(turns)), Workspace(repo), default_tools(),
                      SessionConfig(max_steps=len(turns), max_tokens=64), [events.append],
                      analyzer=Analyzer(PatternModel()), budget=NO_ACTIONS, warm=warm, provisional=provisional)
    await session.run()
    return events, recorder


async def test_a_warmed_prefill_makes_the_next_request_hit_the_cache(vllm_engine) -> None:
    events: list[Event] = []
    start = time.monotonic()
    recorder = Recorder(vllm_engine)
    speculator = ObservationSpeculator(recorder, events.append, lambda: time.monotonic() - start)
    history = [{"role": "system", "content": protocol.render_system_prompt(SPECS, "/w")},
               {"role": "user", "content": "Run the tests."},
               {"role": "assistant", "content": '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>'}]
    output = "\n".join(f"tests/test_{i}.py::test_case_{i} PASSED [{i}%]" for i in range(40))
    messages = [*history, {"role": "user", "content": f'<tool_result name="run_tests">\n{output}\n</tool_result>'}]
    warm = speculator.start(1, "c1", output, messages, SPECS, 16)
    assert warm is not None and warm.request.priority == WARM_PRIORITY and warm.request.max_tokens == 1
    await warm.task
    assert warm.usage is not None and warm.usage.prompt_tokens > 400
    limits = [r.prompt_limit for r in recorder.requests]  # in chunks, so a real request waits behind one at most
    assert len(limits) >= 2 and limits == [WARM_CHUNK_TOKENS * (i + 1) for i in range(len(limits))]
    assert limits[-2] < warm.usage.prompt_tokens <= limits[-1]
    final = Chunk()
    async for chunk in vllm_engine.stream(LLMRequest("after-warm", messages, SPECS, 4)):
        final = chunk
    assert final.usage.cached_tokens >= warm.usage.prompt_tokens - vllm_engine.block_size  # all but a partial block
    assert isinstance(events[0], SpecObsWarm)


async def test_a_matching_guess_is_warmed_and_reused(vllm_engine, tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = PASSING_RERUN
    events, _ = await run(vllm_engine, repo, turns, warm=True)
    [settle] = [e for e in events if isinstance(e, SpecObsSettle)]
    assert settle.matched and settle.step == 4
    after = next(e for e in events if isinstance(e, LLMEnd) and e.step == 5)
    assert settle.warmed_tokens is None or after.cached_tokens >= settle.warmed_tokens - vllm_engine.block_size


async def test_a_wrong_guess_never_reaches_the_model(vllm_engine, tmp_path: Path) -> None:
    # The guess comes from a passing run; an edit then breaks the code, so the re-run prints a failure.
    turns = [turn("edit_file", FIX), turn(*TEST), turn("edit_file", BREAK), turn(*TEST),
             turn("finish", {"summary": "broke"})]
    off, _ = await run(vllm_engine, make_calc_repo(tmp_path / "work"), turns, warm=False)
    (tmp_path / "work").rename(tmp_path / "off")
    on, recorder = await run(vllm_engine, make_calc_repo(tmp_path / "work"), turns, warm=True, provisional=True)
    [settle] = [e for e in on if isinstance(e, SpecObsSettle)]
    assert not settle.matched
    assert comparable(on) == comparable(off)
    guess = next(e.output for e in on if e.type == "tool_result" and e.step == 2)
    real = [r for r in recorder.requests if r.priority != WARM_PRIORITY]
    assert all(guess not in json.dumps(r.messages[-1]) for r in real[4:])  # after the re-run: only the real output
    provisional = [r.request_id for r in recorder.requests if r.priority == WARM_PRIORITY]
    assert provisional  # a provisional step ran on the guess...
    assert len(real) == len(turns)  # ...and was thrown away: the step after the re-run was asked anew
    # (aborted if it was still running; on an idle machine it may have finished before the tool did)


async def test_a_provisional_step_on_the_right_guess_is_kept(vllm_engine, tmp_path: Path) -> None:
    turns = PASSING_RERUN
    off, _ = await run(vllm_engine, make_calc_repo(tmp_path / "work"), turns, warm=False)
    (tmp_path / "work").rename(tmp_path / "off")
    on, recorder = await run(vllm_engine, make_calc_repo(tmp_path / "work"), turns, warm=True, provisional=True)
    assert comparable(on) == comparable(off)
    assert [e.matched for e in on if isinstance(e, SpecObsSettle)] == [True]
    # Step 5 was answered by the provisional request: no ordinary request was sent for it.
    assert len([r for r in recorder.requests if r.priority != WARM_PRIORITY]) == 4
    assert not recorder.aborted
