"""`tao bench fuzz-streams`: hostile model answers through the call parser; nothing may escape it.

Each text case is a random answer (reasoning text, well-formed calls, and calls damaged by labelled
mutations: see `harness.bench.stream_gen`), cut into chunks and fed through `CallParser.feed`, then
`finish`. Each native case is a random `tool_calls` value through `parse_native_calls`. What comes out is
then handed to what the session hands it to: the canonical key, the call's events as JSON in UTF-8, the
first-argument prefix speculation reads from a streaming call.

A case crashes when an exception escapes; it violates when an invariant breaks:
- every call is a `ParsedCall` with a non-empty printable `str` name, a `dict` of arguments that is
  plain JSON (finite numbers, no lone surrogates, at most `protocol.MAX_DEPTH` levels) and a unique id;
  every error is a `CallError` whose message is printable, bounded, and says what to write instead;
- the `Text` events put together are `parser.text`; the calls and errors are the events' ones, one
  per opened call, numbered in order; cutting the stream differently changes nothing;
- an answer left well-formed gives exactly its calls and its text.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

from harness import protocol
from harness.bench import run_module
from harness.bench.report import Report, Table
from harness.bench.stream_gen import NativeCase, StreamGen, TextCase
from harness.calls.canonical import canonical
from harness.errors import UsageError
from harness.events import FormatError, SessionStart, ToolCall, ToolResult
from harness.machine import machine
from harness.speculation.prediction.pattern_model import SHIPPED_MODEL, PatternModel
from harness.speculation.prediction.patterns import Analyzer, Partial
from harness.speculation.prediction.prefix import args_prefix_of

EXAMPLES = 5  # crashes and violations shown in full
ANALYZE_EVERY = 4  # every so many text cases also go through the analyzer (predictions cost milliseconds)
SESSION_CASES = 200  # text cases an analyzer sees before a fresh one starts, as a new session would
SAFE_DEPTH = 100  # levels of nesting every consumer of a call (json, the analyzer, events) takes with room to spare
ROOT = "/work/repo"
MAX_ERROR_CHARS = 2000
FIX_WORDS = ("<tool_call>", '"name"', '"arguments"', "Write", "write")  # an error says what to write instead


class Violation(Exception):
    """An invariant of the parser's output that does not hold."""


class Hang(Exception):
    """A case ran longer than the limit: the parser hung on it (quadratic work, a runaway regex)."""


def parse_stream(chunks: list[str]) -> tuple[protocol.CallParser, list[protocol.ParseEvent]]:
    """Feed chunks, then finish: the parser and every event it gave."""
    parser = protocol.CallParser()
    events: list[protocol.ParseEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish()
    return parser, events


def check_text(case: TextCase, analyzer: Analyzer | None = None) -> tuple[int, int]:
    """Run one text case and check every invariant; returns (calls, errors). Raises on a crash or violation.

    With an `analyzer`, the answer also goes where a session sends it: predictions at each moment of the
    stream, then the calls and their results (the answer itself, as a hostile output) to learn from."""
    parser, events = parse_stream(case.chunks)
    if analyzer is not None:
        analyze(analyzer, parser, events, case.text)
    _check_events(parser, events)
    for call in parser.calls:
        check_call(call)
    for error in parser.errors:
        check_error(error)
    whole, _ = parse_stream([case.text])
    if _outcome(whole) != _outcome(parser):
        raise Violation(f"cutting the stream into {len(case.chunks)} chunks changed what was parsed")
    if case.expected_calls is not None:
        got = [(c.name, c.arguments) for c in parser.calls]
        if _json(got) != _json(case.expected_calls) or parser.errors:
            raise Violation(f"a well-formed answer parsed as {_short(got)} with errors "
                            f"{[e.error for e in parser.errors]}, not as {_short(case.expected_calls)}")
        if parser.text != case.expected_text:
            expected = case.expected_text or ""  # the generator sets it with expected_calls
            raise Violation(f"a well-formed answer's text is {parser.text[:80]!r}, not {expected[:80]!r}")
    return len(parser.calls), len(parser.errors)


def analyze(analyzer: Analyzer, parser: protocol.CallParser, events: list[protocol.ParseEvent], output: str) -> None:
    """What the session feeds the analyzer of one answer: moments (b) and (c), then each call and its result."""
    for event in events:
        if isinstance(event, protocol.CallStart):
            analyzer.predict("b", Partial(text=parser.text))
        elif isinstance(event, protocol.CallName):
            analyzer.predict("c", Partial(text=parser.text, name=event.name))
        elif isinstance(event, protocol.CallArgs) and len(prefix := args_prefix_of(event.partial)) >= 8:
            analyzer.predict("c", Partial(text=parser.text, name=event.name, args_prefix=prefix))
    version = analyzer.state.version
    for call in parser.calls:
        analyzer.observe(ToolCall(0.0, 1, call.call_id, call.name, call.arguments, "pure"))
        analyzer.observe(ToolResult(0.0, 1, call.call_id, call.name, output[:20_000], len(output) % 2 == 0,
                                    None, 0, version + len(output) % 3))
    analyzer.predict("a")


def _check_events(parser: protocol.CallParser, events: list[protocol.ParseEvent]) -> None:
    """Text reassembles; each opened call ends once, as a call or an error, in order."""
    if "".join(e.text for e in events if isinstance(e, protocol.Text)) != parser.text:
        raise Violation("the Text events do not put together parser.text")
    starts = [e.index for e in events if isinstance(e, protocol.CallStart)]
    ends = [e for e in events if isinstance(e, (protocol.CallDone, protocol.CallError))]
    if starts != list(range(len(starts))) or [e.index for e in ends] != starts:
        raise Violation(f"calls opened {starts} but ended {[e.index for e in ends]}")
    if [e.call for e in ends if isinstance(e, protocol.CallDone)] != parser.calls:
        raise Violation("parser.calls differs from the CallDone events")
    if [e for e in ends if isinstance(e, protocol.CallError)] != parser.errors:
        raise Violation("parser.errors differs from the CallError events")
    for event in events:
        if isinstance(event, protocol.CallName) and not (isinstance(event.name, str) and event.name.isprintable()):
            raise Violation(f"CallName holds an unprintable name {event.name!r}")
        if isinstance(event, protocol.CallArgs):
            args_prefix_of(event.partial)  # what speculation reads of a streaming call


def check_call(call: Any) -> None:
    """A parsed call is plain data every consumer can take: the analyzer, the events, the trajectory file."""
    if not isinstance(call, protocol.ParsedCall):
        raise Violation(f"a call is a {type(call).__name__}, not a ParsedCall")
    if not isinstance(call.name, str) or not call.name or not call.name.isprintable():
        raise Violation(f"a call's name is {call.name!r}: not a non-empty printable string")
    if not isinstance(call.arguments, dict) or not isinstance(call.call_id, str):
        raise Violation(f"a call's arguments are a {type(call.arguments).__name__}, its id a {type(call.call_id)}")
    if _depth(call.arguments) > SAFE_DEPTH:
        raise Violation(f"a call's arguments nest deeper than {SAFE_DEPTH} levels")
    json.dumps(call.arguments, allow_nan=False).encode("utf-8")
    canonical(call.name, call.arguments, ROOT)
    ToolCall(0.0, 1, call.call_id, call.name, call.arguments, "pure").to_json().encode("utf-8")


def check_error(error: Any) -> None:
    """An error is for the model: printable, bounded, and it says what to write."""
    if not isinstance(error, protocol.CallError) or not isinstance(error.error, str):
        raise Violation(f"an error is a {type(error).__name__}, not a CallError with a message")
    message = error.error
    if not message or len(message) > MAX_ERROR_CHARS:
        raise Violation(f"an error message is {len(message)} characters long")
    if not message.replace("\n", " ").isprintable():
        raise Violation(f"an error message holds unprintable characters: {message[:120]!r}")
    if not any(word in message for word in FIX_WORDS):
        raise Violation(f"an error message does not say what to write: {message[:160]!r}")
    FormatError(0.0, 1, message).to_json().encode("utf-8")


def check_native(case: NativeCase, analyzer: Analyzer | None = None) -> tuple[int, int]:
    """Run one native case: every item is a call or an error, the well-formed ones exactly as given."""
    calls, errors = protocol.parse_native_calls(case.tool_calls)
    items = len(case.tool_calls) if isinstance(case.tool_calls, list) else 1
    if len(calls) + len(errors) != items and (items or calls or errors):
        raise Violation(f"{items} native items gave {len(calls)} calls and {len(errors)} errors")
    for call in calls:
        check_call(call)
    for error in errors:
        check_error(error)
    got = {c.call_id: (c.name, c.arguments) for c in calls}
    for call_id, name, args in case.expected.values():
        if call_id in got and _json(got[call_id]) != _json((name, args)):
            raise Violation(f"native call {call_id} parsed as {_short(got[call_id])}, not {_short((name, args))}")
    if len(calls) < len(case.expected):
        raise Violation(f"{len(case.expected)} well-formed native calls gave only {len(calls)} calls")
    return len(calls), len(errors)


def new_analyzer(model: PatternModel) -> Analyzer:
    """A session's analyzer over the shipped model, started on a task in a workspace."""
    analyzer = Analyzer(model)
    analyzer.observe(SessionStart(0.0, "fuzz", "Fix calc/ops.py: add(2, 3) gives -1; see tests/test_ops.py.", ROOT,
                                  "fuzz", ["bash", "edit_file", "finish", "grep", "list_files", "outline", "read_file",
                                           "run_tests", "write_file"], {}, ""))
    return analyzer


def _depth(value: Any) -> int:
    """How many levels of lists and objects `value` nests, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _outcome(parser: protocol.CallParser) -> str:
    """What a parse gave (text, calls, errors), as one comparable string."""
    return _json([parser.text, [(c.name, c.arguments) for c in parser.calls], [e.error for e in parser.errors]])


def _json(value: Any) -> str:
    """A canonical JSON spelling, to compare values (NaN and key order included)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


def _short(value: Any) -> str:
    """A value shown in at most 160 characters."""
    text = repr(value)
    return text if len(text) < 160 else text[:157] + "..."


def run(streams: int = 20000, seed: int = 0, native: int | None = None,
        case_seconds: float | None = None) -> dict[str, Any]:
    """The whole fuzz run: `streams` text cases and `native` native ones (a quarter as many by default).

    With `case_seconds`, a case still running after that long counts as a crash (a hang).
    """
    if streams < 0 or (native is not None and native < 0):
        raise UsageError("--streams and --native must be 0 or more")
    native = streams // 4 if native is None else native
    started = time.perf_counter()
    totals: Counter[str] = Counter()
    by_label: dict[str, Counter[str]] = {}
    examples: list[dict[str, Any]] = []
    slowest = (0.0, "")
    model = PatternModel.load(SHIPPED_MODEL)
    analyzer: Analyzer | None = None
    for kind, count, make, check in (("text", streams, StreamGen.answer, check_text),
                                     ("native", native, StreamGen.native, check_native)):
        for index in range(count):
            case = make(StreamGen(random.Random(f"{seed}:{kind}:{index}")))
            if kind == "text" and index % SESSION_CASES == 0:
                analyzer = new_analyzer(model)
            analyzed = kind == "text" and index % ANALYZE_EVERY == 0
            began = time.perf_counter()
            given = analyzer if analyzed else None
            outcome, failure = _one(case, functools.partial(check, analyzer=given), case_seconds)
            slowest = max(slowest, (round(time.perf_counter() - began, 3), f"{kind} case {index} {case.labels}"))
            totals.update(outcome)
            for label in set(case.labels) or {"well_formed"}:
                by_label.setdefault(label, Counter()).update(outcome)
            if failure is not None and len(examples) < EXAMPLES:
                examples.append({"kind": kind, "case": index, "labels": case.labels, **failure,
                                 "input": _short(case.text if isinstance(case, TextCase) else case.tool_calls)})
    return {"streams": streams, "native_lists": native, "seed": seed, "calls": totals["calls"],
            "errors": totals["errors"], "crashes": totals["crashes"], "violations": totals["violations"],
            "examples": examples, "slowest_case": {"seconds": slowest[0], "case": slowest[1]},
            "by_mutation": {label: dict(counts) for label, counts in sorted(by_label.items())},
            "seconds": round(time.perf_counter() - started, 2), "machine": machine()}


def _one(case: TextCase | NativeCase, check: Callable[[Any], tuple[int, int]],
         limit: float | None = None) -> tuple[Counter[str], dict[str, str] | None]:
    """Counts of one case (calls, errors, crashes, violations) and, on failure, what went wrong where."""
    try:
        with _time_limit(limit):
            calls, errors = check(case)
        return Counter(calls=calls, errors=errors), None
    except Violation as exc:
        return Counter(violations=1), {"violation": str(exc)}
    except Exception as exc:  # escaping exceptions are what this counts
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return Counter(crashes=1), {"crash": f"{type(exc).__name__}: {str(exc)[:200]}",
                                    "at": f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno} in {frame.name}"}


class _time_limit:  # lower case: used as a context manager
    """Raise Hang in the main thread once `seconds` have passed (no limit elsewhere, or for None)."""

    def __init__(self, seconds: float | None) -> None:
        """A limit of `seconds`, in the main thread only (signals go there)."""
        self.seconds = seconds if threading.current_thread() is threading.main_thread() else None

    def __enter__(self) -> None:
        """Arm the timer."""
        if self.seconds:
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: object) -> None:
        """Disarm the timer."""
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)

    def _expire(self, signum: int, frame: object) -> None:
        """The limit passed: stop the case where it is."""
        raise Hang(f"the case ran longer than {self.seconds:g} s")


def report(result: dict[str, Any]) -> Report:
    """Totals, each mutation's counts, then the cases that failed (or all examples, when none did)."""
    title = (f"fuzz-streams: {result['streams']} streams + {result['native_lists']} native lists, seed "
             f"{result['seed']}, {result['seconds']:.1f} s; calls {result['calls']}, errors {result['errors']}, "
             f"crashes {result['crashes']}, violations {result['violations']}; slowest case "
             f"{result['slowest_case']['seconds']} s ({result['slowest_case']['case']})")
    rows = [[label, *(str(counts.get(key, 0)) for key in ("calls", "errors", "crashes", "violations"))]
            for label, counts in result["by_mutation"].items()]
    examples = [f"  {example['kind']} case {example['case']} {example['labels']}: "
                f"{example.get('crash') or example.get('violation')} {example.get('at', '')}"
                for example in result["examples"]]
    return Report(result, [Table(["mutation", "calls", "errors", "crashes", "violations"], rows, title=title)],
                  examples)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench fuzz-streams`."""
    parser.add_argument("--streams", type=int, default=20000, help="text answers to fuzz (default 20000)")
    parser.add_argument("--native", type=int, default=None,
                        help="native tool_calls lists to fuzz (default a quarter of --streams)")
    parser.add_argument("--seed", type=int, default=0, help="seed; a seed and a case number reproduce a case")
    parser.add_argument("--case-seconds", type=float, default=60.0,
                        help="a case running longer than this counts as a crash, a hang (default 60)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_fuzz_streams(args: argparse.Namespace) -> int:
    """Run the fuzzer; exit 1 when anything crashed or an invariant broke."""
    result = run(args.streams, args.seed, args.native, args.case_seconds or None)
    report(result).emit(args.json)
    return 1 if result["crashes"] or result["violations"] else 0


def register(bench_subparsers: Any) -> None:
    """Add `fuzz-streams` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "fuzz-streams",
        description="Feed random and damaged model answers through the streaming call parser chunk by chunk, "
                    "and random native tool_calls through the native parser; count what escapes.")
    add_arguments(parser)
    parser.set_defaults(func=cmd_fuzz_streams)


if __name__ == "__main__":
    sys.exit(run_module("python -m harness.bench.fuzz_streams", add_arguments, cmd_fuzz_streams, sys.argv[1:]))
