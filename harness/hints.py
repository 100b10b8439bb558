"""A session's hints to its engine: when a tool starts, and how long it should take, so that a co-scheduler on
`tao serve` can decide whether holding the session's place (and its cached prefix) is worth more than
admitting another session.

    hints = ToolHints(engine, root)                      # engines without `tool_started` get no hints
    hints.started(call.name, call.arguments, head_start)  # the hint goes out; the tool does not wait for it
    observation = await run_tool(...)
    hints.ran(call.name, call.arguments, seconds)        # the next estimate of this call

Calls of one turn that run side by side (harness.together) form a group (`hints.group(True)` before it):
each hint of a group says when the last of its calls should end, since the session is back only then.

The expected duration is the time the same call took last in this session, else the latency model's figure
for its kind (harness.speculation.prediction.latency), less the head start a speculation of the call already
has. Hints are fire-and-forget: a slow or failed delivery never delays or breaks the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
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
        self._together = False  # the calls starting now run side by side
        self._until = 0.0  # monotonic time the group's calls started so far should all have ended

    def expected(self, name: str, arguments: dict[str, Any]) -> float | None:
        """Seconds the call should take: its last run's time in this session, else its kind's modelled latency."""
        try:
            action = canonical(name, arguments, self._root)
        except Exception:  # noqa: BLE001 - an estimate is optional; a call the model mangled gets none
            return None
        return modelled_latency(action, self._took.get(action.key, 0.0))

    def group(self, side_by_side: bool) -> None:
        """A group of calls begins: one call alone, or (`side_by_side`) several running at once."""
        self._together, self._until = side_by_side, 0.0

    def started(self, name: str, arguments: dict[str, Any], head_start: float | None = None) -> None:
        """The call starts now (`head_start`: seconds a speculation of it already ran): send the hint in the
        background, kept referenced until it is delivered or fails. Within a group, the hint is the time until
        the slowest call started so far should end."""
        if self._send is None:
            return
        expected = self.expected(name, arguments)
        if expected is not None and head_start is not None:
            expected = max(0.0, expected - head_start)
        if expected is not None and self._together:
            now = time.monotonic()
            self._until = max(self._until, now + expected)
            expected = self._until - now
        task = asyncio.get_running_loop().create_task(self._deliver(self._send, expected))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def ran(self, name: str, arguments: dict[str, Any], seconds: float) -> None:
        """The call's real run took `seconds`: its next estimate."""
        with contextlib.suppress(Exception):  # as in `expected`: a mangled call is not learned from
            self._took[canonical(name, arguments, self._root).key] = seconds

    @staticmethod
    async def _deliver(send: Callable[[float | None], Awaitable[None]], expected: float | None) -> None:
        try:
            await send(expected)
        except Exception as exc:  # noqa: BLE001 - a hint that cannot be delivered is only a hint
            _log.debug("a tool-start hint was not delivered: %s: %s", type(exc).__name__, exc)
