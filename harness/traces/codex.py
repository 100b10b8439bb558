"""Importer for Codex CLI rollouts (`~/.codex/sessions/.../rollout-*.jsonl`): one session a file.

Every record is `{timestamp, type, payload}`. `session_meta` names the session and its working directory; the
`response_item`s, in order, are the conversation: the user's messages (the first one that is not Codex's own
context, such as `<environment_context>` or AGENTS.md, is the task), reasoning summaries, the assistant's
messages, and tool calls with their outputs, paired by `call_id`. Reasoning, messages and calls up to the next
output or user message form one model turn, so calls made together stay together. Calls become Tao calls where
they amount to one: `exec_command {cmd}`, `shell {command: [..]}` and `local_shell_call` are `bash`; in code mode
a `custom_tool_call` `exec` whose script makes a single `tools.exec_command({cmd: "..."})` is that command, and a
script that calls one other tool takes that tool's name. The others (`apply_patch`, `write_stdin`, `update_plan`,
`wait`, scripts of several calls as `exec`) keep their name, in Tao's spelling.
A call's duration runs from its record's time to its output's. Other records (`event_msg`, `turn_context`, token
counts) hold no calls and are counted in `report.ignored`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.traces.claude_code import tao_name
from harness.traces.common import Imported, ImportReport, SessionBuilder, obj, read_records, string
from harness.vocabulary import Status

FORMAT = "codex"
_CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output"}
# User messages that Codex writes itself around the task.
_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions", "<INSTRUCTIONS>")
_SCRIPT_CALL = re.compile(r"\btools\.(\w+)\(")
_EXEC_CMD = re.compile(r"""\btools\.exec_command\(\s*\{\s*["']?cmd["']?\s*:\s*("(?:[^"\\]|\\.)*")""")
_FIRST = re.compile(r'\{"timestamp":\s*"[^"]*",\s*"type":\s*"(?:session_meta|response_item|turn_context|event_msg)"')
_EXIT = re.compile(r"(?:Process exited with code|Exit code:)\s*(-?\d+)")


@dataclass
class _Turn:
    text: str = ""
    t: float | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)


def sniff(path: Path, head: str) -> bool:
    """A .jsonl whose first record is one of Codex's `{timestamp, type, payload}` records."""
    return path.suffix == ".jsonl" and _FIRST.match(head.lstrip()) is not None


def load(path: Path, report: ImportReport) -> list[Imported]:
    """The session of one rollout; damaged records are reported and skipped."""
    meta: dict[str, Any] = {}
    turns: list[_Turn] = []
    results: dict[str, tuple[str, float | None]] = {}
    task, t0, closed = "", None, True
    for _number, record in read_records(path, report):
        kind, payload, t = record.get("type"), obj(record.get("payload")), _seconds(record.get("timestamp"))
        t0 = t if t0 is None else t0
        rel = t - t0 if t is not None and t0 is not None else None
        item = payload.get("type")
        if kind == "session_meta":
            meta = meta or payload
        elif kind != "response_item":
            report.ignore(str(kind))
        elif item == "message" and payload.get("role") == "user":
            task, closed = task or _task(payload), True
        elif item in _OUTPUTS:
            results[string(payload.get("call_id"))] = (_output(payload.get("output")), rel)
            closed = True
        elif item in _CALLS or item == "reasoning" or (item == "message" and payload.get("role") == "assistant"):
            if closed:
                turns.append(_Turn())
                closed = False
            _add(turns[-1], payload, rel)
        else:
            report.ignore(f"response_item:{item}")
    if not any(turn.calls or turn.text for turn in turns):
        report.skip(str(path), "no model turns in this rollout")
        return []
    session_id = string(meta.get("id")) or path.stem
    # Codex CLI has a shell and no finish tool: a text answer ends its task.
    builder = SessionBuilder(session_id, task, string(meta.get("cwd")), FORMAT, tools=["bash"])
    for turn in turns:
        _emit(builder, turn, results, str(path), report)
    return [Imported(session_id, str(path), FORMAT, builder.end(Status.FINISHED, "rollout ended").events)]


def _seconds(stamp: Any) -> float | None:
    """An ISO time (`2026-05-31T10:46:44.086Z`) in epoch seconds; None for anything else."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if isinstance(stamp, str) else None
    except (ValueError, OverflowError, OSError):
        return None


def _task(payload: dict[str, Any]) -> str:
    """The text of a user message, or "" when it is context Codex wrote itself."""
    text = "".join(string(part.get("text")) for part in payload.get("content") or [] if isinstance(part, dict))
    return "" if text.lstrip().startswith(_CONTEXT) else text


def _add(turn: _Turn, payload: dict[str, Any], t: float | None) -> None:
    """One reasoning summary, assistant message or call, added to the turn it belongs to."""
    turn.t = t if t is not None else turn.t
    kind = payload.get("type")
    if kind == "reasoning":
        summary = payload.get("summary") or []
        turn.text += "".join(string(s.get("text")) + "\n\n" for s in summary if isinstance(s, dict))
    elif kind == "message":
        turn.text += "".join(string(p.get("text")) for p in payload.get("content") or [] if isinstance(p, dict))
    else:
        turn.calls.append(payload)


def to_tao_call(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A Codex tool call as a Tao call (name, arguments)."""
    name = string(payload.get("name")) or string(payload.get("type"))
    if payload.get("type") == "local_shell_call":
        command = obj(obj(payload.get("action")).get("exec") or payload.get("action")).get("command")
        return _shell(command)
    if payload.get("type") == "custom_tool_call":
        script = string(payload.get("input"))
        if name != "exec":
            return tao_name(name), ({"patch": script} if name == "apply_patch" else {"code": script})
        tools = _SCRIPT_CALL.findall(script)
        if tools == ["exec_command"] and (command := _script_command(script)) is not None:
            return "bash", {"command": command}
        return tao_name(tools[0] if len(tools) == 1 else name), {"code": script}
    try:
        arguments = json.loads(string(payload.get("arguments")) or "{}")
    except ValueError:
        return tao_name(name), {"arguments": payload.get("arguments")}
    arguments = obj(arguments)
    if name == "exec_command" and isinstance(arguments.get("cmd"), str):
        return "bash", {"command": arguments["cmd"]}
    if name in ("shell", "container.exec"):
        return _shell(arguments.get("command"))
    return tao_name(name), arguments


def _shell(command: Any) -> tuple[str, dict[str, Any]]:
    """`shell`'s argv as a bash command: the script of `bash -lc SCRIPT`, else the words joined."""
    if isinstance(command, list) and all(isinstance(word, str) for word in command):
        if len(command) == 3 and command[0] in ("bash", "sh", "zsh") and command[1] in ("-lc", "-c"):
            return "bash", {"command": command[2]}
        return "bash", {"command": " ".join(command)}
    return "shell", {"command": command}


def _script_command(script: str) -> str | None:
    """The command of a code-mode script's `tools.exec_command({cmd: "..."})`, when it is a string literal."""
    if (match := _EXEC_CMD.search(script)) is None:
        return None
    try:
        command = json.loads(match.group(1))
    except ValueError:
        return None
    return command if isinstance(command, str) else None


def _output(output: Any) -> str:
    """A call's output as text (the text parts of a list of content items)."""
    if isinstance(output, list):
        return "".join(string(part.get("text")) for part in output if isinstance(part, dict))
    if isinstance(output, dict):
        return string(output.get("output")) or json.dumps(output)
    return string(output)


def _emit(builder: SessionBuilder, turn: _Turn, results: dict[str, tuple[str, float | None]], where: str,
          report: ImportReport) -> None:
    """One model turn and its calls' results, in the builder's events."""
    native = [{"id": c.get("call_id"), "type": "function",
               "function": {"name": string(c.get("name")) or string(c.get("type")),
                            "arguments": string(c.get("arguments")) or string(c.get("input"))}} for c in turn.calls]
    builder.turn(turn.text, turn.t, native or None)
    for call in turn.calls:
        name, arguments = to_tao_call(call)
        call_id = builder.call(name, arguments, string(call.get("call_id")) or None)
        found = results.get(string(call.get("call_id")))
        if found is None:
            report.skip(f"{where}: call {call.get('call_id')}", "no output recorded")
            builder.result(call_id, "", None, True)
            continue
        output, t = found
        code = _EXIT.search(output[:300])
        exit_code = int(code.group(1)) if code else None
        duration = t - turn.t if t is not None and turn.t is not None and t > turn.t else 0.0
        builder.result(call_id, output, exit_code, bool(exit_code), duration, t=t)
