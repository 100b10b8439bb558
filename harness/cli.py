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
import sys
from pathlib import Path

if multiprocessing.current_process().name != "MainProcess":
    # A process vLLM spawned (its engine core, its worker) imports this module first, as its main module: quiet
    # the libraries' known-harmless warnings before they are imported there, and let a Ctrl-C that comes before
    # vLLM handles it end the process without a traceback (Tao itself says it was interrupted).
    from harness.engine.quiet import quiet_interrupt, quiet_libraries

    quiet_libraries()
    quiet_interrupt()

from harness.errors import EngineUnavailable, TaoError, UsageError
from harness.flags import add_engine_flags, add_session_flags
from harness.headless import run_session, saved_session
from harness.vocabulary import EXIT_CODES
from harness.saved import PICK
from harness.shutdown import exits_at_once, terminate_as_interrupt


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
    if not args.headless and not args.json and not args.quiet and terminal_problem() is None:
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
    """Open the terminal UI (the tui package, imported only here). Only on a terminal: its callers have checked
    `terminal_problem` once (`main` for `tao tui` and `tao`, `cmd_run` for `tao run` on a terminal)."""
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

    from harness import cli_bench, cli_engine, cli_sandbox, cli_traces

    cli_engine.register(sub)
    cli_sandbox.register(sub)
    cli_traces.register(sub)
    from harness.swebench import command as cli_swebench

    cli_swebench.register(sub)
    cli_bench.register(sub)
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
