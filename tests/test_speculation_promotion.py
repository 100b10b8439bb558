"""Promotion only of what the real call would have given, on the real scheduler, real tools and real overlays.

The analyzer is a stand-in that proposes fixed candidates (tests.test_speculation_scheduler.ScriptedAnalyzer):
these tests are about promotion, not prediction. Every served observation is compared with what the
real call gives when run for real on the same workspace.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.events import SpecDiscard, SpecPromote, SpecSummary, ToolCall, ToolResult
from harness.protocol import ParsedCall
from harness.speculation.running.records import Budget
from harness.speculation.running.scheduler import SpeculationScheduler
from tests.helpers import make_calc_repo
from tests.test_speculation_scheduler import make, of
from tools import default_tools, run_tool
from tools.base import Observation

WHOLE = ("read_file", {"path": "calc/ops.py"})


def seen(observation: Observation) -> tuple[str, bool, int | None, int]:
    """What the model sees of an observation."""
    return observation.text, observation.is_error, observation.exit_code, observation.truncated_chars


async def real(scheduler: SpeculationScheduler, name: str, arguments: Any) -> Observation:
    """The call run for real on the scheduler's workspace, as a session without speculation runs it."""
    tool = next(t for t in default_tools() if t.name == name)
    return await run_tool(tool, arguments, scheduler.workspace)


async def ready(scheduler: SpeculationScheduler) -> None:
    """Wait until every launched speculation has finished running (on its task, never on a clock)."""
    tasks = [s.task for s in scheduler.specs.values() if s.task is not None]
    if tasks:
        await asyncio.wait(tasks)


def add_symlinked_dirs(repo: Path) -> None:
    """`sub` is a symlink to deep/inner, so `sub/../x.py` is deep/x.py, not the x.py a lexical reading gives."""
    (repo / "deep" / "inner").mkdir(parents=True)
    (repo / "deep" / "x.py").write_text("DEEP = 1\n")
    (repo / "x.py").write_text("TOP = 1\n")
    (repo / "sub").symlink_to("deep/inner")


# (speculated call, the model's real call, whether the real call is invalid by the tool's schema)
NEAR_MISSES = [
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": 0}), True, id="start_line-0"),
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": -3}), True, id="start_line-negative"),
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": "5"}), True, id="start_line-string"),
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": 4, "end_line": "7"}), True,
                 id="end_line-string"),
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": 50}), False, id="start_line-past-end"),
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": 9, "end_line": 4}), False,
                 id="end-before-start"),
    pytest.param(WHOLE, ("read_file", {"path": "calc/ops.py", "bogus": 1}), True, id="unknown-argument"),
    pytest.param(WHOLE, ("read_file", {"path": " calc/ops.py "}), False, id="path-with-spaces"),
    pytest.param(("read_file", {"path": "x.py"}), ("read_file", {"path": "sub/../x.py"}), False,
                 id="dotdot-through-symlink"),
    pytest.param(("grep", {"pattern": "def "}), ("grep", {"pattern": "def ", "path": 7}), True, id="grep-path-int"),
    pytest.param(("list_files", {"depth": 1}), ("list_files", {"depth": "1"}), True, id="depth-string"),
    pytest.param(("run_tests", {"command": "echo hi"}), ("run_tests", {"command": "echo  hi"}), False,
                 id="command-spacing"),
    pytest.param(("read_file", {"path": "./missing.py"}), ("read_file", {"path": "missing.py"}), False,
                 id="error-spelling"),
]


@pytest.mark.parametrize("candidate, call, invalid", NEAR_MISSES)
async def test_a_near_miss_gets_what_the_real_call_gives(tmp_path: Path, candidate: tuple[str, dict],
                                                          call: tuple[str, dict], invalid: bool) -> None:
    repo = make_calc_repo(tmp_path)
    add_symlinked_dirs(repo)
    scheduler, events = make(repo, candidate)
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    served = await scheduler.take(ParsedCall("c1", *call))
    await scheduler.close()
    truth = await real(scheduler, *call)
    if served is not None:
        assert seen(served) == seen(truth), f"served {served.text!r}, the real call gives {truth.text!r}"
    if invalid:
        assert served is None, "an invalid call must be run for real, never served from a speculation"
        assert not of(events, SpecPromote)


async def test_a_range_past_the_end_is_served_with_the_real_error(tmp_path: Path) -> None:
    """Speculation stays useful: a valid range of a speculated whole read is served, errors included."""
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, WHOLE)
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    call = {"path": "calc/ops.py", "start_line": 50}
    served = await scheduler.take(ParsedCall("c1", "read_file", call))
    await scheduler.close()
    assert served is not None and seen(served) == seen(await real(scheduler, "read_file", call))
    assert served.is_error and of(events, SpecPromote)[0].sliced


async def test_an_equal_call_with_an_explicit_null_is_still_promoted(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo, ("grep", {"pattern": "def "}))
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    served = await scheduler.take(ParsedCall("c1", "grep", {"pattern": "def ", "path": None}))
    await scheduler.close()
    assert served is not None and seen(served) == seen(await real(scheduler, "grep", {"pattern": "def "}))
    assert len(of(events, SpecPromote)) == 1


# -- take() never raises -----------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
    | st.sampled_from(["calc/ops.py", " calc/ops.py ", "calc\x00ops.py", "\x1b[31m", "5", "-3", "0", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
KEYS = st.sampled_from(["path", "start_line", "end_line", "pattern", "glob", "depth", "command", "old", "new",
                        "content", "summary", "bogus", ""])
RANGES = st.fixed_dictionaries({"path": st.just("calc/ops.py")}, optional={"start_line": JSON, "end_line": JSON})
ARGUMENTS = RANGES | st.dictionaries(KEYS, JSON, max_size=4) | JSON | st.text(max_size=20)
NAMES = st.sampled_from([t.name for t in default_tools()]) | st.text(max_size=8)
CANDIDATES = [WHOLE, ("read_file", {"path": "calc/ops.py", "start_line": 2, "end_line": 5}),
              ("grep", {"pattern": "def "}), ("list_files", {}), ("outline", {"path": "calc/ops.py"}),
              ("run_tests", {"command": "true"})]


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"path": value}
    return value


NASTY = [("read_file", {"path": "calc/ops.py", "start_line": 10 ** 40}), ("read_file", deep(5000)),
         ("read_file", {"path": "calc/ops.py", "start_line": 3, "end_line": 2.5}), ("read_file", "[1, 2]"),
         ("read_file", {"path": "calc/ops.py", "start_line": True}), ("grep", {"pattern": "(", "path": "calc"}),
         ("list_files", {"path": "calc/ops.py"}), ("read\x00file", {}), ("outline", {"path": "calc\x00"})]


def fuzzing(repo: Path) -> SpeculationScheduler:
    """A fresh scheduler with a speculation of every tool (a fresh one: a kind that never pays is paused)."""
    scheduler, _ = make(repo, *CANDIDATES, budget=Budget(k=len(CANDIDATES), max_running=len(CANDIDATES)))
    return scheduler


async def take_does_not_raise(repo: Path, name: Any, arguments: Any) -> None:
    """Launch a speculation of every tool, wait for the pure ones, then take the call: it must not raise."""
    scheduler = fuzzing(repo)
    launched = scheduler.launch("a", 1)
    assert len(launched) == len(CANDIDATES)
    await asyncio.wait([s.task for s in launched if s.candidate.name != "run_tests"])
    try:
        served = await scheduler.take(ParsedCall("c", name, arguments))
    finally:
        await scheduler.close()
    if served is not None:  # anything served is what the real call gives
        assert seen(served) == seen(await real(scheduler, name, arguments))


async def test_take_never_raises_for_nasty_calls(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    for name, arguments in NASTY:
        await take_does_not_raise(repo, name, arguments)


def test_take_never_raises_for_any_call(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(NAMES, ARGUMENTS)
    def prop(name: str, arguments: Any) -> None:
        asyncio.run(take_does_not_raise(repo, name, arguments))

    prop()


# -- the repeat cache -------------------------------------------------------------------------------

def remember(scheduler: SpeculationScheduler, call_id: str, name: str, arguments: dict, result: Observation,
             effect: str) -> None:
    """Feed a real call and its result to the scheduler, as the session does."""
    version = scheduler.workspace.version
    scheduler.observe(ToolCall(0.0, 1, call_id, name, arguments, effect))
    scheduler.observe(ToolResult(0.1, 1, call_id, name, result.text, result.is_error, result.exit_code,
                                 result.truncated_chars, workspace_version=version))


async def test_a_nondeterministic_run_is_never_answered_from_the_repeat_cache(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo)
    arguments = {"command": "date +%s%N; od -An -N8 -tx8 /dev/urandom"}
    remember(scheduler, "c1", "run_tests", arguments, await real(scheduler, "run_tests", arguments), "sandboxed")
    again = await scheduler.take(ParsedCall("c2", "run_tests", arguments))
    await scheduler.close()
    assert again is None, f"a stale answer was served: {again.text if again else ''!r}"
    assert not of(events, SpecPromote)


async def test_a_file_changed_through_an_outside_hard_link_is_not_answered_from_the_repeat_cache(
        tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path / "work")
    outside = tmp_path / "outside.txt"
    outside.write_text("one\n")
    os.link(outside, repo / "data.txt")
    scheduler, events = make(repo)
    arguments = {"path": "data.txt"}
    remember(scheduler, "c1", "read_file", arguments, await real(scheduler, "read_file", arguments), "pure")
    outside.write_text("two\n")  # the same inode, through its other name
    again = await scheduler.take(ParsedCall("c2", "read_file", arguments))
    await scheduler.close()
    assert again is None or seen(again) == seen(await real(scheduler, "read_file", arguments)), again.text
    assert "two" in (await real(scheduler, "read_file", arguments)).text


async def test_a_pure_repeat_is_still_answered(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo)
    arguments = {"path": "calc/ops.py", "start_line": 2}
    first = await real(scheduler, "read_file", arguments)
    remember(scheduler, "c1", "read_file", arguments, first, "pure")
    again = await scheduler.take(ParsedCall("c2", "read_file", arguments))
    await scheduler.close()
    assert again is not None and seen(again) == seen(first)
    assert of(events, SpecPromote)[0].spec_id == "repeat"


# -- runs that may have seen another world ----------------------------------------------------------

async def test_a_run_that_changed_a_hard_linked_file_is_tainted_and_never_promoted(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path / "work")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    os.link(outside, repo / "linked.txt")
    arguments = {"command": "echo appended >> linked.txt"}
    scheduler, events = make(repo, ("run_tests", arguments))
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    served = await scheduler.take(ParsedCall("c1", "run_tests", arguments))
    await scheduler.close()
    assert served is None
    assert outside.read_text() == "outside\n" and os.stat(repo / "linked.txt").st_nlink == 2
    [discard] = of(events, SpecDiscard)
    assert discard.tainted and discard.reason.startswith("tainted: ") and "linked.txt" in discard.reason
    assert not of(events, SpecPromote)


async def test_a_run_that_used_a_localhost_service_is_tainted(tmp_path: Path) -> None:
    """The real run would reach the service the test started outside; the sandboxed run cannot."""
    repo = make_calc_repo(tmp_path)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    command = f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port})); print(s.recv(9))\""
    arguments = {"command": command}
    scheduler, events = make(repo, ("run_tests", arguments))
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    served = await scheduler.take(ParsedCall("c1", "run_tests", arguments))
    await scheduler.close()
    server.close()
    await server.wait_closed()
    assert served is None
    [discard] = of(events, SpecDiscard)
    assert discard.tainted and discard.reason.startswith("tainted: ")
    assert of(events, SpecSummary)[0].tainted == 1


# -- limits a real run may not meet ------------------------------------------------------------------

async def test_a_speculation_that_timed_out_is_not_promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A speculative grep starved by the load of speculation hits its timeout; the real call would not."""
    import tools.grep

    repo = make_calc_repo(tmp_path)
    arguments = {"pattern": "def "}
    scheduler, events = make(repo, ("grep", arguments))
    monkeypatch.setattr(tools.grep, "GREP_TIMEOUT", 0.0)  # stands in for a machine too busy to finish in time
    [spec] = scheduler.launch("a", 1)
    await asyncio.wait([spec.task])
    monkeypatch.undo()
    served = await scheduler.take(ParsedCall("c1", "grep", arguments))
    await scheduler.close()
    truth = await real(scheduler, "grep", arguments)
    assert not truth.is_error
    assert served is None or seen(served) == seen(truth), served.text
    assert not of(events, SpecPromote)


async def test_an_error_is_never_answered_from_the_repeat_cache(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    scheduler, events = make(repo)
    arguments = {"pattern": "def "}
    timed_out = Observation("Error: grep timed out after 120 s; narrow the path or glob", is_error=True)
    remember(scheduler, "c1", "grep", arguments, timed_out, "pure")
    again = await scheduler.take(ParsedCall("c2", "grep", arguments))
    await scheduler.close()
    assert again is None


async def test_no_speculative_run_where_the_sandbox_cannot_confine_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without namespaces (TAO_SANDBOX_NAMESPACES=none) an "overlay" is a copy at another path: a command run
    there acts on the real system (an absolute path reaches the real workspace). So nothing is run ahead of
    the model at all, and the real call still gets the real result."""
    monkeypatch.setenv("TAO_SANDBOX_NAMESPACES", "none")
    monkeypatch.setenv("TAO_OVERLAY_DIR", str(tmp_path / "state"))
    repo = make_calc_repo(tmp_path / "repo")
    marker = tmp_path / "outside.txt"
    command = f"echo ran >> {marker}; echo done"
    scheduler, events = make(repo, ("run_tests", {"command": command}))
    scheduler.launch("a", 1)
    await ready(scheduler)
    assert not marker.exists()  # the guess was never run
    assert await scheduler.take(ParsedCall("c1", "run_tests", {"command": command})) is None
    scheduler.launch("b", 2)  # and it is not tried again
    assert not [s for s in scheduler.specs.values() if s.candidate.name == "run_tests"]
    await scheduler.close()
    assert not marker.exists()
    assert not of(events, SpecPromote)
