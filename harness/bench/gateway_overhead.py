"""What `tao serve`'s gateway adds to time to first token on an idle engine.

    python -m harness.bench.gateway_overhead --reps 30

One in-process vLLM engine with the embedded model; the same request, in turn: straight to the engine, and
through the gateway (HTTP, the co-scheduler with Pacing, SSE) read three ways: from a bare socket (a request
written by hand: the gateway's own cost), with plain httpx, and with Tao's own OpenAIEngine client. Client
and gateway share one event loop, so every bit of serialisation on either side counts.
The ways run in a rotated order each round; the added time is the median of each round's difference to
the direct call (the machine's load changes between rounds, less within one). Prints JSON (ms) and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx

from harness.coscheduler import CoScheduler, Pacing
from harness.engine.api import Engine, LLMRequest
from harness.engine.openai_http import OpenAIEngine
from harness.flags import PACING_KNEE, PACING_KV_TOKENS, PACING_MAX_WAIT
from harness.gateway import serving

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name three rivers of Europe."}]
MAX_TOKENS = 1  # one token: the engine is idle before and after it, so nothing else competes for the CPU


async def direct(engine: Engine, max_tokens: int) -> float:
    """Seconds to the first text chunk, calling the engine itself."""
    start = time.perf_counter()
    first = None
    async for chunk in engine.stream(LLMRequest(uuid.uuid4().hex, MESSAGES, max_tokens=max_tokens)):
        if first is None and chunk.text:
            first = time.perf_counter() - start
    return first if first is not None else float("nan")


async def raw_http(client: httpx.AsyncClient, max_tokens: int) -> float:
    """Seconds to the first `data:` event with content, through the gateway with plain httpx."""
    body = {"messages": MESSAGES, "max_tokens": max_tokens, "stream": True}
    start = time.perf_counter()
    first = None
    async with client.stream("POST", "/chat/completions", json=body, headers={"X-Session-Id": "bench"}) as resp:
        async for line in resp.aiter_lines():
            if first is None and '"content"' in line:
                first = time.perf_counter() - start
    return first if first is not None else float("nan")


async def raw_socket(url: str, max_tokens: int) -> float:
    """Seconds to the first content event through the gateway, with a bare HTTP/1.1 request on a socket opened
    beforehand: the gateway's own cost, without an HTTP client library's."""
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    body = json.dumps({"messages": MESSAGES, "max_tokens": max_tokens, "stream": True}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"x-session-id: bench\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection(host, int(port))
    start = time.perf_counter()
    writer.write(head + body)
    seen = b""
    while b'"content"' not in seen:
        seen += await reader.read(65536)
    first = time.perf_counter() - start
    while await reader.read(65536):
        pass
    writer.close()
    return first


async def tao_client(engine: OpenAIEngine, max_tokens: int) -> float:
    """Seconds to the first text chunk, through the gateway with Tao's OpenAI client."""
    return await direct(engine, max_tokens)


async def measure(reps: int, warmup: int, max_tokens: int) -> dict[str, object]:
    """Alternate the three ways `reps` times after `warmup` rounds; medians and the added milliseconds."""
    from harness.engine.factory import EngineOptions, start_local

    engine = await start_local(EngineOptions(attach=False))
    try:
        cosched = CoScheduler(engine, Pacing(knee=PACING_KNEE, kv_tokens=getattr(engine, "kv_tokens", None)
                                             or PACING_KV_TOKENS, max_wait=PACING_MAX_WAIT))
        async with serving(cosched, "bench") as url, httpx.AsyncClient(base_url=url, timeout=300) as client:
            tao = await OpenAIEngine.connect(url)
            ways: dict[str, Callable[[], Awaitable[float]]] = {
                "direct": lambda: direct(engine, max_tokens), "gateway_socket": lambda: raw_socket(url, max_tokens),
                "gateway_httpx": lambda: raw_http(client, max_tokens),
                "gateway_tao_client": lambda: tao_client(tao, max_tokens)}
            times: dict[str, list[float]] = {name: [] for name in ways}
            names = list(ways)
            for round_ in range(warmup + reps):
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:  # rotated: no fixed order
                    seconds = await ways[name]()
                    if round_ >= warmup:
                        times[name].append(seconds)
            await tao.close()
    finally:
        await engine.close()
    ms = {name: [v * 1000 for v in values] for name, values in times.items()}
    return {"reps": reps, "max_tokens": max_tokens,
            "median_ms": {name: statistics.median(values) for name, values in ms.items()},
            "min_ms": {name: min(values) for name, values in ms.items()},
            # each round's ways ran back to back, under the same load: the median of their differences
            "added_ms": {name: statistics.median(v - d for v, d in zip(values, ms["direct"]))
                         for name, values in ms.items() if name != "direct"},
            "samples_ms": {name: [round(v, 2) for v in values] for name, values in ms.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="measured rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured rounds first (default 3)")
    parser.add_argument("--samples", action="store_true", help="print every sample too (ms)")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                        help=f"tokens per answer (default {MAX_TOKENS}; more, and the decode after the first token "
                             "competes with the gateway for a CPU engine's cores)")
    args = parser.parse_args()
    result = asyncio.run(measure(args.reps, args.warmup, args.max_tokens))
    print(json.dumps({k: v for k, v in result.items() if args.samples or k != "samples_ms"}))
    print(f"{'way':<20} {'median TTFT ms':>15} {'min ms':>8} {'added ms (median of paired)':>28}")
    medians, least, added = result["median_ms"], result["min_ms"], result["added_ms"]
    assert isinstance(medians, dict) and isinstance(least, dict) and isinstance(added, dict)
    for name, value in medians.items():
        print(f"{name:<20} {value:>15.2f} {least[name]:>8.2f} {added.get(name, 0.0):>28.2f}")


if __name__ == "__main__":
    main()
