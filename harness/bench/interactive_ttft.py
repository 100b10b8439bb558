"""An interactive session's time to first token on `tao serve`, idle and beside a busy batch.

    python -m harness.bench.interactive_ttft --batch 16 --reps 4

One in-process vLLM engine with the embedded model behind the gateway (HTTP, SSE), as `tao serve` runs it.
A TUI-like request (`X-Tao-Class: interactive`) is timed to its first content event, first on an idle
engine, then while `--batch` batch sessions (`X-Tao-Class: batch`, each its own long prompt and a long
answer, sent again as soon as it ends) keep the engine busy. Each policy in turn (pacing, fcfs), rotated
per repetition; the ratio is the median loaded TTFT over the median idle TTFT. Prints JSON and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid

import httpx

from harness.coscheduler import FCFS, CoScheduler, Pacing, Policy
from harness.engine.api import Engine
from harness.flags import PACING_KNEE, PACING_KV_TOKENS, PACING_MAX_WAIT
from harness.gateway import serving

SYSTEM = ("You are Tao, a coding agent. Tools: read_file, grep, list_files, outline, run_tests, edit_file, "
          "write_file, bash. Answer with one tool call or a final answer.\n") * 12
BATCH_NOTES = "".join(f"Note {i}: handler_{i} doubles its input, logs it and returns it.\n" for i in range(40))
SETTLE = 3.0  # seconds the batch runs before the interactive request: its first prefills are done by then


async def first_token(client: httpx.AsyncClient, messages: list[dict[str, str]], traffic: str, session: str,
                      max_tokens: int) -> float:
    """Seconds from sending one streamed request through the gateway to its first content event."""
    body = {"messages": messages, "max_tokens": max_tokens, "stream": True}
    headers = {"X-Session-Id": session, "X-Tao-Class": traffic}
    start = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", "/chat/completions", json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if first is None and '"content"' in line:
                first = time.perf_counter() - start
    return float("nan") if first is None else first


def interactive_messages() -> list[dict[str, str]]:
    """A fresh TUI turn: the shared system prompt and a new task (its own tail, so nothing of it is cached)."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task {uuid.uuid4().hex}: find where handler_3 logs its input."}]


async def batch_session(client: httpx.AsyncClient, name: str, stop: asyncio.Event) -> int:
    """One batch session: its own long prompt and a long answer, again and again until `stop`; requests sent."""
    sent = 0
    while not stop.is_set():
        messages = [{"role": "system", "content": f"Batch session {name}.\n{BATCH_NOTES}"},
                    {"role": "user", "content": f"Summarise the notes, step {sent}."}]
        await first_token(client, messages, "batch", name, max_tokens=256)
        sent += 1
    return sent


async def one_round(client: httpx.AsyncClient, batch: int) -> tuple[float, float]:
    """An interactive TTFT on the idle engine, then one beside `batch` busy batch sessions."""
    idle = await first_token(client, interactive_messages(), "interactive", "tui", max_tokens=8)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(batch_session(client, f"b{i}-{uuid.uuid4().hex[:6]}", stop)) for i in range(batch)]
    try:
        await asyncio.sleep(SETTLE)
        loaded = await first_token(client, interactive_messages(), "interactive", "tui", max_tokens=8)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
    await asyncio.sleep(1.0)  # aborted batch requests leave the engine
    return idle, loaded


async def measure(batch: int, reps: int) -> dict[str, object]:
    """Every policy `reps` times in rotated order; median idle and loaded TTFT and their ratio per policy."""
    from harness.engine.factory import EngineOptions, start_local

    engine: Engine = await start_local(EngineOptions(attach=False))
    kv_tokens = getattr(engine, "kv_tokens", None) or PACING_KV_TOKENS
    policies: dict[str, Policy] = {"pacing": Pacing(knee=PACING_KNEE, kv_tokens=kv_tokens, max_wait=PACING_MAX_WAIT),
                                   "fcfs": FCFS()}
    samples: dict[str, dict[str, list[float]]] = {name: {"idle": [], "loaded": []} for name in policies}
    names = list(policies)
    try:
        async with serving(CoScheduler(engine, FCFS()), "bench") as url, \
                httpx.AsyncClient(base_url=url, timeout=600) as client:
            await one_round(client, batch)  # unmeasured: the first requests of a fresh engine are slower
        for rep in range(reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                cosched = CoScheduler(engine, policies[name])
                async with serving(cosched, "bench") as url, httpx.AsyncClient(base_url=url, timeout=600) as client:
                    idle, loaded = await one_round(client, batch)
                samples[name]["idle"].append(idle)
                samples[name]["loaded"].append(loaded)
                print(f"rep {rep + 1} {name}: idle {idle * 1000:.0f} ms, beside {batch} batch sessions "
                      f"{loaded * 1000:.0f} ms", flush=True)
    finally:
        await engine.close()
    result: dict[str, object] = {"batch_sessions": batch, "reps": reps, "knee": PACING_KNEE, "kv_tokens": kv_tokens}
    for name, got in samples.items():
        idle, loaded = statistics.median(got["idle"]), statistics.median(got["loaded"])
        result[name] = {"idle_ms": round(idle * 1000, 1), "loaded_ms": round(loaded * 1000, 1),
                        "ratio": round(loaded / idle, 2),
                        "samples_ms": {k: [round(v * 1000, 1) for v in vs] for k, vs in got.items()}}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="batch sessions keeping the engine busy (default 16)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every policy, rotated (default 3)")
    args = parser.parse_args()
    if args.batch < 1 or args.reps < 1:
        parser.error("--batch and --reps take positive counts")
    result = asyncio.run(measure(args.batch, args.reps))
    print(json.dumps(result))
    print(f"{'policy':<8} {'idle TTFT ms':>13} {'loaded TTFT ms':>15} {'loaded/idle':>12}")
    for name in ("pacing", "fcfs"):
        row = result[name]
        assert isinstance(row, dict)
        print(f"{name:<8} {row['idle_ms']:>13.1f} {row['loaded_ms']:>15.1f} {row['ratio']:>12.2f}")


if __name__ == "__main__":
    main()
