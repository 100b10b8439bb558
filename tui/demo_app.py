"""`tao demo` on a terminal: the TUI on the demo's fresh copy, its task started at once, a word on where the
answers come from at the top and, when the task is done, what it showed and how to go on.

With `--screenshot SVG` the same app runs off-screen and saves its last screen (the README's picture).

While the app draws on the terminal, the engine's output goes to a log, as in every TUI (tui.engine_log).
"""

from __future__ import annotations

import argparse
import multiprocessing.resource_tracker
import time
from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual.widgets import Static

from harness.demo import CLOSING, DemoPlan, Recap, demo_policy
from harness.events import Event, TurnEnd
from harness.launch import SessionOptions
from harness.paths import state_dir
from tui.app import TaoApp
from tui.engine_log import EngineLog, log_path, stderr_to_log
from tui.widgets.conversation.pane import ConversationPane

SCREENSHOT_SIZE = (150, 72)


class DemoApp(TaoApp):
    """The TUI on the demo's task, with its opening words and its closing recap in the conversation."""

    CSS = TaoApp.CSS + """
    ConversationPane .demo { border: round $accent; padding: 0 1; margin-bottom: 1; }
    ConversationPane .demo-end { border: round $success; padding: 0 1; margin: 1 0; }
    """

    def __init__(self, options: SessionOptions, plan: DemoPlan, screenshot: Path | None = None,
                 engine_log: EngineLog | None = None) -> None:
        """`engine_log`: where the engine's stderr goes while the app draws on the terminal (tui.engine_log)."""
        super().__init__(options, plan.task, engine_log=engine_log)
        self.plan, self.screenshot = plan, screenshot
        self.recap = Recap()
        self.recapped = False

    def on_mount(self) -> None:
        intro = Text.assemble(("Tao demo", "bold"), f" in {self.plan.repo}, a fresh copy of examples/calc.\n",
                              self.plan.answers, "\n", self.plan.approvals, "\n",
                              ("Watch the speculation pane on the right: ", "italic"),
                              ("✔ promoted", "bold green"), " is a guessed call that ran while the model was still "
                              "writing and then answered it; ", ("✘ discarded", "bold red"),
                              " is a wrong guess, thrown away without changing anything.")
        self.query_one(ConversationPane).add(Static(intro, classes="demo"))
        super().on_mount()

    def show(self, event: Event, arrived: float) -> None:
        """Draw the event; after the task's first turn, the recap and the closing hints."""
        super().show(event, arrived)
        self.recap(event)
        if isinstance(event, TurnEnd) and not self.recapped and self.query(ConversationPane):
            self.recapped = True
            engine = self.options.engine
            scripted = engine.replay is not None and engine.kind != "openai"  # a follow-up would find no answer
            lines = [*self.recap.lines(), self.plan.answers, "", *CLOSING,
                     "The script ends here; Ctrl+Q quits." if scripted else "Ctrl+Q quits."]
            self.query_one(ConversationPane).add(Static("\n".join(lines), classes="demo-end"))
            if self.screenshot is not None:
                self.set_timer(1.5, self.take_screenshot)  # the recap laid out and the clocks ticked once more

    def take_screenshot(self) -> None:
        """Save the screen as an SVG, then quit (the --screenshot run has nobody to press Ctrl+Q)."""
        assert self.screenshot is not None
        self.tick()
        self.save_screenshot(self.screenshot.name, str(self.screenshot.parent.resolve()))
        self.call_later(self.action_quit)


def main(args: argparse.Namespace, plan: DemoPlan) -> int:
    """Open the demo's TUI (off-screen with --screenshot) and say afterwards where the copy and its session are."""
    options = SessionOptions.from_args(args, plan.repo.resolve())
    options = replace(options, approvals=demo_policy(plan.repo, args.yolo, args.mode))
    started = time.monotonic()
    if args.screenshot is not None:
        args.screenshot.parent.mkdir(parents=True, exist_ok=True)
        # Off-screen, Textual's stand-in for sys.stderr has no file descriptor (fileno() -1), which multiprocessing's
        # resource tracker would hand to vLLM's engine process ("bad value(s) in fds_to_keep"): start it first.
        multiprocessing.resource_tracker.ensure_running()
        app = DemoApp(options, plan, args.screenshot)
        app.run(headless=True, size=SCREENSHOT_SIZE)
        print(f"screenshot: {args.screenshot} (after {time.monotonic() - started:.0f} s)")
        return app.return_code or 0
    log = log_path(state_dir())
    with stderr_to_log(log) as engine_log:
        app = DemoApp(options, plan, engine_log=engine_log)
        app.run()
    print(f"The demo ran in {plan.repo}; its session is saved (`tao --resume` there reopens it).")
    if log.exists() and not app.recap.tests:
        print(f"The engine's own output is in {log}.")
    return app.return_code or 0
