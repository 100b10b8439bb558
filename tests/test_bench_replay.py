"""The trace replay: timeline arithmetic on hand-made trajectories, the runs' plans, the command's JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.bench.replay import load as replay_load
from harness.bench.replay.main import plot
from harness.bench.replay.policies import TAKE, plans
from harness.bench.replay.trace import build, decide
from harness.bench.timeline import Launch, Miss, Plan, Step, simulate
from harness.cli import main
from harness.calls.canonical import canonical
from harness.speculation.prediction.patterns import Candidate
from harness.traces.common import SessionBuilder, write_session

TPOT, TPS = 0.01, 1000.0
# prefill 1 s, then 50 tokens of reasoning (b at 1.5 s), 10 more (c at 1.6 s), answer ends at 2.0 s; tool 2 s
STEP = Step(prefill_tokens=1000, output_tokens=100, reason_tokens=50, call_tokens=10, calls=(2.0,))


def one(launch: Launch, overhead: float = 0.0, **plan: Any) -> float:
    return simulate([STEP], [Plan((launch,), **plan)], TPOT, TPS, overhead).total


def test_serial_step_is_prefill_plus_decode_plus_tool() -> None:
    line = simulate([STEP, STEP], [Plan(), Plan()], TPOT, TPS)
    assert line.total == pytest.approx(8.0)
    assert line.llm == pytest.approx(4.0) and line.tool_wait == pytest.approx(4.0)
    assert line.step_ends == pytest.approx([4.0, 8.0])


def test_speculation_hides_the_tool_from_the_moment_it_starts() -> None:
    assert one(Launch("o")) == pytest.approx(2.0)  # started with the model call: fully hidden
    assert one(Launch("a"), overhead=0.001) == pytest.approx(2.001)
    assert one(Launch("b")) == pytest.approx(3.5)  # started at 1.5 s, done at 3.5 s
    assert one(Launch("c", delay=0.05)) == pytest.approx(3.65)
    assert one(Launch("r"), overhead=0.001) == pytest.approx(2.001)  # a known result costs only taking it


def test_a_slowed_speculation_runs_at_full_speed_once_the_real_call_waits() -> None:
    assert one(Launch("a", slowdown=2.0)) == pytest.approx(3.0)  # 1 s of progress by 2.0 s, 1 s left
    assert one(Launch("a", extra=0.5)) == pytest.approx(2.5)


def test_warming_hides_the_next_prefill_as_far_as_the_tool_lasts() -> None:
    short = Step(1000, 100, 50, 10, (0.4,))
    serial = simulate([short, STEP], [Plan(), Plan()], TPOT, TPS).total
    assert serial == pytest.approx(2.4 + 4.0)
    warm = simulate([short, STEP], [Plan(warm="warm"), Plan()], TPOT, TPS).total
    assert warm == pytest.approx(serial - 0.4)  # the tool ran 0.4 s: that much of the 1 s prefill is hidden
    full = simulate([short, STEP], [Plan(warm="full"), Plan()], TPOT, TPS).total
    assert full == pytest.approx(serial - 1.0)


def test_wasted_cpu_counts_a_wrong_run_until_the_real_call_arrives() -> None:
    line = simulate([STEP], [Plan((Launch(),), misses=(Miss("a", 5.0, 0.01), Miss("b", 0.1)))], TPOT, TPS)
    assert line.wasted == pytest.approx(2.0 + 0.01 + 0.1)


def test_a_wrong_run_ruled_out_at_c_costs_cpu_only_until_then() -> None:
    line = simulate([STEP], [Plan((Launch(),), misses=(Miss("a", 5.0, 0.01, until="c"),))], TPOT, TPS)
    assert line.wasted == pytest.approx(1.6 + 0.01)  # (c) comes 1.6 s into the step


def test_every_prediction_missing_costs_no_more_than_the_overhead() -> None:
    steps = [Step(500 + 100 * i, 80, 40, 5, (0.05 * i, 1.0)) for i in range(6)]
    serial = simulate(steps, [Plan() for _ in steps], TPOT, TPS)
    misses = [Plan((Launch(), Launch()), misses=(Miss("a", 3.5, 0.004), Miss("c", 1.0))) for _ in steps]
    tao = simulate(steps, misses, TPOT, TPS, overhead=TAKE)
    assert tao.total <= serial.total + tao.overhead + 1e-9
    assert tao.total == pytest.approx(serial.total + 12 * TAKE)


class WrongAnalyzer:
    """A stand-in analyzer that always proposes the same wrong test run (this test is about the plans)."""

    def __init__(self) -> None:
        action = canonical("bash", {"command": "python -m pytest tests/test_never.py"}, "/repo")
        self.candidate = Candidate("bash", {"command": "python -m pytest tests/test_never.py"}, action.key,
                                   action.kind, action.effect, 0.9, 3.5, 0.1, 3.1, "test")

    def observe(self, event: Any) -> None:
        pass

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3, order: str = "utility") -> list[Candidate]:
        return [self.candidate]


def recorded(name: str, commands: list[tuple[str, str, float]]) -> SessionBuilder:
    """A trajectory of one bash call a step: (command, output, recorded seconds)."""
    builder = SessionBuilder(name, "fix the bug", "/repo", "tao")
    for command, output, seconds in commands:
        builder.turn(f"Let me look.\n```bash\n{command}\n```", output_tokens=60)
        call_id = builder.call("bash", {"command": command})
        builder.result(call_id, output, 0, duration=seconds)
    builder.turn("done", output_tokens=5)
    builder.call("finish", {"summary": ""})
    return builder


TEST_RUN = ("python -m pytest tests/test_a.py", "1 passed", 3.0)
COMMANDS = [("grep -rn foo src", "src/a.py:1:foo", 0.4), ("cat src/a.py", "foo = 1\n", 0.02), TEST_RUN, TEST_RUN]


def test_plans_when_every_prediction_misses() -> None:
    events = recorded("miss", COMMANDS).end("finished", "").events
    trace = build("miss", events)
    assert [c.seconds for c in trace.all_calls()] == [0.4, 0.02, 3.0, 3.0, 0.0]  # the recorded durations
    assert all(c.measured for c in trace.all_calls()[:4])
    decide(trace, WrongAnalyzer(), events)  # type: ignore[arg-type]
    tao, tally = plans(trace, "tao")
    assert all(launch.at is None for plan in tao[:3] for launch in plan.launches)
    assert tao[3].launches[0].at == "r"  # the same test at the same version: its known result
    assert tally.launched > 0 and sum(len(p.misses) for p in tao) == tally.launched
    serial = simulate(trace.steps, plans(trace, "baseline")[0], TPOT, TPS)
    line = simulate(trace.steps, tao, TPOT, TPS, TAKE)
    assert line.total <= serial.total + line.overhead + 1e-9
    assert line.wasted > 0
    oracle = simulate(trace.steps, plans(trace, "oracle")[0], TPOT, TPS)
    assert oracle.total <= line.total
    assert simulate(trace.steps, plans(trace, "oracle_mut")[0], TPOT, TPS).total <= oracle.total


class LateAnalyzer:
    """Proposes a script run at (a) and (b), and the real test run only once the call has begun, at (c)."""

    def __init__(self) -> None:
        self.script = self._candidate("bash", "python reproduce.py")
        self.test = self._candidate("run_tests", "python -m pytest tests/test_a.py")

    @staticmethod
    def _candidate(name: str, command: str) -> Candidate:
        action = canonical("bash", {"command": command}, "/repo")
        return Candidate(name, {"command": command}, action.key, action.kind, action.effect, 0.9, 3.5, 0.1, 3.1, "t")

    def observe(self, event: Any) -> None:
        pass

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3, order: str = "utility") -> list[Candidate]:
        return [self.test if moment == "c" else self.script]


def test_the_calls_first_characters_free_the_overlay_a_wrong_guess_holds() -> None:
    events = recorded("late", [TEST_RUN]).end("finished", "").events
    trace = build("late", events)
    decide(trace, LateAnalyzer(), events)  # type: ignore[arg-type]
    tao, tally = plans(trace, "tao")  # one overlay at a time: the script run holds it from (a)
    assert tao[0].launches[0].at == "c"  # "python -" rules the script out at (c); the test run takes its place
    [miss] = tao[0].misses
    assert miss.at == "a" and miss.until == "c" and tally.ruled_out_wrongly == 0


def test_command_prints_the_json_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train, test = tmp_path / "train", tmp_path / "test"
    for i in range(3):
        write_session(recorded(f"train-{i}", COMMANDS).end("finished", ""), train)
    write_session(recorded("test-0", COMMANDS).end("finished", ""), test)
    plot = tmp_path / "replay.png"
    code = main(["bench", "replay", "--traces", str(test), "--train", str(train), "--tpot-ms", "1,10",
                 "--sessions", "3", "--json", "--plot", str(plot)])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["tpot_ms"]) == {"1", "10"}
    for entry in result["tpot_ms"].values():
        for key in ("mean_reduction", "p99_reduction", "oracle_share", "tool_latency_ratio"):
            assert isinstance(entry[key], float)
        assert entry["runs"]["oracle"]["mean"] <= entry["runs"]["baseline"]["mean"]
        assert set(entry["sessions"]) >= {"baseline", "tao", "tao_cosched"}
    assert result["test_sessions"] == 1


def test_one_session_on_the_shared_engine_is_the_single_timeline() -> None:
    steps = [Step(800, 60, 30, 5, (1.5,)), Step(300, 120, 100, 5, (0.2,)), Step(200, 40, 40, 0, ())]
    tao = [Plan((Launch("a"),)), Plan((Launch("c", delay=0.01),), warm="warm"), Plan()]
    for plan in ([Plan(), Plan(), Plan()], tao):
        alone = simulate(steps, plan, TPOT, TPS, TAKE).total
        assert replay_load.simulate([(steps, plan, TAKE)], 1, TPOT, TPS, paced=False) == [pytest.approx(alone)]


def test_more_sessions_on_one_engine_take_longer() -> None:
    steps = [Step(2000, 200, 100, 5, (1.0,)) for _ in range(4)]
    one_alone = replay_load.simulate([(steps, [Plan()] * 4, 0.0)], 1, TPOT, TPS, paced=False)[0]
    crowded = replay_load.simulate([(steps, [Plan()] * 4, 0.0)], 8, TPOT, TPS, paced=False)
    assert len(crowded) == 8 and min(crowded) > one_alone


def test_the_plot_says_so_when_matplotlib_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    message = plot({"tpot_ms": {}, "test_sessions": 0}, tmp_path / "x.png")
    assert message is not None and "matplotlib is not installed" in message
    assert not (tmp_path / "x.png").exists()


def test_a_turn_of_parallel_reads_waits_for_the_slowest_read_not_their_sum() -> None:
    builder = SessionBuilder("together", "fix the bug", "/repo", "tao")
    builder.turn("Three reads, then an edit, then a read of what it wrote.", output_tokens=60)
    for path, seconds in (("a.py", 0.5), ("b.py", 1.5), ("c.py", 1.0)):
        builder.result(builder.call("read_file", {"path": path}), "x = 1\n", duration=seconds)
    builder.result(builder.call("write_file", {"path": "d.py", "content": "y = 2\n"}), "wrote", duration=0.25)
    builder.result(builder.call("read_file", {"path": "d.py"}), "y = 2\n", duration=0.5)
    events = builder.end("finished", "").events
    trace = build("together", events)
    [step] = trace.steps
    assert step.runs() == [[0, 1, 2], [3], [4]]
    line = simulate(trace.steps, plans(trace, "baseline")[0], TPOT, TPS)
    assert line.tool_wait == pytest.approx(1.5 + 0.25 + 0.5)  # the slowest read, then the write, then its read
    assert Step(0, 0, calls=(0.5, 1.5)).runs() == [[0], [1]]  # no groups given: one call after the other


class ReadsAnalyzer:
    """Proposes reads of two files at every moment (this test is about serving a turn's calls)."""

    def __init__(self, *paths: str) -> None:
        self.candidates = []
        for path in paths:
            action = canonical("read_file", {"path": path}, "/repo")
            self.candidates.append(Candidate("read_file", {"path": path}, action.key, action.kind, action.effect,
                                             0.9, 0.5, 0.1, 0.4, "reads"))

    def observe(self, event: Any) -> None:
        pass

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3, order: str = "utility") -> list[Candidate]:
        return list(self.candidates)


def test_each_read_of_a_turn_is_served_by_a_speculation_launched_for_the_turn() -> None:
    builder = SessionBuilder("reads", "fix the bug", "/repo", "tao")
    builder.turn("Two reads.", output_tokens=60)
    for path in ("a.py", "b.py", "c.py"):
        builder.result(builder.call("read_file", {"path": path}), "x = 1\n", duration=0.5)
    events = builder.end("finished", "").events
    trace = build("reads", events)
    decide(trace, ReadsAnalyzer("a.py", "b.py"), events)  # type: ignore[arg-type]
    tao, tally = plans(trace, "tao")
    assert [launch.at for launch in tao[0].launches] == ["a", "a", None]  # c.py was never predicted
    assert not tao[0].misses and tally.served == 2


class BuriedAnalyzer:
    """Proposes three wrong script runs first at every moment, then the real test run, unlikely (1%)."""

    def __init__(self) -> None:
        self.wrong = [LateAnalyzer._candidate("bash", f"python wrong_{i}.py") for i in range(3)]
        action = canonical("bash", {"command": TEST_RUN[0]}, "/repo")
        self.test = Candidate("bash", {"command": TEST_RUN[0]}, action.key, action.kind, action.effect,
                              0.01, 3.5, 0.1, 0.03, "t")

    def observe(self, event: Any) -> None:
        pass

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3, order: str = "utility") -> list[Candidate]:
        return [*self.wrong, self.test][:k]


def test_a_perfect_ranker_starts_a_call_its_candidates_hold_however_it_was_ranked() -> None:
    events = recorded("buried", [TEST_RUN, ("sed -i s/a/b/ src/a.py", "", 0.1)]).end("finished", "").events
    trace = build("buried", events)
    decide(trace, BuriedAnalyzer(), events)  # type: ignore[arg-type]
    ranked, _ = plans(trace, "oracle_ranked")
    assert ranked[0].launches[0].at == "a"  # fourth and at 1%: Tao's top-3 by utility never launches it
    assert ranked[0].misses == ()  # a perfect ranker launches nothing else
    assert ranked[1].launches[0].at is None  # an edit is never speculated
    assert plans(trace, "tao")[0][0].launches[0].at is None

    def total(policy: str, overhead: float = 0.0) -> float:
        return simulate(trace.steps, plans(trace, policy)[0], TPOT, TPS, overhead).total

    assert total("oracle_speculable") <= total("oracle_ranked", TAKE) < total("tao", TAKE)
