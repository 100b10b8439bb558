"""Several engine endpoints as one Engine: each session sticks to one replica, chosen when it starts.

    engine = await ReplicaSet.connect(["http://a:8101/v1", "http://b:8102/v1"], model=None, ...)
    view = engine.for_session(session_id, "batch")   # pinned: every request of the session goes to one replica

Session affinity keeps a session's growing prompt in one replica's prefix cache; spreading its requests would
make every replica prefill it again. The rule for a new session (`choose`), from the loads last read:

1. Every replica that answers `GET /v1/tao/load` (a `tao serve` gateway: requests running and waiting in its
   co-scheduler, the share of its engine's KV cache in use) is read every POLL_SECONDS. A gateway that stopped
   answering gets no new session while another replica is up (no failover: its running sessions fail).
2. When every replica reports its load, the session goes to the one with the most room: fewest requests
   waiting, then the lowest KV cache use in tenths (a replica a few blocks fuller counts as equal), then fewest
   sessions sent there by us, then fewest requests running, then round robin.
3. When any replica reports nothing (a plain OpenAI-compatible server), loads cannot be compared: fewest
   sessions sent there by us, then round robin.

Each replica's co-scheduler (its `tao serve`) paces the sessions it holds. A replica that dies mid-run fails its
sessions with an error that names its URL (harness.engine.openai_http); the other replicas go on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import httpx

from harness.engine.api import Chunk, EngineLoad, LLMRequest
from harness.engine.openai_http import HINT_TIMEOUT, OpenAIEngine
from harness.errors import EngineUnavailable, UsageError

POLL_SECONDS = 1.0  # how often the replicas' loads are read
KV_BANDS = 10  # KV cache use is compared in tenths
UNNAMED = "(no session)"  # the session of requests sent to the set itself, not through a session's view


def read_urls(values: Sequence[str]) -> list[str]:
    """The engine URLs of repeated `--engine-url` flags, each a URL or @FILE (one URL a line, `#` comments)."""
    urls: list[str] = []
    for value in values:
        if not value.startswith("@"):
            urls.append(value.strip())
            continue
        path = Path(value[1:]).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise UsageError(f"--engine-url {value}: cannot read {path} ({exc.strerror}); give a file with one "
                             "engine URL a line") from None
        found = [line.split("#", 1)[0].strip() for line in lines]
        if not any(found):
            raise UsageError(f"--engine-url {value}: {path} lists no URL; write one engine URL a line "
                             "(e.g. http://10.0.0.2:8000/v1), # starts a comment")
        urls.extend(url for url in found if url)
    if any(not url for url in urls):
        raise UsageError("--engine-url needs a URL, e.g. --engine-url http://10.0.0.2:8000/v1")
    if len(set(urls)) < len(urls):
        twice = next(url for url in urls if urls.count(url) > 1)
        raise UsageError(f"--engine-url {twice} is given twice; list each replica once")
    return urls


def choose(loads: Sequence[EngineLoad | None], sent: Sequence[int], up: Sequence[bool], turn: int) -> int:
    """The replica a new session goes to (the module docstring's rule): `loads` as last read (None: the replica
    reports none), `sent` sessions we sent each, `up` whether each answered its last reading, `turn` the round
    robin's next place."""
    count = len(sent)
    candidates = [i for i in range(count) if up[i]] or list(range(count))

    def rotated(i: int) -> int:
        return (i - turn) % count

    if all(loads[i] is not None for i in candidates):
        def room(i: int) -> tuple[int, int, int, int, int]:
            load = loads[i]
            assert load is not None
            band = min(KV_BANDS, int(load.kv_usage * KV_BANDS))
            return load.waiting, band, sent[i], load.running, rotated(i)
        return min(candidates, key=room)
    return min(candidates, key=lambda i: (sent[i], rotated(i)))


class ReplicaSet:
    """Engines at several endpoints serving one model; a session's view (`for_session`) is pinned to one of them."""

    prefix_cache: bool
    native_tools: bool

    def __init__(self, replicas: list[OpenAIEngine], urls: list[str]) -> None:
        self.replicas, self.urls = replicas, urls
        first = replicas[0]
        self.model, self.native_tools, self.prefix_cache = first.model, first.native_tools, first.prefix_cache
        self.max_model_len = min((r.max_model_len for r in replicas if r.max_model_len), default=None)
        self.gateway = all(r.gateway for r in replicas)  # every replica paces its sessions itself
        self.name = f"{first.name} x {len(replicas)} replicas"
        self.loads: list[EngineLoad | None] = [None] * len(replicas)
        self.up = [True] * len(replicas)
        self.sent = [0] * len(replicas)
        self.pinned: dict[str, int] = {}  # session id -> its replica
        self._turn = 0
        self._poller: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, urls: list[str], *, model: str | None, constrained: bool, temperature: float,
                      api_key: str | None) -> ReplicaSet:
        """Connect to every replica at once; EngineUnavailable names an unreachable one and what to do."""
        async def one(index: int, url: str) -> OpenAIEngine:
            try:
                return await OpenAIEngine.connect(url, model=model, constrained=constrained,
                                                  temperature=temperature, api_key=api_key)
            except EngineUnavailable as exc:
                said = str(exc).replace("check --base-url", "check the URL")
                raise EngineUnavailable(f"replica {index + 1} of {len(urls)} ({url}): {said}; or leave it out of "
                                        "--engine-url (or its file)") from None

        tasks = [asyncio.create_task(one(i, url)) for i, url in enumerate(urls)]
        done = await asyncio.gather(*tasks, return_exceptions=True)
        engines = [e for e in done if isinstance(e, OpenAIEngine)]
        failure = next((e for e in done if isinstance(e, BaseException)), None)
        models = {e.model for e in engines}
        if failure is None and len(models) > 1:
            failure = UsageError("the replicas serve different models (" + ", ".join(
                f"{url}: {e.model}" for url, e in zip(urls, engines)) + "); pass --model NAME, or list only "
                "replicas of one model")
        if failure is not None:
            for engine in engines:
                await engine.close()
            raise failure
        replicas = cls(engines, urls)
        await replicas.refresh()
        replicas._poller = asyncio.create_task(replicas._poll())
        return replicas

    async def refresh(self) -> None:
        """Read every replica's load now (a gateway's `GET /v1/tao/load`; None for a server that has none)."""
        readings = await asyncio.gather(*(read_load(r) for r in self.replicas))
        for i, (load, up) in enumerate(readings):
            self.loads[i], self.up[i] = load, up

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            with contextlib.suppress(Exception):
                await self.refresh()

    def pin(self, session_id: str) -> OpenAIEngine:
        """The replica of `session_id`: chosen by `choose` on its first call, the same one from then on."""
        index = self.pinned.get(session_id)
        if index is None:
            index = choose(self.loads, self.sent, self.up, self._turn)
            self.pinned[session_id] = index
            self.sent[index] += 1
            self._turn = (index + 1) % len(self.replicas)
        return self.replicas[index]

    def for_session(self, session_id: str, traffic: str) -> OpenAIEngine:
        """The session's view of its replica (its id and class on every request, as on one gateway), named with
        the replica's URL (the session's trajectory records where it ran)."""
        view = self.pin(session_id).for_session(session_id, traffic)
        view.name = f"{view.name} at {view.base_url}"
        return view

    def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        """A request sent to the set itself, not through a session's view: all such requests are one session."""
        return self.pin(UNNAMED).stream(request)

    async def abort(self, request_id: str) -> None:
        """Abort the request wherever it runs (aborting an unknown id is a no-op on every replica)."""
        await asyncio.gather(*(r.abort(request_id) for r in self.replicas))

    async def close(self) -> None:
        """Stop reading loads and close every replica's connection (the servers keep running)."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for replica in self.replicas:
            await replica.close()


async def read_load(engine: OpenAIEngine) -> tuple[EngineLoad | None, bool]:
    """A replica's load and whether it answered: a gateway's `GET /v1/tao/load`; (None, True) for a server that
    has no such route (it reports nothing), (None, False) for one that did not answer."""
    try:
        resp = await engine.client.get(f"{engine.base_url}/tao/load", timeout=HINT_TIMEOUT)
    except httpx.HTTPError:
        return None, not engine.gateway
    if resp.status_code != 200:
        return None, True
    try:
        data = resp.json()
        kv = data.get("kv_usage")
        return EngineLoad(running=int(data["running"]), waiting=int(data["waiting"]),
                          kv_usage=float(kv) if isinstance(kv, (int, float)) else 0.0), True
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, True
