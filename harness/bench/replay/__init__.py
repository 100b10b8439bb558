"""`tao bench replay`: real trajectories replayed on a timeline, serial against Tao against the oracle.

Each held-out trajectory becomes steps (harness.bench.replay.trace): a model call's time is the prefill
of its new prompt tokens (the prefix cache holds the rest) at `prefill_tps` plus its output tokens at
`tpot`; a tool's time is its measured duration where the trace has one, else a latency model per
command class (harness.bench.replay.tool_times). The analyzer, trained on `--train` only, predicts every
call at moments (a), (b), (c) without looking ahead; each run (harness.bench.replay.policies) turns
that into a plan, and harness.bench.timeline into task times. With `--sessions N`, N trajectories share
one engine whose time per token grows with load (harness.bench.replay.load). With `--sequential`, Tao's
row is replayed again with the model adapted to each user's earlier sessions, as `tao run` adapts it
(harness.bench.replay.sequential).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.replay import load as replay_load
from harness.bench.replay import sequential as replay_sequential
from harness.bench.predict import split
from harness.bench.replay.policies import BUDGET, ORACLES, POLICIES, SINGLE, TAKE, Tally, plans
from harness.bench.replay.trace import Trace, build, decide
from harness.bench.timeline import Plan, Timeline, simulate
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import ONLINE_RATE, Analyzer
from harness.speculation.prediction.training import learn
from harness.speculation.running.records import Budget
from harness.traces import ImportReport

PREFILL_TPS = 5_000.0  # prompt tokens a second (the figure; the GPU profile of harness.engine.sim: ~9.7k)


@dataclass
class Prepared:
    """A held-out trajectory with every run's plan (plans do not depend on the time per token)."""

    trace: Trace
    plans: dict[str, list[Plan]]
    tallies: dict[str, Tally]


def prepare(model: PatternModel, sessions: list[Any], budget: Budget = BUDGET,
            latency: str = "trace") -> list[Prepared]:
    """Build each test trajectory's steps, let a fresh analyzer decide, and make every run's plan."""
    out = []
    for session in sessions:
        trace = build(session.session_id, session.events, latency)
        if not trace.steps:
            continue
        decide(trace, Analyzer(model, learn_rate=ONLINE_RATE), session.events)
        made = {policy: plans(trace, policy, budget) for policy in POLICIES}
        out.append(Prepared(trace, {p: m[0] for p, m in made.items()}, {p: m[1] for p, m in made.items()}))
    return out


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timelines(prepared: list[Prepared], tpot: float, prefill_tps: float) -> dict[str, list[Timeline]]:
    """Every run's timeline of every trajectory at one time per token."""
    return {policy: [simulate(p.trace.steps, p.plans[policy], tpot, prefill_tps,
                              0.0 if policy == "baseline" or policy in ORACLES else TAKE)
                     for p in prepared] for policy in POLICIES}


def summarise(lines: dict[str, list[Timeline]]) -> dict[str, Any]:
    """Mean, p50 and p99 of each run, and Tao's figures against the baseline and the oracle."""
    runs = {policy: {"mean": statistics.fmean(t.total for t in ts), "p50": quantile([t.total for t in ts], 0.5),
                     "p99": quantile([t.total for t in ts], 0.99), "tool_wait": sum(t.tool_wait for t in ts),
                     "wasted_cpu_s": sum(t.wasted for t in ts)} for policy, ts in lines.items()}
    base = runs["baseline"]

    def saving(policy: str) -> float:
        return base["mean"] - runs[policy]["mean"]

    for run in runs.values():
        run["mean_reduction"] = 1 - run["mean"] / base["mean"]
        run["p99_reduction"] = 1 - run["p99"] / base["p99"]
    tao = runs["tao"]
    best = max(SINGLE, key=saving)
    per = [1 - t.total / b.total for t, b in zip(lines["tao"], lines["baseline"])]
    worse = sum(t.total > b.total + t.overhead + 1e-9 for t, b in zip(lines["tao"], lines["baseline"]))
    return {
        "mean_reduction": tao["mean_reduction"], "p99_reduction": tao["p99_reduction"],
        "oracle_share": saving("tao") / saving("oracle") if saving("oracle") > 0 else 0.0,
        "oracle_obs_share": saving("tao") / saving("oracle_obs") if saving("oracle_obs") > 0 else 0.0,
        "oracle_speculable_share": (saving("tao") / saving("oracle_speculable")
                                    if saving("oracle_speculable") > 0 else 0.0),
        "tool_latency_ratio": base["tool_wait"] / tao["tool_wait"] if tao["tool_wait"] > 0 else None,
        "best_single": best, "vs_best_single": saving("tao") / saving(best) if saving(best) > 0 else None,
        "wasted_cpu_s": tao["wasted_cpu_s"], "overhead_s_mean": statistics.fmean(t.overhead for t in lines["tao"]),
        "slower_than_baseline_beyond_overhead": worse, "slower_than_baseline": sum(x < 0 for x in per),
        "per_trajectory_reduction": [round(x, 4) for x in per],
        "per_trajectory_oracle_reduction": [round(1 - o.total / b.total, 4)
                                            for o, b in zip(lines["oracle"], lines["baseline"])],
        "runs": {p: {k: round(v, 4) for k, v in r.items()} for p, r in runs.items()},
    }


def accuracy(prepared: list[Prepared]) -> dict[str, Any]:
    """How Tao's speculation served the calls: results taken from a speculation, by moment; warmed prompts."""
    calls = sum(p.tallies["tao"].calls for p in prepared)
    moments: dict[str, int] = {}
    for p in prepared:
        for moment, n in p.tallies["tao"].by_moment.items():
            moments[moment] = moments.get(moment, 0) + n
    served = sum(moments.values())
    decided = [(c.action.key, c.decision) for p in prepared for c in p.trace.all_calls() if c.decision is not None]
    top1 = sum(key in [x.key for x in decision.top("a", 1)] for key, decision in decided)
    top3 = sum(key in [x.key for x in decision.top("a", 3)] for key, decision in decided)
    measured = sum(c.measured for p in prepared for c in p.trace.all_calls())
    every = sum(len(p.trace.all_calls()) for p in prepared)
    return {"calls": calls, "served": served, "served_share": served / calls if calls else 0.0,
            "served_by_moment": dict(sorted(moments.items())), "a_top1": top1 / len(decided) if decided else 0.0,
            "a_top3": top3 / len(decided) if decided else 0.0, "measured_durations": measured,
            "measured_share": measured / every if every else 0.0,
            "launched": sum(p.tallies["tao"].launched for p in prepared),
            "served_by_run": {run: sum(p.tallies[run].served for p in prepared) for run in POLICIES},
            "later_calls": sum(not c.first for p in prepared for c in p.trace.all_calls()),
            "later_served": sum(p.tallies["tao"].later for p in prepared),
            "warmed": sum(p.tallies["tao"].warmed for p in prepared),
            "ruled_out_wrongly": sum(p.tallies["tao"].ruled_out_wrongly for p in prepared),
            "kept_served": sum(p.tallies["tao"].kept for p in prepared)}


def adapted_runs(model: PatternModel, test: list[Any], alone: list[list[Prepared]], history: list[Any],
                 budget: Budget, latency: str) -> tuple[list[Prepared], int]:
    """`--sequential`: each test session prepared with `model` adapted to its user's earlier sessions among
    `history` (a session with none keeps `alone`'s, the shipped model's, so that the two rows differ only where
    adapting changed something); and how many sessions had any."""
    spans = [s for s in (replay_sequential.span(h) for h in history) if s is not None]
    out, adapted = [], 0
    for session, shipped in zip(test, alone):
        past = replay_sequential.earlier(session, spans)
        adapted += bool(past)
        out += prepare(replay_sequential.adapted(model, past), [session], budget, latency) if past else shipped
    return out, adapted


def adapted_row(prepared: list[Prepared], lines: dict[str, list[Timeline]], tpot: float,
                prefill_tps: float) -> dict[str, float]:
    """Tao's task times with the adapted plans, against the same baseline as the shipped model's row."""
    totals = [simulate(p.trace.steps, p.plans["tao"], tpot, prefill_tps, TAKE).total for p in prepared]
    base = [t.total for t in lines["baseline"]]
    mean, p99 = statistics.fmean(totals), quantile(totals, 0.99)
    return {"mean": round(mean, 4), "p50": round(quantile(totals, 0.5), 4), "p99": round(p99, 4),
            "mean_reduction": round(1 - mean / statistics.fmean(base), 4),
            "p99_reduction": round(1 - p99 / quantile(base, 0.99), 4)}


def run(train_dir: Path, test_dir: Path, tpots_ms: list[float], sessions: int = 1, holdout: float = 0.3,
        model_path: Path | None = None, save_model: Path | None = None,
        prefill_tps: float = PREFILL_TPS, limit: int = 0, budget: Budget = BUDGET,
        latency: str = "trace", sequential: bool = False) -> dict[str, Any]:
    """The whole benchmark: split, learn (or load) the patterns, prepare, replay at every time per token.

    `sequential`: also Tao adapted to each user's earlier sessions, those of `test_dir` (all of them, held out
    or not)."""
    started = time.perf_counter()
    report = ImportReport()
    train, test = split(train_dir, test_dir, holdout, report)
    history = test + train if train_dir.resolve() == test_dir.resolve() else test
    test = test[:limit] if limit else test
    model = PatternModel.load(model_path) if model_path else learn([s.events for s in train])
    if save_model is not None:
        model.save(save_model)
    learned = time.perf_counter()
    alone = [prepare(model, [session], budget, latency) for session in test]
    prepared = [p for one in alone for p in one]
    adapted, with_past = adapted_runs(model, test, alone, history, budget, latency) if sequential else ([], 0)
    result: dict[str, Any] = {"budget": {"k": budget.k, "max_running": budget.max_running,
                                         "max_sandboxed": budget.max_sandboxed},
        "train_sessions": len(train) if model_path is None else f"model {model_path}",
        "test_sessions": len(prepared), "steps": sum(len(p.trace.steps) for p in prepared),
        "prefill_tps": prefill_tps, "latency": latency, "accuracy": accuracy(prepared), "tpot_ms": {}}
    if sequential:
        result["sequential"] = {"sessions_with_past": with_past, "accuracy": accuracy(adapted)}
    for tpot in tpots_ms:
        lines = timelines(prepared, tpot / 1000, prefill_tps)
        entry = summarise(lines)
        if sequential:
            entry["sequential"] = adapted_row(adapted, lines, tpot / 1000, prefill_tps)
        if sessions > 1:
            entry["sessions"] = replay_load.run(prepared, lines, sessions, tpot / 1000, prefill_tps)
        result["tpot_ms"][_label(tpot)] = entry
    result.update({"learn_seconds": round(learned - started, 1),
                   "replay_seconds": round(time.perf_counter() - learned, 1)})
    return result


def _label(tpot: float) -> str:
    return f"{tpot:g}"
