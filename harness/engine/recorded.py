"""An engine that replays recorded assistant turns, streamed at a configurable time per output token.

Sessions, tests and benchmarks use it to run a recorded trajectory against real tools: the model's
answers are fixed, everything else (tool runs, workspace, events) is real.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.engine.api import Chunk, Engine, LLMRequest, Usage
from harness.errors import ContextTooLong, ReplayExhausted, UsageError
from harness.events import EventDecodeError, LLMEnd, SessionStart, read_trajectory

# Roughly one token per short word piece, as BPE tokenizers split English and code.
_TOKEN = re.compile(r"\s*[A-Za-z]{1,6}|\s*\d{1,3}|\s*[^\sA-Za-z\d]|\s+")


def split_tokens(text: str) -> list[str]:
    """Split text into token-sized pieces whose concatenation is the text."""
    return _TOKEN.findall(text)


@dataclass(frozen=True)
class Turn:
    """One recorded assistant answer."""

    text: str
    tool_calls: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Recording:
    """Recorded turns and, when the source says, the task they answered."""

    turns: list[Turn]
    task: str | None = None


def load_recording(path: str | Path) -> Recording:
    """Read turns from a Tao trajectory (.jsonl: its llm_end events) or a JSON script.

    A JSON script is `{"task": "...", "turns": ["text", {"text": "...", "tool_calls": [...]}, ...]}`
    or just the list of turns.
    """
    source = Path(path)
    if not source.is_file():
        raise UsageError(f"replay file {source} does not exist; pass a trajectory .jsonl or a JSON turn script")
    if source.suffix == ".jsonl":
        try:
            events = read_trajectory(source)
        except EventDecodeError as exc:
            raise UsageError(f"replay file {exc}") from None
        start = next((e for e in events if isinstance(e, SessionStart)), None)
        turns = [_turn(source, index, {"text": e.text, "tool_calls": e.tool_calls})
                 for index, e in enumerate(e for e in events if isinstance(e, LLMEnd))]
        task = start.task if start else None
    else:
        turns, task = _script(source)
    if not turns:
        raise UsageError(f"replay file {source} holds no assistant turns to replay")
    return Recording(turns, task)


def _script(source: Path) -> tuple[list[Turn], str | None]:
    """The turns and task of a JSON turn script; UsageError says what in it is not as described."""
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"replay file {source} cannot be read as UTF-8 text: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"replay file {source} is not valid JSON: {str(exc)[:200]}") from None
    items = data.get("turns", []) if isinstance(data, dict) else data
    task = data.get("task") if isinstance(data, dict) else None
    if not isinstance(items, list) or not isinstance(task, (str, type(None))):
        raise UsageError(f'replay file {source} must be a list of turns or {{"task": "...", "turns": [...]}}')
    return [_turn(source, index, item) for index, item in enumerate(items)], task


def _turn(source: Path, index: int, item: Any) -> Turn:
    """One recorded turn: a text, or {"text", "tool_calls"} with a list of native calls."""
    if isinstance(item, str):
        return Turn(item)
    text = item.get("text", "") if isinstance(item, dict) else None
    calls = item.get("tool_calls") if isinstance(item, dict) else None
    if not isinstance(text, str) or not isinstance(calls, (list, type(None))):
        raise UsageError(f'replay file {source}: turn {index + 1} is not a text or {{"text": "...", "tool_calls": '
                         "[...]}}")
    return Turn(text, calls)


PAST_THE_RECORDING = ("A replayed session cannot go past its recording: to go on with a model that answers, resume "
                      "its trajectory without --replay (`tao --resume FILE` on the embedded model, or with "
                      "--engine openai --base-url URL).")


class ReplayEngine:
    """Answers each request with the next recorded turn, one token-sized piece at a time.

    With `max_model_len` it has a context window, as a real engine does: a prompt of that many tokens (four
    characters each) is refused with ContextTooLong, and the turn stays for the next request."""

    def __init__(self, recording: Recording, seconds_per_token: float = 0.0, name: str = "replay",
                 max_model_len: int | None = None) -> None:
        self.recording = recording
        self.max_model_len = max_model_len
        self.seconds_per_token = seconds_per_token
        self.name = name
        self.native_tools = any(turn.tool_calls for turn in recording.turns)
        self.prefix_cache = False  # every request takes the next recorded turn; there is nothing to warm
        self._next = 0
        self._aborted: set[str] = set()

    async def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        if self._next >= len(self.recording.turns):
            raise ReplayExhausted(
                f"the recording has {len(self.recording.turns)} turns and all were replayed; "
                f"the session asked for one more. {PAST_THE_RECORDING}"
            )
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in request.messages) // 4
        if self.max_model_len is not None and prompt_tokens >= self.max_model_len:
            raise ContextTooLong(f"the prompt has {prompt_tokens} tokens but the replayed context holds "
                                 f"{self.max_model_len}")
        turn = self.recording.turns[self._next]
        self._next += 1
        start = time.monotonic()
        pieces = split_tokens(turn.text) or [""]
        first: float | None = None
        for piece in pieces:
            if request.request_id in self._aborted:
                return
            if self.seconds_per_token:
                await asyncio.sleep(self.seconds_per_token)
            if first is None:
                first = time.monotonic()
            yield Chunk(text=piece)
        decode = time.monotonic() - (first or start) if self.seconds_per_token else None  # unpaced: no time to tell
        usage = Usage(prompt_tokens=prompt_tokens, output_tokens=len(pieces),
                      ttft=(first or start) - start, decode_seconds=decode)
        yield Chunk(tool_calls=turn.tool_calls, usage=usage, finish_reason="stop")

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)

    async def close(self) -> None:
        return None


class ForcedReplayEngine:
    """Replays recorded turns through a real engine, forcing each answer to the recorded text.

    The engine's timing and prefix cache are real while the conversation is the recorded one. The turn
    is chosen by the number of assistant messages in the prompt, so a provisional request and the real
    one for the same step get the same turn. One-token requests (cache warming) pass through unforced.
    """

    native_tools = False

    def __init__(self, inner: Engine, recording: Recording) -> None:
        self.inner = inner
        self.recording = recording
        self.name = f"forced:{inner.name}"
        self.prefix_cache = inner.prefix_cache

    @property
    def max_model_len(self) -> int | None:
        """The real engine's context window (the context gauge and compaction go by it)."""
        return getattr(self.inner, "max_model_len", None)

    async def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        if request.max_tokens > 1:
            index = sum(1 for message in request.messages if message.get("role") == "assistant")
            if index >= len(self.recording.turns):
                raise ReplayExhausted(f"the recording has {len(self.recording.turns)} turns; step {index + 1} has "
                                      f"none. {PAST_THE_RECORDING}")
            text = self.recording.turns[index].text
            request = replace(request, force=text, max_tokens=max(request.max_tokens, len(text) + 8))
        async for chunk in self.inner.stream(request):
            yield chunk

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    async def close(self) -> None:
        await self.inner.close()
