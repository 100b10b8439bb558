"""What the gateway (harness.gateway) reads: OpenAI chat completion and Tao hint bodies with their Tao headers,
checked field by field, and the OpenAI error bodies it answers a bad request or a failed engine with.

    completion = parse_completion(body, headers, "model-id")    # BadRequest says what is wrong and where

A request's session is its `X-Session-Id` header, else its body's `user`, else a fresh id (`session_of`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.coscheduler import INTERACTIVE_PRIORITY
from harness.engine.api import WARM_PRIORITY, LLMRequest
from harness.errors import ContextTooLong
from harness.vocabulary import Traffic

if TYPE_CHECKING:
    from starlette.requests import Request

CLASSES: dict[str, int] = {Traffic.INTERACTIVE: INTERACTIVE_PRIORITY, Traffic.BATCH: 0}  # class -> priority
DEFAULT_MAX_TOKENS = LLMRequest("", []).max_tokens
TEXT_PROTOCOL = "text"  # the X-Tao-Protocol header of a client that parses Tao's text protocol itself


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


async def json_body(request: Request) -> object:
    """The request body as JSON; BadRequest when it is none."""
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({exc}); send a JSON object") from None


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
    session_id = session_of(headers, body)
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


def session_of(headers: MutableMapping[str, str] | Any, body: dict[str, Any]) -> str:
    """The request's session: the X-Session-Id header, else the body's `user`, else a fresh id (an anonymous
    client's requests are each a session of their own); BadRequest when `user` is not a string."""
    session_id = headers.get("x-session-id") or body.get("user") or f"anon-{uuid.uuid4().hex[:12]}"
    if not isinstance(session_id, str):
        raise BadRequest("`user` must be a string (the session id, unless the X-Session-Id header gives one)", "user")
    return session_id


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


# -- error bodies ------------------------------------------------------------------------------------


def error_json(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: int = 400) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def bad_request_json(exc: BadRequest) -> dict[str, Any]:
    """A BadRequest as the error body answered with its status."""
    return error_json(str(exc), exc.kind, exc.param, exc.status)


def engine_error(exc: Exception) -> tuple[int, dict[str, Any]]:
    """An engine's error as an HTTP status and error body."""
    if isinstance(exc, ContextTooLong):
        return 400, error_json(str(exc), "invalid_request_error", "messages", 400)
    return 503, error_json(f"the engine failed: {exc}", "engine_error", None, 503)
