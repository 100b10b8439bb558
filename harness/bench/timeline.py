"""The timeline arithmetic of the trace replay: when each step's model call and tools end under a plan.

One trajectory is a list of `Step`s. A step is one model call (prefill of its new prompt tokens, then
its output tokens one `tpot` apiece) followed by its tool calls, run one after the other, but for the
calls of one group, which run side by side as Tao's loop runs a turn's neighbouring pure calls
(harness.together) and end with the slowest of them. A call has fully streamed `done_tokens` output
tokens into its model call (none given: at the answer's end). A `Plan` says, per step, how each call
was served (`Launch`): run when the model asks for it (`at=None`), taken from a speculation started at
moment (a) the previous observation arrived / the model call started, (b) the reasoning has streamed,
(c) the call's name and first characters have streamed, (o) the oracle's start (the same instant as
(a), free of any cost), (m) once an earlier call `after` (a mutation) has fully streamed and been
applied in an overlay (`apply` seconds later; no `after`: the session's start; or at the step's moment
`sooner` if that comes first), or (r) a result
already known at this workspace version. A speculation runs `slowdown` times slower while the model
still writes, at full speed once the real call waits on it; its observation is ready at max(real
call, speculation done) plus `overhead` (taking it). `warm` hides the next step's prefill: "full" all
of it (the oracle that foresees every observation), "warm" as much as fits in the tool's visible time
(a warm prefill on a guessed observation runs while the real tool runs), "" none. Pure data in,
numbers out: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MOMENTS = ("a", "b", "c", "o", "m")


@dataclass(frozen=True)
class Step:
    """One model call and the tool calls it emits, as a recorded trajectory has them."""

    prefill_tokens: int
    """New prompt tokens of this model call (the prefix cache holds the rest)."""
    output_tokens: int
    reason_tokens: int = 0
    """Output tokens streamed before the first call begins: moment (b)."""
    call_tokens: int = 0
    """Further output tokens until the call's name and first characters are known: moment (c)."""
    calls: tuple[float, ...] = ()
    """Seconds each tool call takes when it runs."""
    groups: tuple[int, ...] = ()
    """Each call's group: neighbouring calls of the same group start together (none given: one at a time)."""
    done_tokens: tuple[int, ...] = ()
    """Output tokens streamed when each call's arguments are complete (none given: the answer's end)."""

    def runs(self) -> list[list[int]]:
        """The indices of the calls, cut into the groups that run side by side, in order."""
        out: list[list[int]] = []
        for index in range(len(self.calls)):
            group = self.groups[index] if index < len(self.groups) else None
            if out and group is not None and group == self.groups[out[-1][0]]:
                out[-1].append(index)
            else:
                out.append([index])
        return out


@dataclass(frozen=True)
class Launch:
    """How one call's observation was obtained."""

    at: str | None = None
    """Moment its speculation started (a, b, c, o, m), r for a known result, None to run it when called."""
    delay: float = 0.0
    """Seconds from that moment until the speculation really starts (deciding, launching, an overlay)."""
    extra: float = 0.0
    """Seconds the speculative run takes beyond the tool's own (the sandbox's run overhead)."""
    slowdown: float = 1.0
    """How much slower the speculation runs while the model still writes (CPU shared with others)."""
    after: tuple[int, int] | None = None
    """At (m): the (step, call) whose full streaming starts the speculation (None: the session's start)."""
    apply: float = 0.0
    """At (m): seconds applying that mutation (and any before it in its turn) in the overlay takes first."""
    sooner: str = ""
    """At (m): a moment of the call's own step to start at instead when it comes first (the oracle's (o))."""
    step: int = -1
    """At (a), (b), (c): the step whose moment it is, for a speculation kept from an earlier step (-1: the
    call's own)."""


@dataclass(frozen=True)
class Miss:
    """A speculation that was wrong: started at `at`, would have run `seconds`."""

    at: str
    seconds: float
    fixed: float = 0.0
    """CPU-seconds it costs however short it ran (an overlay made and discarded)."""
    until: str = ""
    """Moment it was discarded at, when before the model's call ended (a later moment ruled it out)."""
    after: tuple[int, int] | None = None
    """At (m): the (step, call) whose full streaming started it."""
    step: int = -1
    """At (a), (b), (c): the step it started in, when an earlier one than the step it is discarded at."""


@dataclass(frozen=True)
class Plan:
    """How one step was served."""

    launches: tuple[Launch, ...] = ()
    warm: str = ""
    misses: tuple[Miss, ...] = ()


@dataclass
class Timeline:
    """A trajectory's times under a plan."""

    total: float = 0.0
    llm: float = 0.0
    tool_wait: float = 0.0
    """Seconds the model waited for tools after asking: tool latency as the model sees it."""
    wasted: float = 0.0
    """CPU-seconds of discarded speculation."""
    overhead: float = 0.0
    """Seconds of the plan's own cost on the critical path (taking results, sandbox overheads)."""
    step_ends: list[float] = field(default_factory=list)


def serve(cursor: float, seconds: float, launch: Launch, moments: dict[str, float], overhead: float,
          done: dict[tuple[int, int], float] | None = None) -> float:
    """When one call's observation is ready, the model having asked for it at `cursor`; `done` holds when
    each earlier call fully streamed (for (m))."""
    if launch.at is None:
        return cursor + overhead + seconds
    if launch.at == "r":
        return cursor + overhead
    start = _start(launch.at, launch.after, moments, done or {}) + launch.apply + launch.delay
    if launch.sooner:
        start = min(start, moments[launch.sooner])
    work = seconds + launch.extra
    done_before = max(0.0, cursor - start) / max(1.0, launch.slowdown)
    return max(cursor, start) + max(0.0, work - done_before) + overhead


def of_step(step: int, past: list[dict[str, float]], own: dict[str, float]) -> dict[str, float]:
    """The moments of step `step` among `past`, or `own` (the call's own step's) for -1."""
    return past[step] if step >= 0 else own


def _start(at: str, after: tuple[int, int] | None, moments: dict[str, float],
           done: dict[tuple[int, int], float]) -> float:
    """The instant of moment `at`: of this step, or for (m) when call `after` fully streamed (0: none)."""
    if at != "m":
        return moments[at]
    if after is None:
        return 0.0
    if after not in done:
        raise ValueError(f"a speculation at (m) after call {after}, which has not streamed yet; "
                         "(m) must name an earlier call")
    return done[after]


def simulate(steps: list[Step], plans: list[Plan], tpot: float, prefill_tps: float,
             overhead: float = 0.0) -> Timeline:
    """Walk the steps in order; `overhead` is the cost of taking each call's result (none for the baseline)."""
    line = Timeline()
    t, hidden = 0.0, 0.0
    done: dict[tuple[int, int], float] = {}  # (step, call) -> when its arguments had fully streamed
    past: list[dict[str, float]] = []  # every step's moments so far
    for index, step in enumerate(steps):
        plan = plans[index] if index < len(plans) else Plan()
        start = t
        prefill = max(0.0, step.prefill_tokens / prefill_tps - hidden)
        b = start + prefill + step.reason_tokens * tpot
        moments = {"a": start, "o": start, "b": b, "c": b + step.call_tokens * tpot}
        past.append(moments)
        end = start + prefill + step.output_tokens * tpot
        for i in range(len(step.calls)):
            tokens = step.done_tokens[i] if i < len(step.done_tokens) else step.output_tokens
            done[(index, i)] = start + prefill + min(tokens, step.output_tokens) * tpot
        cursor = end
        for run in step.runs():
            asked = cursor  # every call of a group is asked for at once
            for i in run:
                launch = plan.launches[i] if i < len(plan.launches) else Launch()
                cost = 0.0 if launch.at in ("o",) else overhead
                ready = serve(asked, step.calls[i], launch, of_step(launch.step, past, moments), cost, done)
                line.overhead += cost + (launch.extra + launch.delay if launch.at in ("a", "b", "c", "m") else 0.0)
                cursor = max(cursor, ready)
        for miss in plan.misses:
            stop = moments[miss.until] if miss.until else end
            began = _start(miss.at, miss.after, of_step(miss.step, past, moments), done)
            line.wasted += min(miss.seconds, max(0.0, stop - began)) + miss.fixed
        nxt = steps[index + 1].prefill_tokens / prefill_tps if index + 1 < len(steps) else 0.0
        hidden = nxt if plan.warm == "full" else min(nxt, cursor - end) if plan.warm == "warm" else 0.0
        line.llm += end - start
        line.tool_wait += cursor - end
        line.step_ends.append(cursor)
        t = cursor
    line.total = t
    return line
