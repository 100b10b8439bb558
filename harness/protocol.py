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
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_NAME = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS = re.compile(r'"arguments"\s*:\s*')

SYSTEM_TEMPLATE = """\
You are Tao, a careful coding agent. You work in the repository at {root}.
Solve the user's task by calling tools, one call per reply, and read each result before the next call.

# Tools
Each tool is described by a JSON object: its name, what it does, and a JSON schema of its arguments.
{tools}

# How to call a tool
First think in a few short sentences about what to do next. Then write exactly one call:
<tool_call>{{"name": "list_files", "arguments": {{"path": "."}}}}</tool_call>
The text inside the tags must be a JSON object with "name" and "arguments". Stop after the call; the
result comes back in a <tool_result> message.
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
    """A call that cannot be run; `error` is written for the model."""

    index: int
    error: str
    raw: str


ParseEvent = Text | CallStart | CallName | CallArgs | CallDone | CallError


@dataclass
class CallParser:
    """Incremental parser of one streamed answer. Feed chunks; call `finish()` at end of stream."""

    id_prefix: str = "call"
    _buffer: str = ""  # text not yet reported (may hold a partial tag)
    _in_call: bool = False
    _body: str = ""
    _index: int = 0
    _name: str | None = None
    _args_reported: int = 0
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[CallError] = field(default_factory=list)
    text: str = ""  # all reasoning text outside calls

    def feed(self, chunk: str) -> list[ParseEvent]:
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
                self._in_call, self._body, self._name, self._args_reported = True, "", None, 0
                events.append(CallStart(self._index))
                continue
            end = self._buffer.find(CLOSE)
            if end < 0:
                keep = _partial_tag_suffix(self._buffer, CLOSE)
                self._body += self._buffer[: len(self._buffer) - keep]
                self._buffer = self._buffer[len(self._buffer) - keep :]
                self._report_progress(events)
                return events
            self._body += self._buffer[:end]
            self._buffer = self._buffer[end + len(CLOSE) :]
            self._report_progress(events)
            events.append(self._complete(self._body))
            self._in_call = False

    def finish(self) -> list[ParseEvent]:
        """End of stream: flush text; an unclosed call is accepted if its JSON is complete."""
        events: list[ParseEvent] = []
        if self._in_call:
            self._body += self._buffer
            self._buffer = ""
            self._report_progress(events)
            events.append(self._complete(self._body, closed=False))
            self._in_call = False
        elif self._buffer:
            self._emit_text(self._buffer, events)
            self._buffer = ""
        return events

    def _emit_text(self, text: str, events: list[ParseEvent]) -> None:
        if text:
            self.text += text
            events.append(Text(text))

    def _report_progress(self, events: list[ParseEvent]) -> None:
        if self._name is None:
            match = _NAME.match(self._body)
            if not match:
                return
            self._name = json.loads(f'"{match.group(1)}"')
            events.append(CallName(self._index, self._name))
        args = _ARGS.search(self._body)
        if args and len(self._body) - args.end() > self._args_reported:
            partial = self._body[args.end() :]
            self._args_reported = len(partial)
            events.append(CallArgs(self._index, self._name, partial))

    def _complete(self, body: str, closed: bool = True) -> ParseEvent:
        index = self._index
        self._index += 1
        call_id = f"{self.id_prefix}_{index}"
        try:
            name, arguments = _decode_call(body)
        except ValueError as exc:
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
    """Name and arguments from a call's JSON text; ValueError says what is wrong, for the model."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"The tool call is not valid JSON ({exc.msg} at character {exc.pos}). Write "
            '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> with double-quoted keys.'
        ) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise ValueError('The tool call needs a "name" string, as in {"name": "<tool>", "arguments": {...}}.')
    return obj["name"], _decode_arguments(obj.get("arguments", {}))


def _decode_arguments(arguments: Any) -> dict[str, Any]:
    """Arguments as an object; a JSON string holding an object (OpenAI style) is accepted too."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"The call's arguments are not valid JSON ({exc.msg}).") from None
    if not isinstance(arguments, dict):
        raise ValueError(f'"arguments" must be a JSON object of named arguments, not {type(arguments).__name__}.')
    return arguments


def parse_native_calls(tool_calls: list[dict[str, Any]]) -> tuple[list[ParsedCall], list[CallError]]:
    """OpenAI-style `tool_calls` ({"id", "function": {"name", "arguments"}}) to parsed calls and errors."""
    calls: list[ParsedCall] = []
    errors: list[CallError] = []
    for index, item in enumerate(tool_calls):
        function = item.get("function") or {}
        name = function.get("name")
        try:
            if not isinstance(name, str) or not name:
                raise ValueError("The tool call has no function name.")
            calls.append(ParsedCall(str(item.get("id") or f"call_{index}"), name,
                                    _decode_arguments(function.get("arguments", {}))))
        except ValueError as exc:
            errors.append(CallError(index, str(exc), json.dumps(item)))
    return calls, errors


def render_system_prompt(tool_specs: list[dict[str, Any]], root: str, native_tools: bool = False) -> str:
    """The system prompt; for text-protocol models it carries the tool specs and the call format."""
    if native_tools:
        return (f"You are Tao, a careful coding agent. You work in the repository at {root}.\n"
                "Solve the user's task with the tools, one call at a time. When the task is done, "
                "call finish with a short summary of what you changed and why.")
    lines = "\n".join(json.dumps(spec["function"], ensure_ascii=False) for spec in tool_specs)
    return SYSTEM_TEMPLATE.format(root=root, tools=lines)


def result_message(call: ParsedCall, output: str, native_tools: bool) -> dict[str, Any]:
    """The message that carries a tool's observation back to the model."""
    if native_tools:
        return {"role": "tool", "tool_call_id": call.call_id, "content": output}
    return {"role": "user", "content": f'<tool_result name="{call.name}">\n{output}\n</tool_result>'}
