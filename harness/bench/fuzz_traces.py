"""`tao bench fuzz-traces`: damaged trajectory files of every format must never crash Tao.

Fuzzed files are made from valid seeds (built in, plus the files of `--from DIR`) by mutations (truncation,
flipped bytes, lines deleted or doubled, wrong JSON types for any value, NaN, huge numbers, deep nesting,
invalid UTF-8, a BOM, CRLF, empty files, binary garbage), and some are not files at all (a directory, a
FIFO, an unreadable file, a dangling symlink or a symlink loop where a file is expected). Each one goes
through everything that reads trajectories:

- the importers (`load_sessions`), recognising the format and forced to each format in turn;
- what `tao traces stats|learn` does with an imported session (canonical calls, the analyzer's replay),
  and writing it as a Tao trajectory that must read back (`tao traces import`);
- `read_trajectory` (resume, replay), which may only raise its own `EventDecodeError`;
- whole folders of them: `load_sessions(folder)` and `past_sessions(folder)` (what `tao run` reads first).

Properties: nothing raises (a crash), nothing hangs, nothing is caught by an importer's last-resort guard
(also a crash: the guard hides a bug), a file that gives no session is named in a skip message, and a
folder imports exactly the sessions its files import one by one.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import run_module
from harness.bench.fuzz_traces_seeds import Seed, builtin_seeds, mutate
from harness.bench.report import Report, Table
from harness.calls.canonical import canonical
from harness.errors import UsageError
from harness.events import EventDecodeError, read_trajectory
from harness.machine import machine
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.past import past_sessions
from harness.speculation.prediction.training import adapt
from harness.traces import FORMATS, Imported, ImportReport, load_sessions, trajectory_files, write_session

KINDS = ("directory", "fifo", "unreadable", "dangling-link", "link-loop")  # not a readable regular file
HANG_SECONDS = 30.0  # one check taking this long is a hang (generous: the machine may be busy)
EXAMPLES = 5
FOLDER_FILES = 12  # fuzzed files a folder check puts together


@dataclass
class Case:
    """One fuzzed file: its name, what it is made from, and how it was damaged."""

    name: str
    seed: str
    kind: str = "file"  # or one of KINDS
    data: bytes = b""
    mutations: list[str] = field(default_factory=list)


@dataclass
class Tally:
    """What the checks found: imported and skipped files, crashes (with the first few) and broken properties."""

    files: int = 0
    imported: int = 0
    skipped: int = 0
    sessions: int = 0
    skip_messages: int = 0
    crashes: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    unreported: int = 0
    folders: int = 0
    folder_mismatches: int = 0
    by_mutation: dict[str, Counter[str]] = field(default_factory=dict)

    def crash(self, case: Case | None, where: str, error: str, keep: Path | None = None) -> None:
        """Count a crash; keep its details (and the file, under `keep`) for the first few."""
        self.crashes += 1
        for name in (case.mutations or [case.kind]) if case else ["folder"]:
            self.by_mutation.setdefault(name, Counter())["crashes"] += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append({"file": case.name if case else "", "seed": case.seed if case else "",
                                  "kind": case.kind if case else "folder",
                                  "mutations": case.mutations if case else [], "where": where, "error": error})
        if keep is not None and case is not None and case.kind == "file":
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{self.crashes:04d}-{case.name}").write_bytes(case.data)


class _Hang(Exception):
    """A check ran longer than HANG_SECONDS."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hang(f"still running after {HANG_SECONDS:.0f} s")


def guarded(tally: Tally, case: Case | None, where: str, keep: Path | None, check: Callable[[], Any]) -> Any:
    """Run one check; an exception or a hang is a crash (None is returned then). In the main thread a timer
    interrupts a check that blocks (a FIFO opened for reading with no writer blocks forever)."""
    timed = hasattr(signal, "setitimer") and _main_thread()
    if timed:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        return check()
    except (Exception, RecursionError) as exc:  # every escape is what this counts
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        tally.crash(case, where, f"{type(exc).__name__}: {str(exc)[:300]}{at}", keep)
        return None
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def make_cases(count: int, rng: random.Random, seeds: list[Seed]) -> Iterator[Case]:
    """`count` fuzzed files; one in 25 is not a readable file at all, the rest are damaged seeds."""
    for index in range(count):
        name, data = rng.choice(seeds)
        stem, dot, suffix = name.partition(".")
        fuzzed = f"f{index:05d}-{stem[:40]}{dot}{suffix}"
        if rng.random() < 0.04:
            yield Case(fuzzed, name, rng.choice(KINDS))
            continue
        damaged, done = mutate(rng, data)
        yield Case(fuzzed, name, "file", damaged, done)


def materialize(case: Case, folder: Path) -> Path:
    """Put the case in `folder` as what it is: a file, a folder, a FIFO, an unreadable file or a bad link."""
    path = folder / case.name
    match case.kind:
        case "directory":
            path.mkdir()
            (path / "inner.jsonl").write_text("{}\n")
        case "fifo":
            os.mkfifo(path)
        case "unreadable":
            path.write_bytes(b'{"type": "session_start", "t": 0}\n')
            path.chmod(0)  # root reads it anyway; anyone else may not
        case "dangling-link":
            path.symlink_to(folder / "nowhere.jsonl")
        case "link-loop":
            path.symlink_to(path)
        case _:
            path.write_bytes(case.data)
    return path


def _load_all(path: Path, fmt: str | None, report: ImportReport) -> list[Imported]:
    """Every session `fmt`'s reader finds in `path`, read in full (inside the guard that calls it)."""
    return list(load_sessions(path, fmt, report))


def check_file(tally: Tally, case: Case, path: Path, scratch: Path, keep: Path | None) -> int:
    """Every reader on one file; returns how many sessions it gave when its format is recognised."""
    found = 0
    for fmt in (None, *FORMATS):
        report = ImportReport()
        sessions = guarded(tally, case, f"import --from {fmt or 'auto'}", keep,
                           functools.partial(_load_all, path, fmt, report))
        if sessions is None:
            continue
        for error in report.errors:
            tally.crash(case, f"import --from {fmt or 'auto'} (caught by the guard)", error, keep)
        tally.skip_messages += len(report.skipped)
        if fmt is None:
            found = len(sessions)
            if not sessions and not any(line.startswith(str(path)) for line in report.skipped) \
                    and _expected_report(path):
                tally.unreported += 1
        for session in sessions:
            guarded(tally, case, f"use --from {fmt or 'auto'}", keep, functools.partial(use, session, scratch))
    if path.suffix == ".jsonl":
        guarded(tally, case, "read_trajectory", keep, lambda: _read_or_refuse(path))
    return found


def _expected_report(path: Path) -> bool:
    """Whether a file that gives no session must be named in a skip message (a plain `.json` is not a
    trajectory file until its content says so, and is passed over in silence)."""
    return not (path.suffix == ".json" and not path.name.endswith(".traj.json"))


def _read_or_refuse(path: Path) -> None:
    """`read_trajectory` either reads the file or says what is wrong with it (EventDecodeError)."""
    try:
        read_trajectory(path)
    except EventDecodeError:
        pass


def use(session: Any, scratch: Path) -> None:
    """What `tao traces stats|learn|import` do with an imported session, and what resuming it reads."""
    root = getattr(session.events[0], "repo", "") if session.events else ""
    for event in session.events:
        if event.type == "tool_call":
            canonical(event.name, event.arguments, root)
    adapt(PatternModel(), [session.events])
    written = write_session(session, scratch)
    again = read_trajectory(written)
    if [e.to_json() for e in again] != [e.to_json() for e in session.events]:
        raise AssertionError(f"session {session.session_id!r} written as a Tao trajectory reads back different")
    written.unlink()


def check_folder(tally: Tally, cases: list[Case], folder: Path, expected: int, keep: Path | None) -> None:
    """A folder of fuzzed files beside valid ones imports what its files import one by one; `tao run`'s
    reading of past sessions takes it too."""
    tally.folders += 1
    sessions = guarded(tally, None, "import folder", keep, lambda: list(load_sessions(folder, None, ImportReport())))
    if sessions is not None and len(sessions) != expected:
        tally.folder_mismatches += 1
    guarded(tally, None, "past sessions", keep,
            lambda: adapt(PatternModel(), past_sessions(folder, limit=len(cases) + 2)))


def from_dir(directory: Path, rng: random.Random, limit: int = 60) -> list[Seed]:
    """Up to `limit` trajectory files of `directory`, picked at random, as seeds."""
    files = trajectory_files(directory)
    picked = rng.sample(files, min(limit, len(files)))
    return [(path.name, path.read_bytes()) for path in sorted(picked)]


def run(files: int = 1000, seed: int = 0, source: Path | None = None, keep: Path | None = None,
        progress: bool = False) -> dict[str, Any]:
    """Fuzz `files` trajectory files and check each of them, and each folder of them; the result as a dict."""
    if files < 1:
        raise UsageError("--files must be at least 1")
    if source is not None and not source.is_dir():
        raise UsageError(f"--from {source} is not a directory of trajectories")
    rng = random.Random(seed)
    seeds = builtin_seeds() + (from_dir(source, rng) if source is not None else [])
    before, started = machine(), time.perf_counter()
    tally = Tally()
    cases = list(make_cases(files, rng, seeds))
    with tempfile.TemporaryDirectory(prefix="tao-fuzz-traces-") as tmp:
        root = Path(tmp)
        for first in range(0, len(cases), FOLDER_FILES):
            _check_batch(tally, cases[first:first + FOLDER_FILES], root / f"batch{first}", root / "scratch", keep)
            if progress:
                print(f"  {min(first + FOLDER_FILES, len(cases))}/{len(cases)} files, {tally.crashes} crashes",
                      file=sys.stderr, flush=True)
        _unlock(root)
    return {"files": tally.files, "imported": tally.imported, "skipped": tally.skipped,
            "sessions": tally.sessions, "skip_messages": tally.skip_messages, "crashes": tally.crashes,
            "examples": tally.examples, "unreported": tally.unreported, "folders": tally.folders,
            "folder_mismatches": tally.folder_mismatches,
            "by_mutation": {k: dict(v) for k, v in sorted(tally.by_mutation.items())},
            "config": {"files": files, "seed": seed, "from": str(source) if source else None,
                       "seeds": len(seeds), "seconds": round(time.perf_counter() - started, 1)},
            "machine": {**before, "load_after": machine()["load"]}}


def _check_batch(tally: Tally, batch: list[Case], folder: Path, scratch: Path, keep: Path | None) -> None:
    """Check each case of a batch alone, then the folder holding all of them and one valid file per format."""
    folder.mkdir(parents=True)
    expected = 0
    for case in batch:
        path = materialize(case, folder)
        found = check_file(tally, case, path, scratch, keep)
        tally.files += 1
        tally.imported += found > 0
        tally.skipped += found == 0
        tally.sessions += found
        expected += found if path.is_file() else 0
        for name in case.mutations or [case.kind]:
            counts = tally.by_mutation.setdefault(name, Counter())
            counts["files"] += 1
            counts["imported"] += found > 0
    for name, data in builtin_seeds():
        (folder / f"valid-{name}").write_bytes(data)
        expected += len(list(load_sessions(folder / f"valid-{name}")))
    check_folder(tally, batch, folder, expected, keep)


def _unlock(root: Path) -> None:
    """Make unreadable files removable again (for a non-root run)."""
    for path in root.rglob("*"):
        if not path.is_symlink() and path.is_file():
            path.chmod(0o600)


def report(result: dict[str, Any]) -> Report:
    """Per mutation: files, imported and crashes; then the totals, the crashes and the machine."""
    title = (f"fuzz-traces: {result['files']} files from {result['config']['seeds']} seeds, "
             f"seed {result['config']['seed']}")
    rows = [[name, *(str(counts.get(key, 0)) for key in ("files", "imported", "crashes"))]
            for name, counts in result["by_mutation"].items()]
    notes = [f"imported {result['imported']}, skipped {result['skipped']} ({result['skip_messages']} skip "
             f"messages), crashes {result['crashes']}, unreported {result['unreported']}, folders "
             f"{result['folders']} ({result['folder_mismatches']} mismatched)"]
    notes += [f"  crash: {example['file']} ({', '.join(example['mutations']) or example['kind']}) "
              f"in {example['where']}: {example['error']}" for example in result["examples"]]
    m = result["machine"]
    notes.append(f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, load {m['load']} -> "
                 f"{m['load_after']}; {result['config']['seconds']:.0f} s in all")
    return Report(result, [Table(["mutation", "files", "imported", "crashes"], rows, title=title)], notes)


def failed(result: dict[str, Any]) -> bool:
    """Whether any property broke: a crash, an unreported skip or a folder that imported differently."""
    return bool(result["crashes"] or result["unreported"] or result["folder_mismatches"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench fuzz-traces`."""
    parser.add_argument("--files", type=int, default=1000, help="fuzzed files to make and check (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--from", dest="source", type=Path,
                        help="also seed from the trajectory files of this directory (e.g. ../shared/traces)")
    parser.add_argument("--keep", type=Path, help="save the files that crashed here")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_fuzz_traces(args: argparse.Namespace) -> int:
    """Run the fuzzer and print it; exit 1 when a property broke."""
    result = run(args.files, args.seed, args.source, args.keep, progress=not args.json)
    report(result).emit(args.json)
    return 1 if failed(result) else 0


def register(bench_subparsers: Any) -> None:
    """Add `fuzz-traces` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "fuzz-traces",
        description="Make fuzzed trajectory files (mutated seeds of every supported format, and things that are "
                    "not files), then import, learn from, resume and list each of them and each folder of them.")
    add_arguments(parser)
    parser.set_defaults(func=cmd_fuzz_traces)


if __name__ == "__main__":
    sys.exit(run_module("python -m harness.bench.fuzz_traces", add_arguments, cmd_fuzz_traces, sys.argv[1:]))
