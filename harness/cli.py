"""The `tao` command: run a task headless or in the TUI, run the demo, and the helper subcommands.

`tao` alone (or with only flags, e.g. `tao --resume`) opens the TUI in the current repository; so does
`tao run` on a terminal without `--headless`. Elsewhere (CI, pipes) `tao run` stays headless.

Exit codes of `tao run`: 0 the model finished the task, 1 the engine or harness failed, 2 bad usage,
3 a step or time limit was reached, 130 interrupted; `tao demo` exits the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
import uuid
from pathlib import Path

if multiprocessing.current_process().name != "MainProcess":
    # A process vLLM spawned (its engine core, its worker) imports this module first, as its main module: quiet
    # the libraries' known-harmless warnings before they are imported there, and let a Ctrl-C that comes before
    # vLLM handles it end the process without a traceback (Tao itself says it was interrupted).
    from harness.engine.quiet import quiet_interrupt, quiet_libraries

    quiet_libraries()
    quiet_interrupt()

from harness.approval import MODES, ApprovalPolicy, load_policy
from harness.engine.factory import ENGINES, EngineOptions, open_engine
from harness.errors import EngineUnavailable, TaoError, UsageError
from harness.events import Event, LLMEnd, SessionEnd, TrajectoryWriter, TurnEnd, UserMessage, never_started
from harness.history import LAST, choose_session, load_saved, new_trajectory, rebuild, unanswered
from harness.log import HumanLog, counted
from harness.saved import PICK
from harness.session import EventSink, Outcome, Session, SessionConfig
from harness.shutdown import exits_at_once, terminate_as_interrupt
from harness.speculation.pattern_model import PatternModel, installed_model
from harness.speculation.past import PAST_SECONDS, past_sessions
from harness.speculation.patterns import Analyzer
from sandbox import Workspace
from tools import default_tools
from harness.vocabulary import EXIT_CODES, Status
from tools.base import Observation


def state_dir() -> Path:
    """Where Tao keeps trajectories: $XDG_STATE_HOME/tao (default ~/.local/state/tao)."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "tao"


def default_trajectory_path() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return state_dir() / "trajectories" / f"{stamp}-{uuid.uuid4().hex[:6]}.jsonl"


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=ENGINES, default="vllm",
                       help="vllm: in-process vLLM (default, embedded model); openai: a running "
                            "OpenAI-compatible server; replay: recorded turns")
    group.add_argument("--model", help="model name or directory for --engine vllm (default: embedded SmolLM2)")
    group.add_argument("--base-url", help="server URL for --engine openai, e.g. http://localhost:8000/v1")
    group.add_argument("--replay", type=Path, help="trajectory .jsonl or JSON turn script for --engine replay; with --engine vllm, "
                            "its answers are forced token by token through the real engine")
    group.add_argument("--seconds-per-token", type=float, default=0.0,
                       help="replay pacing: simulated seconds per output token (default 0)")
    group.add_argument("--no-constrain", action="store_true",
                       help="do not constrain decoding to well-formed calls (for strong models)")
    group.add_argument("--max-model-len", type=int,
                       help="context length for --engine vllm (default: 8192 embedded, else the model's); "
                            "with --engine replay, a window the replayed prompts must fit")


def add_session_flags(parser: argparse.ArgumentParser, quiet: bool = False) -> None:
    parser.add_argument("--headless", action="store_true",
                        help="no TUI: a human log on stderr (the default when not on a terminal)")
    approvals = parser.add_mutually_exclusive_group()
    approvals.add_argument("--mode", choices=list(MODES),
                           help="approvals for this run: read-only (nothing changes), ask (commands and edits ask; "
                                "the default), auto-edit (edits run, commands ask), full-auto (nothing asks); "
                                "default from ~/.config/tao/config.toml and .tao.toml")
    approvals.add_argument("--yolo", action="store_true", help="the same as --mode full-auto")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON event per line on stdout")
    if quiet:
        output.add_argument("-q", "--quiet", action="store_true",
                            help="for scripts: print only the final answer (the model's summary) on stdout, and no log; "
                                 "a session that does not finish says why on stderr (exit codes as usual)")
    parser.add_argument("--max-steps", type=int, default=30, help="model turns before stopping (default 30; demo 8)")
    parser.add_argument("--max-time", type=float, default=1800.0, help="wall-clock limit in seconds (default 1800)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="output tokens per model turn (default 1024)")
    parser.add_argument("--trajectory", type=Path,
                        help=f"trajectory file to write (default {state_dir()}/trajectories/<time>.jsonl)")
    parser.add_argument("--test-command", help="the project's test command for run_tests (default: detected)")
    parser.add_argument("--no-speculation", action="store_true",
                        help="run every tool call only when the model asks (no speculation)")
    parser.add_argument("--no-warm", action="store_true",
                        help="do not pre-fill the next prompt on a guessed observation while a test runs")
    parser.add_argument("--provisional", action="store_true",
                        help="also start the next model step on the guessed observation (kept only if it "
                             "matches the real one byte for byte)")
    parser.add_argument("--patterns", type=Path,
                        help="learned pattern model for speculation (default ~/.cache/tao/patterns.json "
                             "if present; build one with `tao traces learn`); each session first adapts it "
                             "to your 20 newest past sessions in the state folder")
    try:
        parser.add_argument("--resume", nargs="?", const=PICK, metavar="TRAJECTORY",
                            help="continue a saved session to its end, in its own repository and trajectory file: "
                                 "the given file; without one, the TUI lists this repository's sessions to choose "
                                 "from (headless: the last one). The engine and limits come from this command's "
                                 "flags")
    except argparse.ArgumentError:
        pass  # `tao tui` defines its own --resume, with the same meaning
    parser.add_argument("--continue", dest="resume", action="store_const", const=LAST,
                        help="continue the last session of this repository (--resume without a file lets you choose)")


def engine_options(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(kind=args.engine, replay=args.replay, seconds_per_token=args.seconds_per_token,
                         model=args.model, base_url=args.base_url, constrained=not args.no_constrain,
                         max_model_len=args.max_model_len)


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
    analyzer = None if args.no_speculation else Analyzer(session_patterns(args.patterns, announce=not getattr(args, "quiet", False)))
    config = SessionConfig(max_steps=args.max_steps, max_seconds=args.max_time, max_tokens=args.max_tokens)
    workspace = Workspace(repo)
    quiet = getattr(args, "quiet", False)
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
        tools = default_tools(test_command=args.test_command)
        session = (Session if events is None else Continued)(
            task, engine, workspace, tools, config, sinks, analyzer=analyzer, warm=not args.no_warm,
            provisional=args.provisional, approval=approval or load_policy(repo, args.yolo, args.mode))
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
    taken = model.adapt(past_sessions(state_dir() / "trajectories"), seconds=PAST_SECONDS)
    if announce and taken:
        print(f"speculation: adapted to your past sessions ({taken} newest, {time.perf_counter() - started:.1f} s)",
              file=sys.stderr)
    return model


def resolve_task(args: argparse.Namespace) -> str:
    """The task from the argument, a file (@path alone), or the replayed recording; `@path` within a longer task is
    a mention (harness.mentions), attached to the task for the model."""
    if args.engine == "replay" and args.replay is None:
        raise UsageError("--engine replay needs --replay FILE (a recorded trajectory .jsonl or a JSON turn script)")
    task = args.task
    if task and task.startswith("@") and len(task.split()) == 1:
        path = Path(task[1:])
        if not path.is_file():
            raise UsageError(f"task file {path} does not exist")
        return path.read_text(encoding="utf-8")
    if not task and args.replay:
        from harness.engine.recorded import load_recording

        task = load_recording(args.replay).task
    if not task:
        raise UsageError('give the task as an argument: tao run "fix the failing test" (or @FILE)')
    return task


def cmd_run(args: argparse.Namespace) -> int:
    repo = Path(args.repo).expanduser()
    if not repo.is_dir():
        raise UsageError(f"--repo {repo} is not a directory")
    if not args.headless and not args.json and not args.quiet and sys.stdin.isatty() and sys.stdout.isatty():
        return cmd_tui(args, task=resolve_task(args) if args.task or args.replay else "")
    if args.resume is not None:
        if args.task:
            raise UsageError("--resume continues the saved session's own task; leave out the task (send follow-ups "
                             "in the TUI: `tao --resume`), or start a new session without --resume")
        end = asyncio.run(run_session("", repo, args, saved=saved_session(args.resume, repo)))
    else:
        end = asyncio.run(run_session(resolve_task(args), repo, args))
    return EXIT_CODES.get(end.status, 1)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the agent on a fresh copy of the bundled example: in the TUI on a terminal, else headless (harness.demo)."""
    from harness import demo

    if args.resume is not None:
        raise UsageError("the demo always starts a new session on a fresh copy of the example; leave out --resume")
    plan = demo.prepare(args)
    if args.screenshot is not None or (not args.headless and not args.json and terminal_problem() is None):
        from tui.demo_app import main as demo_tui

        return demo_tui(args, plan)
    return demo.run_headless(args, plan)


def cmd_tui(args: argparse.Namespace, task: str = "") -> int:
    """Open the terminal UI (the tui package, imported only here, and only on a terminal)."""
    if problem := terminal_problem():
        raise UsageError(problem)
    from tui.app import main as tui_main

    return tui_main(args, Path(args.repo).expanduser(), task=task, resume=getattr(args, "resume", None))


def terminal_problem() -> str | None:
    """Why the TUI cannot open here (its input or output is not a terminal), or None: without one it would
    draw escape codes into a pipe forever, so `tao` says so before textual or an engine is loaded."""
    missing = [name for name, stream in (("input", sys.stdin), ("output", sys.stdout))
               if stream is None or not stream.isatty()]
    if not missing:
        return None
    which = f"its {missing[0]} is not one" if len(missing) == 1 else "its input and output are not terminals"
    return (f"the terminal UI needs a terminal, but {which} (a pipe, a file or /dev/null).\n"
            '  To run a task without a terminal: tao run --headless "TASK" '
            "(add --json for one JSON event per line on stdout).")


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args`, but an unknown flag is reported with the usage of the (sub)command it was given
    to (`tao run --frobnicate` shows `tao run`'s usage), not the top-level one."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        chosen = parser
        while sub := next((a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)), None):
            name = getattr(args, sub.dest, None)
            if name not in sub.choices:
                break
            chosen = sub.choices[name]
        chosen.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tao", description="Tao: a coding agent whose tools run ahead of the model.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the agent on a task", description="Run the agent on a task in a repository.")
    run.add_argument("task", nargs="?", help="the task text, or @FILE to read it from a file")
    run.add_argument("--repo", default=".", help="the repository to work in (default: current directory)")
    add_session_flags(run, quiet=True)
    add_engine_flags(run)
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="watch Tao fix the bundled example (scripted answers, real engine)",
                          description="Watch Tao fix the bug of the bundled example in a fresh copy: the answers "
                                      "are scripted and forced token by token through the real engine, while the "
                                      "tools, the speculation and the timing are real. The TUI on a terminal, "
                                      "else (or with --headless) a log.")
    add_session_flags(demo)
    add_engine_flags(demo)
    demo.add_argument("--screenshot", type=Path, metavar="SVG",
                      help="run the demo's TUI off-screen and save its last screen as an SVG (for the README)")
    # The script has six turns; a few spare steps, and room for its longest answer.
    demo.set_defaults(func=cmd_demo, max_steps=8, max_tokens=256)

    tui = sub.add_parser("tui", help="open the terminal UI (what `tao` alone does)")
    tui.add_argument("--repo", default=".", help="the repository to work in (default: current directory)")
    tui.add_argument("--resume", nargs="?", const=PICK, type=str, metavar="TRAJECTORY",
                     help="reopen a saved session: the given file, or one chosen from this repository's sessions")
    add_session_flags(tui)
    add_engine_flags(tui)
    tui.set_defaults(func=cmd_tui)

    from harness import cli_engine, cli_sandbox, cli_traces
    from harness.bench import cosched as bench_cosched
    from harness.bench import fidelity as bench_fidelity
    from harness.bench import first_call as bench_first_call
    from harness.bench import fuzz_streams as bench_fuzz_streams
    from harness.bench import fuzz_traces as bench_fuzz_traces
    from harness.bench import live as bench_live
    from harness.bench.replay import command as bench_replay
    from harness.bench import sandbox as bench_sandbox
    from harness.bench import warmdelay as bench_warmdelay

    cli_engine.register(sub)
    cli_sandbox.register(sub)
    cli_traces.register(sub)
    from harness.swebench import command as cli_swebench

    cli_swebench.register(sub)
    bench = sub.add_parser("bench", help="measure Tao on this machine (JSON and a table)")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    cli_engine.register_bench(bench_sub)
    bench_live.register(bench_sub)
    bench_cosched.register(bench_sub)
    bench_fidelity.register(bench_sub)
    bench_first_call.register(bench_sub)
    bench_fuzz_streams.register(bench_sub)
    bench_fuzz_traces.register(bench_sub)
    bench_replay.register(bench_sub)
    bench_sandbox.register(bench_sub)
    bench_warmdelay.register(bench_sub)
    cli_traces.register_bench(bench_sub)
    return parser


@exits_at_once
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["tui", *argv]  # `tao` and `tao --resume` open the TUI
    if argv[0] == "tui" and not {"-h", "--help"} & set(argv) and (problem := terminal_problem()):
        print(f"tao: {problem}", file=sys.stderr)  # before building the parser: fast, even from a script
        return 2
    args = parse_args(build_parser(), argv)
    terminate_as_interrupt()
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"tao: {exc}", file=sys.stderr)
        return 2
    except EngineUnavailable as exc:
        print(f"tao: engine unavailable: {exc}", file=sys.stderr)
        return 1
    except TaoError as exc:
        print(f"tao: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tao: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
