"""The `tao bench replay` command: arguments, the table, the plot."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.bench import dump
from harness.bench.report import Report, Table
from harness.errors import UsageError
from harness.speculation.running.records import Budget

RUN_LABELS = {"baseline": "serial", "tao": "Tao", "paste": "patterns (a) only", "spork": "streamed (b,c) only",
              "aospec": "observations only", "chain": "past an edit only", "oracle": "oracle",
              "oracle_obs": "oracle + observations", "oracle_speculable": "oracle, speculable calls",
              "oracle_ranked": "perfect ranker of Tao's candidates",
              "oracle_mut": "oracle past mutations"}
SEQUENTIAL_LABEL = "Tao, adapted to the user"  # --sequential: beside "Tao", the shipped model alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench replay`."""
    parser.add_argument("--traces", type=Path, required=True, help="trajectories to replay (held-out part)")
    parser.add_argument("--train", type=Path, default=None,
                        help="trajectories to learn patterns from (default: --traces, split by instance)")
    parser.add_argument("--tpot-ms", default="1,10,20,50", help="times per output token to replay at, in ms")
    parser.add_argument("--sessions", type=int, default=1, help="also replay N sessions sharing one engine")
    parser.add_argument("--holdout", type=float, default=0.3, help="share of sessions tested when split")
    parser.add_argument("--prefill-tps", type=float, default=5_000.0, help="prefill speed, tokens a second")
    parser.add_argument("--model", type=Path, default=None, help="a saved pattern model instead of learning one")
    parser.add_argument("--save-model", type=Path, default=None, help="save the learned pattern model here")
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N test trajectories")
    parser.add_argument("--k", type=int, default=None, help="candidates Tao considers a moment (default: Budget's)")
    parser.add_argument("--max-sandboxed", type=int, default=None,
                        help="overlay runs at once (default: Budget's, cpu_count // 2 on this machine)")
    parser.add_argument("--latency", choices=("trace", "local"), default="trace",
                        help="tool seconds where the trace has none: regressed from the traces, or measured here")
    parser.add_argument("--sequential", action="store_true",
                        help="also replay Tao with the model adapted to each user's (project's) earlier sessions "
                             "only, in time order, as `tao run` adapts it")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG of per-trajectory reductions")


def parse_tpots(text: str) -> list[float]:
    """`1,10,20` as milliseconds."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--tpot-ms takes numbers separated by commas, not {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise UsageError("--tpot-ms needs at least one positive value")
    return values


def cmd_replay(args: argparse.Namespace) -> int:
    """Run the benchmark; print JSON or a table; draw the plot if asked."""
    from harness.bench import replay

    if not args.traces.exists():
        raise UsageError(f"no such trajectories: {args.traces}")
    budget = Budget()
    budget = replace(budget, k=args.k or budget.k, max_sandboxed=args.max_sandboxed or budget.max_sandboxed)
    result = replay.run(args.train or args.traces, args.traces, parse_tpots(args.tpot_ms), args.sessions,
                        args.holdout, args.model, args.save_model, args.prefill_tps, args.limit, budget,
                        args.latency, args.sequential)
    if args.json:
        print(dump(result), flush=True)
    else:
        report(result).emit(as_json=False)
    if args.plot is not None:
        plotted = plot(result, args.plot)
        if plotted is not None:
            print(plotted, file=sys.stderr)
    return 0


def report(result: dict[str, Any]) -> Report:
    """Task times per run, then Tao's figures, one table per time per token, under the accuracy."""
    acc = result["accuracy"]
    heading = [f"{result['test_sessions']} trajectories, {result['steps']} steps, {acc['calls']} calls "
               f"(train: {result['train_sessions']}); prefill {result['prefill_tps']:g} tokens/s; tool latency "
               f"model {result['latency']!r}; budget {result['budget']}",
               f"Tao served {acc['served_share']:.1%} of calls from speculation "
               f"(by moment {acc['served_by_moment']}); (a) top-1 {acc['a_top1']:.1%}, top-3 {acc['a_top3']:.1%}; "
               f"warmed prompts {acc['warmed']}",
               f"measured tool durations: {acc['measured_durations']} calls ({acc['measured_share']:.0%}); the "
               "others' from the latency model"]
    if "sequential" in result:
        seq = result["sequential"]
        heading.append(f"adapted to each user's earlier sessions ({seq['sessions_with_past']} of "
                       f"{result['test_sessions']} sessions had some): served {seq['accuracy']['served_share']:.1%}; "
                       f"(a) top-1 {seq['accuracy']['a_top1']:.1%}, top-3 {seq['accuracy']['a_top3']:.1%}")
    return Report(result, [per_tpot(tpot, entry) for tpot, entry in result["tpot_ms"].items()], heading=heading)


def per_tpot(tpot: str, entry: dict[str, Any]) -> Table:
    """One time per token: each run's task times, and Tao's figures below them."""
    rows = [[RUN_LABELS[run], f"{row['mean']:.1f}", f"{row['p50']:.1f}", f"{row['p99']:.1f}",
             f"{row['mean_reduction']:.1%}", f"{row['p99_reduction']:.1%}"] for run, row in entry["runs"].items()]
    if "sequential" in entry:
        row = entry["sequential"]
        below = next(i for i, cells in enumerate(rows) if cells[0] == RUN_LABELS["tao"]) + 1
        rows.insert(below, [SEQUENTIAL_LABEL, f"{row['mean']:.1f}", f"{row['p50']:.1f}", f"{row['p99']:.1f}",
                            f"{row['mean_reduction']:.1%}", f"{row['p99_reduction']:.1%}"])
    caption = (f"Tao: {entry['mean_reduction']:.1%} mean, {entry['p99_reduction']:.1%} p99; "
               f"oracle share {entry['oracle_share']:.0%} (of the speculable calls' oracle "
               f"{entry['oracle_speculable_share']:.0%}); {_times(entry['vs_best_single'])} the best single "
               f"mechanism ({entry['best_single']}); tool latency {_times(entry['tool_latency_ratio'])} lower; "
               f"{entry['wasted_cpu_s']:.0f} CPU-s wasted; slower than serial beyond its overhead on "
               f"{entry['slower_than_baseline_beyond_overhead']} trajectories")
    if "sessions" in entry:
        load = entry["sessions"]
        caption += (f"\n{load['n']} sessions on one engine (knee {load['knee']}): serial "
                    f"{load['baseline']['mean']:.0f} s mean; Tao {load['tao']['mean_reduction']:.1%} mean / "
                    f"{load['tao']['p99_reduction']:.1%} p99; Tao + co-scheduling "
                    f"{load['tao_cosched']['mean_reduction']:.1%} mean / "
                    f"{load['tao_cosched']['p99_reduction']:.1%} p99 (PASTE reports -43.5% / -55.4%)")
    return Table([f"{tpot} ms/token", "mean s", "p50 s", "p99 s", "mean red", "p99 red"], rows, caption=caption)


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def plot(result: dict[str, Any], path: Path) -> str | None:
    """Draw the distribution of per-trajectory reductions; a message instead if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (f"tao: no plot written to {path}: matplotlib is not installed (it is the optional `plot` extra: "
                "`pip install -e '.[plot]'` to draw it)")
    figure, axis = plt.subplots(figsize=(8, 4.2))
    labels = list(result["tpot_ms"])
    for offset, key, color, name in ((-0.18, "per_trajectory_reduction", "tab:blue", "Tao"),
                                     (0.18, "per_trajectory_oracle_reduction", "tab:grey", "oracle")):
        data = [[100 * x for x in result["tpot_ms"][tpot].get(key, [])] for tpot in labels]
        positions = [i + 1 + offset for i in range(len(labels))]
        boxes = axis.boxplot(data, positions=positions, widths=0.3, showmeans=True, patch_artist=True)
        for box in boxes["boxes"]:
            box.set_facecolor(color)
            box.set_alpha(0.45)
        if boxes["boxes"]:
            boxes["boxes"][0].set_label(name)
    axis.set_xticks(range(1, len(labels) + 1), [f"{tpot} ms/token" for tpot in labels])
    axis.legend(loc="upper right")
    axis.axhline(0, color="grey", linewidth=0.8)
    axis.set_ylabel("task time saved vs the serial loop (%)")
    axis.set_title(f"Trace replay: {result['test_sessions']} held-out trajectories")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None


def register(bench_subparsers: Any) -> None:
    """Add `replay` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "replay",
        description="Replay held-out trajectories step by step without looking ahead and report how much "
                    "sooner each finishes with Tao than with a serial loop, against the oracle bound and "
                    "each speculation mechanism alone, at each time per output token.")
    add_arguments(parser)
    parser.set_defaults(func=cmd_replay)
