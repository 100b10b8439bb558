"""One recorded trajectory made ready for the trace replay: its steps, its calls and the analyzer's decisions.

Token counts: a step's output tokens are the recorded ones where the trace has them (mini-swe-agent's
`completion_tokens`, hidden thinking included, which streams before the visible text), else its text's
length / CHARS_PER_TOKEN. Its new prompt tokens are those of what came back since the last model call
(observations, format errors; the first call: the agent's instructions and the task): the previous
prompt and answer are in the prefix cache. Tool seconds come from `tool_seconds` (harness.bench.replay.tool_times).
The analyzer's decisions are made by harness.speculation.prediction.rehearsal, which never looks ahead,
nor at a result of the call's own turn; right after an edit or a write has streamed (its result, and those
of the turn's calls before it, not yet known) it is also asked for the call that follows
(`CallInfo.chained`). A call has fully streamed where its first argument ends in the answer's text
(hidden thinking first), or else at the answer's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.bench.predict import covered
from harness.bench.replay.tool_times import tool_seconds
from harness.bench.timeline import Step
from harness.events import Event, FormatError, LLMEnd, SessionStart, ToolCall, ToolResult
from harness.calls.action import EDIT, WRITE, Action
from harness.calls.canonical import canonical
from harness.speculation.prediction.extract import reasoning_part
from harness.speculation.prediction.patterns import Analyzer, Candidate
from harness.speculation.prediction.rehearsal import PREFIX_CHARS, Decision, replay
from harness.protocol import ParsedCall
from harness.together import groups
from harness.vocabulary import Moment
from tools import TOOL_EFFECTS
from tools.base import Effect

CHARS_PER_TOKEN = 3.4
INSTRUCTION_TOKENS = 2_000  # the agent's system prompt and instructions (mini-swe-agent's first prompt: ~2.7k tokens)
RESULT_TEMPLATE_TOKENS = 10  # the wrapping of an observation (<returncode>, <output>, role markers)
CALL_OPEN_TOKENS = 4  # the fence or tag that opens a call, and its name
PROBABILITY_ORDER_K = 12  # candidates kept per moment; the scheduler's top-k by utility is taken among them


def tokens(text: str) -> int:
    """Tokens of a text, estimated from its length."""
    return round(len(text) / CHARS_PER_TOKEN)


@dataclass
class CallInfo:
    """One real call of the trajectory and what the replay needs to know of it."""

    call: ToolCall
    action: Action
    seconds: float
    measured: bool
    output: str = ""
    version: int = 0  # workspace version before the call
    decision: Decision | None = None
    first: bool = True  # the first call of its model turn (the only one speculated ahead of the answer)
    chained: list[Candidate] | None = None  # an edit's or write's: the next call predicted once it streamed

    def chains(self) -> bool:
        """Whether the call is an edit or a write, applied in an overlay once streamed, to run its follower."""
        return self.action.effect == Effect.MUTATING and self.action.kind in (EDIT, WRITE)


@dataclass
class Trace:
    """A trajectory as steps, with the calls of each step."""

    session_id: str
    root: str = ""  # the workspace path the agent's commands name
    steps: list[Step] = field(default_factory=list)
    calls: list[list[CallInfo]] = field(default_factory=list)

    def all_calls(self) -> list[CallInfo]:
        """Every call, in order."""
        return [c for group in self.calls for c in group]


def build(session_id: str, events: list[Event], latency: str = "trace") -> Trace:
    """The steps and calls of a trajectory (no analyzer yet); unmeasured tools timed by table `latency`."""
    trace = Trace(session_id)
    root, pending, version = "", INSTRUCTION_TOKENS, 0
    turns: list[dict[str, object]] = []
    open_calls: dict[str, CallInfo] = {}
    for event in events:
        if isinstance(event, SessionStart):
            root, pending = event.repo, INSTRUCTION_TOKENS + tokens(event.task)
            trace.root = root
        elif isinstance(event, LLMEnd):
            turns.append({"prefill": pending, "text": event.text, "output": event.output_tokens})
            pending = 0
            trace.calls.append([])
        elif isinstance(event, ToolCall) and trace.calls:
            action = canonical(event.name, event.arguments, root)
            info = CallInfo(event, action, 0.0, False, version=version, first=not trace.calls[-1])
            trace.calls[-1].append(info)
            open_calls[event.call_id] = info
        elif isinstance(event, ToolResult) and event.call_id in open_calls:
            info = open_calls.pop(event.call_id)
            info.seconds, info.measured = tool_seconds(info.action, event.duration, latency)
            info.output, version = event.output, event.workspace_version
            pending += tokens(event.output) + RESULT_TEMPLATE_TOKENS
        elif isinstance(event, FormatError):
            pending += tokens(event.error) + RESULT_TEMPLATE_TOKENS
    for turn, calls in zip(turns, trace.calls):
        trace.steps.append(_step(turn, calls))
    return trace


def _step(turn: dict[str, object], calls: list[CallInfo]) -> Step:
    text = str(turn["text"])
    visible = tokens(text)
    output = max(int(turn["output"] or 0), visible)  # type: ignore[call-overload]
    hidden = output - visible  # thinking, streamed before the visible text
    if not calls:
        return Step(int(turn["prefill"]), output, output, 0, ())  # type: ignore[call-overload]
    command = calls[0].call.arguments.get("command")
    reasoning = reasoning_part(text, command if isinstance(command, str) else None)
    reason = min(output, hidden + tokens(reasoning))
    prefix = CALL_OPEN_TOKENS + round(PREFIX_CHARS / CHARS_PER_TOKEN)
    return Step(int(turn["prefill"]), output, reason, min(prefix, output - reason),  # type: ignore[call-overload]
                tuple(c.seconds for c in calls), side_by_side(calls), streamed(text, hidden, output, calls))


def streamed(text: str, hidden: int, output: int, calls: list[CallInfo]) -> tuple[int, ...]:
    """Output tokens streamed when each call is complete: where its last argument ends in the answer's text
    (every argument found there, in order), else the answer's end (Claude Code's text holds no call)."""
    out, at = [], 0
    for info in calls:
        values = [v for v in info.call.arguments.values() if isinstance(v, str) and v]
        end = at
        for value in values:
            found = text.find(value, end)
            end = found + len(value) if found >= 0 else -1
            if end < 0:
                break
        if not values or end < 0:
            out.append(output)
            continue
        at = end
        out.append(min(output, hidden + tokens(text[:at])))
    return tuple(out)


def side_by_side(calls: list[CallInfo]) -> tuple[int, ...]:
    """Each call's group as Tao's loop would run the turn: neighbouring pure calls together (harness.together)."""
    entries = [(ParsedCall(c.call.call_id, c.call.name, c.call.arguments), None) for c in calls]
    cut = groups(entries, lambda name: TOOL_EFFECTS.get(name, Effect.UNKNOWN))
    return tuple(number for number, group in enumerate(cut) for _ in group)


def decide(trace: Trace, analyzer: Analyzer, events: list[Event]) -> None:
    """Attach the analyzer's decisions (made without looking ahead) to the trace's calls."""
    by_id = {c.call.call_id: c for c in trace.all_calls()}

    def after_edit(event: Event) -> None:
        info = by_id.get(event.call_id) if isinstance(event, ToolCall) else None
        if info is not None and info.chains():
            info.chained = analyzer.predict(Moment.A, None, PROBABILITY_ORDER_K, order="probability")

    for decision in replay(analyzer, events, k=PROBABILITY_ORDER_K, on_observed=after_edit):
        info = by_id.get(decision.call.call_id)
        if info is not None:
            info.decision = decision


def speculable(effect: str, name: str) -> bool:
    """Whether a call of this effect class and tool may run ahead of the model (not mutating, unknown, `finish`)."""
    return effect not in (Effect.MUTATING, Effect.UNKNOWN) and name != "finish"


def runnable(candidate: Candidate) -> bool:
    """Whether the scheduler may start a candidate at all (effect class, not `finish`, worth it)."""
    return speculable(candidate.effect, candidate.name) and candidate.utility > 0.0 and candidate.probability >= 0.05


def hit(info: CallInfo, launched: list[Candidate]) -> bool:
    """Whether the launched candidates hold the call's result (the same call, or a range of a whole read)."""
    return covered(info.action, launched)
