"""`tao bench calibrate`: fit the simulated engine's step model to the real vLLM engine on this machine.

    tao bench calibrate --out calibration.json     # then: tao bench cosched --engine sim --profile calibration.json

Two kinds of measurement on the embedded model (harness.engine.sim.StepModel says what each term is):

- decode: `b` prefixes of `ctx` tokens, each of its own text, are put in the prefix cache, then `b` requests,
  one on each prefix plus a short suffix, decode `--decode-tokens` tokens each (end of sequence ignored).
  They are admitted in one step and decode in lockstep, so a request's decode time over its tokens is the
  step time at batch `b` with `b * ctx` tokens of context. Each reads KV blocks of its own, as the
  workload's sessions do (a batch on one shared prefix reads the same blocks, which stay in the CPU's
  caches: the simulator on such a calibration ran 34% fast at K/2, 20% on this one; docs/BENCHMARKS.md);
- prefill: one request of `n` new tokens and one output token, after no cached tokens or after `c` (a
  tool's output appended to a long cached context, the workload's usual prefill); its time to first token
  is one prefill step of `n` tokens.

Step time = base + per_seq * seqs + per_token * prefill tokens + per_decode_pair * context tokens read
+ per_prefill_pair * (n * c + n * n / 2), fitted by least squares with every coefficient kept >= 0.
Prints JSON (measurements, fit, the profile `--profile` reads) and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.bench import dump
from harness.bench.engine import FILLER, long_prompt, run_one
from harness.bench.report import Report, Table
from harness.engine.api import LLMRequest
from harness.engine.sim import CPU, Profile, StepModel
from harness.errors import UsageError
from harness.machine import machine

TERMS = ("base", "per_seq", "per_token", "per_decode_pair", "per_prefill_pair")


def features(seqs: int, context: int, prefill: int, cached: int) -> list[float]:
    """The step model's terms for one measured step (StepModel.seconds's arguments)."""
    return [1.0, float(seqs), float(prefill), float(context), float(prefill * cached + prefill * prefill // 2)]


def fit(rows: list[tuple[list[float], float]]) -> StepModel:
    """Least squares on relative error, dropping any term that comes out negative and fitting again."""
    import numpy as np

    x = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[1] for r in rows], dtype=float)
    weight = 1.0 / y  # every point counts by its relative error, the long prefills as much as a decode step
    active = list(range(len(TERMS)))
    coef = np.zeros(len(TERMS))
    while active:
        solved, *_ = np.linalg.lstsq(x[:, active] * weight[:, None], y * weight, rcond=None)
        if (solved >= 0).all():
            coef[active] = solved
            break
        active.pop(int(np.argmin(solved)))
    return StepModel(**{name: float(f"{value:.4g}") for name, value in zip(TERMS, coef)})


def own_prefixes(engine: Any, count: int, context: int) -> list[list[dict[str, str]]]:
    """`count` system prompts of about `context` tokens, each of its own text, so no two share a KV block."""
    return [long_prompt(engine, context, first=i * 1000) for i in range(count)]


async def cache(engine: Any, prefix: list[dict[str, str]]) -> list[dict[str, str]]:
    """Put `prefix` in the prefix cache (one request on it, one output token) and return it."""
    await run_one(engine, LLMRequest(f"cal-prefix-{uuid.uuid4().hex[:8]}",
                                     prefix + [{"role": "user", "content": "Warm."}], max_tokens=1))
    return prefix


def forced_text(engine: Any, tokens: int, index: int) -> str:
    """About `tokens` tokens of plain text to force (a replayed answer's way of decoding), different per `index`."""
    text, j = "", index * 1000
    while len(engine.tokenizer.encode(text)) < tokens:
        text += FILLER.format(i=j)
        j += 1
    return text


def decode_requests(engine: Any, prefixes: list[list[dict[str, str]]], tokens: int,
                    forced: bool = False) -> list[LLMRequest]:
    """One request on each prefix (the batch is their number), decoding `tokens` tokens, `forced` to a text
    or free."""
    batch = len(prefixes)
    return [LLMRequest(f"cal-dec-{batch}-{i}-{uuid.uuid4().hex[:6]}",
                       prefix + [{"role": "user", "content": f"Story {batch}-{i}."}], max_tokens=tokens,
                       force=forced_text(engine, tokens, i) if forced else None)
            for i, prefix in enumerate(prefixes)]


async def decode_point(engine: Any, prefixes: list[list[dict[str, str]]], tokens: int,
                       forced: bool = False) -> dict[str, Any]:
    """Step time with one sequence decoding after each cached prefix: free (end of sequence ignored), or
    `forced` to a text token by token as `tao bench cosched` replays recorded answers."""
    batch = len(prefixes)
    requests = decode_requests(engine, prefixes, tokens, forced)
    usages = await asyncio.gather(*(run_one(engine, r, ignore_eos=True) for r in requests))
    steps = [u.decode_seconds / (u.output_tokens - 1) for u in usages if u.decode_seconds and u.output_tokens > 1]
    prompt = round(sum(u.prompt_tokens for u in usages) / len(usages))
    seconds = sum(steps) / len(steps)
    made = round(sum(u.output_tokens for u in usages) / len(usages))
    return {"kind": "decode", "forced": forced, "batch": batch, "context": prompt, "step_s": round(seconds, 5),
            "x": features(batch, batch * (prompt + made // 2), 0, 0), "y": seconds}


async def prefill_point(engine: Any, new: int, prefix: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """One step prefilling about `new` tokens, after the cached `prefix` if one is given (a user message of
    its own text, as a tool's output follows a session's context)."""
    if prefix:
        tail = long_prompt(engine, new, first=500)[0]["content"]
        messages = prefix + [{"role": "user", "content": tail}]
    else:
        messages = long_prompt(engine, new) + [{"role": "user", "content": "Summarize."}]
    usage = await run_one(engine, LLMRequest(f"cal-pf-{uuid.uuid4().hex[:8]}", messages, max_tokens=1))
    fresh = usage.prompt_tokens - usage.cached_tokens
    seconds = usage.ttft or 0.0
    return {"kind": "prefill", "new": fresh, "cached": usage.cached_tokens, "ttft_s": round(seconds, 4),
            "x": features(0, 0, fresh, usage.cached_tokens), "y": seconds}


def kv_tokens(engine: Any) -> int:
    """KV cache capacity in tokens: the engine's block count if it says, else the cache size over a token's KV."""
    config = engine._llm.vllm_config
    blocks = getattr(config.cache_config, "num_gpu_blocks", None)
    if blocks:
        return int(blocks) * engine.block_size
    model = config.model_config
    hf = model.hf_text_config
    heads = getattr(hf, "num_key_value_heads", hf.num_attention_heads)
    per_token = 2 * hf.num_hidden_layers * heads * (hf.hidden_size // hf.num_attention_heads) * model.dtype.itemsize
    import os

    return int(float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")) * 2**30 // per_token)


async def measure(batches: list[int], contexts: list[int], prefills: list[int], after: list[int], tokens: int,
                  forced: bool = False) -> dict[str, Any]:
    """Start the embedded engine, take every measurement (decoding `forced` to a text, or free; prefilling after
    no cache and after each of `after` cached tokens), fit, and build the profile."""
    from harness.engine.factory import EngineOptions, start_local

    started = time.monotonic()
    # the step times of the engine the cosched benchmark replays on: forced answers, so no drafts
    engine: Any = await start_local(EngineOptions(attach=False, constrained=False, drafts="off"))
    try:
        await run_one(engine, LLMRequest("cal-warmup", [{"role": "user", "content": "Hello"}], max_tokens=4))
        points = []
        for context in contexts:
            prefixes = [await cache(engine, p) for p in own_prefixes(engine, max(batches), context)]
            for batch in batches:
                points.append(await decode_point(engine, prefixes[:batch], tokens, forced))
                print(f"  decode  batch {batch:3} context {points[-1]['context']:5}: {points[-1]['step_s']:.4f} s/step",
                      file=sys.stderr, flush=True)
        for new in prefills:
            points.append(await prefill_point(engine, new))
            print(f"  prefill {points[-1]['new']:5} tokens: {points[-1]['ttft_s']:.3f} s", file=sys.stderr, flush=True)
        for cached in after:
            prefix = await cache(engine, long_prompt(engine, cached))
            for new in prefills:
                points.append(await prefill_point(engine, new, prefix))
                print(f"  prefill {points[-1]['new']:5} tokens after {points[-1]['cached']}: "
                      f"{points[-1]['ttft_s']:.3f} s", file=sys.stderr, flush=True)
        capacity, block = kv_tokens(engine), engine.block_size
        scheduler = engine._llm.vllm_config.scheduler_config
        limits = {"max_model_len": engine.max_model_len, "max_seqs": int(scheduler.max_num_seqs),
                  "max_batched_tokens": int(scheduler.max_num_batched_tokens)}
    finally:
        await engine.close()
    step = fit([(p["x"], p["y"]) for p in points])
    for p in points:
        p["fitted"] = round(step.seconds(*_args(p["x"])), 5)
    profile = replace(CPU, step=step, kv_tokens=capacity, block_size=block, **limits,
                      source="tao bench calibrate on this machine")
    return {"points": points, "profile": profile.to_dict(), "machine": machine(),
            "wall_seconds": round(time.monotonic() - started, 1)}


def _args(x: list[float]) -> tuple[int, int, int, int]:
    """StepModel.seconds's arguments from a feature row."""
    return int(x[1]), int(x[3]), int(x[2]), int(x[4])


def report(result: dict[str, Any]) -> Report:
    """Measured against fitted, then the constants."""
    rows = [[f"decode batch {p['batch']} ctx {p['context']}" if p["kind"] == "decode"
             else f"prefill {p['new']} after {p['cached']}", f"{p['y']:.4f}", f"{p['fitted']:.4f}"]
            for p in result["points"]]
    profile = result["profile"]
    notes = ["step model: " + ", ".join(f"{k}={v:.4g}" for k, v in profile["step"].items()),
             f"kv_tokens={profile['kv_tokens']} block_size={profile['block_size']}; "
             f"knee at 2,000-token contexts: {Profile.load_dict(profile).knee(2000)} sequences"]
    return Report(result, [Table(["point", "measured s", "fitted s"], rows)], notes)


def parse_counts(text: str, flag: str) -> list[int]:
    """A comma-separated list of positive integers, or a UsageError naming the flag."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UsageError(f"{flag} {text!r}: give positive whole numbers separated by commas, e.g. 1,4,16")
    return values


def cmd_calibrate(args: argparse.Namespace) -> int:
    batches = parse_counts(args.batches, "--batches")
    contexts = parse_counts(args.contexts, "--contexts")
    prefills = parse_counts(args.prefill, "--prefill")
    after = parse_counts(args.prefill_after, "--prefill-after")
    if max(prefills) > 4096:
        raise UsageError("--prefill: at most 4096 tokens (one step of the CPU engine's token budget)")
    result = asyncio.run(measure(batches, contexts, prefills, after, args.decode_tokens, args.forced))
    if args.out:
        args.out.write_text(dump(result) + "\n", encoding="utf-8")
    report(result).emit()
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `calibrate` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "calibrate",
        description="Measure the embedded vLLM engine's step time against batch size, context and prefill "
                    "tokens, fit harness.engine.sim's StepModel, and print the profile as JSON.")
    parser.add_argument("--batches", default="1,2,4,8,16,32", help="decode batch sizes (default 1,2,4,8,16,32)")
    parser.add_argument("--contexts", default="128,1536", help="decode context lengths in tokens (default 128,1536)")
    parser.add_argument("--prefill", default="64,512,1536",
                        help="prefill sizes in tokens, each under the CPU engine's 2,048-token step budget with the "
                             "chat template, so one step each (default 64,512,1536)")
    parser.add_argument("--prefill-after", default="2000,4000,6000",
                        help="cached context lengths in tokens that each prefill size is also measured after, as a "
                             "tool's output follows a session's cached context (default 2000,4000,6000)")
    parser.add_argument("--decode-tokens", type=int, default=24, help="tokens each decode request makes (default 24)")
    parser.add_argument("--forced", action="store_true",
                        help="decode by forcing a text token by token, as `tao bench cosched` replays recorded "
                             "answers, instead of free decoding")
    parser.add_argument("--out", type=Path, help="also write the JSON here (for `tao bench cosched --profile`)")
    parser.set_defaults(func=cmd_calibrate)
