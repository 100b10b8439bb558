"""The speculation pane tells a tainted discard from an ordinary one: its own state, its reason, its count."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from harness.events import SpecDiscard, SpecLaunch, SpecSummary
from harness.vocabulary import SpecState
from tui.widgets.speculation.book import Book
from tui.widgets.speculation.pane import SpeculationPane

REASON = "tainted: tried to reach the network: 1 connection refused on loopback"
EVENTS = [
    SpecLaunch(0.1, 1, "s1", "a", "run_tests", {"command": "pytest -q"}, "sandboxed", 0, "after-edit", 0.9),
    SpecLaunch(0.2, 1, "s2", "a", "grep", {"pattern": "def"}, "pure", 0, "search", 0.5),
    SpecDiscard(0.3, 1, "s1", REASON, 0.8, tainted=True),
    SpecDiscard(0.4, 1, "s2", "not the model's call", 0.01),
]


def test_the_book_keeps_tainted_discards_apart() -> None:
    book = Book()
    for event in EVENTS:
        book.apply(event)
    assert book.entries["s1"].state is SpecState.TAINTED and book.entries["s1"].why == REASON
    assert book.entries["s2"].state is SpecState.DISCARDED
    assert (book.discarded, book.tainted) == (2, 1)
    book.apply(SpecSummary(1.0, 2, 0, 2, 0, 0.0, 0.81, tainted=1))
    assert book.tainted == 1


class PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        yield SpeculationPane(masked=True)


async def test_the_pane_shows_a_tainted_run_with_its_reason() -> None:
    app = PaneApp()
    async with app.run_test(size=(80, 20)) as pilot:
        pane = app.query_one(SpeculationPane)
        for event in EVENTS:
            pane.apply(event)
        await pilot.pause()
        table = pane.query_one(DataTable)
        state, reason = table.get_cell("s1", "state"), table.get_cell("s1", "reason")
        assert isinstance(state, Text) and "tainted" in state.plain
        assert "network" in reason.plain
        assert "discarded" in table.get_cell("s2", "state").plain
        totals = pane.query_one("#spec-totals").render()
        assert "1 tainted" in str(totals)


def test_the_closing_line_counts_tainted_runs() -> None:
    from harness.log import HumanLog

    line = HumanLog().format(SpecSummary(9.0, 3, 1, 2, 0, 1.5, 0.8, tainted=1))
    assert line is not None and "2 discarded (1 tainted)" in line
    assert "tainted" not in (HumanLog().format(SpecSummary(9.0, 3, 1, 2, 0, 1.5, 0.8)) or "")
