"""Token-level speculation (`--draft ngram`): the flag reaches vLLM's speculative_config, an engine that drafts
never loads the forcing logits processor (vLLM refuses the two together), the benchmark's prompts and sums, and
on the real engine the same greedy text with drafts as without."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness.bench.drafts import summarize, turn_prompts
from harness.engine.api import LLMRequest
from harness.engine.factory import EngineOptions
from harness.engine.vllm_local import NGRAM, PROCESSOR, VLLMSettings, engine_args
from harness.errors import EngineError, EngineUnavailable
from harness.flags import add_engine_flags, engine_options
from harness.gateway import add_gateway_flags, gateway_argv
from harness.protocol import CLOSE, OPEN, render_system_prompt
from tools import default_tools, tool_specs


def test_ngram_drafts_replace_the_forcing_processor_in_the_engine_args() -> None:
    drafting = engine_args(VLLMSettings(model="m", name="m", drafts="ngram"), on_cpu=True)
    assert drafting["speculative_config"] == NGRAM and drafting["logits_processors"] is None
    plain = engine_args(VLLMSettings(model="m", name="m"), on_cpu=True)
    assert plain["speculative_config"] is None and plain["logits_processors"] == [PROCESSOR]
    with pytest.raises(EngineUnavailable, match="choose ngram or off"):
        engine_args(VLLMSettings(model="m", name="m", drafts="eagle"), on_cpu=True)


def test_the_draft_flag_reaches_the_engine_options_and_the_server() -> None:
    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    assert engine_options(parser.parse_args([])).drafts == EngineOptions.drafts
    assert engine_options(parser.parse_args(["--draft", "ngram"])).drafts == "ngram"
    serve = argparse.ArgumentParser()
    add_gateway_flags(serve)
    argv = gateway_argv(serve.parse_args(["--draft", "ngram"]))
    assert argv[argv.index("--draft") + 1] == "ngram"
    assert serve.parse_args(argv).draft == "ngram"


@pytest.mark.engine
def test_vllm_builds_an_ngram_config_for_the_embedded_model(embedded_model: Path) -> None:
    """vLLM's own config step accepts the settings: n-gram drafts, no custom processor. No engine starts, but
    importing vLLM and reading the model's config takes minutes on a busy machine, so it runs with the engine tests."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    from harness.engine.vllm_local import START_METHOD
    from harness.environ import kept_environment

    settings = VLLMSettings(model=str(embedded_model), name="test", max_model_len=2048, drafts="ngram")
    # vLLM's config step puts its own libraries in this process's LD_PRELOAD, as the engine's start undoes: so here
    with kept_environment("LD_PRELOAD", START_METHOD):
        config = AsyncEngineArgs(**engine_args(settings, on_cpu=True)).create_engine_config(
            UsageContext.ENGINE_CONTEXT)
    spec = config.speculative_config
    assert spec is not None and spec.method == "ngram"
    assert spec.num_speculative_tokens == NGRAM["num_speculative_tokens"]
    assert not config.model_config.logits_processors


def test_prompts_are_recorded_sessions_cut_before_an_assistant_turn(tmp_path: Path) -> None:
    def turn(i: int) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": f"THOUGHT {i}\n```bash\nls\n```"},
                {"role": "user", "content": "<output>" + "x" * 100 + "</output>"}]

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(6):
        messages += turn(i)
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.traj.json").write_text(json.dumps({"messages": messages}))
    (tmp_path / "broken.json").write_text("{not json")
    prompts = turn_prompts(tmp_path, sessions=2, turns=2, max_chars=400)
    assert len({p.name.split("#")[0] for p in prompts}) == 2
    for prompt in prompts:
        index = int(prompt.name.split("#")[1])
        assert messages[index]["role"] == "assistant" and prompt.messages == messages[:index]
        assert len(json.dumps([m["content"] for m in prompt.messages])) <= 400
    assert [p.name.split("#")[1] for p in prompts[:2]] == ["2", "6"]  # the first and the last turn that fit


def test_the_summary_compares_time_per_token_and_finds_changed_answers() -> None:
    def run(mode: str, rnd: int, prompt: str, tokens: int, seconds: float, text: str = "same") -> dict[str, object]:
        return {"mode": mode, "round": rnd, "prompt": prompt, "output_tokens": tokens, "decode_s": seconds,
                "text": text}

    runs = [run("off", 0, "p", 11, 1.0), run("ngram", 0, "p", 11, 0.5),
            run("ngram", 1, "p", 11, 0.4), run("off", 1, "p", 11, 0.8),
            run("off", 0, "q", 2, 0.1), run("ngram", 0, "q", 2, 0.1, text="other")]
    summary = summarize(runs)
    assert summary["modes"]["off"]["ms_per_token"] == round(1000 * 1.9 / 21, 2)
    assert summary["speedup_by_round"] == [round(1.1 / 0.6, 3), 2.0] and summary["speedup"] == round(1.9 / 1.0, 3)
    assert summary["identical"] == 1 and summary["differing"] == ["q"] and summary["off_unstable"] == []


@pytest.mark.engine
async def test_drafts_give_the_same_greedy_text_and_refuse_forcing(vllm_engine, monkeypatch) -> None:
    """The shared engine (no drafts) and a short-lived drafting one answer a prompt that invites copying alike."""
    import dataclasses

    from harness.engine.factory import start_local

    code = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(12))
    request = LLMRequest("drafts-same", [{"role": "user", "content": f"Copy this code exactly:\n\n{code}"}],
                         max_tokens=96)

    async def greedy(engine: object, request_id: str) -> str:
        text = ""
        async for chunk in engine.stream(dataclasses.replace(request, request_id=request_id)):  # type: ignore[attr-defined]
            text += chunk.text
        return text

    monkeypatch.setattr(vllm_engine, "settings", dataclasses.replace(vllm_engine.settings, temperature=0.0))
    plain = await greedy(vllm_engine, "drafts-off")
    drafting = await start_local(EngineOptions(attach=False, temperature=0.0, drafts="ngram", max_model_len=2048))
    try:
        assert await greedy(drafting, "drafts-ngram") == plain and len(plain) > 100
        # the call grammar (structured outputs) checks drafted tokens too: a constrained turn still ends in a call
        specs = tool_specs(default_tools())
        turn = LLMRequest("drafts-call", [{"role": "system", "content": render_system_prompt(specs, "/work/calc")},
                                          {"role": "user", "content": "List the files of the project."}],
                          tools=specs, max_tokens=160)
        text = "".join([chunk.text async for chunk in drafting.stream(turn)])
        body = text.split(OPEN, 1)[1].split(CLOSE, 1)[0]
        assert json.loads(body)["name"] in {spec["function"]["name"] for spec in specs}
        forced = dataclasses.replace(request, request_id="drafts-forced", force="def f0(x):")
        with pytest.raises(EngineError, match="--draft off"):
            async for _ in drafting.stream(forced):
                pass
    finally:
        await drafting.close()
