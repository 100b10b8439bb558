"""Modelled tool latency per action kind, for traces without tool timings.

The model (seconds) comes from the mini-swe-agent trajectories in ../shared/traces: their model
responses carry `created` stamps (whole seconds) but no tool timings, so the gap between consecutive
responses (11.3k steps) was regressed on the response's output tokens (11.8 s per 1k tokens) and the
action's kind. A kind's latency is its intercept minus that of a plain file read: test runs +3.5 s,
scripts +1.0 s, searches +0.5 s; reads, writes and edits are a few tens of milliseconds (SWE-agent's
recorded `execution_time` for file commands, 0.1-0.3 s, includes its own shell round trip). Where a
trace records a call's duration (SWE-agent's `execution_time`, Tao's own `duration`), that is used.
"""

from __future__ import annotations

from harness.calls.action import (CLEANUP, EDIT, FINISH, GIT, INSTALL, LIST, OTHER, OUTLINE, READ, SCRIPT,
                                        SEARCH, SHELL, TEST, VIEW, WRITE, WRITE_RUN, Action)

KIND_SECONDS: dict[str, float] = {
    READ: 0.05, VIEW: 0.05, LIST: 0.1, SEARCH: 0.5, OUTLINE: 0.1, GIT: 0.2, TEST: 3.5, SCRIPT: 1.0,
    WRITE_RUN: 1.0, WRITE: 0.05, EDIT: 0.05, CLEANUP: 0.05, INSTALL: 5.0, SHELL: 0.2, FINISH: 0.0, OTHER: 0.2,
}


def modelled_latency(action: Action, recorded: float = 0.0) -> float:
    """Seconds the action's tool takes: the recorded duration when there is one, else the kind's model."""
    return recorded if recorded > 0 else KIND_SECONDS.get(action.kind, 0.2)
