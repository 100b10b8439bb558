"""`tao bench live`: its arithmetic, the oracle analyzer and the recorded sessions (behaviour, never timings).

The oracle runs through the real Session and SpeculationScheduler over a real git repository made by
the test, with real tools and overlays; only the engine is the replay engine, as in every benchmark.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.bench import live, live_embedded as embedded
from harness.bench import recordings as recorded
from harness.bench.oracle import OracleAnalyzer, turn_calls
from harness.bench.overhead import Meter
from harness.engine.api import LLMRequest
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.events import (Event, LLMEnd, LLMFirstToken, LLMStart, SessionStart, SpecLaunch, SpecObsSettle,
                            SpecObsWarm, SpecPromote, SpecSummary, ToolCall, ToolResult, comparable)
from harness.session import Session
from harness.speculation.running.records import Budget
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
    firsts = {live.order(rep, 0)[0] for rep in range(len(live.MODES))}
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
    assert result["trajectories_differ"] == []  # runs without their events say only that they differ
    assert result["overhead"]["decisions"] == 8 and result["overhead"]["ms_per_decision"] == 5.0


def test_a_trajectory_that_differs_is_shown_at_its_first_differing_event() -> None:
    off, on = run(10.0, "a", "off"), run(9.0, "a", "on", trace="other")
    off["events"] = ['{"type": "session_start"}', '{"output": "3 passed", "type": "tool_result"}']
    on["events"] = ['{"type": "session_start"}', '{"output": "2 passed", "type": "tool_result"}']
    diff = live.summarize([off, on, run(8.0, "a", "oracle")])["trajectories_differ"]
    assert diff == [{"run": "a/on/0", "event": 1, "off": off["events"][1], "on": on["events"][1]}]
    on["events"] = on["events"][:1]
    assert live.differences([off, on])[0] == {"run": "a/on/0", "event": 1, "off": off["events"][1], "on": None}


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


def test_the_cold_runs_are_summarised_beside_the_adapted_ones() -> None:
    runs = [run(10.0, "a", "off"), run(9.0, "a", "on"), run(9.5, "a", "cold"), run(8.0, "a", "oracle"),
            run(20.0, "b", "off"), run(19.0, "b", "on"), run(20.4, "b", "cold"), run(18.0, "b", "oracle")]
    total = live.summarize(runs)["total"]
    assert total["cold_ratio_max"] == 1.02 and total["cold_saving_s"] == pytest.approx(0.1)
    assert total["cold_share_of_oracle"] == round(0.1 / 4.0, 4) and total["share_of_oracle"] == 0.5
    assert "cold_ratio_mean" not in live.summarize([r for r in runs if r["mode"] != "cold"])["total"]


def test_only_the_on_runs_learn_from_past_sessions() -> None:
    from tests.test_patterns_past import targeted_then_suite

    session = recorded.load_sessions(recorded.SESSIONS_DIR, ["calc-fix-add"])[0]
    past = [targeted_then_suite(n).events for n in range(3)]
    on, cold = live.analyzer_for("on", session, None, past), live.analyzer_for("cold", session, None, past)
    assert on.ranker.weights != cold.ranker.weights
    assert cold.ranker.weights == live.analyzer_for("on", session, None, []).ranker.weights


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
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after: the run prepends the venv
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # no model of the user's: the shipped one
    code = live.main(["--only", "calc-fix-add", "--repeat", "1", "--tpot-ms", "0", "--cache", str(tmp_path), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("ratio_mean", "ratio_p99", "ratio_max", "share_of_oracle"):
        assert key in result
    assert not result["not_finished"] and result["trajectories_equal"] == result["trajectories_checked"] == 3
    assert result["sessions"]["calc-fix-add"]["oracle_spec"]["promoted"] >= 4
    assert "shipped with Tao" in result["config"]["model"]


# -- --engine embedded: observation warming on the real engine ---------------------------------------------

def turn_events(step: int, t: float, ttft: float, prompt: int, cached: int) -> list[Event]:
    return [LLMStart(t, step, f"r{step}", 2), LLMFirstToken(t + ttft + 0.01, step, f"r{step}"),
            LLMEnd(t + 1.0, step, f"r{step}", "text", prompt_tokens=prompt, cached_tokens=cached, ttft=ttft)]


def tool_events(step: int, t: float, name: str, output: str, effect: str = "sandboxed") -> list[Event]:
    args = {"command": "pytest -q"} if name == "run_tests" else {"pattern": "x"}
    return [ToolCall(t, step, f"c{step}", name, args, effect),
            ToolResult(t + 0.5, step, f"c{step}", name, output, duration=0.5)]


def test_after_tool_steps_classify_the_guess_as_the_session_makes_it() -> None:
    events: list[Event] = [SessionStart(0.0, "id", "task", "/repo", "e", [], {}, "")]
    events += turn_events(1, 0.0, 2.0, 1000, 896) + tool_events(1, 1.1, "run_tests", "1 failed")
    events += turn_events(2, 2.0, 1.0, 1100, 1024) + tool_events(2, 3.1, "run_tests", "1 failed")  # a repeat
    events += [SpecObsWarm(3.1, 2, "c2", "last_run", False, 8), SpecObsSettle(3.6, 2, "c2", True, 1200)]
    events += turn_events(3, 4.0, 0.5, 1200, 1152) + tool_events(3, 5.1, "run_tests", "1 passed")  # differs
    events += [SpecObsSettle(5.6, 3, "c3", False, None)]
    events += turn_events(4, 6.0, 0.8, 1300, 1152) + tool_events(4, 7.1, "run_tests", "1 passed")
    events += [SpecPromote(7.2, 4, "s1", "c4", 0.5, 0.0)]  # promoted: there at once, nothing to warm
    events += turn_events(5, 8.0, 0.7, 1400, 1280) + tool_events(5, 9.1, "grep", "a:1", "pure")
    events += turn_events(6, 10.0, 0.6, 1500, 1408)
    rows = embedded.after_tool_steps(events)
    assert [(r["step"], r["tool"], r["guess"], r["settled"]) for r in rows] == [
        (2, "run_tests", "none", None), (3, "run_tests", "matched", True), (4, "run_tests", "mismatched", False),
        (5, "run_tests", "none", None), (6, "grep", "none", None)]
    assert rows[1]["ttft"] == 0.5 and rows[1]["wait"] == pytest.approx(0.51) and rows[1]["warmed_tokens"] == 1200
    assert (rows[2]["guess_chars"], rows[2]["output_chars"], rows[4]["guess_chars"]) == (8, 8, None)
    assert (rows[0]["prompt_tokens"], rows[0]["cached_tokens"]) == (1100, 1024)
    record = embedded.run_record(events, "s", "warm", 0, 12.0, "finished", 6)
    assert (record["warms"], record["matched"], record["mismatched"], record["promoted"]) == (1, 1, 1, 1)
    assert record["prompt_tokens"] == 7500 and record["output_tokens"] == [0] * 6
    assert record["first_step"] == {"prompt_tokens": 1000, "cached_tokens": 896}
    assert embedded.guess_check([record]) == {"guesses": 2, "agree": 2, "settles": 2}


def embedded_run(mode: str, ttfts: list[tuple[str, float]], seconds: float = 10.0, rep: int = 0,
                 session: str = "s", trace: str = "t") -> dict[str, Any]:
    rows = [{"step": i + 2, "tool": "run_tests", "guess": guess, "duration": 0.5, "settled": None,
             "warmed_tokens": None, "ttft": ttft, "wait": ttft + 0.01, "prompt_tokens": 1000, "cached_tokens": 900}
            for i, (guess, ttft) in enumerate(ttfts)]
    return {"session": session, "mode": mode, "rep": rep, "seconds": seconds, "status": "finished", "steps": 4,
            "after_tool": rows, "prompt_tokens": 4000, "cached_tokens": 3000, "output_tokens": [10, 20],
            "warms": 0 if mode == "nowarm" else 2, "matched": 0 if mode == "nowarm" else 1,
            "mismatched": 0 if mode == "nowarm" else 1, "promoted": 0, "trace": trace,
            "first_step": {"prompt_tokens": 1000, "cached_tokens": 896}}


def test_embedded_summary_gives_ttft_after_tools_by_guess_and_the_ratio() -> None:
    runs = [embedded_run("nowarm", [("matched", 4.0), ("mismatched", 2.0), ("none", 1.0)], 20.0),
            embedded_run("warm", [("matched", 1.0), ("mismatched", 3.0), ("none", 1.0)], 18.0),
            embedded_run("nowarm", [("matched", 6.0), ("mismatched", 2.0), ("none", 1.0)], 22.0, rep=1),
            embedded_run("warm", [("matched", 2.0), ("mismatched", 2.0), ("none", 2.0)], 20.0, rep=1, trace="x")]
    result = embedded.summarize(runs)
    nowarm, warm = result["total"]["nowarm"], result["total"]["warm"]
    assert nowarm["ttft"] == {"n": 6, "mean": round(16.0 / 6, 4), "p50": 2.0}
    assert warm["by_guess"]["matched"]["ttft"] == {"n": 2, "mean": 1.5, "p50": 1.0}
    assert nowarm["by_guess"]["matched"]["ttft"]["mean"] == 5.0
    assert result["ttft_after_tool_ratio"] == round((11.0 / 6) / (16.0 / 6), 4)
    assert result["ttft_after_matched_ratio"] == 0.3
    assert result["total"]["ratios"]["warm"]["seconds"] == round(19.0 / 21.0, 4)
    assert nowarm["cache_hit"] == 0.75 and nowarm["cache_hit_after_tool"] == 0.9
    assert (warm["warms"], warm["matched"]) == (4, 2)
    assert result["trajectories_checked"] == 2 and result["trajectories_equal"] == 1
    assert result["output_tokens_equal"] == 2 and result["wait_after_tool_ratio_provisional"] is None
    assert set(result["sessions"]["s"]["ratios"]) == {"warm"}


def test_embedded_modes_rotate_and_each_run_gets_its_own_fixed_length_nonce() -> None:
    modes = list(embedded.MODES)
    assert {embedded.order(modes, rep, 0)[0] for rep in range(3)} == set(modes)
    assert embedded.nonce_task("fix it", 12345678) == "Run 12345678.\nfix it"
    assert len(embedded.nonce_task("t", 10**7)) == len(embedded.nonce_task("t", 10**8 - 1))


@pytest.mark.engine
async def test_embedded_runs_share_no_cache_past_the_system_prompt(vllm_engine, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated test run is warmed and matched on the real engine; a second run of the same session
    finds no more of its first prompt cached than the primed system prompt."""
    monkeypatch.setenv("PATH", os.environ["PATH"])  # bench_environment prepends the venv
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    live.bench_environment()
    test = ("run_tests", {"command": "python -m pytest -q tests/test_ops.py::test_subtract"})
    calls = [test, ("write_file", {"path": "NOTES.md", "content": "ok\n"}), test, ("finish", {"summary": "ok"})]
    recording = Recording([Turn(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>")
                           for n, a in calls], task="Check subtract.")
    session = recorded.LiveSession("calc-tiny", recording, {"example": "calc"}, [])
    await embedded.prime(vllm_engine, session, tmp_path)
    budget = Budget(max_sandboxed=0)  # the re-run is left to the model, so it is warmed, not promoted
    warm = await embedded.run_one(vllm_engine, session, "warm", 0, None, budget, tmp_path, 11111111)
    cold = await embedded.run_one(vllm_engine, session, "nowarm", 0, None, budget, tmp_path, 22222222)
    assert warm["status"] == cold["status"] == "finished" and warm["trace"] == cold["trace"]
    assert (warm["warms"], warm["matched"]) == (1, 1) and cold["warms"] == 0
    assert [r["guess"] for r in warm["after_tool"]] == ["none", "none", "matched"]
    assert embedded.guess_check([warm]) == {"guesses": 1, "agree": 1, "settles": 1}
    system = vllm_engine.render(LLMRequest("x", [{"role": "system", "content": "s"}], [], 1))  # template only
    assert 0 < cold["first_step"]["cached_tokens"] == warm["first_step"]["cached_tokens"]
    assert cold["first_step"]["cached_tokens"] < cold["first_step"]["prompt_tokens"] - len(system)


async def test_metering_a_session_changes_none_of_its_speculations(tmp_path: Path) -> None:
    """The meter times the analyzer's predictions; a copy the analyzer makes to predict past an edit must still
    predict from its own state (a wrapper bound to the original answered from before the edit). Places are
    ample, so that no launch waits on how long a kept test run lasts on a busy machine."""
    from harness.speculation.prediction.pattern_model import SHIPPED_MODEL, PatternModel
    from harness.speculation.prediction.patterns import Analyzer

    recording = script(CALLS)
    launched = []
    for metered in (False, True):
        repo = make_calc_repo(tmp_path / str(metered))
        events: list[Event] = []
        session = Session(recording.task or "", ReplayEngine(recording, seconds_per_token=0.001), Workspace(repo),
                          default_tools(), sinks=[events.append], analyzer=Analyzer(PatternModel.load(SHIPPED_MODEL)),
                          budget=Budget(max_running=16, max_sandboxed=16))
        meter = Meter.attach(session, events) if metered else None
        await session.run()
        launched.append([(e.step, e.name, e.arguments, e.after) for e in events if isinstance(e, SpecLaunch)])
        assert meter is None or meter.predict
    assert launched[0] == launched[1]
    assert any(after is not None for *_, after in launched[1])  # the edit's chain is among them
