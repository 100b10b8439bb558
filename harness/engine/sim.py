"""A simulated vLLM engine for scale studies: continuous batching, prefix caching, priorities, preemption.

    engine = SimEngine(PROFILES["gpu"])         # or Profile.load("calibration.json")
    async for chunk in engine.stream(request):   # the Engine protocol; time passes in asyncio.sleep
        ...

It schedules the way vLLM's v1 scheduler does (vllm/v1/core/sched/scheduler.py): every step, running
requests first (a decode token each, or the next chunk of their prefill, within a token budget; when
the KV cache has no room, the running request with the largest (priority, arrival) is preempted and
recomputed later), then waiting requests in (priority, arrival) order while sequences, budget and KV
blocks allow, stopping at the first that does not fit. Prompts are cut into blocks whose hashes chain
over the text, so a prompt that repeats an earlier prompt plus its answer finds those blocks in the
cache while they have not been evicted; freed blocks stay cached and are evicted least recently used
first. One step lasts `StepModel.seconds(...)`, calibrated per machine (see PROFILES and
harness/bench/calibrate.py); sleeping that long per step makes the engine run in real time on a normal
event loop and in virtual time on harness.bench.vclock's loop.

Text is counted in characters (a prompt of n characters is n / chars_per_token tokens, a block is the
text's next block_size * chars_per_token characters), or, given a Tokenizer, in the model's own tokens
(a block is block_size token ids), which is what vLLM hashes. A request with `force` streams that text;
any other produces `max_tokens` tokens of filler (a cache-warming request asks for one). The KV blocks
(harness.engine.sim_kv) follow vLLM's v1 KV manager: a waiting request is admitted only when its whole
sequence fits (scheduler_reserve_full_isl), its full blocks are cached as they are computed (its answer's
too), a preempted request frees every block and looks the cache up again when it resumes, and free
blocks are reused least recently freed first.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import math
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.engine.api import Chunk, EngineLoad, LLMRequest, Usage
from harness.engine.sim_kv import BlockPool
from harness.errors import ContextTooLong

HASH_MASK = 2**62 - 1  # block hashes are non-negative (the pool keys empty blocks by negative numbers)


class Tokenizer(Protocol):
    """A model's token count, for a simulator that accounts KV blocks token for token as the real engine does."""

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt's token ids under the model's chat template."""
        ...

    def answer_ids(self, text: str) -> list[int]:
        """A forced answer's token ids, the end of turn included."""
        ...


@dataclass(frozen=True)
class StepModel:
    """Seconds one engine step takes, from what it computes."""

    base: float
    """Fixed cost of a step (weights read once, scheduler and sampling overhead)."""
    per_seq: float
    """Per decoding sequence (its token through the linear layers)."""
    per_token: float
    """Per prefill token (through the linear layers)."""
    per_decode_pair: float
    """Per (decoded token, context token) pair: reading the KV cache in attention."""
    per_prefill_pair: float
    """Per (prefill token, earlier token) pair: attention inside a prefill."""

    def seconds(self, decode_seqs: int, decode_context: int, prefill_tokens: int, prefill_pairs: int) -> float:
        """One step's duration."""
        return (self.base + self.per_seq * decode_seqs + self.per_token * prefill_tokens
                + self.per_decode_pair * decode_context + self.per_prefill_pair * prefill_pairs)

    def decode_rate(self, batch: int, context: int) -> float:
        """Output tokens a second with `batch` sequences decoding, each with `context` tokens of context."""
        return batch / self.seconds(batch, batch * context, 0, 0)

    def prefill_seconds(self, tokens: int, cached: int = 0) -> float:
        """Seconds to prefill `tokens` new tokens after `cached` ones, alone, in one step."""
        return self.seconds(0, 0, tokens, tokens * cached + tokens * tokens // 2)


@dataclass(frozen=True)
class Profile:
    """A simulated engine: its step model, KV cache and scheduler limits, and where they come from."""

    name: str
    step: StepModel
    kv_tokens: int
    """KV cache capacity in tokens (all sequences together)."""
    block_size: int = 16
    max_seqs: int = 256
    """vLLM's max_num_seqs."""
    max_batched_tokens: int = 8192
    """vLLM's max_num_batched_tokens: tokens computed in one step."""
    max_model_len: int = 32768
    chars_per_token: float = 3.36
    source: str = ""

    def knee(self, context: int, share: float = 0.8) -> int:
        """Sequences in flight at which decode reaches `share` of its peak rate, or the KV cache is full.

        The peak is the rate with every sequence of the KV cache decoding; past the knee, another
        sequence adds little throughput but slows every other one.
        """
        most = max(1, min(self.max_seqs, self.kv_tokens // max(1, context)))
        peak = self.step.decode_rate(most, context)
        for batch in range(1, most + 1):
            if self.step.decode_rate(batch, context) >= share * peak:
                return batch
        return most

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """A profile written by `tao bench calibrate` (JSON)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls.load_dict(data.get("profile", data))

    @classmethod
    def load_dict(cls, data: dict[str, Any]) -> Profile:
        """A profile from its `to_dict` form."""
        return cls(**{**data, "step": StepModel(**data["step"])})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# vLLM's CPU engine with the embedded model on a 2-core CPU without native bf16 (SmolLM2-135M, float32, eager,
# 2 GiB KV cache; vLLM's CPU defaults: 128-token blocks, 128 sequences, 2,048 tokens a step), fitted on 2026-12-01 by
#   flock /tmp/tao-bench.lock tao bench calibrate --out calibration.json        (defaults; 125 s)
# 12 decode points (batch 1 to 32 at 58 and 1,035 tokens of context; 0.065 to 0.354 s a step) and 4
# prefills (55, 57, 1,038 tokens cold, 46 after 1,024 cached; 0.27 to 4.8 s), fitted within 20% each
# (docs/BENCHMARKS.md, "Co-scheduling", has every point). The 2-core machine was shared while it ran.
CPU = Profile(
    name="cpu-smollm2-135m",
    step=StepModel(base=0.07179, per_seq=0.005846, per_token=0.003442, per_decode_pair=3.463e-06,
                   per_prefill_pair=2.899e-06),
    kv_tokens=46_592, block_size=128, max_seqs=128, max_batched_tokens=2048, max_model_len=8192,
    source="fitted to the vLLM CPU engine on a 2-core AMD EPYC without native bf16 (tao bench calibrate, 2026-12-01)")

# The same engine on a CPU with native bf16 (AVX512-BF16; vLLM then serves the model in bf16, which halves
# a token's KV, so the same 2 GiB hold twice the tokens), fitted on 2026-12-01 on an idle machine by
#   flock /tmp/tao-bench.lock tao bench calibrate --out calibration.json        (defaults; 58 s)
# the same 16 points, fitted within 12% each (0.025 to 0.080 s a decode step, 0.054 to 0.87 s a prefill).
CPU_BF16 = Profile(
    name="cpu-bf16-smollm2-135m",
    step=StepModel(base=0.02212, per_seq=0.001373, per_token=0.0005423, per_decode_pair=3.764e-07,
                   per_prefill_pair=5.849e-07),
    kv_tokens=93_184, block_size=128, max_seqs=128, max_batched_tokens=2048, max_model_len=8192,
    source="fitted to the vLLM CPU engine on a 2-core AMD EPYC with AVX512-BF16 (tao bench calibrate, 2026-12-01)")

# A GPU-class engine: Llama-3.1-8B in bf16 on one A100-80GB (SXM) under vLLM, derived from the hardware's
# datasheet figures and the model's shape with conservative efficiencies:
#   weights 16.1 GB read once a step at 75% of 2.04 TB/s            -> base 10.5 ms
#   2 x 8.03e9 FLOPs a token at 50% of 312 TFLOPS (bf16 dense)        -> 0.103 ms a token or sequence
#   KV 128 KiB a token (32 layers x 8 KV heads x 128 x 2 x 2 B) read at 75% of 2.04 TB/s -> 86 ns a pair
#   attention in a prefill, 4 x 4096 x 32 FLOPs a pair at 50%          -> 3.4 ns a pair
#   KV cache: 90% of 80 GB less 16 GB weights and ~4 GB activations = ~52 GB -> ~397k tokens
# Checked against a published vLLM sweep of the same model on the A100's smaller sibling (J. Musgrave,
# "vLLM throughput-latency sweep on NVIDIA A100", https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on:
# A100-40GB, 1.56 TB/s, vLLM 0.23.0, Llama-3.1-8B-Instruct bf16, 1,024 tokens in, 128 out): one request
# decodes at ~75 tokens/s (77% of the bandwidth ceiling) and 8 concurrent ones at 6.6x that. This model at
# that card's bandwidth gives 71 tokens/s, and 7.2x at 8 requests with 1,088 tokens of context.
GPU = Profile(
    name="gpu-a100-llama8b",
    step=StepModel(base=0.0105, per_seq=0.000103, per_token=0.000103, per_decode_pair=86e-9, per_prefill_pair=3.4e-9),
    kv_tokens=397_000, block_size=16, max_seqs=256, max_batched_tokens=8192, max_model_len=131072,
    chars_per_token=3.36,
    source="A100-80GB datasheet and Llama-3.1-8B's shape, checked against a published vLLM A100 sweep")

PROFILES = {"cpu": CPU, "cpu-bf16": CPU_BF16, "gpu": GPU}


class Phase(enum.IntEnum):
    """A simulated request's lifecycle, in order; `>= FINISHED` means it is over."""

    WAITING = 0
    RUNNING = 1
    FINISHED = 2
    ABORTED = 3


def render(messages: list[dict[str, Any]]) -> str:
    """The prompt text: each message as role and content, then the answer's opening."""
    parts = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        parts.append(f"<|{message.get('role', 'user')}|>\n{content}<|end|>\n")
    return "".join(parts) + "<|assistant|>\n"


@dataclass(eq=False)
class SimRequest:
    """One request inside the simulated engine."""

    request: LLMRequest
    text: str  # the prompt
    blocks: list[int]  # the chained hashes of the full blocks of the prompt and the whole answer
    pieces: list[str]  # the answer, token by token
    prompt_tokens: int
    arrival: float
    order: int
    phase: Phase = Phase.WAITING
    goal: int = 0  # tokens to compute before decoding (the prompt, plus earlier output after a preemption)
    computed: int = 0
    emitted: int = 0
    cached: int | None = None  # prompt tokens found in the cache at the first admission
    hashed: list[int] = field(default_factory=list)  # cached blocks it holds, in order
    private: int = 0  # blocks it holds that are not (yet) in the cache
    first: float | None = None
    last: float | None = None
    preemptions: int = 0
    queue: asyncio.Queue[Chunk] = field(default_factory=asyncio.Queue)

    @property
    def key(self) -> tuple[int, int]:
        return self.request.priority, self.order


@dataclass
class SimStats:
    """Engine-wide counts since the engine started."""

    steps: int = 0
    busy_seconds: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefill_tokens: int = 0  # tokens prefilled, recomputation after preemption included
    output_tokens: int = 0
    preemptions: int = 0
    evicted_blocks: int = 0
    aborted: int = 0


class SimEngine:
    """An Engine that simulates vLLM's scheduler and KV cache with a calibrated step time."""

    native_tools = False
    prefix_cache = True

    def __init__(self, profile: Profile = GPU, tokenizer: Tokenizer | None = None) -> None:
        self.profile = profile
        self.tokenizer = tokenizer
        self.name = f"sim:{profile.name}"
        self.max_model_len = profile.max_model_len
        self.stats = SimStats()
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self._requests: dict[str, SimRequest] = {}
        self.pool = BlockPool(profile.kv_tokens // profile.block_size)
        self._order = itertools.count()
        self._loop_task: asyncio.Task[None] | None = None
        self._chars = max(1, round(profile.block_size * profile.chars_per_token))  # characters a block

    # -- the Engine protocol -------------------------------------------------------------------------

    async def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        """Queue the request and stream its tokens as the simulated steps produce them."""
        req = self._admit_request(request)
        try:
            while True:
                chunk = await req.queue.get()
                yield chunk
                if chunk.finish_reason is not None:
                    return
        finally:
            if req.phase < Phase.FINISHED:  # the reader went away: abort, as vLLM does
                self._abort(req)

    async def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with finish_reason `abort`."""
        req = self._requests.get(request_id)
        if req is not None and req.phase < Phase.FINISHED:
            self._abort(req)

    async def close(self) -> None:
        for req in list(self._requests.values()):
            self._abort(req)
        if self._loop_task is not None:
            self._loop_task.cancel()

    def kv_usage(self) -> float:
        """Share of the KV cache held by running requests."""
        return self.pool.in_use() / self.pool.blocks

    def load(self) -> EngineLoad:
        """Requests running and waiting, and the KV cache in use, as vLLM's scheduler reports them."""
        return EngineLoad(len(self.running), len(self.waiting), self.kv_usage())

    # -- requests ------------------------------------------------------------------------------------

    def _admit_request(self, request: LLMRequest) -> SimRequest:
        text = render(request.messages)
        if request.prompt_limit is not None:  # a chunk of a warm prefill: the prompt's first tokens only
            text = text[:int(max(1, request.prompt_limit) * self.profile.chars_per_token)]
        if self.tokenizer is not None:
            ids = self.tokenizer.prompt_ids(request.messages)
            if request.prompt_limit is not None:
                ids = ids[:max(1, request.prompt_limit)]
            if request.force is not None:  # the answer's tokens, then the end of turn (no text)
                answer = self.tokenizer.answer_ids(request.force)
                pieces = (self._pieces(request.force, len(answer) - 1) if len(answer) > 1 else []) + [""]
            else:
                answer = [0] * max(1, request.max_tokens)
                pieces = ["x"] * len(answer)
            tokens, blocks = len(ids), self._token_hashes(ids + answer)
        else:
            pieces = self._pieces(request.force) if request.force is not None else ["x"] * max(1, request.max_tokens)
            tokens, blocks = self._tokens(text), self._hashes(text + "".join(pieces))
        if tokens >= self.max_model_len:
            raise ContextTooLong(f"the prompt has {tokens} tokens; the simulated context holds {self.max_model_len}")
        loop = asyncio.get_running_loop()
        req = SimRequest(request, text, blocks, pieces, tokens, loop.time(), next(self._order), goal=tokens)
        self._requests[request.request_id] = req
        self.waiting.append(req)
        self.stats.prompt_tokens += tokens
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run())
        return req

    def _tokens(self, text: str) -> int:
        return max(1, math.ceil(len(text) / self.profile.chars_per_token))

    def _pieces(self, text: str, count: int | None = None) -> list[str]:
        """The answer cut into `count` token-sized pieces (by default as many as the text counts tokens)."""
        count = max(1, count if count is not None else self._tokens(text) if text else 1)
        bounds = [round(i * len(text) / count) for i in range(count + 1)]
        return [text[bounds[i]:bounds[i + 1]] for i in range(count)]

    def _hashes(self, text: str) -> list[int]:
        """Chained hashes of the full blocks of `text`, a block being a block's worth of characters."""
        out, previous = [], 0
        for index in range(len(text) // self._chars):
            previous = hash((previous, text[index * self._chars:(index + 1) * self._chars])) & HASH_MASK
            out.append(previous)
        return out

    def _token_hashes(self, ids: list[int]) -> list[int]:
        """Chained hashes of the full blocks of these token ids, as vLLM hashes blocks."""
        out, previous, size = [], 0, self.profile.block_size
        for index in range(len(ids) // size):
            previous = hash((previous, tuple(ids[index * size:(index + 1) * size]))) & HASH_MASK
            out.append(previous)
        return out

    # -- the step loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        """Step while there is work; each step sleeps its simulated duration."""
        while self.running or self.waiting:
            plan = self._schedule()
            if not plan:
                if not self.running:
                    self._fail_unschedulable()
                continue
            seconds = self._seconds(plan)
            self.stats.steps += 1
            self.stats.busy_seconds += seconds
            await asyncio.sleep(seconds)
            self._advance(plan)
            self.stats.evicted_blocks = self.pool.evicted

    def _schedule(self) -> list[tuple[SimRequest, int]]:
        """This step's requests and how many tokens each computes (vLLM v1's order; see the docstring)."""
        budget = self.profile.max_batched_tokens
        plan: list[tuple[SimRequest, int]] = []
        preempted = False
        for req in list(self.running):
            if budget <= 0:
                break
            if req.phase is not Phase.RUNNING:
                continue  # preempted earlier in this loop
            tokens = 1 if req.computed >= req.goal else min(req.goal - req.computed, budget)
            while not self._allocate(req, self._blocks_for(req, tokens)):
                victim = max(self.running, key=lambda r: r.key)
                self._preempt(victim)
                preempted = True
                budget += sum(n for r, n in plan if r is victim)
                plan = [(r, n) for r, n in plan if r is not victim]
                if victim is req:
                    break
            else:
                plan.append((req, tokens))
                budget -= tokens
        if preempted:
            return plan
        for req in sorted(self.waiting, key=lambda r: r.key):
            if budget <= 0 or len(self.running) >= self.profile.max_seqs:
                break
            hits = self._lookup(req)
            cached_tokens = min(len(hits) * self.profile.block_size, req.goal - 1)
            tokens = min(req.goal - cached_tokens, budget)
            if not self._take(req, hits, cached_tokens, tokens):
                break
            plan.append((req, tokens))
            budget -= tokens
        return plan

    def _seconds(self, plan: list[tuple[SimRequest, int]]) -> float:
        decode = [(req, n) for req, n in plan if req.computed >= req.goal]
        prefill = [(req, n) for req, n in plan if req.computed < req.goal]
        return self.profile.step.seconds(
            len(decode), sum(req.computed for req, _ in decode), sum(n for _, n in prefill),
            sum(n * req.computed + n * n // 2 for req, n in prefill))

    def _advance(self, plan: list[tuple[SimRequest, int]]) -> None:
        """Apply a finished step: computed tokens, newly cached full blocks, one token for each decode."""
        now = asyncio.get_running_loop().time()
        for req, tokens in plan:
            if req.phase is not Phase.RUNNING:
                continue  # aborted or preempted while the step ran
            if req.computed < req.goal:
                self.stats.prefill_tokens += tokens
            req.computed += tokens
            self._cache_blocks(req)
            if req.computed >= req.goal:
                self._emit(req, now)

    def _emit(self, req: SimRequest, now: float) -> None:
        piece = req.pieces[req.emitted]
        req.emitted += 1
        req.first = req.first if req.first is not None else now
        req.last = now
        self.stats.output_tokens += 1
        if req.emitted < len(req.pieces):
            req.queue.put_nowait(Chunk(text=piece))
            return
        reason = "stop" if req.request.force is not None else "length"
        self._release(req, Phase.FINISHED)
        req.queue.put_nowait(Chunk(text=piece))
        req.queue.put_nowait(Chunk(usage=self._usage(req), finish_reason=reason))

    def _usage(self, req: SimRequest) -> Usage:
        ttft = req.first - req.arrival if req.first is not None else None
        decode = req.last - req.first if req.first is not None and req.last is not None else None
        return Usage(prompt_tokens=req.prompt_tokens, cached_tokens=req.cached or 0, output_tokens=req.emitted,
                     ttft=ttft, decode_seconds=decode)

    def _fail_unschedulable(self) -> None:
        """Nothing could run: a waiting prompt larger than the whole KV cache. Fail it, as vLLM refuses it."""
        req = min(self.waiting, key=lambda r: r.key)
        self._release(req, Phase.ABORTED)
        req.queue.put_nowait(Chunk(usage=self._usage(req), finish_reason="abort"))

    # -- the KV cache --------------------------------------------------------------------------------

    def _blocks_for(self, req: SimRequest, tokens: int) -> int:
        """New blocks a running request needs to compute `tokens` more."""
        held = len(req.hashed) + req.private
        return max(0, math.ceil((req.computed + tokens) / self.profile.block_size) - held)

    def _allocate(self, req: SimRequest, blocks: int) -> bool:
        """Take `blocks` more private blocks for a running request; False if the pool has no room."""
        if not self.pool.allocate(blocks):
            return False
        req.private += blocks
        return True

    def _lookup(self, req: SimRequest) -> list[int]:
        """The leading blocks of the request's sequence so far already in the cache (never its last token)."""
        return self.pool.lookup(req.blocks[: (req.goal - 1) // self.profile.block_size])

    def _take(self, req: SimRequest, hits: list[int], cached_tokens: int, tokens: int) -> bool:
        """Move a waiting request to running, holding its cached prefix, if its whole sequence fits in the free
        blocks (the cached ones it would take out of the free queue counted); False if not."""
        size = self.profile.block_size
        whole = math.ceil(req.goal / size) - len(hits) + self.pool.evictable(hits)
        if whole > len(self.pool.free):
            return False
        self.pool.hold(hits)  # first, so that making room cannot evict them
        needed = math.ceil((cached_tokens + tokens) / size) - len(hits)
        allocated = self.pool.allocate(needed)
        assert allocated, "the whole sequence fits in the free blocks, so its first ones do"
        req.hashed, req.computed, req.phase = list(hits), cached_tokens, Phase.RUNNING
        req.private = needed
        if req.cached is None:
            req.cached = cached_tokens
            self.stats.cached_tokens += cached_tokens
        self.waiting.remove(req)
        self.running.append(req)
        return True

    def _cache_blocks(self, req: SimRequest) -> None:
        """The request's computed full blocks (prompt and answer alike) become cached, shareable blocks."""
        full = min(req.computed // self.profile.block_size, len(req.blocks), len(req.hashed) + req.private)
        if full > len(req.hashed):
            fresh = req.blocks[len(req.hashed):full]
            self.pool.cache(fresh)
            req.hashed.extend(fresh)
            req.private -= len(fresh)

    def _release(self, req: SimRequest, phase: Phase) -> None:
        """Give back a request's blocks, tail first; its full blocks stay cached until evicted."""
        if req.phase is Phase.RUNNING:
            self.pool.release(req.hashed, req.private)
            self.running.remove(req)
        elif req.phase is Phase.WAITING:
            self.waiting.remove(req)
        req.hashed, req.private, req.phase = [], 0, phase
        self._requests.pop(req.request.request_id, None)

    def _preempt(self, req: SimRequest) -> None:
        """Free a running request's blocks and queue it again; it recomputes prompt and answer so far."""
        self._release(req, Phase.WAITING)
        self._requests[req.request.request_id] = req
        req.goal, req.computed = req.prompt_tokens + req.emitted, 0
        req.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.append(req)

    def _abort(self, req: SimRequest) -> None:
        self._release(req, Phase.ABORTED)
        self.stats.aborted += 1
        req.queue.put_nowait(Chunk(usage=self._usage(req), finish_reason="abort"))
