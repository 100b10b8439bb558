"""The shared words: each declared once, written to events with the same bytes as the strings they replace."""

from __future__ import annotations

import pytest

from harness.calls.canonical import canonical
from harness.events import SessionEnd, SpecDiscard, SpecLaunch, SpecPromote, from_dict
from harness.vocabulary import EXIT_CODES, DiscardReason, Moment, SpecState, Status
from tools import TOOL_EFFECTS, Effect, default_tools


def test_statuses_map_to_the_documented_exit_codes() -> None:
    assert {status.value: status.exit_code for status in Status} == {
        "finished": 0, "error": 1, "limit": 3, "interrupted": 130, "stopped": 1, "killed": 1}
    assert EXIT_CODES.get("limit", 1) == 3  # a status read back from a trajectory is a plain string


def test_words_keep_their_bytes_in_events() -> None:
    end = SessionEnd(1.0, Status.LIMIT, "step limit", steps=3)
    assert end.to_json() == SessionEnd(1.0, "limit", "step limit", steps=3).to_json()
    launch = SpecLaunch(0.1, 1, "s1", Moment.B, "grep", {"pattern": "x"}, Effect.PURE, 0, "rule", 0.5)
    assert launch.to_json() == SpecLaunch(0.1, 1, "s1", "b", "grep", {"pattern": "x"}, "pure", 0, "rule", 0.5).to_json()
    assert '"moment":"b"' in launch.to_json() and '"effect":"pure"' in launch.to_json()


def test_a_repeat_is_explicit_and_keeps_its_wire_form() -> None:
    repeat = SpecPromote.of_repeat(0.5, 2, "call_2_0")
    assert repeat.repeat and not SpecPromote(0.5, 2, "s1", "call_2_0", 0.1, 0.0).repeat
    assert repeat.to_json() == ('{"type":"spec_promote","t":0.5,"step":2,"spec_id":"repeat","call_id":"call_2_0",'
                                '"saved":0.0,"waited":0.0,"sliced":false}')
    read_back = from_dict(repeat.to_dict())
    assert isinstance(read_back, SpecPromote) and read_back.repeat


def test_discard_reasons_say_what_they_said_as_free_text() -> None:
    assert DiscardReason.NOT_CALLED.text() == "not the model's call"
    assert DiscardReason.STALE.text(was=1, now=2) == "the workspace changed (version 1 -> 2)"
    assert DiscardReason.OTHER_TOOL.text(name="grep") == "the model is calling grep"
    tainted = DiscardReason.TAINTED.text(detail="wrote outside the workspace; " * 40)
    assert len(tainted) == 500 and tainted.startswith("tainted: wrote outside")
    assert DiscardReason.TAINTED.detail(tainted).startswith("wrote outside")
    assert len(DiscardReason.UNMATCHED.text(detail="x" * 400)) == 300
    event = SpecDiscard(0.3, 1, "s1", DiscardReason.TAINTED.text(detail="a limit"), 0.1, tainted=True)
    assert event.to_json().count('"reason":"tainted: a limit"') == 1


def test_spec_states_are_ordered_and_named_for_people() -> None:
    assert [state.text for state in SpecState] == ["running", "ready", "promoted", "discarded", "tainted"]
    assert all(state >= SpecState.PROMOTED for state in (SpecState.DISCARDED, SpecState.TAINTED))
    assert Moment("c") is Moment.C and Moment.A.text == "after the last observation"


def test_the_effect_table_is_the_tools_own() -> None:
    assert TOOL_EFFECTS == {tool.name: tool.effect for tool in default_tools()}


def test_a_new_tool_needs_no_entry_in_the_call_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool registered with its effect is canonicalised like the others: relative path, its own effect."""
    monkeypatch.setitem(TOOL_EFFECTS, "find_files", Effect.PURE)
    action = canonical("find_files", {"path": "/repo/src/", "name": "*.py"}, "/repo")
    assert (action.args, action.effect, action.kind) == ({"path": "src", "name": "*.py"}, Effect.PURE, "search")
    assert canonical("Glob", {"pattern": "*.py"}, "/repo").effect is Effect.UNKNOWN  # another agent's tool
