"""A session without a screen (`tao run` off a terminal, `tao demo --headless`): open the engine, run one session
to its end with the human log, the trajectory and the --json stream as sinks, and close everything. Also the
headless `--resume`: a saved session goes on to its end."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from harness.approval import ApprovalPolicy
from harness.engine.factory import open_engine
from harness.errors import EngineUnavailable, TaoError, UsageError
from harness.events import Event, LLMEnd, SessionEnd, TrajectoryWriter, TurnEnd, UserMessage, never_started
from harness.flags import engine_options
from harness.history import LAST, choose_session, load_saved, new_trajectory, rebuild, unanswered
from harness.launch import SessionOptions, open_session, session_patterns
from harness.log import HumanLog, counted
from harness.saved import PICK
from harness.session import EventSink, Outcome, Session
from harness.speculation.prediction.patterns import Analyzer
from harness.paths import default_trajectory_path, state_dir
from harness.vocabulary import Status
from sandbox import Workspace
from tools import default_tools
from tools.base import Observation



async def run_session(task: str, repo: Path, args: argparse.Namespace, saved: Path | None = None,
                      log: EventSink | None = None, approval: ApprovalPolicy | None = None) -> SessionEnd:
    """Open the engine, run one session with the chosen sinks, close everything; with `saved`, the session of that
    trajectory goes on to its end (in its own repository and file) instead of a new one. `log` replaces the human
    log on stderr and `approval` the policy from the config files (the demo sets both)."""
    if args.max_steps < 1 or args.max_time <= 0:
        raise UsageError("--max-steps must be at least 1 and --max-time positive")
    if saved is None and getattr(args, "resume", None) is not None:
        raise UsageError("this command always starts a new session; continue a saved one with `tao run --resume`")
    events, repo = resumable(saved, args) if saved is not None else (None, repo)
    trajectory = saved or new_trajectory(args.trajectory or default_trajectory_path())
    quiet = getattr(args, "quiet", False)
    analyzer = None if args.no_speculation else Analyzer(session_patterns(args.patterns, announce=not quiet))
    workspace = Workspace(repo)
    try:
        engine = await open_engine(engine_options(args))  # before the trajectory: a failed start leaves no file
    except UsageError:
        workspace.close()
        raise  # bad usage: exit code 2 before any event, as documented
    except (TaoError, asyncio.CancelledError) as exc:
        workspace.close()
        interrupted = isinstance(exc, asyncio.CancelledError)
        reason = ("interrupted by the user while the engine started" if interrupted else
                  f"engine unavailable: {exc}" if isinstance(exc, EngineUnavailable) else str(exc))
        failed_start(task, repo, args, Status.INTERRUPTED if interrupted else Status.ERROR, reason)
        raise
    writer = TrajectoryWriter(trajectory)
    sinks = [writer.write] + ([] if quiet else [log or HumanLog(sys.stderr)])
    if args.json:
        sinks.append(lambda event: print(event.to_json(), flush=True))
    try:
        options = SessionOptions.from_args(args, repo, approvals=approval)
        session = open_session(options, task, engine, workspace, sinks, analyzer=analyzer,
                               kind=Session if events is None else Continued)
        if events is not None:
            replay_the_rest(engine, events)
            session.restore(events)
        end = await session.run()
    except asyncio.CancelledError:
        print(f"tao: interrupted; stopping the engine ({engine.name})...", file=sys.stderr, flush=True)
        raise
    finally:
        writer.close()
        workspace.close()
        await engine.close()
    if not quiet:
        print(f"trajectory: {trajectory}", file=sys.stderr)
    elif end.status == Status.FINISHED:
        print(end.summary, flush=True)  # the final answer, alone on stdout
    else:
        print(f"tao: session {end.status} after {counted(end.steps, 'step')}: {end.reason}", file=sys.stderr)
    return end


def failed_start(task: str, repo: Path, args: argparse.Namespace, status: str, reason: str) -> None:
    """With --json, a session_start and a session_end (`status`, `reason`) for a session whose engine never opened,
    so that a script reading the stream gets its session_end last, as for any other session."""
    if not args.json:
        return
    engine = {"openai": f"openai:{args.base_url}", "replay": f"replay:{args.replay and args.replay.name}"}.get(
        args.engine, f"vllm:{args.model or 'embedded'}")
    tools = sorted(tool.name for tool in default_tools(test_command=args.test_command))
    config = {"max_steps": args.max_steps, "max_seconds": args.max_time, "speculation": not args.no_speculation}
    for event in never_started(task, str(repo.resolve()), engine, tools, config, status, reason):
        print(event.to_json(), flush=True)


STOPPED = ("[not run to the end: the session stopped before this call's result was recorded; "
           "run it again if you still need its result]")


class Continued(Session):
    """A headless session restored from its trajectory: it goes on with the saved work at once, where an interactive
    one would wait for the user's next message."""

    def restore(self, events: list[Event]) -> None:
        """As Session.restore, and keep the calls the stopped run left without a result, to answer them first."""
        super().restore(events)
        self._open = unanswered(events)

    async def next_message(self, outcome: Outcome | None) -> bool:
        """True at the start, after answering the calls left open (every call the model made gets an answer);
        False once the work is done: a headless session takes no follow-ups."""
        if outcome is not None:
            return False
        if self._open:
            self.workspace.bump()  # a stopped call may have left the tree half changed, as after an interrupt
        for call in list(self._open):
            self.answer(call, Observation(STOPPED, is_error=True), 0.0)
        return True


def saved_session(resume: str, repo: Path) -> Path:
    """The trajectory `--resume` names: the given file, or (LAST) the newest session that ran in `repo`."""
    if resume in (LAST, PICK):  # headless: no screen to choose on, so the last one
        return choose_session(state_dir() / "trajectories", repo)
    path = Path(resume).expanduser()
    if not path.is_file():
        raise UsageError(f"--resume {path}: no such trajectory file; give a saved session's .jsonl, or use "
                         "--continue for the last session of this repository")
    return path


def resumable(saved: Path, args: argparse.Namespace) -> tuple[list[Event], Path]:
    """The events of the saved session that `--resume` continues, and its repository; a UsageError (exit code 2)
    when it cannot go on: damaged, already finished, or its repository gone."""
    if args.trajectory is not None and args.trajectory.resolve() != saved.resolve():
        raise UsageError(f"--trajectory {args.trajectory} with --resume {saved}: a resumed session goes on in its own "
                         "file; leave out --trajectory")
    events = load_saved(saved)
    history = rebuild(events, native_tools=False)
    ends = [index for index, event in enumerate(events) if isinstance(event, (TurnEnd, SessionEnd))]
    asked = ends and any(isinstance(event, UserMessage) for event in events[ends[-1]:])  # a follow-up not worked on
    if history.status == Status.FINISHED and not asked:
        raise UsageError(f"the session in {saved} already finished ({history.reason}); nothing is left to continue. "
                         f"Send it a follow-up in the TUI with `tao --resume {saved}`, or start a new session")
    repo = Path(history.start.repo)
    if not repo.is_dir():
        raise UsageError(f"the session in {saved} ran in {repo}, which is no longer a directory; it cannot go on")
    print(f"resuming {saved}: {history.steps} steps taken, last {history.status} ({history.reason})", file=sys.stderr)
    return events, repo


def replay_the_rest(engine: object, events: list[Event]) -> None:
    """A replayed run that is resumed goes on with the recording's next turn, not its first: the turns the saved
    session already took are skipped (as ForcedReplayEngine picks a turn by the answers so far), so the same
    --replay FILE plays a killed run to its end."""
    from harness.engine.recorded import Recording, ReplayEngine

    if not isinstance(engine, ReplayEngine):
        return
    taken, turns = sum(isinstance(event, LLMEnd) for event in events), engine.recording.turns
    if taken >= len(turns):
        raise UsageError(f"the replay file has {len(turns)} turns and the saved session already took {taken}; "
                         "nothing is left to replay")
    engine.recording = Recording(turns[taken:], engine.recording.task)
