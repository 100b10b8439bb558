"""SIGTERM ends Tao the way Ctrl-C does, so that `finally` blocks run and the engine shuts down.

Python's default for SIGTERM is to die on the spot: no `finally`, no `engine.close()`, and vLLM's
engine-core process (a child that does not watch its parent) lives on with its memory and CPU. A
`kill`, a CI timeout or `timeout(1)` sends SIGTERM, so every entry point calls this first.
"""

from __future__ import annotations

import signal
import threading


def terminate_as_interrupt() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread, as SIGINT does (a no-op off the main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
