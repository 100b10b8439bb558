"""The oracle analyzer: knows the recording, so it foresees every call perfectly.

    analyzer = OracleAnalyzer(recording)
    open_session(options, task, ReplayEngine(recording, ...), workspace, analyzer=analyzer)

At moment (a) of each step (before the model call that emits them starts) it proposes the calls the
recorded turn of that step makes, each with probability 1; at (b) and (c) it proposes nothing, as
everything was already started. It runs through the same Session and SpeculationScheduler as Tao's
own analyzer, so the same rules hold: pure tools on the workspace, sandboxed ones in an overlay,
mutating ones never, the same budget, promotion only at the same workspace version. Its saving is
the most any predictor could get from speculation that starts at (a).
"""

from __future__ import annotations

from typing import Any

from harness import protocol
from harness.engine.recorded import Recording, Turn
from harness.events import Event, LLMEnd, SessionStart
from harness.calls.canonical import canonical
from harness.speculation.prediction.latency import modelled_latency
from harness.speculation.prediction.patterns import Candidate, Partial


def turn_calls(turn: Turn) -> list[tuple[str, dict[str, Any]]]:
    """The calls one recorded turn makes, parsed as the session parses them."""
    if turn.tool_calls:
        calls, _ = protocol.parse_native_calls(turn.tool_calls)
    else:
        parser = protocol.CallParser()
        parser.feed(turn.text)
        parser.finish()
        calls = parser.calls
    return [(call.name, dict(call.arguments)) for call in calls]


class OracleAnalyzer:
    """Proposes the recorded calls of the coming step at moment (a), with probability 1."""

    def __init__(self, recording: Recording) -> None:
        self.calls = [turn_calls(turn) for turn in recording.turns]
        self.turn = 0  # index of the turn the next model call will replay
        self.root = ""

    def observe(self, event: Event) -> None:
        """Follow the session: its root, and how many model turns have ended."""
        if isinstance(event, SessionStart):
            self.root, self.turn = event.repo, 0
        elif isinstance(event, LLMEnd):
            self.turn += 1

    def ahead(self, events: list[Event]) -> OracleAnalyzer:
        """For a chain past an edit: an oracle that foresees nothing, as this one starts every call at (a) of
        its own step."""
        return OracleAnalyzer(Recording([]))

    def predict(self, moment: str = "a", partial: Partial | None = None, k: int = 3) -> list[Candidate]:
        """The coming turn's calls at (a); nothing later, as they were all started at (a)."""
        if moment != "a" or self.turn >= len(self.calls):
            return []
        return [self._candidate(name, arguments) for name, arguments in self.calls[self.turn][:k]]

    def _candidate(self, name: str, arguments: dict[str, Any]) -> Candidate:
        action = canonical(name, arguments, self.root)
        saved = modelled_latency(action)
        return Candidate(name, arguments, action.key, action.kind, action.effect, 1.0, saved, 0.0, saved, "oracle")
