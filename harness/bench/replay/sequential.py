"""`tao bench replay --sequential`: each session predicted by the model adapted to its user's earlier sessions.

As `tao run` adapts the model it loads (harness.launch.session_patterns): the ranker trained further
(harness.speculation.prediction.training.adapt) on the newest PAST_SESSIONS earlier sessions that made a
call, newest first; here without adapt's time limit, so that the result does not depend on the machine.
No trace names its user, so a user is a project: the repository of a SWE-bench instance id, else the
working directory. Earlier means ended before this session started (SessionStart.started_at plus the
last event's time), so a session still running, a subagent's parent for one, teaches nothing; a session
whose start is not recorded has no earlier sessions and is earlier than none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from harness.events import Event, SessionStart, ToolCall
from harness.speculation.prediction.past import PAST_SESSIONS
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.ranker import Ranker
from harness.speculation.prediction.training import adapt
from harness.traces import Imported


@dataclass(frozen=True)
class Span:
    """One session of a user's history: whose, when it started and ended (epoch seconds), its events."""

    owner: str
    start: float | None
    end: float | None
    events: list[Event]


def owner(start: SessionStart) -> str:
    """The project a session belongs to: `owner__repo` of a SWE-bench instance id (`owner__repo-1234`), else the
    working directory."""
    instance = start.config.get("instance_id")
    if isinstance(instance, str) and "__" in instance and "-" in instance:
        return instance.rsplit("-", 1)[0]
    return start.repo


def epoch(stamp: str) -> float | None:
    """An ISO time (UTC when it names no zone) as epoch seconds; None when it is empty or no time."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def span(session: Imported) -> Span | None:
    """A session's place in its user's history; None when it has no session_start."""
    start = next((e for e in session.events if isinstance(e, SessionStart)), None)
    if start is None:
        return None
    began = epoch(start.started_at)
    last = max((e.t for e in session.events), default=0.0)
    return Span(owner(start), began, None if began is None else began + last, session.events)


def earlier(session: Imported, history: list[Span], limit: int = PAST_SESSIONS) -> list[list[Event]]:
    """The events of the newest `limit` sessions of the same user in `history` that made a call and ended before
    `session` started, newest first (as harness.speculation.prediction.past gives them to `tao run`)."""
    this = span(session)
    if this is None or this.start is None:
        return []
    done = [s for s in history if s.owner == this.owner and s.end is not None and s.end <= this.start
            and s.events is not session.events and any(isinstance(e, ToolCall) for e in s.events)]
    done.sort(key=lambda s: s.end or 0.0, reverse=True)
    return [s.events for s in done[:limit]]


def adapted(model: PatternModel, past: list[list[Event]]) -> PatternModel:
    """A copy of `model` adapted to `past` (newest first); `model` itself is left as it was (adapting trains only
    the ranker, so the copy has a ranker of its own, as a freshly loaded model's)."""
    copy = replace(model, ranker=Ranker(model.ranker.weights, model.ranker.rate))
    adapt(copy, past)
    return copy
