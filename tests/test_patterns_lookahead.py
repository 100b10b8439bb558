"""The predictor never reads an event after the one it predicts: structurally, and by tampering with the future."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.events import Event, LLMEnd, ToolCall, ToolResult
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer, Candidate, Partial
from harness.speculation.prediction.rehearsal import replay
from harness.speculation.prediction.training import learn
from harness.traces import load_sessions
from tests.test_patterns_dataflow import Script

SAMPLE = (Path(__file__).resolve().parents[2] / "shared" / "traces" / "mini-swe-agent-gemini-3-pro-swebench-verified"
          / "django__django-11099.traj.json")


def session_events() -> list[Event]:
    """A real session when the shared traces are there, else a hand-made one."""
    if SAMPLE.is_file():
        return next(iter(load_sessions(SAMPLE))).events
    script = Script("Fix `calc/ops.py`")
    for command, output in [("ls", "calc\ntests\n"), ("cat calc/ops.py", "def add(a, b):\n    return a - b\n"),
                            ("pytest tests", "tests/test_ops.py:5: AssertionError"), ("sed -i s/-/+/ calc/ops.py", ""),
                            ("pytest tests", "2 passed"), ("git diff", "diff --git")]:
        script.bash(command, output)
    return script.events


class Spy(Analyzer):
    """Records what it has been fed when it is asked to predict."""

    def __init__(self, model: PatternModel) -> None:
        super().__init__(model)
        self.fed: list[Event] = []
        self.asked: list[tuple[int, str, Partial | None]] = []

    def observe(self, event: Event) -> None:
        self.fed.append(event)
        super().observe(event)

    def predict(self, moment: str = "a", partial: Partial | None = None, k: int = 3,
                order: str = "utility") -> list[Candidate]:
        self.asked.append((len(self.fed), moment, partial))
        return super().predict(moment, partial, k, order)


@pytest.fixture(scope="module")
def model() -> PatternModel:
    return learn([session_events()], epochs=1)


def test_each_call_is_predicted_before_its_answer_or_itself_is_fed(model: PatternModel) -> None:
    events = session_events()
    spy = Spy(model)
    pulled: list[int] = []

    def lazily() -> Iterator[Event]:
        for index, event in enumerate(events):
            pulled.append(index)
            yield event

    decisions = replay(spy, lazily(), on_decision=lambda d: None)
    calls = [i for i, e in enumerate(events) if isinstance(e, ToolCall)]
    assert len(decisions) == len(calls) and len(spy.asked) == 3 * len(calls)
    for number, call_index in enumerate(calls):
        turn = max(i for i in range(call_index) if isinstance(events[i], LLMEnd))
        for fed, moment, partial in spy.asked[3 * number: 3 * number + 3]:
            assert fed <= turn, f"call {number} predicted at ({moment}) after its answer was fed"
            assert all(not isinstance(e, ToolCall) or e is not events[call_index] for e in spy.fed[:fed])
            if partial is not None:  # (b) and (c): the reasoning before the call, never the call's own block
                assert "```bash" not in partial.text and len(partial.args_prefix) <= 8
    assert pulled[-1] == len(events) - 1


def test_predictions_do_not_change_when_the_future_does(model: PatternModel) -> None:
    events = session_events()
    calls = [i for i, e in enumerate(events) if isinstance(e, ToolCall)]
    cut = calls[len(calls) // 2]
    tampered = list(events[: cut + 1])
    for event in events[cut + 1:]:
        if isinstance(event, ToolResult):
            event = ToolResult(event.t, event.step, event.call_id, event.name, "tampered: src/evil.py:1: x", True, 9)
        elif isinstance(event, ToolCall):
            event = ToolCall(event.t, event.step, event.call_id, "bash", {"command": "rm -rf /tmp/x"}, "mutating")
        elif isinstance(event, LLMEnd):
            event = LLMEnd(event.t, event.step, event.request_id, "Let me read `src/evil.py`.")
        tampered.append(event)

    def predictions(stream: list[Event]) -> list[list[tuple[str, float]]]:
        return [[(c.key, round(c.probability, 9)) for m in "abc" for c in d.predictions[m]]
                for d in replay(Analyzer(model), stream)]

    original, changed = predictions(events), predictions(tampered)
    upto = calls.index(cut) + 1
    assert original[:upto] == changed[:upto]
    assert original != changed  # the tampering was visible to later decisions, so the check has teeth
