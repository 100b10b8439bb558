"""The Tool Speculation Scheduler: run predicted calls ahead of the model, promote exact matches.

    scheduler.launch("a")            # at each moment of a step: start the candidates worth it
    obs = await scheduler.take(call)  # the model's real call: a promoted result, or None to run it
    await scheduler.close()           # end of session: everything still running is killed

Pure tools run directly against the workspace, sandboxed ones in a copy-on-write overlay at the same
path, mutating ones never. A result is keyed by the canonical call and the workspace version it ran at;
it is promoted only when the real call has the same key at the same version, after checking for
changes made behind Tao's back, and a sandboxed run's file changes are then applied to the real tree
just as the real run would have made them. Whatever the real call does not use is discarded at once.
The scheduler decides and keeps books; the tools themselves do the running.
"""

from __future__ import annotations

import asyncio
import enum
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.events import Event, SpecDiscard, SpecLaunch, SpecPromote, SpecSummary, ToolCall, ToolResult
from harness.protocol import ParsedCall
from harness.speculation.canonical import canonical
from harness.speculation.patterns import Analyzer, Candidate, Partial
from sandbox import Workspace, WorkspaceEscape
from sandbox.overlay import Overlay
from sandbox.promote import apply_changes
from tools import run_tool
from tools.base import Effect, Observation, Tool, ToolError
from tools.reading import ReadFile
from tools.textfile import TextFile, load_text


class SpecState(enum.IntEnum):
    """A speculation's lifecycle, in order; `>= PROMOTED` means it is over."""

    RUNNING = 0
    READY = 1
    PROMOTED = 2
    DISCARDED = 3


@dataclass(frozen=True)
class LastRun:
    """A call's last real run, at whatever version: the guess of its output the next time it runs."""

    tool: str
    output: str
    failed: bool
    version: int  # the workspace version after it ran

    @classmethod
    def of(cls, tool: str, result: ToolResult) -> LastRun:
        return cls(tool, result.output, result.is_error or result.exit_code not in (None, 0), result.workspace_version)

    def guess(self, tool: str, version: int) -> str | None:
        """The output, as a guess of the same call run at `version`, where it is a fair one.

        A run that failed is no guess once the tree has changed since: an edit after a failing test run is
        meant to change its output, and a wrong guess costs the engine a prefill the real step waits behind.
        """
        if tool != self.tool or (self.failed and version != self.version):
            return None
        return self.output


@dataclass(frozen=True)
class Budget:
    """How much speculative work may run at once, and what is worth starting."""

    k: int = 3
    """Candidates considered at each moment."""
    max_running: int = 4
    """Speculations running at once, all effects together."""
    max_sandboxed: int = max(1, (os.cpu_count() or 2) // 2)
    """Overlay runs (whole test suites, scripts) at once: they compete with the engine for CPU."""
    min_utility: float = 0.0
    """Expected seconds saved, net of cost, below which a candidate is not started."""
    min_probability: float = 0.05
    """Candidates less likely than this are not started however much they would save."""


@dataclass
class Speculation:
    """One speculative run and what became of it."""

    spec_id: str
    candidate: Candidate
    key: str
    version: int
    started: float
    task: asyncio.Task[Observation] | None = None
    overlay: Overlay | None = None
    file: TextFile | None = None  # a speculated whole-file read keeps the file to serve ranges from
    state: SpecState = SpecState.RUNNING
    finished: float | None = None


@dataclass
class KindStats:
    """Hits and waste of one kind of call in this session, for adaptive control."""

    launched: int = 0
    promoted: int = 0
    saved: float = 0.0
    wasted: float = 0.0
    paused_until: int = 0  # step number until which this kind is not speculated

    def to_dict(self) -> dict[str, float]:
        return {"launched": self.launched, "promoted": self.promoted, "saved": round(self.saved, 3),
                "wasted": round(self.wasted, 3)}


BOOST_EVERY = 0.25  # seconds between boosts of a speculation the real call waits on
PAUSE_AFTER = 6  # launches of a kind before its hits are judged
PAUSE_STEPS = 5  # steps a kind that does not pay stays paused before it is tried again


def _cost(spec: Speculation) -> float:
    """What a speculation has used: the CPU seconds of an overlay run (a niced run the engine starves costs
    next to nothing, however long it waited), the seconds a pure one ran (brief, and not niced)."""
    cpu = spec.overlay.cpu_seconds() if spec.overlay is not None else None
    return cpu if cpu is not None else (spec.finished or time.monotonic()) - spec.started


def _retrieve(task: asyncio.Task[Observation]) -> None:
    """Mark a speculation's exception as seen: a failed guess is not an error worth a warning."""
    if not task.cancelled():
        task.exception()


class SpeculationScheduler:
    """Launches the analyzer's candidates under a budget and promotes or discards them."""

    def __init__(self, workspace: Workspace, tools: dict[str, Tool], analyzer: Analyzer,
                 emit: Callable[[Event], None], now: Callable[[], float], budget: Budget = Budget()) -> None:
        self.workspace, self.tools, self.analyzer = workspace, tools, analyzer
        self.emit, self.now, self.budget = emit, now, budget
        self.specs: dict[str, Speculation] = {}  # live speculations by canonical key
        self.kinds: dict[str, KindStats] = {}
        self.step = 0
        self._count = 0
        self._reapers: set[asyncio.Task[None]] = set()
        self._calls: dict[str, tuple[ToolCall, int]] = {}  # calls waiting for their result, and their version
        self._seen: dict[str, tuple[int, Observation]] = {}  # key -> (version, observation) of real runs
        self._last: dict[str, LastRun] = {}  # key -> its last real run, any version
        self._totals = {"launched": 0, "promoted": 0, "discarded": 0, "repeats": 0, "saved": 0.0, "wasted": 0.0}

    def observe(self, event: Event) -> None:
        """Feed every session event to the analyzer (online learning) and remember observations."""
        if event.type.startswith("spec_"):
            return
        self.analyzer.observe(event)
        if isinstance(event, ToolCall):
            self._calls[event.call_id] = (event, self.workspace.version)
        elif isinstance(event, ToolResult) and (pending := self._calls.pop(event.call_id, None)) is not None:
            call, version = pending
            tool = self.tools.get(call.name)
            if tool is None or tool.effect is Effect.MUTATING:
                return
            key = canonical(call.name, call.arguments, str(self.workspace.root)).key
            self._last[key] = LastRun.of(call.name, event)
            # A call that changed the tree (a test writing a report) may answer differently when repeated.
            if version == event.workspace_version:
                observation = Observation(event.output, event.is_error, event.exit_code, event.truncated_chars)
                self._seen[key] = (event.workspace_version, observation)

    # -- launching -----------------------------------------------------------------------------------

    def launch(self, moment: str, step: int, partial: Partial | None = None) -> list[Speculation]:
        """Start the candidates worth it at this moment of `step`; returns the ones started."""
        self.step = step
        version = self.workspace.refresh()
        self._drop_stale(version)
        started = []
        for candidate in self.analyzer.predict(moment, partial, k=self.budget.k):
            if partial is not None and partial.name and candidate.name != partial.name:
                continue  # the call has begun as another tool: this one can never be it (see narrow)
            if self._admit(candidate, version):
                started.append(self._start(candidate, moment, version))
        return started

    def _admit(self, candidate: Candidate, version: int) -> bool:
        tool = self.tools.get(candidate.name)
        if tool is None or tool.effect is Effect.MUTATING or candidate.name == "finish":
            return False
        if candidate.key in self.specs or self._repeat(candidate.key, version) is not None:
            return False  # already running, or its result at this version is already known
        if candidate.utility <= self.budget.min_utility or candidate.probability < self.budget.min_probability:
            return False
        if self.kinds.get(candidate.kind, KindStats()).paused_until > self.step:
            return False
        running = [s for s in self.specs.values() if s.state is SpecState.RUNNING]
        if len(running) >= self.budget.max_running:
            return False
        sandboxed = sum(1 for s in running if self.tools[s.candidate.name].effect is Effect.SANDBOXED)
        return tool.effect is not Effect.SANDBOXED or sandboxed < self.budget.max_sandboxed

    def last_output(self, call: ParsedCall) -> str | None:
        """What the same call printed when it last really ran: a guess of its output, where it is a fair one."""
        last = self._last.get(canonical(call.name, call.arguments, str(self.workspace.root)).key)
        return last.guess(call.name, self.workspace.version) if last is not None else None

    def _repeat(self, key: str, version: int) -> Observation | None:
        """The observation a real run of the same call produced at this same version, if there was one."""
        seen = self._seen.get(key)
        return seen[1] if seen is not None and seen[0] == version else None

    def _start(self, candidate: Candidate, moment: str, version: int) -> Speculation:
        self._count += 1
        spec = Speculation(f"s{self._count}", candidate, candidate.key, version, time.monotonic())
        self.specs[spec.key] = spec
        spec.task = asyncio.create_task(self._run(spec))
        spec.task.add_done_callback(_retrieve)
        self.kinds.setdefault(candidate.kind, KindStats()).launched += 1
        self._totals["launched"] += 1
        self.emit(SpecLaunch(self.now(), self.step, spec.spec_id, moment, candidate.name, candidate.arguments,
                             self.tools[candidate.name].effect.value, version, candidate.reason,
                             round(candidate.probability, 4)))
        return spec

    async def _run(self, spec: Speculation) -> Observation:
        tool = self.tools[spec.candidate.name]
        args = spec.candidate.arguments
        try:
            if isinstance(tool, ReadFile) and set(args) == {"path"}:
                try:
                    spec.file = await asyncio.to_thread(load_text, self.workspace, args["path"])
                except (ToolError, WorkspaceEscape, OSError):
                    return await run_tool(tool, args, self.workspace)  # the same error observation
                return tool.render(spec.file, args)
            if tool.effect is Effect.SANDBOXED:
                spec.overlay = Overlay(self.workspace)
                return await run_tool(tool, args, spec.overlay)
            return await run_tool(tool, args, self.workspace)
        finally:
            spec.finished = time.monotonic()
            if spec.state is SpecState.RUNNING:
                spec.state = SpecState.READY

    # -- the real call -------------------------------------------------------------------------------

    async def take(self, call: ParsedCall) -> Observation | None:
        """The observation of `call` if a speculation has it at the current version; None to run it.

        Every other speculation is discarded and its processes killed, whatever the outcome.
        """
        arrived = time.monotonic()
        version = self.workspace.refresh()
        self._drop_stale(version)
        action = canonical(call.name, call.arguments, str(self.workspace.root))
        if action.tool != call.name:
            # A bash command that amounts to a structured call (`cat f` is read_file(f)) shares its key but
            # prints what bash prints, not what that tool renders: nothing speculated can stand for it.
            self.discard_all("not the model's call")
            return None
        key = action.key
        if (repeat := self._repeat(key, version)) is not None:
            self.discard_all("not the model's call")
            self._totals["repeats"] += 1
            self.emit(SpecPromote(self.now(), self.step, "repeat", call.call_id, 0.0, 0.0))
            return repeat
        spec = self.specs.get(key)
        observation, sliced = None, False
        if spec is not None:
            observation = await self._result(spec, version)
        else:
            spec, observation = self._slice(call, version)
            sliced = observation is not None
        for other in list(self.specs.values()):
            if other is not spec or observation is None:
                self._discard(other, "not the model's call" if other is not spec else "its run failed or went stale")
        if spec is not None and observation is not None:
            self._promote(spec, call, arrived, sliced)
        return observation

    async def _result(self, spec: Speculation, version: int) -> Observation | None:
        """A speculation's observation if it completed cleanly and the tree is still at its version."""
        assert spec.task is not None
        # The real call now waits on it: it is authoritative work from here on. Boosted again while it
        # runs, since a process still setting up applies its nice after a first boost.
        while spec.overlay is not None and not spec.task.done():
            spec.overlay.boost()
            await asyncio.wait({spec.task}, timeout=BOOST_EVERY)
        try:
            observation = await asyncio.shield(spec.task)
        except Exception:  # noqa: BLE001 - a failed speculation is simply not used
            return None
        if self.workspace.refresh() != version:
            return None
        if spec.overlay is not None:
            changes = await asyncio.to_thread(spec.overlay.changes)
            if any(c.type not in ("file", "dir", "symlink") for c in changes):
                return None  # a device, fifo or socket cannot be carried over: run the call for real
            await asyncio.to_thread(apply_changes, self.workspace.root, changes)
        return observation

    def _slice(self, call: ParsedCall, version: int) -> tuple[Speculation | None, Observation | None]:
        """A line range of a file whose whole read was speculated at this version, served from it."""
        if call.name != "read_file":
            return None, None
        whole = canonical("read_file", {"path": call.arguments.get("path")}, str(self.workspace.root)).key
        spec = self.specs.get(whole)
        if spec is None or spec.state is not SpecState.READY or spec.file is None or spec.version != version:
            return None, None
        return spec, self.tools["read_file"].render(spec.file, call.arguments)  # type: ignore[attr-defined]

    def _promote(self, spec: Speculation, call: ParsedCall, arrived: float, sliced: bool) -> None:
        finished = spec.finished or time.monotonic()
        saved = max(0.0, min(finished, arrived) - spec.started)
        waited = max(0.0, finished - arrived)
        spec.state = SpecState.PROMOTED
        self.specs.pop(spec.key, None)
        stats = self.kinds.setdefault(spec.candidate.kind, KindStats())
        stats.promoted += 1
        stats.saved += saved
        self._totals["promoted"] += 1
        self._totals["saved"] += saved
        self.emit(SpecPromote(self.now(), self.step, spec.spec_id, call.call_id, round(saved, 6), round(waited, 6),
                              sliced))
        self._reap(spec)

    # -- discarding ----------------------------------------------------------------------------------

    def _drop_stale(self, version: int) -> None:
        for spec in list(self.specs.values()):
            if spec.version != version:
                self._discard(spec, f"the workspace changed (version {spec.version} -> {version})")

    def narrow(self, name: str) -> None:
        """The model has begun a call to `name`: a speculation of another tool cannot be it, so free its place."""
        for spec in list(self.specs.values()):
            if spec.candidate.name != name:
                self._discard(spec, f"the model is calling {name}")

    def discard_all(self, reason: str) -> None:
        """Throw away every live speculation (the workspace is about to change, or the session ends)."""
        for spec in list(self.specs.values()):
            self._discard(spec, reason)

    def _discard(self, spec: Speculation, reason: str) -> None:
        if spec.state >= SpecState.PROMOTED:
            return
        cost = _cost(spec)  # read before the kill
        spec.state = SpecState.DISCARDED
        self.specs.pop(spec.key, None)
        if spec.task is not None and not spec.task.done():
            spec.task.cancel()  # kills the whole process group of an overlay run at once
        stats = self.kinds.setdefault(spec.candidate.kind, KindStats())
        stats.wasted += cost
        self._judge(spec.candidate.kind, stats)
        self._totals["discarded"] += 1
        self._totals["wasted"] += cost
        self.emit(SpecDiscard(self.now(), self.step, spec.spec_id, reason, round(cost, 6)))
        self._reap(spec)

    def _judge(self, kind: str, stats: KindStats) -> None:
        """Pause a kind whose hidden time no longer pays for the work wasted on it."""
        if stats.launched >= PAUSE_AFTER and stats.saved < stats.wasted:
            stats.paused_until = self.step + PAUSE_STEPS
            stats.launched, stats.promoted, stats.saved, stats.wasted = 0, 0, stats.saved / 2, stats.wasted / 2

    def _reap(self, spec: Speculation) -> None:
        """Release a finished speculation's overlay in the background (the real call is not kept waiting)."""
        if spec.overlay is None and (spec.task is None or spec.task.done()):
            return

        async def reap() -> None:
            if spec.task is not None:
                await asyncio.gather(spec.task, return_exceptions=True)
            if spec.overlay is not None:
                await spec.overlay.discard()

        task = asyncio.create_task(reap())
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)

    async def close(self) -> None:
        """Kill what still runs, wait for every overlay to be removed, and report the totals."""
        self.discard_all("the session ended")
        if self._reapers:
            await asyncio.gather(*self._reapers, return_exceptions=True)
        totals: dict[str, Any] = dict(self._totals)
        self.emit(SpecSummary(self.now(), totals["launched"], totals["promoted"], totals["discarded"],
                              totals["repeats"], round(totals["saved"], 6), round(totals["wasted"], 6),
                              {kind: stats.to_dict() for kind, stats in sorted(self.kinds.items())}))
