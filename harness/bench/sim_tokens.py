"""The embedded model's token count for the simulated engine (`tao bench cosched --engine sim --tokens embedded`).

vLLM hashes KV blocks over token ids, so a simulator that counts characters misplaces every block boundary
and misjudges how many tokens a tool's output takes (code and logs take more tokens a character than prose).
This gives the simulator the real engine's prompt ids (the model's chat template, as harness.engine.vllm_local
renders them) and a forced answer's ids (its text's tokens and the end of turn, as vllm_local forces them).
"""

from __future__ import annotations

from typing import Any

from harness.engine.vllm_local import plain_message


class ChatTokens:
    """A Hugging Face tokenizer seen as harness.engine.sim's Tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt's token ids under the model's chat template, the answer's opening included."""
        text = self.tokenizer.apply_chat_template([plain_message(m) for m in messages], tokenize=False,
                                                  add_generation_prompt=True)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def answer_ids(self, text: str) -> list[int]:
        """The answer's token ids and the end of turn, as the real engine forces them."""
        return [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]


def embedded_chat_tokens() -> ChatTokens:
    """The embedded model's tokenizer (SmolLM2), which the CPU engine's profiles and calibrations are of."""
    from transformers import AutoTokenizer

    from harness.engine.embedded_model import resolve_model

    return ChatTokens(AutoTokenizer.from_pretrained(resolve_model(None)))
