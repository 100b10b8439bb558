"""A session's hints to its engine: when a tool starts, and how long it should take, so that a co-scheduler on
`tao serve` can decide whether holding the session's place (and its cached prefix) is worth more than
admitting another session.

    hints = ToolHints(engine, root)                 # engines without `tool_started` get no hints
    with hints.running(call.name, call.arguments):  # the hint goes out; the tool does not wait for it
        observation = await run_tool(...)

The expected duration is the time the same call took last in this session, else the latency model's figure
for its kind (harness.speculation.prediction.latency). Hints are fire-and-forget: a slow or failed delivery
never delays or breaks the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from harness.calls.canonical import canonical
from harness.speculation.prediction.latency import modelled_latency

_log = logging.getLogger(__name__)


class ToolHints:
    """Sends an engine's `tool_started(expected)` as each tool starts, and learns how long calls take."""

    def __init__(self, engine: object, root: str) -> None:
        send = getattr(engine, "tool_started", None)
        self._send: Callable[[float | None], Awaitable[None]] | None = send if callable(send) else None
        self._root = root
        self._took: dict[str, float] = {}  # an action's key -> seconds its last real run took
        self._pending: set[asyncio.Task[None]] = set()

    def expected(self, name: str, arguments: dict[str, Any]) -> float | None:
        """Seconds the call should take: its last run's time in this session, else its kind's modelled latency."""
        try:
            action = canonical(name, arguments, self._root)
        except Exception:  # noqa: BLE001 - an estimate is optional; a call the model mangled gets none
            return None
        return modelled_latency(action, self._took.get(action.key, 0.0))

    @contextlib.contextmanager
    def running(self, name: str, arguments: dict[str, Any]) -> Iterator[None]:
        """Around a tool's real run: hint that it starts, then remember how long it took."""
        self.started(self.expected(name, arguments))
        started = time.monotonic()
        yield
        with contextlib.suppress(Exception):
            self._took[canonical(name, arguments, self._root).key] = time.monotonic() - started

    def started(self, expected: float | None) -> None:
        """Send the hint in the background (kept referenced until it is delivered or fails)."""
        if self._send is None:
            return
        task = asyncio.get_running_loop().create_task(self._deliver(self._send, expected))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    @staticmethod
    async def _deliver(send: Callable[[float | None], Awaitable[None]], expected: float | None) -> None:
        try:
            await send(expected)
        except Exception as exc:  # noqa: BLE001 - a hint that cannot be delivered is only a hint
            _log.debug("a tool-start hint was not delivered: %s: %s", type(exc).__name__, exc)
