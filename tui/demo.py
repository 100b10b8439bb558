"""`tao demo` on a terminal: the TUI on the demo's fresh copy, its task started at once, a word on where the
answers come from at the top and, when the task is done, what it showed and how to go on.

With `--screenshot SVG` the same app runs off-screen and saves its last screen (the README's picture).

While the app draws on the terminal, fd 2 (where vLLM's engine process writes its loading messages and
warnings) goes to a log file and the screen is drawn on a copy of the terminal: otherwise those messages
would be drawn over the screen. (Branch i22-tui-engine does the same for every TUI in tui.engine_log; once
it is merged, `main` should use its `stderr_to_log` and drop `engine_output_logged`.)
"""

from __future__ import annotations

import argparse
import multiprocessing.resource_tracker
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from rich.text import Text
from textual.widgets import Static

from harness.demo import CLOSING, DemoPlan, Recap, demo_policy
from harness.events import Event, TurnEnd
from harness.interactive import SessionOptions
from tui.app import TaoApp
from tui.widgets.conversation.pane import ConversationPane

SCREENSHOT_SIZE = (150, 72)


class DemoApp(TaoApp):
    """The TUI on the demo's task, with its opening words and its closing recap in the conversation."""

    CSS = TaoApp.CSS + """
    ConversationPane .demo { border: round $accent; padding: 0 1; margin-bottom: 1; }
    ConversationPane .demo-end { border: round $success; padding: 0 1; margin: 1 0; }
    """

    def __init__(self, options: SessionOptions, plan: DemoPlan, screenshot: Path | None = None,
                 screen: TextIO | None = None) -> None:
        """`screen`: the terminal stream to draw on, when fd 2 is not the terminal (see engine_output_logged)."""
        self.screen_stream = screen  # read by get_driver_class, which App.__init__ calls
        super().__init__(options, plan.task)
        self.plan, self.screenshot = plan, screenshot
        self.recap = Recap()
        self.recapped = False

    def get_driver_class(self) -> type:
        """Textual's driver, drawing on `screen` instead of `sys.__stderr__` (fd 2, which goes to the log)."""
        driver = super().get_driver_class()
        screen = self.screen_stream
        if screen is None:
            return driver

        class ScreenDriver(driver):  # type: ignore[valid-type, misc]
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                self._file = screen  # where LinuxDriver writes the screen

        return ScreenDriver

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


@contextmanager
def engine_output_logged(path: Path) -> Iterator[TextIO]:
    """fd 2 goes to `path` (removed afterwards if empty) while the block runs; yields a stream on the terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = os.dup(2)
    log = path.open("a", buffering=1, encoding="utf-8", errors="replace")
    screen = os.fdopen(os.dup(terminal), "w", encoding="utf-8", errors="replace")
    os.dup2(log.fileno(), 2)
    try:
        yield screen
    finally:
        screen.flush()
        os.dup2(terminal, 2)
        os.close(terminal)
        screen.close()
        log.close()
        if path.stat().st_size == 0:
            path.unlink()


def main(args: argparse.Namespace, plan: DemoPlan) -> int:
    """Open the demo's TUI (off-screen with --screenshot) and say afterwards where the copy and its session are."""
    from harness.cli import state_dir

    options = SessionOptions.from_args(args, plan.repo.resolve())
    options = replace(options, approvals=demo_policy(plan.repo, args.yolo))
    started = time.monotonic()
    if args.screenshot is not None:
        args.screenshot.parent.mkdir(parents=True, exist_ok=True)
        multiprocessing.resource_tracker.ensure_running()  # see below
        app = DemoApp(options, plan, args.screenshot)
        app.run(headless=True, size=SCREENSHOT_SIZE)
        print(f"screenshot: {args.screenshot} (after {time.monotonic() - started:.0f} s)")
        return app.return_code or 0
    log = state_dir() / "logs" / f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with engine_output_logged(log) as screen:
        # Textual's stand-in for sys.stderr has no file descriptor (fileno() -1), which multiprocessing's resource
        # tracker would hand to vLLM's engine process ("bad value(s) in fds_to_keep"): start the tracker first.
        multiprocessing.resource_tracker.ensure_running()
        app = DemoApp(options, plan, screen=screen)
        app.run()
    print(f"The demo ran in {plan.repo}; its session is saved (`tao --resume` there reopens it).")
    if log.exists() and not app.recap.tests:
        print(f"The engine's own output is in {log}.")
    return app.return_code or 0
