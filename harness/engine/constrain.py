"""Constrained decoding for small models: every turn is short reasoning text and then one tool call.

The constraint is an xgrammar structural tag (vLLM's `structured_outputs.structural_tag`), built from
the request's OpenAI-style tool specs:

    <any text, at most `reasoning_tokens` tokens, without "<tool_call>">
    <tool_call>{"name": "<one of the tools>", "arguments": <JSON matching that tool's schema>}</tool_call>

The final answer is the `finish` tool, so "a call or a final answer" is simply "a call". Decoding stops
at `</tool_call>`, so a small model cannot ramble past its call; that stop string is therefore excluded
from the reasoning and from the call's string values, where it would end the answer before its call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.protocol import CLOSE, OPEN

REASONING_TOKENS = 64
"""Default bound on the free text before the call."""
MAX_WHITESPACE = 2
"""Longest run of whitespace allowed inside the call's JSON (stops a model padding with newlines)."""
STOP = [CLOSE]
_REGEX_META = re.compile(r"([.^$*+?{}\[\]\\|()])")


def literal_regex(text: str) -> str:
    """A regex that matches exactly `text`, for forcing a recorded answer.

    Unlike `re.escape`, only regex operators are escaped: xgrammar warns on every escaped space,
    newline, `#` or `~` (thousands of log lines a forced session) and then matches the character anyway.
    """
    return _REGEX_META.sub(r"\\\1", text)


def call_prefix(name: str) -> str:
    """The fixed start of a call to `name`, in the spelling the system prompt teaches."""
    return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '


def arguments_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments object; a tool without one takes an empty object."""
    schema = spec.get("function", spec).get("parameters") or {}
    if not schema:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return schema


def structural_tag(tools: list[dict[str, Any]], reasoning_tokens: int = REASONING_TOKENS) -> dict[str, Any]:
    """The structural tag allowing bounded reasoning text, then exactly one well-formed call."""
    if not tools:
        raise ValueError("constrained decoding needs at least one tool spec")
    calls = [
        {"type": "tag",
         "begin": call_prefix(spec.get("function", spec)["name"]),
         "content": {"type": "json_schema", "json_schema": arguments_schema(spec),
                     "max_whitespace_cnt": MAX_WHITESPACE, "excludes": [CLOSE]},
         "end": "}"}
        for spec in tools
    ]
    reasoning = {"type": "tag", "begin": "",
                 "content": {"type": "any_text", "max_tokens": reasoning_tokens, "excludes": [CLOSE]}, "end": OPEN}
    body = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    return {"type": "structural_tag",
            "format": {"type": "sequence", "elements": [reasoning, body, {"type": "const_string", "value": CLOSE}]}}


def structural_tag_json(tools: list[dict[str, Any]], reasoning_tokens: int = REASONING_TOKENS) -> str:
    """`structural_tag` serialised the way vLLM's StructuredOutputsParams takes it."""
    return json.dumps(structural_tag(tools, reasoning_tokens), ensure_ascii=False, separators=(",", ":"))
