"""Moment (c): which candidates agree with a call's name and the first characters of its first argument.

A candidate agrees when it is the same tool and its first argument starts with the characters seen,
or, for a shell call, when one of the usual shell spellings of the candidate does (`cat f`, `nl -ba f`,
`sed -n 'a,bp' f`, `grep -rn ...`). Calls made earlier in the session that start the same way are
added back even when they were too old to be candidates already.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.speculation.prediction import dataflow
from harness.calls.action import Action
from harness.calls.canonical import canonical
from harness.speculation.prediction.state import SessionState

_FIRST_STRING = re.compile(r'\s*\{\s*"(?:[^"\\]|\\.)*"\s*:\s*"((?:[^"\\]|\\.)*\\?)')
_WRITERS = ("cat <<", "cat >", "echo ", "printf ", "tee ", "sed -i", "python - <<", "python3 - <<")
# The shell commands that can amount to each structured tool.
_FAMILIES = {"read_file": ("cat", "nl", "sed", "head", "less", "more", "awk", "tail"),
             "grep": ("grep", "egrep", "fgrep", "rg"), "list_files": ("ls", "tree", "find"),
             "write_file": ("cat", "echo", "printf", "tee"), "edit_file": ("sed", "perl", "python", "python3")}


def args_prefix_of(streamed: str) -> str:
    """The first argument's characters so far, from the raw arguments JSON streamed (protocol.CallArgs)."""
    match = _FIRST_STRING.match(streamed)
    if not match:
        return ""
    text = match.group(1)
    text = text[:-1] if text.endswith("\\") and not text.endswith("\\\\") else text
    try:
        return json.loads(f'"{text}"')
    except json.JSONDecodeError:
        return text.split("\\", 1)[0]


def first_value(arguments: dict[str, Any]) -> str:
    """The first argument's value as text (what streams first in a JSON arguments object)."""
    for value in arguments.values():
        return value if isinstance(value, str) else json.dumps(value)
    return ""


def spellings(action: Action) -> list[str]:
    """Shell commands an agent commonly writes for this action."""
    args, path = action.args, action.path or ""
    if action.tool == "read_file":
        start, end = args.get("start_line"), args.get("end_line")
        if start is None and end is None:
            return [f"cat {path}", f"nl -ba {path}", f"cat -n {path}"]
        span = f"{start or 1},{end if end is not None else '$'}p"
        forms = [f"sed -n '{span}' {path}", f"nl -ba {path} | sed -n '{span}'", f"cat -n {path} | sed -n '{span}'",
                 f'sed -n "{span}" {path}']
        return forms + ([f"head -n {end} {path}"] if (start or 1) == 1 and end else [])
    if action.tool == "grep":
        pattern = str(args.get("pattern", ""))
        return [f"grep {flags} {quote}{pattern}" for flags in ("-rn", "-n", "-r", "-nr", "-Rn", "-R")
                for quote in ('"', "'", "")]
    if action.tool == "list_files":
        return [f"ls {path}".rstrip(), f"ls -la {path}".rstrip(), f"ls -l {path}".rstrip()]
    if action.tool in ("run_tests", "bash"):
        return [str(args.get("command", ""))]
    if action.tool in ("write_file", "edit_file"):
        return list(_WRITERS)
    return []


def consistent(proposal: dataflow.Proposal, name: str, prefix: str, root: str = "") -> bool:
    """Whether a candidate can be the call whose name and first argument characters are known."""
    return _agrees(proposal.name, proposal.arguments, proposal.action, name, prefix, root)


def agrees(call_name: str, arguments: dict[str, Any], name: str, prefix: str, root: str = "") -> bool:
    """Whether a speculated call (already running) can still be the call whose name and first characters
    are known: the rule `consistent` applies to candidates, so that a speculation it rules out frees its place."""
    return _agrees(call_name, arguments, canonical(call_name, arguments, root), name, prefix, root)


def _agrees(call_name: str, arguments: dict[str, Any], action: Action, name: str, prefix: str, root: str) -> bool:
    if name == call_name and first_value(arguments).startswith(prefix):
        return True
    if name == action.tool:
        return _starts(first_value(action.args), prefix, root, partial=True)
    if name == "bash":
        return _shell_consistent(action, prefix, root)
    return False


def _starts(value: str, typed: str, root: str, partial: bool) -> bool:
    """Whether the typed text is (a prefix of) `value`, a workspace-relative path, however it is spelled."""
    spelled = [value, f"./{value}"] + ([f"{root.rstrip('/')}/{value}"] if root else [])
    return any(s.startswith(typed) if partial else s == typed for s in spelled)


def _shell_consistent(action: Action, prefix: str, root: str = "") -> bool:
    """Whether a shell command starting with `prefix` can amount to `action` (a structured call)."""
    family = _FAMILIES.get(action.tool)
    if family is None:
        return any(form.startswith(prefix) for form in spellings(action))
    words = prefix.split(" ")
    if len(words) == 1:
        return any(command.startswith(words[0]) for command in family)
    if words[0] not in family:
        return False
    values = [str(v) for v in (action.path, action.args.get("pattern")) if v]
    for index, word in enumerate(words[1:], 1):
        bare = word.strip("'\"")
        if not bare or word.startswith("-") or word in family or word == "|" or bare[:1].isdigit():
            continue
        partial = index == len(words) - 1
        if not any(_starts(value, bare, root, partial) for value in values):
            return False
    return True


def completions(state: SessionState, name: str, prefix: str, existing: set[str]) -> list[dataflow.Proposal]:
    """Earlier calls of this session that start with the characters seen, beyond the repeat window."""
    found: list[dataflow.Proposal] = []
    if not prefix:
        return found
    for key, stats in state.keys.items():
        if key in existing or stats.name != name or not first_value(stats.arguments).startswith(prefix):
            continue
        action = state.steps[stats.last].action
        call_name, arguments = (action.tool, stats.arguments) if action.tool == "bash" else dataflow.runnable(action)
        found.append(dataflow.Proposal(action, call_name, dict(arguments), ["prefix_history"],
                                       {"r:prefix_history": 1.0}))
        existing.add(key)
    return found[-5:]
