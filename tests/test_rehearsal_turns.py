"""A turn of several calls is replayed as the model wrote it: no call is predicted after a sibling's result,
and at (a) every call of the turn gets the one prediction made at the turn's start (issue 25)."""

from __future__ import annotations

from harness.bench.predict_sources import sources
from harness.calls.canonical import canonical
from harness.events import Event, LLMEnd, SessionEnd, ToolCall, ToolResult
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer, Candidate, Partial
from harness.speculation.prediction.rehearsal import replay
from harness.speculation.prediction.turns import in_turn_order
from harness.traces import Imported
from harness.traces.common import TAO_TOOLS, SessionBuilder

REPO = "/repo"
NAMED = "src/zz_named.go"  # named only in the result of the parallel turn's first call


def session() -> list[Event]:
    """One call, then a parallel turn recorded as Claude Code's importer writes it (call, result, call,
    result, ...) whose first result names a file the second call reads, then one more call."""
    builder = SessionBuilder("s", "Make the parser accept empty input.", REPO, "test", tools=TAO_TOOLS)
    builder.turn("Look around first.")
    builder.result(builder.call("bash", {"command": "ls src"}), "parse.go\nlex.go\n", 0)
    builder.turn("Search, and read both sources at once.")
    builder.result(builder.call("bash", {"command": "grep -rn Parse src"}), f"{NAMED}:3: func Parse() {{}}\n", 0)
    builder.result(builder.call("read_file", {"path": f"{REPO}/{NAMED}"}), "package src\n")
    builder.result(builder.call("read_file", {"path": f"{REPO}/src/lex.go"}), "package src\n")
    builder.turn("Now the tests.")
    builder.result(builder.call("bash", {"command": "go test ./src"}), "ok\n", 0)
    return builder.end("completed", "done").events


class Spy(Analyzer):
    """Records, at every prediction, the moment and the events it had been fed by then."""

    def __init__(self, model: PatternModel) -> None:
        super().__init__(model)
        self.fed: list[Event] = []
        self.asked: list[tuple[str, list[Event]]] = []

    def observe(self, event: Event) -> None:
        self.fed.append(event)
        super().observe(event)

    def predict(self, moment: str = "a", partial: Partial | None = None, k: int = 3,
                order: str = "utility") -> list[Candidate]:
        self.asked.append((str(moment), list(self.fed)))
        return super().predict(moment, partial, k, order)


def test_a_turns_results_come_after_all_its_calls_and_before_the_next_turn() -> None:
    order = [(type(e).__name__, getattr(e, "step", None)) for e in in_turn_order(session())]
    turn = order[order.index(("LLMEnd", 2)):order.index(("LLMStart", 3))]
    assert turn == [("LLMEnd", 2), ("ToolCall", 2), ("ToolCall", 2), ("ToolCall", 2),
                    ("ToolResult", 2), ("ToolResult", 2), ("ToolResult", 2)]
    assert sorted(map(repr, in_turn_order(session()))) == sorted(map(repr, session()))  # nothing lost or added


def test_no_call_is_predicted_after_a_result_of_its_own_turn() -> None:
    spy = Spy(PatternModel())
    asked_by: list[int] = []  # how many predictions had been asked when each decision was made
    decisions = replay(spy, session(), k=1000, on_decision=lambda d: asked_by.append(len(spy.asked)))
    assert len(decisions) == 5
    for decision, (start, end) in zip(decisions, zip([0, *asked_by], asked_by)):
        for moment, fed in spy.asked[start:end]:
            siblings = [e for e in fed if isinstance(e, ToolResult) and e.step == decision.call.step]
            assert not siblings, f"{decision.call.arguments} predicted at ({moment}) after {siblings[0].output!r}"
    named = canonical("read_file", {"path": f"{REPO}/{NAMED}"}, REPO).key
    second = decisions[2]
    assert second.action.key == named
    assert all(named not in [c.key for c in second.top(m, 1000)] for m in "abc"), \
        "the second call was predicted from its sibling's result, which the model had not seen"


def test_every_call_of_a_turn_gets_the_turns_one_prediction_at_a() -> None:
    spy = Spy(PatternModel())
    decisions = replay(spy, session(), k=1000)
    at_a = [fed for moment, fed in spy.asked if moment == "a"]
    assert len(at_a) == 3  # once a turn, not once a call
    turn = decisions[1:4]
    first = [(c.key, c.probability) for c in turn[0].top("a", 1000)]
    assert first and all([(c.key, c.probability) for c in d.top("a", 1000)] == first for d in turn[1:])
    assert len({d.seconds["a"] for d in turn}) == 1
    made = at_a[1]  # the parallel turn's: its answer and its calls not fed yet, the turn before fully fed
    assert not any(isinstance(e, ToolCall) and e.step == 2 for e in made)
    assert not any(isinstance(e, LLMEnd) and e.step == 2 for e in made)
    assert sum(isinstance(e, ToolResult) for e in made) == 1


def test_results_are_fed_before_the_next_turn_and_at_the_end() -> None:
    spy = Spy(PatternModel())
    replay(spy, session())
    fed = [(type(e).__name__, getattr(e, "step", None)) for e in spy.fed]
    assert fed.index(("ToolResult", 2)) < fed.index(("LLMStart", 3))
    assert sum(isinstance(e, ToolResult) for e in spy.fed) == 5 and isinstance(spy.fed[-1], SessionEnd)


def test_sources_do_not_count_a_path_named_only_by_a_sibling_as_named() -> None:
    found = sources([Imported("s", "hand-made", "test", session())])
    assert found["by_kind"]["read"] == {"new": 2}  # zz_named.go was named in its own turn's result only
