"""`tao bench cosched-plot`: the curves of `tao bench cosched --json` results as one PNG.

    tao bench cosched-plot sim.json embedded.json --out docs/cosched.png

One panel per engine setup: full `--json` results of the same engine, profile (and the pacing set from
it), workload, cut and KV cache share a panel, their levels joined (so runs made one level at a time draw one curve); a
`--partial` file (levels only, any modes) has its own. Mean (solid) and p99 (dashed) session time
against concurrent sessions, one colour per mode.
Needs matplotlib: the optional `plot` extra (`pip install -e '.[plot]'`); Tao itself does not.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.bench.cosched_error import read
from harness.errors import UsageError

COLOURS = {"fcfs": "#7f7f7f", "spec": "#1f77b4", "cap": "#2ca02c", "las": "#9467bd", "ttl": "#8c564b",
           "tao": "#ff7f0e", "tao+spec": "#d62728", "cosched": "#d62728"}  # cosched: tao+spec in older results
LABELS = {"fcfs": "fcfs, no speculation", "spec": "speculation, no pacing", "cap": "best cap on sessions in flight",
          "las": "least attained service", "ttl": "TTL retention (Continuum-like)", "tao": "tao: pacing",
          "tao+spec": "tao: pacing + speculation", "cosched": "speculation + co-scheduler"}


def setup(config: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree for two runs to share a panel: all but the levels run and how (caps, repeats, modes).
    The pacing set from the profile and the workload is part of it, so two calibrations draw two panels."""
    workload = Path(config.get("workload") or "examples/sessions").name  # however the run named its path
    return (config["engine"], config["profile"], workload, config.get("steps"),
            config.get("holdout"), json.dumps(config.get("pacing"), sort_keys=True))


def panels(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per engine setup, in first-seen order: levels of runs with the same setup joined.

    Where two runs have the same level, the later file's row stands, so a rerun replaces what it repeats.
    """
    merged: dict[Any, dict[str, Any]] = {}
    for index, result in enumerate(results):
        key = setup(result["config"]) if result.get("config") else ("partial", index)
        panel = merged.setdefault(key, {**result, "levels": []})
        rerun = {row["sessions"] for row in result["levels"]}
        panel["levels"] = [row for row in panel["levels"] if row["sessions"] not in rerun] + list(result["levels"])
    return list(merged.values())


def plot(results: list[dict[str, Any]], out: Path) -> None:
    """Draw every result's curves side by side and save them as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plotting needs matplotlib, an optional extra: pip install -e '.[plot]'") from None
    results = panels(results)
    cols = len(results) if len(results) <= 3 else 2  # four or more panels go in rows of two
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.4 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.set_visible(False)
    for ax, result in zip(axes.flat, results):
        level_rows = sorted(result["levels"], key=lambda row: row["sessions"])
        levels = [row["sessions"] for row in level_rows]
        for mode, colour in COLOURS.items():
            for stat, style in (("mean", "-"), ("p99", "--")):
                points = [(row["sessions"], row["modes"][mode][stat]) for row in level_rows if mode in row["modes"]]
                if points:
                    ax.plot(*zip(*points), style, color=colour, marker="o", markersize=3,
                            label=f"{LABELS[mode]} ({stat})")
        config = result.get("config")  # a `--partial` file has levels only
        title = f"engine: {config['engine']} ({config['profile']})" if config else result.get("title", "partial run")
        if config and config["engine"] == "embedded":
            title += f", KV cache {config['pacing']['kv_tokens']:,} tokens"
        if config and config.get("steps"):
            title += f", first {config['steps']} steps"
        if config and config.get("workload", "examples/sessions") != "examples/sessions":
            title += f"\n{Path(config['workload']).name}"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("concurrent sessions")
        ax.set_ylabel("session time (s)")
        if max(levels) / max(1, min(levels)) > 16:
            ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(n) for n in levels])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def cmd_plot(args: argparse.Namespace) -> int:
    plot([read(path) for path in args.results], args.out)
    print(f"wrote {args.out}")
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `cosched-plot` to `tao bench`."""
    parser = bench_subparsers.add_parser("cosched-plot")
    parser.add_argument("results", nargs="+", type=Path,
                        help="result files of `tao bench cosched --json`; runs of one engine setup share a panel")
    parser.add_argument("--out", type=Path, default=Path("docs/cosched.png"), help="the PNG (default docs/cosched.png)")
    parser.set_defaults(func=cmd_plot)
