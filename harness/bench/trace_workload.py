"""Other agents' recorded trajectories as a workload for `tao bench cosched`.

    sessions, books = trace_workload(Path("../shared/traces/mini-swe-agent-..."), holdout=0.3)

The examples/sessions workload is short (about 2,700 tokens of context a step), so it never fills a
GPU-class KV cache below ~150 sessions. Real SWE-bench trajectories carry 13k tokens of context a step
on average and 40 steps, which is where PASTE's pacing is meant to pay. Each imported trajectory
(harness.traces) becomes a recording and a book:

- a turn is the recorded visible answer with its command block replaced by Tao's `<tool_call>`; a shell
  command that amounts to a structured Tao tool (`cat f` is read_file, `grep -rn` is grep, `pytest` is
  run_tests) is called as that tool, as Tao's own agent would; anything else stays `bash`;
- the book answers each call with the recorded observation after the trace's measured duration, or
  the modelled latency of its kind (harness.speculation.prediction.latency) where the trace has none.

Not modelled: hidden reasoning tokens (Gemini's thinking; only the visible answer is decoded), and
how Tao's tools would render an observation (the recorded shell output stands for it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.bench.predict import held_out
from harness.bench.recordings import LiveSession
from harness.bench.simtools import Book, RecordedCall
from harness.engine.recorded import Recording, Turn
from harness.errors import UsageError
from harness.events import LLMEnd, SessionStart, ToolCall, ToolResult
from harness.calls.canonical import canonical
from harness.speculation.prediction.latency import modelled_latency
from harness.traces import Imported, ImportReport, load_sessions
from tools import default_tools
from tools.base import Effect

STRUCTURED = ("read_file", "grep", "list_files", "run_tests")  # Tao tools a shell command may become
_LAST_BLOCK = re.compile(r"```[A-Za-z]*\n.*?```\s*$", re.DOTALL)


def trace_workload(src: Path, holdout: float | None = None) -> tuple[list[LiveSession], list[Book]]:
    """The trajectories under `src` (only the held-out split when `holdout` is given) as sessions and books."""
    if not src.exists():
        raise UsageError(f"--traces {src}: no such file or directory")
    report = ImportReport()
    sessions, books = [], []
    for imported in load_sessions(src, report=report):
        if holdout is not None and not held_out(imported.session_id, holdout):
            continue
        converted = convert(imported)
        if converted is not None:
            sessions.append(converted[0])
            books.append(converted[1])
    if not sessions:
        raise UsageError(f"--traces {src}: no trajectory with a finished tool-using session found "
                         f"({report.sessions} sessions read, {len(report.skipped)} records skipped)")
    return sessions, books


def convert(imported: Imported) -> tuple[LiveSession, Book] | None:
    """One trajectory as a recorded session and its book; None when it has no answered call."""
    effects = {tool.name: tool.effect for tool in default_tools()}
    start = next((e for e in imported.events if isinstance(e, SessionStart)), None)
    results = {e.call_id: e for e in imported.events if isinstance(e, ToolResult)}
    turns: list[Turn] = []
    calls: list[RecordedCall] = []
    text, epoch = "", 0
    for event in imported.events:
        if isinstance(event, LLMEnd):
            text = event.text
        elif isinstance(event, ToolCall):
            name, args = as_tao_call(event.name, event.arguments)
            turns.append(Turn(with_call(text, name, args)))
            text = ""
            if name == "finish":
                break
            result = results.get(event.call_id)
            if result is None:
                break  # the trajectory ends without this call's answer: replay up to here
            action = canonical(name, args)
            calls.append(RecordedCall(action.key, epoch, name, result.output, result.is_error, result.exit_code,
                                      result.truncated_chars, round(modelled_latency(action, result.duration), 4)))
            if effects.get(name) is Effect.MUTATING:
                epoch += 1
    if not calls:
        return None
    if not turns or '"name": "finish"' not in turns[-1].text:
        turns.append(Turn(with_call("", "finish", {"summary": ""})))
    recording = Recording(turns, start.task if start else "")
    return LiveSession(imported.session_id, recording, {}, []), Book(imported.session_id, calls)


def as_tao_call(name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call as Tao's agent would make it: a shell command that is a structured tool becomes that tool."""
    if name != "bash":
        return name, args
    action = canonical(name, args)
    if action.tool in STRUCTURED and canonical(action.tool, action.args).key == action.key:
        return action.tool, dict(action.args)
    return name, args


def with_call(text: str, name: str, args: dict[str, Any]) -> str:
    """The answer's text with its trailing command block (mini-swe-agent's ```bash) replaced by a Tao call."""
    prose = _LAST_BLOCK.sub("", text).rstrip()
    call = "<tool_call>" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>"
    return f"{prose}\n{call}" if prose else call
