"""`tao bench live`: its arithmetic, the oracle analyzer and the recorded sessions (behaviour, never timings).

The oracle runs through the real Session and SpeculationScheduler over a real git repository made by
the test, with real tools and overlays; only the engine is the replay engine, as in every benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.bench import live
from harness.bench import sessions as recorded
from harness.bench.oracle import OracleAnalyzer, turn_calls
from harness.bench.overhead import Meter
from harness.engine.replay import Recording, ReplayEngine, Turn
from harness.events import (Event, LLMEnd, SessionStart, SpecLaunch, SpecPromote, SpecSummary, ToolCall,
                            comparable)
from harness.session import Session
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tools import default_tools

FIX = {"path": "calc/ops.py", "old": "    return a - b\n\n\ndef subtract", "new": "    return a + b\n\n\ndef subtract"}
CALLS = [("run_tests", {}), ("grep", {"pattern": "def add"}), ("read_file", {"path": "calc/ops.py", "start_line": 4,
                                                                            "end_line": 7}),
         ("edit_file", FIX), ("run_tests", {"command": "python -m pytest -q tests/test_ops.py::test_add"}),
         ("finish", {"summary": "fixed"})]


def script(calls: list[tuple[str, dict[str, Any]]]) -> Recording:
    return Recording([Turn(f"Now {name}.\n<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>")
                      for name, args in calls], task="fix calc.add")


def run(seconds: float, session: str = "s", mode: str = "off", rep: int = 0, trace: str = "t",
        promoted: int = 0) -> dict[str, Any]:
    spec = {"launched": promoted, "promoted": promoted, "discarded": 0, "repeats": 0, "saved": 0.0, "wasted": 0.0}
    overhead = {"decisions": 2, "launch": [0.001, 0.003], "take": [0.002], "predict": [0.001], "observe": 0.004,
                "total": 0.01}
    return {"session": session, "mode": mode, "rep": rep, "seconds": seconds, "status": "finished", "steps": 3,
            "spec": spec, "overhead": overhead, "calls": [], "trace": trace}


# -- arithmetic ----------------------------------------------------------------------------------------

def test_quantile_is_nearest_rank() -> None:
    assert live.quantile([3.0, 1.0, 2.0], 0.99) == 3.0
    assert live.quantile(list(map(float, range(1, 101))), 0.99) == 99.0
    assert live.quantile([], 0.99) == 0.0


def test_modes_rotate_so_none_always_runs_first() -> None:
    firsts = {live.order(rep, 0)[0] for rep in range(3)}
    assert firsts == set(live.MODES)
    assert all(sorted(live.order(rep, index)) == sorted(live.MODES) for rep in range(3) for index in range(4))


def test_summary_ratios_shares_and_worst_session() -> None:
    runs = []
    for rep in range(2):
        runs += [run(10.0, "a", "off", rep), run(9.0, "a", "on", rep, promoted=2), run(8.0, "a", "oracle", rep),
                 run(20.0, "b", "off", rep), run(20.6, "b", "on", rep, trace="other" if rep else "t"),
                 run(18.0, "b", "oracle", rep)]
    result = live.summarize(runs)
    a, b = result["sessions"]["a"], result["sessions"]["b"]
    assert a["ratio"] == 0.9 and a["oracle_ratio"] == 0.8 and a["share_of_oracle"] == 0.5
    assert b["ratio"] == 1.03 and b["saving_s"] == pytest.approx(-0.6)
    assert result["ratio_max"] == 1.03  # the worst session, not the mix
    assert result["ratio_mean"] == round(14.8 / 15.0, 4)
    assert result["ratio_p99"] == 1.03  # p99 of 4 runs is the largest: 20.6 against 20.0
    assert result["share_of_oracle"] == round((1.0 - 0.6) / (2.0 + 2.0), 4)
    assert a["spec"]["promoted"] == 2 and result["total"]["spec"]["promoted"] == 1
    assert result["trajectories_checked"] == 8 and result["trajectories_equal"] == 7
    assert result["overhead"]["decisions"] == 8 and result["overhead"]["ms_per_decision"] == 5.0


def test_call_gaps_rank_the_tool_wait_tao_leaves_to_the_oracle() -> None:
    runs = []
    for mode, waits in (("off", (1.0, 0.5)), ("on", (1.0, 0.0)), ("oracle", (0.2, 0.0))):
        entry = run(5.0, mode=mode)
        entry["calls"] = [{"step": i + 1, "name": "run_tests", "call": f"run_tests {i}", "duration": wait,
                           "promoted": False, "waited": 0.0} for i, wait in enumerate(waits)]
        runs.append(entry)
    gaps = live.call_gaps(runs)
    assert gaps["gap_s"] == 0.8
    assert gaps["largest"][0]["call"] == "run_tests 0" and gaps["largest"][0]["off_s"] == 1.0
    assert live.paired_ratios(runs) == {"s": [1.0]}
    runs[1]["calls"][1]["promoted"] = True
    assert live.unpromoted(runs) == {"calls": 1, "off_s": 1.0, "on_s": 1.0}


def test_no_oracle_saving_gives_no_share() -> None:
    result = live.summarize([run(10.0, mode="off"), run(10.0, mode="on"), run(10.0, mode="oracle")])
    assert result["share_of_oracle"] is None


# -- the oracle ----------------------------------------------------------------------------------------

def test_the_oracle_proposes_the_coming_turns_calls_at_moment_a_only() -> None:
    oracle = OracleAnalyzer(script(CALLS))
    oracle.observe(SessionStart(0.0, "id", "task", "/repo", "replay", [], {}, ""))
    [first] = oracle.predict("a")
    assert (first.name, first.arguments, first.probability, first.key) == ("run_tests", {}, 1.0, "run_tests {}")
    assert oracle.predict("b") == [] and oracle.predict("c") == []
    oracle.observe(LLMEnd(1.0, 1, "r1", "text"))
    [second] = oracle.predict("a")
    assert second.name == "grep" and second.utility > 0
    assert turn_calls(Turn("no call here")) == []


async def session_events(repo: Path, recording: Recording, analyzer: Any) -> tuple[list[Event], Meter]:
    events: list[Event] = []
    session = Session(recording.task or "", ReplayEngine(recording, seconds_per_token=0.001), Workspace(repo),
                      default_tools(), sinks=[events.append], analyzer=analyzer)
    meter = Meter.attach(session, events)
    await session.run()
    return events, meter


async def test_the_oracle_promotes_every_call_it_may_run_and_changes_nothing_else(tmp_path: Path) -> None:
    recording = script(CALLS)
    repo = make_calc_repo(tmp_path / "work")
    off, _ = await session_events(repo, recording, None)
    (tmp_path / "work").rename(tmp_path / "off")
    repo = make_calc_repo(tmp_path / "work")
    on, meter = await session_events(repo, recording, OracleAnalyzer(recording))
    assert comparable(on) == comparable(off)
    calls = [e for e in on if isinstance(e, ToolCall)]
    promoted = {e.call_id for e in on if isinstance(e, SpecPromote)}
    for call in calls:
        assert (call.call_id in promoted) == (call.effect != "mutating" and call.name != "finish"), call.name
    launches = [e for e in on if isinstance(e, SpecLaunch)]
    assert {e.moment for e in launches} == {"a"} and all(e.effect != "mutating" for e in launches)
    [summary] = [e for e in on if isinstance(e, SpecSummary)]
    assert summary.promoted == 4 and summary.discarded == 0
    assert meter.to_dict()["decisions"] > 0 and len(meter.take) == len(calls) - 1  # finish never reaches take


# -- the recorded sessions -----------------------------------------------------------------------------

def test_every_recorded_session_is_well_formed() -> None:
    sessions = recorded.load_sessions()
    assert 6 <= len(sessions) <= 10
    for session in sessions:
        calls = [turn_calls(turn) for turn in session.recording.turns]
        assert all(len(c) == 1 for c in calls), session.name
        assert calls[-1][0][0] == "finish" and session.recording.task, session.name
        assert sum(name == "run_tests" for [(name, _)] in calls) >= 1, session.name


def test_a_bundled_sessions_template_is_committed_with_its_setup(tmp_path: Path) -> None:
    session = next(s for s in recorded.load_sessions() if s.name == "calc-add-power")
    tree = recorded.template(session, tmp_path)
    assert "return a + b" in (tree / "calc" / "ops.py").read_text()  # the setup fixed add first
    assert (tree / ".git").is_dir()
    copy = recorded.checkout(session, tmp_path)
    assert copy != tree and (copy / "calc" / "ops.py").read_text() == (tree / "calc" / "ops.py").read_text()


def test_the_benchmark_runs_end_to_end_on_a_bundled_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", __import__("os").environ["PATH"])  # restored after: the run prepends the venv
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # no learned model: rules only
    code = live.main(["--only", "calc-fix-add", "--repeat", "1", "--tpot-ms", "0", "--cache", str(tmp_path), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("ratio_mean", "ratio_p99", "ratio_max", "share_of_oracle"):
        assert key in result
    assert not result["not_finished"] and result["trajectories_equal"] == result["trajectories_checked"] == 2
    assert result["sessions"]["calc-fix-add"]["oracle_spec"]["promoted"] >= 4
    assert "rules" in result["config"]["model"]
