"""What an interactive front end (the TUI) needs from the harness: open a session, resume one, find the last.

    options = SessionOptions.from_args(args, repo)          # the `tao` command's flags (harness.launch)
    async with open_live_session(options, task=..., sinks=[...], ask=...) as live:
        await live.session.run()                              # live.session.send / interrupt / stop

The session is interactive (it waits for follow-up messages), writes its trajectory as it runs, asks
through `ask` before shell commands that may change the workspace, and sends `llm_delta` events to
`live_sinks`. A resumed session continues the same trajectory file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.approval import Ask
from harness.checkpoints import CheckpointError, Checkpoints
from harness.engine.api import engine_load
from harness.engine.factory import EngineOptions, open_engine
from harness.errors import UsageError
from harness.engine.embedded_model import MODEL_NAME
from harness.events import SessionStart, TrajectoryWriter, never_started
from harness.history import (choose_session, last_session, load_saved, new_trajectory, saved_sessions,
                             session_repo)
from harness.saved import summarize
from harness.launch import SessionOptions, open_session, session_patterns
from harness.session import EventSink, Session
from harness.paths import default_trajectory_path, state_dir
from harness.speculation.prediction.patterns import Analyzer
from harness.vocabulary import Status
from sandbox import Workspace
from tools import default_tools

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveSession:
    """An open interactive session, the trajectory it writes, and the engine it runs on."""

    session: Session
    trajectory: Path
    engine: Any


@asynccontextmanager
async def open_live_session(options: SessionOptions, *, task: str = "", resume: Path | None = None,
                            sinks: list[EventSink] | None = None, live_sinks: list[EventSink] | None = None,
                            ask: Ask | None = None, engine: Any = None) -> AsyncIterator[LiveSession]:
    """An interactive session on a new task, or on a saved one (`resume`); everything closed afterwards.

    With `engine` (already started, e.g. at the front end's launch) the session runs on it and leaves it open."""
    history = load_saved(resume) if resume is not None else None
    trajectory = resume or new_trajectory(options.trajectory or default_trajectory_path())
    start = next((e for e in history or [] if isinstance(e, SessionStart)), None)
    repo = Path(start.repo) if start is not None else options.repo
    if not repo.is_dir():
        raise UsageError(f"the session's repository {repo} is not a directory")
    analyzer = Analyzer(await asyncio.to_thread(session_patterns, options.patterns))
    owned = engine is None
    engine = await open_engine(options.engine) if owned else engine
    writer = TrajectoryWriter(trajectory)
    workspace = Workspace(repo)
    checkpoints = await open_checkpoints(repo, writer.path.stem)
    try:
        session = open_session(replace(options, interactive=True), start.task if start else task, engine, workspace,
                               [writer.write, *(sinks or [])], analyzer=analyzer, ask=ask, live_sinks=live_sinks)
        session.speculating = options.speculation  # the switch starts where --no-speculation puts it
        session.checkpoints = checkpoints
        if history is not None:
            session.restore(history)
        yield LiveSession(session, writer.path, engine)
    finally:
        writer.close()
        workspace.close()
        if checkpoints is not None:
            checkpoints.close()
        if owned:
            await engine.close()


async def open_checkpoints(repo: Path, name: str) -> Checkpoints | None:
    """The store of the work tree's checkpoints (for /undo and /diff); None, with a warning, if git cannot keep one."""
    try:
        return await asyncio.to_thread(Checkpoints.open, repo, state_dir() / "checkpoints", name)
    except (CheckpointError, OSError) as exc:
        _log.warning("no checkpoints for this session, so /undo is unavailable: %s", exc)
        return None


def last_trajectory(trajectories: Path, repo: Path | None = None) -> Path | None:
    """The newest session in the folder that ran in `repo` (with no `repo`, the newest of any); None when the folder
    holds none. With a `repo` that has none, a UsageError says so and how to choose one: another repository's
    session is never reopened in its place."""
    if repo is not None and saved_sessions(trajectories):
        return choose_session(trajectories, repo)
    return next((path for path in saved_sessions(trajectories) if session_repo(path) is not None), None)


def engine_status(engine: Any) -> dict[str, Any]:
    """What the engine tells of its load, where it can: KV cache use (0-1), requests waiting and running.

    Engines that keep no such books (replay, a remote server) leave the values None.
    """
    try:
        load = engine_load(getattr(engine, "inner", engine))  # forced replay: the real engine under it
    except Exception:  # a status read must never break the session
        load = None
    if load is None:
        return {"kv": None, "queued": None, "running": None}
    return {"kv": load.kv_usage, "queued": load.waiting, "running": load.running}


def pacing_source(engine: Any) -> Callable[[], Awaitable[dict[str, Any] | None]] | None:
    """How to ask `tao serve` where the session stands (its engine view's `pacing`); None where no gateway paces
    the session (an engine in this process, a plain vLLM server, a replay)."""
    pacing = getattr(engine, "pacing", None)
    return pacing if getattr(engine, "gateway", False) is True and callable(pacing) else None


def describe_engine(options: EngineOptions) -> str:
    """The model and engine the options ask for, in words, before any engine is started."""
    if options.kind == "replay":
        return f"replay of {options.replay.name if options.replay else '?'} (recorded answers, no model)"
    if options.kind == "openai":
        where = f"{len(options.replicas)} replicas" if options.replicas else options.base_url
        return f"{options.model or 'the served model'} at {where}"
    model = Path(options.model).name if options.model else f"{MODEL_NAME} (embedded)"
    forced = f", answers forced from {options.replay.name}" if options.replay is not None else ""
    return f"{model} on vLLM in this process{forced}"


def record_failed_start(options: SessionOptions, task: str, reason: str, status: str = Status.ERROR) -> Path:
    """A trajectory for a session whose engine never started: its session_start, then session_end `status`
    (`error`, or `interrupted` when the user quit while the engine loaded).

    The task the user typed is kept, and `tao --resume` can reopen it once the engine works. It goes to the
    state folder even with --trajectory, which stays free for the session a retry may start."""
    path = new_trajectory(default_trajectory_path())
    tools = sorted(tool.name for tool in default_tools(test_command=options.test_command))
    config = {"max_steps": options.config.max_steps, "max_seconds": options.config.max_seconds,
              "speculation": options.speculation}
    why = reason if status != Status.ERROR else f"the engine failed to start: {reason}"
    writer = TrajectoryWriter(path)
    try:
        engine = describe_engine(options.engine)
        for event in never_started(task, str(options.repo), engine, tools, config, status, why):
            writer.write(event)
    finally:
        writer.close()
    return path


def killed_session(trajectories: Path, repo: Path) -> Path | None:
    """The last session of `repo` when it ended without a session_end (tao was killed or crashed), else None."""
    path = last_session(trajectories, repo)
    summary = summarize(path) if path is not None else None
    return path if summary is not None and summary[1].ended == Status.KILLED else None
