"""Seeds and mutations for `tao bench fuzz-traces`: small valid trajectory files of every format, and ways to
damage them.

    seeds = builtin_seeds()                         # [(file name, bytes)], one or more per format
    data, done = mutate(random.Random(1), data)     # bytes damaged 1 to 3 times; `done` names each mutation

The seeds are written here, not read from the tests, so the benchmark runs from an installed Tao. Each is
a file its importer reads without a skipped record, so every skip in a fuzzed file comes from the damage.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from harness.events import (LLMEnd, LLMFirstToken, LLMStart, SessionEnd, SessionStart, SpecLaunch, SpecPromote,
                            SpecSummary, ToolCall, ToolResult)

Seed = tuple[str, bytes]
_DEEP = 100_000  # nesting levels of the deepest document a mutation writes


def builtin_seeds() -> list[Seed]:
    """One small valid file of each supported format and shape (mini-swe-agent 1 and 1.1, SWE-agent steps and
    function-calling history, a Claude Code transcript, a Tao trajectory)."""
    return [("calc-1.traj.json", _json(_mini_v1())), ("calc-2.traj.json", _json(_mini_v2())),
            ("calc-3.traj", _json(_swe_steps())), ("calc-4.traj", _json(_swe_history())),
            ("claude-5.jsonl", _lines(_claude())), ("tao-6.jsonl", _lines([e.to_dict() for e in _tao()]))]


def _json(data: Any) -> bytes:
    return json.dumps(data, indent=1, ensure_ascii=False).encode()


def _lines(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode()


def _mini_v1() -> dict[str, Any]:
    """mini-swe-agent 1: a ```bash block a turn, `<returncode>` observations, a submit."""
    def answer(text: str, created: int) -> dict[str, Any]:
        return {"role": "assistant", "content": text,
                "extra": {"response": {"created": created, "usage": {"completion_tokens": 40}}}}

    return {"instance_id": "calc-1", "trajectory_format": "mini-swe-agent-1",
            "info": {"exit_status": "Submitted", "submission": "diff --git a/calc/ops.py b/calc/ops.py\n",
                     "config": {"environment": {"cwd": "/testbed"}}},
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "<pr_description>\nadd() returns a - b\n</pr_description>"},
                answer("THOUGHT: look at the code\n\n```bash\ncat calc/ops.py\n```", 1_700_000_000),
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\ndef add(a, b):\n"
                                            "    return a - b\n</output>"},
                answer("THOUGHT: run the tests\n\n```bash\npython -m pytest -q tests\n```", 1_700_000_004),
                {"role": "user", "content": "<returncode>1</returncode>\n<output_head>\nF.\n</output_head>\n"
                                            "<elided_chars>\n120 characters elided\n</elided_chars>\n"
                                            "<output_tail>\n1 failed\n</output_tail>"},
                answer("Two blocks:\n```bash\nls\n```\n```bash\npwd\n```", 1_700_000_007),
                {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
                answer("THOUGHT: fix it\n\n```bash\nsed -i 's/a - b/a + b/' calc/ops.py\n```", 1_700_000_009),
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
                answer("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```",
                       1_700_000_012),
                {"role": "user", "content": "diff --git a/calc/ops.py b/calc/ops.py\n"}]}


def _mini_v2() -> dict[str, Any]:
    """mini-swe-agent 1.1: parsed `extra.actions`, tool messages with `raw_output`, timestamps, a format error."""
    def turn(command: str, call: str, at: float) -> dict[str, Any]:
        function = {"name": "bash", "arguments": json.dumps({"command": command})}
        calls = [{"id": call, "type": "function", "function": function}]
        return {"role": "assistant", "content": "", "tool_calls": calls, "usage": {"completion_tokens": 30},
                "extra": {"actions": [{"command": command, "tool_call_id": call}], "timestamp": at}}

    def seen(call: str, output: str, code: int, at: float) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call, "content": output,
                "extra": {"raw_output": output, "returncode": code, "timestamp": at}}

    return {"instance_id": "calc-2", "trajectory_format": "mini-swe-agent-1.1",
            "info": {"exit_status": "Submitted", "config": {"environment": {"cwd": "/testbed"}}},
            "messages": [
                {"role": "system", "content": "You are a helpful assistant.", "extra": {"timestamp": 100.0}},
                {"role": "user", "content": "<pr_description>add() is wrong</pr_description>",
                 "extra": {"timestamp": 100.0}},
                turn("cat calc/ops.py", "c1", 101.0), seen("c1", "def add(a, b):\n    return a - b\n", 0, 101.5),
                {"role": "user", "content": "Tool call error: No tool calls found in the response.",
                 "extra": {"interrupt_type": "FormatError", "timestamp": 103.0}},
                turn("python -m pytest -q", "c2", 104.0), seen("c2", "1 failed", 1, 106.0),
                turn("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "c3", 108.0),
                {"role": "exit", "content": "", "extra": {"exit_status": "Submitted",
                                                          "submission": "diff --git a/calc/ops.py b/calc/ops.py\n"}}]}


def _swe_steps() -> dict[str, Any]:
    """SWE-agent `trajectory[]` steps: editor commands, bash, and submit."""
    state = json.dumps({"open_file": "n/a", "working_dir": "/testbed"})

    def step(action: str, observation: str, thought: str = "Next.") -> dict[str, Any]:
        return {"action": action, "observation": observation, "thought": thought, "response": thought,
                "execution_time": 0.25, "state": state}

    return {"trajectory": [
        step("create reproduce.py", "[File: reproduce.py (1 lines total)]"),
        step("python reproduce.py", "Traceback: add(2, 3) == -1"),
        step("search_dir \"def add\" src", "Found 1 matches for \"def add\" in /testbed/src"),
        step("open src/calc/ops.py 40", "[File: src/calc/ops.py (230 lines total)]\n40:def add(a, b):"),
        step("str_replace_editor view /testbed/src/calc/ops.py --view_range 30 60", "    30\tdef add(a, b):"),
        step("str_replace_editor str_replace /testbed/src/calc/ops.py --old_str 'a - b' --new_str 'a + b'",
             "The file has been edited."),
        step("goto 45", "[File: src/calc/ops.py (230 lines total)]"),
        step("submit", "diff --git a/src/calc/ops.py b/src/calc/ops.py")],
        "history": [{"role": "system", "content": "SETTING: ..."},
                    {"role": "user", "content": "ISSUE:\nadd() is wrong\n\nINSTRUCTIONS:\nfix it"}],
        "info": {"exit_status": "submitted", "submission": "diff --git a/src/calc/ops.py b/src/calc/ops.py\n"}}


def _swe_history() -> dict[str, Any]:
    """SWE-agent function calling: no steps, the calls and observations are read from the history."""
    def call(i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": f"step {i}", "thought": f"step {i}",
                "tool_calls": [{"id": f"c{i}", "type": "function",
                                "function": {"name": name, "arguments": json.dumps(arguments)}}]}

    return {"history": [
        {"role": "user", "content": [{"type": "text", "text": "ISSUE:\nadd() is wrong\nINSTRUCTIONS:\nfix it"}]},
        call(1, "str_replace_editor", {"command": "view", "path": "/testbed"}),
        {"role": "tool", "content": "Here's the files and directories up to 2 levels deep in /testbed"},
        call(2, "str_replace_editor", {"command": "view", "path": "/testbed/ops.py", "view_range": [1, 20]}),
        {"role": "tool", "content": [{"type": "text", "text": "     1\tdef add(a, b):"}]},
        call(3, "bash", {"command": "python -m pytest -q"}),
        {"role": "tool", "content": "1 failed"},
        call(4, "submit", {})], "info": {"exit_status": "submitted"}}


def _claude() -> list[dict[str, Any]]:
    """A Claude Code transcript: thinking, parallel tool uses in records of their own, a subagent, a summary."""
    records: list[dict[str, Any]] = [{"type": "summary", "summary": "Fix add", "leafUuid": "u0"}]

    def record(kind: str, content: Any, second: int, **extra: Any) -> None:
        records.append({"type": kind, "sessionId": "s-5", "uuid": f"u{len(records)}", "cwd": "/home/dev/calc",
                        "timestamp": f"2026-01-01T10:00:{second:02d}.000Z",
                        "message": {"role": kind, "content": content}, **extra})

    def use(i: int, name: str, tool_input: dict[str, Any], second: int, result: str | list[dict[str, str]],
            **extra: Any) -> None:
        record("assistant", [{"type": "tool_use", "id": f"t{i}", "name": name, "input": tool_input}], second, **extra)
        record("user", [{"type": "tool_result", "tool_use_id": f"t{i}", "content": result}], second + 1, **extra)

    record("user", "Caveat: local commands below.", 0, isMeta=True)
    record("user", "Fix add() in calc/ops.py: it subtracts.", 1)
    record("assistant", [{"type": "thinking", "thinking": "Find add first."}], 2)
    record("assistant", [{"type": "text", "text": "Let me look."}], 3)
    use(1, "Grep", {"pattern": "def add", "path": "/home/dev/calc", "-i": True, "type": "py"}, 4, "calc/ops.py:1")
    use(2, "Read", {"file_path": "/home/dev/calc/calc/ops.py", "offset": 1, "limit": 20}, 6, "1\tdef add(a, b):")
    use(3, "LS", {"path": "/home/dev/calc"}, 8, "- calc/\n- tests/")
    use(4, "Bash", {"command": "python -m pytest -q"}, 10, [{"type": "text", "text": "1 failed"}])
    use(5, "Edit", {"file_path": "/home/dev/calc/calc/ops.py", "old_string": "a - b", "new_string": "a + b"}, 12,
        "The file has been updated.")
    use(6, "Glob", {"pattern": "**/*.py"}, 14, "calc/ops.py")
    use(7, "Write", {"file_path": "/home/dev/calc/NOTES.md", "content": "fixed\n"}, 16, "File created.")
    use(8, "Grep", {"pattern": "add"}, 18, "calc/ops.py", isSidechain=True, agentId="a1")
    record("assistant", [{"type": "text", "text": "Fixed."}], 20)
    return records


def _tao() -> list[Any]:
    """A Tao session: a speculated read promoted, a test run, the summary and the end."""
    return [SessionStart(0.0, "tao-6", "fix add", "/work/calc", "replay", ["grep", "read_file", "run_tests"],
                         {"max_steps": 5}, "2026-01-01T00:00:00+00:00"),
            LLMStart(0.0, 1, "tao-6-1", 2), LLMFirstToken(0.1, 1, "tao-6-1"),
            SpecLaunch(0.1, 1, "s1", "a", "read_file", {"path": "calc/ops.py"}, "pure", 0, "rule", 0.5),
            LLMEnd(0.4, 1, "tao-6-1", 'Read it.\n<tool_call>{"name": "read_file", "arguments": '
                                      '{"path": "calc/ops.py"}}</tool_call>', None, "stop", 100, 0, 20, 0.1, 0.3),
            ToolCall(0.4, 1, "call_1_0", "read_file", {"path": "calc/ops.py"}, "pure"),
            SpecPromote(0.4, 1, "s1", "call_1_0", 0.01, 0.0),
            ToolResult(0.41, 1, "call_1_0", "read_file", "1\tdef add(a, b):\n2\t    return a - b\n", False, 0, 0, 0,
                       0.01),
            LLMStart(0.41, 2, "tao-6-2", 4), LLMFirstToken(0.5, 2, "tao-6-2"),
            LLMEnd(0.8, 2, "tao-6-2", '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>', None, "stop",
                   140, 100, 12, 0.1, 0.2),
            ToolCall(0.8, 2, "call_2_0", "run_tests", {}, "sandboxed"),
            ToolResult(1.9, 2, "call_2_0", "run_tests", "1 failed", True, 1, 0, 0, 1.1),
            SpecSummary(2.0, 1, 1, 0, 0, 0.01, 0.0, {"read": {"promoted": 1.0}}),
            SessionEnd(2.0, "limit", "step limit", "", 2, "", 32)]


# -- mutations: each takes the generator and the bytes, and returns new bytes ---------------------------------

_WRONG: list[Any] = [None, 0, -1, 2**63, -(2**63), 10**30, 1e308, -1e-308, float("nan"), float("inf"),
                     float("-inf"), True, False, "", "x", "²", "\u0000", "\ud800", "a" * 5000, [], [None], [[1]],
                     {}, {"a": 1}, {"type": 1}]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randrange(len(data) + 1)]


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _line_op(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    match rng.choice(("delete", "duplicate", "swap", "shuffle", "reverse")):
        case "delete":
            del lines[i]
        case "duplicate":
            lines.insert(j, lines[i])
        case "swap":
            lines[i], lines[j] = lines[j], lines[i]
        case "shuffle":
            rng.shuffle(lines)
        case _:
            lines.reverse()
    return b"\n".join(lines)


def _bad_utf8(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80\x80")) + data[at:]


def _bom(rng: random.Random, data: bytes) -> bytes:
    return rng.choice((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")) + data


def _newlines(rng: random.Random, data: bytes) -> bytes:
    return data.replace(b"\n", rng.choice((b"\r\n", b"\r", b"\n\n", "\x85".encode(), "\u2028".encode())))


def _empty(rng: random.Random, data: bytes) -> bytes:
    return rng.choice((b"", b"\n", b" ", b"\x00", b"null", b"[]", b"{}", b'""', b"0"))


def _garbage(rng: random.Random, data: bytes) -> bytes:
    junk = rng.randbytes(rng.randint(1, 4096))
    return junk if rng.random() < 0.5 else data[:rng.randrange(len(data) + 1)] + junk


def _nul(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + b"\x00" * rng.randint(1, 4) + data[at:]


def _deep_text(rng: random.Random) -> str:
    depth = rng.choice((50, 500, 1000, 5000, _DEEP))
    return ("[" * depth + "]" * depth) if rng.random() < 0.5 else ('{"a":' * depth + "1" + "}" * depth)


def _structural(rng: random.Random, data: bytes) -> bytes:
    """Parse the file (the whole of it, or one line of a JSONL file), then damage one value in the tree."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    try:
        return _damage_doc(rng, json.loads(text)).encode("utf-8", errors="surrogatepass")
    except ValueError:
        pass
    candidates = [i for i, line in enumerate(lines) if line.strip().startswith("{")]
    if not candidates:
        return _flip(rng, data)
    i = rng.choice(candidates)
    try:
        lines[i] = _damage_doc(rng, json.loads(lines[i]))
    except ValueError:
        return _flip(rng, data)
    return "\n".join(lines).encode("utf-8", errors="surrogatepass")


def _damage_doc(rng: random.Random, doc: Any) -> str:
    """The document, one of its values replaced by a value of a wrong type (or a key dropped), as JSON text."""
    marker = "\u0001FUZZ\u0001"
    nodes: list[tuple[Any, Any]] = []  # (container, key or index)
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for key, value in items:
            nodes.append((node, key))
            stack.append(value)
    if not nodes:
        return json.dumps(rng.choice(_WRONG))
    container, key = rng.choice(nodes)
    action = rng.random()
    if action < 0.15 and isinstance(container, dict):
        del container[key]
        return json.dumps(doc, ensure_ascii=False)
    if action < 0.3:
        container[key] = marker
        special = rng.choice((_deep_text(rng), "9" * rng.choice((400, 5000)), "-" + "9" * 5000, "1e999",
                              "NaN", "-Infinity", '"\\ud800"', '"\\u0000"'))
        return json.dumps(doc, ensure_ascii=False).replace(json.dumps(marker), special)
    container[key] = rng.choice(_WRONG)
    return json.dumps(doc, ensure_ascii=False)


MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "truncate": _truncate, "flip": _flip, "lines": _line_op, "bad-utf8": _bad_utf8, "bom": _bom,
    "newlines": _newlines, "empty": _empty, "garbage": _garbage, "nul": _nul, "structure": _structural}
_WEIGHTS = {"structure": 8, "truncate": 3, "lines": 3, "flip": 2}


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, list[str]]:
    """`data` damaged by 1 to 3 mutations (structural ones most often); returns the bytes and their names."""
    names = list(MUTATIONS)
    weights = [_WEIGHTS.get(name, 1) for name in names]
    done = rng.choices(names, weights, k=rng.choice((1, 1, 1, 2, 3)))
    for name in done:
        data = MUTATIONS[name](rng, data)
    return data, done
