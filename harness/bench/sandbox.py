"""`tao bench sandbox`: overlay create + destroy time against repository size, for every backend.

For each size (files in a generated git repository with a few uncommitted changes) and each backend
that works here, it times: creating the overlay (layers or copy), the first run of `true` inside it
(namespaces and mounts included), and discarding it; the median of `--repeat` rounds. It also times
`Workspace.refresh()` (noticing outside changes) with inotify and with stat snapshots.
Prints JSON on stdout, then a table on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench.report import Report, Table, cell
from harness.machine import machine
from sandbox import Workspace
from sandbox.backends import ORDER, unavailable
from sandbox.probe import detect
from sandbox.statedir import choose_base
from sandbox.timing import make_repo, measure_median, ms


def refresh_cost(root: Path, mode: str, repeat: int) -> dict[str, Any]:
    """How long starting to watch and one refresh take with `mode` ("inotify" or "stat")."""
    t0 = time.perf_counter()
    workspace = Workspace(root, watch=mode)
    workspace.refresh()
    t1 = time.perf_counter()
    times = []
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        workspace.refresh()
        times.append(time.perf_counter() - t)
    workspace.close()
    return {"watch": mode, "start_ms": ms(t1 - t0), "refresh_ms": round(statistics.median(times) * 1000, 2)}




async def bench(sizes: list[int], backends: list[str], repeat: int) -> dict[str, Any]:
    """Every backend at every size; see the module docstring."""
    rows: list[dict[str, Any]] = []
    watch_rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    load = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="tao-bench-sandbox-") as tmp:
        for files in sizes:
            root = make_repo(Path(tmp) / f"repo{files}", files)
            workspace = Workspace(root)
            caps = await detect(choose_base(root))
            for backend in backends:
                reason = unavailable(backend, caps, root)
                if reason is not None:
                    skipped[backend] = reason
                    continue
                rows.append({"files": files, "backend": backend, **await measure_median(workspace, backend, repeat)})
            for mode in ("inotify", "stat"):
                watch_rows.append({"files": files, **refresh_cost(root, mode, repeat)})
            workspace.close()
    return {"benchmark": "sandbox", "repeat": repeat,
            "machine": {**machine(), "euid": os.geteuid(), "loadavg_1m_at_start": load},
            "capabilities": caps.to_dict(),
            "results": rows, "refresh": watch_rows, "skipped": skipped}


def report(result: dict[str, Any]) -> Report:
    """Overlay timings per size and backend, then the watch costs, then the backends skipped and why."""
    timings = Table(["files", "backend", "create", "run true", "discard", "total"], left=2, rows=[
        [str(r["files"]), r["backend"], *(cell(r[key], ".1f", " ms") for key in ("create_ms", "run_ms", "discard_ms",
                                                                               "total_ms"))]
        for r in result["results"]])
    watch = Table(["files", "watch", "start", "refresh"], left=2, rows=[
        [str(r["files"]), r["watch"], cell(r["start_ms"], ".1f", " ms"), cell(r["refresh_ms"], ".2f", " ms")]
        for r in result["refresh"]])
    return Report(result, [timings, watch], [f"skipped {name}: {reason}" for name, reason in result["skipped"].items()])


def run(args: argparse.Namespace) -> int:
    """Entry point of `tao bench sandbox`."""
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        print(f"tao bench sandbox: --sizes must be comma-separated integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in ORDER]
    if unknown or not sizes:
        print(f"tao bench sandbox: unknown backend(s) {', '.join(unknown)}; choose from {', '.join(ORDER)}"
              if unknown else "tao bench sandbox: give at least one size", file=sys.stderr)
        return 2
    result = asyncio.run(bench(sizes, backends, args.repeat))
    report(result).emit()
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `sandbox` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "sandbox", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", default="100,1000,10000", help="files per repository (default 100,1000,10000)")
    parser.add_argument("--backends", default=",".join(ORDER), help=f"backends to time (default {','.join(ORDER)})")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per measurement; the median is kept (default 5)")
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """Run without the `tao` CLI: python -m harness.bench.sandbox [options]."""
    parser = argparse.ArgumentParser(prog="tao bench")
    register(parser.add_subparsers(dest="bench", required=True))
    args = parser.parse_args(["sandbox", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
