"""The stream fuzzer at a size that fits the suite: hostile answers never make the call parser raise."""

from __future__ import annotations

import asyncio
import json
import random

import httpx

from harness.bench import fuzz_streams
from harness.bench.stream_gen import StreamGen
from harness.engine.api import LLMRequest
from harness.engine.openai_http import OpenAIEngine
from harness.engine.recorded import load_recording
from harness.engine.vllm_local import plain_message
from harness.errors import EngineError, UsageError
from harness.speculation.prediction.extract import ReasoningFacts, path_mentions


def test_two_thousand_fuzzed_streams_crash_nothing() -> None:
    result = fuzz_streams.run(streams=2000, seed=21, native=500)
    assert result["crashes"] == 0 and result["violations"] == 0, fuzz_streams.report(result).text()
    # The run did reach what it is about: calls of every kind of damage, and the well-formed ones.
    assert result["calls"] > 1000 and result["errors"] > 500
    assert {"deep", "nan", "surrogate", "control", "huge_number", "well_formed"} <= set(result["by_mutation"])


def test_a_seed_and_a_case_number_reproduce_the_case() -> None:
    first = StreamGen(random.Random("7:text:3")).answer()
    again = StreamGen(random.Random("7:text:3")).answer()
    assert first.chunks == again.chunks and first.labels == again.labels


def test_the_benchmark_command_prints_json_and_fails_only_on_crashes(capsys) -> None:  # type: ignore[no-untyped-def]
    from harness.cli import main

    assert main(["bench", "fuzz-streams", "--streams", "60", "--seed", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["streams"] == 60 and result["crashes"] == 0 and "examples" in result


# -- what a server streams: anything it sends is an answer or an EngineError, never another exception --------

HOSTILE_EVENTS = [
    "[1]", '"text"', "5", "null", '{"choices": "x"}', '{"choices": [5]}', '{"choices": [{"delta": "x"}]}',
    '{"choices": [{"delta": {"content": 5}}]}', '{"choices": [{"delta": {"content": ["a"]}}]}',
    '{"choices": [{"delta": {"tool_calls": "x"}}]}', '{"choices": [{"delta": {"tool_calls": [5]}}]}',
    '{"choices": [{"delta": {"tool_calls": [{"index": [1], "function": {"name": "a"}}]}}]}',
    '{"choices": [{"delta": {"tool_calls": [{"index": 0, "id": 7, "function": {"name": 5, "arguments": []}}]}}]}',
    '{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": "x"}]}}]}',
    '{"choices": [{"finish_reason": 5, "delta": {}}]}', '{"usage": [1]}', '{"usage": {"prompt_tokens": "many"}}',
    '{"usage": {"completion_tokens": 1e999, "prompt_tokens_details": "x"}}', "[" * 100_000,
    '{"choices": [{"delta": {"content": "half \\ud800 a pair"}}]}', "{not json",
]


class SSEServer:
    """A real HTTP server on loopback that answers every chat completion with the stream it is given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        body = "".join(f"data: {line}\n\n" for line in self.lines).encode("utf-8", "surrogatepass")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()


async def test_any_server_stream_is_an_answer_or_an_engine_error() -> None:
    server = SSEServer()
    url = await server.start()
    engine = OpenAIEngine(httpx.AsyncClient(), url, "m", native_tools=True, is_vllm=False, constrained=False,
                          temperature=0.0, reasoning_tokens=0, name="hostile")
    good = '{"choices": [{"delta": {"content": "ok "}}]}'
    outcomes = []
    try:
        for index, hostile in enumerate(HOSTILE_EVENTS):
            server.lines = [good, hostile, good, "[DONE]"]
            try:
                chunks = [chunk async for chunk in engine.stream(LLMRequest(f"r{index}", []))]
            except EngineError as exc:
                outcomes.append(("error", str(exc)))
                continue
            for chunk in chunks:  # what the session reads of a chunk, each of the type it expects
                assert isinstance(chunk.text, str) and isinstance(chunk.tool_calls, (list, type(None)))
                if chunk.usage is not None:
                    assert all(isinstance(getattr(chunk.usage, f), int) for f in ("prompt_tokens", "output_tokens"))
            outcomes.append(("answer", "".join(chunk.text for chunk in chunks)))
    finally:
        await engine.close()
        server.server.close()
    assert all(kind == "answer" or "malformed" in said for kind, said in outcomes), outcomes


def test_a_replay_script_of_any_shape_is_a_recording_or_a_usage_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    scripts = ['{"turns": 5}', '{"turns": [5]}', '{"turns": [{"text": 5}]}', '{"turns": [{"tool_calls": "x"}]}',
               '[null]', '"text"', "[" * 100_000, '{"task": [], "turns": ["a"]}', b"\xff\xfe".decode("latin-1"),
               '{"turns": [{"text": "ok", "tool_calls": [{"function": {"name": "x"}}]}]}']
    loaded = 0
    for index, script in enumerate(scripts):
        path = tmp_path / f"s{index}.json"
        path.write_text(script, encoding="latin-1")
        try:
            recording = load_recording(path)
        except UsageError as exc:
            assert str(path) in str(exc)
            continue
        assert all(isinstance(t.text, str) and isinstance(t.tool_calls, (list, type(None))) for t in recording.turns)
        assert isinstance(recording.task, (str, type(None)))
        loaded += 1
    assert loaded == 1


def test_recorded_native_calls_of_any_shape_render_for_a_plain_chat_template() -> None:
    deep = "[" * 5000 + "]" * 5000
    for calls in ([5], ["x"], [{"function": "grep"}], [{"function": {"name": 5, "arguments": deep}}],
                  [{"function": {"name": "grep", "arguments": "{bad"}}], [{"function": {"arguments": [[[1]]]}}]):
        message = plain_message({"role": "assistant", "content": "thinking", "tool_calls": calls})
        assert message["role"] == "assistant" and message["content"].startswith("thinking\n<tool_call>")


def test_a_run_of_path_characters_names_no_file_and_the_paths_beside_it_are_found() -> None:
    # Such a run made the path patterns start anew after each slash: 20 kB took seconds on the event loop.
    run = "a/" * 20_000 + "x.py"
    text = f"I will read calc/ops.py, line 4, not {run} nor '{run}'.\n{run}:3: found"
    assert path_mentions(text, "/work/repo") == [("calc/ops.py", 4)]
    facts = ReasoningFacts.of(text, "/work/repo")
    assert facts.paths == [("calc/ops.py", 4)] and facts.text == text
