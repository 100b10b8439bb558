"""The Pattern Analyzer: turns the live session state into concrete, ranked candidate calls.

    analyzer = Analyzer(PatternModel.load(path))
    analyzer.observe(event)                       # every event of the session, in order
    analyzer.predict(Moment.A)                    # the previous observation has arrived
    analyzer.predict(Moment.B, Partial(text=...)) # the model's reasoning has streamed
    analyzer.predict(Moment.C, Partial(text=..., name="bash", args_prefix="pytest t"))  # the call has begun

A candidate is a runnable Tao call (`name`, `arguments`) with its canonical `key` (equal to the key
of the real call when the guess is right), effect class, probability, expected latency saved, cost,
utility, the rules that produced it (`reason`) and, for a whole-file read, the expected seconds of the
next call its result answers (`derived`: a view of, or a grep in, that file). Control flow (which kind
of call follows) and data flow (which arguments) are combined by a linear ranker; the analyzer learns
online from the session: each executed call updates the session's control-flow counts and takes one
ranker step, a larger one for slow calls (LATENCY_EMPHASIS).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.events import Event, SessionStart, ToolCall, ToolResult
from harness.speculation.prediction import dataflow, gitreads, reasoning, testruns
from harness.calls.action import KINDS, Action
from harness.calls.canonical import canonical
from harness.speculation.prediction.controlflow import START, KindModel, contexts
from harness.speculation.prediction.extract import ReasoningFacts
from harness.speculation.prediction.latency import modelled_latency
from harness.speculation.prediction.pattern_model import PatternModel, status
from harness.speculation.prediction.prefix import consistent, completions
from harness.speculation.prediction.ranker import Features, Ranker
from harness.speculation.prediction.state import SessionState
from harness.vocabulary import Moment
from tools.base import Effect

MOMENTS = tuple(moment.value for moment in Moment)
ONLINE_RATE = 0.01  # ranker step size for learning from the live session (offline training uses 0.1)
_RUN_OVERHEAD = {Effect.PURE: 0.001, Effect.SANDBOXED: 0.02}  # seconds of work to launch a speculation, by effect
# Tool seconds wasted on a wrong guess, in seconds of latency: cheap, as they run off the critical path.
COST_WEIGHT = 0.01
# The ranker learns more from slow calls: each step's rate is scaled by (1 + the call's modelled seconds) ** this,
# since a right guess on a test run saves seconds and on a file read milliseconds.
LATENCY_EMPHASIS = 0.5
TAIL_CHARS = 200  # the end of the reasoning, where the next step is announced


@dataclass(frozen=True)
class Partial:
    """What is known of the call being generated: reasoning so far, then the call's name and first characters."""

    text: str = ""
    name: str | None = None
    args_prefix: str = ""


@dataclass(frozen=True)
class Candidate:
    """A predicted call, ready to run speculatively when its effect class allows."""

    name: str
    arguments: dict[str, Any]
    key: str
    kind: str
    effect: str
    probability: float
    latency_saved: float  # seconds saved if it is right (its modelled tool latency)
    cost: float  # expected seconds of tool work spent on it if it is wrong (launch overhead included)
    utility: float  # probability * latency_saved + derived - COST_WEIGHT * cost; below 0 for calls never speculated
    reason: str
    derived: float = 0.0  # expected seconds of the next call answered from this one's result (a whole-file read
    #                       answers a view of, or a grep in, that file), from the learned rates


class Analyzer:
    """Per-session analyzer over a shared learned model."""

    def __init__(self, model: PatternModel | None = None, learn_rate: float = ONLINE_RATE, shared: bool = False,
                 read_text: Callable[[str], str | None] | None = None) -> None:
        self.model = model or PatternModel()
        self.ranker = self.model.ranker if shared else Ranker(self.model.ranker.weights)
        self.learn_rate = learn_rate
        self.read_text = read_text
        self.state = SessionState()
        self.model.words.log_odds(set())  # builds the word vectors now, not while the first answer streams
        self.local_kinds = KindModel(local_weight=1.0)
        self._step: tuple[dataflow.Pool, dict[str, float], str, str] | None = None
        self._derived: dict[str, float] = {}  # read_file key -> expected seconds of derivable next calls
        self._extended: tuple[str, dataflow.Pool] | None = None  # the step's pool with the reasoning's candidates
        self._feature_cache: dict[tuple[int, bool], tuple[dataflow.Proposal, Features]] = {}
        self._facts: ReasoningFacts | None = None
        self._pending: dict[str, tuple[list[dataflow.Proposal], list[Features], list[float]]] = {}
        self._habit_actions: list[tuple[Action, tuple[str, dict[str, Any]], float]] | None = None

    def observe(self, event: Event) -> None:
        """Feed the next event of the session; a call also teaches the ranker what was right."""
        if isinstance(event, ToolCall):
            self._learn(canonical(event.name, event.arguments, self.state.root))
        self.state.observe(event)
        if isinstance(event, (ToolResult, SessionStart, ToolCall)):
            self._step, self._extended, self._feature_cache = None, None, {}
        if isinstance(event, SessionStart):
            self._habit_actions = None
        if isinstance(event, ToolResult) and self.read_text is not None:
            self._refresh_text()

    def ahead(self, events: list[Event]) -> Analyzer:
        """A throwaway copy that has also seen `events` (a call not run yet, and its expected result), to predict
        the call after it; this analyzer, its ranker and its counts are left as they were."""
        other = copy.copy(self)
        other.state, other.local_kinds = copy.deepcopy(self.state), copy.deepcopy(self.local_kinds)
        other.learn_rate, other.read_text = 0.0, None  # learns nothing, reads nothing of a tree not yet changed
        other._step, other._extended, other._feature_cache, other._pending = None, None, {}, {}
        for event in events:
            other.observe(event)
        return other

    def predict(self, moment: Moment | str = Moment.A, partial: Partial | None = None, k: int = 3,
                order: str = "utility") -> list[Candidate]:
        """The top `k` candidates for the next call at `moment`, by utility (or by probability)."""
        if moment not in MOMENTS:
            raise ValueError(f"moment must be one of {MOMENTS}, not {moment!r}")
        moment = Moment(moment)
        pool, kind_probs, k1, signal = self._base()
        partial = partial or Partial()
        if moment is not Moment.A and partial.text:
            pool = self._with_reasoning(pool, partial.text)
        proposals = list(pool.items.values())
        if moment is Moment.C and partial.name:
            proposals = [p for p in proposals if consistent(p, partial.name, partial.args_prefix, self.state.root)]
            proposals += completions(self.state, partial.name, partial.args_prefix, {p.action.key for p in proposals})
        reasoned = moment is not Moment.A and self._facts is not None and bool(partial.text)
        features = [self._cached_features(p, kind_probs, k1, signal, reasoned) for p in proposals]
        probs = self.ranker.probabilities(moment, features)
        self._pending[moment] = (proposals, features, probs)
        ranked = sorted(zip(probs, range(len(proposals))), key=lambda pair: -pair[0])
        derived = self._derived
        if order != "utility":
            return [_candidate(proposals[index], prob, derived.get(proposals[index].action.key, 0.0))
                    for prob, index in ranked[:k]]
        width = max(k * 4, 12)
        chosen = ranked[:width] + [pair for pair in ranked[width:] if proposals[pair[1]].action.key in derived]
        candidates = [_candidate(proposals[index], prob, derived.get(proposals[index].action.key, 0.0))
                      for prob, index in chosen]
        candidates.sort(key=lambda c: -c.utility)  # the likeliest few, reordered by what they would save
        return candidates[:k]

    def _base(self) -> tuple[dataflow.Pool, dict[str, float], str, str]:
        """The moment-(a) pool and control-flow distribution of this step, built once per step."""
        if self._step is None:
            state, model = self.state, self.model
            pool = dataflow.Pool()
            dataflow.repeats(state, pool)
            dataflow.run_written(state, pool, model.interpreter)
            dataflow.mentions(state, pool, model.anchors)
            dataflow.task_paths(state, pool)
            dataflow.continue_view(state, pool)
            testruns.propose(state, pool, model.test_runners, model.interpreter)
            gitreads.propose(state, pool)
            dataflow.list_dirs(state, pool)
            dataflow.cleanup(state, pool)
            dataflow.habits(state, pool, self._habits())
            self._derived = dataflow.in_hand(state, pool, model.derive)
            ctx = self._context()
            probs = model.kinds.distribution(ctx, cache=True)
            if self.local_kinds.counts:
                local = self.local_kinds.distribution(ctx)
                probs = {kind: 0.8 * probs[kind] + 0.2 * local[kind] for kind in KINDS}
            signal = state.last.signal if state.last else "none"
            self._step = (pool, {kind: math.log(p) for kind, p in probs.items()}, ctx[-1], signal)
        return self._step

    def _habits(self) -> list[tuple[Action, tuple[str, dict[str, Any]], float]]:
        """The learned habits as actions of this workspace (computed once per session)."""
        if self._habit_actions is None:
            self._habit_actions = [(canonical(h["name"], h["arguments"], self.state.root), (h["name"], h["arguments"]),
                                    h["share"]) for h in self.model.habits]
        return self._habit_actions

    def _context(self) -> tuple[str, ...]:
        steps = self.state.steps
        last = steps[-1] if steps else None
        k2 = steps[-2].action.kind if len(steps) > 1 else START
        signal = last.signal if last is not None else "none"
        return contexts(k2, last.action.kind if last else START, status(last.ok if last else None), signal)

    def _with_reasoning(self, pool: dataflow.Pool, text: str) -> dataflow.Pool:
        """The step's pool with the reasoning's candidates (built once per step and reasoning text)."""
        if self._extended is not None and self._extended[0] == text:
            return self._extended[1]
        if self._facts is None or self._facts.text != text:
            self._facts = ReasoningFacts.of(text, self.state.root)
            self._facts_words = self.model.words.log_odds(self.model.words.words(text))
            self._feature_cache = {key: entry for key, entry in self._feature_cache.items() if not key[1]}
        extended = pool.extend()
        reasoning.propose(self.state, extended, self._facts, self.model.anchors, self.model.interpreter)
        self._extended = (text, extended)
        return extended

    def _cached_features(self, proposal: dataflow.Proposal, kind_probs: dict[str, float], k1: str, signal: str,
                         reasoned: bool) -> Features:
        """A proposal's features, computed once a step (and once more with the reasoning's, for (b) and (c))."""
        cache = self._feature_cache
        entry = cache.get((id(proposal), reasoned))
        if entry is None or entry[0] is not proposal:
            base = self._cached_features(proposal, kind_probs, k1, signal, False) if reasoned else None
            feats = self._reasoning_features(proposal, dict(base)) if base is not None else \
                self._features(proposal, kind_probs, k1, signal)
            entry = cache[(id(proposal), reasoned)] = (proposal, feats)
        return entry[1]

    def _features(self, proposal: dataflow.Proposal, kind_probs: dict[str, float], k1: str, signal: str) -> Features:
        """The features every moment shares: the rules' own, control flow, and their crosses."""
        action = proposal.action
        kind = action.kind
        feats = dict(proposal.feats)
        feats["bias"] = 1.0
        feats["cf"] = feats["cf:" + kind] = kind_probs[kind]
        feats["k:" + kind] = 1.0
        feats["kk:" + kind + "|" + k1] = 1.0
        feats["ks:" + kind + "|" + signal] = 1.0
        for rule in proposal.reasons:
            feats["rk:" + rule + "|" + k1] = 1.0
        return feats

    def _reasoning_features(self, proposal: dataflow.Proposal, feats: Features) -> Features:
        """Add what the streamed reasoning says about a proposal: its words' kind, the paths and names it cites."""
        action = proposal.action
        kind = action.kind
        if self._facts is not None:
            feats["nb"] = nb = max(-8.0, min(8.0, self._facts_words[kind])) / 4.0
            feats["nb:" + kind] = nb
            names = self._facts.names
            path = action.path
            tail = self._facts.text[-TAIL_CHARS:]  # where the model says what it will do next
            if path and (path in names or path.rsplit("/", 1)[-1] in names):
                feats["b_path"] = 1.0
                if path.rsplit("/", 1)[-1] in tail:
                    feats["b_path_tail:" + kind] = 1.0
            pattern = action.args.get("pattern")
            if isinstance(pattern, str) and pattern.split(" ", 1)[-1] in tail:
                feats["b_pattern_tail"] = 1.0
            command = proposal.arguments.get("command")
            if isinstance(command, str) and command:
                if command in self._facts.text:
                    feats["b_cmd"] = 1.0
                named = _named_in(command, self._facts.text, tail)  # its script, test file or label is named
                if named:
                    feats[f"b_arg_{named}:{kind}"] = 1.0
        return feats

    def _learn(self, actual: Action) -> None:
        """Online learning from the call that really came: control-flow counts and one ranker step."""
        self.local_kinds.add(self._context(), actual.kind)
        weight = (1.0 + modelled_latency(actual)) ** LATENCY_EMPHASIS
        for moment, (proposals, features, probs) in self._pending.items():
            target = next((i for i, p in enumerate(proposals) if p.action.key == actual.key), None)
            if self.learn_rate > 0:
                self.ranker.update(moment, features, target, rate=self.learn_rate * weight, probs=probs)
        self._pending.clear()
        self._facts = None

    def _refresh_text(self) -> None:
        """With workspace access, keep the text of the files in the last output for tree-sitter."""
        last = self.state.last
        for path, line in (last.mentions[:3] if last else []):
            if line is not None and path.endswith(".py") and path not in self.state.texts:
                text = self.read_text(path) if self.read_text else None
                if text is not None:
                    self.state.texts[path] = (self.state.version, text)


def _named_in(command: str, text: str, tail: str) -> str | None:
    """Whether a command's file or label arguments are named in the reasoning: "tail", "text" or None."""
    found = None
    for word in command.split()[1:6]:
        word = word.strip("'\"")
        if len(word) < 4 or word.startswith("-") or not ("." in word or "/" in word):
            continue
        name = word.rsplit("/", 1)[-1]
        if name in tail:
            return "tail"
        if found is None and name in text:
            found = "text"
    return found


def _candidate(proposal: dataflow.Proposal, probability: float, derived: float = 0.0) -> Candidate:
    action = proposal.action
    saved = modelled_latency(action)
    if action.effect in (Effect.MUTATING, Effect.UNKNOWN):
        cost, utility, derived = math.inf, probability - 1.0, 0.0  # never speculated; after every runnable one
    else:
        cost = _RUN_OVERHEAD.get(action.effect, 0.02) + (1.0 - probability) * saved
        utility = probability * saved + derived - COST_WEIGHT * cost
    return Candidate(proposal.name, proposal.arguments, action.key, action.kind, action.effect, probability,
                     saved, cost, utility, "+".join(proposal.reasons), derived)
