"""The text tool-call protocol: incremental parsing from a token stream, errors the model can act on."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import protocol
from harness.protocol import CallArgs, CallDone, CallError, CallName, CallParser, Text

CALL = '<tool_call>{"name": "read_file", "arguments": {"path": "src/app.py", "start_line": 3}}</tool_call>'


def feed_all(chunks: list[str]) -> tuple[CallParser, list]:
    parser = CallParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    events += parser.finish()
    return parser, events


def char_chunks(text: str) -> list[str]:
    return list(text)


def test_whole_answer_gives_text_then_call() -> None:
    parser, events = feed_all(["I will read it.\n" + CALL])
    assert parser.text == "I will read it.\n"
    assert parser.calls == [protocol.ParsedCall("call_0", "read_file", {"path": "src/app.py", "start_line": 3})]
    assert isinstance(events[0], Text) and isinstance(events[-1], CallDone)


def test_name_is_reported_before_arguments_finish() -> None:
    parser = CallParser()
    seen: list = []
    stream = "Thinking. " + CALL
    name_at = done_at = None
    for position, char in enumerate(stream):
        for event in parser.feed(char):
            seen.append(event)
            if isinstance(event, CallName) and name_at is None:
                name_at = position
            if isinstance(event, CallDone):
                done_at = position
    assert name_at is not None and done_at is not None
    assert name_at < stream.index('"arguments"') < done_at
    partials = [e.partial for e in seen if isinstance(e, CallArgs)]
    assert partials and partials[0] == "{" and partials[-1].startswith('{"path": "src/app.py"')


def test_tags_split_across_chunks_are_not_leaked_as_text() -> None:
    parser, events = feed_all(["look <tool", "_call>{\"name\": \"grep\", \"arguments\": {\"pattern\": \"x\"}}</tool", "_call>"])
    assert parser.text == "look "
    assert [c.name for c in parser.calls] == ["grep"]


def test_angle_brackets_in_text_are_kept() -> None:
    parser, _ = feed_all(["if a <b and c< d", " then <tool_ca", "ll? no"])
    assert parser.text == "if a <b and c< d then <tool_call? no"
    assert parser.calls == []


def test_interleaved_text_and_two_calls() -> None:
    text = 'one <tool_call>{"name":"a","arguments":{}}</tool_call> mid <tool_call>{"name":"b","arguments":{"x":1}}</tool_call> end'
    parser, _ = feed_all(char_chunks(text))
    assert [(c.call_id, c.name, c.arguments) for c in parser.calls] == [("call_0", "a", {}), ("call_1", "b", {"x": 1})]
    assert parser.text == "one  mid  end"


def test_malformed_json_becomes_an_error_for_the_model() -> None:
    parser, events = feed_all(['<tool_call>{"name": "grep", "arguments": {pattern: "x"}}</tool_call>'])
    assert parser.calls == []
    [error] = [e for e in events if isinstance(e, CallError)]
    assert "not valid JSON" in error.error and "<tool_call>" in error.error


def test_missing_name_and_bad_arguments_are_explained() -> None:
    _, events = feed_all(['<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "x", "arguments": [1]}</tool_call>'])
    errors = [e.error for e in events if isinstance(e, CallError)]
    assert '"name"' in errors[0]
    assert "JSON object" in errors[1]


def test_arguments_as_json_string_are_accepted() -> None:
    parser, _ = feed_all(['<tool_call>{"name": "grep", "arguments": "{\\"pattern\\": \\"a\\"}"}</tool_call>'])
    assert parser.calls[0].arguments == {"pattern": "a"}


def test_unclosed_call_is_accepted_when_json_is_complete() -> None:
    parser, _ = feed_all(['ok <tool_call>{"name": "list_files", "arguments": {}}'])
    assert [c.name for c in parser.calls] == ["list_files"]


def test_unclosed_incomplete_call_is_an_error_that_says_so() -> None:
    parser, events = feed_all(['<tool_call>{"name": "list_files", "argum'])
    assert parser.calls == []
    assert "not closed" in [e for e in events if isinstance(e, CallError)][0].error


def test_native_tool_calls() -> None:
    calls, errors = protocol.parse_native_calls([
        {"id": "abc", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "def"}'}},
        {"id": "bad", "type": "function", "function": {"name": "grep", "arguments": "{oops"}},
        {"id": "nameless", "function": {"arguments": "{}"}},
    ])
    assert calls == [protocol.ParsedCall("abc", "grep", {"pattern": "def"})]
    assert [e.index for e in errors] == [1, 2]


def test_system_prompt_lists_every_tool_and_the_call_format() -> None:
    specs = [{"type": "function", "function": {"name": n, "description": "d", "parameters": {"type": "object"}}}
             for n in ("read_file", "grep")]
    prompt = protocol.render_system_prompt(specs, "/repo")
    assert '"name": "read_file"' in prompt and '"name": "grep"' in prompt
    assert "<tool_call>" in prompt and "/repo" in prompt


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                           max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(prefix=st.text(max_size=40).filter(lambda s: "<tool_call>" not in s),
       name=st.text(min_size=1, max_size=15),
       arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_any_chunking_parses_the_same(prefix: str, name: str, arguments: dict, cuts: list[int]) -> None:
    body = json.dumps({"name": name, "arguments": arguments})
    text = prefix + "<tool_call>" + body + "</tool_call>"
    points = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    parser, _ = feed_all(chunks)
    assert parser.text == prefix
    assert [(c.name, c.arguments) for c in parser.calls] == [(name, arguments)]
