"""`tao bench calibrate`'s prompts, checked with the embedded model's tokenizer and no engine."""

from __future__ import annotations

from typing import Any

import pytest

from harness.bench.calibrate import decode_requests, own_prefixes
from harness.engine.api import LLMRequest
from harness.errors import EngineUnavailable

BLOCK = 128  # the CPU engine's KV block size (its calibrations' block_size)


class TokenizerOnly:
    """What the prompt builders use of the engine (render, tokenizer), from the embedded model's tokenizer."""

    def __init__(self) -> None:
        from harness.bench.sim_tokens import embedded_chat_tokens

        try:
            self.chat = embedded_chat_tokens()
        except (EngineUnavailable, OSError) as exc:
            pytest.skip(f"the embedded model is not installed: {exc}")
        self.tokenizer: Any = self.chat.tokenizer

    def render(self, request: LLMRequest) -> list[int]:
        """The prompt's token ids, as the engine renders them."""
        return self.chat.prompt_ids(request.messages)


def block_hashes(ids: list[int]) -> list[int]:
    """Each full block's hash chained over the blocks before it, as vLLM's prefix cache keys blocks."""
    hashes, previous = [], 0
    for start in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
        previous = hash((previous, tuple(ids[start:start + BLOCK])))
        hashes.append(previous)
    return hashes


def test_the_sequences_of_a_decode_batch_share_no_kv_block() -> None:
    """Each sequence reads a context of its own, as the workload's sessions do, not one shared prefix."""
    engine = TokenizerOnly()
    prefixes = own_prefixes(engine, 4, 1_000)
    prompts = [engine.render(r) for r in decode_requests(engine, prefixes, 8, forced=True)]
    assert all(900 <= len(p) <= 1_100 for p in prompts)
    seen: set[int] = set()
    for prompt in prompts:
        hashes = set(block_hashes(prompt))
        assert len(hashes) >= 1_000 // BLOCK
        assert not hashes & seen
        seen |= hashes
    bodies = [p[0]["content"].split("\n\n", 1)[1] for p in prefixes]
    assert len(set(bodies)) == len(bodies), "each prefix's text after its first line should be its own"
