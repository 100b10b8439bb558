"""Where a test set's calls come from, as an exact-match predictor at moment (a) could know them.

An upper bound measured before building rules: each call is put in the first of these groups it fits
(canonical keys, paths relative to the session's working directory, as the analyzer compares them):
a repeat of an earlier call of the session; a whole-file read of a path named earlier (in an output or
a call); a range view of such a path (exact only if its range is guessed); a git command; a test or
build run; anything else (new text). "Earlier" is what the model knew at (a), its turn's start: the
calls and results of earlier turns, not those of the call's own turn (harness.speculation.prediction.turns).
With `candidates`, also the share of calls that are among all the analyzer's candidates at (a),
whatever their rank: what any ranking of today's rules could reach.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.calls.action import GIT, READ, TEST, Action
from harness.calls.canonical import canonical
from harness.events import SessionStart, ToolCall, ToolResult
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.rehearsal import replay
from harness.speculation.prediction.turns import in_turn_order
from harness.traces import Imported

GROUPS = ("repeat", "read_named", "view_named", "git", "test", "new")
ALL_CANDIDATES = 1000  # enough to hold every candidate the analyzer builds at one step


def group(action: Action, earlier: set[str], named: str, root: str) -> str:
    """The group of one call, given the keys of the calls before it and the text of earlier outputs and calls."""
    if action.key in earlier:
        return "repeat"
    path = action.path
    if action.tool == "read_file" and path and (path in named or f"{root.rstrip('/')}/{path}" in named):
        return "read_named" if action.kind == READ else "view_named"
    if action.kind == GIT:
        return GIT
    return TEST if action.kind == TEST else "new"


def sources(sessions: list[Imported]) -> dict[str, Any]:
    """Each group's share of the calls, and by kind."""
    counts: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = {}
    total = 0
    for session in sessions:
        root, earlier, named = "", set[str](), list[str]()
        turn: list[tuple[int, str, str]] = []  # the calls of the turn so far (step, key, arguments): not known at (a)
        for event in in_turn_order(session.events):  # a turn's results come after all its calls
            if turn and not (isinstance(event, ToolCall) and event.step == turn[0][0]):
                earlier.update(key for _, key, _ in turn)
                named.extend(arguments for _, _, arguments in turn)
                turn = []
            if isinstance(event, SessionStart):
                root = event.repo
            elif isinstance(event, ToolResult):
                named.append(event.output)
            elif isinstance(event, ToolCall):
                action = canonical(event.name, event.arguments, root)
                name = group(action, earlier, "\n".join(named), root)
                counts[name] += 1
                kinds.setdefault(action.kind, Counter())[name] += 1
                total += 1
                turn.append((event.step, action.key, str(event.arguments)))
    share = {name: round(counts[name] / total, 4) if total else 0.0 for name in GROUPS}
    return {"calls": total, "share": share,
            "by_kind": {kind: dict(c) for kind, c in sorted(kinds.items(), key=lambda item: -sum(item[1].values()))}}


def in_candidates(model: PatternModel, sessions: list[Imported]) -> float:
    """The share of calls that are among every candidate the analyzer builds at moment (a)."""
    hits = total = 0
    for session in sessions:
        for decision in replay(Analyzer(model), session.events, k=ALL_CANDIDATES):
            total += 1
            hits += any(c.key == decision.action.key for c in decision.top("a", ALL_CANDIDATES))
    return round(hits / total, 4) if total else 0.0
