"""The user's past Tao sessions, newest first: what the analyzer adapts to before a new session starts.

    taken = adapt(model, past_sessions(state_dir() / "trajectories"), seconds=PAST_SECONDS)

The learned model comes from other agents' trajectories; the user's own sessions show Tao's tools and
the user's projects, which is what the next session will look like.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from harness.events import Event, ToolCall
from harness.history import saved_sessions
from harness.traces import tao
from harness.traces.common import ImportReport

PAST_SESSIONS = 20  # the newest trajectories taken
PAST_SECONDS = 1.0  # at most this long at the start of a session (about 30 ms a 10-step session)


def past_sessions(directory: Path, limit: int = PAST_SESSIONS) -> Iterator[list[Event]]:
    """The events of the newest `limit` Tao trajectories under `directory` that made a call, newest first.

    Read lazily, so a caller that stops early reads no more. Damaged lines, damaged or unreadable files and
    what is no regular file are skipped without a word: a new session must start whatever the folder holds."""
    if limit <= 0 or not directory.is_dir():
        return
    taken = 0
    for path in saved_sessions(directory):
        try:
            sessions = tao.load(path, ImportReport())
        except Exception:  # what the importer did not foresee must not stop `tao run` either
            continue
        for imported in sessions:
            if taken < limit and any(isinstance(event, ToolCall) for event in imported.events):
                taken += 1
                yield imported.events
        if taken >= limit:
            return
