"""The co-scheduler's rivals: the strongest ways to run many agent sessions on one engine without Tao's pacing.

Each is a `Policy` of harness.coscheduler (a `View` in, a `Decision` out), so the same co-scheduler runs
them and `tao bench cosched` compares them with `Pacing` on equal terms:

- `Cap(limit)`: FCFS with at most `limit` sessions in flight, as a batch run with `--workers limit`;
- `LAS`: every request at once, vLLM's priority = the session's least attained service (Autellix);
- `TTL`: a session's place and cached prefix are held across its tool call for a time-to-live chosen
  from reload cost against queueing (Continuum).

Every one admits interactive requests (priority INTERACTIVE_PRIORITY) first and at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.coscheduler import INTERACTIVE_PRIORITY, KV_SHARE, Decision, Progress, Ticket, View, interactive_first
from harness.engine.api import WARM_PRIORITY


@dataclass(frozen=True)
class Cap:
    """FCFS with at most `limit` sessions in flight: the semaphore of a batch run's `--workers limit`.

    A session is in flight from its first admitted request until it ends, its tool calls included, as a
    worker holds its slot for the whole task. It ends when the client says so (`CoScheduler.session_ended`,
    `Progress.finished`), or, for clients that never say, after `idle` seconds without a request (a tool
    call longer than that frees the slot early). A new session's first request waits, in arrival order,
    until a slot frees; the requests of sessions in flight go to the engine at once, as FCFS.
    """

    limit: int
    idle: float = 600.0
    """Seconds of silence after which a session that never said it ended counts as ended."""

    @property
    def name(self) -> str:
        return f"cap-{self.limit}"

    def decide(self, view: View) -> Decision:
        active = self.in_flight(view)
        admit: list[tuple[str, int]] = []
        held = False
        for ticket in interactive_first(view.waiting):
            if ticket.session_id not in active and ticket.priority > INTERACTIVE_PRIORITY:
                if len(active) >= self.limit:
                    held = True
                    continue
                active.add(ticket.session_id)
            admit.append((ticket.request_id, ticket.priority))
        return Decision(tuple(admit), wake_in=self.next_expiry(view) if held else None)

    def in_flight(self, view: View) -> set[str]:
        """Sessions holding a slot: a request running, or started and neither ended nor silent for `idle`."""
        active = {t.session_id for t in view.running}
        active |= {s for s, p in view.sessions.items() if not p.finished and not self.silent(p, view.now)}
        return active

    def silent(self, progress: Progress, now: float) -> bool:
        """Whether a session has sent nothing for `idle` seconds since its last request ended."""
        return progress.ended_at is not None and now - progress.ended_at >= self.idle

    def next_expiry(self, view: View) -> float | None:
        """Seconds until the next silent session frees its slot (None: none will by itself)."""
        ends = [p.ended_at + self.idle - view.now for p in view.sessions.values()
                if not p.finished and p.ended_at is not None and not self.silent(p, view.now)]
        return min(ends, default=None)


@dataclass(frozen=True)
class LAS:
    """Least attained service first (Autellix's PLAS): every request goes to the engine at once, as FCFS,
    with vLLM's priority set from its session's service so far (`Progress.attained`, tokens the engine
    computed for it), `quantum` tokens a level: short programs finish ahead of long ones, and a new
    session starts ahead of every old one. Interactive requests keep their priority (below every level),
    speculative ones theirs (above every level)."""

    quantum: int = 1_000
    name: str = "las"

    def decide(self, view: View) -> Decision:
        ranked = sorted(((t, self.priority(t, view)) for t in view.waiting), key=lambda tp: tp[1])
        return Decision(tuple((t.request_id, p) for t, p in ranked))

    def priority(self, ticket: Ticket, view: View) -> int:
        """The level a request runs at: its session's attained service in quanta, below speculation's."""
        if ticket.priority <= INTERACTIVE_PRIORITY or ticket.speculative:
            return ticket.priority
        attained = view.sessions.get(ticket.session_id, Progress()).attained
        return min(WARM_PRIORITY - 1, attained // self.quantum)


@dataclass(frozen=True)
class TTL:
    """Continuum's retention: when a session's request ends, its place and its cached context are held for a
    time-to-live, so that its next request (after the tool call) finds its prefix in the KV cache and goes
    first; requests are otherwise admitted in the order their sessions started (program-level first come,
    first served, as Continuum schedules) while their prompts and the held contexts fit the KV cache.

    The TTL weighs what dropping the context costs against what holding it costs. Dropping it costs the
    session a reload (re-prefilling its context, `reload_per_token` seconds a token) plus the queue it would
    rejoin (the oldest waiting request's wait when the hold began). Holding `c` tokens of a `kv_tokens` cache for `t`
    seconds takes that share of the engine from the others: t * c / kv_tokens seconds of engine time. So
    TTL = (reload + queueing) * kv_tokens / c, at most `longest`; a session whose expected return
    (`Progress.expected_return`: a client's hint, else its observed gaps) lies beyond its TTL is not held.

    vLLM has no pinning; it is emulated in admission. A held context counts against the KV budget as if
    its blocks were pinned, so newcomers are not admitted into the room it needs, and its next request
    ranks first (priority as sent, admitted ahead of arrival order), so its prefix is read before
    newcomers' prefills can evict it. Once the TTL expires the room is freed, and the prefix may be evicted
    as any freed block in vLLM's LRU.
    """

    kv_tokens: int
    """KV cache capacity of the engine, in tokens."""
    reload_per_token: float
    """Seconds the engine takes to re-prefill one token of a dropped context."""
    longest: float = 600.0
    """The longest TTL, in seconds."""
    name: str = "ttl"

    def decide(self, view: View) -> Decision:
        busy = {t.session_id for t in view.waiting + view.running if not t.speculative}
        holds = {s: p for s, p in view.sessions.items() if s not in busy and self.held(p, view)}
        used = sum(t.prompt_tokens for t in view.running) + sum(p.context_tokens for p in holds.values())
        free = self.kv_tokens * KV_SHARE - used
        waiting = [t for t in view.waiting if not t.speculative]
        urgent = [t for t in waiting if t.priority <= INTERACTIVE_PRIORITY]
        started = {session: index for index, session in enumerate(view.sessions)}  # in order of first request's end
        ranked = sorted((t for t in waiting if t not in urgent),
                        key=lambda t: (not self.returned(t, view), started.get(t.session_id, len(started))))
        admitted: list[Ticket] = list(urgent)
        free -= sum(t.prompt_tokens for t in urgent)
        for ticket in ranked:  # in order: a request that does not fit waits, and so do those after it
            if ticket.prompt_tokens > free and (view.running or admitted):
                break
            admitted.append(ticket)
            free -= ticket.prompt_tokens
        held = len(admitted) < len(waiting)
        if not held:  # speculation only where no authoritative request waits
            admitted += [t for t in view.waiting if t.speculative]
        wake = None
        if held and holds:  # a hold that expires frees room
            wake = min(self.expires(p, view) - view.now for p in holds.values())
        return Decision(tuple((t.request_id, t.priority) for t in admitted), wake_in=wake)

    def ttl(self, progress: Progress, view: View, ended: float) -> float:
        """Seconds to hold a session's context after its request ended at `ended`: reload plus queueing (the
        oldest wait, as it stood then, of the requests still waiting) against the engine time the held cache
        takes from the others. Fixed at the end: a queue the hold itself lengthens does not extend it."""
        context = max(1, progress.context_tokens)
        queued = max((ended - t.arrived for t in view.waiting if not t.speculative and t.arrived <= ended),
                     default=0.0)
        return min(self.longest, (context * self.reload_per_token + queued) * self.kv_tokens / context)

    def expires(self, progress: Progress, view: View) -> float:
        """When a session's hold ends."""
        assert progress.ended_at is not None
        return progress.ended_at + self.ttl(progress, view, progress.ended_at)

    def held(self, progress: Progress, view: View) -> bool:
        """Whether a session between two requests keeps its place: within its TTL, and expected back within it."""
        if progress.finished or progress.ended_at is None or progress.context_tokens == 0:
            return False
        expected = progress.expected_return()
        ends = self.expires(progress, view)
        return view.now < ends and (expected is None or expected <= ends)

    def returned(self, ticket: Ticket, view: View) -> bool:
        """Whether a request is its session's return within the TTL: it goes first."""
        progress = view.sessions.get(ticket.session_id)
        if progress is None or progress.last_gap is None:
            return False
        return progress.last_gap <= self.ttl(progress, view, ticket.arrived - progress.last_gap)
