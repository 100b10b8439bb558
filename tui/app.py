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
import multiprocessing
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Footer, Input
from textual.worker import Worker

from harness.approval import Answer
from harness.engine.api import Engine
from harness.engine.factory import open_engine
from harness.errors import TaoError, UsageError
from harness.events import Event, SessionEnd, read_trajectory
from harness.history import LAST, choose_session, load_saved
from harness.interactive import (LiveSession, describe_engine, engine_status, killed_session, last_trajectory,
                                 open_live_session, pacing_source, record_failed_start)
from harness.launch import SessionOptions
from harness.saved import PICK, SavedSession, repository_sessions
from harness.paths import state_dir
from harness.vocabulary import Status
from tui.commands import Commands, is_command
from tui.engine_log import EngineLog, log_path, screen_driver, stderr_to_log
from tui.screens.approve import GUARD_SECONDS, ApprovalScreen
from tui.screens.diff import DiffScreen
from tui.screens.keys import KeysScreen
from tui.screens.sessions import SessionPicker
from tui.widgets.conversation.opening import Opening, OpeningPanel, git_branch
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
                 masked: bool = False, choices: list[SavedSession] | None = None,
                 engine_log: EngineLog | None = None) -> None:
        """`masked` draws no clocks, durations or full paths: for snapshot tests and screenshots. `choices`: saved
        sessions to pick one from at once (`tao --resume`). With `engine_log` (see tui.engine_log) the screen is
        drawn on its terminal stream and stderr goes to the log."""
        super().__init__(driver_class=screen_driver(engine_log.screen) if engine_log is not None else None)
        self.options, self.first_task, self.resume, self.masked = options, task, resume, masked
        self.choices = choices
        self.engine_log = engine_log
        self.live: LiveSession | None = None
        self.worker: Worker[None] | None = None
        self.engine: Engine | None = None  # started at launch, shared by the session
        self.engine_error: str | None = None  # why the engine failed to start, until it is tried again
        self.loader: Worker[None] | None = None
        self.loader_started = 0.0  # monotonic time the engine's (last) load began
        self.opening_task: str | None = None  # what the session starts on once the engine is ready ("": resume)
        self.failed_trajectory: Path | None = None  # where a task whose engine failed was saved
        self.quitting = False
        self.pending: list[str] = []  # messages typed before the session was open
        self.ended: SessionEnd | None = None
        self.shown: list[Event] = []  # every event drawn, in order (what tests and --resume look at)
        self.approval_guard = GUARD_SECONDS  # seconds an approval modal drops keys typed for something else
        self.commands = Commands(self)

    def compose(self) -> ComposeResult:
        repo = self.options.repo
        approvals = self.options.approvals
        opening = Opening(repo.name if self.masked else str(repo), git_branch(repo),
                          describe_engine(self.options.engine), approvals.mode if approvals else "full-auto")
        with Horizontal(id="panes"):
            with ConversationPane():
                yield OpeningPanel(opening, self.masked)
            yield SpeculationPane(self.masked)
        yield PromptBox()
        yield StatusBar(self.masked)
        yield Footer()

    def on_mount(self) -> None:
        if self.engine_log is not None:
            sys.stderr = self.engine_log.file  # Textual's stand-in has no file descriptor for child processes
        self.query_one(SpeculationPane).book.enabled = self.options.speculation
        if self.resume is not None:
            self.open_saved(self.resume)
        elif self.choices:
            self.push_screen(SessionPicker(self.choices, self.options.repo), callback=self.picked)
        elif self.first_task:
            self.opening_task = self.first_task
            self.query_one(OpeningPanel).opening.waiting = self.first_task
        else:
            self.notice_killed_session()
        self.query_one(PromptBox).waiting_for("follow-up" if self.resume else "busy" if self.first_task else "task")
        self.query_one(PromptBox).cursor_blink = not self.masked  # a blinking cursor would change screenshots
        self.query_one(PromptBox).focus()
        self.set_interval(1.0, self.tick)
        self.loader = self.load_engine()  # at launch, not at the first Enter: loading takes tens of seconds

    def notice_killed_session(self) -> None:
        """Say so when this repository's last session ended without a session_end (tao was killed or crashed)."""
        path = killed_session(state_dir() / "trajectories", self.options.repo)
        if path is not None:
            self.query_one(ConversationPane).note(
                f"The last session here did not end: tao was killed or crashed while it ran ({path}). "
                "Quit and run `tao --resume` to continue it, or type a new task.", "warning")

    # -- the engine, loaded at launch ----------------------------------------------------------------

    @work(exclusive=True, group="engine", exit_on_error=False)
    async def load_engine(self) -> None:
        """Start the engine; once it is ready, start the session if a task (or a resumed session) waits for it."""
        panel = self.query_one(OpeningPanel)
        self.engine_error, panel.opening.engine, panel.opening.reason = None, "loading", ""
        self.query_one(StatusBar).gauges.activity = "loading the engine…"
        started = self.loader_started = time.monotonic()
        self.tick()
        try:
            engine = await open_engine(self.options.engine)
        except TaoError as exc:
            self.engine_failed(str(exc))
            return
        except Exception as exc:  # a bug must not leave the screen saying "loading" for ever
            self.engine_failed(f"{type(exc).__name__}: {exc}")
            return
        self.engine = engine
        if self.quitting:
            return  # the quit closes it
        panel.opening.engine, panel.opening.seconds = "ready", time.monotonic() - started
        panel.show()
        status = self.query_one(StatusBar)
        status.gauges.engine = getattr(engine, "name", "-")
        status.gauges.activity = "ready: type a task" if self.opening_task is None else "working"
        self.tick()
        if self.opening_task is not None:
            self.query_one(PromptBox).waiting_for("follow-up" if self.resume is not None else "busy")
            self.start(self.opening_task)
        else:
            self.query_one(PromptBox).waiting_for("task")

    def engine_failed(self, reason: str) -> None:
        """The engine could not start: say why everywhere, save a waiting task, let Enter try again."""
        if self.quitting:
            return  # stopped by the quit, which keeps a waiting task
        if self.engine_log is not None:
            reason += f". The engine's output is in {self.engine_log.path}"
        self.engine_error = reason
        panel = self.query_one(OpeningPanel)
        panel.opening.engine, panel.opening.reason = "failed", reason
        panel.show()
        self.query_one(StatusBar).gauges.activity = "engine failed: " + _brief(reason)
        self.tick()
        prompt = self.query_one(PromptBox)
        if self.opening_task and self.resume is None:  # the typed task is kept in a trajectory, and in the box
            self.failed_trajectory = record_failed_start(self.options, self.opening_task, reason)
            self.query_one(ConversationPane).note(f"Your task was saved in {self.failed_trajectory} (session_end: "
                                                  "error); press Enter to try again with it.", "deny")
            prompt.value = self.opening_task
            self.opening_task = None
        prompt.waiting_for("retry")
        self.notify(reason, title="The engine could not start", severity="error", timeout=30)

    def open_saved(self, trajectory: Path) -> None:
        """Draw a saved session's conversation and go on with it."""
        self.resume = trajectory
        for event in read_trajectory(trajectory):
            self.show(event, time.monotonic())
        if self.engine is not None:
            self.start("")
        else:
            self.opening_task = ""  # starts once the engine is ready

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
        """Open the session on the loaded engine, run it until the user quits, and say why if it could not start."""
        self.opening_task = None
        try:
            async with open_live_session(self.options, task=task, resume=self.resume, sinks=[self.post_event],
                                         live_sinks=[self.post_event], ask=self.ask, engine=self.engine) as live:
                self.live = live
                for text in self.pending:
                    live.session.send(text)
                self.pending.clear()
                await live.session.run()
        except TaoError as exc:
            self.session_failed(str(exc))
        except Exception as exc:  # a bug must not take the screen down with it
            self.session_failed(f"{type(exc).__name__}: {exc}. Its trajectory keeps what happened; please report this")
        finally:
            self.live = None

    def session_failed(self, reason: str) -> None:
        """The session stopped on an error: the status bar and a note keep saying why; a new task may be typed."""
        if self.screen_stack and self.query(ConversationPane):
            self.query_one(StatusBar).gauges.activity = "session failed: " + _brief(reason)
            self.query_one(ConversationPane).note(f"The session failed: {reason}", "deny")
            self.query_one(PromptBox).waiting_for("task")
            self.tick()
        self.notify(reason, title="The session failed", severity="error", timeout=30)

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
        """Once a second: the clock and the engine's load in the status bar, the loading time in the panel."""
        if not self.screen_stack or not self.query(StatusBar):
            return
        load = engine_status(self.engine) if self.engine is not None else None
        status = self.query_one(StatusBar)
        status.tick(time.monotonic(), load)
        pacing = pacing_source(self.live.session.engine) if self.live is not None else None
        if pacing is not None and status.gauges.asking:
            self.poll_pacing(pacing)  # at most once a second, and only while the session waits on the model
        if self.loader is not None and self.loader.is_running and self.engine is None:
            panel = self.query_one(OpeningPanel)
            panel.opening.seconds = time.monotonic() - self.loader_started
            panel.show()

    @work(exclusive=True, group="pacing", exit_on_error=False)
    async def poll_pacing(self, pacing: Callable[[], Awaitable[dict[str, Any] | None]]) -> None:
        """Ask `tao serve` where the session stands and show it in the status bar (no answer: the last stays)."""
        state = await pacing()
        if state is not None and self.query(StatusBar):
            self.query_one(StatusBar).show_pacing(state)

    # -- the user's side -----------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        failed = self.engine is None and self.engine_error is not None
        if not isinstance(event.input, PromptBox) or not (text or failed):
            return
        event.input.clear()
        if is_command(text):
            self.commands.run(text)  # never sent to the model
            return
        if self.live is not None:
            self.live.session.send(text)
        elif self.worker is not None and self.worker.is_running:
            self.pending.append(text)  # the session is still opening
        elif self.engine is not None:
            self.start(text)
        else:  # the engine is loading, or failed and is tried again: the task waits for it
            if text and self.opening_task is None:
                self.opening_task = text
                self.query_one(OpeningPanel).opening.waiting = text
                self.query_one(ConversationPane).note("Your task waits for the engine to load and starts as soon "
                                                      "as it is ready.", "")
            elif text:
                self.pending.append(text)
            if failed:
                self.loader = self.load_engine()
            self.query_one(PromptBox).waiting_for("queued")
            return
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

    def stop_loading(self) -> None:
        """Quit while the engine loads: its start cannot be cancelled (its thread imports vLLM or waits on vLLM's
        processes), so the thread is left behind (a daemon) and any process it starts is stopped until tao exits,
        instead of a minute's wait for a start nobody wants any more."""

        def stop_children() -> None:
            while True:
                for child in multiprocessing.active_children():  # vLLM's engine core, once it is spawned
                    child.terminate()
                time.sleep(0.2)

        threading.Thread(target=stop_children, name="tao-stop-engine", daemon=True).start()
        if self.loader is not None:
            self.loader.cancel()

    def action_keys(self) -> None:
        self.push_screen(KeysScreen())

    async def action_quit(self) -> None:
        """End the session (its trajectory gets its session_end), shut the engine down, then leave."""
        if self.live is not None:
            self.live.session.stop()
        if self.worker is not None:
            try:
                await asyncio.wait_for(self.worker.wait(), timeout=15)
            except Exception:  # leaving must not fail; the worker said what went wrong
                pass
        self.quitting = True
        if self.loader is not None and self.loader.is_running:
            self.stop_loading()
        if self.opening_task and self.resume is None and self.worker is None:  # typed, never started: kept
            self.failed_trajectory = record_failed_start(self.options, self.opening_task, "the user quit while the "
                                                         "engine was loading", status=Status.INTERRUPTED)
        engine, self.engine = self.engine, None
        if engine is not None:
            try:
                await asyncio.wait_for(engine.close(), timeout=30)
            except Exception:  # leaving must not fail
                pass
        self.exit(0)


def resolve_resume(resume: str | None, repo: Path) -> Path | None:
    """The trajectory `--resume FILE` or `--continue` names: the given file, or the last session (in this
    repository if any)."""
    if resume is None or resume == PICK:
        return None
    if resume != LAST:
        path = Path(resume).expanduser()
        if not path.is_file():
            raise UsageError(f"--resume {path}: no such trajectory file")
        load_saved(path)  # a damaged file is a usage error now, before the screen opens
        return path
    last = last_trajectory(state_dir() / "trajectories", repo)
    if last is None:
        raise UsageError(f"no saved session to resume in {state_dir() / 'trajectories'}; start one with `tao`")
    load_saved(last)
    return last


def sessions_to_pick(repo: Path) -> list[SavedSession]:
    """This repository's saved sessions for `--resume` without a file; a UsageError when it has none."""
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
    with stderr_to_log(log_path(state_dir())) as log:
        app = TaoApp(options, task, trajectory, choices=choices, engine_log=log)
        app.run()
    if app.failed_trajectory is not None and app.ended is None:
        print(f"your task never ran; it is saved in {app.failed_trajectory} "
              f"(`tao --resume {app.failed_trajectory}` reopens it)")
    if app.ended is not None or app.resume is not None:
        print("session saved; reopen it with `tao --resume`")
    return app.return_code or 0


def _brief(reason: str, width: int = 70) -> str:
    """The first sentence of a reason, cut to `width` characters, for the one-line status bar."""
    first = reason.split("; ")[0].split(". ")[0]
    return first if len(first) <= width else first[: width - 1] + "…"
