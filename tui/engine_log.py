"""While the TUI draws on the terminal, the engine's stderr (fd 2, and sys.stderr) goes to a log file.

Textual draws on `sys.__stderr__` and replaces `sys.stderr` with an object whose `fileno()` is -1. A
process started under it either fails on that fd (multiprocessing's resource tracker, which vLLM's
engine core needs: "bad value(s) in fds_to_keep") or inherits the terminal as its stderr and draws its
warnings over the screen. So the screen gets its own copy of the terminal, and fd 2, which every child
process inherits, points at the log while the app runs; errors name the log.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True)
class EngineLog:
    """The log that stands in for stderr, and a stream on the terminal for the screen."""

    path: Path
    file: TextIO
    screen: io.TextIOWrapper  # what LinuxDriver writes to


def log_path(state: Path) -> Path:
    """A new log file for this run under Tao's state folder."""
    return state / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


@contextmanager
def stderr_to_log(path: Path) -> Iterator[EngineLog]:
    """fd 2 points at `path` for the duration (an empty log is removed afterwards); yields the screen's stream."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    terminal = os.dup(2)
    file = path.open("a", buffering=1, encoding="utf-8", errors="replace")
    screen = os.fdopen(os.dup(terminal), "w", encoding=sys.__stderr__.encoding if sys.__stderr__ else "utf-8",
                       errors="replace")
    os.dup2(file.fileno(), 2)
    try:
        yield EngineLog(path, file, screen)
    finally:
        screen.flush()
        file.flush()
        os.dup2(terminal, 2)
        os.close(terminal)
        screen.close()
        file.close()
        if path.stat().st_size == 0:
            path.unlink()


def screen_driver(screen: io.TextIOWrapper) -> type:
    """Textual's Linux driver, drawing on `screen` instead of `sys.__stderr__` (which now writes to the log)."""
    from textual.drivers.linux_driver import LinuxDriver

    class ScreenDriver(LinuxDriver):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._file = screen  # the one place LinuxDriver takes its output stream from

    return ScreenDriver
