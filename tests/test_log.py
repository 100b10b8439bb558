"""The headless log shows what the model and the tools printed, never as terminal control sequences."""

from __future__ import annotations

import io

from harness.events import LLMEnd, ToolCall, ToolResult
from harness.log import HumanLog


def test_control_characters_from_the_model_and_tools_are_shown_escaped() -> None:
    stream = io.StringIO()
    log = HumanLog(stream)
    log(LLMEnd(1.0, 1, "r1", "I will \x1b[2J\x1b[31mclear\x07 your screen\r\n<tool_call>{}</tool_call>", None, "stop",
               10, 0, 5, 0.1, 0.2))
    log(ToolResult(2.0, 1, "c1", "run_tests", "line\x1b]0;title\x07\nnul\x00here\ttab", False, 0, 0, 0, 0.1))
    out = stream.getvalue()
    assert "\x1b" not in out and "\x07" not in out and "\x00" not in out and "\r" not in out
    assert "\\x1b[2J" in out and "\\x00" in out
    assert "\ttab" in out  # tabs and line breaks stay as they are


def test_call_arguments_show_numbers_and_booleans_bare_and_text_quoted() -> None:
    line = HumanLog().format(ToolCall(1.0, 1, "c1", "read_file",
                                      {"path": "x", "start_line": 4, "whole": True, "ratio": 0.5, "skip": None,
                                       "globs": ["*.py"]}, "pure"))
    assert line is not None
    assert "read_file(path='x', start_line=4, whole=True, ratio=0.5, skip=None, globs=[\"*.py\"])" in line
