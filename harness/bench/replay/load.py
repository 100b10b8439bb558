"""`--sessions N`: N replayed trajectories share one engine whose time per token grows with load.

N sessions run at once, the first starting `STAGGER` x j seconds in; when one ends, the next held-out
trajectory takes its place, until each has been replayed (cycled when there are fewer than N). The
engine runs in steps as vLLM's does: every running request decodes one token a step; a step lasts
`tpot` x g(b) plus the prefill it carries at `prefill_tps`, where g(b) = seconds(b) / seconds(1) of
harness.engine.sim's step model of a GPU-class engine (GPU profile: a fixed cost a step, a cost a
sequence and a cost a context token read; b decoding sequences of the mean running context), so one
session alone sees `tpot` exactly. The KV cache holds `kv_tokens` (that profile's); a session's prefix is
taken as resident when the contexts of the sessions used since its last request, its own included, fit
(least recently used first out); otherwise its whole context is prefilled again. Tools and speculation
follow each run's plan (harness.bench.timeline.serve): a speculation started at (a) starts when the
request is sent, so waiting for admission hides more tool time; one at (m), after a mutation has
streamed, when the answer that holds it ends. Runs:

- baseline: no speculation, every request admitted at once (plain vLLM, FCFS);
- tao: Tao's plans, FCFS; tao_cosched: Tao's plans, requests paced by the co-scheduler's rule
  (harness.coscheduler.Pacing): at most the engine's throughput knee running, resident sessions first,
  then those with the least expected work left (a typical length minus the steps done), then arrival;
  none waits longer than WAIT_TURNS typical turns at the knee.

Not modelled: preemption inside a running batch, chunked-prefill interleaving, warm prefills' GPU cost.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from harness.bench.replay.policies import TAKE
from harness.bench.timeline import Launch, Plan, of_step, serve
from harness.coscheduler import KNEE_SHARE
from harness.engine.sim import GPU, Profile

STAGGER = 1.0  # seconds between session starts
WAIT_TURNS = 12  # as harness.bench.cosched_run: a request waits at most this many typical turns at the knee


@dataclass(frozen=True)
class Pacing:
    """The co-scheduler's rule (harness.coscheduler.Pacing) with this workload's figures."""

    knee: int
    max_wait: float
    expected_steps: int
RUNS = ("baseline", "tao", "tao_cosched")


@dataclass
class SimSession:
    """One replayed trajectory on the shared engine."""

    index: int
    steps: list[Any]
    plans: list[Plan]
    overhead: float
    ready: float  # when its next request is sent
    step: int = 0
    context: int = 0
    hidden: float = 0.0  # seconds of the next prefill already warmed
    last_used: float = 0.0
    arrived: float = 0.0
    produced: int = 0
    prefill: float = 0.0
    moments: dict[str, float] = field(default_factory=dict)
    done: dict[tuple[int, int], float] = field(default_factory=dict)  # (step, call) -> its answer's end
    past: list[dict[str, float]] = field(default_factory=list)  # the moments of every step answered so far
    finished: float | None = None

    @property
    def remaining(self) -> int:
        """Steps left."""
        return len(self.steps) - self.step


class Engine:
    """The shared engine's cost model and cache residency."""

    def __init__(self, tpot: float, prefill_tps: float, profile: Profile = GPU) -> None:
        self.tpot, self.prefill_tps, self.profile = tpot, prefill_tps, profile

    def step_seconds(self, running: list[SimSession], prefill_tokens: float) -> float:
        """One step: b decoding sequences at `tpot` x g(b), plus the prefill it carries."""
        b = len(running)
        context = statistics.fmean(s.context for s in running) if running else 0
        step = self.profile.step
        # StepModel.seconds is linear in its arguments and takes a mean context as well as a whole one; its int
        # annotation is narrower than the function.
        g = step.seconds(b, b * context, 0, 0) / step.seconds(1, context, 0, 0) if b else 0.0  # type: ignore[arg-type]
        return self.tpot * g + prefill_tokens / self.prefill_tps

    def resident(self, session: SimSession, sessions: list[SimSession]) -> bool:
        """Whether the session's prefix is still cached: what was used since, with it, fits."""
        used = sum(s.context for s in sessions if s is not session and s.last_used >= session.last_used
                   and s.finished is None)
        return session.step == 0 or used + session.context <= self.profile.kv_tokens


def simulate(items: list[tuple[list[Any], list[Plan], float]], n: int, tpot: float, prefill_tps: float,
             paced: bool) -> list[float]:
    """Task times of `items` (steps, plans, overhead), each replayed once (more if fewer than `n`), by `n`
    sessions at a time: when one ends, its place takes the next trajectory."""
    engine = Engine(tpot, prefill_tps)
    queue = deque(range(len(items)))
    while len(queue) < n:
        queue.extend(range(len(items)))
    sessions = [SimSession(j, *items[queue.popleft()], ready=STAGGER * j) for j in range(n)]
    starts = {id(s): s.ready for s in sessions}
    waiting: list[SimSession] = []
    running: list[SimSession] = []
    pacing = pacing_for(items, tpot, prefill_tps) if paced else None
    times: list[float] = []
    t = 0.0
    while sessions:
        for s in sessions:
            if s not in waiting and s not in running and s.ready <= t:
                s.arrived = s.ready
                waiting.append(s)
        admitted = _admit(waiting, running, sessions, engine, t, pacing)
        prefill = 0.0
        for s in admitted:
            new = s.steps[s.step].prefill_tokens
            s.prefill = new if engine.resident(s, sessions) else new + s.context
            s.prefill = max(0.0, s.prefill - s.hidden * prefill_tps)
            s.context += new
            prefill += s.prefill
            waiting.remove(s)
            running.append(s)
        if not running:
            t = max(t, min(s.ready for s in sessions if s not in waiting))
            continue
        ages = [s.arrived + pacing.max_wait for s in waiting if s.step > 0] if pacing else []
        wake = min((a for a in ages if a > t), default=float("inf"))  # the aged reorder the queue, nothing more
        t = _advance(running, engine, t, prefill, sessions, wake)
        for done in [s for s in sessions if s.finished is not None]:
            times.append(done.finished - starts[id(done)])  # type: ignore[operator]
            sessions.remove(done)
            if queue:
                nxt = SimSession(done.index, *items[queue.popleft()], ready=done.finished)  # type: ignore[arg-type]
                starts[id(nxt)] = nxt.ready
                sessions.append(nxt)
    return times


def pacing_for(items: list[tuple[list[Any], list[Plan], float]], tpot: float, prefill_tps: float) -> Pacing:
    """The co-scheduler's knee, bounded wait and typical length for this workload."""
    steps = [step for item in items for step in item[0]]
    context = mean_context(items)
    knee = GPU.knee(context, KNEE_SHARE)
    g = GPU.step.seconds(knee, knee * context, 0, 0) / GPU.step.seconds(1, context, 0, 0)
    turn = statistics.fmean(s.output_tokens * tpot * g + s.prefill_tokens / prefill_tps for s in steps)
    return Pacing(knee, WAIT_TURNS * turn, round(len(steps) / len(items)))


def _admit(waiting: list[SimSession], running: list[SimSession], sessions: list[SimSession], engine: Engine, t: float,
           pacing: Pacing | None) -> list[SimSession]:
    """FCFS (no pacing): in arrival order while the KV cache has room, stopping at the first that does not
    fit, as vLLM does; paced: also at most `knee` running, the aged first (a started session's request that
    waited `max_wait`; a first request has no bound), then resident sessions, then the least expected work
    left, then arrival: harness.coscheduler.Pacing's rule."""
    if pacing is None:
        order = sorted(waiting, key=lambda s: s.arrived)
    else:
        order = sorted(waiting, key=lambda s: (s.step == 0 or t - s.arrived < pacing.max_wait,
                                               not engine.resident(s, sessions),
                                               max(1, pacing.expected_steps - s.step), s.arrived))
    room = engine.profile.kv_tokens - sum(s.context for s in running)
    count = len(running)
    admitted: list[SimSession] = []
    for s in order:
        need = s.context + s.steps[s.step].prefill_tokens + s.steps[s.step].output_tokens
        if (need > room and running + admitted) or (pacing is not None and count >= pacing.knee):
            break
        admitted.append(s)
        room -= need
        count += 1
    return admitted


def mean_context(items: list[tuple[list[Any], list[Plan], float]]) -> int:
    """Context tokens of a request, on average over every step of the workload."""
    sizes = []
    for steps, _, _ in items:
        total = 0
        for step in steps:
            total += step.prefill_tokens
            sizes.append(total)
            total += step.output_tokens
    return round(statistics.fmean(sizes)) if sizes else 1


def _advance(running: list[SimSession], engine: Engine, t: float, prefill: float, sessions: list[SimSession],
             wake: float) -> float:
    """Run engine steps until a request finishes or a session comes back from its tools."""
    first = engine.step_seconds(running, prefill)
    steady = engine.step_seconds(running, 0)
    t += first
    for s in running:
        _token(s, t, 1)
    back = min((s.ready for s in sessions if s.finished is None and s not in running and s.ready > t),
               default=float("inf"))
    back = min(back, wake)
    left = min(s.steps[s.step].output_tokens - s.produced for s in running)
    fits = (back - t) / steady if steady > 0 else float("inf")
    jump = max(0, left if fits >= left else int(fits))
    if jump > 0:
        for s in running:
            _token(s, t + jump * steady, jump, t, steady)
        t += jump * steady
    for s in [s for s in running if s.produced >= s.steps[s.step].output_tokens]:
        running.remove(s)
        _finish(s, t, engine.prefill_tps)
    return t


def _token(s: SimSession, t: float, count: int, t0: float | None = None, dt: float = 0.0) -> None:
    """Count `count` tokens of a session's answer; note when moments (b) and (c) pass."""
    step = s.steps[s.step]
    if not s.moments:
        s.moments = {"a": s.arrived, "o": s.arrived}
    before = s.produced
    s.produced += count
    for name, index in (("b", step.reason_tokens), ("c", step.reason_tokens + step.call_tokens)):
        if name not in s.moments and s.produced >= index:
            s.moments[name] = t if t0 is None else t0 + max(0, index - before) * dt


def _finish(s: SimSession, end: float, prefill_tps: float) -> None:
    """The answer ended at `end`: run its calls as planned and schedule the next request."""
    step, plan = s.steps[s.step], s.plans[s.step] if s.step < len(s.plans) else Plan()
    cursor = end
    s.done.update({(s.step, i): end for i in range(len(step.calls))})  # (m): a call streamed by the answer's end
    s.past.append(s.moments)
    for i, seconds in enumerate(step.calls):
        launch = plan.launches[i] if i < len(plan.launches) else Launch()
        cursor = serve(cursor, seconds, launch, of_step(launch.step, s.past, s.moments), s.overhead, s.done)
    s.context += step.output_tokens
    nxt = s.steps[s.step + 1].prefill_tokens / prefill_tps if s.step + 1 < len(s.steps) else 0.0
    s.hidden = min(nxt, cursor - end) if plan.warm == "warm" else 0.0
    s.step, s.produced, s.moments, s.last_used, s.ready = s.step + 1, 0, {}, end, cursor
    if s.step >= len(s.steps):
        s.finished = cursor


def run(prepared: list[Any], lines: dict[str, Any], n: int, tpot: float, prefill_tps: float) -> dict[str, Any]:
    """Mean and p99 task time of each run with `n` sessions, and Tao's reductions against the baseline."""
    del lines  # the single-session timelines are not needed; kept for a uniform call
    context = mean_context([(p.trace.steps, [], 0.0) for p in prepared])
    pacing = pacing_for([(p.trace.steps, [], 0.0) for p in prepared], tpot, prefill_tps)
    out: dict[str, Any] = {"n": n, "knee": pacing.knee, "max_wait_s": round(pacing.max_wait, 1),
                           "expected_steps": pacing.expected_steps, "mean_context": context,
                           "kv_tokens": GPU.kv_tokens, "profile": GPU.name}
    for name in RUNS:
        policy = "baseline" if name == "baseline" else "tao"
        items = [(p.trace.steps, p.plans[policy], 0.0 if policy == "baseline" else TAKE) for p in prepared]
        times = simulate(items, n, tpot, prefill_tps, paced=name == "tao_cosched")
        ordered = sorted(times)
        out[name] = {"mean": round(statistics.fmean(times), 3),
                     "p99": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 3)}
    for name in RUNS[1:]:
        out[name]["mean_reduction"] = round(1 - out[name]["mean"] / out["baseline"]["mean"], 4)
        out[name]["p99_reduction"] = round(1 - out[name]["p99"] / out["baseline"]["p99"], 4)
    return out
