"""The one event schema: every step of a session is an event, a JSON object with `type` and `t`.

The same events feed the headless `--json` stream, trajectory files (JSONL, one event per line,
flushed as each is written), the TUI, pattern learning and replay. `t` is monotonic seconds since
session start. docs/EVENTS.md documents each type for users; `TIMING_FIELDS` lists the fields that
may differ between two runs of the same session (with and without speculation).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import types
import typing
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import IO, Any, ClassVar, cast

from harness import jsonl

SCHEMA_VERSION = 1

# Fields whose values depend on timing only; everything else must match between equivalent runs.
TIMING_FIELDS = frozenset({"t", "duration", "ttft", "decode_seconds", "started_at", "cached_tokens"})

_TYPES: dict[str, type[Event]] = {}


@dataclass
class Event:
    """Base of all events. Subclasses set `type` and add their own fields."""

    type: ClassVar[str] = ""
    t: float

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.type:
            _TYPES[cls.type] = cls

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


@dataclass
class SessionStart(Event):
    """The task and how it will be run."""

    type: ClassVar[str] = "session_start"
    session_id: str
    task: str
    repo: str
    engine: str
    tools: list[str]
    config: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""  # wall-clock ISO time, for people
    schema: int = SCHEMA_VERSION


@dataclass
class LLMStart(Event):
    """A request to the engine was sent."""

    type: ClassVar[str] = "llm_start"
    step: int
    request_id: str
    messages: int  # how many messages the prompt holds


@dataclass
class LLMFirstToken(Event):
    """The first token of the answer arrived."""

    type: ClassVar[str] = "llm_first_token"
    step: int
    request_id: str


@dataclass
class LLMEnd(Event):
    """The answer is complete: its full text (what replay re-plays) and what it cost."""

    type: ClassVar[str] = "llm_end"
    step: int
    request_id: str
    text: str
    tool_calls: list[dict[str, Any]] | None = None  # native calls, for engines that produce them
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    ttft: float | None = None
    decode_seconds: float | None = None
    context_window: int | None = None  # the engine's window in tokens, when it knows it (the context gauge)


@dataclass
class ToolCall(Event):
    """The model asked for a tool call (parsed and about to run)."""

    type: ClassVar[str] = "tool_call"
    step: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    effect: str


@dataclass
class ToolResult(Event):
    """A tool call's observation, exactly as the model sees it."""

    type: ClassVar[str] = "tool_result"
    step: int
    call_id: str
    name: str
    output: str
    is_error: bool = False
    exit_code: int | None = None
    truncated_chars: int = 0
    workspace_version: int = 0  # the version after the call
    duration: float = 0.0


@dataclass
class FormatError(Event):
    """The model's answer held no usable tool call; `error` is what the model is told."""

    type: ClassVar[str] = "format_error"
    step: int
    error: str


@dataclass
class SessionEnd(Event):
    """How the session ended. `status` is finished, limit, error or interrupted."""

    type: ClassVar[str] = "session_end"
    status: str
    reason: str
    summary: str = ""
    steps: int = 0
    submission: str = ""  # `git diff` of the workspace against HEAD, untracked files included
    output_tokens: int = 0



def never_started(task: str, repo: str, engine: str, tools: list[str], config: dict[str, Any], status: str,
                  reason: str) -> tuple[SessionStart, SessionEnd]:
    """The session_start and session_end of a session whose engine never opened: the --json stream and the TUI's
    saved task keep it as any session, its session_end last."""
    start = SessionStart(0.0, uuid.uuid4().hex[:12], task, repo, engine, tools, config,
                         datetime.now(UTC).isoformat(timespec="seconds"))
    return start, SessionEnd(0.0, status, reason)

@dataclass
class LLMDelta(Event):
    """A piece of the answer as it streams. Live only: sent to front ends, never written to a trajectory."""

    type: ClassVar[str] = "llm_delta"
    step: int
    text: str


@dataclass
class Approval(Event):
    """A shell command that may change the workspace, outside the allow-list: who let it run or refused it."""

    type: ClassVar[str] = "approval"
    step: int
    call_id: str
    command: str
    decision: str  # allow or deny
    by: str  # user, always (the user allowed this command for the session), yolo, headless (the policy)
    message: str = ""  # the user's words to the model with a denial


@dataclass
class Interrupt(Event):
    """The user stopped the current step; `stage` says what was cut: the model's answer or a tool call."""

    type: ClassVar[str] = "interrupt"
    step: int
    stage: str  # model or tool


@dataclass
class TurnEnd(Event):
    """An interactive session stopped working and waits for the user's next message."""

    type: ClassVar[str] = "turn_end"
    status: str  # finished, limit, error or interrupted, as in session_end
    reason: str
    summary: str = ""
    steps: int = 0


@dataclass
class UserMessage(Event):
    """A follow-up message from the user, appended to the conversation."""

    type: ClassVar[str] = "user_message"
    text: str


@dataclass
class SessionResume(Event):
    """A saved session reopened: the conversation was rebuilt from the events before this one."""

    type: ClassVar[str] = "session_resume"
    session_id: str
    steps: int
    started_at: str = ""  # wall-clock ISO time, for people


@dataclass
class Checkpointed(Event):
    """The work tree was recorded before a turn (interactive sessions), so that `/undo` can go back to it."""

    type: ClassVar[str] = "checkpoint"
    step: int
    turn: int  # 1 for the task, then one more for each follow-up
    commit: str  # in Tao's private checkpoint store, never in the user's repository
    tree: str
    label: str = ""


@dataclass
class Undone(Event):
    """The user undid the last turn that changed files: the work tree is back at that turn's checkpoint."""

    type: ClassVar[str] = "undo"
    step: int
    turn: int
    commit: str  # the checkpoint restored
    saved: str  # a commit of the work tree as it was just before the undo
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # files the turn had created
    recreated: list[str] = field(default_factory=list)  # files the turn had deleted
    label: str = ""  # the undone turn's message, first line


@dataclass
class ContextCleared(Event):
    """The user cleared the conversation (`/clear`): the model's next message starts from the system prompt."""

    type: ClassVar[str] = "context_clear"
    step: int
    dropped: int  # messages the model no longer sees


@dataclass
class Attached(Event):
    """What Tao added to the user message just before this event: files it mentions (@path), notes for the model."""

    type: ClassVar[str] = "attachment"
    content: str  # appended to the message the model gets
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for the user: a missing file, a truncated one


@dataclass
class ContextCompact(Event):
    """Older tool observations were replaced by short stubs so that the prompt fits the model's window."""

    type: ClassVar[str] = "context_compact"
    step: int
    reason: str  # auto (the prompt neared the window), user (/compact), too_long (the engine refused the prompt)
    messages: list[int]  # indices in the conversation (0 is the system prompt) of the observations stubbed
    tokens_before: int  # estimated prompt tokens before and after
    tokens_after: int
    freed: int
    context_window: int | None = None


@dataclass
class SpecLaunch(Event):
    """A predicted call started ahead of the model: pure tools on the workspace, sandboxed ones in an overlay."""

    type: ClassVar[str] = "spec_launch"
    step: int
    spec_id: str
    moment: str  # a: after the last observation; b: reasoning streamed; c: the call's name is known
    name: str
    arguments: dict[str, Any]
    effect: str
    version: int  # the workspace version it runs at
    reason: str  # the pattern or rule that predicted it
    probability: float
    after: dict[str, Any] | None = None  # a chain: the streamed edit ({name, arguments}) applied in its overlay first


REPEAT = "repeat"  # the spec_id of a promotion a real run of the same pure call answered (on the wire)


@dataclass
class SpecPromote(Event):
    """The model's real call matched a speculation at the same workspace version; its result was used."""

    type: ClassVar[str] = "spec_promote"
    step: int
    spec_id: str
    call_id: str
    saved: float  # seconds of tool time hidden behind the model
    waited: float  # seconds the call still waited for the speculation to finish
    sliced: bool = False  # a line range served from a speculated read of the whole file

    @classmethod
    def of_repeat(cls, t: float, step: int, call_id: str) -> SpecPromote:
        """A call answered by a real run of the same pure call at the same version: no speculation ran."""
        return cls(t, step, REPEAT, call_id, 0.0, 0.0)

    @property
    def repeat(self) -> bool:
        """Whether a real run of the same call answered it, rather than a speculation (`of_repeat`)."""
        return self.spec_id == REPEAT


@dataclass
class SpecDiscard(Event):
    """A speculation thrown away (wrong guess, stale version, failed run); its processes were killed."""

    type: ClassVar[str] = "spec_discard"
    step: int
    spec_id: str
    reason: str
    cost: float  # CPU seconds an overlay run used (its whole process tree); seconds a pure one ran
    tainted: bool = False  # its run may have seen another world than a real run (network, a limit, ...)


@dataclass
class SpecReady(Event):
    """A speculation finished running; its result waits for the model's call."""

    type: ClassVar[str] = "spec_ready"
    step: int
    spec_id: str
    duration: float  # seconds it ran


@dataclass
class SpecToggle(Event):
    """The user turned speculation on or off for the rest of the session."""

    type: ClassVar[str] = "spec_toggle"
    step: int
    enabled: bool


@dataclass
class SpecObsWarm(Event):
    """While a tool runs, the next prompt is pre-filled on a guessed observation (AOSpec)."""

    type: ClassVar[str] = "spec_obs_warm"
    step: int
    call_id: str
    source: str  # where the guess came from: last_run (the same call's last real output)
    provisional: bool  # the next Think step itself started on the guess
    predicted_chars: int


@dataclass
class SpecObsSettle(Event):
    """The real observation arrived: did it match the guess byte for byte?"""

    type: ClassVar[str] = "spec_obs_settle"
    step: int
    call_id: str
    matched: bool  # False: the warm request was aborted and nothing of the guess was used
    warmed_tokens: int | None  # prompt tokens pre-filled (chunks finished) when the real observation came


@dataclass
class SpecSummary(Event):
    """Speculation totals for the session, written just before session_end."""

    type: ClassVar[str] = "spec_summary"
    launched: int
    promoted: int
    discarded: int
    repeats: int  # calls answered by a real run of the same call at the same workspace version
    saved: float
    wasted: float
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    tainted: int = 0  # discarded speculations whose run may have seen another world (counted in discarded too)


@dataclass
class UnknownEvent(Event):
    """An event of a type this version does not know (a newer writer); kept, never dropped."""

    type: ClassVar[str] = "unknown"
    raw: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


class EventDecodeError(ValueError):
    """A trajectory line that is not a valid event, or a trajectory file that cannot be read (the message
    names the file and, for a line, its number)."""


def from_dict(data: Any) -> Event:
    """Rebuild an event from its JSON object; unknown types become UnknownEvent.

    Every field of a known type must hold a value of its declared type (a number where a float is declared),
    so that nothing downstream meets a list where it expects a string; EventDecodeError says which does not."""
    if not isinstance(data, dict):
        raise EventDecodeError(f"an event is a JSON object, not {_json_kind(data)}")
    kind, t = data.get("type"), data.get("t")
    if not isinstance(kind, str) or not _fits(t, float) or not math.isfinite(cast(float, t)):
        raise EventDecodeError(f"an event needs a string 'type' and a finite number 't', got keys {sorted(data)}")
    cls = _TYPES.get(kind)
    if cls is None:
        return UnknownEvent(t=float(cast(float, t)), raw=dict(data))
    hints = _field_types(cls)  # type: ignore[arg-type]  # a class is hashable; mypy reads its instances' __hash__
    kwargs = {k: v for k, v in data.items() if k in hints}
    wrong = [f"{name} ({_json_kind(value)})" for name, value in kwargs.items() if not _fits(value, hints[name])]
    if wrong:
        raise EventDecodeError(f"bad {kind} event: wrong type for {', '.join(wrong)}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise EventDecodeError(f"bad {kind} event: {exc}") from exc


@functools.cache
def _field_types(cls: type[Event]) -> dict[str, Any]:
    """The declared type of each field of an event class."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's declared type (an int fits float; a bool fits neither)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is float:  # NaN and infinities are floats too (Python writes them), but not ints past float's range
        return isinstance(value, float) or _fits(value, int) and abs(value) < 2**1023
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and (not args or all(_fits(item, args[0]) for item in value))
    if origin is dict:
        return isinstance(value, dict) and (not args or all(_fits(item, args[1]) for item in value.values()))
    if hint is None or hint is type(None):
        return value is None
    return isinstance(value, hint) if isinstance(hint, type) else True


def _json_kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def read_trajectory(path: str | os.PathLike[str]) -> list[Event]:
    """Read a JSONL trajectory; EventDecodeError names the file and line of any damage.

    A torn line (a crash mid-write) is skipped when it is the last line, or when the next event opens a session
    (`session_start` or `session_resume`): TrajectoryWriter starts a reopened file on a fresh line, so that a
    resumed session appends after the torn line instead of gluing its first event to it."""
    try:
        lines = jsonl.split_lines(jsonl.read_regular(path))
    except OSError as exc:
        raise EventDecodeError(f"{path}: cannot read the trajectory ({jsonl.describe(exc)})") from None
    events: list[Event] = []
    pending: tuple[int, str] | None = None  # a torn line, skipped if a session opening comes next
    for number, raw in lines:
        if not raw.strip():
            continue
        try:
            event = from_dict(jsonl.parse(raw))
        except ValueError as exc:  # DamagedJSON or EventDecodeError
            if pending is None and _torn(raw):
                pending = (number, str(exc))
                continue
            raise EventDecodeError(f"{path}:{number}: {exc}") from None
        if pending is not None and event.type not in ("session_start", "session_resume"):
            raise EventDecodeError(f"{path}:{pending[0]}: {pending[1]}")
        pending = None
        events.append(event)
    return events


def _torn(raw: bytes) -> bool:
    """Whether a bad line looks cut short by a crash: truncated JSON, or UTF-8 cut in its last character."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data" and exc.end == len(raw)
    return jsonl.torn(text)


class TrajectoryWriter:
    """Appends events to a JSONL file, flushing each one so a crash loses at most the event in flight.

    A reopened file whose last line was torn by a crash is continued on a fresh line (see read_trajectory)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # backslashreplace writes a lone surrogate in a string as its JSON escape, which reads back the same
        self._file: IO[str] = self.path.open("a", encoding="utf-8", errors="backslashreplace")
        if self._file.tell() > 0 and not _ends_with_newline(self.path):
            self._file.write("\n")
            self._file.flush()

    def write(self, event: Event) -> None:
        self._file.write(event.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            os.fsync(self._file.fileno())
            self._file.close()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def strip_timing(events: Iterable[Event]) -> Iterator[dict[str, Any]]:
    """Events as dicts without their timing fields, for comparing two runs of the same session."""
    for event in events:
        yield {k: v for k, v in event.to_dict().items() if k not in TIMING_FIELDS}


def comparable(events: Iterable[Event]) -> list[dict[str, Any]]:
    """What must be equal with speculation on and off: every event but spec_*, without timing fields.

    `session_start.config` records whether speculation was on, so it is left out too.
    """
    kept = [e for e in events if not e.type.startswith("spec_")]
    items = list(strip_timing(kept))
    for item in items:
        if item["type"] == "session_start":
            item.pop("config", None)
            item.pop("session_id", None)
        item.pop("request_id", None)
    return items
