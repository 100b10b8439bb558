"""The one guarantee: speculation is invisible except in time.

Scripted sessions (the replay engine) run over real git repositories twice, with speculation off and
on (the real pattern analyzer), and must give equal trajectories in every field but timing and spec_*
events, and byte-identical workspaces. The scripts mix edits, failing and passing test runs, greps
whose results change after an edit, and files changed behind Tao's back.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.engine.recorded import Recording, ReplayEngine, Turn, load_recording
from harness.events import Event, SpecLaunch, SpecSummary, ToolResult, comparable
from harness.session import Session
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from sandbox import Workspace
from tests.helpers import EXAMPLES, make_calc_repo
from tools import default_tools

FIX = {"path": "calc/ops.py", "old": "    return a - b\n\n\ndef subtract", "new": "    return a + b\n\n\ndef subtract"}
BREAK = {"path": "calc/ops.py", "old": "    return a + b\n\n\ndef subtract",
         "new": "    return a - b\n\n\ndef subtract"}
CALLS = [
    ("run_tests", {}),
    ("run_tests", {"command": "python -m pytest -q tests/test_ops.py::test_add"}),
    ("grep", {"pattern": "return a [-+] b"}),
    ("grep", {"pattern": "def ", "path": "calc"}),
    ("read_file", {"path": "calc/ops.py"}),
    ("read_file", {"path": "calc/ops.py", "start_line": 4, "end_line": 7}),
    ("list_files", {}),
    ("outline", {"path": "calc/ops.py"}),
    ("edit_file", FIX),
    ("edit_file", BREAK),
    ("write_file", {"path": "calc/extra.py", "content": "def extra():\n    return a - b\n"}),
    ("bash", {"command": "echo note >> notes.txt && cat notes.txt"}),
]


def turn(name: str, arguments: dict) -> str:
    return f"Next I call {name}.\n<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def behind_the_back(repo: Path, steps: set[int]):
    """A sink that edits a file as if the user did, right after the tool result of the given steps."""
    def sink(event: Event) -> None:
        if isinstance(event, ToolResult) and event.step in steps:
            with open(repo / "calc" / "ops.py", "a") as handle:
                handle.write(f"\n# edited by the user after step {event.step}\n")
    return sink


def tree(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(repo).parts}


async def run(repo: Path, recording: Recording, speculate: bool, external: set[int]) -> list[Event]:
    events: list[Event] = []
    analyzer = Analyzer(PatternModel()) if speculate else None
    session = Session("fix calc.add", ReplayEngine(recording, seconds_per_token=0.002), Workspace(repo),
                      default_tools(), sinks=[events.append, behind_the_back(repo, external)], analyzer=analyzer)
    await session.run()
    return events


async def both(tmp_path: Path, recording: Recording,
               external: set[int] = frozenset()) -> tuple[list[Event], list[Event]]:
    # Both runs use the same path: test output names it.
    repo = make_calc_repo(tmp_path / "work")
    off = await run(repo, recording, False, set(external))
    off_tree = tree(repo)
    (tmp_path / "work").rename(tmp_path / "off")
    repo = make_calc_repo(tmp_path / "work")
    on = await run(repo, recording, True, set(external))
    assert comparable(on) == comparable(off)
    assert tree(repo) == off_tree
    return off, on


async def test_the_bundled_fix_is_identical_with_speculation(tmp_path: Path) -> None:
    off, on = await both(tmp_path, load_recording(EXAMPLES / "calc.replay.json"), external={2})
    assert not any(e.type.startswith("spec_") for e in off)
    summary = next(e for e in on if isinstance(e, SpecSummary))
    assert summary.launched == len([e for e in on if isinstance(e, SpecLaunch)]) > 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Found by this test: a test run here creates and removes .git/index.lock (a git call during pytest). The real run's
# version counted that; a promoted overlay run, which shows only net changes, did not.
@example(script=[10, 1, 8, 10, 2, 1], external=set())
@given(script=st.lists(st.sampled_from(range(len(CALLS))), min_size=3, max_size=7),
       external=st.sets(st.integers(min_value=1, max_value=7), max_size=2))
async def test_any_scripted_session_is_identical_with_speculation(tmp_path_factory, script: list[int],
                                                                 external: set[int]) -> None:
    turns = [Turn(turn(*CALLS[i])) for i in script] + [Turn(turn("finish", {"summary": "done"}))]
    await both(tmp_path_factory.mktemp("s"), Recording(turns), external)
