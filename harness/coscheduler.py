"""The LLM-Tool co-scheduler: every request of every session passes through it on its way to one engine.

    cosched = CoScheduler(engine, Pacing(knee=8, kv_tokens=46_000, max_wait=120.0))
    session = open_session(options, task, cosched.engine_for("s1"), workspace)   # Session needs no change

Each session gets an Engine of its own (`engine_for`) whose `stream` waits for admission, sends the
request to the shared engine with the priority it was given, and reports back when it ends; a reader
that goes away aborts its request. What to admit is decided by a policy from pure data (a `View` in,
a `Decision` out), as vLLM's scheduler decides and never runs the model:

- `FCFS`: admit everything at once with its own priority: plain vLLM, the baseline.
- `Pacing`: keep the engine at or below its throughput knee, and the prompts in flight within the KV
  cache; start a new session only while fewer run than end soonest on average (`batch_cost`); among
  waiting requests prefer sessions whose prefix is probably still in the KV cache, then those closest
  to their end; a request of a started session that has waited `max_wait` goes first
  (nobody starves), still within the knee: admitting it over the knee would slow every request and
  evict the prefixes of the others. A session's first request has no bound; it waits for room, as in a
  batch queue: under overload, starting every waiting session in turn re-prefills each from scratch.
  Speculative prefills (priority >= WARM_PRIORITY) go last, only when no authoritative request waits
  and fewer than `spec_room` requests are in flight, and are aborted when an authoritative request waits.

Every policy admits interactive requests (INTERACTIVE_PRIORITY: a person waits) first, Pacing even over
its knee. The rivals Tao is measured against (a cap on sessions in flight, least attained service,
Continuum's retention) are policies too, in harness.cosched_policies.

Requests in flight and the KV cache they hold are the co-scheduler's own books (its admitted requests,
their prompt tokens), or the engine's counts where the engine reports them (`load()`: vLLM's scheduler
stats, the simulated engine's books) and they say more: answers decoded so far, and requests from
clients that bypass the co-scheduler. Those counts are a step old, so a request they hold back is
decided on again after `RECHECK`. Residency is estimated from the engine's reports on finished
requests: each one's uncached prompt tokens and output tokens count as tokens written into the KV
cache; a session's prefix is taken as resident while fewer tokens than the cache holds beyond what
running requests pin have been written since its last request ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from harness.engine.api import WARM_PRIORITY, Chunk, Engine, EngineLoad, LLMRequest, Usage, engine_load

# A request of an interactive session (a person waits at a terminal): every policy admits it first.
# Batch sessions send 0; speculative prefills WARM_PRIORITY and above (vLLM's convention: lower runs first).
INTERACTIVE_PRIORITY = -1
CHARS_PER_TOKEN = 3.4  # prompt size estimate before the engine reports the real count
# A request this close to its bounded wait counts as aged. Timers may fire up to the clock's resolution
# early; without this margin, a wake-up in float rounding distance would be asked for again and again.
EARLY = 1e-3
# Share of the KV cache the prompts of running requests may fill: the rest is room for their answers.
KV_SHARE = 0.9
# Seconds after which to decide again when the engine's own counts held a request back: vLLM reports them
# after each step, so a request that has just ended may still be counted (about one decode step).
RECHECK = 0.05
# The knee: the batch at which decode reaches this share of the rate with the whole KV cache decoding.
# Holding sessions back costs the throughput between the knee and the peak: at 0.8 (61 sequences on the
# GPU profile, against 145 whose contexts fit its KV cache) pacing at 64 sessions was already slower
# than not pacing. At 0.95 (26 sequences of the SWE-bench trajectories' 13k-token mean context) 32
# sessions ran 2% slower than unpaced, their contexts still fitting. So the knee is where the KV cache is
# full at the mean context, and Pacing's KV budget adjusts it to the contexts actually in flight.
KNEE_SHARE = 1.0


@dataclass(frozen=True)
class Ticket:
    """A request as a policy sees it."""

    request_id: str
    session_id: str
    priority: int
    arrived: float
    prompt_tokens: int  # an estimate from the prompt's length

    @property
    def speculative(self) -> bool:
        """A cache-warming prefill on a guessed observation: it may wait, and may be aborted."""
        return self.priority >= WARM_PRIORITY


@dataclass(frozen=True)
class Progress:
    """What is known of one session: how far it got and what its last request left in the cache."""

    steps: int = 0  # authoritative requests finished
    context_tokens: int = 0  # prompt + output tokens of its last finished request
    written_at_end: int | None = None  # the engine's tokens-written count when that request ended
    ended_at: float | None = None  # when its last authoritative request ended (the loop's clock)
    mean_gap: float | None = None  # observed seconds from a request's end to the session's next one (its tools)
    tool_started: float | None = None  # when the client said a tool started (a hint), since the last request
    tool_expected: float | None = None  # the seconds the client expects that tool to take (None: not said)
    last_gap: float | None = None  # seconds from its previous request's end to its latest one
    attained: int = 0  # tokens the engine computed for the session so far (uncached prompt + output): its service
    finished: bool = False  # the client said the session ended (`CoScheduler.session_ended`)

    def expected_return(self) -> float | None:
        """When the session's next request is expected: from the client's hint, else from the gaps observed."""
        if self.tool_started is not None and self.tool_expected is not None:
            return self.tool_started + self.tool_expected
        if self.ended_at is not None and self.mean_gap is not None:
            return self.ended_at + self.mean_gap
        return None


@dataclass(frozen=True)
class View:
    """Everything a policy decides from."""

    now: float
    waiting: tuple[Ticket, ...]  # in arrival order
    running: tuple[Ticket, ...]
    sessions: Mapping[str, Progress]
    written: int  # tokens written into the KV cache by finished requests, since the start
    engine: EngineLoad | None = None  # the engine's own counts, where it reports them


@dataclass(frozen=True)
class Decision:
    """What to do now: requests to admit (with the priority to run at), to abort, and to give up."""

    admit: tuple[tuple[str, int], ...] = ()
    abort: tuple[str, ...] = ()  # running speculative requests
    drop: tuple[str, ...] = ()  # waiting speculative requests, ended without running
    wake_in: float | None = None  # decide again after this many seconds even if nothing happens


class Policy(Protocol):
    """Decides admissions from a View; holds no state of its own between decisions."""

    @property
    def name(self) -> str: ...  # read-only: a dataclass policy's field or a class attribute both serve

    def decide(self, view: View) -> Decision: ...


def interactive_first(tickets: tuple[Ticket, ...] | list[Ticket]) -> list[Ticket]:
    """The tickets with interactive ones (a person waits) moved ahead, each group keeping its order."""
    return sorted(tickets, key=lambda t: t.priority > INTERACTIVE_PRIORITY)


class FCFS:
    """No pacing: every request goes to the engine at once, as plain vLLM receives them."""

    name = "fcfs"

    def decide(self, view: View) -> Decision:
        return Decision(admit=tuple((t.request_id, t.priority) for t in interactive_first(view.waiting)))


@dataclass(frozen=True)
class Pacing:
    """Admit up to the knee and the KV cache: the aged first, then cached and nearly done sessions, speculation last."""

    knee: int
    """Requests in flight at which the engine's throughput stops growing much (from calibration)."""
    kv_tokens: int
    """KV cache capacity of the engine, in tokens."""
    max_wait: float
    """Seconds after which a started session's waiting request goes ahead of every other one."""
    expected_steps: int = 10
    """Typical session length in requests, to guess remaining work from progress."""
    spec_room: int | None = None
    """Requests in flight below which a speculative prefill may start (None: the knee). A prefill
    stalls every sequence decoding in its step, so under load a guess costs more than it can win."""
    retain: float | None = None
    """Share of the KV cache the contexts of started sessions may fill, those between two requests (in a
    tool) included and each counted at least at the mean context (kv_tokens / knee) it grows to, before a
    new session may start (None: new sessions wait for the knee only)."""
    batch_cost: float | None = None
    """A step's fixed cost over one more sequence's cost, a / b in a step of a + b * batch (None: the knee is
    fixed). With M sessions left, running them B at a time ends them on average soonest at
    B = sqrt(M * batch_cost): fewer wastes steps, more shares each step among more sessions."""
    name: str = "pacing"

    def decide(self, view: View) -> Decision:
        sessions_in = {t.session_id for t in view.waiting + view.running if not t.speculative}
        drop = tuple(t.request_id for t in view.waiting if t.speculative and t.session_id in sessions_in)
        urgent = [t for t in view.waiting if t.priority <= INTERACTIVE_PRIORITY]  # a person waits: over the knee
        waiting = [t for t in view.waiting if not t.speculative and t not in urgent]
        aged = [t for t in waiting if self.ages(t, view)]
        estimated = sum(t.prompt_tokens for t in view.running)
        own = (len(view.running) + len(urgent), estimated + sum(t.prompt_tokens for t in urgent))
        busy, pinned = self.in_flight(view, estimated)
        busy, pinned = busy + len(urgent), pinned + own[1] - estimated
        ranked = aged + sorted((t for t in waiting if t not in aged), key=lambda t: self.rank(t, view, pinned))
        room, kv_free = max(0, self.knee - busy), self.kv_tokens * KV_SHARE - pinned
        starts = self.starts(view)
        admitted: list[Ticket] = []
        retained = self.retained(view, pinned)
        for ticket in ranked[:room]:  # in order: a request that does not fit waits, and so do those after it
            if ticket.prompt_tokens > kv_free and (busy or admitted):
                break
            if ticket.session_id not in view.sessions:  # a new session
                if starts is not None and starts <= 0 and (busy or admitted):
                    continue  # enough sessions run for the ones left to end soonest on average
                need = max(ticket.prompt_tokens, self.kv_tokens // max(1, self.knee))  # its context will grow
                if retained is not None and retained + need > self.kv_tokens * (self.retain or 1.0) \
                        and (busy or admitted):
                    continue  # a new session waits until the started ones' contexts leave it room
                retained = None if retained is None else retained + need
                starts = None if starts is None else starts - 1
            admitted.append(ticket)
            kv_free -= ticket.prompt_tokens
        held = [t for t in ranked if t not in admitted]
        decision = [(t.request_id, t.priority) for t in urgent + admitted]
        abort: tuple[str, ...] = ()
        if held:  # authoritative requests wait: speculation gives way
            abort = tuple(t.request_id for t in view.running if t.speculative)
        else:
            free = ((self.knee if self.spec_room is None else self.spec_room) - len(view.running) - len(urgent)
                    - len(admitted))
            spare = [t for t in view.waiting if t.speculative and t.request_id not in drop]
            decision += [(t.request_id, t.priority) for t in spare[:max(0, free)]]
        wake = min((t.arrived + self.max_wait - view.now for t in held
                    if t not in aged and t.session_id in view.sessions), default=None)
        if held and (busy, pinned) != own:  # the engine's counts may be a step old
            wake = RECHECK if wake is None else min(wake, RECHECK)
        return Decision(tuple(decision), abort, drop, wake)

    def starts(self, view: View) -> int | None:
        """New sessions that may start now (None: any within the knee): while M sessions are left, about
        sqrt(M * batch_cost) run at once, the started ones counted until they end."""
        if self.batch_cost is None:
            return None
        new = {t.session_id for t in view.waiting + view.running if t.session_id not in view.sessions}
        started = sum(1 for p in view.sessions.values() if not p.finished)
        running_new = {t.session_id for t in view.running if t.session_id not in view.sessions}
        target = max(1, math.ceil(math.sqrt((len(new) + started) * self.batch_cost)))
        return target - started - len(running_new)

    def retained(self, view: View, pinned: int) -> int | None:
        """KV tokens the started sessions need (None: `retain` is off): prompts in flight, and each session
        between two requests that has not ended at least the mean context the knee is sized by
        (kv_tokens / knee), as its context grows to about that over its life."""
        if self.retain is None:
            return None
        busy = {t.session_id for t in view.running}
        mean = self.kv_tokens // max(1, self.knee)
        return pinned + sum(max(mean, p.context_tokens) for s, p in view.sessions.items()
                            if s not in busy and not p.finished)

    def in_flight(self, view: View, estimated: int) -> tuple[int, int]:
        """Requests in the engine and KV tokens they hold: the co-scheduler's own books, or the engine's
        where they say more (answers so far, warm chunks, requests sent by clients that bypass it)."""
        if view.engine is None:
            return len(view.running), estimated
        return (max(len(view.running), view.engine.running + view.engine.waiting),
                max(estimated, round(view.engine.kv_usage * self.kv_tokens)))

    def ages(self, ticket: Ticket, view: View) -> bool:
        """Whether a request has waited its bound. A session's first request has none: it waits for room
        behind started sessions (admission control, as a batch queue); aging it would start every waiting
        session in turn under overload, each evicting the others' prefixes."""
        return ticket.session_id in view.sessions and ticket.arrived + self.max_wait <= view.now + EARLY

    def rank(self, ticket: Ticket, view: View, pinned: int) -> tuple[bool, int, float]:
        """Sort key: prefix probably cached first, then least remaining work, then arrival."""
        progress = view.sessions.get(ticket.session_id, Progress())
        return (not self.resident(progress, view.written, pinned),
                max(1, self.expected_steps - progress.steps), ticket.arrived)

    def resident(self, progress: Progress, written: int, pinned: int) -> bool:
        """Whether the session's last context is probably still in the prefix cache."""
        if progress.written_at_end is None:
            return False
        return written - progress.written_at_end <= self.kv_tokens - pinned - progress.context_tokens


@dataclass(frozen=True)
class PacingState:
    """One session's place in the co-scheduler, as its status bar shows it."""

    admitted: bool  # a request of the session runs in the engine
    waited: float | None  # seconds its oldest waiting request has waited (None: none waits)
    position: int | None  # 1-based place among waiting authoritative requests, in arrival order
    sessions: int  # sessions with a request waiting or running
    kv_usage: float | None  # the engine's share of KV cache in use, where it reports it


class Step(enum.IntEnum):
    """A request's lifecycle in the co-scheduler, in order; `>= DONE` means it is over."""

    WAITING = 0
    RUNNING = 1
    DONE = 2
    DROPPED = 3


@dataclass(frozen=True)
class Record:
    """One thing the co-scheduler did, for tests and benchmarks."""

    t: float
    action: str  # arrive, admit, abort, drop, end
    request_id: str
    session_id: str
    speculative: bool
    waiting_authoritative: int  # authoritative requests waiting right after the action


@dataclass(eq=False)
class _Entry:
    ticket: Ticket
    request: LLMRequest
    step: Step = Step.WAITING
    aborting: bool = False
    admitted: asyncio.Future[int | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class CoScheduler:
    """Routes every session's requests to one shared engine, admitting them as its policy decides."""

    def __init__(self, engine: Engine, policy: Policy) -> None:
        self.engine, self.policy = engine, policy
        self.records: list[Record] = []
        self.sessions: dict[str, Progress] = {}
        self.written = 0
        self._entries: dict[str, _Entry] = {}  # waiting and running, in arrival order
        self._timer: asyncio.TimerHandle | None = None
        self._aborts: set[asyncio.Task[None]] = set()

    def engine_for(self, session_id: str) -> SessionEngine:
        """The Engine one session talks to."""
        return SessionEngine(self, session_id)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def stream(self, session_id: str, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        """Wait for admission, then stream from the shared engine; report the end either way."""
        entry = self._arrive(session_id, request)
        usage: Usage | None = None
        finished = False
        try:
            priority = await entry.admitted
            if priority is None:
                yield Chunk(usage=Usage(prompt_tokens=entry.ticket.prompt_tokens), finish_reason="abort")
                return
            async with contextlib.aclosing(self.engine.stream(replace(request, priority=priority))) as chunks:
                async for chunk in chunks:
                    usage = chunk.usage or usage
                    finished = finished or chunk.finish_reason is not None
                    yield chunk
        finally:
            if entry.step is Step.RUNNING and not finished:
                with contextlib.suppress(Exception):
                    await self.engine.abort(request.request_id)
            self._end(entry, usage)

    def tool_started(self, session_id: str, expected: float | None) -> None:
        """A client's hint: the session's tool started now and should take `expected` seconds (None: unknown)."""
        progress = self.sessions.get(session_id, Progress())
        self.sessions[session_id] = replace(progress, tool_started=self.now(), tool_expected=expected)
        self._decide()

    def session_ended(self, session_id: str) -> None:
        """A client's word that a session is over: it sends no more requests (policies that count sessions
        in flight, as `harness.cosched_policies.Cap`, free its place)."""
        progress = self.sessions.get(session_id, Progress())
        self.sessions[session_id] = replace(progress, finished=True)
        self._decide()

    def pacing(self, session_id: str) -> PacingState:
        """Where one session stands: admitted, or waiting since when and at which place."""
        entries = [e for e in self._entries.values() if not e.ticket.speculative]
        waiting = [e for e in entries if e.step is Step.WAITING]
        mine = [e for e in waiting if e.ticket.session_id == session_id]
        position = next((i + 1 for i, e in enumerate(waiting) if e.ticket.session_id == session_id), None)
        load = engine_load(self.engine)
        return PacingState(
            admitted=any(e.step is Step.RUNNING and e.ticket.session_id == session_id for e in entries),
            waited=self.now() - mine[0].ticket.arrived if mine else None, position=position,
            sessions=len({e.ticket.session_id for e in entries}), kv_usage=load.kv_usage if load else None)

    def occupancy(self) -> EngineLoad:
        """Authoritative requests running and waiting here, and the engine's share of KV cache in use (0 where it
        reports none): this replica's load, as `GET /v1/tao/load` reports it to clients choosing a replica."""
        entries = [e for e in self._entries.values() if not e.ticket.speculative]
        load = engine_load(self.engine)
        return EngineLoad(running=sum(e.step is Step.RUNNING for e in entries),
                          waiting=sum(e.step is Step.WAITING for e in entries), kv_usage=load.kv_usage if load else 0.0)

    async def abort(self, request_id: str) -> None:
        """A session gives a request up: a waiting one is dropped, a running one aborted in the engine."""
        entry = self._entries.get(request_id)
        if entry is None:
            return
        if entry.step is Step.WAITING:
            self._drop(entry, "drop")
            self._decide()
        else:
            await self.engine.abort(request_id)

    # -- bookkeeping ---------------------------------------------------------------------------------

    def _arrive(self, session_id: str, request: LLMRequest) -> _Entry:
        chars = sum(len(str(m.get("content") or "")) for m in request.messages)
        tokens = math.ceil(chars / CHARS_PER_TOKEN)
        if request.prompt_limit is not None:  # a warm chunk pins its first tokens only
            tokens = min(tokens, request.prompt_limit)
        ticket = Ticket(request.request_id, session_id, request.priority, self.now(), tokens)
        progress = self.sessions.get(session_id)
        if progress is not None and not ticket.speculative and progress.ended_at is not None:
            gap = ticket.arrived - progress.ended_at  # the tools (and the client) between two requests
            mean = gap if progress.mean_gap is None else (progress.mean_gap + gap) / 2
            self.sessions[session_id] = replace(progress, ended_at=None, mean_gap=mean, tool_started=None,
                                                tool_expected=None, last_gap=gap)
        entry = _Entry(ticket, request)
        self._entries[request.request_id] = entry
        self._record("arrive", ticket)
        self._decide()
        return entry

    def _end(self, entry: _Entry, usage: Usage | None) -> None:
        if entry.step >= Step.DONE:
            return
        if entry.step is Step.WAITING:  # the reader went away before admission
            self._drop(entry, "drop")
            self._decide()
            return
        entry.step = Step.DONE
        self._entries.pop(entry.ticket.request_id, None)
        if usage is not None:
            computed = usage.prompt_tokens - usage.cached_tokens + usage.output_tokens
            self.written += computed
            before = self.sessions.get(entry.ticket.session_id, Progress())
            if not entry.ticket.speculative:
                self.sessions[entry.ticket.session_id] = replace(
                    before, steps=before.steps + 1, context_tokens=usage.prompt_tokens + usage.output_tokens,
                    written_at_end=self.written, ended_at=self.now(), tool_started=None, tool_expected=None,
                    attained=before.attained + computed)
            elif entry.ticket.session_id in self.sessions:  # a warm prefill is service the session got too
                self.sessions[entry.ticket.session_id] = replace(before, attained=before.attained + computed)
        self._record("end", entry.ticket)
        self._decide()

    def _drop(self, entry: _Entry, action: str) -> None:
        entry.step = Step.DROPPED
        self._entries.pop(entry.ticket.request_id, None)
        if not entry.admitted.done():
            entry.admitted.set_result(None)
        self._record(action, entry.ticket)

    def _decide(self) -> None:
        """Ask the policy and carry its decision out."""
        # A reader cancelled while waiting has its admission future cancelled at once, but its stream's
        # `finally` runs only when its task resumes: such a request is gone, and must not be admitted.
        for gone in [e for e in self._entries.values() if e.step is Step.WAITING and e.admitted.done()]:
            self._drop(gone, "drop")
        entries = list(self._entries.values())
        view = View(self.now(), tuple(e.ticket for e in entries if e.step is Step.WAITING),
                    tuple(e.ticket for e in entries if e.step is Step.RUNNING), dict(self.sessions), self.written,
                    engine_load(self.engine))
        decision = self.policy.decide(view)
        for request_id in decision.drop:
            if (entry := self._entries.get(request_id)) is not None and entry.step is Step.WAITING:
                self._drop(entry, "drop")
        for request_id, priority in decision.admit:
            entry = self._entries.get(request_id)
            if entry is not None and entry.step is Step.WAITING:
                entry.step = Step.RUNNING
                entry.admitted.set_result(priority)
                self._record("admit", entry.ticket)
        for request_id in decision.abort:
            entry = self._entries.get(request_id)
            if entry is not None and entry.step is Step.RUNNING and entry.ticket.speculative and not entry.aborting:
                entry.aborting = True
                self._record("abort", entry.ticket)
                task = asyncio.get_running_loop().create_task(self.engine.abort(request_id))
                self._aborts.add(task)
                task.add_done_callback(self._aborts.discard)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if decision.wake_in is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, decision.wake_in), self._decide)

    def _record(self, action: str, ticket: Ticket) -> None:
        waiting = sum(1 for e in self._entries.values() if e.step is Step.WAITING and not e.ticket.speculative)
        self.records.append(Record(self.now(), action, ticket.request_id, ticket.session_id, ticket.speculative,
                                   waiting))


class SessionEngine:
    """One session's Engine: the shared engine seen through the co-scheduler."""

    def __init__(self, cosched: CoScheduler, session_id: str) -> None:
        self.cosched, self.session_id = cosched, session_id
        self.name = f"cosched:{cosched.engine.name}"
        self.native_tools = cosched.engine.native_tools
        self.prefix_cache = cosched.engine.prefix_cache

    def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        return self.cosched.stream(self.session_id, request)

    async def abort(self, request_id: str) -> None:
        await self.cosched.abort(request_id)

    async def close(self) -> None:
        """The shared engine outlives its sessions: closing one session's view of it does nothing."""
