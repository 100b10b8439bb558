"""The speculation scheduler on real workspaces, real tools and real overlays.

The analyzer is replaced by a scripted one that proposes fixed candidates: these tests are about
launching, promoting and discarding, not about prediction quality (tests/test_patterns_* cover that).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness.events import Event, SpecDiscard, SpecLaunch, SpecPromote, ToolCall, ToolResult
from harness.protocol import ParsedCall
from harness.calls.canonical import canonical
from harness.speculation.prediction.patterns import Candidate, Partial
from harness.speculation.running.records import Budget
from harness.speculation.running.scheduler import SpeculationScheduler
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tools import default_tools, run_tool


class ScriptedAnalyzer:
    """Proposes the same calls at every moment, each with a high probability."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = list(calls)

    def observe(self, event: Event) -> None:
        pass

    def ahead(self, events: list[Event]) -> ScriptedAnalyzer:
        """For a chain past an edit: one that proposes nothing."""
        return ScriptedAnalyzer()

    def predict(self, moment: str, partial: Any = None, k: int = 3) -> list[Candidate]:
        out = []
        for name, arguments in self.calls[:k]:
            action = canonical(name, arguments)
            out.append(Candidate(name, arguments, action.key, action.kind, action.effect, 0.9, 1.0, 0.1, 0.9,
                                 "scripted"))
        return out


def make(repo: Path, *calls: tuple[str, dict[str, Any]],
         budget: Budget | None = None) -> tuple[SpeculationScheduler, list[Event]]:
    events: list[Event] = []
    tools = {tool.name: tool for tool in default_tools()}
    start = time.monotonic()
    scheduler = SpeculationScheduler(Workspace(repo), tools, ScriptedAnalyzer(*calls), events.append,
                                     lambda: time.monotonic() - start, budget or Budget())
    return scheduler, events


def of(events: list[Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


async def authoritative(repo: Path, name: str, arguments: dict[str, Any]) -> str:
    tool = next(t for t in default_tools() if t.name == name)
    return (await run_tool(tool, arguments, Workspace(repo))).text


async def test_an_exact_match_is_promoted_with_the_real_result(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("grep", {"pattern": "def "}), ("read_file", {"path": "calc/ops.py"}))
    scheduler.launch("a", 1)
    observation = await scheduler.take(ParsedCall("c1", "grep", {"pattern": "def "}))
    [kept] = scheduler.specs.values()  # a read changes nothing: the other guess may serve a later call
    await scheduler.close()
    assert observation is not None and observation.text == await authoritative(repo, "grep", {"pattern": "def "})
    [promote] = of(events, SpecPromote)
    assert promote.call_id == "c1"
    assert kept.candidate.name == "read_file" and kept.spec_id != promote.spec_id
    [discard] = of(events, SpecDiscard)
    assert discard.spec_id == kept.spec_id and discard.reason == "the session ended"


async def test_a_guess_kept_past_a_read_answers_the_next_call(tmp_path: Path) -> None:
    """A test run guessed at a step whose call was a read still answers the test run asked for a step later."""
    repo = make_calc_repo(tmp_path)
    command = "python -m pytest -q"
    scheduler, events = make(repo, ("run_tests", {"command": command}), ("read_file", {"path": "calc/ops.py"}))
    scheduler.launch("a", 1)
    read = await scheduler.take(ParsedCall("c1", "read_file", {"path": "calc/ops.py"}))
    scheduler.launch("a", 2)  # the run is already going: not started twice
    run = await scheduler.take(ParsedCall("c2", "run_tests", {"command": command}))
    await scheduler.close()
    assert read is not None and run is not None and "1 failed, 2 passed" in run.text
    assert run.text == await authoritative(repo, "run_tests", {"command": command})
    launches = of(events, SpecLaunch)
    assert [p.call_id for p in of(events, SpecPromote)] == ["c1", "c2"]
    assert [launch.name for launch in launches].count("run_tests") == 1
    assert of(events, SpecPromote)[1].spec_id == launches[0].spec_id  # the run started at step 1


async def test_a_kept_guess_goes_when_the_tree_changes(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("grep", {"pattern": "return"}), ("read_file", {"path": "calc/ops.py"}))
    scheduler.launch("a", 1)
    await scheduler.take(ParsedCall("c1", "read_file", {"path": "calc/ops.py"}))
    (repo / "calc" / "extra.py").write_text("return 1\n")  # as the real run of the next call might
    assert await scheduler.take(ParsedCall("c2", "grep", {"pattern": "return"})) is None
    await scheduler.close()
    [discard] = of(events, SpecDiscard)
    assert discard.reason == "the workspace changed (version 0 -> 1)"


async def test_guesses_are_kept_only_up_to_the_running_budget(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    reads = [("read_file", {"path": path}) for path in ("README.md", "calc/ops.py", "calc/__init__.py")]
    scheduler, events = make(repo, ("grep", {"pattern": "def "}), *reads, budget=Budget(k=4, max_running=2))
    scheduler.launch("a", 1)  # two start: the budget's places
    await scheduler.take(ParsedCall("c1", "list_files", {}))
    scheduler.launch("a", 2)  # reads kept from step 1 hold no place at step 2: two more start
    await scheduler.take(ParsedCall("c2", "list_files", {}))
    await scheduler.close()
    launched = [launch.spec_id for launch in of(events, SpecLaunch)]
    discarded = [d.spec_id for d in of(events, SpecDiscard) if d.reason == "not the model's call"]
    assert len(launched) == 4 and discarded == launched[:2]  # the oldest go, the newest two are kept


async def test_a_line_range_is_served_from_a_speculated_whole_read(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("read_file", {"path": "calc/ops.py"}))
    [spec] = scheduler.launch("b", 1)
    await spec.task
    call = {"path": "calc/ops.py", "start_line": 4, "end_line": 7}
    observation = await scheduler.take(ParsedCall("c1", "read_file", call))
    assert observation is not None and observation.text == await authoritative(repo, "read_file", call)
    assert of(events, SpecPromote)[0].sliced


async def test_a_running_speculation_is_never_promoted_after_the_tree_changes(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    command = "sleep 0.5; python -m pytest -q"
    scheduler, events = make(repo, ("run_tests", {"command": command}))
    scheduler.launch("a", 1)
    ops = repo / "calc" / "ops.py"
    ops.write_text(ops.read_text().replace("return a - b\n\n\ndef subtract", "return a + b\n\n\ndef subtract"))
    observation = await scheduler.take(ParsedCall("c1", "run_tests", {"command": command}))
    await scheduler.close()
    assert observation is None
    assert not of(events, SpecPromote)
    assert "the workspace changed" in of(events, SpecDiscard)[0].reason


async def test_a_promoted_test_run_leaves_its_files_as_the_real_run_would(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    command = "python -m pytest -q --junitxml=report.xml"
    scheduler, events = make(repo, ("run_tests", {"command": command}))
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    assert not (repo / "report.xml").exists()  # nothing reaches the real tree before promotion
    observation = await scheduler.take(ParsedCall("c1", "run_tests", {"command": command}))
    await scheduler.close()
    assert observation is not None and "1 failed, 2 passed" in observation.text
    assert (repo / "report.xml").is_file() and "testsuite" in (repo / "report.xml").read_text()
    assert scheduler.workspace.refresh() == 1  # the promoted effects count as a change, like a real run's


async def test_unmatched_speculations_are_killed_at_once(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    marker = "sleep 987.25"
    scheduler, events = make(repo, ("run_tests", {"command": marker}))
    scheduler.launch("a", 1)
    for _ in range(100):
        if subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the speculative command never started")
    # an edit will change the tree: nothing guessed before it can serve a later call
    await scheduler.take(ParsedCall("c1", "edit_file", {"path": "calc/ops.py", "old": "a - b", "new": "a + b"}))
    await scheduler.close()  # waits for the kill to be reaped
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
    assert of(events, SpecDiscard)[0].reason == "not the model's call"  # at the take, not at the end


async def test_mutating_calls_are_never_speculated(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    before = (repo / "calc" / "ops.py").read_text()
    scheduler, events = make(repo, ("edit_file", {"path": "calc/ops.py", "old": "a - b", "new": "a + b"}),
                             ("write_file", {"path": "x.txt", "content": "x"}), ("bash", {"command": "touch y"}))
    assert scheduler.launch("a", 1) == []
    await scheduler.close()
    assert (repo / "calc" / "ops.py").read_text() == before and not (repo / "x.txt").exists()
    assert not of(events, SpecLaunch)


async def test_a_repeat_at_the_same_version_is_answered_from_the_real_run(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo)
    workspace = scheduler.workspace
    arguments = {"pattern": "return"}
    first = await authoritative(repo, "grep", arguments)
    scheduler.observe(ToolCall(0.0, 1, "c1", "grep", arguments, "pure"))
    scheduler.observe(ToolResult(0.1, 1, "c1", "grep", first, workspace_version=workspace.version))
    again = await scheduler.take(ParsedCall("c2", "grep", arguments))
    assert again is not None and again.text == first
    (repo / "calc" / "extra.py").write_text("return 1\n")  # behind Tao's back
    assert await scheduler.take(ParsedCall("c3", "grep", arguments)) is None
    await scheduler.close()


async def test_a_kind_that_never_pays_is_paused(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("list_files", {"path": "calc"}))
    for step in range(1, 10):
        scheduler.launch("a", step)
        await asyncio.sleep(0.05)
        await scheduler.take(ParsedCall(f"c{step}", "read_file", {"path": "README.md"}))
        (repo / f"note{step}.txt").write_text("x")  # the tree changes each step: no guess outlives it
    await scheduler.close()
    launched = len(of(events, SpecLaunch))
    assert 6 <= launched < 9  # judged after six wasted launches, then paused for a while


async def test_a_bash_command_is_never_answered_by_the_structured_call_it_amounts_to(tmp_path: Path) -> None:
    # `cat f` has read_file(f)'s canonical key, but bash prints the file, not read_file's numbered lines.
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("read_file", {"path": "calc/ops.py"}))
    [spec] = scheduler.launch("a", 1)
    await spec.task
    assert await scheduler.take(ParsedCall("c1", "bash", {"command": "cat calc/ops.py"})) is None
    read = await authoritative(repo, "read_file", {"path": "calc/ops.py"})
    scheduler.observe(ToolCall(0.0, 2, "c2", "read_file", {"path": "calc/ops.py"}, "pure"))
    scheduler.observe(ToolResult(0.1, 2, "c2", "read_file", read, workspace_version=scheduler.workspace.version))
    assert await scheduler.take(ParsedCall("c3", "bash", {"command": "cat calc/ops.py"})) is None  # not a repeat
    await scheduler.close()
    assert not of(events, SpecPromote)
    assert of(events, SpecDiscard)[0].reason == "not the model's call"


async def test_a_failed_run_is_a_guess_of_its_output_only_until_the_tree_changes(tmp_path: Path) -> None:
    """After an edit, a failing test run is expected to print something else: no warming on its old output."""
    repo = make_calc_repo(tmp_path)
    scheduler, _ = make(repo)
    workspace = scheduler.workspace
    test = ParsedCall("c1", "run_tests", {"command": "pytest"})
    lint = ParsedCall("c2", "run_tests", {"command": "lint"})
    for call, code in ((test, 1), (lint, 0)):
        scheduler.observe(ToolCall(0.0, 1, call.call_id, call.name, call.arguments, "sandboxed"))
        scheduler.observe(ToolResult(0.1, 1, call.call_id, call.name, f"exit {code}", exit_code=code,
                                     workspace_version=workspace.version))
    assert scheduler.last_output(test) == "exit 1" and scheduler.last_output(lint) == "exit 0"
    workspace.bump()
    assert scheduler.last_output(test) is None and scheduler.last_output(lint) == "exit 0"
    await scheduler.close()


async def test_once_the_call_is_named_speculations_of_other_tools_give_up_their_place(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("run_tests", {}), ("read_file", {"path": "calc/ops.py"}),
                             budget=Budget(max_sandboxed=1))
    launched = scheduler.launch("a", 1)
    assert {s.candidate.name for s in launched} == {"run_tests", "read_file"}
    scheduler.narrow("read_file")
    assert [s.candidate.name for s in scheduler.specs.values()] == ["read_file"]
    [discard] = of(events, SpecDiscard)
    assert discard.reason == "the model is calling read_file"
    observation = await scheduler.take(ParsedCall("c1", "read_file", {"path": "calc/ops.py"}))
    await scheduler.close()
    assert observation is not None and observation.text == await authoritative(repo, "read_file",
                                                                               {"path": "calc/ops.py"})


async def test_once_the_call_is_named_no_other_tool_is_launched(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("run_tests", {}), ("read_file", {"path": "calc/ops.py"}))
    # A bash call that runs the tests shares run_tests' key but is never answered by it (take refuses).
    assert scheduler.launch("c", 1, Partial(text="Run the tests.", name="bash")) == []
    launched = scheduler.launch("c", 1, Partial(text="Read it.", name="read_file"))
    assert [s.candidate.name for s in launched] == ["read_file"]
    await scheduler.close()
    assert [e.name for e in of(events, SpecLaunch)] == ["read_file"]


async def test_a_discarded_run_costs_the_cpu_it_used_not_the_time_it_waited(tmp_path: Path) -> None:
    """Speculative runs are niced: beside other work the busy one may take long to use 0.5 s, so it is waited for
    on that condition with a deadline no busy machine reaches, never for a fixed number of polls."""
    repo = make_calc_repo(tmp_path)
    busy = ("python3 -c 'import time\nt = time.process_time()\n"
            "while time.process_time() - t < 0.5: pass\ntime.sleep(986)'")
    scheduler, events = make(repo, ("run_tests", {"command": "sleep 987.5"}), ("run_tests", {"command": busy}),
                             budget=Budget(max_sandboxed=2))
    waiting, working = scheduler.launch("a", 1)
    deadline, cpu = time.monotonic() + 300, 0.0
    while time.monotonic() < deadline:
        cpu = working.overlay.cpu_seconds() if working.overlay is not None else 0.0
        if cpu is None or cpu >= 0.5:
            break
        await asyncio.sleep(0.05)
    if cpu is None:
        pytest.skip("the sandbox stage here has no pid namespace: costs fall back to wall time")
    assert cpu >= 0.5, "the busy run never used 0.5 CPU seconds"
    await scheduler.take(ParsedCall("c1", "list_files", {}))
    await scheduler.close()
    cost = {d.spec_id: d.cost for d in of(events, SpecDiscard)}
    assert cost[working.spec_id] >= 0.5
    assert cost[waiting.spec_id] < cost[working.spec_id] / 3  # it waited as long, on next to no CPU


async def test_a_speculations_head_start_is_known_for_exactly_its_call(tmp_path: Path) -> None:
    scheduler, _ = make(make_calc_repo(tmp_path), ("grep", {"pattern": "def "}))
    assert scheduler.head_start("grep", {"pattern": "def "}) is None  # nothing launched yet
    scheduler.launch("a", 1)
    ahead = scheduler.head_start("grep", {"pattern": "def "})
    assert ahead is not None and ahead >= 0  # the hint to tao serve says only what is left of the call
    assert scheduler.head_start("grep", {"pattern": "def add"}) is None
    await scheduler.close()
