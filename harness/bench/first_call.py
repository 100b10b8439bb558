"""`tao bench first-call`: how long a new user waits, from `tao` in a repository to the model's first tool call.

Each run copies examples/calc into a fresh git repository and state folder, opens the real `tao` in a
pseudo-terminal, types the example's task at once (while the engine loads, as an impatient user does) and
follows the session's trajectory until its first `tool_call`; then quits with Ctrl+Q. It reports, from launch:
the first frame of the opening screen, the engine ready, the first token of the first answer, the first call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench import run_module
from harness.bench.report import Report, Table, cell
from harness.demo import SCRIPT, fresh_example
from harness.errors import UsageError
from harness.machine import machine

TASK = json.loads(SCRIPT.read_text())["task"]
MOMENTS = ("frame", "ready", "first_token", "first_call")


def screen_text(raw: str) -> str:
    """What was written to a terminal, without escape sequences (enough to find words on the screen)."""
    return re.sub(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[\]P_^].*?(?:\x07|\x1b\\)|\x1b.", "", raw)


def first_events(trajectories: Path) -> dict[str, float]:
    """When (by now) the trajectory first holds a first token and a tool call: the moments seen so far."""
    seen: dict[str, float] = {}
    for path in trajectories.glob("*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                kind = json.loads(line).get("type")
            except ValueError:  # the line being written
                continue
            if kind == "llm_first_token":
                seen.setdefault("first_token", time.monotonic())
            elif kind == "tool_call":
                seen.setdefault("first_call", time.monotonic())
    return seen


def one_run(tao_args: list[str], timeout: float) -> dict[str, Any]:
    """One launch: the moments in seconds from launch (None for one not reached within `timeout`)."""
    import pexpect

    with tempfile.TemporaryDirectory(prefix="tao-first-call-") as temp:
        home = Path(temp)
        repo = fresh_example(home)
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "150", "LINES": "45",
               "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
        env.pop("TEXTUAL", None)
        trajectories = home / "state" / "tao" / "trajectories"
        moments: dict[str, float | None] = dict.fromkeys(MOMENTS)
        started = time.monotonic()
        child = pexpect.spawn(sys.executable, ["-m", "harness.cli", "--repo", str(repo), *tao_args], env=env,
                              dimensions=(45, 150), encoding="utf-8", timeout=timeout)
        try:
            child.expect("Describe the task")
            moments["frame"] = time.monotonic() - started
            child.send(TASK)
            child.send("\r")
            while moments["first_call"] is None and time.monotonic() - started < timeout:
                # Reading the screen as it comes also keeps the terminal's buffer from filling up.
                seen = child.expect(["ready in", "The engine failed", pexpect.TIMEOUT], timeout=0.25)
                if seen == 1:
                    raise RuntimeError("the engine failed to start; run `tao run --headless` with the same flags to "
                                       "read why")
                if seen == 0 and moments["ready"] is None:
                    moments["ready"] = time.monotonic() - started
                for name, at in first_events(trajectories).items():
                    moments[name] = moments[name] or at - started
            child.send("\x11")  # Ctrl+Q
            child.expect(pexpect.EOF, timeout=60)
        except (pexpect.TIMEOUT, pexpect.EOF) as exc:
            shown = screen_text(child.before or "")
            raise RuntimeError(f"`tao` stopped answering after {time.monotonic() - started:.0f} s "
                               f"({type(exc).__name__}); the last words on its screen: {' '.join(shown.split())[-400:]}"
                               ) from None
        finally:
            child.close(force=True)
        return {name: None if at is None else round(at, 1) for name, at in moments.items()} | \
            {"load_after": round(os.getloadavg()[0], 2)}


def report(result: dict[str, Any]) -> Report:
    """One row per run, seconds from launch."""
    rows = [[str(number), *(cell(run[name], ".1f", " s") for name in MOMENTS), str(run["load_after"])]
            for number, run in enumerate(result["runs"], 1)]
    return Report(result, [Table(["run", "first frame", "engine ready", "first token", "first tool call",
                                  "load after"], rows)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3, help="launches, one after another (default: 3)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a launch may take (default: 600)")
    parser.add_argument("--json", action="store_true", help="the result as JSON on stdout, the table on stderr")
    parser.add_argument("tao_args", nargs=argparse.REMAINDER, metavar="-- TAO_ARGS",
                        help="flags for `tao` after `--` (default: none, the embedded engine)")


def cmd_first_call(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise UsageError(f"--runs must be at least 1 (got {args.runs})")
    tao_args = args.tao_args[1:] if args.tao_args[:1] == ["--"] else args.tao_args
    runs = []
    for number in range(1, args.runs + 1):
        runs.append(one_run(tao_args, args.timeout))
        print(f"run {number}/{args.runs}: first tool call after {runs[-1]['first_call']} s", file=sys.stderr)
    report({"benchmark": "first-call", "tao_args": tao_args, "machine": machine(), "runs": runs}).emit(args.json)
    return 0 if all(run["first_call"] is not None for run in runs) else 1


def register(bench_subparsers: Any) -> None:
    """Add `first-call` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "first-call",
        description="Open the real `tao` in a pseudo-terminal on a fresh copy of examples/calc, type its task at "
                    "launch, and time the first frame, the engine ready, the first token and the first tool call.")
    add_arguments(parser)
    parser.set_defaults(func=cmd_first_call)


if __name__ == "__main__":
    sys.exit(run_module("python -m harness.bench.first_call", add_arguments, cmd_first_call, sys.argv[1:]))
