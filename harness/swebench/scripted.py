"""One shared engine that answers each instance from its own turn script (tests and benchmarks).

A batch shares one engine, so the plain replay engine (one recording, turns taken in order) cannot
serve it. This engine finds the instance from the task in the prompt's first user message and takes
the turn by the number of assistant messages so far. Without an inner engine it streams the turn
itself; with one (e.g. a real or simulated vLLM engine) it forces the inner engine to produce exactly
that text, so the engine's timing, batching and prefix cache are real while the answers are scripted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path

from harness.engine.api import Chunk, Engine, LLMRequest, Usage, for_session, rename_session
from harness.engine.recorded import Recording, load_recording, split_tokens
from harness.errors import ReplayExhausted, UsageError


class ScriptedEngine:
    """Routes each request to its instance's recording by task text."""

    native_tools = False

    def __init__(self, scripts: dict[str, Recording], tasks: dict[str, str], inner: Engine | None = None,
                 seconds_per_token: float = 0.0) -> None:
        """`scripts` maps instance ids to recordings, `tasks` maps task texts to instance ids."""
        self.scripts, self.tasks, self.inner = scripts, tasks, inner
        self.seconds_per_token = seconds_per_token
        self.name = f"scripted:{inner.name}" if inner is not None else "scripted"
        self.prefix_cache = inner.prefix_cache if inner is not None else False
        self._aborted: set[str] = set()

    @classmethod
    def from_dir(cls, folder: Path, tasks: dict[str, str], inner: Engine | None = None,
                 seconds_per_token: float = 0.0) -> ScriptedEngine:
        """Scripts from `folder/<instance_id>.json` (or .jsonl trajectories) for the ids in `tasks`."""
        if not folder.is_dir():
            raise UsageError(f"--replay {folder} must be a folder with one <instance_id>.json turn script per "
                             "instance for `tao swebench --engine replay`")
        scripts = {}
        for instance_id in tasks.values():
            for suffix in (".json", ".jsonl"):
                if (folder / f"{instance_id}{suffix}").is_file():
                    scripts[instance_id] = load_recording(folder / f"{instance_id}{suffix}")
                    break
        return cls(scripts, tasks, inner, seconds_per_token)

    def for_session(self, session_id: str, traffic: str) -> ScriptedEngine:
        """The engine as one session sees it: the same scripts over the inner engine's view of that session, so
        a gateway paces the session by its id and several replicas (harness.engine.replicas) pin it to one."""
        if self.inner is None:
            return self
        view = ScriptedEngine(self.scripts, self.tasks, for_session(self.inner, session_id, traffic),
                              self.seconds_per_token)
        view._aborted = self._aborted  # one set of aborted ids, whichever view saw the abort
        return view

    def rename(self, session_id: str) -> None:
        """A resumed session keeps its saved id: so does the inner engine's view."""
        if self.inner is not None:
            rename_session(self.inner, session_id)

    def turn_for(self, request: LLMRequest) -> str:
        """The scripted answer for this request: its instance's turn at this step."""
        task = next((str(m.get("content")) for m in request.messages if m.get("role") == "user"), "")
        instance_id = self.tasks.get(task)
        if instance_id is None or instance_id not in self.scripts:
            raise ReplayExhausted(f"no turn script for instance {instance_id or '(unknown task)'}; "
                                  f"add <instance_id>.json to the --replay folder")
        turns = self.scripts[instance_id].turns
        index = sum(1 for m in request.messages if m.get("role") == "assistant")
        if index >= len(turns):
            raise ReplayExhausted(f"the script of {instance_id} has {len(turns)} turns and all were replayed; "
                                  "the session asked for one more")
        return turns[index].text

    async def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        if request.max_tokens <= 1 and self.inner is not None:  # cache warming passes through unforced
            async for chunk in self.inner.stream(request):
                yield chunk
            return
        text = self.turn_for(request)
        if self.inner is not None:
            forced = replace(request, force=text, max_tokens=max(request.max_tokens, len(text) + 8))
            async for chunk in self.inner.stream(forced):
                yield chunk
            return
        pieces = split_tokens(text) or [""]
        for piece in pieces:
            if request.request_id in self._aborted:
                return
            if self.seconds_per_token:
                await asyncio.sleep(self.seconds_per_token)
            yield Chunk(text=piece)
        prompt_chars = sum(len(str(m.get("content") or "")) for m in request.messages)
        yield Chunk(usage=Usage(prompt_tokens=prompt_chars // 4, output_tokens=len(pieces)), finish_reason="stop")

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        if self.inner is not None:
            await self.inner.abort(request_id)

    async def close(self) -> None:
        if self.inner is not None:
            await self.inner.close()
