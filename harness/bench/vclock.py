"""An asyncio event loop on a virtual clock: when nothing is ready to run, time jumps to the next timer.

    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        runner.run(main())      # asyncio.sleep(60) returns at once; loop.time() says 60 s later

Everything that waits through the loop's timers (asyncio.sleep, timeouts, call_later) runs in virtual
time, so a simulated engine and simulated tools finish hours of traffic in seconds. Work done in
threads (asyncio.to_thread) and by processes (asyncio.create_subprocess_exec) is waited for in real
time with the clock stopped: it takes no virtual time, and no timeout jumps past it. CPU time spent in
callbacks takes no virtual time either.
"""

from __future__ import annotations

import asyncio
import selectors
import weakref
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

REAL_WAIT = 0.05  # seconds of real time to wait at once for a thread or an outside wake-up


class _Selector(selectors.DefaultSelector):
    """Never sleeps on a timer: advances the loop's clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events or timeout == 0 or self.loop is None:
            return events
        if self.loop.threads or self.loop.running_processes() or timeout is None:  # real work, or nothing scheduled
            return super().select(REAL_WAIT if timeout is None else min(timeout, REAL_WAIT))
        self.loop.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` is virtual (see the module docstring)."""

    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0
        # The loop runs a timer once the clock is within this of it; the monotonic clock's 1 ns is below a
        # float's resolution past 2**24 s of virtual time, where a due timer would then never run.
        self._clock_resolution = 1e-6
        self.threads = 0  # executor jobs in flight
        self.processes: weakref.WeakSet[asyncio.SubprocessTransport] = weakref.WeakSet()

    def time(self) -> float:
        return self.now

    def run_in_executor(self, executor: Executor | None, func: Callable[[*_Ts], _T], *args: *_Ts) -> asyncio.Future[_T]:
        future = super().run_in_executor(executor, func, *args)
        self.threads += 1
        future.add_done_callback(self._thread_done)
        return future

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        """As asyncio's, and the process counts as real work until it exits."""
        transport, protocol = await super().subprocess_exec(*args, **kwargs)
        self.processes.add(transport)
        return transport, protocol

    async def subprocess_shell(self, *args: Any, **kwargs: Any) -> Any:
        """As asyncio's, and the process counts as real work until it exits."""
        transport, protocol = await super().subprocess_shell(*args, **kwargs)
        self.processes.add(transport)
        return transport, protocol

    def running_processes(self) -> bool:
        """Whether a process started through this loop has not exited yet."""
        return any(transport.get_returncode() is None for transport in self.processes)

    def _thread_done(self, _: asyncio.Future[Any]) -> None:
        self.threads -= 1
