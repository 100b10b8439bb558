"""A conversation rebuilt from its events, so that a saved session can go on where it stopped; and the saved
sessions themselves, found and read for resuming.

The messages are the ones the session itself built: the system prompt, the task, each answer of the
model as it was generated, each tool result, each format error and each follow-up of the user.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import context, protocol
from harness.errors import UsageError
from harness.events import (Attached, ContextCleared, ContextCompact, Event, EventDecodeError, FormatError,
                            LLMEnd, SessionEnd, SessionStart, ToolResult, TurnEnd, UserMessage, read_trajectory)
from harness.vocabulary import Status

LAST = "last"  # what `--continue` stands for: the newest saved session of this repository


def assistant_message(raw: str, native: list[dict[str, Any]] | None, has_calls: bool) -> dict[str, Any]:
    """The model's answer as the next prompt carries it: its own words, verbatim.

    The next prompt then shares its tokens with this answer's KV cache. An answer cut at the stop string
    gets its closing tag back.
    """
    if native:
        return {"role": "assistant", "content": raw, "tool_calls": native}
    closed = has_calls and not raw.rstrip().endswith(protocol.CLOSE)
    return {"role": "assistant", "content": raw + protocol.CLOSE if closed else raw}


@dataclass(frozen=True)
class History:
    """What a resumed session starts from."""

    start: SessionStart
    messages: list[dict[str, Any]]  # without the system prompt, which the new session renders
    steps: int
    output_tokens: int
    last_t: float
    status: str  # how the session last stopped: a Status (finished, limit, error or interrupted)
    reason: str


def rebuild(events: list[Event], native_tools: bool) -> History:
    """The conversation and counters of a trajectory; raises ValueError when it has no session_start."""
    start = next((e for e in events if isinstance(e, SessionStart)), None)
    if start is None:
        raise ValueError("the trajectory has no session_start event")
    messages: list[dict[str, Any]] = [{"role": "user", "content": start.task}]
    steps = tokens = 0
    status: str = Status.INTERRUPTED
    reason = "the session was closed"
    for event in events:
        steps = max(steps, getattr(event, "step", 0))
        match event:
            case LLMEnd():
                parser = protocol.CallParser()
                parser.feed(event.text)
                parser.finish()
                messages.append(assistant_message(event.text, event.tool_calls, bool(parser.calls)))
                tokens += event.output_tokens
            case ToolResult():
                call = protocol.ParsedCall(event.call_id, event.name, {})
                messages.append(protocol.result_message(call, event.output, native_tools))
            case FormatError():
                messages.append({"role": "user", "content": event.error})
            case UserMessage():
                messages.append({"role": "user", "content": event.text})
            case Attached():  # files the message mentioned, a note of an undo: part of that message
                messages[-1] = {**messages[-1], "content": messages[-1]["content"] + event.content}
            case ContextCleared():
                messages = []
            case ContextCompact():  # the same stubs again: indices count the system prompt, absent here
                messages = context.apply_stubs(messages, [index - 1 for index in event.messages])
            case TurnEnd() | SessionEnd():
                status, reason = event.status, event.reason
    return History(start, messages, steps, tokens, events[-1].t if events else 0.0, status, reason)


def load_saved(path: Path) -> list[Event]:
    """The events of a saved session, to resume it; a UsageError (exit code 2) says what is wrong with which line
    of the file, or that it holds no session."""
    try:
        events = read_trajectory(path)
    except EventDecodeError as exc:
        raise UsageError(f"cannot resume {exc}. A trajectory holds one JSON event a line: repair or delete that "
                         f"line, or start a new session") from None
    if not any(isinstance(event, SessionStart) for event in events):
        raise UsageError(f"cannot resume {path}: it holds no session_start event, so it is not a Tao trajectory")
    return events


def saved_sessions(folder: Path) -> list[Path]:
    """The trajectory files in `folder`, newest first; what is no regular file (a FIFO, a broken link) is left out."""
    dated = []
    for path in folder.glob("*.jsonl"):
        try:
            info = path.stat()
        except OSError:
            continue  # removed while we looked, or a broken link
        if stat.S_ISREG(info.st_mode):
            dated.append((info.st_mtime, path))
    return [path for _, path in sorted(dated, key=lambda item: item[0], reverse=True)]


def unanswered(events: list[Event]) -> list[protocol.ParsedCall]:
    """The calls of the last answer that got no result, in order: a run killed mid-step left them open, and the
    model (native tools above all) must see every call it made answered before it is asked again."""
    last = next((i for i in range(len(events) - 1, -1, -1) if isinstance(events[i], LLMEnd)), None)
    if last is None:
        return []
    answer = events[last]
    assert isinstance(answer, LLMEnd)
    if answer.tool_calls:
        calls, errors = protocol.parse_native_calls(answer.tool_calls)
    else:
        parser = protocol.CallParser(id_prefix=f"call_{answer.step}")  # the ids the session gave them
        parser.feed(answer.text)
        parser.finish()
        calls, errors = parser.calls, parser.errors
    after = events[last + 1:]
    if any(isinstance(event, UserMessage) for event in after):
        return []  # the user spoke since: that turn was closed
    answered = {event.call_id for event in after if isinstance(event, ToolResult)}
    ordered = [call for call, _ in protocol.in_order(calls, errors, bool(answer.tool_calls))[0]]
    return [call for call in ordered if call.call_id not in answered and call.name != "finish"]


def session_repo(path: Path) -> str | None:
    """The repository a saved session ran in, from its first line; None when that line is no session_start."""
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.loads(handle.readline() or "{}")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("type") != "session_start" or not isinstance(data.get("repo"), str):
        return None
    return data["repo"]


def last_session(folder: Path, repo: Path) -> Path | None:
    """The newest saved session that ran in `repo`; another repository's session never stands in for it."""
    root = str(repo.resolve())
    return next((path for path in saved_sessions(folder) if session_repo(path) == root), None)


def choose_session(folder: Path, repo: Path) -> Path:
    """The newest saved session of `repo`; a UsageError (exit code 2) when it has none, saying how to choose one.

    Resuming another repository's session would run its task there, not here: that needs the user to name it.
    """
    path = last_session(folder, repo)
    if path is not None:
        return path
    others = [(path, ran) for path in saved_sessions(folder) if (ran := session_repo(path)) is not None]
    listed = "".join(f"\n  {path}  (ran in {ran})" for path, ran in others[:3])
    newest = f"; the newest sessions of other repositories:{listed}\n" if others else ". "
    raise UsageError(f"no saved session of {repo.resolve()} to resume in {folder}{newest}"
                     f"Resume one by its file with --resume FILE (`ls -t {folder}` lists them, newest first), "
                     "or start a new session without --resume")


def new_trajectory(path: Path) -> Path:
    """`path` for a new session's trajectory; a UsageError (exit code 2) when it already holds events, since a
    second session appended to them would make one file of two sessions that neither resumes nor replays."""
    try:
        taken = path.is_dir() or path.stat().st_size > 0  # an empty file (from mktemp) holds nothing to keep
    except OSError:
        return path  # absent (or unreadable, which the writer then reports)
    if taken:
        raise UsageError(f"--trajectory {path} already exists and a new session would be appended to it. "
                         f"Continue that session with `tao run --resume {path}`, or choose a new path")
    return path
