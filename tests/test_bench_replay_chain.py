"""The trace replay past a mutation: the oracle past mutations bounds the oracle, and Tao's chain serves the
call after an edit only when its prediction is exactly that call."""

from __future__ import annotations

from typing import Any

import pytest

from harness.bench.replay.policies import OVERLAY_CREATE, SANDBOX_RUN, TAKE, plans
from harness.bench.replay.trace import Trace, build, decide
from harness.bench.timeline import Launch, Plan, Step, simulate
from harness.calls.canonical import canonical
from harness.speculation.prediction.patterns import Candidate
from harness.traces.common import SessionBuilder

TPOT, TPS = 0.01, 1000.0
EDIT = ("sed -i 's/foo = 1/foo = 2/' src/a.py", "", 0.25)
TEST = ("python -m pytest tests/test_a.py", "1 passed", 3.0)


class RunsTheTest:
    """Always proposes the test run (this test is about the plans, not about prediction)."""

    def __init__(self) -> None:
        action = canonical("bash", {"command": TEST[0]}, "/repo")
        self.test = Candidate("bash", {"command": TEST[0]}, action.key, action.kind, action.effect, 0.9, 3.5, 0.1,
                              3.1, "test")

    def observe(self, event: Any) -> None:
        pass

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3, order: str = "utility") -> list[Candidate]:
        return [self.test]


def traced(name: str, commands: list[tuple[str, str, float]]) -> Trace:
    """One bash call a step, with recorded durations, decided by `RunsTheTest`."""
    builder = SessionBuilder(name, "fix the bug", "/repo", "tao")
    for command, output, seconds in commands:
        builder.turn(f"Let me go on.\n```bash\n{command}\n```", output_tokens=60)
        builder.result(builder.call("bash", {"command": command}), output, 0, duration=seconds)
    events = builder.end("finished", "").events
    trace = build(name, events)
    decide(trace, RunsTheTest(), events)  # type: ignore[arg-type]
    return trace


def total(trace: Trace, policy: str, overhead: float = 0.0) -> float:
    return simulate(trace.steps, plans(trace, policy)[0], TPOT, TPS, overhead).total


def test_a_speculation_at_m_starts_when_the_mutation_has_streamed_and_been_applied() -> None:
    # the edit streams its last token at 1.8 s (80 of 100 tokens after a 1 s prefill); the answer ends at 2.0 s,
    # the edit runs until 2.5 s; the next answer ends at 4.5 s; its 3 s test started at 1.8 + 0.5 = 2.3 s
    steps = [Step(1000, 100, 50, 10, (0.5,), done_tokens=(80,)), Step(1000, 100, 50, 10, (3.0,))]
    chained = Launch("m", after=(0, 0), apply=0.5)
    assert simulate(steps, [Plan(), Plan((chained,))], TPOT, TPS).total == pytest.approx(5.3)
    assert simulate(steps, [Plan(), Plan((Launch("o"),))], TPOT, TPS).total == pytest.approx(5.5)
    assert simulate(steps, [Plan(), Plan()], TPOT, TPS).total == pytest.approx(7.5)


def test_a_call_streams_where_its_command_ends_in_the_answer() -> None:
    trace = traced("streamed", [EDIT, TEST])
    step = trace.steps[0]
    assert step.reason_tokens < step.done_tokens[0] < step.output_tokens  # the closing fence comes after it


def test_the_oracle_past_mutations_is_never_slower_than_the_oracle() -> None:
    trace = traced("oracle", [("grep -rn foo src", "src/a.py:1:foo = 1", 0.4), ("cat src/a.py", "foo = 1\n", 0.05),
                              EDIT, ("cat src/a.py", "foo = 2\n", 0.05), TEST])
    past, _ = plans(trace, "oracle_mut")
    assert [plan.launches[0].at for plan in past[:5]] == ["m", "m", "o", "m", "m"]
    assert past[0].launches[0].after is None  # the first workspace exists from the session's start
    # the test run needs the edited workspace only: it starts once the edit has streamed and been applied,
    # a turn before the model asks for it (the oracle starts it with that turn)
    assert past[4].launches[0] == Launch("m", after=(2, 0), apply=EDIT[2], sooner="o")
    assert total(trace, "oracle_mut") < total(trace, "oracle") < total(trace, "baseline")


def test_the_call_after_an_edit_is_served_when_it_is_the_prediction() -> None:
    trace = traced("chain", [EDIT, TEST])
    assert trace.all_calls()[0].chained  # predicted right after the edit streamed
    chain, tally = plans(trace, "chain")
    assert chain[1].launches[0] == Launch("m", OVERLAY_CREATE, SANDBOX_RUN, after=(0, 0), apply=EDIT[2])
    assert tally.served == 1 and tally.by_moment == {"m": 1} and not chain[1].misses
    assert total(trace, "chain", TAKE) < total(trace, "baseline")
    assert total(trace, "oracle_mut") <= total(trace, "chain", TAKE)
    tao, _ = plans(trace, "tao")  # Tao's own (a) would run the same test later: the chain's start serves
    assert tao[1].launches[0].at == "m"


def test_the_call_after_an_edit_is_not_served_when_it_differs() -> None:
    trace = traced("other", [EDIT, ("cat src/a.py", "foo = 2\n", 0.05)])
    chain, tally = plans(trace, "chain")
    assert chain[1].launches[0].at is None and tally.served == 0
    [miss] = chain[1].misses
    assert miss.at == "m" and miss.after == (0, 0)
    line = simulate(trace.steps, chain, TPOT, TPS, TAKE)
    assert line.wasted > 0
    assert line.total <= total(trace, "baseline") + line.overhead + 1e-9


def test_a_speculation_kept_from_an_earlier_step_runs_from_that_step() -> None:
    # step 0 ends its answer at 2.0 s and its read at 2.5 s; step 1's answer ends at 4.5 s and asks for a 3 s test
    steps = [Step(1000, 100, 50, 10, (0.5,)), Step(1000, 100, 50, 10, (3.0,))]
    assert simulate(steps, [Plan(), Plan((Launch("a", step=0),))], TPOT, TPS).total == pytest.approx(4.5)
    assert simulate(steps, [Plan(), Plan((Launch("a"),))], TPOT, TPS).total == pytest.approx(5.5)
    assert simulate(steps, [Plan(), Plan()], TPOT, TPS).total == pytest.approx(7.5)


def test_a_guess_that_was_not_the_call_serves_a_later_one() -> None:
    trace = traced("kept", [("cat src/a.py", "foo = 1\n", 0.05), TEST])
    tao, tally = plans(trace, "tao")
    assert tao[0].launches[0].at is None  # the read was not the guessed test run ...
    served = tao[1].launches[0]
    assert served.at in ("a", "b", "c") and served.step == 0 and tally.kept == 1  # ... which ran on, for the next
    assert not tao[1].misses
    assert total(trace, "tao", TAKE) < total(trace, "baseline")


def test_a_chain_outlives_a_read_and_serves_the_test_after_it() -> None:
    trace = traced("after-read", [EDIT, ("cat src/a.py", "foo = 2\n", 0.05), TEST])
    chain, tally = plans(trace, "chain")
    assert chain[1].launches[0].at is None
    assert chain[2].launches[0] == Launch("m", OVERLAY_CREATE, SANDBOX_RUN, after=(0, 0), apply=EDIT[2])
    assert tally.served == 1 and not any(plan.misses for plan in chain)


def test_nothing_outlives_a_call_that_may_change_the_tree() -> None:
    trace = traced("after-rm", [EDIT, ("rm -rf build", "", 0.05), TEST])
    chain, tally = plans(trace, "chain")
    assert tally.served == 0
    [miss] = chain[1].misses  # the chain on the edit went with the shell command
    assert miss.at == "m" and miss.after == (0, 0)
    tao, _ = plans(trace, "tao")
    assert tao[2].launches[0].at in ("a", "b", "c") and tao[2].launches[0].step == -1  # started at its own step
