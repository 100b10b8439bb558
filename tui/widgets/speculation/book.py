"""The speculation pane's books: every speculation of the session and the running totals, from events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.events import (Event, SessionStart, SpecDiscard, SpecLaunch, SpecPromote, SpecReady, SpecSummary,
                            SpecToggle)
from harness.vocabulary import SpecState


@dataclass
class Entry:
    """One speculation as the pane shows it."""

    spec_id: str
    step: int
    name: str
    arguments: dict[str, Any]
    reason: str
    moment: str
    state: SpecState = SpecState.RUNNING
    seconds: float = 0.0  # saved when promoted, CPU wasted when discarded
    why: str = ""  # the discard reason

    @property
    def over(self) -> bool:
        """Discarded, tainted or not."""
        return self.state >= SpecState.DISCARDED


@dataclass
class Tally:
    """Launches and hits of one tool."""

    launched: int = 0
    promoted: int = 0

    @property
    def rate(self) -> float:
        return self.promoted / self.launched if self.launched else 0.0


@dataclass
class Book:
    """Everything the pane shows, kept up to date by `apply`."""

    entries: dict[str, Entry] = field(default_factory=dict)
    tools: dict[str, Tally] = field(default_factory=dict)
    enabled: bool = True
    launched: int = 0
    promoted: int = 0
    discarded: int = 0
    tainted: int = 0  # discarded because the run may have seen another world (counted in discarded too)
    repeats: int = 0
    saved: float = 0.0
    wasted: float = 0.0

    def apply(self, event: Event) -> Entry | None:
        """Take one event into the books; returns the entry it changed, if any."""
        match event:
            case SessionStart():
                self.enabled = bool(event.config.get("speculation", True))
            case SpecToggle():
                self.enabled = event.enabled
            case SpecLaunch():
                started = Entry(event.spec_id, event.step, event.name, event.arguments, event.reason, event.moment)
                self.entries[event.spec_id] = started
                self.tools.setdefault(event.name, Tally()).launched += 1
                self.launched += 1
                return started
            case SpecReady() if (entry := self.entries.get(event.spec_id)) and entry.state is SpecState.RUNNING:
                entry.state = SpecState.READY
                return entry
            case SpecPromote() if event.repeat:
                self.repeats += 1
            case SpecPromote() if (entry := self.entries.get(event.spec_id)):
                entry.state, entry.seconds = SpecState.PROMOTED, event.saved
                self.tools.setdefault(entry.name, Tally()).promoted += 1
                self.promoted += 1
                self.saved += event.saved
                return entry
            case SpecDiscard() if (entry := self.entries.get(event.spec_id)):
                entry.state = SpecState.TAINTED if event.tainted else SpecState.DISCARDED
                entry.seconds, entry.why = event.cost, event.reason
                self.discarded += 1
                self.tainted += int(event.tainted)
                self.wasted += event.cost
                return entry
            case SpecSummary():
                self.launched, self.promoted, self.discarded = event.launched, event.promoted, event.discarded
                self.repeats, self.saved, self.wasted = event.repeats, event.saved, event.wasted
                self.tainted = event.tainted
        return None

    @property
    def hit_rate(self) -> float:
        return self.promoted / self.launched if self.launched else 0.0
