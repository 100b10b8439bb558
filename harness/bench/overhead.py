"""Time what speculation adds to a session's hot path, without changing what it does.

    meter = Meter.attach(session, events)   # after open_session(...), before session.run()

It wraps, on this one session's objects: the analyzer's `predict`, the scheduler's `launch` (predict,
admission, starting the tasks; with `chain` and `start_streamed`, the other two ways a speculation
starts), `take` (less the time it waited for a still-running speculation, which is tool time, not
bookkeeping), `observe` (the analyzer following every event) and `close`
(killing what still runs at the end and removing its overlays, before session_end). All of these run
on the event loop between two tokens, before a tool call or before the session ends, so their sum is
added session time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.events import Event, SpecPromote
from harness.protocol import ParsedCall
from harness.session import Session
from tools.base import Observation


@dataclass
class Meter:
    """Seconds spent in each part of the speculation machinery during one session."""

    launch: list[float] = field(default_factory=list)
    take: list[float] = field(default_factory=list)
    predict: list[float] = field(default_factory=list)
    observe: float = 0.0
    close: float = 0.0  # ending the session: killing what still runs and removing its overlays

    @classmethod
    def attach(cls, session: Session, events: list[Event]) -> Meter:
        """Wrap the session's scheduler and analyzer; `events` is a sink list of the same session."""
        meter = cls()
        scheduler = session.speculation
        if scheduler is None:
            return meter
        analyzer: Any = scheduler.analyzer
        # On its class, not the instance: a copy the analyzer makes of itself (`ahead`, to predict past an edit)
        # must predict from its own state, and a wrapper bound to this instance would answer from the original's.
        timed_predict = meter._timed(type(analyzer).predict, meter.predict)  # a plain function: a method on a class
        analyzer.__class__ = type(f"Metered{type(analyzer).__name__}", (type(analyzer),), {"predict": timed_predict})
        scheduler.launch = meter._timed(scheduler.launch, meter.launch)  # type: ignore[method-assign]
        scheduler.chain = meter._timed(scheduler.chain, meter.launch)  # type: ignore[method-assign]
        scheduler.start_streamed = meter._timed(scheduler.start_streamed, meter.launch)  # type: ignore[method-assign]
        take = scheduler.take

        async def timed_take(call: ParsedCall) -> Observation | None:
            seen, started = len(events), time.perf_counter()
            try:
                return await take(call)
            finally:
                spent = time.perf_counter() - started
                waited = sum(e.waited for e in events[seen:]
                             if isinstance(e, SpecPromote) and e.call_id == call.call_id)
                meter.take.append(max(0.0, spent - waited))

        scheduler.take = timed_take  # type: ignore[method-assign]
        close = scheduler.close

        async def timed_close() -> None:
            started = time.perf_counter()
            try:
                await close()
            finally:
                meter.close += time.perf_counter() - started

        scheduler.close = timed_close  # type: ignore[method-assign]
        observe = scheduler.observe

        def timed_observe(event: Event) -> None:
            started = time.perf_counter()
            observe(event)
            meter.observe += time.perf_counter() - started

        scheduler.observe = timed_observe  # type: ignore[method-assign]  # the session's sink calls it by name
        return meter

    @staticmethod
    def _timed(function: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                into.append(time.perf_counter() - started)
        return timed

    @property
    def total(self) -> float:
        """Seconds of speculation bookkeeping in the session (predict is inside launch)."""
        return sum(self.launch) + sum(self.take) + self.observe + self.close

    def to_dict(self) -> dict[str, Any]:
        """The raw measurements, in seconds."""
        return {"decisions": len(self.launch), "launch": self.launch, "take": self.take, "predict": self.predict,
                "observe": self.observe, "close": self.close, "total": self.total}
