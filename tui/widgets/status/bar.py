"""The status bar: the engine and its load (where it reports one), the session's own pacing on `tao serve`, the
session's step, time and tokens, how full the model's context window is (engines that know theirs), and what runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.widgets import Static

from harness.events import (Approval, ContextCompact, Event, Interrupt, LLMEnd, LLMStart, SessionEnd, SessionResume,
                            SessionStart, ToolCall, ToolResult, TurnEnd, UserMessage)


@dataclass
class Gauges:
    """What the status bar shows; `None` where nothing is known (drawn as "-")."""

    engine: str = "-"
    activity: str = "idle"
    step: int = 0
    tokens: int = 0
    tokens_per_second: float | None = None
    started: float | None = None  # monotonic time the session (or its resumed part) started
    offset: float = 0.0  # seconds a resumed session had already run
    engine_load: dict[str, Any] = field(default_factory=dict)
    pacing: str | None = None  # the co-scheduler's state, once one reports it (`pacing_text`)
    asking: bool = False  # a model request of the session's is pending (the only time its pacing is asked for)
    context: float | None = None  # share of the model's window the last prompt filled; None: window unknown
    running: dict[str, str] = field(default_factory=dict)  # the calls running now (several, side by side): id -> tool


class StatusBar(Static):
    """One line at the bottom; `apply` takes events, `tick` the clock and the engine's load."""

    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; color: $text; padding: 0 1; }
    """

    def __init__(self, masked: bool = False) -> None:
        """`masked` draws no clock or rate (for snapshot tests and screenshots that must not change)."""
        super().__init__(id="status")
        self.gauges = Gauges()
        self.masked = masked
        self._now = 0.0

    def on_mount(self) -> None:
        self.update(self.line())

    def apply(self, event: Event, now: float) -> None:
        """Take one event; `now` is the monotonic time it arrived."""
        gauges = self.gauges
        match event:
            case SessionStart():
                gauges.engine, gauges.started, gauges.activity = event.engine, now, "working"
            case SessionResume():
                gauges.started, gauges.offset, gauges.step = now, event.t, event.steps
                gauges.activity = "waiting for you"
            case UserMessage():
                gauges.activity = "working"
            case LLMStart():
                gauges.step, gauges.activity, gauges.asking = event.step, "thinking", True
                gauges.running.clear()  # a call left without a result (finish) runs no more
            case LLMEnd():
                gauges.asking = False
                gauges.tokens += event.output_tokens
                if event.decode_seconds:
                    gauges.tokens_per_second = event.output_tokens / event.decode_seconds
                if event.context_window:
                    gauges.context = event.prompt_tokens / event.context_window
            case ContextCompact() if event.context_window:
                gauges.context = event.tokens_after / event.context_window
            case ToolCall():
                gauges.running[event.call_id] = event.name
                gauges.activity = running_text(gauges.running)
            case ToolResult():
                gauges.running.pop(event.call_id, None)
                gauges.activity = running_text(gauges.running) if gauges.running else "working"
            case Approval():
                gauges.activity = "running bash" if event.decision == "allow" else "working"
            case Interrupt():
                gauges.activity, gauges.asking = "interrupted", False
                gauges.running.clear()
            case TurnEnd():
                gauges.activity, gauges.asking = "waiting for you", False
                gauges.running.clear()
            case SessionEnd():
                gauges.activity, gauges.asking = f"ended: {event.status}", False
        self.tick(now)

    def tick(self, now: float, engine_load: dict[str, Any] | None = None) -> None:
        """Redraw with the time now and, if given, the engine's current load."""
        self._now = now
        if engine_load is not None:
            self.gauges.engine_load = engine_load
        self.update(self.line())

    def show_pacing(self, state: dict[str, Any]) -> None:
        """Redraw with the session's pacing as `tao serve` reported it (`GET /v1/tao/pacing/{session}`)."""
        self.gauges.pacing = pacing_text(state)
        self.update(self.line())

    def line(self) -> Text:
        """Only fields that mean something for this engine: no rate without real (or simulated) time, no load
        where the engine keeps no books, no pacing where no co-scheduler paces the session."""
        gauges, load = self.gauges, self.gauges.engine_load
        elapsed = None if gauges.started is None else gauges.offset + self._now - gauges.started
        rate, kv = gauges.tokens_per_second, load.get("kv")
        parts = [("engine ", gauges.engine)]
        if rate is not None and not self.masked:
            parts.append(("tok/s ", f"{rate:.1f}"))
        if kv is not None:
            parts.append(("kv ", f"{kv:.0%}"))
        if load.get("queued") is not None:
            parts.append(("queue ", f"{_dash(load.get('queued'))}/{_dash(load.get('running'))}"))
        if gauges.pacing is not None:
            parts.append(("pacing ", gauges.pacing))
        parts += [("step ", str(gauges.step)),
                  ("time ", "-" if elapsed is None or self.masked else _clock(elapsed)),
                  ("tokens ", str(gauges.tokens))]
        if gauges.context is not None:  # drawn only for engines that know their window
            parts.append(("ctx ", f"{gauges.context:.0%}"))
        text = Text()
        for label, value in parts:
            text.append(label, style="dim")
            text.append(value + "  ", style="bold")
        text.append(gauges.activity, style="italic")
        return text


def pacing_text(state: dict[str, Any]) -> str:
    """A session's pacing in words: "admitted" or "waiting N s at position k" (else "idle", between requests),
    then the sessions active and the KV cache in use, where the gateway says."""
    waited, position = state.get("waited"), state.get("position")
    if state.get("admitted"):
        text = "admitted"
    elif isinstance(position, int):
        text = (f"waiting {waited:.0f} s at position {position}" if isinstance(waited, (int, float))
                else f"waiting at position {position}")
    else:
        text = "idle"
    sessions, kv = state.get("sessions"), state.get("kv_usage")
    if isinstance(sessions, int):
        text += f", {sessions} session{'' if sessions == 1 else 's'} active"
    if isinstance(kv, (int, float)):
        text += f", kv {kv:.0%}"
    return text


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def running_text(running: dict[str, str]) -> str:
    """What runs: `running grep`, or for a turn's calls side by side `running 3 calls (read_file, grep)`."""
    names = list(dict.fromkeys(running.values()))
    if len(running) == 1:
        return f"running {names[0]}"
    return f"running {len(running)} calls ({', '.join(names)})"
