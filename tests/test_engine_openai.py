"""The openai engine's request bodies and streamed native tool calls (pure functions; the engine against a
real vLLM server is covered in test_engine_serve.py)."""

from __future__ import annotations

import httpx

from harness.engine.api import LLMRequest
from harness.engine.openai_http import OpenAIEngine, _merge_calls, normalize_base_url
from tools import default_tools, tool_specs

SPECS = tool_specs(default_tools())


def engine(**kwargs) -> OpenAIEngine:
    options = dict(native_tools=False, is_vllm=True, constrained=True, temperature=0.0, reasoning_tokens=32,
                   name="t")
    return OpenAIEngine(httpx.AsyncClient(), "http://x/v1", "m", **{**options, **kwargs})


def test_base_urls_are_normalised() -> None:
    assert normalize_base_url("localhost:8000") == "http://localhost:8000/v1"
    assert normalize_base_url("http://h:1/v1/") == "http://h:1/v1"


def test_text_protocol_on_vllm_sends_the_call_constraint_and_priority() -> None:
    body = engine().body(LLMRequest("r1", [{"role": "user", "content": "hi"}], SPECS, priority=2))
    assert "tools" not in body and body["stop"] == ["</tool_call>"] and body["include_stop_str_in_output"]
    assert 'read_file' in body["structured_outputs"]["structural_tag"]
    assert body["priority"] == 2 and body["stream_options"] == {"include_usage": True}


def test_native_tools_send_tool_specs_and_no_constraint() -> None:
    body = engine(native_tools=True).body(LLMRequest("r1", [{"role": "user", "content": "hi"}], SPECS))
    assert body["tools"] == SPECS and "structured_outputs" not in body and "priority" not in body
    plain = engine(is_vllm=False).body(LLMRequest("r1", [], SPECS, priority=3))
    assert "structured_outputs" not in plain and "priority" not in plain and "request_id" not in plain


def test_streamed_native_call_fragments_are_merged() -> None:
    calls: dict = {}
    _merge_calls(calls, [{"index": 0, "id": "call_a", "function": {"name": "read_", "arguments": ""}}])
    _merge_calls(calls, [{"index": 0, "function": {"name": "file", "arguments": '{"path": '}}])
    _merge_calls(calls, [{"index": 0, "function": {"arguments": '"a.py"}'}},
                         {"index": 1, "id": "call_b", "function": {"name": "finish", "arguments": "{}"}}])
    assert calls[0] == {"id": "call_a", "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    assert calls[1]["function"]["name"] == "finish"
