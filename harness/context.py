"""What goes into the model's context besides the conversation, and keeping the conversation inside the window.

- `project_instructions(root)`: the repository's own instructions for agents (AGENTS.md, then CLAUDE.md),
  bounded in size, for the system prompt. No such file: None, and the system prompt stays byte for byte
  what it was.
- `window_of(engine)`: the engine's context window in tokens, or None when it does not know it.
- `Meter`: estimates the next prompt's tokens from the last request's real count (tokens per character),
  so that no extra tokenization runs on each step.
- `plan_compaction(...)`: which older tool observations to replace by short stubs, mechanically (a small
  model cannot summarise), so the prompt falls well below the window. The system prompt, the task, every
  answer of the model and every user message stay; so do the observations of the recent turns.

The stubs depend only on the message they replace, and the compaction event records which messages were
stubbed: a resumed session rebuilds the same conversation (harness.history.rebuild).
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")  # read in this order; the first takes the budget first
MAX_INSTRUCTIONS_CHARS = 6000  # both files together: a small model's window is 8k tokens
COMPACT_AT = 0.8  # compact when the next prompt would fill this share of the window...
COMPACT_TO = 0.5  # ...down to this share, so the prefix cache stays valid for many steps between compactions
KEEP_TURNS = 3  # the observations of the model's last answers are never stubbed
DEFAULT_TOKENS_PER_CHAR = 0.25  # before any request has been counted
_RESULT = re.compile(r'\A(<tool_result name="[^"\n]*">\n)(.*)(\n</tool_result>)\Z', re.S)
STUB_MARK = "[earlier output elided to keep the context short"


def project_instructions(root: Path, limit: int = MAX_INSTRUCTIONS_CHARS) -> str | None:
    """The system prompt's section of the project's instructions (AGENTS.md, CLAUDE.md at `root`), or None.

    A file that is no regular file, cannot be read, or repeats one already read (CLAUDE.md linked to
    AGENTS.md) is left out; text past `limit` characters is cut, and the prompt says how much was cut.
    """
    parts: list[str] = []
    seen: set[str] = set()
    budget = limit
    for name in INSTRUCTION_FILES:
        text = _read_text(root / name, limit * 4 + 4)
        if text is None or not text.strip() or text in seen:
            continue
        seen.add(text)
        total = _size(root / name, text)
        shown = text[:max(budget, 0)].rstrip()
        note = f"\n[{name} truncated: {total - len(shown):,} more characters not shown]" if total > len(shown) else ""
        parts.append(f"## {name}\n{shown}{note}")
        budget -= len(shown)
    if not parts:
        return None
    return ("# Project instructions\n"
            "The repository's own instructions for coding agents, written by its maintainers. Follow them where "
            "they apply to the task.\n\n" + "\n\n".join(parts))


def _read_text(path: Path, max_bytes: int) -> str | None:
    """The start of a regular file as text (bad UTF-8 replaced), or None; never opens a FIFO or a device."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        with path.open("rb") as handle:
            return handle.read(max_bytes).decode("utf-8", errors="replace")
    except OSError:
        return None


def _size(path: Path, text: str) -> int:
    """The file's length in characters, estimated from its bytes when only its start was read."""
    try:
        size = path.stat().st_size
    except OSError:
        return len(text)
    read = len(text.encode("utf-8"))
    return len(text) if size <= read else len(text) + (size - read)


def window_of(engine: Any) -> int | None:
    """The engine's context window in tokens (`max_model_len`), or None for engines that do not know it."""
    window = getattr(engine, "max_model_len", None)
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def chars_of(messages: list[dict[str, Any]]) -> int:
    """The characters of the messages' contents (and native calls), what the token estimate scales."""
    total = 0
    for message in messages:
        total += len(str(message.get("content") or ""))
        if message.get("tool_calls"):
            total += len(str(message["tool_calls"]))
    return total


@dataclass
class Meter:
    """Estimates prompt tokens from characters, calibrated on the last request the engine counted."""

    tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR

    def calibrate(self, messages: list[dict[str, Any]], prompt_tokens: int) -> None:
        """Learn the ratio from a request whose prompt the engine counted."""
        chars = chars_of(messages)
        if prompt_tokens > 0 and chars > 0:
            self.tokens_per_char = prompt_tokens / chars

    def estimate(self, messages: list[dict[str, Any]]) -> int:
        return round(chars_of(messages) * self.tokens_per_char)


def limit_for(window: int, max_tokens: int) -> int:
    """The prompt size past which a session compacts: COMPACT_AT of the window, and room for an answer."""
    return int(min(window * COMPACT_AT, window - min(max_tokens, window // 2)))


def is_stub(message: dict[str, Any]) -> bool:
    return STUB_MARK in str(message.get("content") or "")


def observation_body(message: dict[str, Any]) -> str | None:
    """The output a tool-result message carries (native `tool` role or the text protocol's tag), else None."""
    content = message.get("content")
    if not isinstance(content, str):
        return None
    if message.get("role") == "tool":
        return content
    if message.get("role") == "user" and (match := _RESULT.match(content)):
        return match.group(2)
    return None


def stub(message: dict[str, Any]) -> dict[str, Any]:
    """The message with its output replaced by a one-line note of what was there (a pure function of it)."""
    body = observation_body(message) or ""
    lines = body.count("\n") + 1 if body else 0
    note = (f"{STUB_MARK}: {lines:,} lines, {len(body):,} characters. Call the tool again if you need it.]")
    if message.get("role") == "tool":
        return {**message, "content": note}
    match = _RESULT.match(message["content"])
    assert match is not None
    return {**message, "content": match.group(1) + note + match.group(3)}


def candidates(messages: list[dict[str, Any]], keep_turns: int = KEEP_TURNS) -> list[int]:
    """Indices of observations that may be stubbed, oldest first: past the task, before the last answers,
    not stubbed already, and longer than their stub."""
    answers = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    recent = answers[-keep_turns] if len(answers) >= keep_turns else 0
    found = []
    for index in range(2, recent):
        message = messages[index]
        body = observation_body(message)
        if body is not None and not is_stub(message) and len(body) > len(STUB_MARK) + 80:
            found.append(index)
    return found


def plan_compaction(messages: list[dict[str, Any]], meter: Meter, target: int | None) -> list[int]:
    """The observations to stub, oldest first, until the estimate is at most `target` (None: all of those before
    the last KEEP_TURNS answers). When keeping those turns whole cannot reach the target, fewer are kept, down
    to the last answer's own observations, which the model is about to read."""
    chosen: list[int] = []
    for keep in range(KEEP_TURNS, 0, -1):
        chosen, tokens = [], meter.estimate(messages)
        for index in candidates(messages, keep):
            if target is not None and tokens <= target:
                break
            tokens -= round((chars_of([messages[index]]) - chars_of([stub(messages[index])])) * meter.tokens_per_char)
            chosen.append(index)
        if target is None or tokens <= target:
            break
    return chosen


def apply_stubs(messages: list[dict[str, Any]], indices: list[int]) -> list[dict[str, Any]]:
    """The messages with the observations at `indices` stubbed (indices that are no observation are left)."""
    out = list(messages)
    for index in indices:
        if 0 <= index < len(out) and observation_body(out[index]) is not None and not is_stub(out[index]):
            out[index] = stub(out[index])
    return out
