"""Importer for Claude Code session transcripts (JSONL, one record per line).

Assistant records carry `message.content[]` items, among them `{type: "tool_use", id, name, input}`;
user records carry `{type: "tool_result", tool_use_id, content}`; every record has an ISO `timestamp`.
Consecutive assistant records form one model turn (Claude Code writes one record per content block:
thinking, text and each tool_use apart); its thinking counts as reasoning, before its text. Claude Code's
tools become Tao calls where they amount to one (Bash, Read, NotebookRead, Grep, LS, Edit, MultiEdit,
Write); the others, which Tao has no tool for (Glob, Task, TodoWrite, WebFetch, ...), take Tao's spelling of
their name (`glob`, `task`, `todo_write`, `web_fetch`). A subagent's records (`isSidechain`, or wrapped in a
`progress` record as Claude Code 2 writes them) form a session of their own, records written twice (same
`uuid`, as on resume) count once, and the task is the first prompt the user typed, not a meta record or a
slash command's echo. Records of other kinds (progress of a hook or a command, bookkeeping) hold no calls:
they are counted in `report.ignored`, not reported one by one. A call's duration is the time from its
`tool_use` record to its `tool_result` record (each call of a turn its own); the session started at its
first record's time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.traces.common import (Imported, ImportReport, SessionBuilder, elapsed, iso_time, read_records,
                                   string)
from harness.vocabulary import Status

FORMAT = "claude-code"
# Claude Code's file and shell tools, by the Tao names they are imported as (it has no run_tests, and no finish:
# it ends a task with a text answer, so a predictor must not spend a place on a finish call it never makes).
CLAUDE_CODE_TOOLS = ["bash", "edit_file", "grep", "list_files", "read_file", "write_file"]
_QUIET_TYPES = {"summary", "system", "file-history-snapshot", "queue-operation"}
# Records Claude Code 2.1 writes at the head of a transcript, before any message.
_LEADING = re.compile(r'"type":\s*"(?:last-prompt|mode|queue-operation|file-history-snapshot|summary)"')
# Claude Code's tools that become Tao calls; the same name left as it is marks an input this importer cannot read.
CLAUDE_CODE_NAMES = {"Bash", "Read", "NotebookRead", "Grep", "LS", "Edit", "MultiEdit", "Write"}
# User texts that Claude Code writes itself: slash commands' echoes and output, caveats, interruptions.
_NOT_TASK = ("<command-", "<local-command-", "Caveat:", "[Request interrupted")


@dataclass
class _Turn:
    text: str = ""
    thinking: str = ""
    t: float | None = None
    uses: list[dict[str, Any]] = field(default_factory=list)
    starts: list[float | None] = field(default_factory=list)  # each use's record time, beside `uses`


def sniff(path: Path, head: str) -> bool:
    """A .jsonl of records with a session id, and `message` or a record Claude Code writes before the first
    message (its first 4 kB may hold only those when a file snapshot of many kB follows them)."""
    return path.suffix == ".jsonl" and ('"sessionId"' in head or '"uuid"' in head) and (
        '"message"' in head or _LEADING.search(head) is not None)


def load(path: Path, report: ImportReport) -> list[Imported]:
    """One session per `sessionId` in the file; damaged or unknown records are reported and skipped."""
    records: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    seen: set[str] = set()
    for number, record in read_records(path, report):
        if not isinstance(record.get("type"), (str, type(None))):
            report.skip(f"{path}:{number}", "a record whose type is not a string")
            continue
        if record.get("type") in _QUIET_TYPES:
            continue
        if record.get("type") not in ("user", "assistant", None):
            inner = _unwrapped(record)
            if inner is None and _has_calls(record):
                report.skip(f"{path}:{number}", f"unknown record type {record.get('type')!r} with tool calls")
            elif inner is None:
                report.ignore(str(record.get("type")))  # progress of a hook or a command, bookkeeping: no calls
            if inner is None:
                continue
            record = inner
        uuid = record.get("uuid")
        if isinstance(uuid, str) and uuid:
            if uuid in seen:
                continue
            seen.add(uuid)
        session_id = string(record.get("sessionId")) or path.stem
        if record.get("isSidechain"):
            session_id += f"-agent-{record.get('agentId') or 'sidechain'}"
        records.setdefault(session_id, []).append((number, record))
    return [s for sid, recs in records.items() if (s := _session(sid, recs, path, report))]


def _unwrapped(record: dict[str, Any]) -> dict[str, Any] | None:
    """The user or assistant record a `progress` record wraps (a subagent's message, as Claude Code 2 writes them:
    `data.message`), as a record of the subagent's session; None for a record that holds no message."""
    data = record.get("data")
    inner = data.get("message") if isinstance(data, dict) else None
    if not (isinstance(data, dict) and isinstance(inner, dict) and inner.get("type") in ("user", "assistant")
            and isinstance(inner.get("message"), dict)):
        return None
    agent = data.get("agentId") or record.get("parentToolUseID") or "progress"
    return {**inner, "sessionId": record.get("sessionId") or inner.get("sessionId"), "isSidechain": True,
            "agentId": agent, "uuid": inner.get("uuid") or record.get("uuid"),
            "timestamp": inner.get("timestamp") or record.get("timestamp"),
            "cwd": inner.get("cwd") or record.get("cwd")}


def _has_calls(record: dict[str, Any]) -> bool:
    """Whether a record of a kind this importer does not know holds tool calls (then leaving it out loses data)."""
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(isinstance(item, dict) and item.get("type") == "tool_use"
                                             for item in content)


def tao_name(name: str) -> str:
    """A tool Tao has no counterpart for, in Tao's spelling of tool names: `TodoWrite` -> `todo_write`."""
    return "_".join(word.lower() for word in _WORDS.findall(name)) or name


_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


def to_tao_call(name: str, tool_input: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A Claude Code tool call as a Tao call (name, arguments)."""
    get = tool_input.get
    if not _strings(tool_input, "command", "file_path", "pattern", "path", "glob", "type", "old_string",
                    "new_string", "content"):
        return (name if name in CLAUDE_CODE_NAMES else tao_name(name)), dict(tool_input)  # not as Claude Code writes it
    if name == "Bash" and isinstance(get("command"), str):
        return "bash", {"command": get("command")}
    if name == "Read" and get("file_path"):
        start, limit = get("offset"), get("limit")
        if start is None and limit is None:
            return "read_file", {"path": get("file_path")}
        first, count = _number(start or 1), _number(limit) if limit else None
        if first is None or (limit and count is None):
            return name, dict(tool_input)
        return "read_file", {"path": get("file_path"), "start_line": first,
                             **({"end_line": first + count - 1} if count else {})}
    if name == "Grep" and get("pattern"):
        pattern = f"(?i){get('pattern')}" if get("-i") else get("pattern")
        glob = get("glob") or (f"*.{get('type')}" if get("type") else None)
        return "grep", {"pattern": pattern, **({"path": get("path")} if get("path") else {}),
                        **({"glob": glob} if glob else {})}
    if name == "LS" and get("path"):
        return "list_files", {"path": get("path"), "depth": 1}
    if name == "NotebookRead" and isinstance(get("notebook_path"), str):
        return "read_file", {"path": get("notebook_path")}
    if name == "Edit" and get("file_path"):
        every = {"replace_all": True} if get("replace_all") else {}
        return "edit_file", {"path": get("file_path"), "old": get("old_string", ""), "new": get("new_string", ""),
                             **every}
    if name == "MultiEdit" and get("file_path") and isinstance(listed := get("edits"), list):
        edits = [{"old": e.get("old_string", ""), "new": e.get("new_string", ""),
                  **({"replace_all": True} if e.get("replace_all") else {})} for e in listed if isinstance(e, dict)]
        if len(edits) == 1:
            return "edit_file", {"path": get("file_path"), **edits[0]}
        return "edit_file", {"path": get("file_path"), "edits": edits}
    if name == "Write" and get("file_path"):
        return "write_file", {"path": get("file_path"), "content": get("content", "")}
    if name in CLAUDE_CODE_NAMES:
        return name, dict(tool_input)  # a Claude Code tool whose input is not as it writes it: kept as it is
    return tao_name(name), dict(tool_input)


def _strings(tool_input: dict[str, Any], *keys: str) -> bool:
    """Whether each of `keys` the input has is a string, as Claude Code writes them."""
    return all(isinstance(tool_input[key], str) for key in keys if tool_input.get(key) is not None)


def _number(value: Any) -> int | None:
    """A line number or count as Claude Code writes it (an int, or digits); None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _session(session_id: str, records: list[tuple[int, dict[str, Any]]], path: Path,
             report: ImportReport) -> Imported | None:
    turns: list[_Turn | None] = []  # None: a user record closed the turn before it
    results, task, cwd, t0 = {}, "", "", None
    for number, record in records:
        kind, message = record.get("type"), record.get("message")
        t = _time(record.get("timestamp"))
        t0 = t if t0 is None and t is not None else t0
        cwd = cwd or string(record.get("cwd"))
        rel = t - t0 if t is not None and t0 is not None else None
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            report.skip(f"{path}:{number}", f"a {kind or 'typeless'} record without a message")
            continue
        content = message.get("content")
        items = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
        if kind == "assistant":
            turn = turns[-1] if turns else None
            if turn is None:
                turn = _Turn()
                turns.append(turn)
            _add_assistant(turn, items, rel)
            continue
        if turns and turns[-1] is not None:
            turns.append(None)  # a user record closes the turn
        for item in items:
            if isinstance(item, dict) and item.get("type") == "tool_result":
                results[str(item.get("tool_use_id"))] = (_text(item.get("content")), bool(item.get("is_error")), rel)
            elif isinstance(item, dict) and item.get("type") == "text" and not task and _typed(record, item):
                task = str(item.get("text") or "")
    real = [turn for turn in turns if turn is not None]
    if not real:
        report.skip(str(path), f"session {session_id} has no assistant turns")
        return None
    builder = SessionBuilder(session_id, task, cwd, FORMAT, iso_time(t0), tools=CLAUDE_CODE_TOOLS)
    for turn in real:
        _emit(builder, turn, results, f"{path}", report)
    return Imported(session_id, str(path), FORMAT, builder.end(Status.FINISHED, "transcript ended").events)


def _add_assistant(turn: _Turn, items: list[Any], t: float | None) -> None:
    turn.t = t if t is not None else turn.t
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            turn.text += str(item.get("text") or "")
        elif item.get("type") == "thinking" and item.get("thinking"):
            turn.thinking += str(item.get("thinking")) + "\n\n"
        elif item.get("type") == "tool_use" and isinstance(item.get("input"), dict):
            turn.uses.append(item)
            turn.starts.append(t)


def _emit(builder: SessionBuilder, turn: _Turn, results: dict[str, tuple[str, bool, float | None]], where: str,
          report: ImportReport) -> None:
    native = [{"id": u.get("id"), "type": "function",
               "function": {"name": string(u.get("name")), "arguments": json.dumps(u.get("input"))}} for u in turn.uses]
    builder.turn(turn.thinking + turn.text, turn.t, native or None)
    for use, start in zip(turn.uses, turn.starts):
        name, arguments = to_tao_call(str(use.get("name") or ""), use["input"])
        call_id = builder.call(name, arguments, str(use.get("id") or "") or None)
        found = results.get(str(use.get("id")))
        if found is None:
            report.skip(f"{where}: tool_use {use.get('id')}", "no tool_result recorded")
            builder.result(call_id, "", None, True)
            continue
        output, is_error, t = found
        builder.result(call_id, output, None, is_error, elapsed(start, t), t=t)


def _typed(record: dict[str, Any], item: dict[str, Any]) -> bool:
    """Whether a user text is what the user typed (not a meta record, a summary or a command's echo)."""
    text = str(item.get("text") or "").lstrip()
    return bool(text) and not record.get("isMeta") and not record.get("isCompactSummary") and \
        not text.startswith(_NOT_TASK)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _time(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # not a time, or one the platform cannot place
        return None

