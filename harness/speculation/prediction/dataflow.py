"""Data-flow rules: concrete candidate calls whose arguments come from earlier observations and the task.

Each rule adds proposals to a `Pool`, keyed by canonical key, with the rule's name and a few features
for the ranker. Rules: repeat an earlier call (noting whether files were edited since, and keeping the
last script and test runs however old), run a script right after it was written, read or view the
paths and lines named in the last output (grep hits, tracebacks) or the task, view the enclosing
function of such a line (tree-sitter), continue a range view, list the folder in hand and the test
folders that match the work, clean up what the session made, read whole the file in hand (which
answers a view of it or a grep in it), and the session-independent habits learned from other
trajectories (`git diff`, `ls`, finish). Test runs are in `testruns`; the rules that read the streamed
reasoning (moment b) are in `reasoning`.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass, field
from typing import Any

from harness.calls.action import FINISH, OTHER, SLOW_KINDS, VIEW, Action, list_action, read_action
from harness.calls.canonical import canonical_bash
from harness.speculation.prediction.state import SessionState, file_in_hand
from harness.speculation.prediction.syntax import enclosing_range

REPEAT_LIMIT = 30
SLOW_REPEATS = 6


@dataclass
class Proposal:
    """A candidate call before ranking: the action, the runnable Tao call, why, and its features."""

    action: Action
    name: str
    arguments: dict[str, Any]
    reasons: list[str] = field(default_factory=list)
    feats: dict[str, float] = field(default_factory=dict)


class Pool:
    """Proposals merged by canonical key."""

    def __init__(self) -> None:
        self.items: dict[str, Proposal] = {}
        self._borrowed: set[str] = set()  # keys whose proposal belongs to the pool this one extends

    def extend(self) -> Pool:
        """A pool with the same proposals, which copies one before adding to it (the base stays as it was)."""
        pool = Pool()
        pool.items = dict(self.items)
        pool._borrowed = set(self.items)
        return pool

    def add(self, action: Action, rule: str, feats: dict[str, float] | None = None,
            call: tuple[str, dict[str, Any]] | None = None) -> None:
        """Propose `action` (runnable as `call`) for `rule`, merging with an earlier proposal of the same key."""
        item = self.items.get(action.key)
        if item is None:
            name, arguments = call or runnable(action)
            item = self.items[action.key] = Proposal(action, name, arguments)
        elif action.key in self._borrowed:
            self._borrowed.discard(action.key)
            item = self.items[action.key] = Proposal(item.action, item.name, item.arguments, list(item.reasons),
                                                     dict(item.feats))
        if rule not in item.reasons:
            item.reasons.append(rule)
            item.feats["r:" + rule] = 1.0
        if feats:
            for name, value in feats.items():
                if value > item.feats.get(name, -1e9):
                    item.feats[name] = value


def runnable(action: Action) -> tuple[str, dict[str, Any]]:
    """The Tao call that performs an action (bash keeps its command; the rest use canonical arguments)."""
    return action.tool, dict(action.args)


def repeats(state: SessionState, pool: Pool) -> None:
    """Earlier calls again, most recent first, noting files edited and the workspace changed since.

    The last REPEAT_LIMIT distinct calls, and beyond them the last SLOW_REPEATS distinct script and test
    runs however old: an agent re-runs its reproduction script after any number of reads. Calls of kind
    `other` (another agent's todo list, subagent or web tools) are never proposed again: they do not act on
    the workspace, and the same call twice would only fill a place in the top K."""
    now = len(state.steps)
    kind_rank: dict[str, int] = {}
    slow_rank = 0
    since_edit = min(2, sum(1 for step in state.steps[state.last_edit + 1:] if step.action.kind in SLOW_KINDS))
    for seen, stats in enumerate(reversed(state.keys.values())):
        action = state.steps[stats.last].action
        kind = action.kind
        slow = kind in SLOW_KINDS
        if kind in (FINISH, OTHER) or (seen >= REPEAT_LIMIT and not slow):
            continue
        if slow_rank >= SLOW_REPEATS and seen >= REPEAT_LIMIT:
            break
        age = now - stats.last
        rank = kind_rank[kind] = kind_rank.get(kind, -1) + 1
        feats = {"rep_recency": 1.0 / age, "rep_count": math.log1p(stats.count), f"rep_kind:{kind}": 1.0,
                 f"rep_kr{min(rank, 2)}:{kind}": 1.0, f"rep_age{_bucket(age)}": 1.0}
        if slow:
            feats[f"rep_slow{min(slow_rank, 3)}"] = 1.0
            feats[f"rep_sse{since_edit}:{kind}"] = 1.0  # slow runs since the last edit: 0, 1, 2 or more
            if stats.first_of_kind:
                feats[f"rep_sse{since_edit}_first:{kind}"] = 1.0
            slow_rank += 1
        if stats.edits != state.edits:
            feats[f"rep_edited:{kind}"] = 1.0
            feats[f"rep_edit_age{_bucket(now - state.last_edit)}:{kind}"] = 1.0
        elif stats.after >= 0 and stats.after != state.version:
            feats[f"rep_changed:{kind}"] = 1.0
        if stats.ok is False:
            feats[f"rep_failed:{kind}"] = 1.0
        if stats.first_of_kind:
            feats[f"rep_first:{kind}"] = 1.0
        arguments = stats.arguments if action.tool == "bash" else action.args
        pool.add(action, "repeat", feats, (action.tool, dict(arguments)))


def _bucket(age: int) -> str:
    return "1" if age == 1 else "2" if age == 2 else "3-5" if age <= 5 else "6-12" if age <= 12 else "13+"


def run_written(state: SessionState, pool: Pool, default_interpreter: str) -> None:
    """Run the scripts just written: `python f.py` (the agent's interpreter), a test file with its runner."""
    recent = [p for p in reversed(state.written) if p not in state.removed][:3]
    now = len(state.steps)
    for rank, path in enumerate(recent):
        age = now - state.written[path]
        feats = {"rw_recency": 1.0 / age, f"rw_rank{rank}": 1.0}
        if path in state.ran_since_write:
            feats["rw_ran"] = 1.0
        if "/" in path:
            feats["rw_nested"] = 1.0
        if path.endswith(".py"):
            interpreter = state.interpreter(default_interpreter)
            pool.add(canonical_bash(f"{interpreter} {path}", state.root), "run_written", feats)
            other = "python3" if interpreter == "python" else "python"
            pool.add(canonical_bash(f"{other} {path}", state.root), "run_written_alt", feats)
            if posixpath.basename(path).startswith("test"):
                for runner in (state.test_prefixes[-1:] or ["pytest"]):
                    pool.add(canonical_bash(f"{runner} {path}", state.root), "test_written", feats)
        elif path.endswith(".sh"):
            pool.add(canonical_bash(f"bash {path}", state.root), "run_written", feats)


def mentions(state: SessionState, pool: Pool, anchors: list[tuple[int, int]], texts: bool = True) -> None:
    """Read the files named in the last output; view around the lines named with them."""
    last = state.last
    if last is None:
        return
    read_before = {s.action.path for s in state.steps[-40:] if s.action.tool == "read_file"}
    for rank, (path, line) in enumerate(last.mentions[:6]):
        feats = {f"mo_rank{min(rank, 3)}": 1.0, f"mo_from:{last.action.kind}": 1.0}
        if path in read_before:
            feats["mo_read_before"] = 1.0
        if path.startswith("/"):
            feats["mo_outside"] = 1.0
        pool.add(read_action(path), "output_path", feats)
        if line is not None:
            around(state, pool, path, line, anchors, "output_line", feats, texts)


def around(state: SessionState, pool: Pool, path: str, line: int, anchors: list[tuple[int, int]], rule: str,
           feats: dict[str, float], texts: bool = True) -> None:
    """Views of `path` around `line`: the learned offsets, and the enclosing function when the text is known."""
    for index, (before, after) in enumerate(anchors):
        start = max(1, line + before)
        pool.add(read_action(path, start, max(start, line + after)), rule, {**feats, f"off{index}": 1.0})
    known = state.texts.get(path) if texts else None
    if known is not None:
        span = enclosing_range(path, known[1], line)
        if span:
            pool.add(read_action(path, *span), "enclosing_function", {**feats, "func": 1.0})


def task_paths(state: SessionState, pool: Pool) -> None:
    """Read the files the task names (until they have been read)."""
    read_before = {s.action.path for s in state.steps if s.action.tool == "read_file"}
    for rank, (path, _line) in enumerate(state.task_mentions[:5]):
        feats = {f"mt_rank{min(rank, 2)}": 1.0}
        if path in read_before:
            feats["mt_read_before"] = 1.0
        pool.add(read_action(path), "task_path", feats)


def continue_view(state: SessionState, pool: Pool) -> None:
    """After viewing lines a..b of a file, the next block of the same size."""
    last = state.last
    if last is None or last.action.kind != VIEW or last.action.tool != "read_file":
        return
    start, end = last.action.args.get("start_line") or 1, last.action.args.get("end_line")
    if end is None:
        return
    size = end - start
    pool.add(read_action(last.action.args["path"], end + 1, end + 1 + size), "next_block", None)
    pool.add(read_action(last.action.args["path"], max(1, start - size - 1), max(1, start - 1)), "prev_block", None)


def list_dirs(state: SessionState, pool: Pool) -> None:
    """List the folder of the file just handled, and the folders named in the last output."""
    last = state.last
    if last is None:
        return
    dirs = [posixpath.dirname(p) for p, _ in last.mentions[:3]]
    if last.action.path:
        dirs.insert(0, posixpath.dirname(last.action.path) if "." in posixpath.basename(last.action.path)
                    else last.action.path)
    for rank, folder in enumerate(dict.fromkeys(d for d in dirs if d and not d.startswith("/"))):
        pool.add(list_action(folder), "list_dir", {f"ld_rank{min(rank, 2)}": 1.0})
    for rank, (folder, weight) in enumerate(state.relevant_tests(3)):
        if "." not in posixpath.basename(folder):  # the test folders whose names match the work
            pool.add(list_action(folder), "list_tests",
                     {f"lt_rank{rank}": 1.0, "lt_weight": min(weight, 6) / 3})


def cleanup(state: SessionState, pool: Pool) -> None:
    """Remove the scratch files written this session: the last one, all at the root, or everything made anew."""
    scratch = [p for p in state.created if p not in state.removed and "/" not in p]
    if scratch:
        pool.add(canonical_bash(f"rm {scratch[-1]}", state.root), "cleanup_last", None)
    if len(scratch) > 1:
        pool.add(canonical_bash("rm " + " ".join(scratch), state.root), "cleanup_all", None)
    gone = [p + "/" for p in state.removed] + [p + "/" for p, folder in state.scratch.items() if folder]
    made = [p for p in state.scratch if p not in state.removed and not p.startswith(tuple(gone))]
    if made and made != scratch:
        flags = "-rf " if any(state.scratch[p] for p in made) else ""
        pool.add(canonical_bash(f"rm {flags}" + " ".join(made), state.root), "cleanup_made", None)


def in_hand(state: SessionState, pool: Pool, rates: dict[str, list[float]]) -> dict[str, float]:
    """Read whole the file the last call was in and the first file its output names: such a read answers a
    view of, or a grep in, that file. Returns each read's key -> expected seconds of the next call it answers."""
    last = state.last
    if last is None:
        return {}
    same = file_in_hand(last.action)
    mention = next((p for p, _ in last.mentions if "." in posixpath.basename(p) and not p.startswith("/")), None)
    derived: dict[str, float] = {}
    for relation, path in (("same", same), ("mention", mention if mention != same else None)):
        if not path:
            continue
        action = read_action(path)
        rate, seconds = rates.get(f"{last.action.kind}|{relation}", (0.0, 0.0))
        derived[action.key] = derived.get(action.key, 0.0) + rate * seconds
        if relation == "same":
            pool.add(action, "read_in_hand", {f"ih:{last.action.kind}": 1.0})
    return derived


def habits(state: SessionState, pool: Pool, learned: list[tuple[Action, tuple[str, dict[str, Any]], float]]) -> None:
    """Calls many sessions make whatever the task (`git diff`, `ls`, finish), with their frequency; finish only
    to a session that offers it (Claude Code and Codex CLI end with a text answer). Other habits stay whatever
    tool learned them: a shell spells them too (`cat f` is `read_file(f)`)."""
    for index, (action, call, share) in enumerate(learned):
        if action.tool == "finish" and state.tools and "finish" not in state.tools:
            continue
        pool.add(action, "habit", {f"g{index}": 1.0, "g_share": share}, (call[0], dict(call[1])))
