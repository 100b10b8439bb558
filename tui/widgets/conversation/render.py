"""How calls, results and edits look: short one-line summaries and coloured diffs, as rich Text."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from rich.text import Text

from harness.protocol import CLOSE, OPEN

_CALL_MARKUP = re.compile(re.escape(OPEN) + r".*?(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


def call_summary(name: str, arguments: dict[str, Any], width: int = 80) -> Text:
    """`name(arg=value, ...)` on one line, cut to `width` characters."""
    parts = [f"{key}={_short(value)}" for key, value in arguments.items()]
    line = f"{name}({', '.join(parts)})"
    if len(line) > width:
        line = line[: width - 1] + "…"
    text = Text(line)
    text.stylize("bold", 0, len(name))
    return text


def _short(value: Any) -> str:
    """One argument value, on one line, at most 40 characters."""
    shown = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    shown = shown.replace("\\n", "⏎")
    return shown if len(shown) <= 40 else shown[:39] + "…"


def prose(raw: str) -> str:
    """The model's words in an answer, without the tool-call markup (calls are shown on their own)."""
    return _CALL_MARKUP.sub("", raw).strip()


def colour_diff(diff: str) -> Text:
    """A unified diff with added lines green, removed lines red and hunk headers cyan."""
    text = Text()
    for line in diff.splitlines():
        style = ("bold" if line.startswith(("diff --git", "+++", "---", "index ")) else
                 "cyan" if line.startswith("@@") else
                 "green" if line.startswith("+") else
                 "red" if line.startswith("-") else "")
        text.append(line + "\n", style=style)
    text.rstrip()
    return text


def edit_diff(arguments: dict[str, Any]) -> Text | None:
    """An edit_file or write_file call's change as a coloured diff; None for other arguments."""
    path = str(arguments.get("path", "file"))
    if isinstance(arguments.get("old"), str) and isinstance(arguments.get("new"), str):
        before, after = arguments["old"], arguments["new"]
    elif isinstance(arguments.get("content"), str):
        before, after = "", arguments["content"]
    else:
        return None
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"a/{path}", f"b/{path}", lineterm="")
    return colour_diff("\n".join(lines))
