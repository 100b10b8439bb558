"""The runs of the trace replay, each a way of turning a trajectory's calls into a timeline `Plan`.

- baseline: the serial loop; every call runs when the model has asked for it.
- tao: Tao's scheduler: at (a), (b) and (c) the analyzer's top-k by utility are started when they may
  be (not mutating, not `finish`, utility > 0, probability >= 0.05, within the scheduler's Budget: by
  default top-3, at most 4 running and cpu_count // 2 in overlays), pure ones on the workspace,
  sandboxed ones in an overlay (its costs measured in docs/BENCHMARKS.md, "Sandbox"); a result
  already known at this workspace version is served at once; a sandboxed call that runs for real
  warms the next prompt on its last output (AOSpec's guess).
  A call after the first of a turn is served by a speculation launched for the turn that is its exact
  call, as the loop keeps those when it takes the first (`SpeculationScheduler.expect`).
- paste: patterns at (a) only. spork: speculation from the streamed answer only, at (b), (c).
  aospec: observation speculation only (every call's last output, whatever its effect).
- oracle: every call started when the model call that emits it starts, at no cost (a result known at
  this version served at once, as for Tao, so the oracle bounds Tao). oracle_obs: also every
  observation foreseen, so the next prefill is hidden too. oracle_speculable: the oracle restricted
  to the calls Tao may speculate at all (not mutating, not `finish`): the bound of a perfect analyzer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.bench.replay.trace import CallInfo, Trace, hit, runnable
from harness.bench.timeline import Launch, Miss, Plan
from harness.calls.action import TEST, changes_workspace
from harness.speculation.prediction.patterns import Candidate
from harness.speculation.prediction.prefix import agrees, first_value
from harness.speculation.prediction.rehearsal import PREFIX_CHARS
from harness.speculation.running.scheduler import Budget
from tools.base import Effect
from tools.masking import mask_run

POLICIES = ("baseline", "tao", "paste", "spork", "aospec", "oracle", "oracle_obs", "oracle_speculable")
SINGLE = ("paste", "spork", "aospec")
BUDGET = Budget()  # Tao's scheduler budget on this machine: top-3, 4 running, cpu_count // 2 in overlays
# Measured costs (docs/BENCHMARKS.md, "Sandbox" and "Live speculation"), seconds:
PURE_LAUNCH = 0.001  # starting a pure speculation on the workspace
OVERLAY_CREATE, OVERLAY_DISCARD = 0.0015, 0.0022  # an overlayfs upper dir made, and thrown away
SANDBOX_RUN = 0.037  # a run inside the sandbox (namespaces, mounts) beyond the same run outside
TAKE = 0.0002  # `take`: the real call matched against the speculations, on every call's critical path


@dataclass
class Tally:
    """What a policy's speculation did over one trajectory."""

    calls: int = 0
    served: int = 0  # results taken from a speculation or a known result
    by_moment: dict[str, int] = field(default_factory=dict)
    warmed: int = 0
    launched: int = 0
    ruled_out_wrongly: int = 0  # right speculations that a call's name and first characters ruled out


@dataclass(frozen=True)
class Spare:
    """A speculation of the turn that did not serve its first call: it may serve a later call of the turn."""

    candidate: Candidate
    launch: Launch
    miss: Miss


@dataclass(frozen=True)
class Spec:
    """Which moments a policy speculates at, and whether it reuses known results and warms."""

    moments: tuple[str, ...] = ()
    repeats: bool = False
    warm: str = ""  # "", "sandboxed" (Tao: slow calls that ran for real), "any" (AOSpec-like)


SPECS = {"baseline": Spec(), "tao": Spec(("a", "b", "c"), True, "sandboxed"), "paste": Spec(("a",)),
         "spork": Spec(("b", "c")), "aospec": Spec(warm="any")}


def plans(trace: Trace, policy: str, budget: Budget = BUDGET) -> tuple[list[Plan], Tally]:
    """The plan of every step of `trace` under `policy` within `budget`, and what its speculation did."""
    tally = Tally()
    seen: dict[str, int] = {}  # key -> workspace version it last ran at
    last: dict[str, str] = {}  # key -> its last output
    out = []
    for step_calls in trace.calls:
        launches, warm = [], ""
        misses: list[Miss] = []
        spares: list[Spare] = []
        for info in step_calls:
            tally.calls += 1
            launch, missed, spared = _serve(info, policy, seen, tally, budget, trace.root)
            if launch.at is None and not info.first:
                launch = _spare(info, spares, misses)
            launches.append(launch)
            misses.extend(missed)
            spares.extend(spared)
            warm = _warm(info, launch, policy, last)
            tally.warmed += warm == "warm"
            if launch.at is not None:
                tally.served += 1
                tally.by_moment[launch.at] = tally.by_moment.get(launch.at, 0) + 1
            if not changes_workspace(info.action):
                seen[info.action.key] = info.version
            last[info.action.key] = info.output
        out.append(Plan(tuple(launches), "full" if policy == "oracle_obs" else warm, tuple(misses)))
    return out, tally


def _known(info: CallInfo, seen: dict[str, int]) -> bool:
    return info.action.effect not in (Effect.MUTATING, Effect.UNKNOWN) and seen.get(info.action.key) == info.version


def _spare(info: CallInfo, spares: list[Spare], misses: list[Miss]) -> Launch:
    """A later call of the turn served by a speculation launched for the turn, which is then no miss."""
    found = next((spare for spare in spares if hit(info, [spare.candidate])), None)
    if found is None:
        return Launch()
    spares.remove(found)
    misses.remove(found.miss)
    return found.launch


def _serve(info: CallInfo, policy: str, seen: dict[str, int], tally: Tally, budget: Budget,
           root: str) -> tuple[Launch, list[Miss], list[Spare]]:
    if policy in ("oracle", "oracle_obs"):
        return (Launch("r") if _known(info, seen) else Launch("o")), [], []
    if policy == "oracle_speculable":
        if _known(info, seen):
            return Launch("r"), [], []
        may = info.action.effect not in (Effect.MUTATING, Effect.UNKNOWN) and info.call.name != "finish"
        return (Launch("o") if may else Launch()), [], []
    spec = SPECS[policy]
    if spec.repeats and _known(info, seen):
        return Launch("r"), [], []
    if not spec.moments or not info.first or info.decision is None:
        return Launch(), [], []
    return _speculate(info, spec.moments, tally, budget, root)


def _speculate(info: CallInfo, moments: tuple[str, ...], tally: Tally, budget: Budget,
               root: str) -> tuple[Launch, list[Miss], list[Spare]]:
    """Launch candidates moment by moment as the scheduler admits them; the call's own, if any, serves it.

    At (c) the call's name and first characters rule out running speculations that cannot be it (the
    live scheduler's `narrow`), which frees their places for (c)'s candidates."""
    assert info.decision is not None
    running: list[tuple[str, Candidate]] = []
    ruled_out: list[tuple[str, Candidate]] = []
    launched: dict[int, Launch] = {}  # id of a running candidate -> how it would serve a call
    served: Launch | None = None
    winner: Candidate | None = None
    for moment in moments:
        if moment == "c":
            prefix = first_value(info.call.arguments)[:PREFIX_CHARS]
            out = [(m, c) for m, c in running if not _may_be(c, info.call.name, prefix, root)]
            running = [pair for pair in running if pair not in out]
            ruled_out += out
            if winner is not None and any(c is winner for _, c in out):
                served, winner = None, None  # ruled out wrongly: the call runs unless (c) starts it again
                tally.ruled_out_wrongly += 1
        for candidate in info.decision.top(moment, budget.k, "utility"):
            if not _admit(candidate, running, budget):
                continue
            running.append((moment, candidate))
            tally.launched += 1
            sandboxed = candidate.effect == Effect.SANDBOXED
            delay = info.decision.seconds.get(moment, 0.0) + (OVERLAY_CREATE if sandboxed else PURE_LAUNCH)
            launched[id(candidate)] = Launch(moment, delay, SANDBOX_RUN if sandboxed else 0.0)
            if served is None and hit(info, [candidate]):
                served, winner = launched[id(candidate)], candidate
    spares = [Spare(c, launched[id(c)], Miss(m, c.latency_saved, _fixed(c))) for m, c in running
              if served is None or c is not winner]
    misses = [spare.miss for spare in spares]
    misses += [Miss(m, c.latency_saved, _fixed(c), until="c") for m, c in ruled_out]
    return served or Launch(), misses, spares


def _may_be(candidate: Candidate, name: str, prefix: str, root: str) -> bool:
    """Whether a running speculation can still serve the call whose name and first characters are known.
    A whole-file read stays: a view of that file or a grep in it is derived from it (see `hit`)."""
    return candidate.kind == "read" or agrees(candidate.name, candidate.arguments, name, prefix, root)


def _fixed(candidate: Candidate) -> float:
    """CPU-seconds a wrong speculation costs however short it ran."""
    return OVERLAY_CREATE + OVERLAY_DISCARD if candidate.effect == Effect.SANDBOXED else 0.0


def _admit(candidate: Candidate, running: list[tuple[str, Candidate]], budget: Budget) -> bool:
    if (not runnable(candidate) or any(c.key == candidate.key for _, c in running)
            or len(running) >= budget.max_running):
        return False
    return (candidate.effect != Effect.SANDBOXED
            or sum(c.effect == Effect.SANDBOXED for _, c in running) < budget.max_sandboxed)


def _warm(info: CallInfo, launch: Launch, policy: str, last: dict[str, str]) -> str:
    """Whether the next prompt is pre-filled on a right guess of this call's observation."""
    mode = SPECS[policy].warm if policy in SPECS else ""
    if not mode or launch.at is not None or info.action.key not in last or info.call.name == "finish":
        return ""
    if mode == "sandboxed" and info.action.effect != Effect.SANDBOXED:
        return ""
    before, now = last[info.action.key], info.output
    if info.action.kind == TEST:  # as Tao's run_tests shows them: durations, temp paths, pids masked
        before, now = mask_run(before), mask_run(now)
    return "warm" if before == now else ""
