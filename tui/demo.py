"""`tao demo` on a terminal: the TUI on the demo's fresh copy, its task started at once, a word on where the
answers come from at the top and, when the task is done, what it showed and how to go on.

With `--screenshot SVG` the same app runs off-screen and saves its last screen (the README's picture).
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
from harness.interactive import SessionOptions
from tui.app import TaoApp
from tui.widgets.conversation.pane import ConversationPane

SCREENSHOT_SIZE = (150, 48)


class DemoApp(TaoApp):
    """The TUI on the demo's task, with its opening words and its closing recap in the conversation."""

    CSS = TaoApp.CSS + """
    ConversationPane .demo { border: round $accent; padding: 0 1; margin-bottom: 1; }
    ConversationPane .demo-end { border: round $success; padding: 0 1; margin: 1 0; }
    """

    def __init__(self, options: SessionOptions, plan: DemoPlan, screenshot: Path | None = None) -> None:
        super().__init__(options, plan.task)
        self.plan, self.screenshot = plan, screenshot
        self.recap = Recap()
        self.recapped = False

    def on_mount(self) -> None:
        intro = Text.assemble(("Tao demo", "bold"), f" in {self.plan.repo}, a fresh copy of examples/calc.\n",
                              self.plan.answers, "\n", self.plan.approvals, "\n",
                              ("Watch the speculation pane on the right: ", "italic"),
                              ("✔ promoted", "bold green"), " guesses answered the model's call before it was asked; ",
                              ("✘ discarded", "bold red"), " ones changed nothing.")
        self.query_one(ConversationPane).add(Static(intro, classes="demo"))
        super().on_mount()

    def show(self, event: Event, arrived: float) -> None:
        """Draw the event; after the task's first turn, the recap and the closing hints."""
        super().show(event, arrived)
        self.recap(event)
        if isinstance(event, TurnEnd) and not self.recapped and self.query(ConversationPane):
            self.recapped = True
            lines = [*self.recap.lines(), self.plan.answers, "", *CLOSING, "Ctrl+Q quits."]
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
    options = replace(options, approvals=demo_policy(plan.repo, args.yolo))
    # Textual's stand-in for stderr has no file descriptor (fileno() -1), which multiprocessing's resource
    # tracker would hand to vLLM's engine process ("bad value(s) in fds_to_keep"): start the tracker first.
    multiprocessing.resource_tracker.ensure_running()
    app = DemoApp(options, plan, args.screenshot)
    started = time.monotonic()
    if args.screenshot is not None:
        args.screenshot.parent.mkdir(parents=True, exist_ok=True)
        app.run(headless=True, size=SCREENSHOT_SIZE)
        print(f"screenshot: {args.screenshot} (after {time.monotonic() - started:.0f} s)")
    else:
        app.run()
    print(f"The demo ran in {plan.repo}; its session is saved (`tao --resume` there reopens it).")
    return app.return_code or 0
