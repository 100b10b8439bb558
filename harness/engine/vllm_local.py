"""vLLM's async engine in-process (its engine core runs in its own process), streaming to the session.

Automatic prefix caching is on and the scheduler orders waiting requests by priority, so callers can
give each request a priority and abort it by id. Each request's final chunk reports prompt tokens,
cached prompt tokens (prefix-cache hits), output tokens, time to first token and decode time.

Tool calls travel in the text protocol (harness.protocol); with `constrained` on, decoding is held to
bounded reasoning text plus one well-formed call (harness.engine.constrain).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import reprlib
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.engine.api import Chunk, EngineLoad, LLMRequest, Usage
from harness.engine.constrain import REASONING_TOKENS, STOP, literal_regex, structural_tag_json
from harness.engine.embedded_model import converted_in_this_process
from harness.engine.quiet import quiet_engine_start
from harness.environ import kept_environment
from harness.shutdown import loaded_heavy_libraries
from harness.errors import ContextTooLong, EngineDied, EngineError, EngineUnavailable
from harness.protocol import OPEN, CLOSE

INSTALL_VLLM = "pip install 'tao-agent[cpu]' (CPU) or 'tao-agent[gpu]' (GPU)"
ABORTED_KEPT = 1024
FORCE_KEY = "tao_forced_ids"
"""The SamplingParams.extra_args key holding the token ids a forced answer must take, in order."""
START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
"""How vLLM starts its processes: "spawn" (a new interpreter) or "fork" (a copy of the one starting it)."""
PROCESSOR = "harness.engine.forced:ForcedTokens"
"""The logits processor that forces them (harness.engine.forced), by name: vLLM loads it in its engine core
process too, and naming it keeps torch out of this module's imports."""
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
"""vLLM's speculative_config for `drafts="ngram"`: up to 4 tokens drafted a step by prompt lookup (the tokens that
followed the context's last 2 to 4 tokens where they last occurred), all checked in one forward pass. vLLM refuses
custom logits processors beside drafts, so such an engine cannot force answers by their token ids."""


@dataclass(frozen=True)
class VLLMSettings:
    """How to start the in-process engine."""

    model: str
    """A Hugging Face model directory or hub name."""
    name: str
    """Shown to users and recorded in session_start."""
    max_model_len: int | None = None
    """Context length; None takes the model's own."""
    constrained: bool = True
    """Hold every turn to reasoning text plus one well-formed call."""
    temperature: float = 0.6
    """Sampling temperature (0 is greedy)."""
    reasoning_tokens: int = REASONING_TOKENS
    """Bound on the free text before a constrained call."""
    kv_cache_gib: int = 2
    """KV cache size on CPU (VLLM_CPU_KVCACHE_SPACE), unless that variable is set already."""
    kv_tokens: int | None = None
    """Hold the KV cache to at least this many tokens in whole blocks (vLLM's num_gpu_blocks_override), below
    what kv_cache_gib allows: VLLM_CPU_KVCACHE_SPACE counts whole GiB. None: all of it."""
    drafts: str = "off"
    """Token-level speculation: "ngram" drafts tokens by prompt lookup (NGRAM) and checks them in one step, with
    the same greedy output but at float ties (where a cached prefill differs too); "off" decodes one token a step
    and can force answers by their token ids."""


SHUTDOWN_GRACE = 1.0
"""Seconds vLLM's engine core gets to stop after SIGTERM before it and its worker are killed. It stops serving
at once; what it did next was its worker's and its own interpreter teardown (4-5 s on two cores, ended by vLLM's
kill at 5 s anyway). Nothing of it is kept, and the resource tracker removes the shared memory they leave."""


def cpu_has_bf16() -> bool:
    """True when this CPU computes bf16 natively (AVX512-BF16 or AMX); otherwise float32 is far faster."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _load_logger(load: EngineLoad) -> Any:
    """A vLLM stat-logger factory that copies the scheduler's counts into `load` (no logging, no Prometheus)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class LoadLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:
            if scheduler_stats is not None:
                load.running, load.waiting = scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
                load.kv_usage = scheduler_stats.kv_cache_usage

        def log_engine_initialized(self) -> None:
            pass

    return LoadLogger


class VLLMEngine:
    """An Engine over vLLM's AsyncLLM; start it with `await VLLMEngine.start(settings)`."""

    native_tools = False
    prefix_cache = True

    def __init__(self, llm: Any, settings: VLLMSettings, started_seconds: float) -> None:
        self._llm = llm
        self.settings = settings
        self.name = settings.name
        self.started_seconds = started_seconds
        self.tokenizer = llm.get_tokenizer()
        self.max_model_len: int = llm.model_config.max_model_len
        self.block_size: int = llm.vllm_config.cache_config.block_size  # prefix caching works in whole blocks
        self._aborted: dict[str, None] = {}  # an ordered set, trimmed to ABORTED_KEPT ids
        self._load: EngineLoad = getattr(llm, "tao_load", EngineLoad())
        self._grammars: dict[str, str] = {}  # tool specs JSON -> structural tag JSON
        self.forces_tokens = settings.drafts == "off"  # vLLM loads no logits processor beside drafts

    @property
    def kv_tokens(self) -> int | None:
        """The KV cache's size in tokens, as the engine core allocated it (None before it said)."""
        blocks = self._llm.vllm_config.cache_config.num_gpu_blocks
        return blocks * self.block_size if blocks else None

    def load(self) -> EngineLoad:
        """The scheduler's counts after its last step: requests running and waiting, KV cache in use.

        An idle engine core takes no step, so after an abort its last counts would stand for ever: they
        are held to the requests this front end still has unfinished (an exact count, updated at once).
        """
        unfinished = self._llm.get_num_unfinished_requests()
        if unfinished == 0:
            return EngineLoad()
        load = replace(self._load)
        load.waiting = min(load.waiting, unfinished)
        load.running = min(load.running, unfinished - load.waiting)
        return load

    @classmethod
    async def start(cls, settings: VLLMSettings) -> VLLMEngine:
        """Start the engine core process and load the model (tens of seconds on a CPU)."""
        loaded_heavy_libraries()  # the `tao` command exits at once when done (harness.shutdown.exits_at_once)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_gib))
        started = time.monotonic()
        with quiet_engine_start():
            llm = await _in_daemon_thread(_build_llm, settings)
        return cls(llm, settings, time.monotonic() - started)

    def render(self, request: LLMRequest) -> list[int]:
        """The prompt's token ids under the model's chat template."""
        messages = [plain_message(m) for m in request.messages]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def check_fits(self, prompt_tokens: int) -> int:
        """Output tokens still available; raises ContextTooLong when the prompt leaves no room."""
        room = self.max_model_len - prompt_tokens
        if room < 1:
            raise ContextTooLong(
                f"the prompt has {prompt_tokens} tokens but the model's context holds {self.max_model_len} "
                f"({1 - room} too many, counting one token to answer); the conversation must be shortened "
                "or the model served with a longer --max-model-len")
        return room

    def sampling_params(self, request: LLMRequest, room: int, ignore_eos: bool = False,
                        force_regex: bool = False) -> Any:
        """vLLM SamplingParams for one request: delta streaming, and the call constraint when asked.

        A forced answer goes by its own token ids; `force_regex` forces only its characters, as Tao did
        before (kept to measure the difference: `tao bench engine --forced`)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        extra: dict[str, Any] = {}
        max_tokens = request.max_tokens
        if request.force is not None and not force_regex and not self.forces_tokens:
            raise EngineError(f"request {request.request_id} forces a recorded answer by its token ids, but this "
                              f"engine drafts tokens ({self.settings.drafts}) and vLLM takes no logits processor "
                              "beside drafts; start the engine with --draft off to replay recorded answers")
        forced = self.forced_ids(request.force) if request.force is not None and not force_regex else None
        if forced is not None:
            extra, max_tokens = {"extra_args": {FORCE_KEY: forced}}, len(forced)
        elif request.force is not None:
            extra = {"structured_outputs": StructuredOutputsParams(regex=literal_regex(request.force))}
        elif self.settings.constrained and request.tools and not ignore_eos:
            extra = {"structured_outputs": StructuredOutputsParams(structural_tag=self._grammar(request.tools)),
                     "stop": STOP, "include_stop_str_in_output": True}
        temperature = 0.0 if request.force is not None else self.settings.temperature
        return SamplingParams(max_tokens=max(1, min(max_tokens, room)),
                              temperature=temperature, ignore_eos=ignore_eos,
                              output_kind=RequestOutputKind.DELTA, **extra)

    def forced_ids(self, text: str) -> list[int] | None:
        """The answer's natural token ids and the end-of-turn token, as the model would write it.

        None when the tokenizer does not give the text back exactly (then a regex forces the characters)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        eos = self.tokenizer.eos_token_id
        if eos is None or self.tokenizer.decode(ids) != text:
            return None
        return [*ids, eos]

    def _grammar(self, tools: list[dict[str, Any]]) -> str:
        key = json.dumps(tools, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = structural_tag_json(tools, self.settings.reasoning_tokens)
        return self._grammars[key]

    async def stream(self, request: LLMRequest, *, ignore_eos: bool = False,
                     force_regex: bool = False) -> AsyncGenerator[Chunk, None]:
        """Stream the answer; the last chunk carries usage and the finish reason (`abort` if aborted)."""
        from vllm.inputs.engine import tokens_input

        if self._llm is None or self._llm.errored:
            raise EngineDied("the vLLM engine is closed or its process is no longer running; start tao again")
        ids = self.render(request)
        if request.prompt_limit is not None:
            ids = ids[:max(1, request.prompt_limit)]
        params = self.sampling_params(request, self.check_fits(len(ids)), ignore_eos, force_regex)
        if self._aborted.pop(request.request_id, False) is None:  # aborted before it was submitted
            yield Chunk(usage=Usage(prompt_tokens=len(ids)), finish_reason="abort")
            return
        submitted = time.monotonic()
        first = last = None
        output_tokens = cached = 0
        finish: str | None = None
        outputs = self._llm.generate(tokens_input(ids), params, request.request_id, priority=request.priority)
        try:
            async with contextlib.aclosing(outputs):
                async for out in outputs:
                    completion = out.outputs[0]
                    if completion.token_ids:
                        last = time.monotonic()
                        first = first or last
                        output_tokens += len(completion.token_ids)
                    cached = out.num_cached_tokens or cached
                    if out.finished:
                        finish = completion.finish_reason
                    if completion.text:
                        yield Chunk(text=completion.text)
                    if request.request_id in self._aborted:
                        finish = "abort"
                        break
        except Exception as exc:  # vLLM's own exception types, mapped to Tao's
            raise _engine_error(exc, request.request_id) from exc
        finally:
            self._aborted.pop(request.request_id, None)
        usage = Usage(prompt_tokens=len(ids), cached_tokens=cached, output_tokens=output_tokens,
                      ttft=(first - submitted) if first else None,
                      decode_seconds=(last - first) if first and last else None)
        yield Chunk(usage=usage, finish_reason=finish or "abort")

    async def abort(self, request_id: str) -> None:
        """Stop the request in the engine; its stream ends with finish_reason `abort`."""
        self._aborted[request_id] = None
        while len(self._aborted) > ABORTED_KEPT:  # ids of requests that had already finished
            del self._aborted[next(iter(self._aborted))]
        if self._llm is not None and not self._llm.errored:
            await self._llm.abort(request_id)

    async def close(self) -> None:
        """Shut the engine core process down (once; later calls do nothing)."""
        llm, self._llm = self._llm, None
        if llm is None:
            return
        handler = getattr(llm, "output_handler", None)
        if handler is not None:  # stop reading outputs first, so the shutdown is not logged as a crash
            handler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handler
        await asyncio.to_thread(llm.shutdown, SHUTDOWN_GRACE)
        # AsyncLLM.__del__ shuts down again, possibly during interpreter exit where that fails noisily.
        llm.shutdown = lambda *args, **kwargs: None


async def _in_daemon_thread(function: Any, *args: Any) -> Any:
    """`function(*args)` in a daemon thread: a start that cannot be cancelled (importing vLLM, waiting on its
    processes) must not hold the process up when the user quits meanwhile, as an executor thread would."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = function(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="tao-vllm-start", daemon=True).start()
    return await future


def engine_args(settings: VLLMSettings, on_cpu: bool) -> dict[str, Any]:
    """vLLM's AsyncEngineArgs for these settings, as keywords: drafts and the forcing processor exclude each other."""
    if settings.drafts not in ("ngram", "off"):
        raise EngineUnavailable(f"unknown drafts {settings.drafts!r}; choose ngram or off")
    drafting = settings.drafts == "ngram"
    return dict(
        model=settings.model, tokenizer=settings.model, max_model_len=settings.max_model_len,
        enable_prefix_caching=True, scheduling_policy="priority", disable_log_stats=True,
        # On a CPU without native bf16, float32 runs several times faster; torch.compile costs minutes
        # at start and gained nothing measurable here, so CPUs run eager.
        dtype=("bfloat16" if cpu_has_bf16() else "float32") if on_cpu else "auto",
        enforce_eager=on_cpu,
        # forced answers take the recorded text's own tokens, on an engine that does not draft
        logits_processors=None if drafting else [PROCESSOR],
        speculative_config=dict(NGRAM) if drafting else None,
        use_tqdm_on_load=False,  # a progress bar for loading a model's shards, in the user's log
    )


def _build_llm(settings: VLLMSettings) -> Any:
    """Import vLLM and construct AsyncLLM (blocking; run in a thread)."""
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:
        raise EngineUnavailable(f"vLLM is not installed ({exc}); run `{INSTALL_VLLM}`") from None
    on_cpu = current_platform.is_cpu()
    asked = os.environ.get(START_METHOD)  # the user's own choice, before vLLM's config step sets it
    args = AsyncEngineArgs(**engine_args(settings, on_cpu))
    load = EngineLoad()
    # vLLM's CPU platform adds torch's libgomp and its tcmalloc to this process's LD_PRELOAD for its engine process,
    # from the config step on; the user's tests and commands must not run with them preloaded.
    with kept_environment("LD_PRELOAD", START_METHOD):
        try:  # the model's config first: only what fails here is about the model itself
            config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)
        except (OSError, ValueError) as exc:
            raise EngineUnavailable(f"vLLM could not load model {settings.model!r}; pass a local model directory "
                                    f"or a Hugging Face name that is cached or downloadable ({exc})") from None
        if settings.kv_tokens is not None:  # one block more: vLLM holds a null block back from every request
            config.cache_config.num_gpu_blocks_override = -(-settings.kv_tokens // config.cache_config.block_size) + 1
        try:
            if on_cpu and asked is None and not converted_in_this_process():
                _fork_engine_core()
            llm = AsyncLLM.from_vllm_config(config, stat_loggers=[_load_logger(load)], disable_log_stats=True)
        except (OSError, ValueError, RuntimeError) as exc:  # starting its processes, loading the weights
            raise EngineUnavailable(f"the vLLM engine failed to start for {settings.model!r}: "
                                    f"{type(exc).__name__}: {exc}") from None
    llm.tao_load = load
    return llm


def _fork_engine_core() -> None:
    """Have vLLM fork its engine core from this process, which has imported vLLM already, instead of spawning
    one that imports it again (about 11 s of a 2-core machine's 40 s start, twice that under load).

    vLLM's CPU platform asks for spawn because its model worker must read its OpenMP thread binding from the
    environment before torch loads: the engine core, once forked, spawns that worker as before. A fork is safe
    while this process has run no OpenMP parallel region (converting the model does; then the core spawns).
    VLLM_WORKER_MULTIPROC_METHOD set in the user's environment keeps vLLM's own way."""
    os.environ[START_METHOD] = "fork"
    _children_spawn_theirs()


@functools.cache
def _children_spawn_theirs() -> None:
    """A child forked from this process starts its own children by spawn (registered once per process)."""
    os.register_at_fork(after_in_child=lambda: os.environ.__setitem__(START_METHOD, "spawn"))


def _engine_error(exc: Exception, request_id: str) -> EngineError:
    """Tao's error for an exception out of vLLM's generate()."""
    if isinstance(exc, EngineError):
        return exc
    kind = type(exc).__name__
    message = str(exc)
    if "context length" in message or "max_model_len" in message:
        return ContextTooLong(f"vLLM refused request {request_id}: {message}")
    if kind == "EngineDeadError":
        return EngineDied(f"the vLLM engine process died during request {request_id}; the trajectory so far "
                          "is saved; start tao again (see the engine's log above for the cause)")
    if kind == "EngineGenerateError":
        return EngineDied(f"vLLM failed during request {request_id}: {exc.__cause__ or message}")
    return EngineError(f"vLLM rejected request {request_id}: {kind}: {message}")


def plain_message(message: dict[str, Any]) -> dict[str, str]:
    """A message a plain chat template renders: text content only, tool traffic spelled as text."""
    role = message.get("role", "user")
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if role == "tool":
        return {"role": "user", "content": f"<tool_result>\n{content}\n</tool_result>"}
    if role == "assistant" and isinstance(message.get("tool_calls"), list):
        calls = "".join(f"{OPEN}{_call_text(c)}{CLOSE}" for c in message["tool_calls"])
        content = "\n".join(part for part in (content, calls) if part)
    return {"role": role, "content": content}


def _call_text(call: Any) -> str:
    """A recorded native call in the text protocol's spelling; whatever was recorded, as it was, if it has none."""
    function = call.get("function") if isinstance(call, dict) else None
    function = function if isinstance(function, dict) else {}
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError, RecursionError):
            arguments = json.loads(arguments)
    try:
        return json.dumps({"name": function.get("name", ""), "arguments": arguments}, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return reprlib.repr(call)
