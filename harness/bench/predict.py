"""`tao bench predict`: learn patterns from one set of trajectories, predict every call of another.

Every executed call of the test set is predicted without looking ahead (harness.speculation.prediction.rehearsal)
at moments (a) previous observation in, (b) reasoning streamed, (c) call name and first argument
characters known. Reported: exact-match top-1/top-3 accuracy per moment (candidates by probability),
for all calls and for slow ones (scripts and test runs); the share of modelled tool latency whose
result the top-3 candidates at (a) provide (by utility, as the scheduler launches them; exact, or a
range view of a file whose whole read was speculated; only candidates that may be speculated count);
decision time; all broken down by kind. When train and test are the same directory, sessions are
split by a hash of their id (`--holdout` of them tested), so no instance is in both.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import dump, predict_sources
from harness.bench.report import Report, Table
from harness.calls.action import SLOW_KINDS, Action
from harness.cli_traces import existing
from harness.events import ToolResult
from harness.speculation.prediction.latency import modelled_latency
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import ONLINE_RATE, Analyzer, Candidate
from harness.speculation.prediction.rehearsal import PREFIX_CHARS, Decision, replay
from harness.speculation.prediction.training import learn
from harness.traces import Imported, ImportReport, load_sessions
from tools.base import Effect

MOMENTS = ("a", "b", "c")


@dataclass
class Tally:
    """Hits counted over a group of calls."""

    n: int = 0
    hits: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, decision: Decision, k: int) -> None:
        """Count one decision's hits at every moment, by probability and by utility."""
        self.n += 1
        for moment in MOMENTS:
            keys = [c.key for c in decision.top(moment, k)]
            self.hits[f"{moment}1"] += decision.action.key in keys[:1]
            self.hits[f"{moment}{k}"] += decision.action.key in keys
            keys = [c.key for c in decision.top(moment, k, "utility")]
            self.hits[f"{moment}{k}u"] += decision.action.key in keys

    def rate(self, name: str) -> float:
        """Hits as a fraction of the decisions counted."""
        return round(self.hits[name] / self.n, 4) if self.n else 0.0


def held_out(session_id: str, share: float) -> bool:
    """Whether a session is in the test part of a split: a stable hash of its id."""
    return zlib.crc32(session_id.encode("utf-8")) % 1000 < share * 1000


def split(train_dir: Path, test_dir: Path, holdout: float,
          report: ImportReport) -> tuple[list[Imported], list[Imported]]:
    """Train and test sessions; one directory is split by instance, and no test id is ever trained on."""
    test = list(load_sessions(test_dir, report=report))
    if train_dir.resolve() == test_dir.resolve():
        return ([s for s in test if not held_out(s.session_id, holdout)],
                [s for s in test if held_out(s.session_id, holdout)])
    tested = {s.session_id for s in test}
    return [s for s in load_sessions(train_dir, report=report) if s.session_id not in tested], test


def covered(action: Action, top: list[Candidate], derive: bool = True) -> bool:
    """Whether the call's result is available from the speculated candidates: the same call, or (with
    `derive`) a range view of, or a grep in, a single file whose whole read was speculated."""
    runnable = [c for c in top if c.effect not in (Effect.MUTATING, Effect.UNKNOWN)]
    if any(c.key == action.key for c in runnable):
        return True
    if derive and action.path and (action.kind == "view" or (action.tool == "grep" and "." in action.path)):
        return any(c.name == "read_file" and c.arguments.get("path") == action.path and c.kind == "read"
                   for c in runnable)
    return False


def evaluate(model: PatternModel, sessions: list[Imported], k: int = 3, prefix_chars: int = PREFIX_CHARS,
             online: bool = True) -> dict[str, Any]:
    """Replay every test session through a fresh analyzer and score its predictions."""
    overall, slow = Tally(), Tally()
    kinds: dict[str, Tally] = defaultdict(Tally)
    latency_total = latency_hit = latency_hit_p = latency_exact = 0.0
    times: dict[str, list[float]] = {m: [] for m in MOMENTS}
    for session in sessions:
        durations = {e.call_id: e.duration for e in session.events if isinstance(e, ToolResult)}
        analyzer = Analyzer(model, learn_rate=ONLINE_RATE if online else 0.0)
        for decision in replay(analyzer, session.events, k=max(12, k), prefix_chars=prefix_chars):
            overall.add(decision, k)
            kinds[decision.action.kind].add(decision, k)
            if decision.action.kind in SLOW_KINDS:
                slow.add(decision, k)
            latency = modelled_latency(decision.action, durations.get(decision.call.call_id, 0.0))
            latency_total += latency
            latency_hit += latency * covered(decision.action, decision.top("a", k, "utility"))
            latency_hit_p += latency * covered(decision.action, decision.top("a", k))
            latency_exact += latency * covered(decision.action, decision.top("a", k, "utility"), derive=False)
            for moment in MOMENTS:
                times[moment].append(decision.seconds[moment] * 1000)
    all_times = [t for ts in times.values() for t in ts]
    return {
        "actions": overall.n, "k": k, "prefix_chars": prefix_chars,
        "moments": {m: {"top1": overall.rate(f"{m}1"), f"top{k}": overall.rate(f"{m}{k}"),
                        f"top{k}_by_utility": overall.rate(f"{m}{k}u")} for m in MOMENTS},
        "slow": {"actions": slow.n, **{m: {"top1": slow.rate(f"{m}1"), f"top{k}": slow.rate(f"{m}{k}"),
                                          f"top{k}_by_utility": slow.rate(f"{m}{k}u")} for m in MOMENTS}},
        f"latency_covered_top{k}": round(latency_hit / latency_total, 4) if latency_total else 0.0,
        f"latency_covered_top{k}_by_probability": round(latency_hit_p / latency_total, 4) if latency_total else 0.0,
        f"latency_covered_top{k}_exact_only": round(latency_exact / latency_total, 4) if latency_total else 0.0,
        "decision_ms_p50": round(statistics.median(all_times), 4) if all_times else 0.0,
        "decision_ms_p90": round(_quantile(all_times, 0.9), 4),
        "decision_ms_p50_by_moment": {m: round(statistics.median(t), 4) if t else 0.0 for m, t in times.items()},
        "by_kind": {kind: {"actions": t.n, "a_top1": t.rate("a1"), f"a_top{k}": t.rate(f"a{k}"),
                           f"b_top{k}": t.rate(f"b{k}"), f"c_top{k}": t.rate(f"c{k}")}
                    for kind, t in sorted(kinds.items(), key=lambda item: -item[1].n)},
    }


def run(train_dir: Path, test_dir: Path, k: int = 3, holdout: float = 0.3, model_path: Path | None = None,
        save_model: Path | None = None, prefix_chars: int = PREFIX_CHARS, epochs: int = 2,
        with_sources: bool = False) -> dict[str, Any]:
    """The whole benchmark: load, split, learn (or load a model), evaluate; `with_sources`: also where the test
    calls come from and how many are among all candidates at (a) (harness.bench.predict_sources)."""
    report = ImportReport()
    started = time.perf_counter()
    train, test = split(train_dir, test_dir, holdout, report)
    if model_path is not None:
        model = PatternModel.load(model_path)
    else:
        model = learn([s.events for s in train], epochs=epochs)
    learned = time.perf_counter()
    if save_model is not None:
        model.save(save_model)
    result = evaluate(model, test, k, prefix_chars)
    if with_sources:
        result["sources"] = {**predict_sources.sources(test),
                             "in_candidates_a": predict_sources.in_candidates(model, test)}
    result.update({"train_sessions": len(train), "test_sessions": len(test), "skipped_records": len(report.skipped),
                   "learn_seconds": round(learned - started, 1),
                   "evaluate_seconds": round(time.perf_counter() - learned, 1)})
    return result


def report(result: dict[str, Any]) -> Report:
    """Accuracy at each moment, the latency covered and the decision time, then accuracy by kind."""
    k = result["k"]
    title = (f"calls {result['actions']} (train sessions {result['train_sessions']}, test sessions "
             f"{result['test_sessions']}); moment (c) sees {result['prefix_chars']} argument characters")
    moments = Table(["", "(a)", "(b)", "(c)"], title=title, rows=[
        [f"{label} {metric}", *(f"{group[m][metric]:.1%}" for m in MOMENTS)]
        for label, group in (("all", result["moments"]), ("slow", result["slow"])) for metric in ("top1", f"top{k}")])
    kinds = Table(["kind", "calls", "a top1", f"a top{k}", f"b top{k}", f"c top{k}"], rows=[
        [kind, str(row["actions"]), *(f"{row[key]:.1%}" for key in ("a_top1", f"a_top{k}", f"b_top{k}", f"c_top{k}"))]
        for kind, row in result["by_kind"].items()])
    kinds.title = (f"latency covered by top-{k} at (a): {result[f'latency_covered_top{k}']:.1%} (exact calls only: "
                   f"{result[f'latency_covered_top{k}_exact_only']:.1%}; candidates by probability: "
                   f"{result[f'latency_covered_top{k}_by_probability']:.1%}); decision time p50 "
                   f"{result['decision_ms_p50']:.3f} ms, p90 {result['decision_ms_p90']:.3f} ms")
    tables = [moments, kinds]
    if "sources" in result:
        found = result["sources"]
        tables.append(Table(["group", "share of calls"], rows=[[name, f"{share:.1%}"] for name, share in
                                                              found["share"].items()],
                            title="where the calls come from; among all candidates at (a): "
                                  f"{found['in_candidates_a']:.1%}"))
    return Report(result, tables)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cmd_bench_predict(args: argparse.Namespace) -> int:
    """`tao bench predict`: the table on stderr, the JSON on stdout."""
    existing(args.train)
    existing(args.test)
    result = run(args.train, args.test, k=args.k, holdout=args.holdout, model_path=args.model,
                 save_model=args.save_model, prefix_chars=args.prefix_chars, epochs=args.epochs,
                 with_sources=args.sources)
    if args.json:
        print(dump(result))
    else:
        report(result).emit()
    return 0 if result["actions"] else 1


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `tao bench predict`."""
    bench = bench_subparsers.add_parser("predict")
    bench.add_argument("--train", type=Path, required=True, help="trajectories to learn from")
    bench.add_argument("--test", type=Path, required=True, help="trajectories to predict (same dir: split by id)")
    bench.add_argument("--k", type=int, default=3, help="candidates per decision (default 3)")
    bench.add_argument("--holdout", type=float, default=0.3,
                       help="share of sessions tested when --train and --test are the same (default 0.3)")
    bench.add_argument("--prefix-chars", type=int, default=8,
                       help="argument characters known at moment (c) (default 8)")
    bench.add_argument("--epochs", type=int, default=2, help="ranker training passes (default 2)")
    bench.add_argument("--model", type=Path, help="use this learned model instead of learning from --train")
    bench.add_argument("--save-model", type=Path, help="also save the learned model here")
    bench.add_argument("--sources", action="store_true",
                       help="also group the test calls by where an exact predictor could know them from, and count "
                            "those among all candidates at (a)")
    bench.add_argument("--json", action="store_true", help="print only the JSON result")
    bench.set_defaults(func=cmd_bench_predict)
