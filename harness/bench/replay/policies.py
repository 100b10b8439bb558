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
  Past a mutation (Tao's too): once an edit or a write has fully streamed (its arguments complete,
  before the model's turn ends), the call the analyzer predicts to follow it (`CallInfo.chained`, the
  first it may run by utility: pure or sandboxed) starts in an overlay where that edit (and the turn's
  edits before it) has been applied: at (m), after OVERLAY_CREATE and the edits' own seconds, with the
  sandbox's run cost. It serves a real call only if that is exactly the prediction (a recorded edit
  always lands identically in a replay).
  Kept (Tao's, and the chain's for its own): a speculation that no call of its turn used runs on, for a
  later call, as long as no call may change the tree (an edit, a shell command, anything that changes
  the workspace discards it, a miss then); at most the budget's `max_running`, the newest. It serves a
  later call it holds, from the moment it started (`Launch.step`). It keeps its place in the budget
  until then when it runs in an overlay (a kept read holds none, as the live scheduler's `admit`
  counts), whether or not it has ended, which a plan cannot know: so it may block a later launch
  that the live scheduler would allow. Speculations ruled out at (c) are the call's own, not kept ones.
- paste: patterns at (a) only. spork: speculation from the streamed answer only, at (b), (c).
  aospec: observation speculation only (every call's last output, whatever its effect). chain: speculation
  past a mutation only, as above.
- oracle: every call started when the model call that emits it starts, at no cost (a result known at
  this version served at once, as for Tao, so the oracle bounds Tao). oracle_obs: also every
  observation foreseen, so the next prefill is hidden too. oracle_speculable: the oracle restricted
  to the calls Tao may speculate at all (not mutating, not `finish`): the bound of a perfect analyzer.
- oracle_ranked, a perfect ranker of Tao's candidates: a turn's first call starts at the first of (a), (b),
  (c) whose candidates (the analyzer's PROBABILITY_ORDER_K, whatever their rank, probability or utility)
  hold it, if Tao may run it (not mutating, not `finish`), with Tao's launch and sandbox costs and nothing
  else launched; a known result is served at once. It bounds what ranking alone can win: a call that no
  candidate holds needs new candidates, not a better order.
- oracle_mut, the oracle past mutations: a call starts as soon as every input it depends on exists, at
  no cost. The oracle knows every call; a pure or sandboxed call's result depends only on the workspace
  state it runs on, so it needs only that state: the state after the last call that changed the
  workspace before it (its recorded version's maker) exists once that call has fully streamed in its
  model turn (its arguments complete, moment (m)) and has been applied, taking its own recorded seconds
  (the session's start for the initial workspace; the maker's turn's earlier mutations are taken as
  applied by then, which only makes the bound looser). So such a call may start many turns before the model asks
  for it, but not before the mutation it reads has streamed, unless `oracle` starts it sooner (at (o):
  that oracle foresees the edit itself and runs it from its turn's start, so that its state exists
  before it has streamed; the earlier of the two is taken). A known result is served at once, and a
  mutating, unknown or `finish` call, or one whose workspace is made in its own turn, starts at (o) as
  in `oracle`: every call starts no later than in `oracle`, or than in Tao's chain, so it bounds both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from harness.bench.replay.trace import PROBABILITY_ORDER_K, CallInfo, Trace, hit, runnable, speculable
from harness.bench.timeline import Launch, Miss, Plan
from harness.calls.action import TEST, changes_workspace
from harness.speculation.prediction.patterns import Candidate
from harness.speculation.prediction.prefix import agrees, first_value
from harness.speculation.prediction.rehearsal import PREFIX_CHARS
from harness.speculation.running.records import Budget
from tools.base import Effect
from tools.masking import mask_run

POLICIES = ("baseline", "tao", "paste", "spork", "aospec", "chain", "oracle", "oracle_obs", "oracle_speculable",
            "oracle_ranked", "oracle_mut")
SINGLE = ("paste", "spork", "aospec", "chain")
ORACLES = ("oracle", "oracle_obs", "oracle_speculable", "oracle_mut")  # at no cost; oracle_ranked pays Tao's
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
    later: int = 0  # of them, calls after the first of their model turn
    by_moment: dict[str, int] = field(default_factory=dict)
    warmed: int = 0
    launched: int = 0
    kept: int = 0  # results served by a speculation that outlived an earlier call (a chain's included)
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
    chain: bool = False  # past a mutation: the call after a streamed edit starts in an overlay at (m)


SPECS = {"baseline": Spec(), "tao": Spec(("a", "b", "c"), True, "sandboxed", True), "paste": Spec(("a",)),
         "spork": Spec(("b", "c")), "aospec": Spec(warm="any"), "chain": Spec(chain=True)}


@dataclass(frozen=True)
class Kept:
    """A speculation that outlived a call it was not (the tree unchanged): it may serve a later call."""

    candidate: Candidate
    launch: Launch  # how it serves, its moment of the step it started in
    miss: Miss  # what it wastes if it never serves, counted where it is discarded


def plans(trace: Trace, policy: str, budget: Budget = BUDGET) -> tuple[list[Plan], Tally]:
    """The plan of every step of `trace` under `policy` within `budget`, and what its speculation did."""
    tally = Tally()
    seen: dict[str, int] = {}  # key -> workspace version it last ran at
    last: dict[str, str] = {}  # key -> its last output
    makers: dict[int, tuple[tuple[int, int], float] | None] = {}  # version -> the call that made it, its seconds
    previous: tuple[tuple[int, int], float] | None = None
    kept: list[Kept] = []
    out = []
    for s, step_calls in enumerate(trace.calls):
        launches, warm = [], ""
        misses: list[Miss] = []
        spares: list[Spare] = []
        changed = False  # a call of the turn may have changed the tree: nothing of it is kept
        for i, info in enumerate(step_calls):
            tally.calls += 1
            makers.setdefault(info.version, previous)
            missed: list[Miss]
            spared: list[Spare]
            if policy == "oracle_mut":
                launch, missed, spared = _past(info, s, makers[info.version], seen), [], []
            else:
                launch, missed, spared = _serve(info, policy, seen, tally, budget, trace.root, kept)
            if launch.at is None and not info.first:
                launch = _spare(info, spares, misses)
            if launch.at is None and (found := _take_kept(info, kept, tally)) is not None:
                launch = found.launch
            launches.append(launch)
            misses.extend(missed)
            spares.extend(spared)
            warm = _warm(info, launch, policy, last)
            tally.warmed += warm == "warm"
            if launch.at is not None:
                tally.served += 1
                tally.later += not info.first
                tally.by_moment[launch.at] = tally.by_moment.get(launch.at, 0) + 1
            if not changes_workspace(info.action):
                seen[info.action.key] = info.version
            last[info.action.key] = info.output
            previous = ((s, i), info.seconds)
            if policy in SPECS and SPECS[policy].chain:
                if _may_change(info):
                    changed = True
                    misses += [k.miss for k in kept]
                    kept = []
                chained = _chain(step_calls[:i + 1], s)
                if chained is not None:
                    kept.append(chained)
                    tally.launched += 1
        if policy == "tao" and not changed:  # the turn's guesses that no call of it used: kept for a later one
            for spare in spares:
                misses.remove(spare.miss)
                kept.append(Kept(spare.candidate, _of_step(spare.launch, s), replace(spare.miss, step=s)))
        if s == len(trace.calls) - 1:  # the session ends: what is still kept is discarded
            kept, misses = [], misses + [k.miss for k in kept]
        misses += [k.miss for k in kept[:-budget.max_running]]
        kept = kept[-budget.max_running:]
        out.append(Plan(tuple(launches), "full" if policy == "oracle_obs" else warm, tuple(misses)))
    return out, tally


def _may_change(info: CallInfo) -> bool:
    """Whether a call may change the tree, so that no speculation outlives it (the scheduler's rule)."""
    return changes_workspace(info.action) or info.action.effect in (Effect.MUTATING, Effect.UNKNOWN)


def _take_kept(info: CallInfo, kept: list[Kept], tally: Tally) -> Kept | None:
    """The kept speculation that holds the call's result, taken out of `kept`; None when none does."""
    found = next((k for k in kept if hit(info, [k.candidate])), None)
    if found is not None:
        kept.remove(found)
        tally.kept += 1
    return found


def _of_step(launch: Launch, s: int) -> Launch:
    """A launch at a moment of step `s`, to serve a call of a later step."""
    return replace(launch, step=s) if launch.at in ("a", "b", "c") else launch


def _past(info: CallInfo, s: int, maker: tuple[tuple[int, int], float] | None, seen: dict[str, int]) -> Launch:
    """oracle_mut: a pure or sandboxed call starts once the workspace it reads exists (module docstring)."""
    if _known(info, seen):
        return Launch("r")
    if (info.action.effect not in (Effect.PURE, Effect.SANDBOXED) or info.call.name == "finish"
            or (maker is not None and maker[0][0] == s)):
        return Launch("o")
    return Launch("m", after=maker[0] if maker else None, apply=maker[1] if maker else 0.0, sooner="o")


def _chain(turn: list[CallInfo], s: int) -> Kept | None:
    """The speculation an edit or a write that has just streamed (the turn's last call so far) starts: its
    predicted follower, in an overlay where the turn's changes so far are applied (all of them edits or writes)."""
    info = turn[-1]
    if not info.chains() or not info.chained:
        return None
    changes = [c for c in turn if changes_workspace(c.action)]
    if not all(c.chains() for c in changes):
        return None  # an earlier change of the turn is no edit: Tao applies nothing else in an overlay
    candidate = next((c for c in sorted(info.chained, key=lambda c: -c.utility) if runnable(c)), None)
    if candidate is None:
        return None
    launch = Launch("m", OVERLAY_CREATE, SANDBOX_RUN, after=(s, len(turn) - 1),
                    apply=sum(c.seconds for c in changes))
    candidate = replace(candidate, effect=Effect.SANDBOXED)  # it runs in an overlay whatever its effect
    return Kept(candidate, launch, Miss("m", candidate.latency_saved, _fixed(candidate), after=launch.after))


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
           root: str, kept: list[Kept]) -> tuple[Launch, list[Miss], list[Spare]]:
    """How `policy` serves one call; `kept` are speculations of earlier calls still running (a
    chain after an edit among them), which a first call's own speculation finds in its places."""
    if policy in ("oracle", "oracle_obs"):
        return (Launch("r") if _known(info, seen) else Launch("o")), [], []
    if policy == "oracle_speculable":
        if _known(info, seen):
            return Launch("r"), [], []
        return (Launch("o") if speculable(info.action.effect, info.call.name) else Launch()), [], []
    if policy == "oracle_ranked":
        if _known(info, seen):
            return Launch("r"), [], []
        return (_ranked(info) if info.first and info.decision is not None else Launch()), [], []
    spec = SPECS[policy]
    if spec.repeats and _known(info, seen):
        return Launch("r"), [], []
    if spec.moments and info.first and info.decision is not None:
        return _speculate(info, spec.moments, tally, budget, root, kept)
    return Launch(), [], []


def _ranked(info: CallInfo) -> Launch:
    """oracle_ranked: the call started at the first moment whose candidates hold it, as if ranked first there."""
    assert info.decision is not None
    for moment in ("a", "b", "c"):
        for candidate in info.decision.top(moment, PROBABILITY_ORDER_K):
            if speculable(candidate.effect, candidate.name) and hit(info, [candidate]):
                return _launch(info, moment, candidate)
    return Launch()


def _launch(info: CallInfo, moment: str, candidate: Candidate) -> Launch:
    """How a candidate started at `moment` serves: after the analyzer's decision and the launch's own cost."""
    assert info.decision is not None
    sandboxed = candidate.effect == Effect.SANDBOXED
    delay = info.decision.seconds.get(moment, 0.0) + (OVERLAY_CREATE if sandboxed else PURE_LAUNCH)
    return Launch(moment, delay, SANDBOX_RUN if sandboxed else 0.0)


def _speculate(info: CallInfo, moments: tuple[str, ...], tally: Tally, budget: Budget,
               root: str, kept: list[Kept]) -> tuple[Launch, list[Miss], list[Spare]]:
    """Launch candidates moment by moment as the scheduler admits them; the call's own, if any, serves it.

    Speculations kept from earlier calls (a chain after an edit among them) already run and hold their
    places, whether or not they have ended (which this plan does not know); one serves if it holds the call,
    and leaves `kept` then. At (c) the call's name and first characters rule out the running speculations of
    this call that cannot be it (the live scheduler's `narrow`; kept ones wait for a later call), which frees
    their places for (c)'s candidates."""
    assert info.decision is not None
    served: Launch | None = None
    winner: Candidate | None = None
    if (found := _take_kept(info, kept, tally)) is not None:  # kept ones are never ruled out at (c): it serves
        served, winner = found.launch, found.candidate
    running: list[tuple[str, Candidate]] = [("p", k.candidate) for k in kept]  # p: kept from a past call
    running += [("p", found.candidate)] if found is not None else []
    ruled_out: list[tuple[str, Candidate]] = []
    launched: dict[int, Launch] = {id(k.candidate): k.launch for k in kept}  # id of a candidate -> how it serves
    for moment in moments:
        if moment == "c":
            prefix = first_value(info.call.arguments)[:PREFIX_CHARS]
            out = [(m, c) for m, c in running if m != "p" and not _may_be(c, info.call.name, prefix, root)]
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
            launched[id(candidate)] = _launch(info, moment, candidate)
            if served is None and hit(info, [candidate]):
                served, winner = launched[id(candidate)], candidate
    spares = [Spare(c, launched[id(c)], Miss(m, c.latency_saved, _fixed(c), after=launched[id(c)].after))
              for m, c in running if m != "p" and (served is None or c is not winner)]
    misses = [spare.miss for spare in spares]
    misses += [Miss(m, c.latency_saved, _fixed(c), until="c", after=launched[id(c)].after) for m, c in ruled_out]
    return served or Launch(), misses, spares


def _may_be(candidate: Candidate, name: str, prefix: str, root: str) -> bool:
    """Whether a running speculation can still serve the call whose name and first characters are known.
    A whole-file read stays: a view of that file or a grep in it is derived from it (see `hit`)."""
    return candidate.kind == "read" or agrees(candidate.name, candidate.arguments, name, prefix, root)


def _fixed(candidate: Candidate) -> float:
    """CPU-seconds a wrong speculation costs however short it ran."""
    return OVERLAY_CREATE + OVERLAY_DISCARD if candidate.effect == Effect.SANDBOXED else 0.0


def _admit(candidate: Candidate, running: list[tuple[str, Candidate]], budget: Budget) -> bool:
    """The live `admit`: a kept read (p) holds no place, a kept overlay run does."""
    if (not runnable(candidate) or any(c.key == candidate.key for _, c in running)
            or sum(m != "p" or c.effect == Effect.SANDBOXED for m, c in running) >= budget.max_running):
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
