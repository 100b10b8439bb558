"""`tao bench parallel`: what a turn of several reads costs: their sum, their slowest, or less.

Each session of examples/parallel (recorded with turns of several pure calls, as Claude Code writes them) is
replayed by the replay engine (`--tpot-ms` per output token) against a fresh copy of its real repository with the
real tools, three ways in rotated order: `apart` (every call of a turn moved to a turn of its own, so they run one
after another, speculation off), `together` (the recording as it is, speculation off: harness.together runs a
turn's pure calls side by side) and `written` (the same with speculation on, but an analyzer that predicts
nothing: only the calls the model has written out in full start while its answer goes on). For each turn of
several calls: its tool time (from the last of its calls being announced to the first result fed back) together
and written, against the slowest and the sum of the same calls' durations apart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.bench import recordings as recorded
from harness.bench.live import replay_session
from harness.bench.live_parts import bench_environment
from harness.bench.report import Report, Table, cell
from harness.engine.recorded import Recording, Turn
from harness.errors import UsageError
from harness.events import Event, ToolCall, ToolResult
from harness.machine import machine
from harness.protocol import CLOSE, OPEN
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer, Candidate, Partial
from harness.shutdown import terminate_as_interrupt
from harness.vocabulary import Moment, Status

SESSIONS_DIR = recorded.EXAMPLES / "parallel"
MODES = ("apart", "together", "written")


class Silent(Analyzer):
    """An analyzer that predicts nothing: speculation then runs only the calls the model has written out."""

    def predict(self, moment: Moment | str = Moment.A, partial: Partial | None = None, k: int = 3,
                order: str = "utility") -> list[Candidate]:
        """Nothing, at every moment."""
        return []


def apart(recording: Recording) -> Recording:
    """The recording with each call of a turn in a turn of its own (the reasoning stays with the first)."""
    turns: list[Turn] = []
    for turn in recording.turns:
        head, *calls = turn.text.split(OPEN)
        if len(calls) < 2 or turn.tool_calls:
            turns.append(turn)
            continue
        pieces = [OPEN + call.split(CLOSE)[0] + CLOSE for call in calls]
        turns.append(Turn(head + pieces[0]))
        turns.extend(Turn(piece) for piece in pieces[1:])
    return replace(recording, turns=turns)


def turns_of_several(events: list[Event]) -> list[dict[str, Any]]:
    """Every step with several calls: its calls (in order), the index of its first call among all the session's
    calls, and the span its calls ran in (from its last tool_call event to its first tool_result event)."""
    steps: dict[int, dict[str, Any]] = {}
    calls = 0
    for event in events:
        if isinstance(event, ToolCall):
            step = steps.setdefault(event.step, {"calls": [], "first": calls, "announced": 0.0, "answered": None})
            step["calls"].append(f"{event.name} {event.arguments.get('path', '')} {event.arguments.get('pattern', '')}")
            step["announced"] = event.t
            calls += 1
        elif isinstance(event, ToolResult) and event.step in steps and steps[event.step]["answered"] is None:
            steps[event.step]["answered"] = event.t
    return [{"step": s, "calls": v["calls"], "first": v["first"], "span": v["answered"] - v["announced"]}
            for s, v in sorted(steps.items()) if len(v["calls"]) > 1 and v["answered"] is not None]


def durations_apart(events: list[Event]) -> list[float]:
    """Every call's duration, in order, from a run with one call per turn (calls keep their order)."""
    return [event.duration for event in events if isinstance(event, ToolResult)]


async def run(sessions: list[recorded.LiveSession], repeat: int, tpot: float, cache: Path,
              progress: bool = True) -> dict[str, Any]:
    """Every session in every mode, `repeat` times in rotated order; one row per turn of several calls."""
    for session in sessions:
        await asyncio.to_thread(recorded.template, session, cache)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    one_by_one: dict[str, list[list[float]]] = {}  # session -> each apart run's durations, in call order
    for rep in range(repeat):
        for index, session in enumerate(sessions):
            shift = (rep + index) % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                played = session if mode != "apart" else replace(session, recording=apart(session.recording))
                analyzer = Silent(PatternModel()) if mode == "written" else None
                end, seconds, events, _ = await replay_session(played, analyzer, tpot, cache)
                if end.status != Status.FINISHED:
                    raise UsageError(f"{session.name} ended {end.status} ({mode}); a parallel-calls session must run "
                                     "to its finish call")
                if mode != "apart":
                    for turn in turns_of_several(events):
                        fresh = {"calls": turn["calls"], "first": turn["first"], "together": [], "written": [],
                                 "apart": []}
                        row = rows.setdefault((session.name, turn["step"]), fresh)
                        row[mode].append(turn["span"])
                else:
                    one_by_one.setdefault(session.name, []).append(durations_apart(events))
                if progress:
                    print(f"  rep {rep + 1}/{repeat} {session.name:22} {mode:8} {seconds:6.2f} s, "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    for (name, _), row in rows.items():
        row["apart"] = [durations[row["first"]:row["first"] + len(row["calls"])] for durations in one_by_one[name]]
    return {"benchmark": "parallel", "repeat": repeat, "tpot_ms": round(tpot * 1000, 3), "machine": machine(),
            "turns": [_summary(name, step, row) for (name, step), row in rows.items()]}


def _summary(name: str, step: int, row: dict[str, Any]) -> dict[str, Any]:
    """One turn's medians over the repetitions: its tool time together and written, the slowest and the sum
    apart."""
    slowest = statistics.median(max(d) for d in row["apart"])
    total = statistics.median(sum(d) for d in row["apart"])
    together, written = statistics.median(row["together"]), statistics.median(row["written"])
    return {"session": name, "step": step, "calls": len(row["calls"]), "names": row["calls"],
            "together_s": round(together, 5), "written_s": round(written, 5), "slowest_apart_s": round(slowest, 5),
            "sum_apart_s": round(total, 5), "together_over_slowest": _ratio(together, slowest),
            "together_over_sum": _ratio(together, total), "written_over_slowest": _ratio(written, slowest)}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def report(result: dict[str, Any]) -> Report:
    """One row per turn of several calls, then the totals."""
    rows = [[f"{t['session']} #{t['step']}", str(t["calls"]), cell(t["sum_apart_s"] * 1000, ".1f"),
             cell(t["slowest_apart_s"] * 1000, ".1f"), cell(t["together_s"] * 1000, ".1f"),
             cell(t["written_s"] * 1000, ".1f"), cell(t["together_over_slowest"], ".2f"),
             cell(t["written_over_slowest"], ".2f")] for t in result["turns"]]
    m = result["machine"]
    title = (f"turns of several pure calls, tool time per turn, medians of {result['repeat']} runs each way at "
             f"{result['tpot_ms']} ms per output token; {m['cores']} cores of {m['cpu'] or 'an unknown CPU'}")
    table = Table(["turn", "calls", "sum apart ms", "slowest apart ms", "together ms", "written ms",
                   "together/slowest", "written/slowest"], rows, title=title)
    return Report(result, [table])


def cmd_bench_parallel(args: argparse.Namespace) -> int:
    """`tao bench parallel`: check the options, run, print JSON and the table."""
    if args.repeat < 1 or args.tpot_ms < 0:
        raise UsageError("--repeat must be at least 1 and --tpot-ms at least 0")
    sessions = recorded.load_sessions(args.sessions, args.only)
    if not sessions:
        raise UsageError(f"no session files (*.json) in {args.sessions}")
    bench_environment()
    terminate_as_interrupt()
    report(asyncio.run(run(sessions, args.repeat, args.tpot_ms / 1000, recorded.cache_dir()))).emit()
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `tao bench parallel`."""
    bench = bench_subparsers.add_parser("parallel")
    bench.add_argument("--sessions", type=Path, default=SESSIONS_DIR,
                       help="folder of recorded sessions with turns of several calls (default: examples/parallel)")
    bench.add_argument("--only", nargs="+", metavar="NAME", help="only these sessions (file names without .json)")
    bench.add_argument("--repeat", type=int, default=5, help="runs of each session each way (default 5)")
    bench.add_argument("--tpot-ms", type=float, default=10.0,
                       help="the replayed model's milliseconds per output token (default 10)")
    bench.set_defaults(func=cmd_bench_parallel)
