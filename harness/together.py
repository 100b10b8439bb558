"""Which calls of one model turn run side by side: consecutive pure calls together, every other call alone.

A pure call only reads the workspace, so pure calls written next to each other may run at once and each
sees what it would have seen alone. A call that may write (a mutating edit or shell command, a sandboxed
test run that may leave files), `finish`, a call of an unknown tool or a malformed call stays where the
model wrote it: it runs alone, after every call written before it and before every call written after it.
So a batch of reads then an edit runs the reads at once, then the edit; and a read the model wrote after an
edit reads the edited file, as it would one call at a time. The session answers the calls in the model's
order whatever order their runs end in (harness.session), so the transcript reads the same either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from harness.protocol import ParsedCall
from tools.base import Effect

T = TypeVar("T")
Entry = tuple[ParsedCall, str | None]  # a call of the turn, with the error a malformed native call gets instead


def groups(calls: Sequence[Entry], effect_of: Callable[[str], Effect]) -> list[list[Entry]]:
    """The turn's calls cut into the groups they run in, in the model's order (see the module docstring)."""
    out: list[list[Entry]] = []
    for entry in calls:
        if side_by_side(entry, effect_of) and out and all(side_by_side(e, effect_of) for e in out[-1]):
            out[-1].append(entry)
        else:
            out.append([entry])
    return out


def side_by_side(entry: Entry, effect_of: Callable[[str], Effect]) -> bool:
    """Whether a call may run at the same time as its pure neighbours: a pure tool's call other than `finish`,
    or a malformed call, which runs nothing (it is only answered with its error)."""
    call, error = entry
    return error is not None or (call.name != "finish" and effect_of(call.name) is Effect.PURE)


async def all_at_once(runs: Sequence[Awaitable[T]]) -> list[T]:
    """Await every run at the same time; their results in the order given. If one fails or the caller is
    cancelled, the others are cancelled and awaited before this returns (no run outlives its turn)."""
    if len(runs) == 1:
        return [await runs[0]]
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
