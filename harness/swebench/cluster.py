"""`tao swebench --ray`: the batch's instances run on a Ray cluster, the driver keeps the outputs.

Each of `workers` Ray actors takes one instance at a time and runs it as a one-instance `Batch` in a
folder of its own node: the worktree is made there from the node's clone (the same --repos path on every
node), the session's tools run there, and its engine is reached over HTTP (--engine openai, a `tao serve`)
or is the scripted replay. With several engine endpoints (--engine-url), the driver chooses each instance's
replica (by the replicas' loads and the sessions it sent to each, harness.engine.replicas) and the actor's
session talks to that one only, so sessions spread over the replicas as in one process and each sticks to its
replica's prefix cache. The actor sends back the instance's files (result, trajectory, report, test
log); the driver writes them into the usual output folder as each instance finishes, so resume, --redo,
preds.jsonl and summary.json work as without Ray. An actor that dies (its process or its node) loses only
the instance it was running: that instance is marked and retried once on a fresh actor, then reported
as an error of stage "cluster".

Ray is the optional extra `ray`, imported only here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
from argparse import Namespace
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.coscheduler import Policy
from harness.engine.api import Engine
from harness.engine.replicas import ReplicaSet
from harness.errors import UsageError
from harness.swebench.batch import Batch, BatchConfig, Layout, read_json, write_atomic, write_json
from harness.swebench.instances import Instance

LOCAL = "local"  # --ray without an address: start a private local cluster for this run
OBJECT_STORE_BYTES = 200 * 1024**2  # a local cluster's object store: results are a few files of text
SHIPPED = ("trajectory.jsonl", "eval.log", "report.json", "result.json")  # an instance's files, result last
RETRIES = 1  # runs again of an instance whose actor died under it

EngineOpener = Callable[[Namespace, list[Instance]], Awaitable[Engine]]


def import_ray() -> ModuleType:
    """The ray module, or a UsageError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError("--ray needs Ray, which is not installed: pip install 'tao-agent[ray]' "
                         "(or pip install 'ray>=2.40')") from exc
    return ray


def start(address: str, workers: int) -> ModuleType:
    """Connect to the cluster at `address` ('auto': the one running on this machine), or start a small local one."""
    ray = import_ray()
    if address == LOCAL:
        ray.init(num_cpus=workers, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
                 log_to_driver=False, logging_level="WARNING", configure_logging=True)
    else:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    return ray


def check_engine(args: Namespace) -> None:
    """Refuse engines each Ray worker would have to start for itself (an in-process vLLM per worker)."""
    if args.engine == "vllm" and not args.sim and not getattr(args, "engine_url", None):
        raise UsageError("--ray runs sessions on other processes and nodes, each reaching the engine over HTTP: "
                         "give --engine openai --base-url URL or --engine-url URL (a `tao serve` or any "
                         "OpenAI-compatible server, once per replica), or --engine replay --replay DIR")


@dataclass(frozen=True)
class Placement:
    """Where an actor runs: its node and process."""

    node: str
    pid: int

    def __str__(self) -> str:
        return f"{self.node} pid {self.pid}"


class InstanceRunner:
    """A Ray actor's state: runs one instance at a time in a folder on its own node (an async actor: Ray runs
    its methods on the actor's event loop)."""

    def __init__(self, opener: EngineOpener, args: Namespace, config: BatchConfig, policy: Policy) -> None:
        self.opener, self.args, self.config, self.policy = opener, args, config, policy

    def where(self) -> Placement:
        """This actor's node (host name and the start of Ray's node id) and process id."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        return Placement(f"{socket.gethostname()}/{node_id[:8]}", os.getpid())

    async def run(self, instance: Instance, previous: dict[str, Any] | None, replica: str | None = None
                  ) -> dict[str, str]:
        """Run (or, with `previous`, only grade) the instance, its session on the engine at URL `replica` when
        the driver chose one of several; its files by name, as text."""
        root = Path(tempfile.mkdtemp(prefix=f"tao-ray-{instance.instance_id}-"))
        layout = Layout(root)
        try:
            if previous is not None:
                write_json(layout.result(instance.instance_id), previous)
            config = replace(self.config, output=root, workers=1, redo=False)
            await self.batch(instance, config, replica)
            folder = layout.instance(instance.instance_id)
            return {name: (folder / name).read_text(encoding="utf-8") for name in SHIPPED
                    if (folder / name).is_file()}
        finally:
            if self.config.keep_worktrees:
                shutil.rmtree(root / "instances", ignore_errors=True)  # the worktree stays on this node
            else:
                shutil.rmtree(root, ignore_errors=True)

    async def batch(self, instance: Instance, config: BatchConfig, replica: str | None) -> None:
        """The instance as a batch of one, on its own engine client (of the replica at URL `replica`, if given)."""
        args = self.args if replica is None else Namespace(**{**vars(self.args), "engine_url": [replica]})
        engine = await self.opener(args, [instance])
        if replica is not None:
            engine.name = f"{engine.name} at {replica}"  # the trajectory records the replica, as in one process
        try:
            await Batch([instance], engine, config, self.policy).run()
        finally:
            await engine.close()


@dataclass
class ClusterBatch(Batch):
    """A Batch whose instances run on Ray actors; the driver writes every output."""

    opener: EngineOpener | None = None
    """Opens an instance's engine on its actor (module-level, so Ray sends it by name)."""
    args: Namespace | None = None
    """The command's arguments, for `opener`."""
    address: str = LOCAL
    """The cluster's address (see `start`)."""

    async def run(self) -> dict[str, Any]:
        """Work through every instance on `workers` actors of the cluster (joined or started only when there is
        work, and left when done); returns the run summary."""
        self.config.output.mkdir(parents=True, exist_ok=True)
        self.load_done()
        todo = deque(self.todo())
        if self.progress is not None:
            self.progress.done = len(self.results) - sum(1 for _, agent in todo if not agent)
        if not todo:
            return await self.write_outputs()
        ray = start(self.address, self.config.workers)
        try:
            return await self.dispatch(ray, todo)
        finally:
            ray.shutdown()

    async def dispatch(self, ray: ModuleType, todo: deque[tuple[Instance, bool]]) -> dict[str, Any]:
        """Each of `workers` slots keeps an actor busy with the next instance; a dead actor is replaced."""
        actor_class = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(InstanceRunner)
        lost: dict[str, list[str]] = {}
        actors: list[Any] = []

        async def slot() -> None:
            actor = actor_class.remote(self.opener, self.args, self.config, self.policy)
            actors.append(actor)
            while todo:
                instance, agent = todo.popleft()
                try:
                    placement: Placement = await actor.where.remote()
                    if self.progress is not None:
                        self.progress.started(instance.instance_id, str(placement))
                    previous = None if agent else self.results[instance.instance_id]
                    files = await actor.run.remote(instance, previous, replica_url(self.engine, instance.instance_id))
                except ray.exceptions.RayTaskError as exc:  # a bug in the actor's code: this instance only
                    cause = getattr(exc, "cause", None) or exc
                    await self.receive(instance, {}, lost.get(instance.instance_id, []),
                                       ("harness", f"the harness failed on its Ray worker: {cause!r}"))
                    continue
                except ray.exceptions.RayError as exc:  # the actor's process or node died
                    reason = f"its Ray worker died: {type(exc).__name__}"
                    marks = lost.setdefault(instance.instance_id, [])
                    marks.append(reason)
                    if len(marks) <= RETRIES:
                        todo.appendleft((instance, agent))
                        if self.progress is not None:
                            self.progress.console.print(f"tao swebench: {instance.instance_id} lost ({reason}); "
                                                        "running it again", highlight=False, soft_wrap=True)
                    else:
                        await self.receive(instance, {}, marks, ("cluster", f"{reason}, twice"))
                    ray.kill(actor)
                    actor = actor_class.remote(self.opener, self.args, self.config, self.policy)
                    actors.append(actor)
                    continue
                await self.receive(instance, files, lost.get(instance.instance_id, []))

        slots = [asyncio.create_task(slot()) for _ in range(max(1, self.config.workers))]
        try:
            await asyncio.gather(*slots)
        finally:
            for task in slots:
                task.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            for actor in actors:
                ray.kill(actor)
            summary = await self.write_outputs()
        return summary

    async def receive(self, instance: Instance, files: dict[str, str], lost: list[str],
                      failure: tuple[str, str] | None = None) -> None:
        """Write what an actor sent back for the instance (or its failure), then record it as done."""
        iid = instance.instance_id
        for name in SHIPPED[:-1]:
            if name in files:
                write_atomic(self.layout.instance(iid) / name, files[name])
        result: Any = read_json_text(files.get("result.json"))
        if failure is not None or not isinstance(result, dict):
            stage, reason = failure or ("harness", "its Ray worker sent back no result")
            result = self.results.get(iid) or self.failed(instance, stage, reason)
        if lost:
            result["lost"] = lost
        report = read_json(self.layout.report(iid)) if "report.json" in files else None
        if isinstance(report, dict) and iid in report:
            self.graded(iid, report[iid])
        if self.progress is not None:
            self.progress.stepped(iid, int(result.get("steps", 0)),
                                  int(result.get("speculation", {}).get("promoted", 0)))
        await self.finish(instance, result)


def replica_url(engine: Engine, instance_id: str) -> str | None:
    """The URL of the replica the instance's session goes to, of several engine endpoints: chosen here on the driver,
    which sees every session sent (an actor's own set would see only its one); the same one on a retry. None for
    one endpoint."""
    if not isinstance(engine, ReplicaSet):
        return None
    return engine.pin(instance_id).base_url


def read_json_text(text: str | None) -> Any:
    """Parsed JSON text, or None when there is none or it is damaged."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
