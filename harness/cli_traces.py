"""`tao traces import|stats|learn`: trajectories in, patterns and numbers out.

harness/cli.py wires `register(subparsers)`; each subcommand's `func` takes the parsed arguments and returns
the exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from harness.errors import UsageError
from harness.events import ToolCall
from harness.calls.canonical import canonical
from harness.speculation.prediction.pattern_model import default_model_path
from harness.speculation.prediction.training import learn
from harness.traces import FORMATS, ImportReport, load_sessions, write_session


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tao traces` with its subcommands."""
    traces = subparsers.add_parser("traces", help="import, inspect and learn from agent trajectories")
    sub = traces.add_subparsers(dest="traces_command", required=True, metavar="SUBCOMMAND")

    imp = sub.add_parser("import", help="convert trajectories of another agent into Tao trajectories")
    imp.add_argument("src", type=Path, help="a trajectory file or a directory of them")
    imp.add_argument("--from", dest="fmt", choices=sorted(FORMATS), help="the source format (default: recognised)")
    imp.add_argument("--out", type=Path, help="directory for the Tao .jsonl files (required)")
    imp.add_argument("--to", dest="to", type=Path, help=argparse.SUPPRESS)  # the old name of --out, still accepted
    imp.set_defaults(func=cmd_import)

    stats = sub.add_parser("stats", help="sessions, calls and call kinds of a directory of trajectories")
    stats.add_argument("dir", type=Path)
    stats.add_argument("--from", dest="fmt", choices=sorted(FORMATS), help="the format (default: recognised)")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(func=cmd_stats)

    learn = sub.add_parser("learn", help="learn the pattern model the live session loads")
    learn.add_argument("dir", type=Path, nargs="+", help="trajectory files or directories (any known format)")
    learn.add_argument("--out", type=Path, default=None, help=f"model file (default {default_model_path()})")
    learn.add_argument("--epochs", type=int, default=2, help="ranker training passes (default 2)")
    learn.set_defaults(func=cmd_learn)


def cmd_import(args: argparse.Namespace) -> int:
    """`tao traces import`: write each session found as a Tao trajectory."""
    args.out = import_target(args)
    report = ImportReport()
    written = 0
    for session in load_sessions(existing(args.src), args.fmt, report):
        write_session(session, args.out)
        written += 1
    _print_skipped(report)
    if not written:
        print(f"tao: {nothing_found(args.src)}", file=sys.stderr)
        return 1
    print(f"imported {written} sessions ({report.actions} calls) into {args.out}", file=sys.stderr)
    return 0


def import_target(args: argparse.Namespace) -> Path:
    """The directory `--out` names (`--to`, its old name, still works, with a note to use --out)."""
    to: Path | None = getattr(args, "to", None)
    out: Path | None = args.out
    if out is not None and to is not None and out != to:
        raise UsageError(f"--out {out} and --to {to} name two directories; give only --out")
    if out is not None:
        return out
    if to is None:
        raise UsageError("tao traces import needs --out DIR: the directory for the Tao .jsonl files")
    print("tao: --to is now --out (as in `tao traces learn`); --to still works for now", file=sys.stderr)
    return to


def cmd_stats(args: argparse.Namespace) -> int:
    """`tao traces stats`: sessions, calls and call kinds."""
    report = ImportReport()
    formats: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    for session in load_sessions(existing(args.dir), args.fmt, report):
        formats[session.format] += 1
        root = session.events[0].repo if session.events and hasattr(session.events[0], "repo") else ""
        for event in session.events:
            if isinstance(event, ToolCall):
                action = canonical(event.name, event.arguments, root)
                kinds[action.kind] += 1
                tools[action.tool] += 1
    result = {"sessions": report.sessions, "calls": report.actions, "formats": dict(formats),
              "kinds": dict(kinds.most_common()), "canonical_tools": dict(tools.most_common()),
              "skipped_records": len(report.skipped), "ignored_records": dict(report.ignored)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"sessions {result['sessions']}, calls {result['calls']}, formats {dict(formats)}")
        for kind, count in kinds.most_common():
            print(f"  {kind:12}{count:7d}{count / max(report.actions, 1):8.1%}")
        _print_skipped(report)
    if not report.sessions:
        print(f"tao: {nothing_found(args.dir)}", file=sys.stderr)
        return 1
    return 0


def cmd_learn(args: argparse.Namespace) -> int:
    """`tao traces learn`: learn the pattern model and save it."""
    report = ImportReport()
    sessions = [s.events for src in args.dir for s in load_sessions(existing(src), report=report)]
    if not sessions:
        _print_skipped(report)
        print(f"tao: {nothing_found(*args.dir)}", file=sys.stderr)
        return 1
    model = learn(sessions, epochs=args.epochs)
    path = model.save(args.out or default_model_path())
    _print_skipped(report)
    print(f"learned from {len(sessions)} sessions ({report.actions} calls): {path}", file=sys.stderr)
    return 0


KNOWN_FILES = ("mini-swe-agent *.traj.json, SWE-agent *.traj, Claude Code transcripts *.jsonl "
               "(~/.claude/projects/*/), Codex CLI rollouts *.jsonl (~/.codex/sessions/), Tao trajectories *.jsonl")


def existing(path: Path) -> Path:
    """`path` when it exists; else a UsageError that says what was expected."""
    if not path.exists():
        raise UsageError(f"{path} does not exist: give a trajectory file or a directory of them ({KNOWN_FILES})")
    return path


def nothing_found(*paths: Path) -> str:
    """The message for sources that hold no trajectory Tao can read."""
    where = ", ".join(str(p) for p in paths)
    return f"no trajectories found in {where}: looked for {KNOWN_FILES}"


def _print_skipped(report: ImportReport, limit: int = 20) -> None:
    for line in report.skipped[:limit]:
        print(f"skipped {line}", file=sys.stderr)
    if len(report.skipped) > limit:
        print(f"... and {len(report.skipped) - limit} more skipped records", file=sys.stderr)
    if report.ignored:
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(report.ignored.items(), key=lambda kv: -kv[1]))
        print(f"left out {sum(report.ignored.values())} records that hold no tool calls ({kinds})", file=sys.stderr)
