"""Git reads as agents with a shell use them: `git status` before they change anything, `git diff` (of the
whole tree and of the file just edited) and `git status` after an edit they have not looked at yet.

Git reads are pure (harness.calls.shellmap.git_read), so a wrong guess costs only the read. Earlier git
calls of the session are proposed again by the repeat rule; these rules cover the first ones.
"""

from __future__ import annotations

import shlex

from harness.calls.action import GIT
from harness.calls.canonical import canonical_bash
from harness.speculation.prediction.dataflow import Pool
from harness.speculation.prediction.state import SessionState


def propose(state: SessionState, pool: Pool) -> None:
    """`git status` at the start; `git diff`, `git diff <file>` and `git status` after an unseen edit."""
    if state.tools and "bash" not in state.tools:
        return
    used = any(step.action.kind == GIT for step in state.steps)
    feats = {"g_used_git": 1.0} if used else {}
    if state.edits == 0:
        if len(state.steps) < 3:
            pool.add(canonical_bash("git status", state.root), "git_start", {"g_start": 1.0, **feats})
        return
    if any(step.action.kind == GIT for step in state.steps[state.last_edit + 1:]):
        return  # the edit has been looked at already
    after = {"g_after_edit": 1.0, **feats}
    pool.add(canonical_bash("git diff", state.root), "git_diff_edit", after)
    pool.add(canonical_bash("git status", state.root), "git_status_edit", after)
    path = state.steps[state.last_edit].action.path
    if path and not path.startswith("/"):
        pool.add(canonical_bash(f"git diff {shlex.quote(path)}", state.root), "git_diff_file", after)
