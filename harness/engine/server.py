"""`tao serve`: the engine and the co-scheduler in one long-lived process, the gateway (harness.gateway), that
every Tao command and any OpenAI client on the machine talks to.

This module starts it as `python -m harness.gateway ...` (detached from the terminal, or in it), records its
URL and pid in a state file, and stops it. Clients discover it with `running_server()` (a state-file read, a
pid check and one local HTTP request).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx

from harness.engine.embedded_model import cache_dir
from harness.errors import EngineUnavailable, UsageError

HEALTH_TIMEOUT = 0.5
SERVER_MODULE = "harness.gateway"
START_TIMEOUT = 900.0
TERMINAL = "(the terminal)"  # the log of a gateway running in the foreground


@dataclass(frozen=True)
class ServerState:
    """What `tao serve` records about the server it started."""

    url: str  # OpenAI base URL, ending in /v1
    pid: int
    model: str  # the served model id: the model key (resolved directory or hub name) for a vLLM engine
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
    """True when `pid` is a live tao gateway (not a zombie, not another program that reused the pid)."""
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


def gateway_command(argv: list[str]) -> list[str]:
    """The command line of the gateway process with its flags (harness.gateway.add_gateway_flags)."""
    return [sys.executable, "-W", "ignore::DeprecationWarning", "-m", SERVER_MODULE, *argv]


def launch(argv: list[str], port: int, *, detached: bool = True) -> tuple[subprocess.Popen[bytes], ServerState]:
    """Start the gateway on `port` and record it as starting. Detached: its own session, output to the log;
    otherwise in this terminal (Ctrl+C reaches it too). UsageError when a gateway already runs."""
    current = read_state()
    if current is not None and pid_alive(current.pid):
        raise UsageError(f"a tao server (pid {current.pid}) already runs at {current.url} serving {current.model}; "
                         "stop it first with `tao serve --stop`")
    log = state_path().parent / "serve.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    command = gateway_command([*argv, "--port", str(port)])
    if detached:
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
    else:  # its own process group too: Ctrl+C reaches `tao serve`, which stops it as --stop does
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env, process_group=0)
        log = Path(TERMINAL)
    state = ServerState(f"http://127.0.0.1:{port}/v1", proc.pid, "", "starting", str(log), time.time())
    write_state(state)
    return proc, state


def wait_ready(proc: subprocess.Popen[bytes], state: ServerState, timeout: float = START_TIMEOUT) -> ServerState:
    """Wait until the gateway answers /health; record it as ready with the model it serves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            clear_state(proc.pid)
            said = "its output is above" if state.log == TERMINAL else f"its log ends:\n{_tail(Path(state.log))}"
            raise EngineUnavailable(f"the tao server exited with code {proc.returncode} while starting; {said}")
        if is_healthy(state, timeout=1.0):
            ready = replace(state, status="ready", model=served_model(state) or state.model)
            write_state(ready)
            return ready
        time.sleep(0.2)
    stop_server(state)
    raise EngineUnavailable(f"the tao server did not answer within {timeout:.0f} s; see {state.log}")


def start_server(argv: list[str], *, port: int | None = None, timeout: float = START_TIMEOUT) -> ServerState:
    """Start a detached gateway with flags `argv`, wait until it is healthy, record and return its state."""
    proc, state = launch(argv, port or free_port())
    return wait_ready(proc, state, timeout)


def describe(state: ServerState) -> dict[str, object]:
    """What the gateway says of itself (engine, policy, native tools) in its /v1/models entry; {} if it says nothing."""
    try:
        entries = httpx.get(f"{state.url}/models", timeout=HEALTH_TIMEOUT * 4).json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    entry = entries[0] if entries and isinstance(entries[0], dict) else {}
    return {"model": entry.get("id"), **(entry.get("tao") or {})}


def served_model(state: ServerState) -> str | None:
    """The model id the gateway serves, as its /v1/models lists it."""
    model = describe(state).get("model")
    return model if isinstance(model, str) else None


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
