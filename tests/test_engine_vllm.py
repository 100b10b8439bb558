"""The real in-process vLLM engine (CPU build) with the embedded model: sessions, prefix cache, abort,
constrained decoding and context limits. One engine serves every test (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from harness import protocol
from harness.engine.api import Chunk, LLMRequest, Usage
from harness.errors import ContextTooLong
from harness.events import LLMEnd, SessionEnd, SessionStart, ToolCall, TrajectoryWriter, read_trajectory
from harness.session import Session, SessionConfig
from sandbox import Workspace
from tests.helpers import EXAMPLES, make_calc_repo
from tools import default_tools, tool_specs
from tools.schema import validate_args

pytestmark = pytest.mark.engine

SPECS = tool_specs(default_tools())
SYSTEM = protocol.render_system_prompt(SPECS, "/work/calc")


async def collect(engine, request: LLMRequest, **kwargs) -> tuple[str, Chunk]:
    """The whole text of one answer and its final chunk."""
    text, last = "", Chunk()
    async for chunk in engine.stream(request, **kwargs):
        text += chunk.text
        last = chunk
    return text, last


def rid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def stable_parent():
    """A folder whose path is the same in every run. The system prompt names the workspace's path, and the
    small model's greedy answer depends on it: under pytest's numbered temporary folders one path in a few
    made it run the call's string past the token budget, so the test passed or failed by its folder."""
    parent = Path(tempfile.gettempdir()) / "tao-engine-e2e"
    shutil.rmtree(parent, ignore_errors=True)
    parent.mkdir()
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


async def test_session_makes_a_parseable_tool_call_end_to_end(greedy, stable_parent: Path) -> None:
    vllm_engine = greedy
    repo = make_calc_repo(stable_parent)
    trajectory = stable_parent / "run.jsonl"
    writer = TrajectoryWriter(trajectory)
    task = (EXAMPLES / "calc" / "ISSUE.md").read_text()
    session = Session(task, vllm_engine, Workspace(repo), default_tools(),
                      SessionConfig(max_steps=2, max_tokens=192), [writer.write])
    end = await session.run()
    writer.close()
    events = read_trajectory(trajectory)
    assert isinstance(events[0], SessionStart) and events[0].engine.startswith("vllm:")
    assert isinstance(events[-1], SessionEnd) and events[-1] == end
    assert end.status in ("finished", "limit"), end.reason
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls, "the constrained model made no tool call"
    assert all(call.name in {spec["function"]["name"] for spec in SPECS} for call in calls)
    answers = [e for e in events if isinstance(e, LLMEnd)]
    assert answers[0].prompt_tokens > 0 and answers[0].output_tokens > 0 and answers[0].ttft is not None
    assert protocol.OPEN in answers[0].text


async def test_shared_long_prefix_reports_cached_prompt_tokens(vllm_engine) -> None:
    manual = "\n".join(f"Rule {i}: keep function {i} pure and documented." for i in range(120))
    prefix = [{"role": "system", "content": f"Project {uuid.uuid4().hex}.\n{manual}"}]
    first = await collect(vllm_engine,
                          LLMRequest(rid(), prefix + [{"role": "user", "content": "Rule 3?"}], max_tokens=2))
    second = await collect(vllm_engine,
                           LLMRequest(rid(), prefix + [{"role": "user", "content": "Rule 7?"}], max_tokens=2))
    cold, warm = first[1].usage, second[1].usage
    assert cold is not None and warm is not None
    assert cold.prompt_tokens > 1000 and cold.cached_tokens < 64
    assert warm.cached_tokens >= cold.prompt_tokens // 2  # whole cache blocks of the shared prefix
    assert warm.cached_tokens < warm.prompt_tokens


async def test_aborted_request_stops_in_the_engine(vllm_engine) -> None:
    request = LLMRequest(rid(), [{"role": "user", "content": "Tell a very long story."}], max_tokens=4000)
    chunks: list[Chunk] = []
    async for chunk in vllm_engine.stream(request, ignore_eos=True):
        chunks.append(chunk)
        if len(chunks) == 5:
            await vllm_engine.abort(request.request_id)
    final = chunks[-1]
    assert final.finish_reason == "abort"
    # the abort, not the budget, ended it (how many tokens the engine made before the abort reached it is a
    # matter of time: a busy machine lets it run ahead of this reader)
    assert final.usage is not None and final.usage.output_tokens < request.max_tokens
    await asyncio.sleep(0.2)
    assert vllm_engine._llm.get_num_unfinished_requests() == 0


async def test_a_streaming_request_shows_in_the_engine_load(vllm_engine) -> None:
    """The scheduler's own counts (for the TUI's status bar): a request in the batch, KV blocks in use."""
    request = LLMRequest(rid(), [{"role": "user", "content": "Tell a long story."}], max_tokens=4000)
    seen: list[tuple[int, float]] = []
    async for _ in vllm_engine.stream(request, ignore_eos=True):
        load = vllm_engine.load()
        seen.append((load.running, load.kv_usage))
        if len(seen) == 8:
            await vllm_engine.abort(request.request_id)
    assert any(running >= 1 and kv > 0 for running, kv in seen)


async def test_abandoned_stream_is_aborted(vllm_engine) -> None:
    request = LLMRequest(rid(), [{"role": "user", "content": "Count to a thousand."}], max_tokens=4000)
    stream = vllm_engine.stream(request, ignore_eos=True)
    async for _ in stream:
        break
    await stream.aclose()
    await asyncio.sleep(0.2)
    assert vllm_engine._llm.get_num_unfinished_requests() == 0


async def test_constrained_decoding_yields_only_valid_calls(greedy) -> None:
    # Greedy: sampled, all four answers could run a string argument past the budget (no call to check) and fail
    # the test by chance; every answer that finishes is checked either way.
    vllm_engine = greedy
    tasks = ["Fix the failing test in calc.", "Say hello.", "Find where subtract is defined.",
             "Write a poem about the sea."]
    requests = [LLMRequest(rid(), [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}],
                           SPECS, max_tokens=320) for task in tasks]
    answers = await asyncio.gather(*(collect(vllm_engine, r) for r in requests))
    tools = {tool.name: tool for tool in default_tools()}
    finished = [(text, last) for text, last in answers if last.finish_reason == "stop"]
    assert finished, "no constrained answer finished within its token budget"
    for text, _ in finished:
        parser = protocol.CallParser()
        parser.feed(text)
        parser.finish()
        assert not parser.errors, text
        [call] = parser.calls
        assert text.rstrip().endswith(protocol.CLOSE)
        assert call.name in tools, text
        validate_args(call.name, tools[call.name].parameters, call.arguments)  # raises ToolError if invalid


async def test_prompt_over_the_context_raises_context_too_long(vllm_engine) -> None:
    huge = "word " * (vllm_engine.max_model_len + 100)
    with pytest.raises(ContextTooLong, match="too many"):
        await collect(vllm_engine, LLMRequest(rid(), [{"role": "user", "content": huge}], max_tokens=8))


async def test_output_budget_is_trimmed_to_the_context(vllm_engine) -> None:
    request = LLMRequest(rid(), [{"role": "user", "content": "Hi"}], max_tokens=10)
    ids = vllm_engine.render(request)
    params = vllm_engine.sampling_params(request, vllm_engine.check_fits(vllm_engine.max_model_len - 3))
    assert params.max_tokens == 3 and len(ids) < 50
    usage = (await collect(vllm_engine, request))[1].usage
    assert isinstance(usage, Usage) and 0 < usage.output_tokens <= 10


async def test_session_over_the_context_stops_with_the_reason(vllm_engine, tmp_path: Path) -> None:
    task = "Fix add. " + "Context: the quick brown fox. " * 1500
    session = Session(task, vllm_engine, Workspace(make_calc_repo(tmp_path)), default_tools(),
                      SessionConfig(max_steps=2))
    end = await session.run()
    assert end.status == "error" and "context" in end.reason and end.steps == 1


FORCED = ['I will run the tests again, now that `add` adds.\n'
          '<tool_call>{"name": "run_tests", "arguments": '
          '{"command": "python -m pytest -q tests/test_ops.py"}}</tool_call>',
          'Ünïcødé “quotes”,\ttabs and  two spaces.\n'
          '<tool_call>{"name": "finish", "arguments": {"summary": "done"}}</tool_call>']


@pytest.mark.parametrize("text", FORCED)
async def test_a_forced_answer_takes_its_own_tokens_even_beside_other_requests(vllm_engine, text: str) -> None:
    # A regex of the text let the model spell it in finer pieces (2.3 times the tokens over the recorded
    # sessions) and pick other pieces when the batch changed; forced token ids leave it one spelling.
    natural = vllm_engine.tokenizer.encode(text, add_special_tokens=False)
    alone_text, alone = await collect(vllm_engine,
                                      LLMRequest(rid(), [{"role": "user", "content": "Go."}], 400, force=text))
    story = LLMRequest(rid(), [{"role": "user", "content": "Tell a very long story."}], max_tokens=2000)
    other = asyncio.create_task(collect(vllm_engine, story, ignore_eos=True))
    await asyncio.sleep(0.5)  # the other request is decoding when the forced one joins the batch
    shared_text, shared = await collect(vllm_engine,
                                        LLMRequest(rid(), [{"role": "user", "content": "Go."}], 400, force=text))
    await vllm_engine.abort(story.request_id)
    await other
    for answer, last in ((alone_text, alone), (shared_text, shared)):
        assert answer == text
        assert last.usage.output_tokens == len(natural) + 1  # and the end of the turn
        assert last.finish_reason == "stop"


async def test_the_kv_cache_capacity_agrees_with_its_configured_size(vllm_engine, monkeypatch) -> None:
    # `tao bench cosched --engine embedded` paces by this capacity: it doubles with bf16 and follows
    # VLLM_CPU_KVCACHE_SPACE, so no built-in profile can stand for it.
    from harness.bench.calibrate import kv_tokens

    counted = kv_tokens(vllm_engine)
    assert counted > 0 and counted % vllm_engine.block_size == 0
    monkeypatch.setattr(vllm_engine._llm.vllm_config.cache_config, "num_gpu_blocks", None)
    estimated = kv_tokens(vllm_engine)  # from the cache's size in bytes and one token's K and V
    assert abs(estimated - counted) <= vllm_engine.block_size


async def test_calibration_can_time_forced_decoding_as_the_replay_forces_answers(vllm_engine) -> None:
    # `tao bench calibrate --forced`: the step model priced on decoding that follows a text token by token.
    from harness.bench.calibrate import cache, decode_point, forced_text, own_prefixes

    texts = [forced_text(vllm_engine, 24, i) for i in range(2)]
    assert texts[0] != texts[1] and all(len(vllm_engine.tokenizer.encode(t)) >= 24 for t in texts)
    made, last = await collect(vllm_engine, LLMRequest(rid(), [{"role": "user", "content": "Go."}], 24, force=texts[1]))
    assert made == texts[1] and last.finish_reason == "stop"
    prefixes = [await cache(vllm_engine, prefix) for prefix in own_prefixes(vllm_engine, 2, 128)]
    point = await decode_point(vllm_engine, prefixes, 24, forced=True)
    assert point["forced"] and point["batch"] == 2 and point["step_s"] > 0


async def test_a_regex_still_forces_the_characters_where_token_ids_cannot(vllm_engine) -> None:
    # The fallback for a text the tokenizer does not give back exactly: the characters, in whatever tokens.
    text, last = await collect(vllm_engine,
                               LLMRequest(rid(), [{"role": "user", "content": "Go."}], 400, force=FORCED[0]),
                               force_regex=True)
    assert text == FORCED[0] and last.finish_reason == "stop"


async def test_commands_do_not_inherit_the_libraries_vllm_preloads_for_itself(vllm_engine, tmp_path: Path) -> None:
    """vLLM's CPU platform puts torch's libgomp and its tcmalloc in this process's LD_PRELOAD for its own
    engine process; the user's tests and commands must run as they would in the user's shell."""
    result = await Workspace(tmp_path).run(["sh", "-c", 'echo "preload=${LD_PRELOAD-}"'], timeout=60)
    assert result.exit_code == 0, result.text
    assert "libgomp" not in result.text and "tcmalloc" not in result.text, result.text


def children(pid: int) -> dict[int, str]:
    """The processes whose parent is `pid`, by their command name."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            found[int(stat.parent.name)] = name
    return found


async def test_the_engine_core_is_forked_and_its_model_worker_bound_to_its_cores(vllm_engine) -> None:
    """The engine core is a copy of this process, so it does not import vLLM a second time; the model worker is
    a new interpreter, which takes the OpenMP thread binding vLLM's CPU platform gives it (a forked worker would
    keep every core of this process and, under load, decode several times slower)."""
    [core] = [process for process in multiprocessing.active_children() if process.name.startswith("EngineCore")]
    assert core._start_method == "fork"
    [worker] = [pid for pid, name in children(core.pid).items() if name.startswith("VLLM::Worker")]
    ours = os.sched_getaffinity(0)
    if len(ours) > 1:  # vLLM keeps a core for the engine core's scheduling
        assert os.sched_getaffinity(worker) < ours
