"""Replaying a recorded session through an analyzer, one event at a time, predicting before each call.

This loop is how the analyzer is trained and benchmarked, and it is what makes "never look ahead"
structural: events come from an iterator; a call is predicted at moments (a), (b) and (c) before the
analyzer is fed the model answer that holds it (its `llm_end`) or the call itself. At (b) the analyzer
gets only the reasoning written before the call; at (c) also the call's name and the first
`prefix_chars` characters of its first argument.

A turn of several calls is replayed as the model wrote it (harness.speculation.prediction.turns): its
calls in order, then its results, so no call is predicted after a sibling's result. Its later calls are
predicted at (b) and (c) knowing the calls before them (streamed first); at (a), the turn's start, every
call of the turn gets the one prediction made before its first call was seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.events import Event, LLMEnd, SessionStart, ToolCall
from harness.calls.action import Action
from harness.calls.canonical import canonical
from harness.speculation.prediction.extract import reasoning_part
from harness.speculation.prediction.patterns import Analyzer, Candidate, Partial
from harness.speculation.prediction.prefix import first_value
from harness.speculation.prediction.turns import in_turn_order
from harness.vocabulary import Moment

PREFIX_CHARS = 8


@dataclass
class Decision:
    """The predictions made for one real call, before it was seen."""

    index: int
    call: ToolCall
    action: Action
    predictions: dict[str, list[Candidate]] = field(default_factory=dict)  # by probability, per moment
    seconds: dict[str, float] = field(default_factory=dict)

    def top(self, moment: str, k: int, order: str = "probability") -> list[Candidate]:
        """The first `k` candidates at `moment`, by probability or by utility (as the scheduler launches)."""
        ranked = self.predictions.get(moment, [])
        if order == "utility":
            ranked = sorted(ranked, key=lambda c: -c.utility)
        return ranked[:k]


def replay(analyzer: Analyzer, events: Iterable[Event], k: int = 12, prefix_chars: int = PREFIX_CHARS,
           on_decision: Callable[[Decision], None] | None = None,
           on_observed: Callable[[Event], None] | None = None) -> list[Decision]:
    """Feed `events` to `analyzer` in turn order, predicting every call at the three moments first;
    `on_observed` is called after each event is fed (a call: before any result of its turn is)."""
    decisions: list[Decision] = []
    held: LLMEnd | None = None
    text, root = "", ""
    turn: int | None = None  # the step of the latest answer
    opening: Decision | None = None  # the first decision of that answer: its (a) is that of all its calls
    for event in in_turn_order(events):
        if isinstance(event, SessionStart):
            root = event.repo
        if isinstance(event, LLMEnd):
            held, text, turn, opening = event, event.text, event.step, None
            continue
        if isinstance(event, ToolCall):
            of_turn = event.step == turn
            decision = _decide(analyzer, event, canonical(event.name, event.arguments, root), text, k, prefix_chars,
                               opening if of_turn else None)
            decision.index = len(decisions)
            decisions.append(decision)
            if of_turn and opening is None:
                opening = decision
            if on_decision is not None:
                on_decision(decision)
        if held is not None:
            analyzer.observe(held)
            held = None
        analyzer.observe(event)
        if on_observed is not None:
            on_observed(event)
    return decisions


def _decide(analyzer: Analyzer, call: ToolCall, action: Action, text: str, k: int, prefix_chars: int,
            opening: Decision | None = None) -> Decision:
    """One call's predictions; a later call of a turn takes (a) from the turn's `opening` decision."""
    command = call.arguments.get("command") if isinstance(call.arguments.get("command"), str) else None
    reasoning = reasoning_part(text, command)
    decision = Decision(0, call, action)
    partials = {Moment.A: None, Moment.B: Partial(reasoning),
                Moment.C: Partial(reasoning, call.name, first_value(call.arguments)[:prefix_chars])}
    for moment, partial in partials.items():
        if moment is Moment.A and opening is not None:  # made once, at the turn's start
            decision.predictions[moment] = list(opening.predictions[moment])
            decision.seconds[moment] = opening.seconds[moment]
            continue
        started = time.perf_counter()
        decision.predictions[moment] = analyzer.predict(moment, partial, k, order="probability")
        decision.seconds[moment] = time.perf_counter() - started
    return decision
