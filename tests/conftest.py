"""Shared fixtures. Engine tests (`@pytest.mark.engine`) share one real vLLM engine with the embedded model,
started once per test session (converting the model into ~/.cache/tao on a fresh machine first)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    """The embedded model's HF directory, converted once if missing."""
    from harness.engine.embedded_model import ensure_embedded

    return ensure_embedded()


@pytest.fixture(scope="session")
async def vllm_engine(embedded_model: Path) -> AsyncIterator[object]:
    """One in-process vLLM engine for the whole test session (never a running `tao serve`)."""
    from harness.engine.factory import EngineOptions, start_local

    engine = await start_local(EngineOptions(attach=False, drafts="off"))  # tests force answers by their token ids
    yield engine
    await engine.close()
