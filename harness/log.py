"""The human-readable log of a session's events, written to stderr in headless runs."""

from __future__ import annotations

import json
import re
import sys
from typing import TextIO

from harness.events import (Attached, ContextCompact, Event, FormatError, LLMEnd, SessionEnd, SessionStart,
                            SpecObsSettle, SpecPromote, SpecSummary, ToolCall, ToolResult)

PREVIEW_LINES = 6
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: str) -> str:
    """`text` with control characters (ESC, CR, NUL, ...) written as escapes, so what a model or a tool
    printed cannot move the cursor, recolour or clear the user's terminal; newlines and tabs stay."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def counted(n: int, noun: str) -> str:
    """`n` and the noun in the right number ("1 step", "6 steps"), so messages read as people write."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def argument(value: object, width: int = 60) -> str:
    """A call argument as the log shows it, in the call's Python spelling: numbers, booleans and None bare, text
    quoted and cut to `width` characters, lists and objects as compact JSON."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:width])
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= width else text[:width] + "..."


def _preview(text: str, lines: int = PREVIEW_LINES) -> str:
    parts = text.splitlines()
    shown = "\n".join("    " + line[:160] for line in parts[:lines])
    more = f"\n    ... ({len(parts) - lines} more lines)" if len(parts) > lines else ""
    return shown + more


class HumanLog:
    """An event sink that prints one short block per event."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream

    def __call__(self, event: Event) -> None:
        line = self.format(event)
        if line is not None:
            print(visible(line), file=self.stream, flush=True)

    def format(self, event: Event) -> str | None:
        stamp = f"[{event.t:7.2f}s]"
        match event:
            case SessionStart():
                return (f"{stamp} task: {event.task.splitlines()[0][:120]}\n"
                        f"{' ' * 10} repo {event.repo}, engine {event.engine}")
            case LLMEnd():
                thought = event.text.split("<tool_call>")[0].strip()
                tokens = f"{event.output_tokens} tokens" + (f", {event.ttft:.2f}s to first" if event.ttft else "")
                answered = f"{stamp} step {event.step}: model answered ({tokens})"
                return answered + (f"\n{_preview(thought, 3)}" if thought else "")
            case ToolCall():
                args = ", ".join(f"{k}={argument(v)}" for k, v in event.arguments.items())
                return f"{stamp} -> {event.name}({args})"
            case ToolResult():
                status = ("error" if event.is_error else "ok" if event.exit_code in (None, 0)
                          else f"exit {event.exit_code}")
                return f"{stamp} <- {event.name} {status}\n{_preview(event.output)}"
            case FormatError():
                return f"{stamp} step {event.step}: no usable tool call: {event.error[:200]}"
            case Attached(files=files, notes=notes) if files or notes:
                told = "".join(f"\n{' ' * 10} {note}" for note in notes)
                return f"{stamp} attached {', '.join(files) or 'no file'}{told}"
            case ContextCompact():
                stubbed = counted(len(event.messages), "older tool result")
                return (f"{stamp} context compacted ({event.reason}): {stubbed} "
                        f"stubbed, about {event.tokens_before:,} -> {event.tokens_after:,} prompt tokens")
            case SpecPromote():
                how = "served from a speculated read" if event.sliced else "from speculation"
                return f"{stamp} <- result {how} ({event.saved:.2f}s hidden)"
            case SpecObsSettle(matched=True):
                warmed = f" ({event.warmed_tokens} prompt tokens warmed)" if event.warmed_tokens else ""
                return f"{stamp} <- the output matched the guess: the next step starts from a warm cache{warmed}"
            case SpecSummary():
                return (f"{stamp} speculation: {event.launched} launched, {event.promoted} promoted, "
                        f"{event.discarded} discarded{f' ({event.tainted} tainted)' if event.tainted else ''}, "
                        f"{event.repeats} repeats answered; "
                        f"{event.saved:.2f}s saved, {event.wasted:.2f} CPU-s wasted")
            case SessionEnd():
                summary = f"\n    summary: {event.summary}" if event.summary else ""
                return f"{stamp} session {event.status} after {counted(event.steps, 'step')}: {event.reason}{summary}"
        return None
