"""`tao bench cosched`: many recorded sessions against one engine, with and without the co-scheduler.

    tao bench cosched --sessions 1,4,16 --engine embedded                  # the real vLLM CPU engine
    tao bench cosched --sessions 1,8,32,64,128,192 --engine sim            # simulated, GPU-class profile

At each level N, N sessions start together (examples/sessions round robin, each task tagged so that
only the system prompt is shared) in three modes (harness.bench.cosched_run): `fcfs` (no speculation,
no pacing: plain vLLM), `spec` (speculation, no pacing) and `cosched` (speculation and the co-scheduler's
Pacing policy). Reported per level and mode: mean and p99 session time, engine time per step, time
waiting for admission, cached prompt share; and the ratios the issue's targets are about. `--engine sim`
runs harness.engine.sim on a virtual clock (harness.bench.vclock), `--profile gpu` (default), `cpu`,
`cpu-bf16` or a calibration JSON (`tao bench calibrate`); the co-scheduler paces by the same profile (for
the embedded engine: this CPU's built-in profile unless `--profile` says otherwise, with the engine's own
KV cache size). `--repeat` runs every level again, the modes' order rotating. JSON with `--json`, and a
table; `--partial` keeps the levels done so far in a file, for long real-engine runs.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from harness.bench import cosched_run as runner
from harness.bench import run_module
from harness.bench.calibrate import kv_tokens
from harness.bench.live_parts import model_choice, quantile
from harness.bench.report import Report, Table, cell
from harness.bench.vclock import VirtualClockLoop
from harness.coscheduler import Pacing
from harness.engine.sim import PROFILES, Profile, SimEngine
from harness.errors import UsageError
from harness.machine import machine
from harness.vocabulary import Status

SAME = 0.01  # "never worse": a ratio up to 1.01 counts as equal (schedules differ by chance in every mode)


def cache_dir() -> Path:
    """Books and the shared workspace path: next to `tao bench live`'s cache."""
    from harness.bench.recordings import cache_dir as live_cache

    return live_cache().parent / "cosched"


def local_profile() -> str:
    """The built-in profile of this machine's CPU engine: bf16 where the CPU computes it natively, else float32."""
    from harness.engine.vllm_local import cpu_has_bf16

    return "cpu-bf16" if cpu_has_bf16() else "cpu"


def profile_for(name: str) -> Profile:
    """A built-in profile (gpu, cpu) or a calibration JSON."""
    if name in PROFILES:
        return PROFILES[name]
    path = Path(name)
    if not path.is_file():
        raise UsageError(f"--profile {name}: not one of {', '.join(PROFILES)} and not a file")
    return Profile.load(path)


async def run_levels(levels: list[int], engine_kind: str, profile: Profile, workload: runner.Workload,
                     most_groups: int, progress: bool, partial: Path | None = None,
                     wanted: tuple[str, ...] = runner.MODES, repeat: int = 1) -> tuple[list[dict[str, Any]], Pacing]:
    """Every level in every mode, `repeat` times, and the pacing used. The modes of a level run back to back,
    their order rotating by level and by repetition, so that drifts in the machine's load hit every mode.
    The real engine is paced by the profile's step times and its own KV cache size, which differs from
    machine to machine (dtype, VLLM_CPU_KVCACHE_SPACE)."""
    root = cache_dir() / "workspace" / "repo"
    root.mkdir(parents=True, exist_ok=True)
    shared = await _embedded() if engine_kind == "embedded" else None
    if shared is not None:
        profile = replace(profile, kv_tokens=kv_tokens(shared))
    pacing = runner.pacing_for(profile, workload)
    out: list[dict[str, Any]] = []
    try:
        for index, level in enumerate(levels):
            row: dict[str, Any] = {"sessions": level, "modes": {}, "order": []}
            runs: dict[str, list[list[dict[str, Any]]]] = {mode: [] for mode in wanted}  # per repetition
            stats: dict[str, list[dict[str, Any]]] = {mode: [] for mode in wanted}
            cpu: dict[str, float] = {mode: 0.0 for mode in wanted}  # this process's CPU seconds, per mode
            for rep in range(repeat):
                shift = (index + rep) % len(runner.MODES)
                modes = [m for m in runner.MODES[shift:] + runner.MODES[:shift] if m in wanted]
                row["order"].append(modes)
                for mode in modes:
                    groups = []
                    cpu_before = time.process_time()
                    for g, members in enumerate(runner.groups(level, workload, most_groups)):
                        engine = shared or SimEngine(profile)
                        if shared is not None:
                            await runner.warm_system_prompt(shared, workload, root)
                        tag = f"{mode}-{level}-{rep}-{g}-{time.time_ns() % 10**8}"
                        groups.append(await runner.run_group(engine, workload, members, mode, pacing, tag, root))
                        if isinstance(engine, SimEngine):
                            stats[mode].append(asdict(engine.stats))
                            await engine.close()
                    runs[mode].append(groups)
                    cpu[mode] += time.process_time() - cpu_before
                    summary = mode_summary([g for done in runs[mode] for g in done], stats[mode])
                    # Tao's process: session loops, analyzer, co-scheduler, and vLLM's front end or the simulator;
                    # never the engine core, which runs in a process of its own.
                    summary["process_cpu_s"] = round(cpu[mode], 2)
                    summary["repetition_means"] = [mode_summary(done, [])["mean"] for done in runs[mode]]
                    row["modes"][mode] = summary
                    if partial is not None:  # a long run keeps what it measured should it be stopped
                        partial.write_text(json.dumps({"levels": [*out, row]}, indent=1) + "\n", encoding="utf-8")
                    if progress:
                        last = summary["repetition_means"][-1]
                        print(f"  {level:4} sessions  {mode:8} repetition {rep + 1}/{repeat}: mean {last:9.2f} s; "
                              f"so far mean {summary['mean']:9.2f} s  p99 {summary['p99']:9.2f} s  "
                              f"({summary['runs']} session runs; {summary['process_cpu_s']:.1f} CPU-s in this process)",
                              file=sys.stderr, flush=True)
            out.append(row)
    finally:
        if shared is not None:
            await shared.close()
    return out, pacing


async def _embedded() -> Any:
    from harness.engine.factory import EngineOptions, start_local

    return await start_local(EngineOptions(attach=False))


def mode_summary(groups: list[dict[str, Any]], engine_stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and p99 session time and what went into it, over every session of every group."""
    sessions = [s for g in groups for s in g["sessions"]]
    times = [s["seconds"] for s in sessions]
    steps = sum(s["steps"] for s in sessions) or 1
    prompt = sum(s["prompt_tokens"] for s in sessions) or 1
    actions: dict[str, int] = {}
    for group in groups:
        for key, count in group["cosched"].items():
            actions[key] = actions.get(key, 0) + count
    summary = {
        "mean": round(statistics.fmean(times), 3), "p99": round(quantile(times, 0.99), 3), "runs": len(times),
        "engine_s_per_step": round(sum(s["engine_seconds"] for s in sessions) / steps, 4),
        "queue_s_per_step": round(sum(s["queue_wait"] for s in sessions) / steps, 4),
        "cached_share": round(sum(s["cached_tokens"] for s in sessions) / prompt, 4),
        "promoted": round(statistics.fmean(s["promoted"] for s in sessions), 2),
        "warm": {"settled": sum(s["warm_settled"] for s in sessions),
                 "matched": sum(s["warm_matched"] for s in sessions)},
        "cosched": actions,
        "not_finished": sum(s["status"] != Status.FINISHED for s in sessions),
    }
    if engine_stats:
        summary["engine"] = {key: round(sum(e[key] for e in engine_stats), 3) for key in engine_stats[0]}
    return summary


def _ratio(modes: dict[str, Any], a: str, b: str, q: str) -> float | None:
    """Mode a's statistic q over mode b's, to 4 places; None when either mode is missing or b's is zero."""
    return round(modes[a][q] / modes[b][q], 4) if a in modes and b in modes and modes[b][q] else None


def ratios(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: spec and cosched against fcfs, and cosched against spec, for the mean and the p99."""
    out = []
    for row in levels:
        r = functools.partial(_ratio, row["modes"])
        out.append({"sessions": row["sessions"],
                    "spec_fcfs_mean": r("spec", "fcfs", "mean"), "spec_fcfs_p99": r("spec", "fcfs", "p99"),
                    "cosched_fcfs_mean": r("cosched", "fcfs", "mean"), "cosched_fcfs_p99": r("cosched", "fcfs", "p99"),
                    "cosched_spec_mean": r("cosched", "spec", "mean"), "cosched_spec_p99": r("cosched", "spec", "p99")})
    return out


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, level by level: met, missed, or not measured (no level in range)."""
    def check(name: str, key: str, bound: float, least: int) -> dict[str, Any]:
        hits = {r["sessions"]: r[key] for r in rows if r["sessions"] >= least and r[key] is not None}
        return {"target": name, "levels": hits, "met": all(v <= bound for v in hits.values()) if hits else None}
    never_worse = {r["sessions"]: (r["cosched_spec_mean"], r["cosched_spec_p99"]) for r in rows
                   if r["cosched_spec_mean"] is not None}
    return {"mean_le_0.75_fcfs_from_16": check("mean <= 0.75 x fcfs at >= 16", "cosched_fcfs_mean", 0.75, 16),
            "p99_le_0.7_fcfs_from_64": check("p99 <= 0.7 x fcfs at >= 64", "cosched_fcfs_p99", 0.7, 64),
            "never_worse_than_spec": {"target": f"cosched <= spec (mean and p99, within {SAME:.0%})",
                                      "levels": never_worse,
                                      "met": all(a <= 1 + SAME and b <= 1 + SAME for a, b in never_worse.values())
                                      if never_worse else None}}


def run(levels: list[int], engine_kind: str, profile_name: str | None, only: list[str] | None, model: Path | None,
        most_groups: int | None, progress: bool = True, partial: Path | None = None,
        modes: tuple[str, ...] = runner.MODES, traces: Path | None = None,
        holdout: float | None = None, repeat: int = 1) -> dict[str, Any]:
    """The whole benchmark: load the workload, run every level in every mode, summarize."""
    if engine_kind not in ("sim", "embedded"):
        raise UsageError(f"--engine must be sim or embedded, not {engine_kind!r}")
    if not levels or min(levels) < 1:
        raise UsageError("--sessions takes a comma-separated list of positive counts, e.g. 1,8,32")
    if holdout is not None and not 0 < holdout < 1:
        raise UsageError(f"--holdout {holdout}: give the held-out share as a fraction between 0 and 1, e.g. 0.3")
    if holdout is not None and traces is None:
        raise UsageError("--holdout splits --traces; give --traces DIR too")
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: give a positive number of repetitions")
    if most_groups is not None and most_groups < 1:
        raise UsageError(f"--groups {most_groups}: give a positive number of runs per level")
    profile = profile_for(profile_name or (local_profile() if engine_kind == "embedded" else "gpu"))
    model_path, model_note = model_choice(model)
    most = most_groups if most_groups is not None else (1 if engine_kind == "embedded" else 8)
    started = time.perf_counter()
    before = machine()

    # On the real clock: a session's book is recorded by running the real tools, whose timeouts a virtual
    # clock would fire at once (every subprocess wait jumps the clock ahead).
    workload = asyncio.run(runner.load_workload(only, model_path, cache_dir(), traces, holdout))
    if long := workload.too_long(profile):
        raise UsageError(f"{len(long)} of {len(workload.sessions)} sessions outgrow the engine's context window "
                         f"({profile.max_model_len} tokens, profile {profile.name}), e.g. {long[0]}; pick "
                         "sessions with --only, or an engine with a longer window (--profile gpu)")
    factory = VirtualClockLoop if engine_kind == "sim" else None
    with asyncio.Runner(loop_factory=factory) as loop:
        rows, pacing = loop.run(run_levels(levels, engine_kind, profile, workload, most, progress, partial, modes,
                                           repeat))
    result_ratios = ratios(rows)
    return {"config": {"engine": engine_kind, "profile": profile.name, "levels": levels, "groups_at_most": most,
                       "repeat": repeat,
                       "model": model_note, "pacing": asdict(pacing), "sessions": [s.name for s in workload.sessions],
                       "workload": str(traces) if traces is not None else "examples/sessions", "holdout": holdout,
                       "wall_seconds": round(time.perf_counter() - started, 1)},
            "levels": rows, "ratios": result_ratios, "targets": targets(result_ratios),
            "machine": {**before, "load_after": machine()["load"]}}


def report(result: dict[str, Any]) -> Report:
    """Each level and mode, then the ratios between modes, then the targets and the machine."""
    config = result["config"]
    title = (f"tao bench cosched: engine {config['engine']} ({config['profile']}), pacing knee "
             f"{config['pacing']['knee']}, KV cache {config['pacing']['kv_tokens']:,} tokens, max wait "
             f"{config['pacing']['max_wait']:.1f} s; model: {config['model']}")
    modes = Table(["N", "mode", "mean s", "p99 s", "eng s/step", "queue s/step", "cached", "promo", "warm ok/all"],
                  title=title, left=2, rows=[
        [str(row["sessions"]), mode, f"{m['mean']:.2f}", f"{m['p99']:.2f}", f"{m['engine_s_per_step']:.3f}",
         f"{m['queue_s_per_step']:.3f}", f"{m['cached_share']:.1%}", f"{m['promoted']:.2f}",
         f"{m['warm']['matched']}/{m['warm']['settled']}"]
        for row in result["levels"] for mode in runner.MODES if mode in row["modes"] for m in [row["modes"][mode]]])
    keys = ("spec_fcfs_mean", "spec_fcfs_p99", "cosched_fcfs_mean", "cosched_fcfs_p99", "cosched_spec_mean",
            "cosched_spec_p99")
    ratios = Table(["N", "spec/fcfs mean", "p99", "cosched/fcfs mean", "p99", "cosched/spec mean", "p99"], rows=[
        [str(r["sessions"]), *(cell(r[key], ".3f") for key in keys)] for r in result["ratios"]])
    verdicts = {True: "met", False: "NOT met", None: "not measured"}
    notes = [f"target {key}: {verdicts[target['met']]}" for key, target in result["targets"].items()]
    m = result["machine"]
    notes.append(f"machine: {m['cores']} cores, {m['cpu']}, load {m['load']} -> {m['load_after']}; "
                 f"{config['wall_seconds']:.0f} s of wall time")
    return Report(result, [modes, ratios], notes)


HELP = """\
Run N recorded sessions (examples/sessions, round robin) at once against one engine, for each N of
--sessions, in three modes:
  fcfs     no speculation, every request straight to the engine (plain vLLM)
  spec     Tao's speculation, no pacing
  cosched  Tao's speculation, requests paced by the co-scheduler (harness.coscheduler.Pacing)
The model's answers are the recorded ones, forced through the engine; tools answer with their recorded
output after their recorded time. Reports mean and p99 session time per N and mode, and the ratios
the co-scheduler's targets are stated in."""

EXAMPLES = """\
examples:
  tao bench cosched --sessions 1,8,32,64,128,192 --engine sim            # simulated A100 (virtual clock)
  tao bench cosched --sessions 1,4,16 --engine embedded --json > r.json  # the real vLLM CPU engine
  T=../shared/traces/mini-swe-agent-gemini-3-pro-swebench-verified       # real SWE-bench trajectories:
  tao bench cosched --engine sim --traces $T --holdout 0.3
  tao bench cosched-plot sim.json r.json --out docs/cosched.png"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench cosched`."""
    parser.add_argument("--sessions", default="1,8,32,64,128,192",
                        help="comma-separated counts of concurrent sessions (default 1,8,32,64,128,192)")
    parser.add_argument("--engine", default="sim", choices=("sim", "embedded"),
                        help="sim (default) or embedded (real vLLM)")
    parser.add_argument("--profile", help="the engine profile: gpu, cpu, cpu-bf16, or a `tao bench calibrate --out` "
                                         "JSON; the simulator runs it, the co-scheduler paces by its step times and "
                                         "(sim only) its KV cache (default: gpu for sim; for embedded cpu-bf16 on a "
                                         "CPU with native bf16, else cpu)")
    parser.add_argument("--only", help="comma-separated recorded session names (default: all)")
    parser.add_argument("--traces", type=Path, help="drive the sessions from other agents' trajectories under this "
                                                    "directory (any `tao traces import` format) instead of "
                                                    "examples/sessions; tools take their modelled latency")
    parser.add_argument("--holdout", type=float, help="with --traces: only the held-out split of `tao bench predict` "
                                                      "(a stable hash of the instance id), e.g. 0.3")
    parser.add_argument("--model", type=Path, help="learned pattern model for the speculating modes")
    parser.add_argument("--groups", type=int, help="runs per level below the workload's size, to cover every "
                                                   "session (default: 8 for sim, 1 for embedded)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every level this many times, the modes' order rotating each time (default 1)")
    parser.add_argument("--modes", default=",".join(runner.MODES),
                        help="comma-separated modes to run (default fcfs,spec,cosched)")
    parser.add_argument("--partial", type=Path, help="write the levels measured so far to this JSON file after "
                                                     "every mode (for long real-engine runs)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_cosched(args: argparse.Namespace) -> int:
    """Run the benchmark and print it."""
    from harness.bench.calibrate import parse_counts

    levels = parse_counts(args.sessions, "--sessions")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(runner.MODES):
        raise UsageError(f"--modes {args.modes!r}: choose from {', '.join(runner.MODES)}")
    result = run(levels, args.engine, args.profile, only, args.model, args.groups, partial=args.partial, modes=modes,
                 traces=args.traces, holdout=args.holdout, repeat=args.repeat)
    report(result).emit(args.json)
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `cosched` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "cosched",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=HELP, epilog=EXAMPLES)
    add_arguments(parser)
    parser.set_defaults(func=cmd_cosched)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.bench.cosched ...` (the same options as `tao bench cosched`)."""
    return run_module("python -m harness.bench.cosched", add_arguments, cmd_cosched, argv)


if __name__ == "__main__":
    sys.exit(main())
