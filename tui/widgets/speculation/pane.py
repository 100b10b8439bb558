"""The speculation pane: each predicted call, its reason and fate, the totals and the hit rate per tool."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from harness.events import Event
from harness.vocabulary import DiscardReason, SpecState
from tui.widgets.conversation.render import call_summary
from tui.widgets.speculation.book import Book, Entry

MARKS = {SpecState.RUNNING: ("●", "yellow"), SpecState.READY: ("◆", "cyan"), SpecState.PROMOTED: ("✔", "bold green"),
         SpecState.DISCARDED: ("✘", "red"), SpecState.TAINTED: ("⚠", "bold magenta")}


def state_cell(entry: Entry) -> Text:
    """The state column: a mark and a colour that tell promoted from discarded at a glance."""
    mark, style = MARKS[entry.state]
    return Text(f"{mark} {entry.state.text}", style=style)


def seconds_cell(entry: Entry, masked: bool = False) -> Text:
    """Time saved (green) for a promoted speculation, CPU time wasted (red) for a discarded one."""
    if entry.state is SpecState.PROMOTED:
        return Text("saved" if masked else f"+{entry.seconds:.2f}s", style="green")
    if entry.over:
        return Text("wasted" if masked else f"-{entry.seconds:.2f}s", style="red dim")
    return Text("")


def reason_cell(entry: Entry) -> Text:
    """Why it was launched; for a tainted run, why its result could not be trusted instead."""
    if entry.state is SpecState.TAINTED:
        return Text(DiscardReason.TAINTED.detail(entry.why), style="magenta")
    return Text.assemble((entry.reason, "italic"), (f" {entry.moment}", "dim"))


def seconds(value: float, masked: bool, unit: str = "s") -> str:
    """A total in seconds, or "-" where durations are not drawn."""
    return "-" if masked else f"{value:.2f} {unit}"


class SpeculationPane(Vertical):
    """Live view of the speculation scheduler's work, built from spec_* events."""

    DEFAULT_CSS = """
    SpeculationPane {
        width: 66;
        border-left: solid $primary-darken-2;
        padding: 0 1;
    }
    SpeculationPane #spec-totals { height: auto; }
    SpeculationPane #spec-tools { height: auto; color: $text-muted; margin-bottom: 1; }
    SpeculationPane DataTable { height: 1fr; }
    """

    def __init__(self, masked: bool = False) -> None:
        """`masked` draws no durations (for snapshot tests and screenshots that must not change)."""
        super().__init__(id="speculation")
        self.book = Book()
        self.masked = masked

    def compose(self) -> ComposeResult:
        yield Static(id="spec-totals")
        yield Static(id="spec-tools")
        table: DataTable[Text] = DataTable(cursor_type="none", zebra_stripes=True, id="spec-table")
        table.add_column("state", key="state", width=11)
        table.add_column("call", key="call", width=22)
        table.add_column("reason", key="reason", width=16)
        table.add_column("time", key="time", width=7)
        yield table

    def on_mount(self) -> None:
        self.render_totals()

    def apply(self, event: Event) -> None:
        """Take one event; new and changed speculations show at once."""
        entry = self.book.apply(event)
        if entry is not None:
            table = self.query_one(DataTable)
            if entry.spec_id in table.rows:
                table.update_cell(entry.spec_id, "state", state_cell(entry))
                table.update_cell(entry.spec_id, "time", seconds_cell(entry, self.masked))
                if entry.state is SpecState.TAINTED:
                    table.update_cell(entry.spec_id, "reason", reason_cell(entry))
            else:
                table.add_row(state_cell(entry), call_summary(entry.name, entry.arguments, 22), reason_cell(entry),
                              seconds_cell(entry, self.masked), key=entry.spec_id)
                table.scroll_end(animate=False)
        if entry is not None or event.type.startswith("spec_") or event.type == "session_start":
            self.render_totals()

    def render_totals(self) -> None:
        """The switch, the counts, time saved and wasted, the hit rate overall and per tool."""
        book = self.book
        switch = Text(" on ", style="bold black on green") if book.enabled else Text(" off ", style="bold on red")
        totals = Text.assemble(
            Text("Speculation ", style="bold"), switch, "\n",
            (f"{book.launched}", "bold"), " launched · ", (f"{book.promoted}", "bold green"), " promoted · ",
            (f"{book.discarded}", "bold red"), " discarded",
            (f" ({book.tainted} tainted)", "bold magenta") if book.tainted else "",
            f" · {book.repeats} repeats\n" if book.repeats else "\n",
            ("saved ", "green"), (seconds(book.saved, self.masked), "bold green"), " · ", ("wasted ", "red"),
            (seconds(book.wasted, self.masked, "CPU-s"), "bold red"), f" · hit rate {book.hit_rate:.0%}")
        self.query_one("#spec-totals", Static).update(totals)
        tools = Text("hits by tool: ", style="bold")
        for index, (name, tally) in enumerate(sorted(book.tools.items())):
            tools.append((", " if index else "") + f"{name} {tally.promoted}/{tally.launched}")
        self.query_one("#spec-tools", Static).update(tools if book.tools else Text("no speculation yet", style="dim"))
