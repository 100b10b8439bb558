"""Build the engine a command asked for from its command-line options.

Engines are imported lazily: `tao run --engine replay` never imports vLLM or httpx.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.engine.api import Engine
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.engine.recorded import Recording

ENGINES = ("vllm", "openai", "replay")
DRAFTS = ("ngram", "off")
"""Token-level speculation in the in-process engine: n-gram prompt lookup, or none (harness.engine.vllm_local)."""


@dataclass(frozen=True)
class EngineOptions:
    """Which engine to use and how; filled from `tao run`'s flags."""

    kind: str = "vllm"
    """vllm (in-process, the embedded model unless --model), openai (a running server) or replay."""
    replay: Path | None = None
    """The trajectory or turn script the replay engine plays back; with kind vllm, the answers to force through it."""
    seconds_per_token: float = 0.0
    """Replay pacing: simulated time per output token."""
    model: str | None = None
    """Model name or directory; None means the embedded default model."""
    base_url: str | None = None
    """URL of an OpenAI-compatible server, for the openai engine."""
    replicas: tuple[str, ...] = ()
    """Servers of one model for the openai engine, two or more (`--engine-url` repeated): each session sticks to one
    (harness.engine.replicas); empty: the one server at base_url."""
    constrained: bool = True
    """Constrain decoding so every turn is a well-formed call (for small models)."""
    max_model_len: int | None = None
    """Context length for the in-process engine; None: 8192 for the embedded model, else the model's own. With
    kind replay, a window the replayed prompts must fit (none by default)."""
    temperature: float = 0.6
    """Sampling temperature for the vllm and openai engines."""
    attach: bool = True
    """With kind vllm, use a healthy `tao serve` server for the same model instead of starting in-process."""
    native_tools: bool | None = None
    """openai engine: use the server's native tool calls (None: ask the server)."""
    api_key: str | None = None
    """openai engine: bearer token, if the server wants one (default: $OPENAI_API_KEY)."""
    kv_tokens: int | None = None
    """In-process engine: hold the KV cache to this many tokens (benchmarks); None: what the memory allows."""
    drafts: str = "ngram"
    """In-process engine: "ngram" drafts tokens by prompt lookup (1.9-2.0x the decode speed on recorded
    sessions' prompts here, `tao bench drafts`), "off" does not.
    An engine that forces recorded answers (kind vllm with replay) never drafts: vLLM takes no logits processor
    beside drafts."""


async def open_engine(options: EngineOptions) -> Engine:
    """Start or connect to the engine; raises UsageError or EngineUnavailable with what to do."""
    if options.kind == "replay":
        from harness.engine.recorded import ReplayEngine, load_recording

        if options.replay is None:
            raise UsageError("--engine replay needs --replay FILE (a trajectory .jsonl or a JSON turn script)")
        return ReplayEngine(load_recording(options.replay), options.seconds_per_token,
                            name=f"replay:{options.replay.name}", max_model_len=options.max_model_len)
    if options.kind == "openai" and options.replicas:
        from harness.engine.replicas import ReplicaSet

        return await ReplicaSet.connect(list(options.replicas), model=options.model, constrained=options.constrained,
                                        temperature=options.temperature,
                                        api_key=options.api_key or os.environ.get("OPENAI_API_KEY"))
    if options.kind == "openai":
        from harness.engine.openai_http import OpenAIEngine

        if not options.base_url:
            raise UsageError("--engine openai needs --base-url URL, e.g. --base-url http://localhost:8000/v1")
        return await OpenAIEngine.connect(options.base_url, model=options.model, native_tools=options.native_tools,
                                          constrained=options.constrained, temperature=options.temperature,
                                          api_key=options.api_key or os.environ.get("OPENAI_API_KEY"))
    if options.kind == "vllm":
        recording = load_forced(options.replay) if options.replay is not None else None
        attached = await attach_server(options) if options.attach and recording is None else None
        engine = attached or await start_local(replace(options, drafts="off") if recording else options)
        if recording is not None:
            from harness.engine.recorded import ForcedReplayEngine

            return ForcedReplayEngine(engine, recording)
        return engine
    raise UsageError(f"unknown engine {options.kind!r}; choose one of {', '.join(ENGINES)}")


def load_forced(path: Path) -> Recording:
    """The recorded turns to force through the real engine (read before the engine starts, so a bad file fails fast)."""
    from harness.engine.recorded import load_recording

    return load_recording(path)


async def attach_server(options: EngineOptions) -> Engine | None:
    """An engine over the running `tao serve` gateway for this model, or None when there is none. Its requests then
    say whose they are and how they rank, and its co-scheduler paces them with everyone else's on the machine."""
    from harness.engine.embedded_model import model_key
    from harness.engine.server import running_server

    state = await asyncio.to_thread(running_server, model_key(options.model))
    if state is None:
        return None
    from harness.engine.openai_http import OpenAIEngine
    from harness.errors import EngineUnavailable

    try:
        return await OpenAIEngine.connect(state.url, model=state.model,
                                          constrained=options.constrained, temperature=options.temperature,
                                          name=f"vllm:{Path(state.model).name} (paced by tao serve, pid {state.pid})",
                                          gateway=True)
    except EngineUnavailable:
        return None


async def start_local(options: EngineOptions) -> Engine:
    """Start vLLM in-process with the requested model (converting the embedded one on first use)."""
    from harness.engine.embedded_model import EMBEDDED_MAX_MODEL_LEN, MODEL_NAME, resolve_model
    from harness.engine.vllm_local import VLLMEngine, VLLMSettings

    model = await asyncio.to_thread(resolve_model, options.model)
    embedded = options.model is None
    name = f"vllm:{MODEL_NAME} (embedded)" if embedded else f"vllm:{Path(model).name}"
    max_len = options.max_model_len or (EMBEDDED_MAX_MODEL_LEN if embedded else None)
    print(f"tao: starting the vLLM engine for {name.removeprefix('vllm:')} "
          "(tens of seconds on a CPU; `tao serve` keeps one running)...", file=sys.stderr, flush=True)
    return await VLLMEngine.start(VLLMSettings(model=model, name=name, max_model_len=max_len,
                                               constrained=options.constrained, temperature=options.temperature,
                                               kv_tokens=options.kv_tokens, drafts=options.drafts))
