"""Importer for Tao's own trajectories (JSONL events): validated, with damaged lines reported and skipped.

A call's `duration` is what its tool took: for a call a speculation answered, that run's time (`saved` +
`waited` of its spec_promote), not the moment the call waited for it; one `measured` refuses is unknown (0).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from harness import jsonl
from harness.events import Event, SessionStart, SpecPromote, ToolResult, UnknownEvent, from_dict
from harness.traces.common import Imported, ImportReport, measured, read_lines

FORMAT = "tao"
_START = re.compile(r'^\{"type":\s*"[a-z_]+",\s*"t":\s*-?\d')


def sniff(path: Path, head: str) -> bool:
    """A .jsonl file whose first line is a Tao event (an object with `type` and a number `t`)."""
    if path.suffix != ".jsonl":
        return False
    try:
        first = json.loads(head.split("\n", 1)[0])
    except json.JSONDecodeError:  # a first line longer than the head: Tao writes `type` then `t` first
        return bool(_START.match(head))
    except (ValueError, RecursionError):  # nested too deeply to be an event
        return False
    return isinstance(first, dict) and isinstance(first.get("type"), str) and isinstance(first.get("t"), (int, float))


def load(path: Path, report: ImportReport) -> list[Imported]:
    """The session of a Tao trajectory; unknown event types are kept, damaged lines skipped."""
    lines = read_lines(path, report)
    if lines is None:
        return []
    events: list[Event] = []
    for number, line in lines:
        try:
            event = from_dict(jsonl.parse(line))
        except ValueError as exc:  # DamagedJSON or EventDecodeError
            report.skip(f"{path}:{number}", f"damaged event ({exc})")
            continue
        if isinstance(event, UnknownEvent):
            report.skip(f"{path}:{number}", f"unknown event type {event.raw.get('type')!r} (kept)")
        events.append(event)
    start = next((e for e in events if isinstance(e, SessionStart)), None)
    if start is None:
        report.skip(str(path), "no session_start event")
        return []
    return [Imported(start.session_id or path.stem, str(path), FORMAT, tool_times(events))]


def tool_times(events: list[Event]) -> list[Event]:
    """The events with each result's `duration` the time its tool ran (see the module's docstring); the same
    events, unchanged, where every duration already is."""
    ran = {e.call_id: e.saved + e.waited for e in events if isinstance(e, SpecPromote)}
    out: list[Event] = []
    for event in events:
        if isinstance(event, ToolResult):
            duration = measured(ran.get(event.call_id, event.duration))
            event = event if duration == event.duration else replace(event, duration=duration)
        out.append(event)
    return out
