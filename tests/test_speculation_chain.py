"""Speculation past an edit (harness/speculation/running/chain.py), through the whole session loop.

Scripted sessions (the replay engine) over real git repositories, real overlays and real test runs, each
run twice, with speculation off and on (the real pattern analyzer): the trajectories must be equal in
every field but timing and spec_* events, and the workspaces byte-identical (file modes included). The
repository's test suite writes a report file, so a follower's changes that leaked into the real tree
would show.

The engine holds its answer just after a call closes until the overlay of a chain holds the edit (and
may then change the tree as a user would), so that each test takes the path it is about whatever the
machine's load; one test does not hold, and the result must be the same.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from harness.approval import ApprovalPolicy
from harness.engine.api import Chunk, LLMRequest
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.events import Event, SpecDiscard, SpecLaunch, SpecPromote, ToolCall, ToolResult, comparable
from harness.protocol import CLOSE
from harness.session import Session
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from sandbox import Workspace
from tests.helpers import git, make_calc_repo
from tools import default_tools

FIX = {"path": "calc/ops.py", "old": "    return a - b\n\n\ndef subtract", "new": "    return a + b\n\n\ndef subtract"}
REPORT = ("from pathlib import Path\n\nfrom calc import add\n\n\ndef test_report():\n"
          "    Path('report.txt').write_text(f'add(2, 3) = {add(2, 3)}\\n')\n")
THINKING = "The fix is in; now I will run the tests again to see that they pass. "


def turn(name: str, arguments: dict[str, Any], before: str = "") -> Turn:
    return Turn(f"{before}Next I call {name}.\n<tool_call>{json.dumps({'name': name, 'arguments': arguments})}"
                "</tool_call>")


def fix_then(call: tuple[str, dict[str, Any]]) -> Recording:
    """Run the tests (they fail), fix calc.add, then make `call`, then finish."""
    return Recording([turn("run_tests", {}), turn("edit_file", FIX), turn(*call, before=THINKING * 3),
                      turn("finish", {"summary": "fixed"})])


class Held(ReplayEngine):
    """The replay engine, holding each answer after its first call closes until `ready()`, then calling
    `meanwhile(turn)` (a change made behind Tao's back, say)."""

    def __init__(self, recording: Recording, meanwhile: Callable[[int], None] | None = None) -> None:
        super().__init__(recording)
        self.ready: Callable[[], bool] = lambda: True
        self.meanwhile = meanwhile

    async def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        turn, text, held = self._next, "", False
        async for chunk in super().stream(request):
            yield chunk  # the session has parsed it (and started a chain) before asking for more
            text += chunk.text or ""
            if not held and CLOSE in text:
                held = True
                while not self.ready():
                    await asyncio.sleep(0.01)
                if self.meanwhile is not None:
                    self.meanwhile(turn)


def make_repo(parent: Path) -> Path:
    """examples/calc, with a test that writes what add(2, 3) gives to report.txt in the workspace."""
    repo = make_calc_repo(parent)
    (repo / "tests" / "test_report.py").write_text(REPORT)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a test that writes a report")
    return repo


def tree(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(repo).parts}


def modes(repo: Path) -> dict[str, int]:
    return {str(p.relative_to(repo)): p.lstat().st_mode for p in sorted(repo.rglob("*"))
            if ".git" not in p.relative_to(repo).parts}


async def run(repo: Path, recording: Recording, speculate: bool, meanwhile: Callable[[Path, int], None] | None,
              approval: ApprovalPolicy | None, hold: bool = True) -> list[Event]:
    events: list[Event] = []
    engine = Held(recording, None if meanwhile is None else lambda turn: meanwhile(repo, turn))
    session = Session("fix calc.add", engine, Workspace(repo), default_tools(), sinks=[events.append],
                      analyzer=Analyzer(PatternModel()) if speculate else None, approval=approval)
    if session.speculation is not None and hold:
        specs = session.speculation.specs
        engine.ready = lambda: all(s.after.footprint is not None or s.task is None or s.task.done()
                                   for s in specs.values() if s.after is not None and s.after.pending)
    await session.run()
    return events


async def both(tmp_path: Path, recording: Recording, meanwhile: Callable[[Path, int], None] | None = None,
               approval: ApprovalPolicy | None = None, hold: bool = True) -> tuple[list[Event], dict[str, bytes]]:
    """The session with speculation on, after checking it equals the serial one; and the tree it left."""
    repo = make_repo(tmp_path / "work")  # both runs at the same path: test output names it
    off = await run(repo, recording, False, meanwhile, approval)
    off_tree, off_modes = tree(repo), modes(repo)
    (tmp_path / "work").rename(tmp_path / "off")
    repo = make_repo(tmp_path / "work")
    on = await run(repo, recording, True, meanwhile, approval, hold)
    assert comparable(on) == comparable(off)
    assert tree(repo) == off_tree and modes(repo) == off_modes
    return on, off_tree


def chained(events: list[Event]) -> SpecLaunch:
    """The one speculation chained after the edit."""
    [launch] = [e for e in events if isinstance(e, SpecLaunch) and e.after is not None]
    assert launch.after == {"name": "edit_file", "arguments": FIX}
    return launch


def ends(events: list[Event], spec_id: str) -> list[Event]:
    return [e for e in events if isinstance(e, (SpecPromote, SpecDiscard)) and e.spec_id == spec_id]


async def test_the_test_run_after_an_edit_is_served_from_the_overlay_that_applied_it(tmp_path: Path) -> None:
    on, real = await both(tmp_path, fix_then(("run_tests", {})))
    launch = chained(on)
    [edited] = [e for e in on if isinstance(e, ToolResult) and e.name == "edit_file"]
    assert (launch.name, launch.arguments, launch.version + 1) == ("run_tests", {}, edited.workspace_version)
    [served] = ends(on, launch.spec_id)
    [call] = [e for e in on if isinstance(e, ToolCall) and e.step == 3]
    assert isinstance(served, SpecPromote) and served.call_id == call.call_id
    assert real["report.txt"] == b"add(2, 3) = 5\n"  # its file promoted as the serial run wrote it


async def test_a_new_file_in_a_new_folder_is_chained_like_an_edit(tmp_path: Path) -> None:
    new = {"path": "tests/extra/test_more.py", "content": "from calc import add\n\n\ndef test_more():\n"
                                                          "    assert add(1, 1) == 2\n"}
    recording = Recording([turn("run_tests", {}), turn("write_file", new), turn("run_tests", {}, before=THINKING),
                           turn("finish", {"summary": "tested"})])
    on, real = await both(tmp_path, recording)
    [launch] = [e for e in on if isinstance(e, SpecLaunch) and e.after is not None]
    assert launch.after == {"name": "write_file", "arguments": new}
    [served] = ends(on, launch.spec_id)
    assert isinstance(served, SpecPromote)
    assert real["tests/extra/test_more.py"] == new["content"].encode()


async def test_the_chain_is_served_whether_or_not_the_real_edit_lands_first(tmp_path: Path) -> None:
    # The answer ends at once: the real edit usually runs before the overlay holds it, and the overlay write,
    # which replaces the whole file, leaves the same tree either way.
    on, real = await both(tmp_path, fix_then(("run_tests", {})), hold=False)
    [served] = ends(on, chained(on).spec_id)
    assert isinstance(served, SpecPromote)
    assert real["report.txt"] == b"add(2, 3) = 5\n"


async def test_a_chain_is_discarded_when_the_tree_changes_before_the_real_edit(tmp_path: Path) -> None:
    def user_edits(repo: Path, turn: int) -> None:
        if turn == 1:  # while the model is still streaming the edit's answer
            with open(repo / "calc" / "ops.py", "a") as handle:
                handle.write("\n# the user was here\n")

    on, real = await both(tmp_path, fix_then(("run_tests", {})), meanwhile=user_edits)
    [discarded] = ends(on, chained(on).spec_id)
    assert isinstance(discarded, SpecDiscard) and discarded.reason.startswith("the workspace changed")
    assert real["calc/ops.py"].endswith(b"# the user was here\n")


async def test_no_chain_runs_an_edit_a_person_has_not_approved(tmp_path: Path) -> None:
    for policy in (ApprovalPolicy(mode="read-only"), ApprovalPolicy(mode="ask", headless="deny")):
        on, real = await both(tmp_path / policy.mode, fix_then(("run_tests", {})), approval=policy)
        assert not [e for e in on if isinstance(e, SpecLaunch) and e.after is not None]
        assert b"return a - b" in real["calc/ops.py"] and real["report.txt"] == b"add(2, 3) = -1\n"


async def test_a_chain_whose_call_never_comes_is_discarded_with_its_writes(tmp_path: Path) -> None:
    other = ("run_tests", {"command": "python -m pytest -q tests/test_ops.py"})
    on, real = await both(tmp_path, fix_then(other))
    [discarded] = ends(on, chained(on).spec_id)  # kept past the test run for a later call, which never came
    assert isinstance(discarded, SpecDiscard)
    assert real["report.txt"] == b"add(2, 3) = -1\n"  # the follower wrote 5 in its overlay only


def test_predicting_past_an_edit_leaves_the_analyzer_as_it_was() -> None:
    analyzer = Analyzer(PatternModel())
    analyzer.observe(ToolCall(0.0, 1, "c1", "run_tests", {}, "sandboxed"))
    analyzer.observe(ToolResult(0.0, 1, "c1", "run_tests", "1 failed", exit_code=1))
    before = analyzer.predict(k=5)
    weights = json.dumps(analyzer.ranker.weights, sort_keys=True, default=str)
    ahead = analyzer.ahead([ToolCall(0.0, 2, "c2", "edit_file", FIX, "mutating"),
                            ToolResult(0.0, 2, "c2", "edit_file", "Wrote calc/ops.py.", workspace_version=1)])
    assert ahead.predict(k=5) and ahead.state.steps[-1].action.kind != analyzer.state.steps[-1].action.kind
    assert analyzer.predict(k=5) == before
    assert json.dumps(analyzer.ranker.weights, sort_keys=True, default=str) == weights
