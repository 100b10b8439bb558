"""Moment (b) rules: candidates from the reasoning the model has streamed before its call.

The files it names are read (a bare name where the session saw it: `engine.py` is
`django/template/engine.py`), and the modules it quotes (`pkg.mod` is `pkg/mod.py`); the line ranges it
names are viewed in the file it names (or was just in); the commands it quotes are run; the scripts it
names are run with the agent's interpreter; the folders it names are listed; the code it quotes (in
backticks or double quotes) is searched for (`def name`, `class Name`, a dotted name's attribute, or as
quoted) in the files and folders in view, the package the session works in, and the whole workspace.
"""

from __future__ import annotations

import posixpath
import re

from harness.calls.action import SCRIPT, TEST, grep_action, list_action, read_action
from harness.calls.canonical import canonical_bash
from harness.speculation.prediction.dataflow import Pool, around
from harness.speculation.prediction.extract import ReasoningFacts
from harness.speculation.prediction.state import SessionState
from tools.base import Effect


MAX_SYMBOLS, MAX_PLACES = 3, 5  # quoted names searched for, and where: the candidates grow as their product


def propose(state: SessionState, pool: Pool, facts: ReasoningFacts, anchors: list[tuple[int, int]],
              default_interpreter: str) -> None:
    """Moment (b): the files, lines and commands the streamed reasoning names."""
    paths = [(state.resolve(path), line) for path, line in facts.paths]
    for rank, (path, line) in enumerate(paths[:6]):
        feats = {f"mr_rank{min(rank, 3)}": 1.0}
        if rank == len(paths) - 1:
            feats["mr_lastmention"] = 1.0
        if path != facts.paths[rank][0]:
            feats["mr_resolved"] = 1.0
        pool.add(read_action(path), "reasoning_path", feats)
        if line is not None:
            around(state, pool, path, line, anchors, "reasoning_line", feats)
    for path in module_paths(state, facts.symbols):  # `sympy.logic.boolalg` is sympy/logic/boolalg.py
        pool.add(read_action(path), "reasoning_module", {"mr_module": 1.0})
        paths.append((path, None))
    targets = list(dict.fromkeys([p for p, _ in reversed(paths)]))[:2]  # resolved
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
        if action.kind in (SCRIPT, TEST) or action.effect is not Effect.MUTATING:
            pool.add(action, "reasoning_command", {"mr_cmd": 1.0}, ("bash", {"command": command}))
    for script in facts.scripts:  # best a script of the session, or one seen in the workspace
        path = state.resolve(script)
        known = ("mr_script_written" if path in state.created else
                 "mr_script_seen" if path in state.seen else "mr_script")
        pool.add(canonical_bash(f"{state.interpreter(default_interpreter)} {path}", state.root),
                 "reasoning_script", {"mr_script": 1.0, known: 1.0})
    for rank, folder in enumerate(facts.folders):
        top = folder.split("/", 1)[0]
        feats = {f"ml_rank{rank}": 1.0, "ml_seen": float(folder in state.seen_dirs or folder in state.seen),
                 "ml_top_known": float(top in state.seen or top in state.seen_dirs or top in state.tops)}
        pool.add(list_action(folder), "reasoning_folder", feats)
    searches(state, pool, facts, paths)


def module_paths(state: SessionState, symbols: list[str]) -> list[str]:
    """The files of the Python modules the reasoning quotes: `pkg.sub.mod` (when `pkg` is a folder of the
    workspace) and `._mod` (next to the file in hand); a trailing attribute (`pkg.mod.Class`) is tried off."""
    found: list[str] = []
    last = state.last.action.path if state.last else None
    for symbol in symbols:
        if " " in symbol or "/" in symbol or "." not in symbol.strip("."):
            continue
        if symbol.startswith(".") and last and "/" in last:
            found.append(posixpath.join(posixpath.dirname(last), symbol.lstrip(".").replace(".", "/") + ".py"))
            continue
        parts = symbol.split(".")
        if parts[0] in state.tops or parts[0] in state.seen_dirs:
            found.append("/".join(parts) + ".py")
            if len(parts) > 2:
                found.append("/".join(parts[:-1]) + ".py")
    return list(dict.fromkeys(found))[:3]


def searches(state: SessionState, pool: Pool, facts: ReasoningFacts,
             paths: list[tuple[str, int | None]] | None = None) -> None:
    """Moment (b): grep for the code the reasoning quotes, in the file or folder it names or was just in."""
    if not facts.symbols:
        return
    paths = facts.paths if paths is None else paths
    places: list[tuple[str | None, str]] = [(p, "reason_last" if i == 0 else "reason_prev")
                                            for i, (p, _) in enumerate(reversed(paths[-2:]))]
    places += [(folder, "reason_folder") for folder in facts.folders[:1]]
    package = state.package()
    recent = [s.action.path for s in reversed(state.steps[-6:]) if s.action.path and not s.action.path.startswith("/")]
    places += [(path, "last_action" if i == 0 else "recent_action") for i, path in enumerate(dict.fromkeys(recent))][:2]
    tops = [p.split("/", 1)[0] for p, _ in places if p and "/" in p]
    places += [(tops[0], "top")] if tops else []
    places += [(package, "package")] if package else []
    places.append((None, "root"))
    seen: set[str | None] = set()
    unique: list[tuple[str | None, str]] = []
    for p, why in places:  # the first reason for each place
        if p not in seen:
            seen.add(p)
            unique.append((p, why))
    places = unique[:MAX_PLACES]
    folders = {posixpath.basename(p) for p, _ in places if p} | set(state.tops)
    symbols = [s for s in facts.symbols if s not in folders][:MAX_SYMBOLS]
    verb = "gs_verb" if _SEARCH_VERB.search(facts.text[-240:]) else "gs_noverb"
    for rank, symbol in enumerate(symbols):
        shape = _shape(symbol)
        bare = symbol.split(" ", 1)[-1]
        forms = [(symbol, "as_quoted")]
        if " " not in symbol and "." not in symbol:
            forms.append((f"class {bare}" if bare[:1].isupper() else f"def {bare}", "as_def"))
        elif " " not in symbol and "." in symbol and not symbol.endswith("."):
            attribute = symbol.rsplit(".", 1)[1]  # `Dataset.integrate`: the method
            forms += [(attribute, "as_attr"), (f"def {attribute}", "as_attr_def")]
        for pattern, form in forms:
            for path, why in places:
                pool.add(grep_action(pattern, path), "reasoning_search",
                         {f"gs_{form}": 1.0, f"gs_{why}": 1.0, f"gs_rank{rank}": 1.0, f"gs_{form}|{shape}": 1.0,
                          f"{verb}|{form}": 1.0, f"{verb}|{why}": 1.0})


_SEARCH_VERB = re.compile(r"\b(?:search|grep|find|look(?:ing)? for|locate|where|usages?|occurrences?)\b", re.I)


def _shape(symbol: str) -> str:
    """What a quoted symbol looks like: a class, a function, a constant, an attribute path, code."""
    bare = symbol.split(" ", 1)[-1]
    if " " in symbol or not bare.isidentifier() and "." not in bare:
        return "code"
    if "." in bare:
        return "dotted"
    if bare.isupper() or any(c.isdigit() for c in bare) and bare[:1].isupper():
        return "const"
    if bare[:1].isupper():
        return "camel"
    return "private" if bare.startswith("_") else "snake"

