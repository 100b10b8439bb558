"""The logits processor that forces a recorded answer's token ids, on real logits tensors: it follows
requests as vLLM's persistent batch adds, removes, moves and swaps them. No engine is started here
(tests/test_engine_vllm.py forces answers through the real one)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402

from harness.engine.forced import ForcedTokens  # noqa: E402
from harness.engine.vllm_local import FORCE_KEY  # noqa: E402

VOCAB = 16


def params(ids: list[int] | None) -> SamplingParams:
    return SamplingParams(max_tokens=8, extra_args={FORCE_KEY: ids} if ids else None)


def update(size: int, removed=(), added=(), moved=()) -> BatchUpdate:
    return BatchUpdate(batch_size=size, removed=list(removed), added=list(added), moved=list(moved))


def argmax(processor: ForcedTokens, rows: int) -> list[int]:
    logits = torch.arange(rows * VOCAB, dtype=torch.float32).reshape(rows, VOCAB)  # the model prefers the last id
    return processor.apply(logits).argmax(dim=1).tolist()


def test_each_forced_request_gets_its_next_token_and_others_keep_their_logits() -> None:
    processor = ForcedTokens(None, torch.device("cpu"), False)
    first, second = [], []
    processor.update_state(update(3, added=[(0, params([3, 5, 7]), [1], first), (1, params(None), [1], []),
                                            (2, params([9, 2]), [1], second)]))
    assert argmax(processor, 3) == [3, VOCAB - 1, 9]
    first.append(3), second.append(9)  # vLLM appends each sampled token to the live output lists
    assert argmax(processor, 3) == [5, VOCAB - 1, 2]
    first.append(5), second.append(2)
    assert argmax(processor, 3) == [7, VOCAB - 1, VOCAB - 1]  # the second has all its tokens


def test_rows_follow_removals_moves_and_swaps() -> None:
    processor = ForcedTokens(None, torch.device("cpu"), False)
    a, b = [], []
    processor.update_state(update(2, added=[(0, params([4]), [1], a), (1, params([6]), [1], b)]))
    processor.update_state(update(2, moved=[(0, 1, MoveDirectionality.SWAP)]))
    assert argmax(processor, 2) == [6, 4]
    processor.update_state(update(1, removed=[0], moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    assert argmax(processor, 1) == [4]
    processor.update_state(update(1, removed=[0], added=[(0, params(None), [1], [])]))  # the row is reused
    assert argmax(processor, 1) == [VOCAB - 1]


def test_bad_forced_ids_are_refused_before_they_reach_the_engine() -> None:
    with pytest.raises(ValueError, match=FORCE_KEY):
        ForcedTokens.validate_params(SamplingParams(extra_args={FORCE_KEY: ["a"]}))
    ForcedTokens.validate_params(SamplingParams(extra_args={FORCE_KEY: [1, 2]}))
