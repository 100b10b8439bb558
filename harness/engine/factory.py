"""Build the engine a command asked for from its command-line options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.engine.base import Engine
from harness.errors import UsageError

ENGINES = ("vllm", "openai", "replay")


@dataclass(frozen=True)
class EngineOptions:
    """Which engine to use and how; filled from `tao run`'s flags."""

    kind: str = "vllm"
    """vllm (in-process, the embedded model unless --model), openai (a running server) or replay."""
    replay: Path | None = None
    """The trajectory or turn script the replay engine plays back."""
    seconds_per_token: float = 0.0
    """Replay pacing: simulated time per output token."""
    model: str | None = None
    """Model name or directory; None means the embedded default model."""
    base_url: str | None = None
    """URL of an OpenAI-compatible server, for the openai engine."""
    constrained: bool = True
    """Constrain decoding so every turn is a well-formed call (for small models)."""


async def open_engine(options: EngineOptions) -> Engine:
    """Start or connect to the engine; raises UsageError or EngineUnavailable with what to do."""
    if options.kind == "replay":
        from harness.engine.replay import ReplayEngine, load_recording

        if options.replay is None:
            raise UsageError("--engine replay needs --replay FILE (a trajectory .jsonl or a JSON turn script)")
        return ReplayEngine(load_recording(options.replay), options.seconds_per_token,
                            name=f"replay:{options.replay.name}")
    raise UsageError(f"unknown engine {options.kind!r}; choose one of {', '.join(ENGINES)}")
