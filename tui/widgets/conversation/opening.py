"""The opening panel at the top of the conversation: where Tao is, which model, the engine's state, how to start.

It is drawn at launch, before any engine is loaded, and follows the engine from loading to ready (or
failed, with why); a task typed while the engine loads is said to wait for it.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.widgets import Static

MODE_WORDS = {"read-only": "read-only: nothing is edited or run that could change the workspace",
              "ask": "ask: edits and commands that may change the workspace ask you first",
              "auto-edit": "auto-edit: edits run, commands that may change the workspace ask first",
              "full-auto": "full-auto: edits and commands run without asking",
              "yolo": "full-auto (--yolo): edits and commands run without asking"}


def git_branch(repo: Path) -> str | None:
    """The repository's current branch (or `detached at <commit>`); None outside a git repository."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    branch = out.stdout.strip()
    if out.returncode != 0 or not branch:
        return None
    if branch == "HEAD":
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip()
        return f"detached at {commit}"
    return branch


@dataclass
class Opening:
    """What the panel shows; `engine` is `loading`, `ready` or `failed`."""

    repo: str
    branch: str | None
    model: str
    mode: str
    engine: str = "loading"
    seconds: float | None = None  # how long loading took (ready) or has taken so far (loading)
    reason: str = ""  # why it failed
    waiting: str = ""  # a task typed while the engine loads, to start once it is ready


class OpeningPanel(Static):
    """The panel; `show` redraws it from its `Opening`."""

    DEFAULT_CSS = """
    OpeningPanel { border: round $primary-darken-2; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, opening: Opening, masked: bool = False) -> None:
        """`masked` draws no durations (for snapshot tests)."""
        super().__init__(id="opening")
        self.opening, self.masked = opening, masked
        self.update(self.text())

    def show(self) -> None:
        self.update(self.text())

    def text(self) -> Text:
        o = self.opening
        seconds = "" if o.seconds is None or self.masked else f" {o.seconds:.0f} s"
        state = {"loading": (f"loading…{seconds}", "yellow"), "ready": (f"ready{' in' + seconds if seconds else ''}",
                                                                         "green"),
                 "failed": (f"failed: {o.reason}", "red")}[o.engine]
        text = Text.assemble(("Tao", "bold"), " in ", (o.repo, "bold"),
                             f"  (git branch {o.branch})" if o.branch else "  (not a git repository)", "\n")
        for label, value, style in (("model   ", o.model, ""), ("engine  ", state[0], state[1]),
                                    ("approve ", MODE_WORDS.get(o.mode, o.mode), "")):
            text.append(label, style="dim")
            text.append(value + "\n", style=style)
        if o.waiting and o.engine == "loading":
            text.append("Your task waits for the engine and starts as soon as it is ready.\n", style="italic")
        elif o.engine == "failed":
            text.append("Press Enter to try loading the engine again, or Ctrl+Q to quit.\n", style="italic")
        text.append("Type a task below and press Enter.  F1 (or ? in the empty box) shows the keys; Ctrl+Q quits.",
                    style="dim")
        return text
