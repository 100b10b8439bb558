"""Forcing a recorded answer token by token: a vLLM logits processor that leaves one token possible.

A regex of the recorded text fixes its characters but not its tokens: the model may spell the same text
in a finer tokenization (160 characters took 96 tokens here), and which spelling greedy decoding picks
changes with the batch the request shares (the same forced answer took 46 tokens in one run and 43 in
the next, beside cache-warming requests). Forcing the text's own token ids fixes both, so a forced answer costs the
tokens, and the time, that the model would spend writing it.

    AsyncEngineArgs(..., logits_processors=[PROCESSOR])                 # the engine loads it by name
    SamplingParams(max_tokens=len(ids), extra_args={FORCE_KEY: ids})    # a request that forces `ids`

This module imports vLLM and torch; harness.engine.vllm_local names it (PROCESSOR) without importing it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from harness.engine.vllm_local import FORCE_KEY


def forced_ids(params: Any) -> list[int] | None:
    """The token ids a request's sampling params force, or None for an ordinary request."""
    extra = getattr(params, "extra_args", None) or {}
    ids = extra.get(FORCE_KEY)
    return ids if ids else None


class ForcedTokens(LogitsProcessor):
    """Sets every logit but the next forced token's to -inf, for the requests that carry forced ids."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, tuple[list[int], list[int]]] = {}  # batch row -> (forced ids, output ids so far)

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        ids = (getattr(sampling_params, "extra_args", None) or {}).get(FORCE_KEY)
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) and i >= 0 for i in ids)):
            raise ValueError(f"{FORCE_KEY} must be a list of token ids (non-negative integers)")

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the argmax

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow requests into, out of and around the persistent batch (removed, added, moved, in that order)."""
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _prompt, output in batch_update.added:
            ids = forced_ids(params)
            if ids is not None:
                self.rows[index] = (ids, output)  # `output` is the request's live list of generated ids
            else:
                self.rows.pop(index, None)
        for a, b, direction in batch_update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if row_b is not None and direction is MoveDirectionality.SWAP:
                self.rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, (ids, output) in self.rows.items():
            position = len(output)
            if position < len(ids):
                logits[index].fill_(float("-inf"))
                logits[index, ids[position]] = 0.0
        return logits
