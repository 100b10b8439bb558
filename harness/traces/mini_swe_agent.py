"""Importer for mini-swe-agent trajectories (`*.traj.json`, `trajectory_format: mini-swe-agent-1` and `-1.1`).

Version 1: each assistant message holds reasoning and one ```bash block; the next user message holds
`<returncode>N</returncode><output>...</output>` (or a head/tail of a long output). The block becomes a
Tao `bash` call; the submit command (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT ...`) becomes `finish`,
and an answer without exactly one block becomes a format_error. Times come from the model responses'
`created` stamps; mini-swe-agent records no tool timings.

Version 2 (`mini-swe-agent-1.1`) keeps each model message in its API's own shape (chat text with a
```mswea_bash_command block, chat tool calls, or a Responses API object), so it is read through what
every shape carries: the parsed `extra.actions` of a model turn (one or more commands), and
`extra.raw_output` / `extra.returncode` of each observation, matched by tool call id; `extra.timestamp`
on both gives model and tool times. mini-swe-agent stamps a model turn when its answer has come back and
each observation after all the turn's commands have run, one after another: a turn of one command gives that
command's duration (its observation's stamp minus the turn's), a turn of several only their sum, so theirs
stay unknown.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.traces.common import (Imported, ImportReport, SessionBuilder, elapsed, iso_time, obj, objects,
                                   read_object, seconds, string)
from harness.vocabulary import Status

FORMAT = "mini-swe-agent"
_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>(-?[0-9]{1,20})</returncode>")
_SUBMIT = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_TASK = re.compile(r"<pr_description>\s*(?:Consider the following PR description:\s*)?(.*?)\s*</pr_description>",
                   re.DOTALL)


def sniff(path: Path, head: str) -> bool:
    """A `*.traj.json`, or JSON that names the mini-swe-agent format."""
    return path.name.endswith(".traj.json") or '"mini-swe-agent' in head


def load(path: Path, report: ImportReport) -> list[Imported]:
    """The one session of a mini-swe-agent trajectory file (none if it is unreadable)."""
    data = read_object(path, report, "a mini-swe-agent trajectory")
    if data is None:
        return []
    if not isinstance(data.get("messages"), list):
        report.skip(str(path), "no 'messages' list: not a mini-swe-agent trajectory")
        return []
    info = obj(data.get("info"))
    environment = obj(obj(info.get("config")).get("environment"))
    messages = objects(data["messages"])
    session_id = _name(data.get("instance_id")) or path.name.removesuffix(".traj.json")
    builder = SessionBuilder(session_id, _task(messages), string(environment.get("cwd")), FORMAT,
                             iso_time(_first_stamp(messages)), config={"instance_id": data.get("instance_id")})
    if any(isinstance(_extra(m).get("actions"), list) for m in messages):
        submitted = _replay_actions(messages, builder, f"{path}", report)
    else:
        submitted = _replay(messages, builder, _first_created(messages), f"{path}", report)
    status = Status.FINISHED if submitted is not None else Status.LIMIT
    reason = str(info.get("exit_status") or "")
    session = builder.end(status, reason, "", str(info.get("submission") or submitted or ""))
    return [Imported(session_id, str(path), FORMAT, session.events)]


def _replay(messages: list[dict[str, Any]], builder: SessionBuilder, t0: float | None, where: str,
            report: ImportReport) -> str | None:
    """Emit the steps; returns the submission text when the agent submitted."""
    index = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.get("role") != "assistant":
            continue
        text = _content(message)
        builder.turn(text, _created(message, t0), output_tokens=_usage(message))
        reply = messages[index] if index < len(messages) and messages[index].get("role") == "user" else None
        actions = _ACTION.findall(text)
        if len(actions) != 1:
            builder.format_error(_content(reply) if reply else "no action")
            index += reply is not None
            continue
        command = actions[0]
        if command.lstrip().startswith(tuple(f"echo {word}" for word in _SUBMIT)):
            builder.call("finish", {"summary": ""})
            return _content(reply) if reply else ""
        call_id = builder.call("bash", {"command": command})
        if reply is None:
            report.skip(f"{where}: message {index}", "a command without an observation")
            builder.result(call_id, "", None, True)
            continue
        output, code, cut = parse_observation(_content(reply))
        builder.result(call_id, output, code, code not in (0, None), truncated=cut)
        index += 1
    return None


def _replay_actions(messages: list[dict[str, Any]], builder: SessionBuilder, where: str,
                    report: ImportReport) -> str | None:
    """Version 2: emit each model turn's parsed actions and the observations that answer them."""
    stamps = [seconds(_extra(m).get("timestamp")) for m in messages]
    t0 = min((t for t in stamps if t is not None), default=None)
    pending: list[tuple[str, str | None]] = []  # (Tao call id, the model's tool call id)
    asked: float | None = None  # when the turn's answer came back, if it holds one command (else unknown)
    for number, message in enumerate(messages, 1):
        extra = _extra(message)
        stamp = stamps[number - 1]
        at = stamp - t0 if t0 is not None and stamp is not None else None
        actions = extra.get("actions")
        if isinstance(actions, list):
            _answer_missing(pending, builder, f"{where}: message {number}", report)
            builder.turn(_reasoning(message), at, output_tokens=_tokens(message))
            asked = at if len(actions) == 1 else None
            for action in actions:
                command = action.get("command") if isinstance(action, dict) else None
                if not isinstance(command, str):
                    report.skip(f"{where}: message {number}", "an action without a command")
                    continue
                if command.lstrip().startswith(tuple(f"echo {word}" for word in _SUBMIT)):
                    builder.call("finish", {"summary": ""})
                    return str(_exit(messages).get("submission") or "")
                pending.append((builder.call("bash", {"command": command}), action.get("tool_call_id")))
        elif "raw_output" in extra or "returncode" in extra:
            if not pending:
                report.skip(f"{where}: message {number}", "an observation with no command before it")
                continue
            answered = message.get("tool_call_id") or message.get("call_id")
            index = next((i for i, (_, tid) in enumerate(pending) if answered and tid == answered), 0)
            call_id, _ = pending.pop(index)
            code = extra.get("returncode") if isinstance(extra.get("returncode"), int) else None
            builder.result(call_id, str(extra.get("raw_output") or ""), code, code not in (0, None),
                           elapsed(asked, at), t=at)
        elif extra.get("interrupt_type") == "FormatError":
            builder.format_error(_content(message))
    _answer_missing(pending, builder, where, report)
    return None


def _name(value: Any) -> str:
    """An instance id as the file gives it (a string or a number); empty for anything else."""
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""


def _answer_missing(pending: list[tuple[str, str | None]], builder: SessionBuilder, where: str,
                    report: ImportReport) -> None:
    for call_id, _ in pending:
        report.skip(where, "a command without an observation")
        builder.result(call_id, "", None, True)
    pending.clear()


def _extra(message: dict[str, Any]) -> dict[str, Any]:
    extra = message.get("extra")
    return extra if isinstance(extra, dict) else {}


def _exit(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return next((_extra(m) for m in reversed(messages) if m.get("role") == "exit"), {})


def _reasoning(message: dict[str, Any]) -> str:
    """The words of a version 2 model turn: chat content and reasoning, or a Responses API object's
    reasoning summaries and output text."""
    parts = [str(message.get("reasoning_content") or ""), _content(message)]
    for item in objects(message.get("output")):
        if item.get("type") == "reasoning":
            parts += [str(s.get("text") or "") for s in objects(item.get("summary"))]
        elif item.get("type") == "message":
            parts.append(_content(item))
    return "\n\n".join(part for part in parts if part)


def _tokens(message: dict[str, Any]) -> int:
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else _response(message).get("usage")
    tokens = (usage.get("completion_tokens") or usage.get("output_tokens")) if isinstance(usage, dict) else None
    return int(tokens) if isinstance(tokens, int) else 0


def parse_observation(text: str) -> tuple[str, int | None, int]:
    """(output, exit code, characters elided) of a `<returncode>..<output>..` observation."""
    match = _RETURNCODE.search(text)
    code = int(match.group(1)) if match else None
    full = re.search(r"<output>\n?(.*?)</output>", text, re.DOTALL)
    if full:
        return full.group(1), code, 0
    head = re.search(r"<output_head>\n?(.*?)</output_head>", text, re.DOTALL)
    tail = re.search(r"<output_tail>\n?(.*?)</output_tail>", text, re.DOTALL)
    elided = re.search(r"<elided_chars>\s*([0-9]{1,20})", text)
    if head or tail:
        cut = int(elided.group(1)) if elided else 0
        note = f"\n[... {cut} characters elided ...]\n"
        return (head.group(1) if head else "") + note + (tail.group(1) if tail else ""), code, cut
    return text, code, 0


def _task(messages: list[dict[str, Any]]) -> str:
    first = next((m for m in messages if m.get("role") == "user"), None)
    text = _content(first) if first else ""
    match = _TASK.search(text)
    return match.group(1) if match else text


def _content(message: dict[str, Any] | None) -> str:
    content = (message or {}).get("content", "")
    if isinstance(content, list):  # content parts
        return "".join(string(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else str(content)


def _response(message: dict[str, Any]) -> dict[str, Any]:
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    return response if isinstance(response, dict) else {}


def _first_created(messages: list[dict[str, Any]]) -> float | None:
    stamps = [seconds(_response(m).get("created")) for m in messages if m.get("role") == "assistant"]
    return min((s for s in stamps if s is not None), default=None)


def _first_stamp(messages: list[dict[str, Any]]) -> float | None:
    """When the run started, as far as the file says: its first message stamp (version 2) or model response."""
    stamps = [seconds(_extra(m).get("timestamp")) for m in messages]
    return min((t for t in stamps if t is not None), default=_first_created(messages))


def _created(message: dict[str, Any], t0: float | None) -> float | None:
    stamp = seconds(_response(message).get("created"))
    return stamp - t0 if t0 is not None and stamp is not None else None


def _usage(message: dict[str, Any]) -> int:
    usage = _response(message).get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return int(tokens) if isinstance(tokens, int) else 0
