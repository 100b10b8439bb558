"""`tao bench drafts`: what token-level speculation (vLLM's n-gram drafts, `--draft ngram`) gains in decode speed
on the prompts of recorded coding sessions, and whether the text stays the same.

Each prompt is a recorded session cut before one of its assistant turns (system, task, earlier answers and
observations, as the agent saw them). The embedded engine answers it greedily with drafts off and on: an engine
runs one setting, so two are started (each warmed by one untimed request) and take the prompts in turn, one request
at a time, which goes first rotated from prompt to prompt and round to round (the machine speeds up over a run;
the second round's prompts come from each engine's prefix cache). Time per output token is decode time (first token
to last) over the tokens after the first; every answer must be the same text in every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.report import Report, Table
from harness.engine.api import LLMRequest, Usage
from harness.errors import UsageError
from harness.machine import machine
from harness.shutdown import terminate_as_interrupt

MODES = ("off", "ngram")
DEFAULT_TRACES = Path("../shared/traces/mini-swe-agent-gemini-3-pro-swebench-verified")


@dataclass(frozen=True)
class Prompt:
    """One recorded turn's prompt: the session's messages before that assistant turn."""

    name: str
    """The trajectory's file name and the turn's message index, e.g. `astropy__astropy-13398.traj.json#6`."""
    messages: list[dict[str, Any]]


def turn_prompts(traces: Path, sessions: int, turns: int, max_chars: int) -> list[Prompt]:
    """Up to `turns` prompts from each of `sessions` trajectories of `traces`, spread over its files by name (so over
    projects): the messages before an assistant turn, at most `max_chars` characters in all, the turns spread
    evenly over those that fit."""
    files = sorted(path for path in traces.glob("*.json") if path.is_file()) if traces.is_dir() else [traces]
    spread = files[::max(1, len(files) // sessions)]
    prompts: list[Prompt] = []
    for path in spread + [path for path in files if path not in spread]:
        if len({p.name.split("#")[0] for p in prompts}) >= sessions:
            break
        try:
            messages = json.loads(path.read_text()).get("messages")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(messages, list):
            continue
        fitting, chars = [], 0
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                break
            if message.get("role") == "assistant" and index > 0:
                fitting.append(index)
            chars += len(json.dumps(message.get("content") or ""))
            if chars > max_chars:
                break
        picked = sorted({fitting[round(k * (len(fitting) - 1) / max(1, turns - 1))] for k in range(turns)}) \
            if fitting else []
        prompts += [Prompt(f"{path.name}#{index}", messages[:index]) for index in picked]
    return prompts


async def answer(engine: Any, prompt: Prompt, max_tokens: int, tag: str) -> dict[str, Any]:
    """The engine's greedy answer to one prompt: its text, output tokens and decode seconds."""
    request = LLMRequest(f"drafts-{tag}-{uuid.uuid4().hex[:8]}", prompt.messages, max_tokens=max_tokens)
    text, usage = "", Usage()
    async for chunk in engine.stream(request):
        text += chunk.text
        usage = chunk.usage or usage
    return {"prompt": prompt.name, "text": text, "prompt_tokens": usage.prompt_tokens,
            "output_tokens": usage.output_tokens, "decode_s": usage.decode_seconds or 0.0}


async def open_engines() -> dict[str, Any]:
    """The embedded engine twice, greedy and unconstrained: one without drafts, one with n-gram drafts."""
    from harness.engine.factory import EngineOptions, start_local

    engines: dict[str, Any] = {}
    try:
        for mode in MODES:
            engines[mode] = await start_local(EngineOptions(attach=False, constrained=False, temperature=0.0,
                                                            drafts=mode))
            await answer(engines[mode], Prompt("warmup", [{"role": "user", "content": "Hello"}]), 16, "warmup")
    except BaseException:
        await close_engines(engines)
        raise
    return engines


async def close_engines(engines: dict[str, Any]) -> None:
    """Shut every engine down."""
    for engine in engines.values():
        await engine.close()


def per_token_ms(runs: list[dict[str, Any]]) -> float | None:
    """Decode milliseconds per output token after the first, over these runs."""
    tokens = sum(max(0, run["output_tokens"] - 1) for run in runs)
    return round(1000 * sum(run["decode_s"] for run in runs) / tokens, 2) if tokens else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: tokens, decode seconds, ms per token; the speed-up of ngram over off, in all and per round; and
    which prompts got the same text in every run."""
    modes: dict[str, Any] = {}
    for mode in MODES:
        mine = [run for run in runs if run["mode"] == mode]
        modes[mode] = {"runs": len(mine), "output_tokens": sum(run["output_tokens"] for run in mine),
                       "decode_s": round(sum(run["decode_s"] for run in mine), 2), "ms_per_token": per_token_ms(mine)}
    off, on = modes["off"]["ms_per_token"], modes["ngram"]["ms_per_token"]
    rounds = sorted({run["round"] for run in runs})
    by_round = []
    for r in rounds:
        a = per_token_ms([run for run in runs if run["round"] == r and run["mode"] == "off"])
        b = per_token_ms([run for run in runs if run["round"] == r and run["mode"] == "ngram"])
        by_round.append(round(a / b, 3) if a and b else None)
    texts: dict[str, set[str]] = {}
    for run in runs:
        texts.setdefault(run["prompt"], set()).add(run["text"])
    differing = sorted(name for name, seen in texts.items() if len(seen) > 1)
    return {"modes": modes, "speedup": round(off / on, 3) if off and on else None, "speedup_by_round": by_round,
            "prompts": len(texts), "identical": len(texts) - len(differing), "differing": differing,
            "off_unstable": unstable(runs, "off")}


def unstable(runs: list[dict[str, Any]], mode: str) -> list[str]:
    """The prompts whose answers in `mode` differ from round to round (the engine's own float ties: a cold prefill
    and one from the prefix cache round differently), against which drafts' differences are to be read."""
    texts: dict[str, set[str]] = {}
    for run in runs:
        if run["mode"] == mode:
            texts.setdefault(run["prompt"], set()).add(run["text"])
    return sorted(name for name, seen in texts.items() if len(seen) > 1)


async def bench(prompts: list[Prompt], rounds: int, max_tokens: int, progress: bool = True) -> dict[str, Any]:
    """Every prompt with drafts off and on, `rounds` times, one request at a time, which engine goes first rotated
    from prompt to prompt and round to round (both engines stay up; only one works at a time)."""
    before = machine()
    runs: list[dict[str, Any]] = []
    engines = await open_engines()
    try:
        for r in range(rounds):
            for index, prompt in enumerate(prompts):
                first = (r + index) % 2
                for mode in MODES[first:] + MODES[:first]:
                    runs.append({"round": r, "mode": mode, **await answer(engines[mode], prompt, max_tokens, mode)})
                    if progress:
                        run = runs[-1]
                        print(f"round {r + 1}/{rounds} {mode:5} {run['prompt']:48} {run['prompt_tokens']:5} prompt "
                              f"tokens, {run['output_tokens']:4} out in {run['decode_s']:6.2f} s",
                              file=sys.stderr, flush=True)
    finally:
        await close_engines(engines)
    after = machine()
    return {"benchmark": "drafts", "machine": {**before, "load_after": after["load"]}, "rounds": rounds,
            "max_tokens": max_tokens, "prompt_names": [p.name for p in prompts], **summarize(runs), "runs": runs}


def report(result: dict[str, Any]) -> Report:
    """The result for people: one row per mode, then the speed-up and how many answers stayed the same."""
    rows = [[mode, str(m["runs"]), str(m["output_tokens"]), str(m["decode_s"]), str(m["ms_per_token"])]
            for mode, m in result["modes"].items()]
    m = result["machine"]
    title = (f"{result['prompts']} recorded-turn prompts x {result['rounds']} rounds, greedy, up to "
             f"{result['max_tokens']} tokens; {m['cores']} cores of {m['cpu'] or 'an unknown CPU'} "
             f"(load {m['load'][0]} -> {m['load_after'][0]})")
    notes = [f"speed-up ngram over off: {result['speedup']}x (by round: {result['speedup_by_round']})",
             f"identical answers: {result['identical']}/{result['prompts']} prompts"
             + (f"; differing: {', '.join(result['differing'])}" if result["differing"] else ""),
             f"drafts off, differing between its own rounds: {len(result['off_unstable'])}/{result['prompts']} prompts"]
    return Report(result, [Table(["drafts", "answers", "output tokens", "decode s", "ms/token"], rows, title=title)],
                  notes)


def cmd_bench_drafts(args: argparse.Namespace) -> int:
    """`tao bench drafts`: check the options, pick the prompts, run, print JSON and the table."""
    if args.sessions < 1 or args.turns < 1 or args.rounds < 1 or args.max_tokens < 2:
        raise UsageError("--sessions, --turns and --rounds must be at least 1 and --max-tokens at least 2")
    prompts = turn_prompts(args.traces, args.sessions, args.turns, args.max_chars)
    if not prompts:
        raise UsageError(f"no trajectory with a `messages` list under {args.traces}; pass --traces DIR of "
                         "mini-swe-agent trajectories (e.g. ../shared/traces/mini-swe-agent-...)")
    terminate_as_interrupt()
    report(asyncio.run(bench(prompts, args.rounds, args.max_tokens))).emit()
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `tao bench drafts`."""
    bench = bench_subparsers.add_parser("drafts")
    bench.add_argument("--traces", type=Path, default=DEFAULT_TRACES,
                       help=f"folder (or file) of trajectories with a `messages` list (default {DEFAULT_TRACES})")
    bench.add_argument("--sessions", type=int, default=3, help="trajectories to take, spread by name (default 3)")
    bench.add_argument("--turns", type=int, default=2, help="turns of each, spread over those that fit (default 2)")
    bench.add_argument("--max-chars", type=int, default=10_000,
                       help="a prompt's characters at most (default 10000: about 2,500 tokens, a 20-s cold prefill "
                            "on one core)")
    bench.add_argument("--max-tokens", type=int, default=128, help="tokens each answer may take (default 128)")
    bench.add_argument("--rounds", type=int, default=2,
                       help="rounds over the prompts, each answered by both engines (default 2)")
    bench.set_defaults(func=cmd_bench_drafts)
