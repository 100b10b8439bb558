"""How tool calls travel in text, for models without native tool calling.

The system prompt lists the tools as JSON; the model answers with reasoning text and a call
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. `CallParser` reads the answer as it streams
and reports each stage as early as it can (name known, arguments streaming, call complete), so
speculation can start before the call is finished. Native OpenAI `tool_calls` parse to the same
`ParsedCall`. Anything malformed becomes a `CallError` whose message tells the model how to fix it.
"""

from __future__ import annotations

import json
import re
import reprlib
from dataclasses import dataclass
from typing import Any

from harness.calldecode import (MAX_DEPTH, MAX_NAME, CallRefused, check_name, check_plain, json_type, load, printable,
                                shown)

__all__ = ["CLOSE", "MAX_DEPTH", "OPEN", "CallArgs", "CallDone", "CallError", "CallName", "CallParser", "CallStart",
           "ParseEvent", "ParsedCall", "Text", "in_order", "parse_native_calls", "printable",
           "recordable_calls", "render_system_prompt", "result_message", "valid_unicode"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
HEAD_CHARS = 4096  # characters of a call read for its name and first arguments while it streams
_NAME = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS = re.compile(r'"arguments"\s*:\s*')
_SURROGATE = re.compile("[\ud800-\udfff]")

SYSTEM_TEMPLATE = """\
You are Tao, a careful coding agent. You work in the repository at {root}.
Solve the user's task by calling tools. Read a result before a call that depends on it; calls that do not
depend on each other (reading several files, searching) go together in one reply, which is faster.

# Tools
Each tool is described by a JSON object: its name, what it does, and a JSON schema of its arguments.
{tools}

# How to call a tool
First think in a few short sentences about what to do next. Then write the call:
<tool_call>{{"name": "list_files", "arguments": {{"path": "."}}}}</tool_call>
The text inside the tags must be a JSON object with "name" and "arguments". For independent calls, write
one <tool_call> block after another. Stop after the last call; each result comes back in a <tool_result>
message, in the order of the calls.
When the task is done, call finish with a short summary of what you changed and why."""

FORMAT_REMINDER = (
    "Your reply held no tool call. Reply with one call written as "
    '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>, '
    "or call finish with a summary when the task is done."
)


@dataclass(frozen=True)
class ParsedCall:
    """A complete, well-formed call: tool name and arguments object."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Text:
    """Reasoning text outside any call."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """A call's opening tag arrived: the reasoning before it is complete."""

    index: int


@dataclass(frozen=True)
class CallName:
    """A call's name is known while its arguments are still streaming."""

    index: int
    name: str


@dataclass(frozen=True)
class CallArgs:
    """The raw argument text streamed so far (a prefix of a JSON object)."""

    index: int
    name: str
    partial: str


@dataclass(frozen=True)
class CallDone:
    """A call is complete and well-formed."""

    index: int
    call: ParsedCall


@dataclass(frozen=True)
class CallError:
    """A call that cannot be run; `error` is written for the model. A native call's error keeps its id."""

    index: int
    error: str
    raw: str
    call_id: str = ""  # a native call's id, which its error answers
    name: str = ""  # the tool it named, when it named one (escaped)


ParseEvent = Text | CallStart | CallName | CallArgs | CallDone | CallError


class CallParser:
    """Incremental parser of one streamed answer. Feed chunks; call `finish()` at end of stream.

    Its work is linear in the answer's length however it is cut: progress events (`CallName`, `CallArgs`)
    read only the first `HEAD_CHARS` of a call, which is all speculation needs of it.
    """

    def __init__(self, id_prefix: str = "call") -> None:
        """A parser for one answer; call ids are `<id_prefix>_<n>`."""
        self.id_prefix = id_prefix
        self.calls: list[ParsedCall] = []
        self.errors: list[CallError] = []
        self._text: list[str] = []  # all reasoning text outside calls, in pieces
        self._buffer = ""  # text not yet reported (may hold a partial tag)
        self._in_call = False
        self._body: list[str] = []  # the open call's text so far, in pieces
        self._head = ""  # its first HEAD_CHARS characters, where the name and arguments begin
        self._index = 0
        self._name: str | None = None
        self._name_end = 0
        self._named = False  # the name was looked for to the end (found, or never will be)
        self._args_at: int | None = None
        self._args_reported = 0

    @property
    def text(self) -> str:
        """All reasoning text outside calls so far."""
        if len(self._text) > 1:
            self._text = ["".join(self._text)]
        return self._text[0] if self._text else ""

    def feed(self, chunk: str) -> list[ParseEvent]:
        """Take the next chunk of the answer; returns what became known with it."""
        self._buffer += chunk
        events: list[ParseEvent] = []
        while True:
            if not self._in_call:
                start = self._buffer.find(OPEN)
                if start < 0:
                    keep = _partial_tag_suffix(self._buffer, OPEN)
                    self._emit_text(self._buffer[: len(self._buffer) - keep], events)
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                    return events
                self._emit_text(self._buffer[:start], events)
                self._buffer = self._buffer[start + len(OPEN) :]
                self._open_call()
                events.append(CallStart(self._index))
                continue
            end = self._buffer.find(CLOSE)
            if end < 0:
                keep = _partial_tag_suffix(self._buffer, CLOSE)
                self._add_body(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep :]
                self._report_progress(events)
                return events
            self._add_body(self._buffer[:end])
            self._buffer = self._buffer[end + len(CLOSE) :]
            self._report_progress(events)
            events.append(self._complete("".join(self._body)))
            self._in_call = False

    def finish(self) -> list[ParseEvent]:
        """End of stream: flush text; an unclosed call is accepted if its JSON is complete."""
        events: list[ParseEvent] = []
        if self._in_call:
            self._add_body(self._buffer)
            self._buffer = ""
            self._report_progress(events)
            events.append(self._complete("".join(self._body), closed=False))
            self._in_call = False
        elif self._buffer:
            self._emit_text(self._buffer, events)
            self._buffer = ""
        return events

    def _emit_text(self, text: str, events: list[ParseEvent]) -> None:
        """Report reasoning text outside calls."""
        if text:
            self._text.append(text)
            events.append(Text(text))

    def _open_call(self) -> None:
        """An opening tag arrived: start reading a call."""
        self._in_call, self._body, self._head = True, [], ""
        self._name, self._name_end, self._named, self._args_at, self._args_reported = None, 0, False, None, 0

    def _add_body(self, text: str) -> None:
        """More of the open call's text; its head is kept for progress reports."""
        if text:
            self._body.append(text)
            if len(self._head) < HEAD_CHARS:
                self._head += text[: HEAD_CHARS - len(self._head)]

    def _report_progress(self, events: list[ParseEvent]) -> None:
        """Report the call's name once it is known, then the arguments' text as it grows (within the head)."""
        head = self._head
        if not self._named:
            match = _NAME.match(head)
            if match is None:
                self._named = len(head) >= HEAD_CHARS  # a name not found by then is read with the whole call
                return
            self._named = True
            try:
                self._name = check_name(json.loads(f'"{match.group(1)}"'))
            except (ValueError, RecursionError):
                return  # an unreadable name: the complete call will say what is wrong with it
            self._name_end = match.end()
            events.append(CallName(self._index, self._name))
        if self._name is None:
            return
        if self._args_at is None:
            args = _ARGS.search(head, self._name_end)
            if args is None or args.end() == len(head):  # more blanks may follow the colon
                return
            self._args_at = args.end()
        if len(head) - self._args_at > self._args_reported:
            partial = head[self._args_at :]
            self._args_reported = len(partial)
            events.append(CallArgs(self._index, self._name, partial))

    def _complete(self, body: str, closed: bool = True) -> ParseEvent:
        """A call's whole text: a parsed call, or an error for the model."""
        index = self._index
        self._index += 1
        call_id = f"{self.id_prefix}_{index}"
        try:
            name, arguments = _decode_call(body)
        except CallRefused as exc:
            hint = "" if closed else f" The call was not closed with {CLOSE}."
            error = CallError(index, f"{exc}{hint}", body)
            self.errors.append(error)
            return error
        call = ParsedCall(call_id, name, arguments)
        self.calls.append(call)
        return CallDone(index, call)


def _partial_tag_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (a tag split by a chunk)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def _decode_call(body: str) -> tuple[str, dict[str, Any]]:
    """Name and arguments from a call's JSON text; CallRefused says what is wrong, for the model."""
    obj = load(body, "The tool call")
    if not isinstance(obj, dict):
        raise CallRefused('The tool call needs a "name" string, as in {"name": "<tool>", "arguments": {...}}.')
    return check_name(obj.get("name")), _decode_arguments(obj.get("arguments", {}), checked=True)


def _decode_arguments(arguments: Any, checked: bool = False) -> dict[str, Any]:
    """Arguments as an object of plain data; a JSON string holding an object (OpenAI style) is accepted too.

    `checked`: the value was decoded from JSON here already, and so is plain data."""
    if isinstance(arguments, str):
        arguments = load(arguments, "The call's arguments") if arguments.strip() else {}
    elif not checked:
        check_plain(arguments, "The call's arguments")
    if not isinstance(arguments, dict):
        raise CallRefused(f'"arguments" must be a JSON object of named arguments, not {json_type(arguments)}. '
                          'Write them as {"path": "src/app.py"}, for example.')
    return arguments


def parse_native_calls(tool_calls: Any) -> tuple[list[ParsedCall], list[CallError]]:
    """OpenAI-style `tool_calls` ({"id", "function": {"name", "arguments"}}) to parsed calls and errors.

    Anything else the engine hands over (not a list, items that are not calls) becomes errors too.
    """
    if not isinstance(tool_calls, list):
        return [], [CallError(0, "The tool calls were not a list of calls. Write each call as "
                                 '{"name": "<tool>", "arguments": {...}}.', _raw(tool_calls))]
    calls: list[ParsedCall] = []
    errors: list[CallError] = []
    for index, item in enumerate(tool_calls):
        call_id = _native_id(item, index)
        function = item.get("function") if isinstance(item, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        try:
            if not isinstance(function, dict):
                raise CallRefused('The tool call has no function: write {"name": "<tool>", "arguments": {...}}.')
            if not isinstance(name, str) or not name:
                raise CallRefused('The tool call has no function name: write {"name": "<tool>", "arguments": {...}}.')
            calls.append(ParsedCall(call_id, check_name(name), _decode_arguments(function.get("arguments", {}))))
        except CallRefused as exc:
            named = shown(name, MAX_NAME) if isinstance(name, str) else ""
            errors.append(CallError(index, str(exc), _raw(item), call_id, named))
    return calls, errors


def recordable_calls(tool_calls: Any) -> list[dict[str, Any]]:
    """Native calls as events, trajectories and the next prompt carry them: as the engine gave them when they are
    plain JSON data (the usual case), else each call that is not as a bounded text of what it was."""
    try:
        check_plain(tool_calls, "The tool calls")
        if isinstance(tool_calls, list) and all(isinstance(item, dict) for item in tool_calls):
            return tool_calls
    except CallRefused:
        pass
    items = tool_calls if isinstance(tool_calls, list) else [tool_calls]
    return [item if isinstance(item, dict) and _is_plain(item) else
            {"id": _native_id(item, index), "type": "function", "function": {"name": "", "arguments": _raw(item)}}
            for index, item in enumerate(items)]


def _is_plain(value: Any) -> bool:
    """Whether a value is plain JSON data (see harness.calldecode)."""
    try:
        check_plain(value, "The tool call")
    except CallRefused:
        return False
    return True


def _native_id(item: Any, index: int) -> str:
    """A native call's id as the engine gave it, or `call_<index>` when it gave none usable."""
    given = item.get("id") if isinstance(item, dict) else None
    if isinstance(given, str) and given and given.isprintable():
        return given
    return f"call_{index}"


def _raw(value: Any) -> str:
    """A bounded text of what the engine handed over, for the record (never raises, whatever it is)."""
    return reprlib.repr(value)


def in_order(calls: list[ParsedCall], errors: list[CallError], native: bool
             ) -> tuple[list[tuple[ParsedCall, str | None]], list[str]]:
    """An answer's calls in the model's order, each malformed native call as a call (its id, its name) with its
    error, since every native id needs a result; and the errors left to tell (a text call has no id)."""
    answerable = {e.index: e for e in errors if e.call_id and native}
    told = [e.error for e in errors if not (e.call_id and native)]
    good = iter(calls)
    ordered: list[tuple[ParsedCall, str | None]] = []
    for index in range(len(calls) + len(answerable)):
        error = answerable.get(index)
        ordered.append((ParsedCall(error.call_id, error.name, {}), error.error) if error is not None
                       else (next(good), None))
    return ordered, told


def valid_unicode(text: str) -> str:
    """The model's text with any half of a UTF-16 surrogate pair replaced by U+FFFD: what cannot be encoded as
    UTF-8 must not reach the prompt, the terminal or the trajectory."""
    return text if text.isprintable() else _SURROGATE.sub("\ufffd", text)


def render_system_prompt(tool_specs: list[dict[str, Any]], root: str, native_tools: bool = False,
                         instructions: str | None = None) -> str:
    """The system prompt; for text-protocol models it carries the tool specs and the call format. The project's
    `instructions` (harness.context.project_instructions) follow it; without them the prompt is unchanged."""
    if native_tools:
        prompt = (f"You are Tao, a careful coding agent. You work in the repository at {root}.\n"
                  "Solve the user's task with the tools. Read a result before a call that depends on it; make "
                  "calls that do not depend on each other (reading several files, searching) together in one "
                  "turn, which is faster. When the task is done, call finish with a short summary of what you "
                  "changed and why.")
    else:
        lines = "\n".join(json.dumps(spec["function"], ensure_ascii=False) for spec in tool_specs)
        prompt = SYSTEM_TEMPLATE.format(root=root, tools=lines)
    return f"{prompt}\n\n{instructions}" if instructions else prompt


def result_message(call: ParsedCall, output: str, native_tools: bool) -> dict[str, Any]:
    """The message that carries a tool's observation back to the model."""
    if native_tools:
        return {"role": "tool", "tool_call_id": call.call_id, "content": output}
    return {"role": "user", "content": f'<tool_result name="{call.name}">\n{output}\n</tool_result>'}
