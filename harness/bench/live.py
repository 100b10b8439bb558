"""`tao bench live`: recorded sessions replayed against real repositories, speculation off, on and oracle.

Each session of examples/sessions is replayed by the replay engine (`--tpot-ms` per output token)
against a fresh copy of its real repository with the real tools, in four modes: `off` (no
speculation), `on` (Tao as a user who has run it before: `--model`, else the learned model at the default
path, else the one Tao ships, adapted to the user's past sessions, here the other sessions' `off` runs
of a first untimed pass), `cold` (the same without past sessions) and `oracle` (harness.bench.oracle:
every call foreseen and started at moment (a) of its step, through the same scheduler). Repetitions
interleave the modes, rotating their order, so that load drifts on a shared machine hit all of them.
Reported per session and over the mix: mean and p99 session time and their ratios to `off`, Tao's saving
as a share of the oracle's, hits, waste and the overhead per decision (harness.bench.overhead). JSON with
`--json`, and a table.

`--engine embedded` runs the same sessions through the real in-process engine instead, to measure
observation warming (AOSpec): harness.bench.live_embedded.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.bench import recordings as recorded
from harness.bench import run_module
from harness.bench.overhead import Meter
from harness.bench.live_parts import analyzer_for, bench_environment, model_choice, quantile, timed_run
from harness.bench.report import Report, Table
from harness.engine.recorded import ReplayEngine
from harness.errors import UsageError
from harness.events import Event, SessionEnd, SpecPromote, SpecSummary, ToolCall, ToolResult, comparable
from harness.machine import machine
from harness.launch import SessionOptions, open_session
from harness.session import SessionConfig
from harness.speculation.prediction.pattern_model import (default_model_path)
from harness.vocabulary import Status
from sandbox import Workspace

MODES = ("off", "on", "cold", "oracle")
SPEC_FIELDS = ("launched", "promoted", "discarded", "repeats", "saved", "wasted")



async def run_one(session: recorded.LiveSession, mode: str, tpot: float, model: Path | None,
                  cache: Path, past: Iterable[list[Event]] = ()) -> dict[str, Any]:
    """One replay of one session in one mode, from a fresh copy of its repository."""
    end, seconds, events, meter = await replay_session(session, analyzer_for(mode, session, model, past), tpot, cache)
    summary = next((e for e in events if isinstance(e, SpecSummary)), None)
    promoted = {e.call_id: e for e in events if isinstance(e, SpecPromote)}
    asked = {e.call_id: json.dumps(e.arguments, sort_keys=True)[:70] for e in events if isinstance(e, ToolCall)}
    calls = [{"step": e.step, "name": e.name, "call": f"{e.name} {asked.get(e.call_id, '')}", "duration": e.duration,
              "promoted": e.call_id in promoted, "waited": promoted[e.call_id].waited if e.call_id in promoted else 0.0}
             for e in events if isinstance(e, ToolResult)]
    items = [json.dumps(item, sort_keys=True, default=str) for item in comparable(events)]
    return {"session": session.name, "mode": mode, "seconds": seconds, "status": end.status, "steps": end.steps,
            "spec": {f: getattr(summary, f) if summary else 0 for f in SPEC_FIELDS},
            "overhead": meter.to_dict(), "calls": calls, "events": items,
            "trace": hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]}


async def replay_session(session: recorded.LiveSession, analyzer: Any, tpot: float,
                         cache: Path) -> tuple[SessionEnd, float, list[Event], Meter]:
    """Replay the session on a fresh copy of its repository: how it ended, its seconds, events and overhead."""
    repo = await asyncio.to_thread(recorded.checkout, session, cache)
    events: list[Event] = []
    workspace = Workspace(repo)
    engine = ReplayEngine(session.recording, seconds_per_token=tpot)
    config = SessionConfig(max_steps=len(session.recording.turns) + 1, max_seconds=900.0)
    loop = open_session(SessionOptions(config=config), session.recording.task or "", engine, workspace,
                        [events.append], analyzer=analyzer)
    meter = Meter.attach(loop, events)
    end, seconds = await timed_run(loop, workspace)
    return end, seconds, events, meter


def order(rep: int, index: int) -> list[str]:
    """The modes of one session in one repetition, rotated so that none always runs first."""
    shift = (rep + index) % len(MODES)
    return list(MODES[shift:] + MODES[:shift])


async def run_all(selected: list[recorded.LiveSession], repeat: int, tpot: float, model: Path | None,
                  cache: Path, progress: bool = True) -> list[dict[str, Any]]:
    """Every session in every mode, `repeat` times, interleaved."""
    for session in selected:  # build or fetch every repository before anything is timed
        await asyncio.to_thread(recorded.template, session, cache)
    history = {}  # the user's past sessions: each session once without speculation, untimed
    for session in selected:
        history[session.name] = (await replay_session(session, None, tpot, cache))[2]
    runs = []
    for rep in range(repeat):
        for index, session in enumerate(selected):
            for mode in order(rep, index):
                past = [events for name, events in history.items() if name != session.name]
                run = await run_one(session, mode, tpot, model, cache, past)
                run["rep"] = rep
                runs.append(run)
                if progress:
                    print(f"  rep {rep + 1}/{repeat} {session.name:24} {mode:6} {run['seconds']:7.2f} s "
                          f"{run['status']}, promoted {run['spec']['promoted']}, repeats {run['spec']['repeats']}, "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    return runs


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


def _share(saving: float, oracle: float) -> float | None:
    return round(saving / oracle, 4) if oracle > 0 else None


def spec_means(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Mean speculation totals per session run."""
    return {f: round(_mean([r["spec"][f] for r in runs]), 4) for f in SPEC_FIELDS}


def overhead_summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Speculation bookkeeping: per decision (one launch at one moment), per take, and per session."""
    launch = [t for r in runs for t in r["overhead"]["launch"]]
    take = [t for r in runs for t in r["overhead"]["take"]]
    predict = [t for r in runs for t in r["overhead"]["predict"]]
    decisions = sum(r["overhead"]["decisions"] for r in runs)
    total = sum(r["overhead"]["total"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    ms = lambda value: round(value * 1000, 3)  # noqa: E731
    return {"decisions": decisions, "ms_per_decision": ms(total / decisions) if decisions else 0.0,
            "launch_ms_mean": ms(_mean(launch)), "launch_ms_p99": ms(quantile(launch, 0.99)),
            "predict_ms_mean": ms(_mean(predict)), "predict_ms_p99": ms(quantile(predict, 0.99)),
            "take_ms_mean": ms(_mean(take)), "take_ms_p99": ms(quantile(take, 0.99)),
            "observe_ms_per_run": ms(sum(r["overhead"]["observe"] for r in runs) / len(runs)) if runs else 0.0,
            "close_ms_per_run": ms(sum(r["overhead"].get("close", 0.0) for r in runs) / len(runs)) if runs else 0.0,
            "seconds_per_run": round(total / len(runs), 4) if runs else 0.0,
            "share_of_session_time": round(total / seconds, 5) if seconds else 0.0}


def slowed_promotions(runs: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Calls promoted while their speculation still ran, against the same call run authoritatively."""
    off: dict[tuple[str, int], list[float]] = {}
    for run in runs:
        if run["mode"] == "off":
            for index, call in enumerate(run["calls"]):
                off.setdefault((run["session"], index), []).append(call["duration"])
    waited, slower = [], []
    for run in runs:
        if run["mode"] != mode:
            continue
        for index, call in enumerate(run["calls"]):
            if call["promoted"] and call["waited"] > 0 and (run["session"], index) in off:
                base = _mean(off[(run["session"], index)])
                waited.append((call["duration"], base))
                if call["duration"] > base:
                    slower.append({"session": run["session"], "step": call["step"], "name": call["name"],
                                   "on_s": round(call["duration"], 3), "off_mean_s": round(base, 3)})
    return {"promoted_while_running": len(waited), "slower_than_off": len(slower),
            "mean_on_s": round(_mean([w[0] for w in waited]), 4), "mean_off_s": round(_mean([w[1] for w in waited]), 4),
            "worst": sorted(slower, key=lambda s: s["off_mean_s"] - s["on_s"])[:5]}


def unpromoted(runs: list[dict[str, Any]], mode: str = "on") -> dict[str, float]:
    """Calls that `mode` never promoted: their mean tool wait there against off (do speculations slow them?)."""
    waits: dict[tuple[str, int], dict[str, list[float]]] = {}
    hit: set[tuple[str, int]] = set()
    for run in runs:
        for index, call in enumerate(run["calls"]):
            waits.setdefault((run["session"], index), {m: [] for m in MODES})[run["mode"]].append(call["duration"])
            if run["mode"] == mode and call["promoted"]:
                hit.add((run["session"], index))
    kept = [w for key, w in waits.items() if key not in hit and w["off"] and w[mode]]
    return {"calls": len(kept), "off_s": round(sum(_mean(w["off"]) for w in kept), 3),
            f"{mode}_s": round(sum(_mean(w[mode]) for w in kept), 3)}


def call_gaps(runs: list[dict[str, Any]], top: int = 8) -> dict[str, Any]:
    """Where Tao falls short of the oracle: per call, mean tool wait off, on and oracle (the largest gaps)."""
    waits: dict[tuple[str, int], dict[str, list[float]]] = {}
    labels: dict[tuple[str, int], str] = {}
    for run in runs:
        for index, call in enumerate(run["calls"]):
            waits.setdefault((run["session"], index), {m: [] for m in MODES})[run["mode"]].append(call["duration"])
            labels[(run["session"], index)] = call["call"]
    rows: list[dict[str, Any]] = []
    for (session, index), by_mode in waits.items():
        means = {m: _mean(v) for m, v in by_mode.items() if v}
        rows.append({"session": session, "step": index + 1, "call": labels[(session, index)],
                     **{f"{m}_s": round(v, 3) for m, v in means.items()},
                     "gap_s": round(means["on"] - means["oracle"], 3)})
    rows.sort(key=lambda row: -row["gap_s"])
    return {"gap_s": round(sum(row["gap_s"] for row in rows), 3), "largest": rows[:top]}


def differences(runs: list[dict[str, Any]], width: int = 600) -> list[dict[str, Any]]:
    """Each run whose trajectory is not its off run's: the first event that differs, both ways (cut to `width`)."""
    reference = {(r["session"], r["rep"]): r for r in runs if r["mode"] == "off"}
    found = []
    for run in runs:
        off = reference.get((run["session"], run["rep"]))
        if run["mode"] == "off" or off is None or run["trace"] == off["trace"] or "events" not in run:
            continue
        mine, theirs = run["events"], off["events"]
        index = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        found.append({"run": f"{run['session']}/{run['mode']}/{run['rep']}", "event": index,
                      "off": theirs[index][:width] if index < len(theirs) else None,
                      run["mode"]: mine[index][:width] if index < len(mine) else None})
    return found


def paired_ratios(runs: list[dict[str, Any]], mode: str = "on") -> dict[str, list[float]]:
    """Per session, on/off of each repetition (the spread that load drifts leave)."""
    off = {(r["session"], r["rep"]): r["seconds"] for r in runs if r["mode"] == "off"}
    out: dict[str, list[float]] = {}
    for run in runs:
        if run["mode"] == mode and (run["session"], run["rep"]) in off:
            out.setdefault(run["session"], []).append(_ratio(run["seconds"], off[(run["session"], run["rep"])]))
    return out


@dataclass(frozen=True)
class ModeTimes:
    """One mode's runs of one session: task seconds (mean, p99), how many runs, mean seconds waited on tools."""

    mean: float
    p99: float
    runs: int
    tool_wait: float

    @classmethod
    def of(cls, runs: list[dict[str, Any]]) -> ModeTimes:
        times = [r["seconds"] for r in runs]
        waits = [sum(c["duration"] for c in r["calls"]) for r in runs]
        return cls(round(_mean(times), 4), round(quantile(times, 0.99), 4), len(times), round(_mean(waits), 4))


@dataclass(frozen=True)
class MixTimes:
    """One mode over the whole mix: task seconds (mean, p99) and the seconds waited on tools, summed over sessions."""

    mean: float
    p99: float
    tool_wait: float


def session_row(by_mode: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One session's statistics: each mode's times, then on, oracle (and cold) against off, and speculation's counts."""
    times = {mode: ModeTimes.of(runs) for mode, runs in by_mode.items()}
    row: dict[str, Any] = {mode: asdict(stats) for mode, stats in times.items()}
    off = times["off"].mean
    row["ratio"], row["oracle_ratio"] = _ratio(times["on"].mean, off), _ratio(times["oracle"].mean, off)
    row["saving_s"] = round(off - times["on"].mean, 4)
    row["oracle_saving_s"] = round(off - times["oracle"].mean, 4)
    row["share_of_oracle"] = _share(row["saving_s"], row["oracle_saving_s"])
    row["spec"] = spec_means(by_mode["on"])
    row["oracle_spec"] = spec_means(by_mode["oracle"])
    if "cold" in times:
        row["cold_ratio"] = _ratio(times["cold"].mean, off)
        row["cold_saving_s"] = round(off - times["cold"].mean, 4)
    return row


def mix_times(runs: list[dict[str, Any]], modes: list[str], per_session: dict[str, Any]) -> dict[str, MixTimes]:
    """Each mode over every session's runs."""
    mix = {}
    for mode in modes:
        times = [r["seconds"] for r in runs if r["mode"] == mode]
        mix[mode] = MixTimes(round(_mean(times), 4), round(quantile(times, 0.99), 4),
                             round(sum(row[mode]["tool_wait"] for row in per_session.values()), 4))
    return mix


def mix_total(runs: list[dict[str, Any]], mix: dict[str, MixTimes], per_session: dict[str, Any]) -> dict[str, Any]:
    """The whole mix as the JSON's "total": each mode's mean_, p99_ and tool_wait_, then on and oracle against off."""
    total: dict[str, Any] = {}
    for mode, stats in mix.items():
        total.update({f"mean_{mode}": stats.mean, f"p99_{mode}": stats.p99, f"tool_wait_{mode}": stats.tool_wait})
    off, on, oracle = mix["off"], mix["on"], mix["oracle"]
    saving = sum(row["saving_s"] for row in per_session.values())
    oracle_saving = sum(row["oracle_saving_s"] for row in per_session.values())
    total.update({
        "ratio_mean": _ratio(on.mean, off.mean),
        "ratio_p99": _ratio(on.p99, off.p99),
        "ratio_max": max((row["ratio"] for row in per_session.values()), default=0.0),
        "oracle_ratio_mean": _ratio(oracle.mean, off.mean),
        "oracle_ratio_p99": _ratio(oracle.p99, off.p99),
        "oracle_ratio_max": max((row["oracle_ratio"] for row in per_session.values()), default=0.0),
        "saving_s": round(saving, 4), "oracle_saving_s": round(oracle_saving, 4),
        "share_of_oracle": _share(saving, oracle_saving),
        "spec": spec_means([r for r in runs if r["mode"] == "on"]),
        "oracle_spec": spec_means([r for r in runs if r["mode"] == "oracle"]),
    })
    if "cold" in mix:  # Tao without the user's past sessions
        cold_saving = sum(row["cold_saving_s"] for row in per_session.values())
        total.update({"cold_ratio_mean": _ratio(mix["cold"].mean, off.mean),
                      "cold_ratio_p99": _ratio(mix["cold"].p99, off.p99),
                      "cold_ratio_max": max(row["cold_ratio"] for row in per_session.values()),
                      "cold_saving_s": round(cold_saving, 4),
                      "cold_share_of_oracle": _share(cold_saving, oracle_saving),
                      "cold_spec": spec_means([r for r in runs if r["mode"] == "cold"])})
    return total


def trajectory_checks(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """How many runs' trajectories equal their off run's, which differ and where, and the runs that did not finish."""
    reference = {(r["session"], r["rep"]): r["trace"] for r in runs if r["mode"] == "off"}
    checked = [r for r in runs if r["mode"] != "off" and (r["session"], r["rep"]) in reference]
    return {
        "trajectories_equal": sum(r["trace"] == reference[(r["session"], r["rep"])] for r in checked),
        "trajectories_checked": len(checked), "trajectories_differ": differences(runs),
        "not_finished": [f"{r['session']}/{r['mode']}/{r['rep']}: {r['status']}"
                         for r in runs if r["status"] != Status.FINISHED],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-session and whole-mix statistics of the runs (pure arithmetic; tests cover it)."""
    names = list(dict.fromkeys(r["session"] for r in runs))
    modes = [m for m in MODES if any(r["mode"] == m for r in runs)]
    per_session = {name: session_row({mode: [r for r in runs if r["session"] == name and r["mode"] == mode]
                                      for mode in modes}) for name in names}
    total = mix_total(runs, mix_times(runs, modes, per_session), per_session)
    return {
        "ratio_mean": total["ratio_mean"], "ratio_p99": total["ratio_p99"], "ratio_max": total["ratio_max"],
        "share_of_oracle": total["share_of_oracle"], "total": total, "sessions": per_session,
        "overhead": overhead_summary([r for r in runs if r["mode"] == "on"]),
        "oracle_overhead": overhead_summary([r for r in runs if r["mode"] == "oracle"]),
        "slowed_promotions": {m: slowed_promotions(runs, m) for m in ("on", "oracle")},
        "call_gaps": call_gaps(runs), "paired_ratios": paired_ratios(runs), "unpromoted": unpromoted(runs),
        **trajectory_checks(runs),
    }



def run(session_dir: Path = recorded.SESSIONS_DIR, only: list[str] | None = None, repeat: int = 3,
        tpot_ms: float = 10.0, model: Path | None = None, cache: Path | None = None,
        progress: bool = True) -> dict[str, Any]:
    """The whole benchmark: build the repositories, run every session in every mode, summarize."""
    if repeat < 1 or tpot_ms < 0:
        raise UsageError("--repeat must be at least 1 and --tpot-ms at least 0")
    selected = recorded.load_sessions(session_dir, only)
    model_path, model_note = model_choice(model)
    cache = cache or recorded.cache_dir()
    bench_environment()
    before = machine()
    started = time.perf_counter()
    runs = asyncio.run(run_all(selected, repeat, tpot_ms / 1000, model_path, cache, progress))
    kept = [{k: v for k, v in r.items() if k != "events"} for r in runs]
    (cache / "last-runs.json").write_text(json.dumps(kept), encoding="utf-8")  # every call, to look into later
    result = summarize(runs)
    after = machine()
    result["config"] = {"tpot_ms": tpot_ms, "repeat": repeat, "model": model_note,
                        "past_sessions": "on: adapted to the other sessions' untimed off runs; cold: not adapted",
                        "sessions": [recorded.describe(s) for s in selected],
                        "seconds": round(time.perf_counter() - started, 1)}
    load_before = before.pop("load")
    result["machine"] = {**before, "load_before": load_before, "load_after": after["load"]}
    result["runs"] = [{k: r[k] for k in ("session", "mode", "rep", "seconds", "status", "spec")} for r in runs]
    return result


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def report(result: dict[str, Any]) -> Report:
    """Each session off, on and oracle, the mix's mean and p99; then tool wait, speculation and overhead."""
    config, total = result["config"], result["total"]
    title = (f"tao bench live: {len(config['sessions'])} sessions x {config['repeat']} repetitions, "
             f"{config['tpot_ms']:g} ms per output token; model: {config['model']}")
    rows = [[name, f"{row['off']['mean']:.2f}", f"{row['on']['mean']:.2f}", f"{row['oracle']['mean']:.2f}",
             f"{row['ratio']:.3f}", f"{row['oracle_ratio']:.3f}", _pct(row["share_of_oracle"]),
             f"{row['spec']['promoted']:.1f}", f"{row['spec']['repeats']:.1f}", f"{row['spec']['wasted']:.2f}"]
            for name, row in result["sessions"].items()]
    spec = total["spec"]
    rows.append(["all (mean)", f"{total['mean_off']:.2f}", f"{total['mean_on']:.2f}", f"{total['mean_oracle']:.2f}",
                 f"{total['ratio_mean']:.3f}", f"{total['oracle_ratio_mean']:.3f}", _pct(total["share_of_oracle"]),
                 f"{spec['promoted']:.1f}", f"{spec['repeats']:.1f}", f"{spec['wasted']:.2f}"])
    rows.append(["all (p99)", f"{total['p99_off']:.2f}", f"{total['p99_on']:.2f}", f"{total['p99_oracle']:.2f}",
                 f"{total['ratio_p99']:.3f}", f"{total['oracle_ratio_p99']:.3f}", "", "", "", ""])
    sessions = Table(["session", "off s", "on s", "oracle s", "on/off", "orc/off", "share", "promo", "rep", "waste s"],
                     rows, title=title)
    notes: list[str] = []
    over = result["overhead"]
    notes.append(f"tool wait (seconds the sessions waited on tools, summed over the sessions): off "
                 f"{total['tool_wait_off']:.2f}, on {total['tool_wait_on']:.2f}, "
                 f"oracle {total['tool_wait_oracle']:.2f}")
    notes.append(f"saving: Tao {total['saving_s']:.2f} s, oracle {total['oracle_saving_s']:.2f} s over the mix "
                 f"(share {_pct(total['share_of_oracle'])}); worst session on/off {total['ratio_max']:.3f}, "
                 f"oracle {total['oracle_ratio_max']:.3f}")
    if "cold_ratio_mean" in total:
        cold = total["cold_spec"]
        notes.append(f"cold (no past sessions): mean {total['mean_cold']:.2f} s, "
                     f"on/off {total['cold_ratio_mean']:.3f}, "
                     f"p99 {total['cold_ratio_p99']:.3f}, worst session {total['cold_ratio_max']:.3f}, share "
                     f"{_pct(total['cold_share_of_oracle'])}, tool wait {total['tool_wait_cold']:.2f} s, promoted "
                     f"{cold['promoted']:.1f} of {cold['launched']:.1f} a run, wasted {cold['wasted']:.2f} s")
    notes.append(f"speculation per run (on): launched {spec['launched']:.1f}, promoted {spec['promoted']:.1f}, "
                 f"repeats {spec['repeats']:.1f}, discarded {spec['discarded']:.1f}, saved {spec['saved']:.2f} s, "
                 f"wasted {spec['wasted']:.2f} s")
    notes.append(f"overhead per decision {over['ms_per_decision']:.3f} ms (launch mean {over['launch_ms_mean']:.3f} "
                 f"p99 {over['launch_ms_p99']:.3f}, predict mean {over['predict_ms_mean']:.3f} p99 "
                 f"{over['predict_ms_p99']:.3f}, take mean {over['take_ms_mean']:.3f} p99 {over['take_ms_p99']:.3f}, "
                 f"close {over['close_ms_per_run']:.1f} ms a run); "
                 f"{over['seconds_per_run']:.3f} s per run, {over['share_of_session_time']:.2%} of session time")
    gaps = result["call_gaps"]
    notes.append(f"tool wait Tao leaves to the oracle: {gaps['gap_s']:.2f} s over the mix; largest:")
    for row in gaps["largest"][:4]:
        notes.append(f"  {row['session']} step {row['step']}: {row['call'][:60]} off {row['off_s']:.2f} s, "
                     f"on {row['on_s']:.2f} s, oracle {row['oracle_s']:.2f} s")
    miss = result["unpromoted"]
    notes.append(f"calls Tao never promoted ({miss['calls']}): tool wait off {miss['off_s']:.2f} s, "
                 f"on {miss['on_s']:.2f} s")
    slow = result["slowed_promotions"]["on"]
    notes.append(f"promoted while still running (on): {slow['promoted_while_running']}, slower than the same call off: "
                 f"{slow['slower_than_off']}")
    notes.append(f"trajectories equal to the off run's: {result['trajectories_equal']}/{result['trajectories_checked']}"
                 + (f"; not finished: {', '.join(result['not_finished'])}" if result["not_finished"] else ""))
    for diff in result["trajectories_differ"]:
        notes.append(f"  {diff['run']} differs from its off run at event {diff['event']}: "
                     + "; ".join(f"{k} {v}" for k, v in diff.items() if k not in ("run", "event")))
    m = result["machine"]
    notes.append(f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, load {m['load_before']} -> "
                 f"{m['load_after']}; {config['seconds']:.0f} s in all")
    return Report(result, [sessions], notes)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench live`."""
    parser.add_argument("--sessions", type=Path, default=recorded.SESSIONS_DIR,
                        help="folder of recorded session files (default: examples/sessions)")
    parser.add_argument("--only", help="comma-separated session names to run (default: all)")
    parser.add_argument("--engine", choices=("replay", "embedded"), default="replay",
                        help="replay: the recorded turns at --tpot-ms, speculation off, on and oracle (default); "
                             "embedded: the real in-process engine, observation warming off and on "
                             "(harness.bench.live_embedded)")
    parser.add_argument("--repeat", type=int,
                        help="repetitions, modes interleaved (default 3; 1 with --engine embedded)")
    parser.add_argument("--tpot-ms", type=float, default=10.0, help="replay milliseconds per output token (default 10)")
    parser.add_argument("--model", type=Path, help="learned pattern model for the `on` runs (default "
                        f"{default_model_path()} if present, else the one Tao ships); `none`: rules only")
    parser.add_argument("--cache", type=Path, help=f"repositories and run copies (default {recorded.cache_dir()})")
    parser.add_argument("--provisional", action="store_true",
                        help="--engine embedded: a third mode, warming with the provisional next step")
    parser.add_argument("--max-sandboxed", type=int,
                        help="--engine embedded: test runs speculated at once (default: Tao's budget); "
                        "0 leaves every test run to the model, so repeated ones are warmed, not promoted")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_live(args: argparse.Namespace) -> int:
    """Run the benchmark and print it."""
    only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else None
    if args.engine == "embedded":
        from harness.bench import live_embedded as embedded

        result = embedded.run(args.sessions, only, args.repeat or 1, args.provisional, args.model,
                              args.max_sandboxed, args.cache)
        shown = embedded.report(result)
    else:
        shown = report(run(args.sessions, only, args.repeat or 3, args.tpot_ms, args.model, args.cache))
    shown.emit(args.json)
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `live` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "live",
        description="Replay recorded sessions against real repositories with real tools, with speculation "
                    "off, on (Tao's analyzer) and oracle (every call foreseen), interleaved; with --engine "
                    "embedded, through the real engine with observation warming off and on.")
    add_arguments(parser)
    parser.set_defaults(func=cmd_live)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.bench.live ...` (the same options as `tao bench live`)."""
    return run_module("python -m harness.bench.live", add_arguments, cmd_live, argv)


if __name__ == "__main__":
    sys.exit(main())
