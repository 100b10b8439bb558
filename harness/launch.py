"""The one place a Session is built: from SessionOptions (what the user or the caller chose) and the pieces a
front end owns (engine, workspace, sinks, analyzer).

    options = SessionOptions.from_args(args, repo)      # or SessionOptions(config=..., warm=False) in code
    session = open_session(options, task, engine, workspace, sinks, analyzer=analyzer)
    end = await session.run()

The CLI, the TUI (harness.interactive), batch runs (harness.swebench) and the benchmarks all build their sessions
here, so a new session knob is added once, with its default, on SessionOptions.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.approval import ApprovalPolicy, Ask, load_policy
from harness.engine.api import Engine
from harness.engine.factory import EngineOptions
from harness.errors import UsageError
from harness.flags import engine_options
from harness.session import EventSink, Session, SessionConfig
from harness.speculation.prediction.past import PAST_SECONDS, past_sessions
from harness.speculation.prediction.pattern_model import PatternModel, installed_model
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.training import adapt
from harness.speculation.running.records import Budget
from harness.paths import state_dir
from sandbox import Workspace
from tools import default_tools
from tools.base import Tool


@dataclass(frozen=True)
class SessionOptions:
    """How to run a session: every knob, with its default. `tao`'s flags fill it (`from_args`); batch runs and
    benchmarks write theirs out in code."""

    repo: Path = Path(".")
    """The repository to work in (the front ends open the workspace on it)."""
    engine: EngineOptions = field(default_factory=EngineOptions)
    """Which engine to open and how (front ends that open their own engine)."""
    config: SessionConfig = field(default_factory=SessionConfig)
    """The limits: model turns, wall-clock seconds per user message, output tokens per turn."""
    approvals: ApprovalPolicy | None = None
    """Judges shell commands and edits before they run; None: every call runs without asking (batch runs and
    benchmarks, which have no one to ask)."""
    speculation: bool = True
    """Run predicted tool calls ahead of the model (the caller passes the analyzer that predicts them)."""
    patterns: Path | None = None
    """The learned pattern model for speculation; None: the user's own, else the one Tao ships (`load_patterns`)."""
    warm: bool = True
    """Pre-fill the next prompt on a guessed observation while a slow tool runs (needs speculation)."""
    provisional: bool = False
    """Also start the next model step on the guessed observation, kept only if it matches the real one."""
    test_command: str | None = None
    """The project's test command for run_tests; None: detected."""
    trajectory: Path | None = None
    """The trajectory file to write; None: a new one in the state folder (`default_trajectory_path`)."""
    interactive: bool = False
    """Wait for the user's follow-up messages after each piece of work (the TUI), instead of ending."""
    budget: Budget = field(default_factory=Budget)
    """How much speculative work may run at once."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, repo: Path, approvals: ApprovalPolicy | None = None) -> SessionOptions:
        """Options from `tao`'s session and engine flags (harness.flags); `approvals` replaces the policy of the
        config files and --mode/--yolo (the demo's)."""
        config = SessionConfig(max_steps=args.max_steps, max_seconds=args.max_time, max_tokens=args.max_tokens)
        policy = approvals if approvals is not None else load_policy(repo, args.yolo, args.mode)
        return cls(repo, engine_options(args), config, policy, not args.no_speculation, args.patterns,
                   not args.no_warm, args.provisional, args.test_command, args.trajectory)


def open_session(options: SessionOptions, task: str, engine: Engine, workspace: Workspace,
                 sinks: list[EventSink] | None = None, *, tools: list[Tool] | None = None,
                 analyzer: Analyzer | None = None, ask: Ask | None = None, live_sinks: list[EventSink] | None = None,
                 kind: type[Session] = Session) -> Session:
    """A session on `task` as the options say, not yet run. `tools` default to the standard set (with the options'
    test command); `analyzer` predicts the calls speculation runs (None: no speculation); `ask` is the front end's
    question to the user for the approval policy; `kind` a Session subclass (a resumed headless session)."""
    tools = default_tools(test_command=options.test_command) if tools is None else tools
    # a copy per session: its "always" answers are its own, and the options stay as given
    approval = options.approvals.with_ask(ask) if options.approvals is not None else None
    return kind(task, engine, workspace, tools, options.config, sinks, analyzer=analyzer, budget=options.budget,
                warm=options.warm, provisional=options.provisional, approval=approval,
                interactive=options.interactive, live_sinks=live_sinks)


def load_patterns(path: Path | None) -> PatternModel:
    """The learned pattern model: the given file, else the user's own (`tao traces learn`) if present, else
    the one Tao ships (learned from other agents' trajectories), else an empty model (rules only)."""
    if path is not None and not path.is_file():
        raise UsageError(f"--patterns {path} does not exist; build one with `tao traces learn DIR --out {path}`")
    path = path or installed_model()
    if path is None:
        return PatternModel()  # rules and online learning still predict; a learned model predicts better
    try:
        return PatternModel.load(path)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"tao: ignoring the damaged pattern model {path} ({exc}); rebuild it with `tao traces learn`",
              file=sys.stderr)
        return PatternModel()


def session_patterns(path: Path | None, announce: bool = False) -> PatternModel:
    """The learned model (`load_patterns`), adapted to the user's newest past sessions in the state folder."""
    model = load_patterns(path)
    started = time.perf_counter()
    taken = adapt(model, past_sessions(state_dir() / "trajectories"), seconds=PAST_SECONDS)
    if announce and taken:
        print(f"speculation: adapted to your past sessions ({taken} newest, {time.perf_counter() - started:.1f} s)",
              file=sys.stderr)
    return model
