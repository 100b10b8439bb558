"""The text tool-call protocol: incremental parsing from a token stream, errors the model can act on."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
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
    parser, events = feed_all(["look <tool", "_call>{\"name\": \"grep\", \"arguments\": {\"pattern\": \"x\"}}</tool",
                               "_call>"])
    assert parser.text == "look "
    assert [c.name for c in parser.calls] == ["grep"]


def test_angle_brackets_in_text_are_kept() -> None:
    parser, _ = feed_all(["if a <b and c< d", " then <tool_ca", "ll? no"])
    assert parser.text == "if a <b and c< d then <tool_call? no"
    assert parser.calls == []


def test_interleaved_text_and_two_calls() -> None:
    text = ('one <tool_call>{"name":"a","arguments":{}}</tool_call> '
            'mid <tool_call>{"name":"b","arguments":{"x":1}}</tool_call> end')
    parser, _ = feed_all(char_chunks(text))
    assert [(c.call_id, c.name, c.arguments) for c in parser.calls] == [("call_0", "a", {}), ("call_1", "b", {"x": 1})]
    assert parser.text == "one  mid  end"


def test_malformed_json_becomes_an_error_for_the_model() -> None:
    parser, events = feed_all(['<tool_call>{"name": "grep", "arguments": {pattern: "x"}}</tool_call>'])
    assert parser.calls == []
    [error] = [e for e in events if isinstance(e, CallError)]
    assert "not valid JSON" in error.error and "<tool_call>" in error.error


def test_missing_name_and_bad_arguments_are_explained() -> None:
    _, events = feed_all(['<tool_call>{"arguments": {}}</tool_call>'
                          '<tool_call>{"name": "x", "arguments": [1]}</tool_call>'])
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
                           lambda inner: (st.lists(inner, max_size=3)
                                          | st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                           max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(prefix=st.text(max_size=40).filter(lambda s: "<tool_call>" not in s),
       name=st.text(min_size=1, max_size=15),
       arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_any_chunking_parses_the_same(prefix: str, name: str, arguments: dict, cuts: list[int]) -> None:
    body = json.dumps({"name": name, "arguments": arguments})
    assume(protocol.CLOSE not in body)  # the closing tag ends a call wherever it stands, inside a string too
    text = prefix + "<tool_call>" + body + "</tool_call>"
    points = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    parser, _ = feed_all(chunks)
    assert parser.text == prefix
    # A name with unprintable characters comes out escaped (it can name no tool); any other exactly as written.
    assert [(c.name, c.arguments) for c in parser.calls] == [(protocol.printable(name), arguments)]


# -- hostile answers: every one is a call or an error for the model, never an exception ---------------------


def only_error(text: str) -> str:
    parser, events = feed_all(char_chunks(text) if len(text) < 2000 else [text])
    assert parser.calls == []
    [error] = [e for e in events if isinstance(e, CallError)]
    return error.error


def test_unprintable_characters_in_a_name_are_escaped() -> None:
    parser, events = feed_all(
        char_chunks('<tool_call>{"name": "read\\u001b[2J\\u0000\\u202e", "arguments": {}}</tool_call>'))
    [name] = [e.name for e in events if isinstance(e, CallName)]
    assert name == parser.calls[0].name == "read\\x1b[2J\\x00\\u202e"
    assert "Invalid control character" in only_error('<tool_call>{"name": "read\x1bfile", "arguments": {}}</tool_call>')
    assert "surrogate" in only_error('<tool_call>{"name": "read\\ud800", "arguments": {}}</tool_call>')


def test_deep_nesting_is_refused_in_the_call_and_in_arguments_given_as_a_string() -> None:
    deep = "[" * 5000 + "]" * 5000
    assert "more than 64 levels deep" in only_error(
        '<tool_call>{"name": "grep", "arguments": {"p": ' + deep + "}}</tool_call>")
    inner = json.dumps({"pattern": json.loads("[" * 100 + "]" * 100)})
    assert "more than 64 levels deep" in only_error(
        '<tool_call>{"name": "grep", "arguments": ' + json.dumps(inner) + "}</tool_call>")
    flat = json.loads("[" * 60 + "]" * 60)
    parser, _ = feed_all(['<tool_call>{"name": "grep", "arguments": ' + json.dumps({"p": flat}) + "}</tool_call>"])
    assert parser.calls[0].arguments == {"p": flat}


def test_numbers_json_does_not_allow_are_refused_and_say_what_to_write() -> None:
    call = '<tool_call>{"name": "read_file", "arguments": {"start_line": %s}}</tool_call>'
    for number, said in (("NaN", "NaN"), ("-Infinity", "-Infinity"), ("1e999", "1e999"), ("9" * 5000, "5000 digits")):
        error = only_error(call % number)
        assert said in error and "Write" in error
    parser, _ = feed_all([call % ("9" * 300)])
    assert parser.calls[0].arguments == {"start_line": int("9" * 300)}


def test_a_lone_surrogate_is_refused_and_a_pair_is_kept() -> None:
    assert "surrogate" in only_error(
        '<tool_call>{"name": "read_file", "arguments": {"path": "a\\udc00.py"}}</tool_call>')
    parser, _ = feed_all(['<tool_call>{"name": "read_file", "arguments": {"path": "\\ud83d\\ude00.py"}}</tool_call>'])
    assert parser.calls[0].arguments == {"path": "\U0001f600.py"}


def test_a_huge_call_streamed_in_small_chunks_is_read_once() -> None:
    content = "x = 1\n" * 100_000
    text = "I will write it. " + CALL.replace('"arguments": {',
                                              '"arguments": {"content": ' + json.dumps(content) + ", ")
    parser = CallParser()
    events = [event for start in range(0, len(text), 3) for event in parser.feed(text[start:start + 3])]
    events += parser.finish()
    assert parser.calls[0].arguments["content"] == content
    partials = [e.partial for e in events if isinstance(e, CallArgs)]
    assert partials and len(partials[-1]) < protocol.HEAD_CHARS  # progress is read from the call's head only


def test_native_calls_of_any_shape_become_calls_or_errors() -> None:
    deep: dict = {}
    for _ in range(10_000):
        deep = {"a": deep}
    calls, errors = protocol.parse_native_calls([
        {"id": "ok", "function": {"name": "grep", "arguments": {"pattern": "x"}}},
        "read_file", None, {"id": 5, "function": "grep"}, {"function": {"name": 7}},
        {"id": "deep", "function": {"name": "grep", "arguments": deep}},
        {"id": "nan", "function": {"name": "grep", "arguments": '{"pattern": NaN}'}},
        {"id": "\ud800", "function": {"name": "gr\x1bep", "arguments": "{}"}},
    ])
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [("ok", "grep", {"pattern": "x"}),
                                                                  ("call_7", "gr\\x1bep", {})]
    assert [(e.index, e.call_id) for e in errors] == [(1, "call_1"), (2, "call_2"), (3, "call_3"), (4, "call_4"),
                                                       (5, "deep"), (6, "nan")]
    assert "levels deep" in errors[4].error and "NaN" in errors[5].error and errors[4].name == "grep"
    assert protocol.parse_native_calls({"not": "a list"})[1][0].error.startswith("The tool calls were not a list")
