"""Moment (b) rules: candidates from the reasoning the model has streamed before its call.

The files it names are read; the line ranges it names are viewed in the file it names (or was just
in); the commands it quotes are run; the scripts it names are run with the agent's interpreter; the
code it quotes is searched for (`def name`, `class Name`, or as quoted) in the files and folders in view.
"""

from __future__ import annotations

from harness.speculation.action import MUTATING, SCRIPT, SEARCH, TEST, make, read_action
from harness.speculation.canonical import canonical_bash
from harness.speculation.dataflow import Pool, around
from harness.speculation.extract import ReasoningFacts
from harness.speculation.state import SessionState


def propose(state: SessionState, pool: Pool, facts: ReasoningFacts, anchors: list[tuple[int, int]],
              default_interpreter: str) -> None:
    """Moment (b): the files, lines and commands the streamed reasoning names."""
    paths = facts.paths
    for rank, (path, line) in enumerate(paths[:6]):
        feats = {f"mr_rank{min(rank, 3)}": 1.0}
        if rank == len(paths) - 1:
            feats["mr_lastmention"] = 1.0
        pool.add(read_action(path), "reasoning_path", feats)
        if line is not None:
            around(state, pool, path, line, anchors, "reasoning_line", feats)
    targets = list(dict.fromkeys([p for p, _ in reversed(paths)]))[:2]
    if state.last and state.last.action.path and state.last.action.path not in targets:
        targets.append(state.last.action.path)
    for index, target in enumerate(targets):
        for start, end in facts.ranges[:3]:
            feats = {f"mr_target{index}": 1.0}
            if end is not None and end >= start:
                pool.add(read_action(target, start, end), "reasoning_range", {"mr_range": 1.0, **feats})
            else:
                around(state, pool, target, start, anchors, "reasoning_line", {"mr_line": 1.0, **feats})
    for command in facts.commands:
        action = canonical_bash(command, state.root)
        if action.kind in (SCRIPT, TEST) or action.effect != MUTATING:
            pool.add(action, "reasoning_command", {"mr_cmd": 1.0}, ("bash", {"command": command}))
    for script in facts.scripts:
        pool.add(canonical_bash(f"{state.interpreter(default_interpreter)} {script}", state.root),
                 "reasoning_script", {"mr_script": 1.0})
    searches(state, pool, facts)


def searches(state: SessionState, pool: Pool, facts: ReasoningFacts) -> None:
    """Moment (b): grep for the code the reasoning quotes, in the file or folder it names or was just in."""
    if not facts.symbols:
        return
    places: list[tuple[str | None, str]] = [(p, "reason_last" if i == 0 else "reason_prev")
                                            for i, (p, _) in enumerate(reversed(facts.paths[-2:]))]
    places += [(folder, "reason_folder") for folder in facts.folders[:1]]
    recent = [s.action.path for s in reversed(state.steps[-6:]) if s.action.path and not s.action.path.startswith("/")]
    places += [(path, "last_action" if i == 0 else "recent_action") for i, path in enumerate(dict.fromkeys(recent))][:2]
    tops = [p.split("/", 1)[0] for p, _ in places if p and "/" in p]
    places += [(tops[0], "top")] if tops else []
    places.append((None, "root"))
    seen: set[str | None] = set()
    places = [(p, why) for p, why in places if not (p in seen or seen.add(p))][:5]
    for rank, symbol in enumerate(facts.symbols[:4]):
        bare = symbol.split(" ", 1)[-1]
        forms = [(symbol, "as_quoted")]
        if " " not in symbol and "." not in symbol:
            forms.append((f"class {bare}" if bare[:1].isupper() else f"def {bare}", "as_def"))
        for pattern, form in forms:
            for path, why in places:
                pool.add(make("grep", {"pattern": pattern, "path": path}, SEARCH), "reasoning_search",
                         {f"gs_{form}": 1.0, f"gs_{why}": 1.0, f"gs_rank{rank}": 1.0})

