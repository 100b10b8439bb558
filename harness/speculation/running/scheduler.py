"""The Tool Speculation Scheduler: run predicted calls ahead of the model, promote exact matches.

    scheduler.launch(Moment.A)       # at each moment of a step: start the candidates worth it
    obs = await scheduler.take(call)  # the model's real call: a promoted result, or None to run it
    await scheduler.close()           # end of session: everything still running is killed

Pure tools run directly against the workspace, sandboxed ones in a copy-on-write overlay at the same
path, mutating ones never. Canonical keys (normalised spellings) serve prediction only; promotion goes by
the real call itself. Its arguments are first checked with the tool's own schema: an invalid call is never
answered here (run for real, it gets the tool's own error). A speculation is promoted only when the real
call's arguments are exactly the speculated ones (JSON-equal, nulls dropped) at the same workspace version,
after checking for changes made behind Tao's back; a line range of a speculated whole-file read is rendered
by the tool itself from the file it read. A sandboxed run is promoted only if nothing suggests it saw
another world than a real run would (its overlay's taints, hard-linked files): its file changes are then
applied to the real tree just as the real run would have made them. The repeat cache answers a call again
only for pure tools, whose output is a function of the workspace. What the real call does not use is
discarded at once when that call may change the tree (an edit, a shell command, a call no tool accepts); after
a read or a sandboxed run it is kept, still running, for a later call of the model (the newest
`budget.max_running` of them), since at the same workspace version its result is as valid then as now; a
change of the tree discards it. A file edit the model has streamed in full may be applied in an overlay for the call
predicted after it (`chain`). The scheduler decides and keeps books; the tools themselves do the running.

Where the rest lives, in running/: the rule of chains in chain.py; the launches of calls the model has
written out (chains among them) in written.py; the take side of chains (their edit taken, then landed) in
landing.py; the records (a speculation, the budget, each kind's hits and waste) in records.py; a call's
last real run, the guess of its next output, in last_run.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from harness.events import Event, SpecDiscard, SpecLaunch, SpecPromote, SpecSummary, ToolCall, ToolResult
from harness.protocol import ParsedCall
from harness.calls.canonical import canonical
from harness.speculation.prediction.patterns import Analyzer, Candidate, Partial
from harness.speculation.running import chain, landing, records, written
from harness.speculation.running.chain import Edit
from harness.speculation.running.last_run import LastRun
from harness.speculation.running.promotion import Rendered, exact_call, kept_file, validated, vet, whole_read
from harness.speculation.running.records import Budget, KindStats, Speculation
from harness.vocabulary import DiscardReason, Moment, SpecState
from sandbox import Workspace
from sandbox.overlay import Overlay
from sandbox.promote import PromotionRefused, apply_changes
from tools import run_tool
from tools.base import Effect, Observation, Tool
from tools.reading import ReadFile

_log = logging.getLogger(__name__)


class Unconfined(RuntimeError):
    """The sandbox cannot keep a speculative run off the real system on this machine."""


BOOST_EVERY = 0.25  # seconds between boosts of a speculation the real call waits on
PAUSE_AFTER = 6  # launches of a kind before its hits are judged
PAUSE_STEPS = 5  # steps a kind that does not pay stays paused before it is tried again


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
        self._seen: dict[str, tuple[int, Observation]] = {}  # exact call -> (version, observation) of pure runs
        self._last: dict[str, LastRun] = {}  # canonical key -> its last real run, any version
        self.unconfined: str | None = None  # why sandboxed calls are never run ahead here, once found out
        self._expected: set[str] = set()  # exact calls of the model's turn not yet taken: their speculations stay
        self.edit_streamed = False  # the answer holds a complete mutating call: nothing more runs at this version
        self._totals = {"launched": 0, "promoted": 0, "discarded": 0, "tainted": 0, "repeats": 0, "saved": 0.0,
                        "wasted": 0.0}

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
            if (key := self.key_of(call.name, call.arguments)) is not None:
                self._last[key] = LastRun.of(call.name, event)
            # Only a pure tool's output is a function of the workspace: a test run may print the time, and
            # a call that changed the tree (a test writing a report) may answer differently when repeated.
            args = validated(tool, call.arguments)
            if (tool.effect is Effect.PURE and args is not None and version == event.workspace_version
                    and not event.is_error):  # an error may be a timeout; a real run gets it again quickly
                observation = Observation(event.output, event.is_error, event.exit_code, event.truncated_chars)
                self._seen[exact_call(call.name, args)] = (event.workspace_version, observation)

    def key_of(self, name: str, arguments: Any) -> str | None:
        """The canonical key of a call (for predictions and guesses only), None if it has none."""
        try:
            return canonical(name, arguments, str(self.workspace.root)).key
        except Exception:  # an odd call simply has no guess
            return None

    # -- launching -----------------------------------------------------------------------------------

    def launch(self, moment: Moment, step: int, partial: Partial | None = None) -> list[Speculation]:
        """Start the candidates worth it at this moment of `step`; returns the ones started."""
        self.step = step
        if moment is Moment.A:
            self.edit_streamed = False
        version = self.workspace.refresh()
        self.drop_stale(version)
        started: list[Speculation] = []
        if self.edit_streamed:
            return started  # whatever would start now runs at a version the edit ends
        for candidate in self.analyzer.predict(moment, partial, k=self.budget.k):
            if partial is not None and partial.name and candidate.name != partial.name:
                continue  # the call has begun as another tool: this one can never be it (see narrow)
            if self.admit(candidate, version):
                started.append(self.start(candidate, moment, version))
        return started

    def admit(self, candidate: Candidate, version: int) -> bool:
        """Whether a candidate may start now: runnable ahead of the model, new, likely, paid for, in budget."""
        tool = self.tools.get(candidate.name)
        if tool is None or tool.effect is Effect.MUTATING or candidate.name == "finish":
            return False
        try:
            exact = exact_call(candidate.name, candidate.arguments)
        except Exception:  # not JSON: no real call could ever equal it
            return False
        if candidate.key in self.specs or self.repeat(exact, version) is not None:
            return False  # already running, or its result at this version is already known
        if candidate.utility <= self.budget.min_utility or candidate.probability < self.budget.min_probability:
            return False
        if self.kinds.get(candidate.kind, KindStats()).paused_until > self.step:
            return False
        # Kept pure reads of earlier steps are brief and light: they hold no place; overlay runs always do.
        running = [s for s in self.specs.values() if s.state is SpecState.RUNNING
                   and (s.step == self.step or self.tools[s.candidate.name].effect is Effect.SANDBOXED)]
        if len(running) >= self.budget.max_running:
            return False
        return tool.effect is not Effect.SANDBOXED or self.overlay_free()

    def overlay_free(self) -> bool:
        """Whether a sandboxed run may start now: the sandbox confines here and an overlay place is free."""
        running = [s for s in self.specs.values() if s.state is SpecState.RUNNING]
        sandboxed = sum(1 for s in running if self.tools[s.candidate.name].effect is Effect.SANDBOXED)
        return self.unconfined is None and sandboxed < self.budget.max_sandboxed

    def start_streamed(self, call: ParsedCall, step: int) -> Speculation | None:
        """Start a call the model has written out in full while its answer goes on (running/written.py)."""
        return written.start_streamed(self, call, step)

    def last_output(self, call: ParsedCall) -> str | None:
        """What the same call printed when it last really ran: a guess of its output, where it is a fair one."""
        key = self.key_of(call.name, call.arguments)
        last = self._last.get(key) if key is not None else None
        return last.guess(call.name, self.workspace.version) if last is not None else None

    def repeat(self, exact: str, version: int) -> Observation | None:
        """The observation a real run of the same pure call produced at this same version, if there was one."""
        seen = self._seen.get(exact)
        return seen[1] if seen is not None and seen[0] == version else None

    def start(self, candidate: Candidate, moment: Moment, version: int, after: Edit | None = None) -> Speculation:
        """Start one candidate's run (after an edit applied in its overlay, for a chain) and say so."""
        self._count += 1
        spec = Speculation(f"s{self._count}", candidate, candidate.key,
                           exact_call(candidate.name, candidate.arguments), version, time.monotonic(), after=after,
                           step=self.step)
        self.specs[spec.key] = spec
        spec.task = asyncio.create_task(self._run(spec))
        spec.task.add_done_callback(_retrieve)
        self.kinds.setdefault(candidate.kind, KindStats()).launched += 1
        self._totals["launched"] += 1
        self.emit(SpecLaunch(self.now(), self.step, spec.spec_id, moment, candidate.name, candidate.arguments,
                             self.tools[candidate.name].effect.value, version, candidate.reason,
                             round(candidate.probability, 4),
                             None if after is None else {"name": after.name, "arguments": after.arguments}))
        return spec

    def chain(self, call: ParsedCall, step: int, before: list[ParsedCall], follow: bool = True) -> Speculation | None:
        """Start the call predicted after a file edit the model has streamed in full, in an overlay that holds the
        edit; speculations no call before the edit can use are discarded (running/written.py)."""
        return written.chain(self, call, step, before, follow)

    def effect_of(self, name: str) -> Effect:
        """The effect class of a call of tool `name` (unknown for a tool this session does not have)."""
        tool = self.tools.get(name)
        return tool.effect if tool is not None else Effect.UNKNOWN

    async def _run(self, spec: Speculation) -> Observation:
        """Run the candidate as the tool would for real: pure ones on the workspace, sandboxed in an overlay."""
        tool = self.tools[spec.candidate.name]
        args = spec.candidate.arguments
        try:
            if (whole := whole_read(tool, args)) is not None:
                reader, path = whole
                observation = await run_tool(reader, args, self.workspace)
                spec.file = await kept_file(reader, path, observation, self.workspace)
                return observation
            if tool.effect is Effect.SANDBOXED:
                spec.overlay = await Overlay(self.workspace).open()
                if not spec.overlay.confines:
                    self.unconfined = (f"the sandbox cannot confine a run here ({spec.overlay.backend} backend, "
                                        "no mount namespace): nothing is run ahead of the model")
                    raise Unconfined(self.unconfined)
                if spec.after is not None:
                    await chain.apply(spec.after, spec.overlay)
                return await run_tool(tool, args, spec.overlay)
            return await run_tool(tool, args, self.workspace)
        finally:
            spec.finished = time.monotonic()
            if spec.state is SpecState.RUNNING:
                spec.state = SpecState.READY

    # -- the real call -------------------------------------------------------------------------------

    def expect(self, calls: list[ParsedCall]) -> None:
        """The model's turn holds these calls: until each is taken, a speculation of it is kept for it when
        another call of the turn is taken, so every call of a turn of several can be served by one."""
        self._expected = {exact for call in calls if (exact := self.exact_of(call)) is not None}

    def exact_of(self, call: ParsedCall) -> str | None:
        """What a speculation must be to answer `call` (`exact_call` of its validated arguments); None when its
        tool is unknown or refuses its arguments."""
        tool = self.tools.get(call.name)
        args = validated(tool, call.arguments) if tool is not None else None
        return exact_call(call.name, args) if args is not None else None

    async def take(self, call: ParsedCall) -> Observation | None:
        """The observation of `call` if a speculation has exactly it at the current version; None to run it.

        When `call` may change the tree (mutating, or no tool takes it), every other speculation is discarded
        and its processes killed, whatever the outcome, but those of the turn's other calls not taken yet
        (`expect`) and a chain on this very edit; after a pure or sandboxed call they are kept for a later call
        (`_discard_unexpected`). Several calls may be taken at once. Never raises (but for cancellation):
        whatever goes wrong here, the call simply runs for real.
        """
        arrived = time.monotonic()
        try:
            return await self._take(call, arrived)
        except Exception as exc:  # a speculation is only ever a shortcut
            _log.warning("speculation could not match %s: %s: %s; the call runs for real", call.call_id,
                         type(exc).__name__, exc, exc_info=exc)  # a bug in Tao, shown, never the model's problem
            self.discard_all(DiscardReason.UNMATCHED, detail=f"{type(exc).__name__}: {exc}")
            return None

    async def _take(self, call: ParsedCall, arrived: float) -> Observation | None:
        """`take` itself: validate the real call, then a repeat, an exact speculation or a range of a read."""
        version = self.workspace.refresh()
        self.drop_stale(version)
        tool = self.tools.get(call.name) if isinstance(call.name, str) else None
        args = validated(tool, call.arguments) if tool is not None else None
        if tool is None or args is None:
            # An unknown tool or arguments its schema refuses: the real run gives the tool's own error. A bash
            # command that amounts to a structured call (`cat f`) never reaches here: bash is never speculated.
            self._discard_unexpected()
            return None
        exact = exact_call(call.name, args)
        if tool.effect is Effect.MUTATING:
            landing.taking(self, call, exact, version)
        try:
            return await self._serve(call, tool, args, version, arrived)
        finally:
            self._expected.discard(exact)  # kept while it was taken: another call taken meanwhile spares it

    async def _serve(self, call: ParsedCall, tool: Tool, args: dict[str, Any], version: int,
                     arrived: float) -> Observation | None:
        """A validated call's observation from a repeat, an exact speculation or a range of a whole read."""
        exact = exact_call(call.name, args)
        outlive = tool.effect is not Effect.MUTATING  # the tree stays as it is: what runs may serve a later call
        if tool.effect is Effect.PURE and (repeat := self.repeat(exact, version)) is not None:
            self._discard_unexpected(outlive=outlive)
            self._totals["repeats"] += 1
            self.emit(SpecPromote.of_repeat(self.now(), self.step, call.call_id))
            return repeat
        spec = next((s for s in self.specs.values() if s.exact == exact and s.servable), None)
        details: dict[str, object] = {}
        observation, reason, sliced = None, DiscardReason.FAILED, False
        if spec is not None:
            observation, reason, details = await self._result(spec, version)
        else:
            spec, observation = await self._slice(call.name, args, version)
            sliced = observation is not None
        self._discard_unexpected(spec, outlive)
        if spec is not None and observation is None:
            self.discard(spec, reason, **details)
        if spec is not None and observation is not None:
            self._promote(spec, call, arrived, sliced)
        return observation

    async def _result(self, spec: Speculation,
                      version: int) -> tuple[Observation | None, DiscardReason, dict[str, object]]:
        """A speculation's observation if it completed cleanly, untainted, with the tree still at its version;
        else None and the reason it is not used, with its details."""
        assert spec.task is not None
        # The real call now waits on it: it is authoritative work from here on. Boosted again while it
        # runs, since a process still setting up applies its nice after a first boost.
        while spec.overlay is not None and not spec.task.done():
            spec.overlay.boost()
            await asyncio.wait({spec.task}, timeout=BOOST_EVERY)
        try:
            observation = await asyncio.shield(spec.task)
        except Exception:  # a failed speculation is simply not used
            return None, DiscardReason.FAILED, {}
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the real call itself is stopped
            return None, DiscardReason.FAILED, {}  # discarded while waited on (a call taken beside it went stale)
        if observation.data.get("timed_out") or (spec.overlay is None and observation.is_error):
            # A limit a real run may not meet (a tool's timeout, under the load of speculation); and an error
            # of a pure tool is quick to get for real, which leaves no doubt.
            return None, DiscardReason.ERROR_OR_TIMEOUT, {}
        if spec.overlay is None:
            return (observation if self.workspace.refresh() == version else None), DiscardReason.FAILED, {}
        taints, changes = await asyncio.to_thread(vet, spec.overlay)
        if taints:
            return None, DiscardReason.TAINTED, {"detail": "; ".join(taints)}
        if spec.after is not None:  # the overlay holds the edit now: the real one must have left the same
            if (why := chain.differs(spec.after, self.workspace.root)) is not None:
                return None, DiscardReason.EDIT_DIFFERED, {"name": spec.after.name, "detail": why}
            changes = chain.untouched(spec.after, changes)
        if self.workspace.refresh() != version:
            return None, DiscardReason.FAILED, {}
        try:
            await asyncio.to_thread(apply_changes, self.workspace.root, changes)
        except PromotionRefused as exc:  # raised before anything is written
            return None, DiscardReason.UNPROMOTABLE, {"detail": exc}
        return observation, DiscardReason.FAILED, {}

    async def _slice(self, name: str, args: dict[str, Any],
                     version: int) -> tuple[Speculation | None, Observation | None]:
        """A line range of a file whose whole read was speculated at this version: the tool renders the real
        call's (validated) arguments from the file it read, its errors and notes included."""
        path = args.get("path")
        whole = exact_call(name, {"path": path}) if isinstance(path, str) else None
        spec = next((s for s in self.specs.values() if whole is not None and s.exact == whole), None)
        if spec is None or spec.state is not SpecState.READY or spec.file is None or spec.version != version:
            return None, None
        tool = self.tools[spec.candidate.name]
        if not isinstance(tool, ReadFile):  # a file is kept only from a whole read by read_file (whole_read)
            return None, None
        return spec, await run_tool(Rendered(tool, spec.file), args, self.workspace)

    def _promote(self, spec: Speculation, call: ParsedCall, arrived: float, sliced: bool) -> None:
        """Book a speculation as used for `call`: the time it hid, and the event that says so."""
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

    def drop_stale(self, version: int) -> None:
        """Discard what ran at another version, and forget real runs of another version."""
        self._seen = {exact: seen for exact, seen in self._seen.items() if seen[0] == version}
        for spec in list(self.specs.values()):
            if spec.version != version:
                self.discard(spec, DiscardReason.STALE, was=spec.version, now=version)

    def narrow(self, name: str) -> None:
        """The model has begun a call to `name`: a speculation of another tool, started for this step, cannot be
        it, so free its place. One kept from an earlier step waits for a later call."""
        for spec in list(self.specs.values()):
            if spec.candidate.name != name and spec.step == self.step:
                self.discard(spec, DiscardReason.OTHER_TOOL, name=name)

    def head_start(self, name: str, arguments: dict[str, Any]) -> float | None:
        """Seconds a speculation of exactly this call has already run (all of its run, if it ended); None when
        none has. What is left of the call's time is then the time it takes, less this."""
        exact = exact_call(name, arguments)
        spec = next((s for s in self.specs.values() if s.exact == exact and s.servable), None)
        return None if spec is None else (spec.finished or time.monotonic()) - spec.started

    def _discard_unexpected(self, kept: Speculation | None = None, outlive: bool = False) -> None:
        """Discard every speculation but `kept` and those of the turn's calls still to be taken: not called.

        With `outlive` (the call taken is pure or sandboxed, so the tree stays at its version unless its real
        run changes it, which `drop_stale` then sees), the newest `budget.max_running` of them are kept instead,
        running or done, for a later call: a test run guessed a turn early still answers the model when it
        asks after one more read. Only the older ones are discarded."""
        unexpected, orphans = [], []
        for spec in list(self.specs.values()):
            edit = spec.after if spec.after is not None and spec.after.pending else None
            if edit is not None and (edit.call_id is not None or edit.exact in self._expected):
                continue  # its edit is running, or is a call of the turn still to come
            if edit is not None:
                orphans.append(spec)  # a chain whose edit the model never called: it can never serve
            elif spec is not kept and spec.exact not in self._expected:
                unexpected.append(spec)
        if outlive:
            unexpected.sort(key=lambda spec: spec.started)
            unexpected = unexpected[:max(0, len(unexpected) - self.budget.max_running)]
        for spec in orphans + unexpected:
            self.discard(spec, DiscardReason.NOT_CALLED)

    def landed(self, call: ParsedCall, observation: Observation) -> None:
        """A mutating call ended (ran, or was refused): a chain on it goes on at the new version if the edit
        succeeded and left the tree as its overlay holds it; else it is discarded (running/landing.py)."""
        landing.landed(self, call, observation)

    def discard_all(self, reason: DiscardReason, **details: object) -> None:
        """Throw away every live speculation (the workspace is about to change, or the session ends)."""
        for spec in list(self.specs.values()):
            self.discard(spec, reason, **details)

    def discard(self, spec: Speculation, reason: DiscardReason, **details: object) -> None:
        """Throw one speculation away and say why (`details` fill in the reason's text)."""
        if spec.state >= SpecState.PROMOTED:
            return
        cost = records.cost(spec)  # read before the kill
        tainted = reason is DiscardReason.TAINTED  # its run may have seen another world
        spec.state = SpecState.TAINTED if tainted else SpecState.DISCARDED
        self.specs.pop(spec.key, None)
        if spec.task is not None and not spec.task.done():
            spec.task.cancel()  # kills the whole process group of an overlay run at once
        stats = self.kinds.setdefault(spec.candidate.kind, KindStats())
        stats.wasted += cost
        self._judge(spec.candidate.kind, stats)
        self._totals["discarded"] += 1
        self._totals["tainted"] += int(tainted)
        self._totals["wasted"] += cost
        self.emit(SpecDiscard(self.now(), self.step, spec.spec_id, reason.text(**details), round(cost, 6), tainted))
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
        self.discard_all(DiscardReason.SESSION_ENDED)
        if self._reapers:
            await asyncio.gather(*self._reapers, return_exceptions=True)
        totals: dict[str, Any] = dict(self._totals)
        self.emit(SpecSummary(self.now(), totals["launched"], totals["promoted"], totals["discarded"],
                              totals["repeats"], round(totals["saved"], 6), round(totals["wasted"], 6),
                              {kind: stats.to_dict() for kind, stats in sorted(self.kinds.items())},
                              tainted=totals["tainted"]))
