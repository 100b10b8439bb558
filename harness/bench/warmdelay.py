"""`tao bench warm-delay`: how long a real request waits behind a warm prefill, on the real engine.

The step this measures: a test run is repeated, its last output (a long failure, about 1,000 tokens)
is the guess, and the next prompt on that guess is warmed while the run takes `--tool-s` seconds.
Then the real output arrives and the next Think step is sent. Two cases:

- `wrong`: the real output is a short pass, so the warm prefill was wasted; the question is how long
  the real request waited behind it (a running engine step cannot be pre-empted);
- `right`: the real output is the guess; the question is how much of its prefill warming hid.

Three modes, interleaved and rotated every repetition: `none` (no warming), `whole` (the warm prefill
as one request, as Tao did before chunking) and `chunked` (`WARM_CHUNK_TOKENS` a request, what Tao
does now). Every run's history starts with its own nonce, so no run finds another's tokens cached;
the system prompt is pre-filled once before anything is timed, and every run's previous prompt (the
history before the call) is pre-filled before its step starts, as the step before it would have.
Reported: time to first token of the real request (`Usage.ttft`, from submission to the engine) and
its cached prompt tokens, per case and mode, with ratios to `none`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from typing import Any

from harness import protocol
from harness.bench import run_module
from harness.bench.engine import run_one
from harness.bench.report import Report, Table, cell
from harness.engine.api import Engine, LLMRequest
from harness.errors import UsageError
from harness.machine import machine
from harness.speculation.running.observation import WARM_CHUNK_TOKENS, ObservationSpeculator
from tools import default_tools, tool_specs

CASES = ("wrong", "right")
MODES = ("none", "whole", "chunked")
WHOLE = 10**9  # a chunk larger than any prompt: the warm prefill goes in one request
CALL = protocol.ParsedCall("call_1", "run_tests", {"command": "python -m pytest -q tests"})
PASSED = "......                                                                   [100%]\n6 passed in 0.04s"


def failing_output(tests: int = 7) -> str:
    """A pytest run with `tests` failures and their tracebacks (about 160 tokens each)."""
    blocks = []
    for i in range(tests):
        blocks.append(
            f"_______________________________ test_case_{i} ________________________________\n\n"
            f"    def test_case_{i}():\n        value = compute({i}, {i + 1})\n>       assert value == {2 * i + 1}\n"
            f"E       assert {i * (i + 1)} == {2 * i + 1}\n"
            f"E        +  where {i * (i + 1)} = compute({i}, {i + 1})\n\n"
            f"tests/test_calc.py:{12 + 4 * i}: AssertionError\n"
            f"----------------------------- Captured stdout call -----------------------------\n"
            f"compute called with a={i} b={i + 1} mode=add precision=None\n")
    summary = "".join(f"FAILED tests/test_calc.py::test_case_{i} - assert {i * (i + 1)} == {2 * i + 1}\n"
                      for i in range(tests))
    return ("F" * tests + " " * 66 + "[100%]\n=================================== FAILURES "
            "===================================\n" + "".join(blocks)
            + "=========================== short test summary info ============================\n"
            + summary + f"{tests} failed in 0.09s")


GUESS = failing_output()


def history(nonce: int) -> list[dict[str, Any]]:
    """The conversation up to the repeated test run's call, unique to this run from its second message."""
    system = protocol.render_system_prompt(tool_specs(default_tools()), "/work/calc")
    call = f'{protocol.OPEN}{json.dumps({"name": CALL.name, "arguments": CALL.arguments})}{protocol.CLOSE}'
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Run {nonce}. The tests of calc fail since the last change; fix compute."},
            {"role": "assistant", "content": f"I will run the tests again.\n{call}"}]


async def one_step(engine: Engine, case: str, mode: str, nonce: int, tool_s: float) -> dict[str, Any]:
    """One timed step: warm (or not) while the tool 'runs', then send the real next request."""
    before = history(nonce)
    previous = await run_one(engine, LLMRequest(f"prev-{nonce}", before[:2], max_tokens=1))
    real = GUESS if case == "right" else PASSED
    speculator = ObservationSpeculator(engine, lambda event: None, time.monotonic,
                                       chunk_tokens=WHOLE if mode == "whole" else WARM_CHUNK_TOKENS)
    warm = None
    if mode != "none":
        warm = speculator.start(1, CALL.call_id, GUESS, [*before, protocol.result_message(CALL, GUESS, False)],
                                [], 1, cached=previous.prompt_tokens)
    await asyncio.sleep(tool_s)  # the test run, for real this long
    warmed = None
    if warm is not None:
        warmed = warm.usage.prompt_tokens if warm.usage is not None else 0
        await speculator.settle(warm, real)
    usage = await run_one(engine, LLMRequest(f"real-{nonce}", [*before, protocol.result_message(CALL, real, False)],
                                           max_tokens=1))
    await speculator.close()
    return {"case": case, "mode": mode, "ttft": usage.ttft, "prompt": usage.prompt_tokens,
            "cached": usage.cached_tokens, "warmed_at_settle": warmed}


async def run_all(repeat: int, tool_s: float, progress: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Start the embedded engine, pre-fill the system prompt, then every case and mode, interleaved."""
    from harness.bench.live_embedded import engine_info
    from harness.engine.factory import EngineOptions, start_local

    engine = await start_local(EngineOptions(attach=False))
    info = engine_info(engine)
    nonces = random.Random().sample(range(10**7, 10**8), repeat * len(CASES) * len(MODES))
    rows: list[dict[str, Any]] = []
    try:
        await run_one(engine, LLMRequest("system", history(0)[:1], max_tokens=1))
        for rep in range(repeat):
            for case in CASES:
                shift = (rep + CASES.index(case)) % len(MODES)
                for mode in MODES[shift:] + MODES[:shift]:
                    row = await one_step(engine, case, mode, nonces[len(rows)], tool_s)
                    row["rep"], row["load"] = rep, round(os.getloadavg()[0], 2)
                    rows.append(row)
                    if progress:
                        print(f"  rep {rep + 1}/{repeat} {case:5} {mode:7} ttft {row['ttft'] or 0:6.2f} s, "
                              f"cached {row['cached']}/{row['prompt']}, load {row['load']}",
                              file=sys.stderr, flush=True)
    finally:
        await engine.close()
    return rows, info


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean TTFT and cached tokens per case and mode, and each mode's ratio to `none`."""
    out: dict[str, Any] = {}
    for case in CASES:
        by_mode = {}
        for mode in MODES:
            picked = [r for r in rows if r["case"] == case and r["mode"] == mode and r["ttft"] is not None]
            ttfts = [r["ttft"] for r in picked]
            by_mode[mode] = {"runs": len(picked), "ttft_mean": round(statistics.fmean(ttfts), 3) if ttfts else None,
                             "ttft_max": round(max(ttfts), 3) if ttfts else None,
                             "cached_mean": round(statistics.fmean(r["cached"] for r in picked), 1) if picked else None,
                             "prompt": picked[0]["prompt"] if picked else None}
        base = by_mode["none"]["ttft_mean"]
        for mode in MODES:
            mean = by_mode[mode]["ttft_mean"]
            by_mode[mode]["ratio_to_none"] = round(mean / base, 3) if mean is not None and base else None
        out[case] = by_mode
    return out


def run(repeat: int = 5, tool_s: float = 1.0, progress: bool = True) -> dict[str, Any]:
    """The whole benchmark; call it under `if __name__ == "__main__"` (vLLM spawns its engine core)."""
    if repeat < 1 or tool_s < 0:
        raise UsageError("--repeat must be at least 1 and --tool-s at least 0")
    before = machine()
    started = time.perf_counter()
    rows, info = asyncio.run(run_all(repeat, tool_s, progress))
    return {"cases": summarize(rows),
            "config": {"repeat": repeat, "tool_s": tool_s, "chunk_tokens": WARM_CHUNK_TOKENS, "engine": info,
                       "seconds": round(time.perf_counter() - started, 1)},
            "machine": {**before, "load_after": machine()["load"]}, "runs": rows}


def report(result: dict[str, Any]) -> Report:
    """Each case and mode: time to first token (mean, max, against no warming) and the tokens found cached."""
    config, m = result["config"], result["machine"]
    rows = [[case, mode, cell(s["ttft_mean"], ".2f"), cell(s["ttft_max"], ".2f"), cell(s["ratio_to_none"], ".3f"),
             "-" if s["cached_mean"] is None else f"{s['cached_mean']:.0f}/{s['prompt']}"]
            for case, by_mode in result["cases"].items() for mode, s in by_mode.items()]
    title = (f"warm-delay: next request after a {config['tool_s']} s tool, warm chunks of {config['chunk_tokens']} "
             f"tokens, {config['repeat']} repetitions")
    caption = (f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, load {m['load']} -> "
               f"{m['load_after']}; {config['seconds']:.0f} s in all")
    return Report(result, [Table(["case", "mode", "TTFT mean s", "max s", "/ none", "cached"], rows, title=title,
                                 caption=caption, left=2)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench warm-delay`."""
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of every case and mode (default 5)")
    parser.add_argument("--tool-s", type=float, default=1.0,
                        help="seconds the repeated test run takes, while warming runs (default 1.0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_warm_delay(args: argparse.Namespace) -> int:
    """Run the benchmark and print it."""
    report(run(args.repeat, args.tool_s)).emit(args.json)
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `warm-delay` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "warm-delay",
        description="On the embedded vLLM engine: warm the next prompt on a long guessed test output while "
                    "the run takes --tool-s seconds, then send the real next request; with no warming, one "
                    "whole warm request, and warming in chunks; for a wrong guess and a right one.")
    add_arguments(parser)
    parser.set_defaults(func=cmd_warm_delay)


if __name__ == "__main__":
    sys.exit(run_module("python -m harness.bench.warmdelay", add_arguments, cmd_warm_delay, sys.argv[1:]))
