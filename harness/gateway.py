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
Run as `python -m harness.gateway` (`tao serve` starts it so); starlette and uvicorn are imported only when
the app is built or served.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from harness.coscheduler import INTERACTIVE_PRIORITY, CoScheduler, Policy
from harness import protocol
from harness.engine.api import WARM_PRIORITY, Chunk, Engine, LLMRequest, Usage, engine_load
from harness.errors import ContextTooLong, EngineError, UsageError
from harness.vocabulary import GATEWAY_HEADER, GATEWAY_MARK, Traffic

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

CLASSES: dict[str, int] = {Traffic.INTERACTIVE: INTERACTIVE_PRIORITY, Traffic.BATCH: 0}  # class -> priority
DEFAULT_MAX_TOKENS = LLMRequest("", []).max_tokens
GATEWAY_TAG = (GATEWAY_HEADER.lower().encode(), GATEWAY_MARK.encode())  # as ASGI writes a header: lowercase bytes
TEXT_PROTOCOL = "text"  # the X-Tao-Protocol header of a client that parses Tao's text protocol itself
KEEP_ALIVE = 75
"""Seconds an idle client connection stays open. Well above the clients' own idle limit (httpx's, so Tao's client,
the openai SDK and LiteLLM: 5 s): at uvicorn's default, also 5 s, a client reused a connection at the moment the
server closed it, and its request failed (RemoteProtocolError or ReadError: 17 of 300 requests sent at that gap
with both limits at 0.2 s, none with the server's at 2 s)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


class BadRequest(ValueError):
    """A request the API cannot take; the message says what was expected."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


@dataclass(frozen=True)
class Completion:
    """One chat completion request, read from the HTTP request."""

    session_id: str
    request: LLMRequest
    stream: bool
    raw_text: bool = False  # the client parses Tao's text protocol itself (X-Tao-Protocol: text)


# -- reading requests --------------------------------------------------------------------------------


def parse_completion(body: object, headers: MutableMapping[str, str] | Any, model: str) -> Completion:
    """An OpenAI chat completion body and the Tao headers as a Completion; BadRequest says what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with `model` and `messages`")
    if body.get("model") not in (None, model):
        raise BadRequest(f"the model {body.get('model')!r} does not exist; this server serves {model!r} "
                         "(GET /v1/models)", "model", 404, "model_not_found")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list of {\"role\": ..., \"content\": ...} objects",
                         "messages")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(_is_tool(tool) for tool in tools):
        raise BadRequest('`tools` must be a list of {"type": "function", "function": {"name": ..., '
                         '"parameters": {...}}} objects', "tools")
    if body.get("n", 1) != 1:
        raise BadRequest("`n` must be 1 (one answer per request)", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("`stream` must be true or false", "stream")
    session_id = headers.get("x-session-id") or body.get("user") or f"anon-{uuid.uuid4().hex[:12]}"
    if not isinstance(session_id, str):
        raise BadRequest("`user` must be a string (the session id, unless the X-Session-Id header gives one)", "user")
    kind = (headers.get("x-tao-class") or Traffic.BATCH).strip().lower()
    if kind not in CLASSES:
        raise BadRequest(f"the X-Tao-Class header must be one of {', '.join(CLASSES)}, not {kind!r}")
    text = (headers.get("x-tao-protocol") or "").strip().lower()
    if text not in ("", TEXT_PROTOCOL):
        raise BadRequest(f"the X-Tao-Protocol header must be {TEXT_PROTOCOL!r} (or absent), not {text!r}")
    request = LLMRequest(f"{session_id}-{uuid.uuid4().hex[:16]}", [_message(m, i) for i, m in enumerate(messages)],
                         list(tools), _max_tokens(body), _priority(body, CLASSES[kind]),
                         prompt_limit=_positive(body, "tao_prompt_limit"))
    return Completion(session_id, request, stream, text == TEXT_PROTOCOL)


def _priority(body: dict[str, Any], by_class: int) -> int:
    """The class's priority, or the body's `priority` when it marks a speculative prefill (WARM_PRIORITY or
    above): a client may lower its own rank to speculation's, never raise it above its class."""
    priority = body.get("priority")
    if priority is None:
        return by_class
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise BadRequest("`priority` must be an integer", "priority")
    return priority if priority >= WARM_PRIORITY else by_class


def _is_tool(tool: object) -> bool:
    """Whether a `tools` entry is a function tool with a name."""
    function = tool.get("function") if isinstance(tool, dict) else None
    return (isinstance(tool, dict) and tool.get("type", "function") == "function" and isinstance(function, dict)
            and isinstance(function.get("name"), str))


def _message(message: object, index: int) -> dict[str, Any]:
    """A message as the engines take it: content parts of type text are joined into one string."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise BadRequest(f"messages[{index}] must be an object with a string `role`", "messages")
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(part, dict) and part.get("type") == "text" for part in content):
            raise BadRequest(f"messages[{index}].content: only text parts are supported "
                             '([{"type": "text", "text": ...}])', "messages")
        return {**message, "content": "".join(str(part.get("text") or "") for part in content)}
    if content is not None and not isinstance(content, str):
        raise BadRequest(f"messages[{index}].content must be a string, a list of text parts or null", "messages")
    return dict(message)


def _max_tokens(body: dict[str, Any]) -> int:
    """`max_completion_tokens`, else `max_tokens`, else the engines' default."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = _positive(body, key)
        if value is not None:
            return value
    return DEFAULT_MAX_TOKENS


def _positive(body: dict[str, Any], key: str) -> int | None:
    """The body's `key` as a positive integer, None when absent; BadRequest when it is something else."""
    value = body.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise BadRequest(f"`{key}` must be a positive integer", key)
    return value


def parse_hint(body: object) -> tuple[str, float | None]:
    """A hint body `{"session", "event": "tool_start", "expected_seconds"}` as (session, expected seconds)."""
    if not isinstance(body, dict) or not isinstance(body.get("session"), str) or body.get("event") != "tool_start":
        raise BadRequest('a hint must be {"session": ID, "event": "tool_start", "expected_seconds": number or null}')
    expected = body.get("expected_seconds")
    if expected is not None and (not isinstance(expected, (int, float)) or isinstance(expected, bool)
                                 or expected < 0):
        raise BadRequest("`expected_seconds` must be a non-negative number or null", "expected_seconds")
    return body["session"], None if expected is None else float(expected)


# -- writing answers ---------------------------------------------------------------------------------


def usage_json(usage: Usage | None) -> dict[str, Any]:
    """A Usage in OpenAI's shape, cached prompt tokens included."""
    usage = usage or Usage()
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}


def tool_calls_json(calls: list[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """Complete native calls as OpenAI `tool_calls` entries, each with its index in the answer (from `start`)."""
    return [{"index": i, "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}}
            for i, call in enumerate(calls, start)]


def native_call(call: protocol.ParsedCall) -> dict[str, Any]:
    """A call parsed from the text protocol as a native call (OpenAI shape), with an id of its own."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


class ProtocolCalls:
    """Splits an answer in Tao's text protocol into its text and its calls, as they complete. A malformed call
    stays in the text as it was written, for the client's model to see."""

    def __init__(self) -> None:
        self.parser = protocol.CallParser()

    def feed(self, text: str, last: bool) -> tuple[str, list[dict[str, Any]]]:
        """The text outside calls and the calls completed by this piece of the answer (`last`: the end)."""
        events = self.parser.feed(text) + (self.parser.finish() if last else [])
        parts: list[str] = []
        calls: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, protocol.Text):
                parts.append(event.text)
            elif isinstance(event, protocol.CallDone):
                calls.append(native_call(event.call))
            elif isinstance(event, protocol.CallError):
                parts.append(f"{protocol.OPEN}{event.raw}{protocol.CLOSE}")
        return "".join(parts), calls


def finish_reason(chunk: Chunk, calls: bool) -> str:
    """The engine's reason, `tool_calls` when an answer that stopped by itself made calls."""
    reason = chunk.finish_reason or "stop"
    return "tool_calls" if calls and reason == "stop" else reason


def error_json(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: int = 400) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def engine_error(exc: Exception) -> tuple[int, dict[str, Any]]:
    """An engine's error as an HTTP status and error body."""
    if isinstance(exc, ContextTooLong):
        return 400, error_json(str(exc), "invalid_request_error", "messages", 400)
    return 503, error_json(f"the engine failed: {exc}", "engine_error", None, 503)


class Answer:
    """Turns one request's chunks into OpenAI completion chunks (streaming) or one completion; `parse_calls`:
    the engine writes calls in Tao's text protocol and the client wants them as `tool_calls`."""

    def __init__(self, model: str, parse_calls: bool = False) -> None:
        self.model, self.id, self.created = model, f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.started = False
        self.protocol = ProtocolCalls() if parse_calls else None

    def delta(self, chunk: Chunk) -> list[dict[str, Any]]:
        """The stream events one engine chunk makes: a delta, then on the last chunk the reason and the usage."""
        events: list[dict[str, Any]] = []
        delta: dict[str, Any] = {} if self.started else {"role": "assistant"}
        text, calls = chunk.text, list(chunk.tool_calls or [])
        if self.protocol is not None:
            text, parsed = self.protocol.feed(text, chunk.finish_reason is not None)
            calls += parsed
        if text:
            delta["content"] = text
            self.text.append(text)
        if calls:
            delta["tool_calls"] = tool_calls_json(calls, len(self.calls))
            self.calls.extend(calls)
        if "content" in delta or "tool_calls" in delta:
            events.append(self.event([{"index": 0, "delta": delta, "finish_reason": None}]))
            self.started = True
        if chunk.finish_reason is not None:
            reason = finish_reason(chunk, bool(self.calls))
            events.append(self.event([{"index": 0, "delta": {}, "finish_reason": reason}]))
            events.append(self.event([], usage_json(chunk.usage)))
        return events

    def event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """One `chat.completion.chunk`."""
        out: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                               "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def completion(self, last: Chunk) -> dict[str, Any]:
        """The whole answer as one `chat.completion`."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.calls:
            message["tool_calls"] = [{k: v for k, v in call.items() if k != "index"}
                                     for call in tool_calls_json(self.calls)]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(last, bool(self.calls))}],
                "usage": usage_json(last.usage)}


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


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
            completion = parse_completion(await _json(request), request.headers, model)
        except BadRequest as exc:
            return JSONResponse(error_json(str(exc), exc.kind, exc.param, exc.status), exc.status)
        parse_calls = bool(completion.request.tools) and not engine.native_tools and not completion.raw_text
        if completion.stream:
            return StreamingResponse(_stream(cosched, completion, Answer(model, parse_calls)),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        task = asyncio.create_task(_collect(cosched, completion, Answer(model, parse_calls)))
        try:
            status, body = await _unless_disconnected(request, task)
        except EngineError as exc:
            status, body = engine_error(exc)
        return JSONResponse(body, status)

    async def hint(request: Request) -> Response:
        try:
            session, expected = parse_hint(await _json(request))
        except BadRequest as exc:
            return JSONResponse(error_json(str(exc), exc.kind, exc.param, exc.status), exc.status)
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


async def _json(request: Request) -> object:
    """The request body as JSON; BadRequest when it is none."""
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({exc}); send a JSON object") from None


async def _stream(cosched: CoScheduler, completion: Completion, answer: Answer) -> AsyncIterator[bytes]:
    """The SSE body; closing it (the client went away) closes the co-scheduler's stream, which aborts the request."""
    try:
        async with contextlib.aclosing(cosched.stream(completion.session_id, completion.request)) as chunks:
            async for chunk in chunks:
                for event in answer.delta(chunk):
                    yield sse(event)
    except EngineError as exc:  # the status line is sent: the error travels in the stream, as vLLM sends it
        yield sse(engine_error(exc)[1])
    yield sse("[DONE]")


async def _collect(cosched: CoScheduler, completion: Completion, answer: Answer) -> tuple[int, dict[str, Any]]:
    """The whole answer of a non-streamed request."""
    last = Chunk()
    async with contextlib.aclosing(cosched.stream(completion.session_id, completion.request)) as chunks:
        async for chunk in chunks:
            answer.delta(chunk)
            last = chunk
    return 200, answer.completion(last)


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
