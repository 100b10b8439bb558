"""Shared fixtures. Engine tests (`@pytest.mark.engine`) share one real vLLM engine with the embedded model,
started once per test session (converting the model into ~/.cache/tao on a fresh machine first)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture
def greedy(vllm_engine: object) -> Iterator[object]:
    """The shared engine decoding greedily for one test: the small model's sampled answers vary from run to run
    (one in three ran a string argument past a 192-token budget), its greedy ones do not. For tests that let the
    model answer freely yet assert on the answer's shape (a complete call within the budget)."""
    sampled = vllm_engine.settings  # type: ignore[attr-defined]
    vllm_engine.settings = dataclasses.replace(sampled, temperature=0.0)  # type: ignore[attr-defined]
    yield vllm_engine
    vllm_engine.settings = sampled  # type: ignore[attr-defined]
