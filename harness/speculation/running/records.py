"""The scheduler's books: one speculation's record, the budget speculation runs under, each kind's hits and waste."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from harness.speculation.prediction.patterns import Candidate
from harness.speculation.running.chain import Edit
from harness.vocabulary import SpecState
from sandbox.overlay import Overlay
from tools.base import Observation
from tools.textfile import TextFile


@dataclass(frozen=True)
class Budget:
    """How much speculative work may run at once, and what is worth starting."""

    k: int = 3
    """Candidates considered at each moment."""
    max_running: int = 4
    """Speculations running at once, all effects together."""
    max_sandboxed: int = max(1, (os.cpu_count() or 2) // 2)
    """Overlay runs (whole test suites, scripts) at once: they compete with the engine for CPU."""
    min_utility: float = 0.0
    """Expected seconds saved, net of cost, below which a candidate is not started."""
    min_probability: float = 0.05
    """Candidates less likely than this are not started however much they would save."""


@dataclass
class Speculation:
    """One speculative run and what became of it."""

    spec_id: str
    candidate: Candidate
    key: str  # canonical: one speculation per predicted effect
    exact: str  # what a real call must be to be answered by it (see `exact_call`)
    version: int
    started: float
    task: asyncio.Task[Observation] | None = None
    overlay: Overlay | None = None
    file: TextFile | None = None  # a speculated whole-file read keeps the file to serve ranges from
    state: SpecState = SpecState.RUNNING
    finished: float | None = None
    after: Edit | None = None  # a chain: the streamed edit applied in its overlay first (running/chain.py)
    step: int = 0  # the model step it was started in; a later step's call may still take it (kept)

    @property
    def servable(self) -> bool:
        """Whether a real call may be answered by it: not while the edit it runs after has not landed."""
        return self.after is None or not self.after.pending


@dataclass
class KindStats:
    """Hits and waste of one kind of call in this session, for adaptive control."""

    launched: int = 0
    promoted: int = 0
    saved: float = 0.0
    wasted: float = 0.0
    paused_until: int = 0  # step number until which this kind is not speculated

    def to_dict(self) -> dict[str, float]:
        return {"launched": self.launched, "promoted": self.promoted, "saved": round(self.saved, 3),
                "wasted": round(self.wasted, 3)}


def cost(spec: Speculation) -> float:
    """What a speculation has used: the CPU seconds of an overlay run (a niced run the engine starves costs
    next to nothing, however long it waited), the seconds a pure one ran (brief, and not niced)."""
    cpu = spec.overlay.cpu_seconds() if spec.overlay is not None else None
    return cpu if cpu is not None else (spec.finished or time.monotonic()) - spec.started
