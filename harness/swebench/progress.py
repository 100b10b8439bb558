"""The live progress of a batch: a rich table (instance, step, current tool, speculation hits, elapsed)
with an ETA on a terminal; one line per finished instance elsewhere."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from harness.events import Event, SessionEnd, SpecPromote, ToolCall, ToolResult
from harness.log import counted

MAX_ROWS = 20  # running instances first, then the most recently finished


@dataclass
class Row:
    """What the table shows of one instance."""

    instance_id: str
    started: float = field(default_factory=time.monotonic)
    step: int = 0
    tool: str = ""
    hits: int = 0
    status: str = "running"
    node: str = ""
    ended: float | None = None

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class BatchProgress:
    """Collects events of every running session and renders them."""

    def __init__(self, total: int, done: int, workers: int, stream: IO[str], live: bool | None = None) -> None:
        self.total, self.done, self.workers = total, done, workers
        self.console = Console(file=stream)
        self.live_mode = self.console.is_terminal if live is None else live
        self.rows: dict[str, Row] = {}
        self.finished_now = 0  # finished in this run (for the rate)
        self.t0 = time.monotonic()
        self._live: Live | None = None

    def __enter__(self) -> BatchProgress:
        if self.live_mode:
            self._live = Live(self.render(), console=self.console, refresh_per_second=2,
                              get_renderable=self.render)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def sink(self, instance_id: str) -> Callable[[Event], None]:
        """An event sink for one instance's session."""
        row = self.rows[instance_id] = Row(instance_id)

        def observe(event: Event) -> None:
            match event:
                case ToolCall():
                    row.step, row.tool = event.step, event.name
                case ToolResult():
                    row.tool = ""
                case SpecPromote():
                    row.hits += 1
                case SessionEnd():
                    row.step = event.steps
        return observe

    def started(self, instance_id: str, node: str) -> None:
        """An instance started on a cluster node (tao swebench --ray): its row shows the node, and a line says so
        when there is no live table."""
        self.rows[instance_id] = Row(instance_id, node=node)
        if not self.live_mode:
            self.console.print(f"{instance_id}: started on {node}", highlight=False)

    def stepped(self, instance_id: str, step: int, hits: int) -> None:
        """An instance's steps and speculation hits, known only at its end when it ran on another node."""
        row = self.rows.setdefault(instance_id, Row(instance_id))
        row.step, row.hits = step, hits

    def finished(self, instance_id: str, status: str, note: str = "") -> None:
        """An instance is done: update its row, count it, print a line when there is no live table."""
        row = self.rows.setdefault(instance_id, Row(instance_id))
        row.status, row.tool, row.ended = status, "", time.monotonic()
        self.done += 1
        self.finished_now += 1
        if not self.live_mode:
            extra = f" ({note})" if note else ""
            self.console.print(f"[{self.done}/{self.total}] {instance_id}: {status} after {counted(row.step, 'step')}, "
                               f"{row.elapsed():.1f} s, {row.hits} speculation hits{extra}", highlight=False)

    def eta(self) -> float | None:
        """Seconds left at the rate of this run so far; None before the first instance finishes."""
        if not self.finished_now:
            return None
        rate = self.finished_now / (time.monotonic() - self.t0)
        return (self.total - self.done) / rate

    def render(self) -> Table:
        eta = self.eta()
        caption = (f"{self.done}/{self.total} done, {self.workers} workers, "
                   f"elapsed {time.monotonic() - self.t0:.0f} s, ETA {'?' if eta is None else f'{eta:.0f} s'}")
        table = Table(title="tao swebench", caption=caption)
        nodes = any(row.node for row in self.rows.values())  # on a cluster: where each instance runs
        for column in ("instance", "status", *(("node",) if nodes else ()), "step", "tool", "spec hits", "elapsed"):
            table.add_column(column, justify="right" if column in ("step", "spec hits", "elapsed") else "left")
        rows = sorted(self.rows.values(), key=lambda r: (r.status != "running", -(r.ended or 0)))
        for row in rows[:MAX_ROWS]:
            table.add_row(row.instance_id, row.status, *((row.node,) if nodes else ()), str(row.step), row.tool,
                          str(row.hits), f"{row.elapsed():.0f} s")
        return table
