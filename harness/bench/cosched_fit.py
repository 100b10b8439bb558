"""`tao bench cosched --fit`: every session cut to fit the engine's context window, the same cut on every engine.

The real CPU engine (the embedded SmolLM2) holds 8,192 tokens, and most SWE-bench trajectories outgrow it.
Each session is cut before its first step whose prompt and answer would pass FIT_SHARE of the window, counted
both by the profile's characters a token (the simulator's count) and by a tokenizer's (the embedded model's:
SWE-bench text runs from 1.8 to 4.4 characters a token under it, so the characters alone let the real
engine's largest prompt reach 13,500 tokens); its last kept turn becomes its final answer (the turn's
text with a `finish` call in place of its tool call: no tool runs), so the session ends there. A session that
keeps fewer than LEAST_STEPS steps is left out. The cut depends only on the window, the characters a token and
the tokenizer, which the `cpu` and `cpu-bf16` profiles and the embedded engine share: the simulator and the
embedded engine run the same workload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness import protocol
from harness.bench.cosched_run import Workload
from harness.bench.recordings import LiveSession
from harness.bench.simtools import Book, sim_tools
from harness.bench.trace_workload import with_call
from harness.engine.recorded import Turn
from harness.engine.sim import Profile
from harness.errors import UsageError
from tools import tool_specs

FIT_SHARE = 0.95  # of the window: a margin for the characters-a-token estimate
LEAST_STEPS = 3  # a session cut shorter than this is left out
MESSAGE_TOKENS = 8  # the chat template's tokens around a message

Tokens = Callable[[str], int]
"""How many tokens a text is, by the engine's tokenizer."""


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


def fit(workload: Workload, profile: Profile, tokens: Tokens | None = None, share: float = FIT_SHARE,
        least: int = LEAST_STEPS) -> Fitted:
    """The workload with each session cut to fit `share` of the profile's window, by its characters a token and
    by `tokens` (when given), too-short ones left out."""
    limit = profile.max_model_len * share
    counted = prompt_tokens(workload, tokens) if tokens is not None else None
    sessions, books, cut, dropped = [], [], [], []
    for index, (session, book, sizes) in enumerate(zip(workload.sessions, workload.books, workload.prompt_sizes())):
        turns = session.recording.turns
        needs = [(size + len(turn.text)) / profile.chars_per_token for size, turn in zip(sizes, turns)]
        if counted is not None and tokens is not None:
            needs = [max(need, size + counted_answer(tokens, turn))
                     for need, size, turn in zip(needs, counted[index], turns)]
        steps = next((i for i, need in enumerate(needs) if need > limit), len(turns))
        if steps < least:
            dropped.append(session.name)
            continue
        if steps < len(turns):
            session, book = cut_at(session, book, steps)
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


def first_steps(workload: Workload, steps: int) -> Workload:
    """Every session cut to its first `steps` model turns, the last kept one its final answer (`--steps`: the real
    engine's long levels in hours, not a day). Shorter sessions stay whole."""
    if steps < LEAST_STEPS:
        raise UsageError(f"--steps {steps}: keep at least {LEAST_STEPS} steps a session")
    sessions, books = [], []
    for session, book in zip(workload.sessions, workload.books):
        if len(session.recording.turns) > steps:
            session, book = cut_at(session, book, steps)
        sessions.append(session)
        books.append(book)
    return Workload(sessions, books, workload.model)


def cut_at(session: LiveSession, book: Book, steps: int) -> tuple[LiveSession, Book]:
    """The session's first `steps` turns, the last one its final answer, and the calls of the turns before it."""
    turns = session.recording.turns
    kept = [*turns[:steps - 1], final_answer(turns[steps - 1])]
    shorter = replace(session, recording=replace(session.recording, turns=kept))
    return shorter, Book(book.session, book.calls[:steps - 1])


def prompt_tokens(workload: Workload, tokens: Tokens) -> list[list[int]]:
    """Tokens of each step's prompt, session by session, as Workload.prompt_sizes counts characters."""
    system = tokens(protocol.render_system_prompt(tool_specs(sim_tools(workload.books[0])), "/repo", False))
    out = []
    for session, book in zip(workload.sessions, workload.books):
        size, sizes = system + tokens(session.recording.task or "") + 2 * MESSAGE_TOKENS, []
        for turn, call in zip(session.recording.turns, [*book.calls, None]):
            sizes.append(size)
            size += counted_answer(tokens, turn) + (tokens(call.output) if call is not None else 0) + MESSAGE_TOKENS
        out.append(sizes)
    return out


def counted_answer(tokens: Tokens, turn: Turn) -> int:
    """Tokens of an answer with its message's template."""
    return tokens(turn.text) + MESSAGE_TOKENS


def final_answer(turn: Turn) -> Turn:
    """The turn as the session's last: its text with a `finish` call in place of its tool call."""
    prose = turn.text.split("<tool_call>", 1)[0].rstrip()
    return Turn(with_call(prose, "finish", {"summary": ""}))
