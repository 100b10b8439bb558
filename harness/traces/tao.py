"""Importer for Tao's own trajectories (JSONL events): validated, with damaged lines reported and skipped."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness import jsonl
from harness.events import Event, SessionStart, UnknownEvent, from_dict
from harness.traces.common import Imported, ImportReport, read_lines

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
    return [Imported(start.session_id or path.stem, str(path), FORMAT, events)]
