"""Importer for SWE-agent trajectories (`*.traj`): `trajectory[]` steps, or the `history` of messages.

A step's `action` is a bash command or one of SWE-agent's editor commands. Where a command amounts to a
Tao tool it becomes that call (`open f` -> read_file, `create f` -> write_file, `search_dir p d` -> grep,
`str_replace_editor view|create|str_replace` -> read_file (list_files for a folder)|write_file|edit_file,
`submit` -> finish);
other editor commands keep their own name (edit, goto, scroll_down, ...) with the command text, and
bash stays `bash`. `execution_time`, where present, is the call's duration (negative, absurd or missing
ones are unknown, `harness.traces.common.measured`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from harness import jsonl
from harness.traces.common import (Imported, ImportReport, SessionBuilder, measured, obj, objects, read_object,
                                   string)
from harness.vocabulary import Status

FORMAT = "swe-agent"
_FILE_HEADER = re.compile(r"\[File: (.+?) \(([0-9]{1,18}) lines total\)\]")
_EDITOR = {"edit", "insert", "append", "goto", "scroll_up", "scroll_down", "find_file", "search_file",
           "search_dir", "filemap", "str_replace_editor", "open", "create", "submit", "exit_forfeit"}
_DIRECTORY_VIEW = "Here's the files and directories up to 2 levels deep"  # the editor's view of a folder
_WORKDIR = re.compile(r"""['"]working_dir['"]\s*:\s*['"]([^'"]+)['"]""")


def sniff(path: Path, head: str) -> bool:
    """A `*.traj` file."""
    return path.suffix == ".traj"


def load(path: Path, report: ImportReport) -> list[Imported]:
    """The one session of a SWE-agent .traj file (none if it is unreadable)."""
    data = read_object(path, report, "a SWE-agent trajectory")
    if data is None:
        return []
    history = objects(data.get("history"))
    steps = objects(data.get("trajectory"))
    if not steps:
        steps = _steps_from_history(history)
    if not steps:
        report.skip(str(path), "no trajectory steps and no actions in the history")
        return []
    repo = next((m.group(1) for s in steps if (m := _WORKDIR.search(str(s.get("state") or "")))), "")
    session_id = path.name.removesuffix(".traj")
    builder = SessionBuilder(session_id, _task(history), repo, FORMAT)
    info = obj(data.get("info"))
    finished = False
    for number, step in enumerate(steps, 1):
        action, thought = step.get("action"), step.get("response") or step.get("thought") or ""
        if not isinstance(action, str) or not action.strip():
            report.skip(f"{path}: step {number}", "no action")
            continue
        builder.turn(str(thought) if action.strip() in str(thought) else f"{thought}\n```\n{action}\n```")
        name, arguments = to_tao_call(action.strip(), str(step.get("observation") or ""))
        call_id = builder.call(name, arguments)
        if name == "finish":
            finished = True
            break
        builder.result(call_id, str(step.get("observation") or ""), None, False, _seconds(step.get("execution_time")))
    status = Status.FINISHED if finished else Status.LIMIT
    return [Imported(session_id, str(path), FORMAT, builder.end(status, str(info.get("exit_status") or ""), "",
                                                                 str(info.get("submission") or "")).events)]


def to_tao_call(action: str, observation: str = "") -> tuple[str, dict[str, Any]]:
    """A SWE-agent action as a Tao call (name, arguments)."""
    word = action.split(maxsplit=1)[0]
    if word not in _EDITOR:
        return "bash", {"command": action}
    try:
        argv = shlex.split(action.split("\n", 1)[0]) if word != "str_replace_editor" else shlex.split(action)
    except ValueError:
        return word, {"command": action}
    if word == "submit":
        return "finish", {"summary": ""}
    if word == "open" and len(argv) >= 2:
        return "read_file", _open_args(argv, observation)
    if word == "create" and len(argv) == 2:
        return "write_file", {"path": argv[1], "content": ""}
    if word == "search_dir" and 2 <= len(argv) <= 3:
        return "grep", {"pattern": re.escape(argv[1]), **({"path": argv[2]} if len(argv) == 3 else {})}
    if word == "search_file" and len(argv) == 3:
        return "grep", {"pattern": re.escape(argv[1]), "path": argv[2]}
    if word == "str_replace_editor":
        if argv[1:2] == ["view"] and len(argv) == 3 and observation.lstrip().startswith(_DIRECTORY_VIEW):
            return "list_files", {"path": argv[2], "depth": 2}
        return _editor_call(argv) or (word, {"command": action})
    return word, {"command": action}


def _open_args(argv: list[str], observation: str) -> dict[str, Any]:
    header = _FILE_HEADER.search(observation)
    total = int(header.group(2)) if header else None
    line = int(argv[2]) if len(argv) > 2 and _digits(argv[2]) else None
    if line is None and total is not None and total <= 100:
        return {"path": argv[1]}
    start = max(1, (line or 1) - 50) if line else 1
    end = start + 99 if total is None else min(total, start + 99)
    return {"path": argv[1], "start_line": start, "end_line": end}


def _editor_call(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """`str_replace_editor view|create|str_replace PATH --opt value ...` as a Tao call."""
    if len(argv) < 3:
        return None
    command, path, options = argv[1], argv[2], _options(argv[3:])
    if command == "view":
        span = options.get("view_range", [])
        if len(span) == 2 and all(_digits(s.removeprefix("-")) for s in span):
            end = int(span[1])
            return "read_file", {"path": path, "start_line": int(span[0]), **({"end_line": end} if end > 0 else {})}
        return "read_file", {"path": path}
    if command == "create" and options.get("file_text"):
        return "write_file", {"path": path, "content": options["file_text"][0]}
    if command == "str_replace" and options.get("old_str"):
        return "edit_file", {"path": path, "old": options["old_str"][0], "new": (options.get("new_str") or [""])[0]}
    return None


def _options(argv: list[str]) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    key = None
    for arg in argv:
        if arg.startswith("--"):
            key = arg[2:]
            options[key] = []
        elif key is not None:
            options[key].append(arg)
    return options


def _steps_from_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps rebuilt from a function-calling history: each assistant call and the observation after it."""
    steps: list[dict[str, Any]] = []
    for index, message in enumerate(history):
        if message.get("role") != "assistant":
            continue
        action = message.get("action")
        calls = objects(message.get("tool_calls"))
        if not action and calls:
            action = _function_as_command(obj(calls[0].get("function")))
        following = history[index + 1] if index + 1 < len(history) else {}  # objects only (see load)
        observation = following.get("content") if following.get("role") in ("tool", "user") else ""
        steps.append({"action": action, "response": message.get("content") or message.get("thought") or "",
                      "observation": _text(observation)})
    return steps


def _function_as_command(function: dict[str, Any]) -> str:
    name = str(function.get("name") or "")
    arguments = function.get("arguments") or "{}"
    try:
        args = jsonl.parse(arguments) if isinstance(arguments, str) else arguments
    except jsonl.DamagedJSON:
        args = {}
    if name == "bash" and isinstance(args, dict):
        return str(args.get("command", ""))
    if name == "str_replace_editor" and isinstance(args, dict):  # as SWE-agent spells it: positionals, then --options
        words = [name, str(args.get("command", "")), str(args.get("path", ""))]
        for key, value in args.items():
            if key not in ("command", "path"):
                words += [f"--{key}", *(str(v) for v in (value if isinstance(value, list) else [value]))]
        return " ".join(shlex.quote(word) for word in words)
    values = args.values() if isinstance(args, dict) else []
    return " ".join([name, *(shlex.quote(str(v)) for v in values)])


def _task(history: list[dict[str, Any]]) -> str:
    first = next((m for m in history if m.get("role") == "user"), None)
    text = _text(first.get("content")) if first else ""
    match = re.search(r"ISSUE:\n(.*?)\n\s*INSTRUCTIONS:", text, re.DOTALL)
    return match.group(1).strip() if match else text


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(string(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _digits(word: str) -> bool:
    """Whether a word is a plain number (ASCII digits only: `int` refuses others, like "²")."""
    return word.isascii() and word.isdigit() and len(word) <= 18


def _seconds(value: Any) -> float:
    """`execution_time` (a number, or one written as a string) as a measured duration; 0.0 when unknown."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0.0
    try:
        return measured(float(value))
    except (ValueError, OverflowError):
        return 0.0
