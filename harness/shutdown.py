"""SIGTERM ends Tao the way Ctrl-C does, so that `finally` blocks run and the engine shuts down; and a command
that loaded vLLM exits as soon as its work is done.

Python's default for SIGTERM is to die on the spot: no `finally`, no `engine.close()`, and vLLM's
engine-core process (a child that does not watch its parent) lives on with its memory and CPU. A
`kill`, a CI timeout or `timeout(1)` sends SIGTERM, so every entry point calls this first.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable

_heavy = False


def loaded_heavy_libraries() -> None:
    """Note that this process loaded vLLM and torch (an in-process engine started): see `exits_at_once`."""
    global _heavy
    _heavy = True


def exits_at_once(main: Callable[..., int]) -> Callable[..., int]:
    """`main`, but once it has returned in a process that loaded vLLM, the process ends there with its exit code.

    Its work is done by then (the engine shut down, the trajectory closed); what Python would do next is tear down
    vLLM, torch and transformers object by object, 3-4 s on two cores, to free memory the process gives back
    anyway. Only the `tao` command itself, which calls `main()` with no arguments, exits so: a caller that passes
    its own argv (a test in a pytest process whose engine fixture loaded vLLM) gets the code back as usual."""

    @functools.wraps(main)
    def wrapper(*args: object, **kwargs: object) -> int:
        code = main(*args, **kwargs)
        if _heavy and not args and not kwargs:
            for child in multiprocessing.active_children():
                child.kill()  # an engine core still starting when the user interrupted: Python's exit would stop it
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass  # a closed pipe: nothing more can be said there
            os._exit(code)
        return code

    return wrapper


def terminate_as_interrupt() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread, as SIGINT does (a no-op off the main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
