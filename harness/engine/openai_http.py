"""An Engine over any OpenAI-compatible chat server (`vllm serve`, `tao serve`, hosted APIs), streaming.

Native tool calls are used where the server offers them (vLLM started with --enable-auto-tool-choice
and --tool-call-parser, or a hosted API); otherwise tool calls travel in the text protocol, and on a
vLLM server the same call constraint as the in-process engine is sent as `structured_outputs`.
Aborting a request closes its HTTP stream, which makes vLLM abort it in the engine.

On a tao gateway (`tao serve`: its responses carry `X-Tao-Gateway: 1`) every request says whose it is
(`X-Session-Id`) and how it ranks (`X-Tao-Class`); `for_session` gives each session its own view of one
connection, `tool_started` tells the gateway's co-scheduler when the session will be back, `pacing` asks
where the session stands. A gateway says whether a prefill warms its engine's cache (`tao.prefix_cache`); if
so, speculative warm prefills go to it with their `priority` and the Tao extension `tao_prompt_limit`. A
session that writes calls in the text protocol says so (`X-Tao-Protocol: text`) and gets the raw text, which
its own streaming parser reads, where other clients get the calls parsed into `tool_calls`.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from harness.engine.api import WARM_PRIORITY, Chunk, LLMRequest, Usage
from harness.engine.constrain import REASONING_TOKENS, STOP, literal_regex, structural_tag_json
from harness.errors import ContextTooLong, EngineDied, EngineError, EngineUnavailable
from harness.vocabulary import GATEWAY_HEADER, GATEWAY_MARK, Traffic

CONNECT_TIMEOUT = 2.0
ABORTED_KEPT = 1024
READ_TIMEOUT = 900.0  # a long prompt's prefill on a CPU can take minutes before the first byte
HINT_TIMEOUT = 1.0  # a gateway's hint and pacing answers are local bookkeeping: quick, or not worth waiting for
_PROBE_TOOL = {"type": "function", "function": {"name": "noop", "description": "Does nothing.",
                                                "parameters": {"type": "object", "properties": {}}}}


def normalize_base_url(url: str) -> str:
    """`http://host:8000` or `.../v1/` to `http://host:8000/v1`."""
    url = url.rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url if url.endswith("/v1") else f"{url}/v1"


class OpenAIEngine:
    """Streams chat completions from a running server; create it with `await OpenAIEngine.connect(...)`."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, *, native_tools: bool,
                 is_vllm: bool, constrained: bool, temperature: float, reasoning_tokens: int, name: str,
                 gateway: bool = False) -> None:
        self._client = client
        self.base_url = base_url
        self.model = model
        self.native_tools = native_tools
        self.is_vllm = is_vllm
        self.prefix_cache = is_vllm  # vLLM caches prefixes; other servers may, but say nothing of it
        self.constrained = constrained
        self.temperature = temperature
        self.reasoning_tokens = reasoning_tokens
        self.name = name
        self._responses: dict[str, httpx.Response] = {}
        self._aborted: dict[str, None] = {}  # an ordered set, trimmed to ABORTED_KEPT ids
        self._send_priority = is_vllm
        self.max_model_len: int | None = None  # the context window, when the server lists it (vLLM does)
        self.gateway = gateway  # a tao gateway (`tao serve`): requests carry the session's id and class
        self.session_id = uuid.uuid4().hex[:12]  # the gateway's name for this engine's session (`for_session`)
        self.traffic = Traffic.BATCH
        self._shared = False  # a session's view: the connection is its engine's, closed by it

    @classmethod
    async def connect(cls, base_url: str, *, model: str | None = None, native_tools: bool | None = None,
                      constrained: bool = True, temperature: float = 0.6,
                      reasoning_tokens: int = REASONING_TOKENS, api_key: str | None = None,
                      name: str | None = None, gateway: bool = False) -> OpenAIEngine:
        """Check the server answers and pick the model; `native_tools=None` asks the server. `gateway`: the server
        is known to be a tao gateway (found through `tao serve`'s state file); else its answer says whether."""
        base = normalize_base_url(base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT))
        try:
            listed, said_gateway = await _list_models(client, base)
            ids: list[str] = [item["id"] for item in listed if isinstance(item.get("id"), str)]
            if model is None:
                if not ids:
                    raise EngineUnavailable(f"the server at {base} lists no models; pass --model NAME")
                model = ids[0]
            elif ids and model not in ids:
                raise EngineUnavailable(f"the server at {base} does not serve {model!r}; it serves {', '.join(ids)}")
            is_vllm = any(item.get("owned_by") == "vllm" for item in listed)
            served = next((item for item in listed if item.get("id") == model), {})
            if native_tools is None:
                native_tools = await _native_tools(client, base, model, served, is_vllm)
            said = served.get("tao")
            prefix_cache = said.get("prefix_cache") is True if isinstance(said, dict) else is_vllm
        except BaseException:
            await client.aclose()
            raise
        engine = cls(client, base, model, native_tools=native_tools, is_vllm=is_vllm, constrained=constrained,
                     temperature=temperature, reasoning_tokens=reasoning_tokens,
                     name=name or f"openai:{model}" + (" (paced by tao serve)" if gateway or said_gateway else ""),
                     gateway=gateway or said_gateway)
        engine.prefix_cache = prefix_cache  # a gateway says so of its engine
        window = served.get("max_model_len")
        engine.max_model_len = window if isinstance(window, int) and not isinstance(window, bool) else None
        return engine

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP connection to the server (harness.engine.replicas reads a gateway's load through it)."""
        return self._client

    def for_session(self, session_id: str, traffic: str) -> OpenAIEngine:
        """This engine as one session sees it: the same connection, the session's id and class on its requests.
        Closing the view leaves the connection open (the engine's owner closes it)."""
        view = copy.copy(self)  # shares the client and the books of open and aborted requests
        view.session_id, view.traffic, view._shared = session_id, Traffic(traffic), True
        return view

    def rename(self, session_id: str) -> None:
        """Send `session_id` from now on (a resumed session goes on under its saved id)."""
        self.session_id = session_id

    def headers(self) -> dict[str, str]:
        """The headers that tell a tao gateway whose request this is and how it ranks, and, when its engine writes
        calls in the text protocol, that this client parses that protocol itself; none for other servers."""
        if not self.gateway:
            return {}
        said = {"X-Session-Id": self.session_id, "X-Tao-Class": str(self.traffic)}
        return said if self.native_tools else {**said, "X-Tao-Protocol": "text"}

    async def tool_started(self, expected: float | None) -> None:
        """Tell the gateway this session's tool started and should take `expected` seconds (None: unknown), so
        its co-scheduler can hold the session's place; a hint, so a failure to deliver it is ignored."""
        if not self.gateway:
            return
        body = {"session": self.session_id, "event": "tool_start", "expected_seconds": expected}
        try:
            await self._client.post(f"{self.base_url}/tao/hint", json=body, timeout=HINT_TIMEOUT)
        except httpx.HTTPError:
            pass

    async def pacing(self) -> dict[str, Any] | None:
        """Where this session stands on the gateway (admitted, or waiting how long at which place, sessions
        active, KV in use, the policy); None off a gateway or when it does not answer."""
        if not self.gateway:
            return None
        try:
            resp = await self._client.get(f"{self.base_url}/tao/pacing/{self.session_id}", timeout=HINT_TIMEOUT)
            state = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def body(self, request: LLMRequest) -> dict[str, Any]:
        """The chat completion request body."""
        body: dict[str, Any] = {"model": self.model, "messages": request.messages, "stream": True,
                                "stream_options": {"include_usage": True}, "max_tokens": request.max_tokens,
                                "temperature": self.temperature}
        if request.force is not None and self.is_vllm:
            body["structured_outputs"] = {"regex": literal_regex(request.force)}
            body["temperature"] = 0.0  # the same text then always takes the same tokens
        elif request.tools and (self.native_tools or self.gateway):  # a gateway's engine holds calls to the protocol
            body["tools"] = request.tools
        elif request.tools and self.constrained and self.is_vllm:
            body["structured_outputs"] = {"structural_tag": structural_tag_json(request.tools, self.reasoning_tokens)}
            body["stop"] = STOP
            body["include_stop_str_in_output"] = True
        if self.is_vllm:
            body["request_id"] = request.request_id
            if request.priority and self._send_priority:
                body["priority"] = request.priority
        elif self.gateway and request.priority >= WARM_PRIORITY:  # a warm prefill: its co-scheduler lets it wait
            body["priority"] = request.priority
        if self.gateway and request.prompt_limit is not None:
            body["tao_prompt_limit"] = request.prompt_limit
        return body

    async def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        """Stream one answer; the last chunk carries usage, native calls and the finish reason."""
        rid = request.request_id
        if self._aborted.pop(rid, False) is None:  # aborted before it was sent
            yield Chunk(finish_reason="abort", usage=Usage())
            return
        submitted = time.monotonic()
        first = last = None
        finish: str | None = None
        usage: dict[str, Any] = {}
        calls: dict[int, dict[str, Any]] = {}
        try:
            url = f"{self.base_url}/chat/completions"
            async with self._client.stream("POST", url, json=self.body(request), headers=self.headers()) as resp:
                self._responses[rid] = resp
                if resp.headers.get(GATEWAY_HEADER) == GATEWAY_MARK and not self.gateway:
                    self.gateway = True  # a gateway that said so only now: the next requests say whose they are
                if resp.status_code != 200:
                    await self._raise_for_status(resp, request)
                async for line in resp.aiter_lines():
                    if rid in self._aborted:  # closing the response does not always stop lines already on their way
                        break
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    event = _stream_event(data)
                    if isinstance(event.get("usage"), dict):
                        usage = event["usage"]
                    for content, tool_calls, reason in _choices(event):
                        finish = reason or finish
                        _merge_calls(calls, tool_calls)
                        if content or tool_calls:
                            last = time.monotonic()
                            first = first or last
                        if content:
                            yield Chunk(text=content)
        except _RetryWithoutPriority:
            async for chunk in self.stream(request):
                yield chunk
            return
        except (httpx.TransportError, httpx.StreamError) as exc:
            if rid not in self._aborted:
                raise EngineDied(f"the server at {self.base_url} stopped answering during request {rid} "
                                 f"({type(exc).__name__}: {exc}); the trajectory so far is saved; restart the "
                                 "server (tao serve) and run again") from None
            finish = "abort"
        except _Malformed as exc:
            raise EngineError(f"the server at {self.base_url} sent a malformed stream event ({exc}) "
                              f"during request {rid}") from None
        finally:
            self._responses.pop(rid, None)
        if self._aborted.pop(rid, False) is None:
            finish = "abort"
        details = usage.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        yield Chunk(tool_calls=[calls[i] for i in sorted(calls)] or None, finish_reason=finish or "stop",
                    usage=Usage(prompt_tokens=_count(usage.get("prompt_tokens")),
                                cached_tokens=_count(details.get("cached_tokens")),
                                output_tokens=_count(usage.get("completion_tokens")),
                                ttft=(first - submitted) if first else None,
                                decode_seconds=(last - first) if first and last else None))

    async def _raise_for_status(self, resp: httpx.Response, request: LLMRequest) -> None:
        """Turn an error response into Tao's error (or a retry without priority)."""
        text = (await resp.aread()).decode("utf-8", "replace")
        try:
            message = json.loads(text).get("error", {}).get("message") or text
        except (json.JSONDecodeError, AttributeError):
            message = text
        if resp.status_code == 400 and "priority" in message.lower() and self._send_priority:
            self._send_priority = False  # the server does not schedule by priority; send none from now on
            raise _RetryWithoutPriority
        if "context length" in message or "maximum context" in message:
            raise ContextTooLong(f"the server refused request {request.request_id}: {message}")
        raise EngineError(f"the server at {self.base_url} answered {resp.status_code} to request "
                          f"{request.request_id}: {message[:500]}")

    async def abort(self, request_id: str) -> None:
        """Close the request's stream; vLLM aborts a request whose client went away."""
        self._aborted[request_id] = None
        while len(self._aborted) > ABORTED_KEPT:  # ids of requests that had already finished
            del self._aborted[next(iter(self._aborted))]
        resp = self._responses.get(request_id)
        if resp is not None:
            await resp.aclose()

    async def close(self) -> None:
        """Close the HTTP client (the server keeps running); a session's view leaves it to the engine's owner."""
        if not self._shared:
            await self._client.aclose()


class _RetryWithoutPriority(Exception):
    """The server rejected `priority`; send the request again without it."""


async def _list_models(client: httpx.AsyncClient, base: str) -> tuple[list[dict[str, Any]], bool]:
    """The served models, and whether the server is a tao gateway."""
    try:
        resp = await client.get(f"{base}/models", timeout=CONNECT_TIMEOUT * 2)
    except httpx.TransportError as exc:
        raise EngineUnavailable(f"no OpenAI-compatible server answers at {base} ({type(exc).__name__}); start "
                                "one with `tao serve` or `vllm serve MODEL`, or check --base-url") from None
    if resp.status_code != 200:
        raise EngineUnavailable(f"GET {base}/models answered {resp.status_code}: {resp.text[:200]}")
    return list(resp.json().get("data") or []), resp.headers.get(GATEWAY_HEADER) == GATEWAY_MARK


async def _native_tools(client: httpx.AsyncClient, base: str, model: str, served: dict[str, Any],
                        is_vllm: bool) -> bool:
    """Whether the server returns tool calls itself: a tao gateway says so of its engine (`tao.native_tools` in
    its model list), a vLLM server is asked, any other server is taken to (hosted APIs do)."""
    said = served.get("tao")
    if isinstance(said, dict) and isinstance(said.get("native_tools"), bool):
        return said["native_tools"]
    return await _offers_native_tools(client, base, model) if is_vllm else True


async def _offers_native_tools(client: httpx.AsyncClient, base: str, model: str) -> bool:
    """Ask a vLLM server with a one-token request whether it parses tool calls itself."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "tools": [_PROBE_TOOL], "tool_choice": "auto"}
    try:
        resp = await client.post(f"{base}/chat/completions", json=body)
    except httpx.TransportError as exc:
        raise EngineUnavailable(f"the server at {base} did not answer a probe request: {exc}") from None
    return resp.status_code == 200


class _Malformed(ValueError):
    """A stream event that is not what the OpenAI protocol says; the message says what was wrong."""


def _stream_event(data: str) -> dict[str, Any]:
    """One `data:` line as a JSON object."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError as exc:
        raise _Malformed(exc.msg) from None
    except (ValueError, RecursionError) as exc:  # a number too long to convert, nesting too deep
        raise _Malformed(f"{type(exc).__name__}: {str(exc)[:100]}") from None
    if not isinstance(event, dict):
        raise _Malformed(f"a JSON {type(event).__name__} where an object belongs")
    return event


def _choices(event: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], str | None]]:
    """Each choice's text, tool-call fragments and finish reason, checked to be of the types they must have."""
    choices = event.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(choice, dict) for choice in choices):
        raise _Malformed('"choices" is not a list of objects')
    found = []
    for choice in choices:
        delta = choice.get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        if not isinstance(delta, dict) or not isinstance(content, (str, type(None))):
            raise _Malformed('a choice\'s "delta" is not an object with "content" text')
        tool_calls = delta.get("tool_calls") or []
        if not isinstance(tool_calls, list) or not all(_fragment(item) for item in tool_calls):
            raise _Malformed('"tool_calls" is not a list of call fragments')
        reason = choice.get("finish_reason")
        found.append((content or "", tool_calls, reason if isinstance(reason, str) else None))
    return found


def _fragment(item: Any) -> bool:
    """Whether a streamed tool-call fragment has the shape `_merge_calls` reads."""
    if not isinstance(item, dict) or not isinstance(item.get("index", 0), int) or isinstance(item.get("index"), bool):
        return False
    function = item.get("function") or {}
    return (isinstance(item.get("id") or "", str) and isinstance(function, dict)
            and all(isinstance(function.get(key) or "", str) for key in ("name", "arguments")))


def _count(value: Any) -> int:
    """A token count as the server reported it; 0 when it reported none, or something that is no count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _merge_calls(calls: dict[int, dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    """Accumulate streamed native tool-call fragments (checked by `_fragment`) into complete OpenAI-shaped calls."""
    for delta in deltas:
        call = calls.setdefault(delta.get("index", len(calls)),
                                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        call["id"] = delta.get("id") or call["id"]
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""
