"""`tao bench cosched --fit`: every session cut to fit the engine's context window, the same cut on every engine.

The real CPU engine (the embedded SmolLM2) holds 8,192 tokens, and most SWE-bench trajectories outgrow it.
Each session is cut before its first step whose prompt and answer would pass FIT_SHARE of the window (counted
in characters, by the profile's characters a token); its last kept turn becomes its final answer (the turn's
text with a `finish` call in place of its tool call: no tool runs), so the session ends there. A session that
keeps fewer than LEAST_STEPS steps is left out. The cut depends only on the window and the characters a token,
which the `cpu` and `cpu-bf16` profiles share: the simulator and the embedded engine run the same workload.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from harness.bench.cosched_run import Workload
from harness.bench.simtools import Book
from harness.bench.trace_workload import with_call
from harness.engine.recorded import Turn
from harness.engine.sim import Profile
from harness.errors import UsageError

FIT_SHARE = 0.95  # of the window: a margin for the characters-a-token estimate
LEAST_STEPS = 3  # a session cut shorter than this is left out


@dataclass(frozen=True)
class Fitted:
    """The cut workload and what the cut did."""

    workload: Workload
    kept_steps: int
    """Model turns kept, over the sessions kept."""
    total_steps: int
    """Model turns before the cut, over every session (those left out too)."""
    cut: list[str]
    """Sessions cut short."""
    dropped: list[str]
    """Sessions left out: fewer than LEAST_STEPS steps fit."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON config's record of the cut."""
        return {"kept_steps": self.kept_steps, "total_steps": self.total_steps, "cut": len(self.cut),
                "dropped": self.dropped, "share": FIT_SHARE, "least_steps": LEAST_STEPS}

    def summary(self) -> str:
        """One line for the run's start."""
        return (f"--fit: {len(self.workload.sessions)} sessions kept ({len(self.cut)} cut short), {len(self.dropped)} "
                f"left out with fewer than {LEAST_STEPS} steps; {self.kept_steps} of {self.total_steps} steps kept")


def fit(workload: Workload, profile: Profile, share: float = FIT_SHARE, least: int = LEAST_STEPS) -> Fitted:
    """The workload with each session cut to fit `share` of the profile's window, too-short ones left out."""
    limit = profile.max_model_len * profile.chars_per_token * share
    sessions, books, cut, dropped = [], [], [], []
    for session, book, sizes in zip(workload.sessions, workload.books, workload.prompt_sizes()):
        turns = session.recording.turns
        steps = next((i for i, (size, turn) in enumerate(zip(sizes, turns)) if size + len(turn.text) > limit),
                     len(turns))
        if steps < least:
            dropped.append(session.name)
            continue
        if steps < len(turns):
            kept = [*turns[:steps - 1], final_answer(turns[steps - 1])]
            session = replace(session, recording=replace(session.recording, turns=kept))
            book = Book(book.session, book.calls[:steps - 1])
            cut.append(session.name)
        sessions.append(session)
        books.append(book)
    total = sum(len(s.recording.turns) for s in workload.sessions)
    if not sessions:
        raise UsageError(f"--fit: none of the {len(workload.sessions)} sessions keeps {least} steps within "
                         f"{share:.0%} of the {profile.max_model_len}-token window; pick an engine with a longer "
                         "window (--profile gpu) or other trajectories")
    return Fitted(Workload(sessions, books, workload.model), sum(len(s.recording.turns) for s in sessions), total,
                  cut, dropped)


def final_answer(turn: Turn) -> Turn:
    """The turn as the session's last: its text with a `finish` call in place of its tool call."""
    prose = turn.text.split("<tool_call>", 1)[0].rstrip()
    return Turn(with_call(prose, "finish", {"summary": ""}))
