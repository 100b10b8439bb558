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
import logging
import os
import re
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import emit, machine
from harness.bench.fidelity_cases import ESCAPE_MARK, Call, Case, Outside, call_dict
from harness.bench.fidelity_kinds import KINDS, case_by_id, generate
from harness.bench.fidelity_tree import Places, Snapshot, Trash, build, clear, diff_trees, excerpt, remove, snapshot
from harness.engine.replay import Recording, ReplayEngine
from harness.events import Event, SpecPromote, SpecToggle
from harness.protocol import ParsedCall
from harness.session import Session
from harness.speculation.canonical import canonical
from harness.speculation.patterns import Candidate
from sandbox import Workspace
from tools import default_tools

__all__ = ["Places", "Snapshot", "Verdict", "World", "build", "compare", "diff_trees", "judge", "remove", "run_cases",
           "scratch_base", "snapshot"]

CALL_TIMEOUT = 120.0  # seconds one call may take before it counts as a hang
EXAMPLES = 5  # examples kept of each failure class
Seen = tuple[str, bool, int | None, int]  # text, is_error, exit_code, truncated_chars


class Crashed(Exception):
    """An exception (or a hang) out of Tao's code, already described for the report."""


def diff_seen(label: str, a: Seen, b: Seen) -> list[str]:
    """How two observations of the same call differ (the on world's first)."""
    names = ("text", "is_error", "exit_code", "truncated_chars")
    return [f"{label}: {name} {excerpt(x, y) if name == 'text' else f'{x!r} vs {y!r}'}"
            for name, x, y in zip(names, a, b) if x != y]


# -- the two worlds -------------------------------------------------------------------------------------


class OneCandidate:
    """Stands in for the pattern analyzer and proposes exactly the case's candidate: the bench is about
    promotion, not prediction (tests/test_patterns_* cover that)."""

    def __init__(self, call: Call, root: str) -> None:
        """The candidate as the real analyzer would build it: keyed by its canonical form."""
        action = canonical(call.name, call.arguments, root)
        self.candidate = Candidate(call.name, call.arguments, action.key, action.kind, action.effect, 0.9, 1.0, 0.1,
                                   0.9, "fidelity bench")

    def observe(self, event: Event) -> None:
        """Nothing to learn."""

    def predict(self, moment: str = "a", partial: Any = None, k: int = 3) -> list[Candidate]:
        """The case's candidate, whatever the moment."""
        return [self.candidate][:k]


@dataclass
class World:
    """What one world returned and left behind."""

    seen: list[tuple[str, Seen]] = field(default_factory=list)  # (call label, observation)
    served: dict[str, str] = field(default_factory=dict)  # call id -> promoted, sliced or repeat
    tree: Snapshot | None = None
    crash: str | None = None
    escapes: list[str] = field(default_factory=list)
    spec_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what Tao logged at WARNING or above


PROJECT = Path(__file__).resolve().parents[2]


def frame_name(frame: traceback.FrameSummary) -> str:
    """`tools/reading.py:79 in _line_range` (project files by their path, others by their name)."""
    path = Path(frame.filename).resolve()
    return f"{path.relative_to(PROJECT) if path.is_relative_to(PROJECT) else path.name}:{frame.lineno} in {frame.name}"


def crash_text(stage: str, exc: BaseException) -> str:
    """`stage: Type: message (where)`: the innermost frame in Tao's own code, then the innermost of all."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(PROJECT) and "/bench/" not in f.filename]
    where = " <- ".join(dict.fromkeys(frame_name(f) for f in ours[-1:] + frames[-1:])) or "?"
    return f"{stage}: {type(exc).__name__}: {str(exc)[:160]} ({where})"


async def tao(stage: str, awaitable: Any) -> Any:
    """Await Tao's code; what it raises, or a hang, becomes Crashed."""
    try:
        return await asyncio.wait_for(awaitable, CALL_TIMEOUT)
    except TimeoutError:
        raise Crashed(f"{stage}: did not finish within {CALL_TIMEOUT:g} s (a hang)") from None
    except Exception as exc:  # noqa: BLE001 - any exception out of Tao's code is what this bench counts
        raise Crashed(crash_text(stage, exc)) from exc


def label_of(call: Call, call_id: str) -> str:
    """How a call is named in the report: its id and tool name."""
    return f"{call_id} {call.name[:40]!r}"


async def act(session: Session, call: Call, call_id: str, step: int, places: Places) -> tuple[str, Seen]:
    """One call as the session makes it: promoted, answered from the repeat cache, or run for real."""
    session.steps = step
    parsed = ParsedCall(call_id, call.name, places.fill(call.arguments))
    observation = await tao(f"{label_of(call, call_id)}", session.act(parsed))
    return label_of(call, call_id), (observation.text, observation.is_error, observation.exit_code,
                                     observation.truncated_chars)


async def speculate(session: Session, case: Case, places: Places, world: World) -> list[Any]:
    """Launch the candidate, wait for it (most cases), and note any change it made before the real call."""
    assert session.speculation is not None
    before = snapshot(places)
    try:
        session.launch("a")
    except Exception as exc:  # noqa: BLE001
        raise Crashed(crash_text("launch", exc)) from exc
    specs = list(session.speculation.specs.values())
    tasks = [spec.task for spec in specs if spec.task is not None]
    deadline = time.monotonic() + CALL_TIMEOUT
    while case.wait and not all(task.done() for task in tasks) and time.monotonic() < deadline:
        try:  # at Tao's own priority, as once the real call waits: a busy machine starves niced runs
            for spec in specs:
                if spec.overlay is not None:
                    spec.overlay.boost()
        except Exception as exc:  # noqa: BLE001
            raise Crashed(crash_text("boost", exc)) from exc
        await asyncio.wait(tasks, timeout=0.25)
    world.escapes += [f"while speculating: {line}" for line in diff_trees(snapshot(places), before, ("now", "before"))]
    return specs


def after_speculation(specs: list[Any], world: World) -> None:
    """Speculative runs that failed, and hostile commands that say a forbidden step worked."""
    for spec in specs:
        if spec.task is None or not spec.task.done() or spec.task.cancelled():
            continue
        if (exc := spec.task.exception()) is not None:
            world.spec_errors.append(crash_text("speculative run", exc))
            continue
        text, command = spec.task.result().text, spec.candidate.arguments.get("command")
        if isinstance(command, str):  # the command's own text names the mark; only its output counts
            text = text.removeprefix(f"$ {command.strip()}\n")
        world.escapes += [f"speculation printed: {line.strip()[:160]}" for line in text.splitlines()
                          if ESCAPE_MARK in line]


class Warnings(logging.Handler):
    """Collects the warnings Tao logs while a world runs (a session that turns broken speculation off says why)."""

    def __init__(self) -> None:
        """Listen to every logger of Tao's rooms."""
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the message."""
        self.lines.append(f"{record.name}: {record.getMessage()}"[:300])

    def __enter__(self) -> Warnings:
        for name in ROOMS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ROOMS:
            logging.getLogger(name).removeHandler(self)


ROOMS = ("harness", "tools", "sandbox")


async def run_world(case: Case, places: Places, speculating: bool, keep: Path | None = None) -> World:
    """Build the tree, make the calls as a session does (with or without speculation), snapshot the result."""
    world = World()
    events: list[Event] = []
    specs: list[Any] = []
    build(case, places)
    os.environ["HOME"] = str(places.root / "home")
    workspace = Workspace(places.ws)
    session: Session | None = None
    with Warnings() as warnings:
        try:
            session = new_session(case, places, workspace, events, speculating)
            specs = await make_calls(session, case, places, world, speculating)
        except Crashed as crash:
            world.crash = str(crash)
        finally:
            await close(session, world)
            workspace.close()
    after_speculation(specs, world)
    if any(isinstance(e, SpecToggle) and not e.enabled for e in events):  # the session's safety net caught it
        world.spec_errors.append("speculation failed and the session turned it off: " + "; ".join(warnings.lines))
    world.warnings = warnings.lines
    world.served = {e.call_id: "repeat" if e.spec_id == "repeat" else "sliced" if e.sliced else "promoted"
                    for e in events if isinstance(e, SpecPromote)}
    world.tree = snapshot(places)
    if keep is not None:
        remove(keep)
        keep.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(places.root), str(keep)], check=True)
    return world


def new_session(case: Case, places: Places, workspace: Workspace, events: list[Event], speculating: bool) -> Session:
    """A session over the case's workspace, with the one-candidate analyzer when speculating."""
    try:
        analyzer = OneCandidate(Call(case.candidate.name, places.fill(case.candidate.arguments)),
                                str(workspace.root)) if speculating else None
        return Session("fidelity case", ReplayEngine(Recording([])), workspace,
                       default_tools(bash_timeout=CALL_TIMEOUT / 2, test_timeout=CALL_TIMEOUT / 2),
                       sinks=[events.append], analyzer=analyzer, warm=False)
    except Exception as exc:  # noqa: BLE001
        raise Crashed(crash_text("candidate and session", exc)) from exc


async def make_calls(session: Session, case: Case, places: Places, world: World, speculating: bool) -> list[Any]:
    """The earlier calls (and outside edits), the speculation, then the real call; returns the speculations."""
    specs: list[Any] = []
    for index, step in enumerate(case.history):
        if isinstance(step, Outside):
            with open(places.root / places.fill(step.path), "a") as handle:  # in place: the same inode
                handle.write(step.data)
        else:
            world.seen.append(await act(session, step, f"h{index}", index + 1, places))
    if speculating:
        specs = await speculate(session, case, places, world)
    world.seen.append(await act(session, case.real, "real", len(case.history) + 1, places))
    return specs


async def close(session: Session | None, world: World) -> None:
    """End the session's speculation and tools; a failure there is a crash too."""
    if session is None:
        return
    try:
        if session.speculation is not None:
            await tao("closing the speculation", session.speculation.close())
        await tao("closing the tools", session.close_tools())
    except Crashed as crash:
        world.crash = world.crash or str(crash)


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
    verdict.crashes = [f"{name} world, {world.crash}" for name, world in (("off", off), ("on", on)) if world.crash]
    verdict.warnings = [f"{name} world: {line}" for name, world in (("off", off), ("on", on)) for line in world.warnings]
    verdict.crashes += [f"on world, {error}" for error in on.spec_errors]  # the scheduler hides them: the
    #   call then runs for real, but nothing of that kind is ever promoted, so nothing of it is compared
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
    saved = {name: os.environ.get(name) for name in ("HOME", "TAO_OVERLAY_DIR")}
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
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
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


def table(result: dict[str, Any]) -> str:
    """Counts by kind, then the failing labels."""
    head = ("cases", "promoted", *CLASSES)
    lines = [f"{'kind':<10}" + "".join(f"{h:>12}" for h in head)]
    rows = [*result["by_kind"].items(), ("total", {h: result[h] for h in head})]
    lines += [f"{kind:<10}" + "".join(f"{row[h]:>12}" for h in head) for kind, row in rows]
    lines.append(f"{result['cases']} cases in {result['seconds']} s ({result['ms_per_case']} ms a case), "
                 f"seed {result['seed']}")
    lines += [f"  {label}: " + ", ".join(f"{n} {name}" for name, n in counts.items())
              for label, counts in result["failing_labels"].items()]
    return "\n".join(lines)


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
    emit(result, table, as_json=args.json)
    return 1 if any(result[name] for name in ("differences", "escapes", "crashes")) else 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `fidelity` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "fidelity", help="promoted speculation against the real run, byte for byte, over generated cases",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
