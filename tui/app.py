"""The Textual app: the conversation, the speculation pane, the status bar and the input box of one session.

The session runs in an async worker on the app's event loop (tools are subprocesses, so the UI never
waits on them); its events come back as `SessionEvent` messages and each pane renders what concerns it.
Approvals are asked through a modal; the session's trajectory is written as it runs, and `--resume`
lists this repository's saved sessions to reopen one (`--continue`: the last), its conversation drawn
from its events.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import replace
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Footer, Input
from textual.worker import Worker

from harness.approval import Answer
from harness.errors import TaoError, UsageError
from harness.events import Event, SessionEnd, read_trajectory
from harness.history import choose_session, load_saved
from harness.interactive import LiveSession, SessionOptions, engine_status, last_trajectory, open_session
from harness.saved import PICK, SavedSession, repository_sessions
from tui.commands import Commands, is_command
from tui.screens.approval import GUARD_SECONDS, ApprovalScreen
from tui.screens.diff import DiffScreen
from tui.screens.keys import KeysScreen
from tui.screens.sessions import SessionPicker
from tui.widgets.conversation.pane import ConversationPane
from tui.widgets.prompt.box import PromptBox
from tui.widgets.speculation.pane import SpeculationPane
from tui.widgets.status.bar import StatusBar


class SessionEvent(Message):
    """One event of the running session, delivered on the UI's side."""

    def __init__(self, event: Event, arrived: float) -> None:
        super().__init__()
        self.event, self.arrived = event, arrived


class TaoApp(App[int]):
    """One interactive session: type a task, watch it run, follow up, interrupt, approve."""

    TITLE = "Tao"
    CSS = """
    #panes { height: 1fr; }
    """
    BINDINGS = [
        Binding("ctrl+c", "interrupt", "Interrupt", priority=True),
        Binding("ctrl+t", "toggle_speculation", "Speculation", priority=True),
        Binding("ctrl+g", "diff", "Diff", priority=True),
        Binding("f1", "keys", "Keys"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(self, options: SessionOptions, task: str = "", resume: Path | None = None,
                 masked: bool = False, choices: list[SavedSession] | None = None) -> None:
        """`masked` draws no clocks or durations: for snapshot tests and screenshots. `choices`: saved
        sessions to pick one from at once (`tao --resume`)."""
        super().__init__()
        self.options, self.first_task, self.resume, self.masked = options, task, resume, masked
        self.choices = choices
        self.live: LiveSession | None = None
        self.worker: Worker[None] | None = None
        self.pending: list[str] = []  # messages typed before the session was open
        self.ended: SessionEnd | None = None
        self.shown: list[Event] = []  # every event drawn, in order (what tests and --resume look at)
        self.approval_guard = GUARD_SECONDS  # seconds an approval modal drops keys typed for something else
        self.commands = Commands(self)

    def compose(self) -> ComposeResult:
        with Horizontal(id="panes"):
            yield ConversationPane()
            yield SpeculationPane(self.masked)
        yield PromptBox()
        yield StatusBar(self.masked)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(SpeculationPane).book.enabled = self.options.speculation
        if self.resume is not None:
            self.open_saved(self.resume)
        elif self.choices:
            self.push_screen(SessionPicker(self.choices, self.options.repo), callback=self.picked)
        elif self.first_task:
            self.start(self.first_task)
        self.query_one(PromptBox).waiting_for("follow-up" if self.resume else "busy" if self.first_task else "task")
        self.query_one(PromptBox).cursor_blink = not self.masked  # a blinking cursor would change screenshots
        self.query_one(PromptBox).focus()
        self.set_interval(1.0, self.tick)

    def open_saved(self, trajectory: Path) -> None:
        """Draw a saved session's conversation and go on with it."""
        self.resume = trajectory
        for event in read_trajectory(trajectory):
            self.show(event, time.monotonic())
        self.start("")

    def picked(self, trajectory: Path | None) -> None:
        """The picker's answer: resume that session, or (None) stay on a new one."""
        if trajectory is None or self.worker is not None:
            return
        try:
            load_saved(trajectory)
        except UsageError as exc:
            self.notify(str(exc), title="That session cannot be resumed", severity="error", timeout=30)
            return
        self.open_saved(trajectory)
        self.query_one(PromptBox).waiting_for("follow-up")

    def action_pick_session(self) -> None:
        """List this repository's saved sessions to resume one (before a session is open here)."""
        if self.worker is not None:
            self.notify("A session is open here. Quit (Ctrl+Q), then `tao --resume` lists the saved ones.", timeout=5)
            return
        from harness.cli import state_dir

        sessions = repository_sessions(state_dir() / "trajectories", self.options.repo)
        if not sessions:
            self.notify("No saved session of this repository yet.", timeout=5)
            return
        self.push_screen(SessionPicker(sessions, self.options.repo), callback=self.picked)

    # -- the session, in a worker --------------------------------------------------------------------

    def start(self, task: str) -> None:
        """Run the session (on `task`, or the resumed one) in a worker on the app's event loop."""
        self.worker = self.run_session(task)

    @work(exclusive=True, group="session", exit_on_error=False)
    async def run_session(self, task: str) -> None:
        """Open the session, run it until the user quits, and say why if it could not start."""
        status = self.query_one(StatusBar)
        status.gauges.activity = "starting the engine…"  # loading a model takes a while; the UI stays live
        status.tick(time.monotonic())
        try:
            async with open_session(self.options, task=task, resume=self.resume, sinks=[self.post_event],
                                    live_sinks=[self.post_event], ask=self.ask) as live:
                self.live = live
                for text in self.pending:
                    live.session.send(text)
                self.pending.clear()
                await live.session.run()
        except TaoError as exc:
            self.notify(str(exc), title="The session could not run", severity="error", timeout=30)
        except Exception as exc:  # noqa: BLE001 - a bug must not take the screen down with it
            self.notify(f"{type(exc).__name__}: {exc}. Its trajectory keeps what happened; please report this.",
                        title="The session failed", severity="error", timeout=60)
        finally:
            self.live = None

    def post_event(self, event: Event) -> None:
        """The session's sink: hand the event to the UI as a message."""
        self.post_message(SessionEvent(event, time.monotonic()))

    def on_session_event(self, message: SessionEvent) -> None:
        """Draw an event on the UI's side."""
        self.show(message.event, message.arrived)

    def show(self, event: Event, arrived: float) -> None:
        """Give one event to every pane."""
        self.shown.append(event)
        if not self.screen_stack or not self.query(ConversationPane):
            return  # the app is closing; the trajectory still gets every event
        self.query_one(ConversationPane).apply(event)
        self.query_one(SpeculationPane).apply(event)
        self.query_one(StatusBar).apply(event, arrived)
        if event.type == "turn_end":
            self.query_one(PromptBox).waiting_for("follow-up")
        elif event.type == "session_end" and isinstance(event, SessionEnd):
            self.ended = event

    async def ask(self, command: str) -> Answer:
        """The approval policy's question to the user, as a modal; an interrupt closes it unanswered."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        screen = ApprovalScreen(command, self.approval_guard)

        def answered(answer: Answer | None) -> None:
            if not future.done():
                future.set_result(answer or Answer("deny"))

        self.push_screen(screen, callback=answered)
        try:
            return await future
        except asyncio.CancelledError:
            if screen.is_current:
                self.pop_screen()
            raise

    def tick(self) -> None:
        """Once a second: the clock and the engine's load in the status bar."""
        load = engine_status(self.live.engine) if self.live is not None else None
        self.query_one(StatusBar).tick(time.monotonic(), load)

    # -- the user's side -----------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not isinstance(event.input, PromptBox) or not text:
            return
        event.input.clear()
        if is_command(text):
            self.commands.run(text)  # never sent to the model
            return
        if self.live is not None:
            self.live.session.send(text)
        elif self.worker is not None and self.worker.is_running:
            self.pending.append(text)  # the session is still opening
        else:
            self.start(text)
        self.query_one(PromptBox).waiting_for("busy")

    def on_prompt_box_help_requested(self, _: PromptBox.HelpRequested) -> None:
        self.action_keys()

    def action_interrupt(self) -> None:
        """Ctrl+C: copy a selection if there is one, else stop the current step."""
        selected = self.screen.get_selected_text()
        if selected:
            self.copy_to_clipboard(selected)
            self.notify("copied")
            return
        if self.live is None or not self.live.session.interrupt():
            self.notify("Nothing is running. Ctrl+Q quits.", timeout=3)

    def action_toggle_speculation(self) -> None:
        """Ctrl+T: turn speculation off or on (for the session, or for the one about to start)."""
        enabled = not self.query_one(SpeculationPane).book.enabled
        if self.live is not None:
            if not self.live.session.set_speculation(enabled):
                self.notify("This session has no speculation.", severity="warning")
            return  # the spec_toggle event redraws the pane
        self.options = replace(self.options, speculation=enabled)
        pane = self.query_one(SpeculationPane)
        pane.book.enabled = enabled
        pane.render_totals()

    def action_diff(self) -> None:
        repo = self.live.session.workspace.root if self.live is not None else self.options.repo
        self.push_screen(DiffScreen(Path(repo)))

    def action_keys(self) -> None:
        self.push_screen(KeysScreen())

    async def action_quit(self) -> None:
        """End the session (its trajectory gets its session_end), then leave."""
        if self.live is not None:
            self.live.session.stop()
        if self.worker is not None:
            try:
                await asyncio.wait_for(self.worker.wait(), timeout=15)
            except Exception:  # noqa: BLE001 - leaving must not fail; the worker said what went wrong
                pass
        self.exit(0)


def resolve_resume(resume: str | None, repo: Path) -> Path | None:
    """The trajectory `--resume FILE` or `--continue` names: the given file, or the last session (in this
    repository if any)."""
    if resume is None or resume == PICK:
        return None
    if resume != "last":
        path = Path(resume).expanduser()
        if not path.is_file():
            raise UsageError(f"--resume {path}: no such trajectory file")
        load_saved(path)  # a damaged file is a usage error now, before the screen opens
        return path
    from harness.cli import state_dir

    path = last_trajectory(state_dir() / "trajectories", repo)
    if path is None:
        raise UsageError(f"no saved session to resume in {state_dir() / 'trajectories'}; start one with `tao`")
    load_saved(path)
    return path


def sessions_to_pick(repo: Path) -> list[SavedSession]:
    """This repository's saved sessions for `--resume` without a file; a UsageError when it has none."""
    from harness.cli import state_dir

    folder = state_dir() / "trajectories"
    sessions = repository_sessions(folder, repo)
    if not sessions:
        choose_session(folder, repo)  # raises, naming other repositories' sessions and how to resume one
    return sessions


def main(args: argparse.Namespace, repo: Path, task: str = "", resume: str | None = None) -> int:
    """`tao` / `tao tui`: open the app in `repo` on a new task (typed or given) or a resumed session."""
    if not repo.is_dir():
        raise UsageError(f"--repo {repo} is not a directory")
    options = SessionOptions.from_args(args, repo.resolve())
    choices = sessions_to_pick(repo.resolve()) if resume == PICK else None
    trajectory = resolve_resume(resume, repo.resolve())
    app = TaoApp(options, task, trajectory, choices=choices)
    app.run()
    if app.ended is not None or app.resume is not None:
        print("session saved; reopen it with `tao --resume`")
    return app.return_code or 0
