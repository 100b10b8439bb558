"""What every importer shares: a builder of Tao events for one session and a report of what was skipped."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from harness import jsonl
from harness.events import (Event, FormatError, LLMEnd, LLMFirstToken, LLMStart, SessionEnd, SessionStart, ToolCall,
                            ToolResult)
from harness.calls.action import changes_workspace
from harness.calls.canonical import canonical
from tools import TOOL_EFFECTS, Effect

TAO_TOOLS = sorted(TOOL_EFFECTS)
MAX_DURATION = 86_400.0  # a tool "running" longer than a day is a clock's error or a night's pause, not its time


@dataclass
class ImportReport:
    """Sessions imported and records skipped (unknown or damaged), each with where and why.

    `errors` lists files an importer failed on in a way it did not foresee (a bug, caught so that the other
    files are still imported); each is in `skipped` too."""

    sessions: int = 0
    actions: int = 0
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    """Records of kinds that hold no calls (an agent's progress or bookkeeping records), by kind: nothing is lost
    by leaving them out, so they are only counted."""

    def skip(self, where: str, why: str) -> None:
        """Record a skipped record: where it was and why it was skipped."""
        self.skipped.append(f"{where}: {why}")

    def ignore(self, kind: str) -> None:
        """Count a record left out because its kind holds no calls."""
        self.ignored[kind] = self.ignored.get(kind, 0) + 1

    def failed(self, where: str, exc: BaseException) -> None:
        """Record a file an importer failed on unexpectedly: skipped, and kept in `errors` to be reported."""
        error = f"{type(exc).__name__}: {exc}"
        self.errors.append(f"{where}: {error}")
        self.skip(where, f"the importer failed on it ({error}); please report this with the file")


def read_object(path: Path, report: ImportReport, what: str) -> dict[str, Any] | None:
    """The JSON object a whole file holds; None (and a skip that says why) when it is unreadable, not JSON, or
    JSON but no object (then it is no `what`)."""
    try:
        data = jsonl.parse(jsonl.read_regular(path))
    except OSError as exc:
        report.skip(str(path), f"unreadable ({jsonl.describe(exc)})")
        return None
    except jsonl.DamagedJSON as exc:
        report.skip(str(path), f"not a JSON file: {exc}")
        return None
    if not isinstance(data, dict):
        report.skip(str(path), f"JSON but not an object: not {what}")
        return None
    return data


def read_lines(path: Path, report: ImportReport) -> list[tuple[int, bytes]] | None:
    """The non-blank lines of a JSONL file, numbered; None (and a skip that says why) when it is unreadable."""
    try:
        return [(number, line) for number, line in jsonl.split_lines(jsonl.read_regular(path)) if line.strip()]
    except OSError as exc:
        report.skip(str(path), f"unreadable ({jsonl.describe(exc)})")
        return None


def read_records(path: Path, report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file, numbered; a damaged line or one that is not an object is reported and
    skipped, and an unreadable file yields nothing (read_lines says why)."""
    for number, line in read_lines(path, report) or []:
        try:
            record = jsonl.parse(line)
        except jsonl.DamagedJSON as exc:
            report.skip(f"{path}:{number}", f"damaged JSON ({exc})")
            continue
        if not isinstance(record, dict):
            report.skip(f"{path}:{number}", "not a JSON object")
            continue
        yield number, record


def seconds(value: Any) -> float | None:
    """A time or duration in seconds when `value` is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def measured(value: Any) -> float:
    """A tool's recorded seconds, or 0.0 for unknown (ToolResult's "not measured"): a value that is no finite
    number, negative or zero, or absurd (over MAX_DURATION) is no measurement, and must not count as one."""
    number = seconds(value)
    return number if number is not None and 0.0 < number <= MAX_DURATION else 0.0


def elapsed(start: float | None, end: float | None) -> float:
    """The seconds from `start` to `end` as a measured duration (`measured`); 0.0 (unknown) if either is missing."""
    return measured(end - start) if start is not None and end is not None else 0.0


def iso_time(epoch: float | None) -> str:
    """An epoch time as ISO 8601 in UTC, as SessionStart.started_at holds it; empty when unknown or out of range."""
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds") if epoch is not None else ""
    except (ValueError, OverflowError, OSError):
        return ""


def obj(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one: a field of the wrong type counts as absent."""
    return value if isinstance(value, dict) else {}


def objects(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (other items and any non-list value count as absent)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def string(value: Any) -> str:
    """`value` if it is a string, else empty."""
    return value if isinstance(value, str) else ""


@dataclass
class Imported:
    """One session in Tao's event schema, with the file it came from."""

    session_id: str
    source: str
    format: str
    events: list[Event]


class SessionBuilder:
    """Builds the event list of one session step by step; times are seconds since the session start.

    Imported calls get Tao's effect class of their tool name, and the workspace version goes up after
    every call that may change files (mutating calls and scripts), as Tao's own sessions count it.
    """

    def __init__(self, session_id: str, task: str, repo: str, source_format: str, started_at: str = "",
                 config: dict[str, Any] | None = None, tools: list[str] | None = None) -> None:
        """`tools`: what the recorded agent could call (default a shell only); calls map to Tao's names."""
        self.session_id, self.repo = session_id, repo
        self.events: list[Event] = [SessionStart(0.0, session_id, task, repo, f"import:{source_format}",
                                                 tools or ["bash", "finish"],
                                                 {"source_format": source_format, **(config or {})}, started_at)]
        self.step, self.version, self.calls, self.t = 0, 0, 0, 0.0
        self._open: dict[str, ToolCall] = {}

    def at(self, t: float | None) -> float:
        """Advance the clock to `t` (never backwards); None (or a time that is no finite number) keeps it."""
        t = seconds(t)
        if t is not None and t > self.t:
            self.t = round(t, 6)
        return self.t

    def turn(self, text: str, t: float | None = None, native: list[dict[str, Any]] | None = None,
             output_tokens: int = 0, prompt_tokens: int = 0) -> int:
        """One model answer: llm_start, llm_first_token and llm_end with its full text."""
        self.step += 1
        request_id = f"{self.session_id}-{self.step}"
        start = self.t
        self.events.append(LLMStart(start, self.step, request_id, 2 * self.step))
        self.events.append(LLMFirstToken(start, self.step, request_id))
        end = self.at(t)
        self.events.append(LLMEnd(end, self.step, request_id, text, native, "stop", prompt_tokens, 0, output_tokens))
        return self.step

    def call(self, name: str, arguments: dict[str, Any], call_id: str | None = None) -> str:
        """A tool call of the current step; returns its call id."""
        self.calls += 1
        call_id = call_id or f"call_{self.step}_{self.calls}"
        event = ToolCall(self.t, self.step, call_id, name, arguments, TOOL_EFFECTS.get(name, Effect.UNKNOWN).value)
        self.events.append(event)
        self._open[call_id] = event
        return call_id

    def result(self, call_id: str, output: str, exit_code: int | None = None, is_error: bool = False,
               duration: float = 0.0, truncated: int = 0, t: float | None = None) -> None:
        """The observation of an open call; `duration` is the tool's measured seconds (0.0: not measured, and
        so is anything `measured` refuses)."""
        call = self._open.pop(call_id)
        if changes_workspace(canonical(call.name, call.arguments, self.repo)):
            self.version += 1
        duration = measured(duration)
        self.at(t if seconds(t) is not None else self.t + duration)
        self.events.append(ToolResult(self.t, call.step, call_id, call.name, output, is_error, exit_code, truncated,
                                      self.version, round(duration, 6)))

    def format_error(self, error: str) -> None:
        """An answer without a usable call."""
        self.events.append(FormatError(self.t, self.step, error))

    def end(self, status: str, reason: str, summary: str = "", submission: str = "") -> Imported:
        """Close the session with session_end and return it."""
        self.events.append(SessionEnd(self.t, status, reason, summary, self.step, submission))
        return Imported(self.session_id, "", "", self.events)


def write_session(session: Imported, out_dir: Path) -> Path:
    """Write one imported session as `<out_dir>/<session_id>.jsonl` (replacing an older import)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in session.session_id[:120]) or "session"
    path = out_dir / f"{safe}.jsonl"
    # backslashreplace writes a lone surrogate (from a "\\ud800" escape in the source) as the same JSON escape
    path.write_text("".join(event.to_json() + "\n" for event in session.events), encoding="utf-8",
                    errors="backslashreplace")
    return path
