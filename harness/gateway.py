"""`tao serve`'s process: an OpenAI-compatible HTTP API in front of one engine, every request paced by one CoScheduler.

    app = build_app(CoScheduler(engine, Pacing(...)), "model-id")     # serve it with uvicorn on 127.0.0.1

Routes (the contract in the issue 24 notes): `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`
(streamed as server-sent events or not), and three Tao extensions: `POST /v1/tao/hint` (a tool started),
`GET /v1/tao/pacing/{session}` (where a session stands) and `GET /v1/tao/load` (authoritative requests running
and waiting, the engine's KV cache in use or null: what clients of several replicas choose by,
harness.engine.replicas). A request's session is its `X-Session-Id` header,
else its body's `user`, else a fresh id; `X-Tao-Class: interactive` ranks it above batch sessions.
A client that goes away mid-request aborts it in the engine. Sampling is the engine's own (the body's
`temperature` and the like are not used); a body's `priority` is ignored (the class decides) unless it is
WARM_PRIORITY or above: a speculative cache-warming prefill, which the co-scheduler admits last and aborts
for real work. Tao extension: `tao_prompt_limit` (a positive integer) prefills only the prompt's first N
tokens (a chunk of a warm prefill). `/v1/models` says whether the engine makes native tool calls
(`tao.native_tools`) and whether a prefill warms its cache (`tao.prefix_cache`). A request with `tools` gets
OpenAI `tool_calls` either way (`tao.tool_calls`): an engine without native tools writes its calls in
Tao's text protocol, which the gateway parses (streamed, each call as one delta once it is complete) unless
the request's `X-Tao-Protocol: text` header says the client parses the protocol itself (Tao's own client:
its streaming parser finds a call before it is complete), which then gets the raw text.
Requests are read and checked in harness.gateway_requests (error bodies too), answers written in
harness.gateway_answers; this module routes between them and runs the process. Run as `python -m harness.gateway`
(`tao serve` starts it so); starlette and uvicorn are imported only when the app is built or served.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from harness.coscheduler import CoScheduler, Policy
from harness.engine.api import Engine, engine_load
from harness.errors import EngineError, UsageError
from harness.gateway_answers import Answer, answer_stream, answer_whole
from harness.gateway_requests import (BadRequest, bad_request_json, engine_error, error_json, json_body,
                                      parse_completion, parse_hint)
from harness.vocabulary import GATEWAY_HEADER, GATEWAY_MARK

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

GATEWAY_TAG = (GATEWAY_HEADER.lower().encode(), GATEWAY_MARK.encode())  # as ASGI writes a header: lowercase bytes
KEEP_ALIVE = 75
"""Seconds an idle client connection stays open. Well above the clients' own idle limit (httpx's, so Tao's client,
the openai SDK and LiteLLM: 5 s): at uvicorn's default, also 5 s, a client reused a connection at the moment the
server closed it, and its request failed (RemoteProtocolError or ReadError: 17 of 300 requests sent at that gap
with both limits at 0.2 s, none with the server's at 2 s)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


# -- the app -----------------------------------------------------------------------------------------


def build_app(cosched: CoScheduler, model: str) -> Starlette:
    """The gateway's ASGI app over `cosched` (and its engine), serving the model id `model`."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    engine = cosched.engine

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def models(request: Request) -> Response:
        entry = {"id": model, "object": "model", "created": 0, "owned_by": "tao",
                 "max_model_len": getattr(engine, "max_model_len", None),
                 "tao": {"engine": engine.name, "native_tools": engine.native_tools, "tool_calls": True,
                         "prefix_cache": engine.prefix_cache, "policy": cosched.policy.name}}
        return JSONResponse({"object": "list", "data": [entry]})

    async def completions(request: Request) -> Response:
        try:
            completion = parse_completion(await json_body(request), request.headers, model)
        except BadRequest as exc:
            return JSONResponse(bad_request_json(exc), exc.status)
        parse_calls = bool(completion.request.tools) and not engine.native_tools and not completion.raw_text
        if completion.stream:
            return StreamingResponse(answer_stream(cosched, completion, Answer(model, parse_calls)),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        task = asyncio.create_task(answer_whole(cosched, completion, Answer(model, parse_calls)))
        try:
            status, body = await _unless_disconnected(request, task)
        except EngineError as exc:
            status, body = engine_error(exc)
        return JSONResponse(body, status)

    async def hint(request: Request) -> Response:
        try:
            session, expected = parse_hint(await json_body(request))
        except BadRequest as exc:
            return JSONResponse(bad_request_json(exc), exc.status)
        cosched.tool_started(session, expected)
        return Response(status_code=204)

    async def pacing(request: Request) -> Response:
        state = asdict(cosched.pacing(request.path_params["session"]))
        return JSONResponse({**state, "policy": cosched.policy.name})

    async def load(request: Request) -> Response:
        occupied = cosched.occupancy()
        kv = occupied.kv_usage if engine_load(engine) is not None else None
        return JSONResponse({"running": occupied.running, "waiting": occupied.waiting, "kv_usage": kv})

    app = Starlette(routes=[
        Route("/health", health), Route("/v1/models", models),
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/tao/hint", hint, methods=["POST"]), Route("/v1/tao/pacing/{session}", pacing),
        Route("/v1/tao/load", load)])
    app.add_middleware(_GatewayHeader)
    return app


class _GatewayHeader:
    """ASGI middleware: every response says `X-Tao-Gateway: 1`, so clients know they talk to a tao gateway."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), GATEWAY_TAG]
            await send(message)

        await self.app(scope, receive, tagged if scope["type"] == "http" else send)


async def _unless_disconnected(request: Request, task: asyncio.Task[tuple[int, dict[str, Any]]]
                               ) -> tuple[int, dict[str, Any]]:
    """The task's result, or cancel it (aborting its request) when the client disconnects first."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.create_task(disconnected())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # its stream closes and aborts the request
    if task.cancelled():
        return 499, error_json("the client went away before the answer was complete", code=499)
    return task.result()


@contextlib.asynccontextmanager
async def serving(cosched: CoScheduler, model: str, port: int | None = None) -> AsyncIterator[str]:
    """Serve the gateway in this event loop (tests, benchmarks, an in-process client); yields its base URL (/v1).

    It listens on a socket bound here and kept: a port found free and bound later by uvicorn could be taken in
    between (by any connection's ephemeral port), and the gateway would not start."""
    import socket

    import uvicorn

    listening = socket.socket()
    try:
        listening.bind(("127.0.0.1", port or 0))
    except OSError as exc:
        listening.close()
        raise EngineError(f"the gateway could not listen on 127.0.0.1:{port}: {exc}; choose another port") from None
    port = listening.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(cosched, model), log_level="warning", access_log=False,
                                           lifespan="off", timeout_keep_alive=KEEP_ALIVE))
    task = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises why it could not start
                raise EngineError(f"the gateway could not listen on 127.0.0.1:{port}")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await task
        listening.close()


# -- the process -------------------------------------------------------------------------------------


def add_gateway_flags(parser: argparse.ArgumentParser) -> None:
    """The gateway's own flags (port, upstream, policy); `tao serve` and `python -m harness.gateway` share them."""
    from harness.flags import PACING_KNEE, PACING_KV_TOKENS, PACING_MAX_WAIT, POLICIES, add_engine_flags

    parser.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--upstream", metavar="URL",
                        help="serve another OpenAI-compatible server (e.g. `vllm serve` on another machine, "
                             "http://host:8000/v1) instead of starting vLLM here")
    parser.add_argument("--policy", choices=POLICIES, default="pacing",
                        help="pacing: keep the engine at its knee and the KV cache (default); fcfs: plain vLLM")
    parser.add_argument("--knee", type=int, default=PACING_KNEE,
                        help=f"pacing: requests in flight the engine serves well (default {PACING_KNEE})")
    parser.add_argument("--kv-tokens", type=int,
                        help=f"pacing: the engine's KV cache in tokens (default: the engine's own count, else "
                             f"{PACING_KV_TOKENS})")
    parser.add_argument("--max-wait", type=float, default=PACING_MAX_WAIT,
                        help=f"pacing: seconds after which a waiting session goes first (default {PACING_MAX_WAIT:g})")
    add_engine_flags(parser)


def gateway_argv(args: argparse.Namespace) -> list[str]:
    """The flags (but the port) that start `python -m harness.gateway` as `args` (from add_gateway_flags) ask."""
    argv = ["--policy", args.policy, "--knee", str(args.knee), "--max-wait", str(args.max_wait),
            "--engine", args.engine, "--seconds-per-token", str(args.seconds_per_token), "--draft", args.draft]
    for flag, value in (("--upstream", args.upstream), ("--kv-tokens", args.kv_tokens), ("--model", args.model),
                        ("--base-url", args.base_url), ("--replay", args.replay),
                        ("--max-model-len", args.max_model_len)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + (["--no-constrain"] if args.no_constrain else [])


def policy_for(args: argparse.Namespace, engine: Engine) -> Policy:
    """The policy the flags ask for; Pacing's KV size from the flag, else the engine's count, else the default."""
    from harness.flags import PACING_KV_TOKENS, cosched_policy

    kv_tokens = args.kv_tokens or getattr(engine, "kv_tokens", None) or PACING_KV_TOKENS
    return cosched_policy(args.policy, args.knee, kv_tokens, args.max_wait)


async def open_gateway_engine(args: argparse.Namespace) -> tuple[Engine, str]:
    """The engine behind the gateway and the model id it serves. Never attaches to a running `tao serve`:
    the gateway is that server."""
    from dataclasses import replace

    from harness.engine.embedded_model import model_key
    from harness.engine.factory import open_engine
    from harness.flags import engine_options

    options = replace(engine_options(args), attach=False)
    if args.upstream:
        options = replace(options, kind="openai", base_url=args.upstream)
    engine = await open_engine(options)
    if options.kind == "vllm":
        return engine, model_key(options.model)
    return engine, str(getattr(engine, "model", None) or engine.name)


async def serve(args: argparse.Namespace) -> None:
    """Open the engine, serve the gateway on 127.0.0.1 until SIGINT or SIGTERM, then close the engine."""
    import uvicorn

    from harness.engine.server import free_port

    port = args.port or free_port()
    engine, model = await open_gateway_engine(args)
    try:
        cosched = CoScheduler(engine, policy_for(args, engine))
        config = uvicorn.Config(build_app(cosched, model), host="127.0.0.1", port=port,
                                log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                                timeout_keep_alive=KEEP_ALIVE)
        print(f"tao gateway: serving {model} on http://127.0.0.1:{port}/v1 through {engine.name}, "
              f"policy {cosched.policy.name}", file=sys.stderr, flush=True)
        await uvicorn.Server(config).serve()
    finally:
        await engine.close()


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as a KeyboardInterrupt: uvicorn stops serving, then the engine closes."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.gateway`: what `tao serve` runs (detached, or in the terminal with --foreground)."""
    parser = argparse.ArgumentParser(prog="python -m harness.gateway",
                                     description="The tao serve gateway; start it with `tao serve`.")
    add_gateway_flags(parser)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # `tao serve --stop`: stop as on Ctrl+C, closing the engine
    try:
        asyncio.run(serve(args))
    except (UsageError, EngineError) as exc:
        print(f"tao gateway: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
