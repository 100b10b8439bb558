"""One world of a fidelity case: the tree built fresh, the calls made through a real Session (with a real
SpeculationScheduler when speculating), and what came of it: the observations, the calls served by the
scheduler, the final tree, crashes, escapes while the speculation ran, and the warnings Tao logged.

    world = await run_world(case, places, speculating=True)
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import subprocess
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.fidelity_cases import ESCAPE_MARK, Call, Case, Outside
from harness.bench.fidelity_tree import Places, Snapshot, build, diff_trees, remove, snapshot
from harness.engine.recorded import Recording, ReplayEngine
from harness.events import Event, SpecPromote, SpecToggle
from harness.protocol import ParsedCall
from harness.launch import SessionOptions, open_session
from harness.session import Session
from harness.calls.canonical import canonical
from harness.speculation.prediction.patterns import Candidate
from harness.vocabulary import Moment
from sandbox import Workspace
from tools import default_tools

CALL_TIMEOUT = 120.0  # seconds one call may take before it counts as a hang
Seen = tuple[str, bool, int | None, int]  # text, is_error, exit_code, truncated_chars
ROOMS = ("harness", "tools", "sandbox")  # the loggers whose warnings a world keeps


class Crashed(Exception):
    """An exception (or a hang) out of Tao's code, already described for the report."""


class OneCandidate:
    """Stands in for the pattern analyzer and proposes exactly the case's candidate: the bench is about
    promotion, not prediction (tests/test_patterns_* cover that)."""

    def __init__(self, call: Call, root: str) -> None:
        """The candidate as the real analyzer would build it: keyed by its canonical form."""
        action = canonical(call.name, call.arguments, root)
        self.candidates = [Candidate(call.name, call.arguments, action.key, action.kind, action.effect, 0.9, 1.0,
                                     0.1, 0.9, "fidelity bench")]

    def observe(self, event: Event) -> None:
        """Nothing to learn."""

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3) -> list[Candidate]:
        """The case's candidate, whatever the moment."""
        return self.candidates[:k]

    def ahead(self, events: list[Event]) -> OneCandidate:
        """For a chain past an edit: one that proposes nothing (a case is about its one speculated call)."""
        other = copy.copy(self)
        other.candidates = []
        return other


@dataclass
class World:
    """What one world returned and left behind."""

    seen: list[tuple[str, Seen]] = field(default_factory=list)  # (call label, observation)
    served: dict[str, str] = field(default_factory=dict)  # call id -> promoted, sliced or repeat
    tree: Snapshot | None = None
    crash: str | None = None
    escapes: list[str] = field(default_factory=list)
    spec_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what Tao logged at WARNING or above


PROJECT = Path(__file__).resolve().parents[2]


def frame_name(frame: traceback.FrameSummary) -> str:
    """`tools/reading.py:79 in _line_range` (project files by their path, others by their name)."""
    path = Path(frame.filename).resolve()
    return f"{path.relative_to(PROJECT) if path.is_relative_to(PROJECT) else path.name}:{frame.lineno} in {frame.name}"


def crash_text(stage: str, exc: BaseException) -> str:
    """`stage: Type: message (where)`: the innermost frame in Tao's own code, then the innermost of all."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(PROJECT) and "/bench/" not in f.filename]
    where = " <- ".join(dict.fromkeys(frame_name(f) for f in ours[-1:] + frames[-1:])) or "?"
    return f"{stage}: {type(exc).__name__}: {str(exc)[:160]} ({where})"


async def tao(stage: str, awaitable: Any) -> Any:
    """Await Tao's code; what it raises, or a hang, becomes Crashed."""
    try:
        return await asyncio.wait_for(awaitable, CALL_TIMEOUT)
    except TimeoutError:
        raise Crashed(f"{stage}: did not finish within {CALL_TIMEOUT:g} s (a hang)") from None
    except Exception as exc:  # any exception out of Tao's code is what this bench counts
        raise Crashed(crash_text(stage, exc)) from exc


def label_of(call: Call, call_id: str) -> str:
    """How a call is named in the report: its id and tool name."""
    return f"{call_id} {call.name[:40]!r}"


async def act(session: Session, call: Call, call_id: str, step: int, places: Places) -> tuple[str, Seen]:
    """One call as the session makes it: promoted, answered from the repeat cache, or run for real."""
    session.steps = step
    parsed = ParsedCall(call_id, call.name, places.fill(call.arguments))
    [observation] = await tao(f"{label_of(call, call_id)}", session.act([(parsed, None)]))
    return label_of(call, call_id), (observation.text, observation.is_error, observation.exit_code,
                                     observation.truncated_chars)


async def speculate(session: Session, case: Case, places: Places, world: World) -> list[Any]:
    """Launch the candidate, wait for it (most cases), and note any change it made before the real call."""
    assert session.speculation is not None
    before = snapshot(places)
    try:
        session.launch(Moment.A)
    except Exception as exc:
        raise Crashed(crash_text("launch", exc)) from exc
    specs = list(session.speculation.specs.values())
    tasks = [spec.task for spec in specs if spec.task is not None]
    deadline = time.monotonic() + CALL_TIMEOUT
    while case.wait and not all(task.done() for task in tasks) and time.monotonic() < deadline:
        try:  # at Tao's own priority, as once the real call waits: a busy machine starves niced runs
            for spec in specs:
                if spec.overlay is not None:
                    spec.overlay.boost()
        except Exception as exc:
            raise Crashed(crash_text("boost", exc)) from exc
        await asyncio.wait(tasks, timeout=0.25)
    world.escapes += [f"while speculating: {line}" for line in diff_trees(snapshot(places), before, ("now", "before"))]
    return specs


def after_speculation(specs: list[Any], world: World) -> None:
    """Speculative runs that failed, and hostile commands that say a forbidden step worked."""
    for spec in specs:
        if spec.task is None or not spec.task.done() or spec.task.cancelled():
            continue
        if (exc := spec.task.exception()) is not None:
            world.spec_errors.append(crash_text("speculative run", exc))
            continue
        text, command = spec.task.result().text, spec.candidate.arguments.get("command")
        if isinstance(command, str):  # the command's own text names the mark; only its output counts
            text = text.removeprefix(f"$ {command.strip()}\n")
        world.escapes += [f"speculation printed: {line.strip()[:160]}" for line in text.splitlines()
                          if ESCAPE_MARK in line]


class Warnings(logging.Handler):
    """Collects the warnings Tao logs while a world runs (a session that turns broken speculation off says why)."""

    def __init__(self) -> None:
        """Listen to every logger of Tao's rooms."""
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the message."""
        self.lines.append(f"{record.name}: {record.getMessage()}"[:300])

    def __enter__(self) -> Warnings:
        for name in ROOMS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ROOMS:
            logging.getLogger(name).removeHandler(self)



async def run_world(case: Case, places: Places, speculating: bool, keep: Path | None = None) -> World:
    """Build the tree, make the calls as a session does (with or without speculation), snapshot the result."""
    world = World()
    events: list[Event] = []
    specs: list[Any] = []
    build(case, places)
    os.environ["HOME"] = str(places.root / "home")
    workspace = Workspace(places.ws)
    session: Session | None = None
    with Warnings() as warnings:
        try:
            session = new_session(case, places, workspace, events, speculating)
            specs = await make_calls(session, case, places, world, speculating)
        except Crashed as crash:
            world.crash = str(crash)
        finally:
            await close(session, world)
            workspace.close()
    after_speculation(specs, world)
    if any(isinstance(e, SpecToggle) and not e.enabled for e in events):  # the session's safety net caught it
        world.spec_errors.append("speculation failed and the session turned it off: " + "; ".join(warnings.lines))
    world.warnings = warnings.lines
    world.served = {e.call_id: "repeat" if e.repeat else "sliced" if e.sliced else "promoted"
                    for e in events if isinstance(e, SpecPromote)}
    world.tree = snapshot(places)
    if keep is not None:
        remove(keep)
        keep.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(places.root), str(keep)], check=True)
    return world


def new_session(case: Case, places: Places, workspace: Workspace, events: list[Event], speculating: bool) -> Session:
    """A session over the case's workspace, with the one-candidate analyzer when speculating."""
    try:
        analyzer = OneCandidate(Call(case.candidate.name, places.fill(case.candidate.arguments)),
                                str(workspace.root)) if speculating else None
        return open_session(SessionOptions(warm=False), "fidelity case", ReplayEngine(Recording([])), workspace,
                            # OneCandidate stands in for the pattern Analyzer by the methods the session calls;
                            # open_session names the concrete class, not those methods.
                            [events.append], analyzer=analyzer,  # type: ignore[arg-type]
                            tools=default_tools(bash_timeout=CALL_TIMEOUT / 2, test_timeout=CALL_TIMEOUT / 2))
    except Exception as exc:
        raise Crashed(crash_text("candidate and session", exc)) from exc


async def make_calls(session: Session, case: Case, places: Places, world: World, speculating: bool) -> list[Any]:
    """The earlier calls (and outside edits), the speculation, then the real call; returns the speculations."""
    specs: list[Any] = []
    for index, step in enumerate(case.history):
        if speculating and index == len(case.history) - case.late:
            specs = await speculate(session, case, places, world)
        if isinstance(step, Outside):
            with open(places.root / places.fill(step.path), "a") as handle:  # in place: the same inode
                handle.write(step.data)
        else:
            world.seen.append(await act(session, step, f"h{index}", index + 1, places))
    if speculating and not case.late:
        specs = await speculate(session, case, places, world)
    world.seen.append(await act(session, case.real, "real", len(case.history) + 1, places))
    return specs


async def close(session: Session | None, world: World) -> None:
    """End the session's speculation and tools; a failure there is a crash too."""
    if session is None:
        return
    try:
        if session.speculation is not None:
            await tao("closing the speculation", session.speculation.close())
        await tao("closing the tools", session.close_tools())
    except Crashed as crash:
        world.crash = world.crash or str(crash)
