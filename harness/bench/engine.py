"""`tao bench engine`: what the in-process vLLM engine costs on this machine.

Measures engine start (process, model load, KV cache), time to first token for a ~4k-token prompt cold
and again from the prefix cache (same long prefix, a different last message), and decode throughput
at 1, 4 and 16 concurrent requests (each generating a fixed number of tokens, end-of-sequence ignored);
with `--forced`, also what forcing the recorded answers of examples/sessions costs, by their own token ids
(how benchmarks replay them) and by a regex of their text. Prints JSON on stdout, then a table on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from typing import Any

from harness.bench.report import Report, Table
from harness.engine.api import LLMRequest, Usage
from harness.errors import UsageError
from harness.machine import machine
from harness.shutdown import terminate_as_interrupt

FILLER = ("def handler_{i}(request):\n    \"\"\"Return the response for request {i}.\"\"\"\n"
          "    value = request.get('value', {i}) * 2\n    return {{'id': {i}, 'value': value}}\n\n")




def long_prompt(engine: Any, target_tokens: int, first: int = 0) -> list[dict[str, str]]:
    """A system message of `target_tokens` tokens less at most one function's (about 50), with a unique first
    line, so it starts uncached, and functions numbered from `first` (prompts of different `first` differ
    throughout, not only at the start). Grows 20 functions at a time, then one."""
    head = f"Session {uuid.uuid4().hex}. You review this Python module.\n\n"
    body, i, step = "", first, 20
    while True:
        chunk = "".join(FILLER.format(i=j) for j in range(i, i + step))
        messages = [{"role": "system", "content": head + body + chunk}, {"role": "user", "content": "Summarize."}]
        if len(engine.render(LLMRequest("count", messages))) <= target_tokens:
            body, i = body + chunk, i + step
        elif step > 1:
            step = 1
        else:
            return [{"role": "system", "content": head + body}]


async def run_one(engine: Any, request: LLMRequest, ignore_eos: bool = False) -> Usage:
    """Drain one request's stream and return its usage."""
    usage = Usage()
    async for chunk in engine.stream(request, ignore_eos=ignore_eos):
        usage = chunk.usage or usage
    return usage


async def decode_rate(engine: Any, concurrency: int, tokens: int) -> dict[str, Any]:
    """Aggregate output tokens/s of `concurrency` requests generating `tokens` tokens each."""
    requests = [LLMRequest(f"decode-{concurrency}-{i}-{uuid.uuid4().hex[:6]}",
                           [{"role": "user", "content": f"Write story number {i} about a lighthouse."}],
                           max_tokens=tokens) for i in range(concurrency)]
    started = time.monotonic()
    usages = await asyncio.gather(*(run_one(engine, r, ignore_eos=True) for r in requests))
    wall = time.monotonic() - started
    produced = sum(u.output_tokens for u in usages)
    per_request = [u.output_tokens / u.decode_seconds for u in usages if u.decode_seconds]
    return {"concurrency": concurrency, "output_tokens": produced, "wall_s": round(wall, 2),
            "tokens_per_s": round(produced / wall, 1),
            "per_request_tokens_per_s": round(sum(per_request) / len(per_request), 1) if per_request else None}


async def forced_costs(engine: Any) -> dict[str, Any]:
    """The recorded answers of examples/sessions forced through the engine by their own token ids and by a regex
    of their text (the two ways alternating first, turn by turn): tokens and seconds of each, and whether
    every answer came out verbatim."""
    from harness.bench.recordings import load_sessions

    texts = [turn.text for session in load_sessions() for turn in session.recording.turns]
    totals = {way: {"tokens": 0, "seconds": 0.0, "verbatim": 0} for way in ("tokens", "regex")}
    for index, text in enumerate(texts):
        ways = ("tokens", "regex") if index % 2 == 0 else ("regex", "tokens")
        for way in ways:
            request = LLMRequest(f"forced-{way}-{index}-{uuid.uuid4().hex[:6]}",
                                 [{"role": "user", "content": "Go on."}], max_tokens=len(text) + 8, force=text)
            started, answer, usage = time.monotonic(), "", Usage()
            async for chunk in engine.stream(request, force_regex=way == "regex"):
                answer, usage = answer + chunk.text, chunk.usage or usage
            total = totals[way]
            total["seconds"] += time.monotonic() - started
            total["tokens"] += usage.output_tokens
            total["verbatim"] += answer == text
    for total in totals.values():
        total["seconds"] = round(total["seconds"], 1)
    return {"answers": len(texts), "characters": sum(len(t) for t in texts), **totals}


async def bench(prompt_tokens: int, concurrency: list[int], decode_tokens: int, forced: bool = False) -> dict[str, Any]:
    """Start the embedded engine in-process and measure it; see the module docstring."""
    from harness.engine.factory import EngineOptions, start_local
    from harness.engine.vllm_local import VLLMEngine

    info = machine()
    started = time.monotonic()
    engine = await start_local(EngineOptions(attach=False, constrained=False, drafts="off"))  # --forced forces
    assert isinstance(engine, VLLMEngine)  # start_local runs vLLM in-process; its window and start time are read below
    start_s = time.monotonic() - started
    try:
        await run_one(engine, LLMRequest("warmup", [{"role": "user", "content": "Hello"}], max_tokens=4))
        prefix = long_prompt(engine, prompt_tokens)
        cold = await run_one(engine, LLMRequest("ttft-cold", prefix + [{"role": "user", "content": "Summarize."}],
                                                max_tokens=1))
        warm = await run_one(engine, LLMRequest("ttft-cached",
                                                prefix + [{"role": "user", "content": "List the functions."}],
                                                max_tokens=1))
        decode = [await decode_rate(engine, c, decode_tokens) for c in concurrency]
        forcing = await forced_costs(engine) if forced else None
    finally:
        await engine.close()
    import vllm

    return {
        "engine": engine.name, "vllm": vllm.__version__, "max_model_len": engine.max_model_len,
        "engine_start_s": round(start_s, 1),
        "engine_start_inner_s": round(engine.started_seconds, 1),
        "ttft_cold_s": round(cold.ttft or 0.0, 2), "prompt_tokens": cold.prompt_tokens,
        "cached_tokens_cold": cold.cached_tokens,
        "ttft_cached_s": round(warm.ttft or 0.0, 2), "cached_tokens": warm.cached_tokens,
        "decode_tokens": decode_tokens, "decode": decode, **({"forced": forcing} if forcing else {}),
        "machine": {**info, "load_after": machine()["load"]},
    }


def report(result: dict[str, Any]) -> Report:
    """The result for people: each figure on its row, under the engine and the machine."""
    rows = [["engine start (s)", str(result["engine_start_s"])],
            [f"TTFT cold, {result['prompt_tokens']}-token prompt (s)", str(result["ttft_cold_s"])],
            [f"TTFT from prefix cache, {result['cached_tokens']} cached (s)", str(result["ttft_cached_s"])]]
    rows += [[f"decode tokens/s at {d['concurrency']} concurrent", str(d["tokens_per_s"])] for d in result["decode"]]
    if "forced" in result:
        f = result["forced"]
        rows += [[f"{f['answers']} recorded answers forced by {way}: tokens, s, verbatim",
                  f"{f[way]['tokens']}, {f[way]['seconds']}, {f[way]['verbatim']}"] for way in ("tokens", "regex")]
    m = result["machine"]
    title = (f"{result['engine']} on {m['cores']} cores of {m['cpu'] or 'an unknown CPU'} "
             f"(load {m['load'][0]} -> {m['load_after'][0]})")
    return Report(result, [Table(["measure", "value"], rows, title=title)])


def main(prompt_tokens: int = 4096, concurrency: list[int] | None = None, decode_tokens: int = 128,
         forced: bool = False) -> int:
    """Run the benchmark, print JSON on stdout and the table on stderr."""
    terminate_as_interrupt()
    result = asyncio.run(bench(prompt_tokens, concurrency or [1, 4, 16], decode_tokens, forced))
    report(result).emit()
    return 0


def cmd_bench_engine(args: argparse.Namespace) -> int:
    """`tao bench engine`: check the options, then run the benchmark."""
    try:
        concurrency = [int(part) for part in args.concurrency.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--concurrency takes comma-separated integers, not {args.concurrency!r}") from None
    return main(args.prompt_tokens, concurrency, args.decode_tokens, args.forced)


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `tao bench engine`."""
    bench = bench_subparsers.add_parser("engine")
    bench.add_argument("--prompt-tokens", type=int, default=4096, help="long prompt size (default 4096)")
    bench.add_argument("--concurrency", default="1,4,16", help="comma-separated request counts (default 1,4,16)")
    bench.add_argument("--decode-tokens", type=int, default=128, help="tokens each decode request makes (default 128)")
    bench.add_argument("--forced", action="store_true",
                       help="also force the recorded answers of examples/sessions by their token ids and by a regex "
                            "(tokens and seconds of each; about 7 minutes on 2 cores)")
    bench.set_defaults(func=cmd_bench_engine)


if __name__ == "__main__":
    sys.exit(main())
