"""`tao serve`: keep one engine running for later commands."""

from __future__ import annotations

import argparse
import sys
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tao serve`."""
    serve = subparsers.add_parser(
        "serve", help="start the engine once and keep it running, so later tao commands attach at once",
        description="Start vLLM's OpenAI-compatible server for the model (the embedded one by default) in the "
                    "background. `tao run` and `tao demo` with the default engine attach to it.")
    serve.add_argument("--model", help="model name or directory (default: the embedded SmolLM2)")
    serve.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    serve.add_argument("--max-model-len", type=int, help="context length (default: 8192 for the embedded model)")
    serve.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the server to start")
    action = serve.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="say whether a server runs, and where")
    action.add_argument("--stop", action="store_true", help="stop the running server")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.engine import server
    from harness.engine.embedded_model import EMBEDDED_MAX_MODEL_LEN, resolve_model

    if args.status or args.stop:
        state = server.read_state()
        if state is None:
            print("no tao server is recorded", file=sys.stderr)
            return 1 if args.status else 0
        if args.stop:
            stopped = server.stop_server(state)
            print(f"tao server (pid {state.pid}) {'stopped' if stopped else 'was not running'}", file=sys.stderr)
            return 0
        healthy = server.is_healthy(state)
        print(f"tao server pid {state.pid} ({state.status}, {'healthy' if healthy else 'not answering'}) "
              f"at {state.url} serving {state.model}; log {state.log}")
        return 0 if healthy else 1
    model = resolve_model(args.model)
    max_len = args.max_model_len or (EMBEDDED_MAX_MODEL_LEN if args.model is None else None)
    print(f"tao: starting vLLM's server for {model} (tens of seconds on a CPU)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    state = server.start_server(model, port=args.port, max_model_len=max_len, timeout=args.timeout)
    print(f"tao: server ready in {time.monotonic() - started:.0f} s (pid {state.pid}); "
          f"`tao run` attaches to it; stop it with `tao serve --stop`", file=sys.stderr)
    print(state.url)
    return 0
