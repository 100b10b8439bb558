"""`tao serve`: one engine and one co-scheduler for every tao command and OpenAI client on this machine."""

from __future__ import annotations

import argparse
import sys
import time

from harness.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tao serve`."""
    from harness.gateway import add_gateway_flags

    serve = subparsers.add_parser(
        "serve", help="run the engine and the co-scheduler as an OpenAI-compatible server for every tao command",
        description="Start the tao gateway in the background: an OpenAI-compatible API on 127.0.0.1 "
                    "(/v1/chat/completions, /v1/models) in front of one engine (the embedded vLLM model by "
                    "default, or the engine flags' choice, or --upstream URL), where a co-scheduler paces every "
                    "session's requests. `tao run`, the TUI and `tao swebench` use it when it runs; other "
                    "clients send an X-Session-Id header (or the `user` field) and X-Tao-Class: interactive.")
    serve.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the server to start")
    action = serve.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="say whether a server runs, where, and what it serves")
    action.add_argument("--stop", action="store_true", help="stop the running server")
    action.add_argument("--foreground", action="store_true",
                        help="run the server in this terminal, its log here; Ctrl+C stops it")
    add_gateway_flags(serve)
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Start, inspect or stop the tao server."""
    from harness.engine import server

    if args.status or args.stop:
        return status_or_stop(args.stop)
    if args.engine_url:
        raise UsageError("tao serve paces one engine: give it as --upstream URL, and start one tao serve per replica "
                         "(clients then list them all with --engine-url)")
    if args.upstream and args.engine != "vllm":
        raise UsageError("--upstream URL is the engine; leave out --engine (or use --engine openai --base-url URL)")
    from harness.flags import PACING_KV_TOKENS, cosched_policy
    from harness.gateway import gateway_argv

    # the policy's own check, before the engine's half minute of start (the gateway builds it again from its engine)
    cosched_policy(args.policy, args.knee, args.kv_tokens or PACING_KV_TOKENS, args.max_wait)
    port = args.port or server.free_port()
    engine = f"the upstream server {args.upstream}" if args.upstream else f"the {args.engine} engine"
    slow = " (tens of seconds for vLLM on a CPU)" if args.engine == "vllm" and not args.upstream else ""
    print(f"tao: starting the tao server on 127.0.0.1:{port} with {engine}, policy {args.policy}{slow}...",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    proc, state = server.launch(gateway_argv(args), port, detached=not args.foreground)
    try:
        state = server.wait_ready(proc, state, args.timeout)
        print(f"tao: server ready in {time.monotonic() - started:.0f} s (pid {state.pid}) serving {state.model}; "
              f"tao commands on this machine use it; "
              f"{'Ctrl+C stops it' if args.foreground else 'stop it with `tao serve --stop`'}", file=sys.stderr)
        print(state.url, flush=True)
        if args.foreground:
            return proc.wait()
    except KeyboardInterrupt:
        print("tao: stopping the server...", file=sys.stderr)
        server.stop_server(state)
        return 130
    finally:
        if args.foreground and proc.poll() is not None:
            server.clear_state(proc.pid)
    return 0


def status_or_stop(stop: bool) -> int:
    """`tao serve --status` (exit 0 when a healthy server runs) or `--stop`."""
    from harness.engine import server

    state = server.read_state()
    if state is None:
        print("no tao server is recorded; start one with `tao serve`", file=sys.stderr)
        return 0 if stop else 1
    if stop:
        stopped = server.stop_server(state)
        print(f"tao server (pid {state.pid}) {'stopped' if stopped else 'was not running'}", file=sys.stderr)
        return 0
    healthy = server.is_healthy(state)
    about = server.describe(state) if healthy else {}
    engine = f", engine {about['engine']}, policy {about['policy']}" if about.get("engine") else ""
    print(f"tao server pid {state.pid} ({state.status}, {'healthy' if healthy else 'not answering'}) "
          f"at {state.url} serving {state.model or '(not known yet)'}{engine}; log {state.log}")
    return 0 if healthy else 1
