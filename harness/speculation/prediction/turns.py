"""A recorded session's events in the order the model knew them: each turn's results after all its calls.

A model writes every call of one answer before any of them runs, but recordings interleave the calls
with their results: Claude Code and Codex imports give call, result, call, result; Tao's own sessions give
one group of side-by-side calls after another (harness.together). Replayed in that order, a turn's second
call would be predicted knowing its sibling's result, which the model did not have. Learning and the
benchmarks read sessions through `in_turn_order`, so that no call is predicted, or counted, after a result
of its own turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from harness.events import Event, LLMEnd, ToolResult


def in_turn_order(events: Iterable[Event]) -> Iterator[Event]:
    """`events`, lazily, with the results of each model turn held back until the turn ends.

    A turn is an `llm_end` and the events of its step that follow it; it ends at the first event of another
    step or of none (the next `llm_start`, `turn_end`, `session_end`), at the next `llm_end`, or with the
    events. Its results are then yielded in their recorded order, before that event. Results outside a
    turn (no `llm_end` before them) stay where they are."""
    step: int | None = None  # the step of the turn being read
    held: list[ToolResult] = []
    for event in events:
        if step is not None and (isinstance(event, LLMEnd) or getattr(event, "step", None) != step):
            yield from held
            step, held = None, []
        if isinstance(event, LLMEnd):
            step = event.step
        elif isinstance(event, ToolResult) and step is not None:
            held.append(event)
            continue
        yield event
    yield from held
