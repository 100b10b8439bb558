"""A benchmark's report: its JSON result as measured, and the tables people read, printed by one emitter.

Each benchmark builds a `Report` from its result (which tables, which cells, which notes); `Report.emit`
alone decides where each goes: the JSON on stdout and the tables on stderr, or the tables alone on stdout.
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from harness.bench import dump

WIDTH = 160  # columns when the output is not a terminal (a file, a pipe, a test)


@dataclass
class Table:
    """One table: column headers, rows of cells already written as text, a line above it and one below."""

    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    title: str = ""
    caption: str = ""
    left: int = 1  # leading columns of labels, aligned left; the rest are numbers, aligned right

    def rich(self) -> RichTable:
        """The table as rich draws it."""
        table = RichTable(box=box.SIMPLE_HEAD)
        for index, column in enumerate(self.columns):
            table.add_column(column, justify="left" if index < self.left else "right", no_wrap=index < self.left)
        for row in self.rows:
            table.add_row(*row)
        return table


@dataclass
class Report:
    """A benchmark's result (the JSON, unchanged) with its tables, the notes printed after them and any heading
    lines before them."""

    result: dict[str, Any]
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    heading: list[str] = field(default_factory=list)

    def render(self, stream: TextIO) -> None:
        """Draw the heading, the tables, then the notes, on `stream`."""
        console = Console(file=stream, width=None if stream.isatty() else WIDTH, highlight=False, markup=False,
                          emoji=False)
        for line in self.heading:
            console.print(line, soft_wrap=True)
        for table in self.tables:
            if table.title:
                console.print(table.title, soft_wrap=True)
            console.print(table.rich())
            if table.caption:
                console.print(table.caption, soft_wrap=True)
        for note in self.notes:
            console.print(note, soft_wrap=True)

    def text(self) -> str:
        """The tables and notes as plain text."""
        out = io.StringIO()
        self.render(out)
        return out.getvalue()

    def emit(self, as_json: bool = True) -> None:
        """The JSON on stdout and the tables on stderr; or (not `as_json`) the tables alone on stdout."""
        if as_json:
            print(dump(self.result), flush=True)
            self.render(sys.stderr)
        else:
            self.render(sys.stdout)


def cell(value: float | int | None, spec: str = "", unit: str = "") -> str:
    """A number as a table cell (`spec` as in format(), then `unit`); "-" when there is none."""
    return "-" if value is None else f"{format(value, spec)}{unit}"
