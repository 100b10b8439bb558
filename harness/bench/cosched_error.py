"""`tao bench cosched-error`: the simulator's error against the real engine, mode by mode and level by level.

    tao bench cosched --engine embedded ... --json > real.json
    tao bench cosched --engine sim --profile cpu-bf16 ... --json > sim.json      # the same flags otherwise
    tao bench cosched-error real.json sim.json

For every level and mode both results hold (the best cap once, under its own name `cap-C`): the real and
simulated mean and p99 session time and engine time a step, and the simulator's error ((sim - real) / real)
on each. Issue 24 allows 20%: the points outside it are counted. Either file may be a `--partial` file (levels only).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.bench.report import Report, Table
from harness.errors import UsageError

ALLOWED = 0.20  # the simulator's error issue 24 allows, per mode and level
MEASURES = ("mean", "p99", "engine_s_per_step")


def read(path: Path) -> dict[str, Any]:
    """A whole `tao bench cosched --json` or `--partial` result, its levels checked, or a UsageError that says
    what the file should be."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        for level in result["levels"]:  # every level names its sessions and its modes
            if not isinstance(level["modes"], dict):
                raise TypeError(f"level {int(level['sessions'])}: its modes are not an object")
        return result
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not a `tao bench cosched --json` result ({exc}); give the files that "
                         "`tao bench cosched --json` or its --partial wrote") from None


def load(path: Path) -> dict[int, dict[str, Any]]:
    """A result's modes by level."""
    return {int(level["sessions"]): level["modes"] for level in read(path)["levels"]}


def error(real: float | None, sim: float | None) -> float | None:
    """(sim - real) / real, or None where either is missing or the real one is zero."""
    if real is None or sim is None or not real:
        return None
    return round((sim - real) / real, 4)


def compare(real: dict[int, dict[str, Any]], sim: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Every (level, mode) both results measured, with the error on each measure; and how many miss ALLOWED."""
    rows = []
    for level in sorted(set(real) & set(sim)):
        shared = [m for m in real[level] if m in sim[level]]
        for mode in [m for m in shared if m != "cap" or not any(s.startswith("cap-") for s in shared)]:
            row: dict[str, Any] = {"sessions": level, "mode": mode}
            for key in MEASURES:
                row[key] = {"real": real[level][mode].get(key), "sim": sim[level][mode].get(key),
                            "error": error(real[level][mode].get(key), sim[level][mode].get(key))}
            rows.append(row)
    if not rows:
        raise UsageError("the two results share no level and mode: run the simulator with the real run's "
                         "--sessions and --modes")
    means = [r["mean"]["error"] for r in rows if r["mean"]["error"] is not None]
    outside = sum(abs(e) > ALLOWED for e in means)
    return {"points": rows, "allowed": ALLOWED, "outside": outside, "within": len(means) - outside,
            "worst_mean_error": max(means, key=abs) if means else None}


def report(result: dict[str, Any]) -> Report:
    """One row a point: real, simulated and error for the mean, the p99 and the engine time a step."""
    def cells(measure: dict[str, Any]) -> list[str]:
        real, sim, err = measure["real"], measure["sim"], measure["error"]
        return [f"{real:.1f}" if real is not None else "-", f"{sim:.1f}" if sim is not None else "-",
                f"{err:+.0%}" if err is not None else "-"]

    rows = [[str(p["sessions"]), p["mode"], *cells(p["mean"]), *cells(p["p99"]),
             *cells(p["engine_s_per_step"])] for p in result["points"]]
    headers = ["N", "mode", "real mean", "sim mean", "error", "real p99", "sim p99", "error",
               "real s/step", "sim s/step", "error"]
    notes = [f"mean within {result['allowed']:.0%}: {result['within']} of {result['within'] + result['outside']} "
             f"points; worst {result['worst_mean_error']:+.0%}" if result["worst_mean_error"] is not None
             else "no point has both means"]
    return Report(result, [Table(headers, rows)], notes)


def cmd_error(args: argparse.Namespace) -> int:
    """Compare the two results and print the table (JSON with --json)."""
    report(compare(load(args.real), load(args.sim))).emit(args.json)
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `cosched-error` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "cosched-error", description="The simulator's error against the real engine, per mode and level, from "
                                     "two `tao bench cosched --json` results of the same flags.")
    parser.add_argument("real", type=Path, help="the real engine's result (--engine embedded)")
    parser.add_argument("sim", type=Path, help="the simulator's result (--engine sim), same flags otherwise")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    parser.set_defaults(func=cmd_error)
