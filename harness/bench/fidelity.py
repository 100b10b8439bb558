"""`tao bench fidelity`: is a promoted speculation exactly what the real run would have given?

For every generated case (harness.bench.fidelity_kinds) two worlds run one after the other, at the same
absolute path and each from a fresh copy of the same tree:

    off: the earlier calls, then the model's real call, through a Session without speculation;
    on:  the same calls through a Session with a real SpeculationScheduler, the case's candidate launched
         (and, most of the time, waited for) before the real call.

Compared byte for byte: every observation (text, is_error, exit_code, truncated_chars), the final tree
(type, mode, owner, bytes, symlink target, link count and which paths are hard links of which) and the
canaries outside the workspace (`out/`, the scratch $HOME, the case's files in the real /tmp and in the
overlay state base). A mismatch is re-checked with a second off run:

    difference  the on world differs and two real runs agree (served by a speculation or the repeat cache,
                or, with nothing served, a discarded speculation that left a trace)
    unstable    two real runs differ too: the case is nondeterministic (the bench's own fault, or Tao's)
    escape      the workspace or a canary changed while the speculation ran, before the real call; or a
                hostile command printed that a forbidden step worked
    crash       an exception (or a hang) out of Tao's code in either world, a speculative run's included
                (the scheduler hides those and runs the call for real, so nothing of that kind is compared)

Prints JSON with the counts, the first examples of each, counts by kind and label, and the machine;
exit code 1 when there are differences, escapes or crashes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.fidelity_cases import Call, Case, call_dict
from harness.bench.fidelity_kinds import KINDS, case_by_id, generate
from harness.bench.fidelity_tree import Places, Snapshot, Trash, build, clear, diff_trees, excerpt, remove, snapshot
from harness.bench.fidelity_world import PROJECT, Seen, World, run_world
from harness.bench.report import Report, Table
from harness.environ import kept_environment
from harness.machine import machine

__all__ = ["Places", "Snapshot", "Verdict", "World", "build", "compare", "diff_trees", "judge", "remove", "run_cases",
           "scratch_base", "snapshot"]

EXAMPLES = 5  # examples kept of each failure class


def diff_seen(label: str, a: Seen, b: Seen) -> list[str]:
    """How two observations of the same call differ (the on world's first)."""
    names = ("text", "is_error", "exit_code", "truncated_chars")
    return [f"{label}: {name} {excerpt(x, y) if name == 'text' else f'{x!r} vs {y!r}'}"
            for name, x, y in zip(names, a, b) if x != y]


# -- judging a case -----------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What one case showed."""

    case: Case
    served: str | None = None  # how the real call was answered in the on world (None: run for real)
    history_served: int = 0  # earlier calls answered by the scheduler (the repeat cache)
    differences: list[str] = field(default_factory=list)
    escapes: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    unstable: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # logged by Tao; shown, not counted against it
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """True when the case counts against the guarantee (a difference, an escape or a crash)."""
        return bool(self.differences or self.escapes or self.crashes)


def compare(case: Case, a: World, b: World) -> list[str]:
    """Every mismatch between two worlds; a knowingly nondeterministic real call is checked by its regex."""
    lines = []
    same = {f"h{i} " for i, step in enumerate(case.history) if step == case.real} | {"real "}
    for index, ((label, x), (_, y)) in enumerate(zip(a.seen, b.seen)):
        if case.expect is None or label[:label.index(" ") + 1] not in same:
            lines += diff_seen(label, x, y)
        elif not re.fullmatch(case.expect, x[0]):
            lines.append(f"{label}: text {x[0][:120]!r} is no output a real run gives (expected {case.expect!r})")
        elif x[0] in [seen[0] for name, seen in a.seen[:index] if name[:name.index(" ") + 1] in same]:
            lines.append(f"{label}: text {x[0][:120]!r} repeats an earlier run's output: a stale answer")
    if len(a.seen) != len(b.seen):
        lines.append(f"calls made: {len(a.seen)} vs {len(b.seen)}")
    if a.tree is not None and b.tree is not None:
        lines += diff_trees(a.tree, b.tree)
    return lines


async def judge(case: Case, places: Places, keep: Path | None = None) -> Verdict:
    """Run both worlds of a case (and a second off world on a mismatch) and classify what they show."""
    started = time.monotonic()
    scratch = places.base / "kept" if keep is not None else None
    off = await run_world(case, places, False, scratch / "off" if scratch else None)
    on = await run_world(case, places, True, scratch / "on" if scratch else None)
    verdict = Verdict(case, on.served.get("real"), sum(1 for cid in on.served if cid != "real"),
                      escapes=on.escapes)
    worlds = (("off", off), ("on", on))
    verdict.crashes = [f"{name} world, {world.crash}" for name, world in worlds if world.crash]
    verdict.warnings = [f"{name} world: {line}" for name, world in worlds for line in world.warnings]
    # A failed speculative run is hidden by the scheduler (the call runs for real), but then nothing of that
    # kind is ever promoted, so nothing of it is compared: it counts as a crash.
    verdict.crashes += [f"on world, {error}" for error in on.spec_errors]
    if not (off.crash or on.crash) and (mismatch := compare(case, on, off)):
        again = await run_world(case, places, False)
        if again.crash or compare(case, again, off):
            verdict.unstable = mismatch + ["two real runs differ too"]
        elif verdict.served or verdict.history_served:
            verdict.differences = mismatch
        elif verdict.escapes:  # what escaped is still there: the escape is the finding
            verdict.escapes.append(f"and so the worlds end differently: {mismatch[0]}")
        else:
            verdict.differences = ["nothing was served, yet two real runs agree and this one does not:", *mismatch]
    verdict.seconds = time.monotonic() - started
    if scratch is not None and keep is not None and verdict.failed:
        save(verdict, places, scratch, keep)
    return verdict


def save(verdict: Verdict, places: Places, scratch: Path, keep: Path) -> None:
    """Keep a failing case: its description and findings, and the final tree of each world."""
    target = keep / verdict.case.id
    remove(target)
    target.mkdir(parents=True)
    for world in ("off", "on"):
        if (scratch / world).exists():
            (scratch / world).rename(target / world)
    report = {"case": verdict.case.to_dict(), "root": str(places.root), "tmp": f"/tmp/{places.token}",
              **{name: getattr(verdict, name) for name in ("served", "differences", "escapes", "crashes")}}
    (target / "case.json").write_text(json.dumps(report, indent=2, default=repr))


class Loopback(socketserver.ThreadingTCPServer):
    """A server on 127.0.0.1 that answers `pong` (the environment-sensitive cases connect to it)."""

    daemon_threads = True

    def __init__(self) -> None:
        """Listen on a free loopback port and serve from a thread of its own."""

        class Pong(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                """Answer every connection with one line."""
                self.request.sendall(b"pong\n")

        super().__init__(("127.0.0.1", 0), Pong)
        threading.Thread(target=self.serve_forever, daemon=True).start()


async def run_cases(cases: list[Case], base: Path, keep: Path | None = None,
                    progress: bool = False) -> list[Verdict]:
    """Judge every case at one place under `base` (HOME and the overlay state base set for the run)."""
    with kept_environment("HOME", "TAO_OVERLAY_DIR"):
        server = Loopback()
        places = Places(base, f"tao-fid-{os.getpid()}-{os.urandom(3).hex()}", server.server_address[1], Trash(base))
        places.state.mkdir(parents=True, exist_ok=True)
        os.environ["TAO_OVERLAY_DIR"] = str(places.state)
        verdicts: list[Verdict] = []
        try:
            for index, case in enumerate(cases):
                verdicts.append(await judge(case, places, keep))
                if progress and (index + 1) % 100 == 0:
                    bad = sum(v.failed for v in verdicts)
                    print(f"fidelity: {index + 1}/{len(cases)} cases, {bad} failing", file=sys.stderr, flush=True)
        finally:
            server.shutdown()
            server.server_close()
            clear(places)
            if places.trash is not None:
                places.trash.close()
    return verdicts


# -- the report -------------------------------------------------------------------------------------------


def short_call(call: Call, limit: int = 160) -> str:
    """`name {json arguments}`, cut to `limit` characters (control characters escaped)."""
    try:
        text = json.dumps(call_dict(call)["arguments"], ensure_ascii=True)
    except (RecursionError, ValueError):
        text = "<arguments too deeply nested to show>"
    name = json.dumps(call.name, ensure_ascii=True)
    return f"{name} {text}"[:limit]


def example(verdict: Verdict, lines: list[str]) -> dict[str, Any]:
    """One failing case, compactly: id, kind, how it was served, what differed, the calls."""
    case = verdict.case
    return {"case": case.id, "kind": case.kind, "label": case.label, "served": verdict.served, "what": lines[:4],
            "candidate": short_call(case.candidate), "real": short_call(case.real),
            "history": [short_call(s, 80) if isinstance(s, Call) else f"outside: append to {s.path}"
                        for s in case.history]}


CLASSES = ("differences", "escapes", "crashes", "unstable", "warnings")


def report(verdicts: list[Verdict], seed: int, seconds: float) -> dict[str, Any]:
    """The benchmark's JSON: counts, first examples, counts by kind and by failing label, the machine."""
    by_kind: dict[str, Counter[str]] = {}
    labels: dict[str, Counter[str]] = {}
    examples: dict[str, list[dict[str, Any]]] = {name: [] for name in CLASSES}
    for v in verdicts:
        counts = by_kind.setdefault(v.case.kind, Counter())
        counts["cases"] += 1
        counts["promoted"] += v.served is not None
        for name in CLASSES:
            found = getattr(v, name)
            counts[name] += bool(found)
            if found:
                labels.setdefault(f"{v.case.kind}/{v.case.label}", Counter())[name] += 1
                if len(examples[name]) < EXAMPLES:
                    examples[name].append(example(v, found))
    total = sum(by_kind.values(), Counter())
    return {"benchmark": "fidelity", "seed": seed, "cases": len(verdicts), "promoted": total["promoted"],
            "repeats": sum(v.served == "repeat" for v in verdicts),
            **{name: total[name] for name in CLASSES}, "examples": examples,
            "by_kind": {kind: {name: by_kind[kind][name] for name in ("cases", "promoted", *CLASSES)}
                        for kind in KINDS if kind in by_kind},
            "failing_labels": {label: dict(c) for label, c in sorted(labels.items())},
            "seconds": round(seconds, 1), "ms_per_case": round(1000 * seconds / max(1, len(verdicts)), 1),
            "commit": commit(), "machine": {**machine(), "euid": os.geteuid()}}


def commit() -> str | None:
    """The checkout's commit, with `+` when it has uncommitted changes (None outside a git checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT,
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")


def summary(result: dict[str, Any]) -> Report:
    """Counts by kind and in all, then the run's size and time, then the failing labels."""
    head = ("cases", "promoted", *CLASSES)
    rows = [[kind, *(str(row[h]) for h in head)]
            for kind, row in [*result["by_kind"].items(), ("total", {h: result[h] for h in head})]]
    notes = [f"{result['cases']} cases in {result['seconds']} s ({result['ms_per_case']} ms a case), "
             f"seed {result['seed']}"]
    notes += [f"  {label}: " + ", ".join(f"{n} {name}" for name, n in counts.items())
              for label, counts in result["failing_labels"].items()]
    return Report(result, [Table(["kind", *head], rows)], notes)


def scratch_base() -> Path:
    """A fresh directory for a run's cases, under ~/.cache/tao: not under /tmp, which a sandboxed run sees
    as a private, empty /tmp (a workspace there would lose its outside files to every speculation)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tao"
    cache.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="fidelity-", dir=cache))


def run(args: argparse.Namespace) -> int:
    """Entry point of `tao bench fidelity`."""
    try:
        cases = ([case_by_id(args.seed, cid) for cid in args.case] if args.case
                 else generate(args.seed, args.cases, args.only))
    except ValueError as exc:
        print(f"tao bench fidelity: {exc}", file=sys.stderr)
        return 2
    base = scratch_base()
    keep = Path(args.keep).absolute() if args.keep else None
    started = time.monotonic()
    try:
        verdicts = asyncio.run(run_cases(cases, base, keep, progress=True))
    finally:
        remove(base)
    result = report(verdicts, args.seed, time.monotonic() - started)
    summary(result).emit(args.json)
    return 1 if any(result[name] for name in ("differences", "escapes", "crashes")) else 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `fidelity` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "fidelity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2000, help="cases to generate (default 2000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generator (default 1)")
    parser.add_argument("--only", choices=KINDS, help="generate cases of this kind only")
    parser.add_argument("--case", action="append", metavar="ID",
                        help="run only this case (e.g. near-miss-0042; repeatable); ids depend on the seed only")
    parser.add_argument("--keep", metavar="DIR", help="save each failing case (description, both final trees) here")
    parser.add_argument("--json", action="store_true", help="print the JSON result on stdout (table on stderr)")
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """Run without the `tao` CLI: python -m harness.bench.fidelity [options]."""
    parser = argparse.ArgumentParser(prog="tao bench")
    register(parser.add_subparsers(dest="bench", required=True))
    args = parser.parse_args(["fidelity", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
