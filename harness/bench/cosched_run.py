"""Running many recorded sessions at once against one engine through the co-scheduler.

Each session is one of examples/sessions, its task tagged so that no two sessions share a prefix
beyond the system prompt. The model's answers are the recorded ones, forced through the engine
(ForcedReplayEngine); the tools are simulated from the session's book (harness.bench.simtools), so
they take their recorded time and return their recorded output. The modes:

- `fcfs`: no speculation, every request straight to the engine (plain vLLM);
- `spec`: Tao's speculation (tool speculation and KV pre-warming), no pacing;
- `cap`: no speculation, FCFS with at most C sessions in flight (harness.cosched_policies.Cap, a batch
  run's `--workers C`), run once per C of a sweep (`cap-16`, `cap-24`, ...);
- `las`: no speculation, least attained service first (harness.cosched_policies.LAS, Autellix-like);
- `ttl`: no speculation, Continuum-like retention (harness.cosched_policies.TTL);
- `tao`: no speculation, requests paced by the co-scheduler (harness.coscheduler.Pacing);
- `tao+spec`: Tao's speculation and the co-scheduler's pacing.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import protocol
from harness.bench import recordings as recorded
from harness.bench.simtools import Book, record_book, sim_tools
from harness.bench.trace_workload import trace_workload
from harness.cosched_policies import LAS, TTL, Cap
from harness.coscheduler import FCFS, KNEE_SHARE, KV_SHARE, CoScheduler, Pacing, Policy
from harness.engine.api import Engine, LLMRequest
from harness.engine.recorded import ForcedReplayEngine
from harness.engine.sim import Profile
from harness.errors import UsageError
from harness.events import Event, LLMEnd, SpecObsSettle, SpecSummary
from harness.launch import SessionOptions, open_session
from harness.session import SessionConfig
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from sandbox import Workspace
from tools import tool_specs

MODES = ("fcfs", "spec", "cap", "las", "ttl", "tao", "tao+spec")
DEFAULT_MODES = ("fcfs", "cap", "las", "ttl", "tao", "tao+spec")  # the issue's: plain vLLM, the rivals, Tao
SPECULATING = ("spec", "tao+spec")
RIVALS = ("cap", "las", "ttl")  # the strongest schedulers without Tao's pacing, Tao's ratio is to their best
CAPS = (16, 24, 32, 48)  # the sessions-in-flight limits `cap` sweeps by default
WAIT_TURNS = 8  # bounded wait: a started session's request goes first after this many typical turns (at the knee)
SPEC_SHARE = 0.25  # speculative prefills start only while fewer than this share of the knee are in flight


@dataclass(frozen=True)
class Workload:
    """The recorded sessions, their books, and the pattern model the speculating modes use."""

    sessions: list[recorded.LiveSession]
    books: list[Book]
    model: PatternModel | None

    def mean_steps(self) -> int:
        """Model turns of a session, on average."""
        return round(sum(len(s.recording.turns) for s in self.sessions) / len(self.sessions))

    def context_chars(self) -> float:
        """Characters of a prompt, on average over every step of every session (the system prompt included)."""
        sizes = [size for session in self.prompt_sizes() for size in session]
        return sum(sizes) / len(sizes)

    def too_long(self, profile: Profile) -> list[str]:
        """Sessions whose last prompt and answer exceed the engine's context window."""
        limit = profile.max_model_len * profile.chars_per_token
        return [session.name for session, sizes in zip(self.sessions, self.prompt_sizes())
                if sizes[-1] + len(session.recording.turns[-1].text) > limit]

    def context_tokens(self, profile: Profile) -> tuple[int, int]:
        """Tokens of a step's context by the profile's characters a token: the mean prompt, and the largest
        prompt with its answer (a session's most in the KV cache)."""
        sizes = self.prompt_sizes()
        largest = max(s[-1] + len(session.recording.turns[-1].text) for session, s in zip(self.sessions, sizes))
        return round(self.context_chars() / profile.chars_per_token), round(largest / profile.chars_per_token)

    def prompt_sizes(self) -> list[list[int]]:
        """Characters of each step's prompt, session by session."""
        system = len(protocol.render_system_prompt(tool_specs(sim_tools(self.books[0])), "/repo", False))
        out = []
        for session, book in zip(self.sessions, self.books):
            size, sizes = system + len(session.recording.task or ""), []
            for turn, call in zip(session.recording.turns, [*book.calls, None]):
                sizes.append(size)
                size += len(turn.text) + (len(call.output) if call is not None else 0) + 40
            out.append(sizes)
        return out

    def turn_seconds(self, profile: Profile, batch: int) -> float:
        """A typical turn's engine time with `batch` sequences decoding: its new tokens, then its answer."""
        context = int(self.context_chars() / profile.chars_per_token)
        turns = [t for s in self.sessions for t in s.recording.turns]
        answer = sum(len(t.text) for t in turns) / len(turns) / profile.chars_per_token
        new = sum(len(c.output) for b in self.books for c in b.calls) / len(turns) / profile.chars_per_token
        step = profile.step.seconds(batch, batch * context, 0, 0)
        return profile.step.prefill_seconds(int(new), context) + answer * step


async def load_workload(only: list[str] | None, model: Path | None, cache: Path, traces: Path | None = None,
                        holdout: float | None = None) -> Workload:
    """The sessions of examples/sessions and their books (recorded with the real tools on first use), or
    other agents' trajectories under `traces` (their held-out split with `holdout`; harness.bench.trace_workload)."""
    from harness.bench.live_parts import bench_environment

    if traces is not None:
        sessions, books = trace_workload(traces, holdout)
        if only:
            missing = sorted(set(only) - {s.name for s in sessions})
            if missing:
                split = " in the held-out split" if holdout is not None else ""
                raise UsageError(f"--only: no trajectory named {', '.join(missing)} under {traces}{split} "
                                 f"(a trajectory's name is its instance id)")
            keep = [i for i, s in enumerate(sessions) if s.name in only]
            sessions, books = [sessions[i] for i in keep], [books[i] for i in keep]
        return Workload(sessions, books, PatternModel.load(model) if model is not None else None)
    selected = recorded.load_sessions(recorded.SESSIONS_DIR, only)
    bench_environment()  # the real tools run as `tao bench live` runs them, should a book be recorded
    books = [await record_book(session, cache) for session in selected]
    return Workload(selected, books, PatternModel.load(model) if model is not None else None)


def pacing_for(profile: Profile, workload: Workload) -> Pacing:
    """The co-scheduler's policy for an engine of this profile and this workload."""
    context = int(workload.context_chars() / profile.chars_per_token)
    knee = profile.knee(context, KNEE_SHARE)
    step = profile.step  # a step of `a + b * batch` seconds at the workload's mean context: batch_cost = a / b
    batch_cost = step.base / (step.per_seq + step.per_decode_pair * context)
    return Pacing(knee=knee, kv_tokens=profile.kv_tokens, max_wait=WAIT_TURNS * workload.turn_seconds(profile, knee),
                  expected_steps=workload.mean_steps(), spec_room=max(1, round(knee * SPEC_SHARE)),
                  batch_cost=round(batch_cost, 3), retain=KV_SHARE)


def reload_per_token(profile: Profile, workload: Workload) -> float:
    """Seconds a token of the workload's mean context takes to prefill again once dropped from the cache."""
    context = max(1, int(workload.context_chars() / profile.chars_per_token))
    return profile.step.prefill_seconds(context) / context


def variants(wanted: tuple[str, ...], caps: tuple[int, ...]) -> list[str]:
    """The runs of a level, in MODES order: each wanted mode, `cap` once per limit (`cap-16`, ...)."""
    return [v for mode in MODES if mode in wanted for v in ([f"cap-{c}" for c in caps] if mode == "cap" else [mode])]


def policy_for(variant: str, pacing: Pacing, reload: float) -> Policy:
    """The co-scheduler's policy for one run (a mode, or `cap-C`), with the workload's pacing and reload cost."""
    if variant.startswith("cap-"):
        return Cap(int(variant.removeprefix("cap-")))
    if variant == "las":
        return LAS()
    if variant == "ttl":
        return TTL(pacing.kv_tokens, reload)
    return pacing if variant in ("tao", "tao+spec") else FCFS()


async def run_group(engine: Engine, workload: Workload, members: list[int], mode: str, policy: Policy,
                    tag: str, root: Path) -> dict[str, Any]:
    """Run these sessions (indices into the workload) together in one mode (speculating in SPECULATING) and
    policy; their times and the scheduler's log.

    `root` is the (empty) workspace every session works in: the same path, so the same system prompt.
    """
    cosched = CoScheduler(engine, policy)
    started = asyncio.get_running_loop().time()
    runs = await asyncio.gather(*(_one(cosched, workload, index, n, mode, root, tag, started)
                                  for n, index in enumerate(members)))
    actions: dict[str, int] = {}
    for record in cosched.records:
        key = f"{record.action}_{'spec' if record.speculative else 'auth'}"
        actions[key] = actions.get(key, 0) + 1
    waits = _queue_waits(cosched)
    for run in runs:
        run["queue_wait"] = round(waits.get(run["id"], 0.0), 4)
    return {"sessions": runs, "cosched": actions}


async def _one(cosched: CoScheduler, workload: Workload, index: int, n: int, mode: str, root: Path, tag: str,
               started: float) -> dict[str, Any]:
    """One session of a group, from the group's start to its end."""
    session_id = f"{tag}-{n}"
    try:
        return await run_session(cosched.engine_for(session_id), workload, index, session_id, mode, root, started)
    finally:
        cosched.session_ended(session_id)  # a worker's slot frees (Cap)


async def run_session(through: Engine, workload: Workload, index: int, session_id: str, mode: str, root: Path,
                      started: float) -> dict[str, Any]:
    """Workload session `index` through this engine (its answers forced), from `started` to its end: its time,
    steps, engine time, prompt and cached tokens and speculation counts."""
    session, book = workload.sessions[index], workload.books[index]
    events: list[Event] = []
    engine = ForcedReplayEngine(through, session.recording)
    analyzer = Analyzer(workload.model or PatternModel()) if mode in SPECULATING else None
    workspace = Workspace(root, watch="stat")
    task = f"[{session_id}] {session.recording.task or ''}"
    config = SessionConfig(max_steps=len(session.recording.turns) + 1, max_seconds=1e7)
    loop = open_session(SessionOptions(config=config), task, engine, workspace, [events.append], tools=sim_tools(book),
                        analyzer=analyzer)
    try:
        end = await loop.run()
    finally:
        workspace.close()
    llm = [e for e in events if isinstance(e, LLMEnd)]
    summary = next((e for e in events if isinstance(e, SpecSummary)), None)
    settles = [e for e in events if isinstance(e, SpecObsSettle)]
    return {"id": session_id, "session": session.name, "seconds": round(asyncio.get_running_loop().time() - started, 4),
            "status": end.status, "steps": end.steps,
            "engine_seconds": round(sum((e.ttft or 0) + (e.decode_seconds or 0) for e in llm), 4),
            "prompt_tokens": sum(e.prompt_tokens for e in llm), "cached_tokens": sum(e.cached_tokens for e in llm),
            "promoted": (summary.promoted + summary.repeats) if summary else 0,
            "warm_matched": sum(e.matched for e in settles), "warm_settled": len(settles),
            "tool_seconds": round(book.tool_seconds(), 4)}


def _queue_waits(cosched: CoScheduler) -> dict[str, float]:
    """Seconds each session's authoritative requests waited in the co-scheduler for admission."""
    arrived: dict[str, float] = {}
    waits: dict[str, float] = {}
    for record in cosched.records:
        if record.speculative:
            continue
        if record.action == "arrive":
            arrived[record.request_id] = record.t
        elif record.action == "admit" and record.request_id in arrived:
            waits[record.session_id] = waits.get(record.session_id, 0.0) + record.t - arrived.pop(record.request_id)
    return waits


def groups(level: int, workload: Workload, most: int) -> list[list[int]]:
    """The runs of one level: groups of `level` sessions, round robin over the workload, enough to cover it once."""
    count = max(1, min(most, math.ceil(len(workload.sessions) / level)))
    return [[(g * level + i) % len(workload.sessions) for i in range(level)] for g in range(count)]


async def warm_system_prompt(engine: Engine, workload: Workload, root: Path) -> None:
    """Put the shared system prompt in the engine's prefix cache, so no mode pays its first prefill alone."""
    system = protocol.render_system_prompt(tool_specs(sim_tools(workload.books[0])), str(root), engine.native_tools)
    request = LLMRequest("cosched-warmup", [{"role": "system", "content": system},
                                            {"role": "user", "content": "Say OK."}], max_tokens=1)
    async for _ in engine.stream(request):
        pass
